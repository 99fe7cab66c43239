//! A vector of at most `N` small `Copy` items stored inline, for the
//! compact model state: cloning a state is one copy of plain bytes, no
//! allocation. Equality, order and hashing look only at the items in use,
//! so two values with the same items are equal whatever the unused slots
//! hold.

use std::cmp::Ordering;
use std::hash::{Hash, Hasher};
use std::ops::{Deref, DerefMut};

#[derive(Clone, Copy)]
pub struct Inline<T: Copy + Default, const N: usize> {
    len: u8,
    items: [T; N],
}

impl<T: Copy + Default, const N: usize> Inline<T, N> {
    pub const CAPACITY: usize = N;

    /// Appends an item. The model's configuration bounds (see
    /// `Config::validate`) keep every vector within its capacity; going
    /// beyond it is a bug in the model, not an input error.
    pub fn push(&mut self, item: T) {
        let i = self.len as usize;
        assert!(i < N, "model state capacity {N} exceeded");
        self.items[i] = item;
        self.len += 1;
    }

    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Keeps the items for which `keep` holds, in order.
    pub fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) {
        let mut kept = 0;
        for i in 0..self.len as usize {
            if keep(&self.items[i]) {
                self.items[kept] = self.items[i];
                kept += 1;
            }
        }
        self.len = kept as u8;
    }
}

impl<T: Copy + Default, const N: usize> Default for Inline<T, N> {
    fn default() -> Self {
        Inline {
            len: 0,
            items: [T::default(); N],
        }
    }
}

impl<T: Copy + Default, const N: usize> FromIterator<T> for Inline<T, N> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        let mut v = Inline::default();
        for item in iter {
            v.push(item);
        }
        v
    }
}

impl<T: Copy + Default, const N: usize> Deref for Inline<T, N> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.items[..self.len as usize]
    }
}

impl<T: Copy + Default, const N: usize> DerefMut for Inline<T, N> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.items[..self.len as usize]
    }
}

impl<T: Copy + Default + PartialEq, const N: usize> PartialEq for Inline<T, N> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}
impl<T: Copy + Default + Eq, const N: usize> Eq for Inline<T, N> {}

impl<T: Copy + Default + Hash, const N: usize> Hash for Inline<T, N> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (**self).hash(state);
    }
}

impl<T: Copy + Default + PartialOrd, const N: usize> PartialOrd for Inline<T, N> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        (**self).partial_cmp(&**other)
    }
}
impl<T: Copy + Default + Ord, const N: usize> Ord for Inline<T, N> {
    fn cmp(&self, other: &Self) -> Ordering {
        (**self).cmp(&**other)
    }
}

impl<T: Copy + Default + std::fmt::Debug, const N: usize> std::fmt::Debug for Inline<T, N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::hash_map::DefaultHasher;

    fn hash<T: Hash>(v: &T) -> u64 {
        let mut h = DefaultHasher::new();
        v.hash(&mut h);
        h.finish()
    }

    #[test]
    fn unused_slots_do_not_count() {
        let mut a: Inline<u8, 4> = [1, 2, 3].into_iter().collect();
        a.retain(|&x| x != 3);
        let b: Inline<u8, 4> = [1, 2].into_iter().collect();
        assert_eq!(a, b);
        assert_eq!(hash(&a), hash(&b));
        assert_eq!(&*a, &[1, 2]);
        a.clear();
        assert!(a.is_empty());
        assert!(a < b);
    }

    #[test]
    #[should_panic(expected = "capacity")]
    fn overflow_is_a_bug_not_a_silent_drop() {
        let mut a: Inline<u8, 1> = Inline::default();
        a.push(1);
        a.push(2);
    }
}
