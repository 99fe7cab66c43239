//! Where the reference idempotency middleware keeps its keys: a small
//! trait with a memory backend (this file) and a Redis backend
//! (`redis_storage.rs`).
//!
//! The one operation that must be atomic is [`IdemStorage::try_lock`]:
//! "take the key if nobody holds it, else tell me what holds it". Every
//! double execution a middleware author ships comes from splitting it in
//! two ([`IdemStorage::peek`] then [`IdemStorage::put_lock`], which only
//! the `check-then-set` broken variant calls).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// The most keys the memory backend holds; past it, expired ones are swept
/// and, if still full, a new key is refused (503), never silently dropped.
pub const MEMORY_MAX_KEYS: usize = 100_000;

/// An answer kept for replay: what the handler answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredAnswer {
    pub status: u16,
    /// The headers that matter (lower-case names): the content type and
    /// the handler's own (`x-reqkey-order`).
    pub headers: Vec<(String, String)>,
    pub body: String,
}

/// What holds a key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "lowercase")]
pub enum Slot {
    /// A request with the key is being handled: its payload, the caller it
    /// will answer, and its lock's own token (so that only it renews or
    /// frees the lock, and its waiters find its answer once freed).
    InFlight {
        fingerprint: String,
        #[serde(default)]
        caller: String,
        #[serde(default)]
        token: String,
    },
    /// A request with the key completed; its answer is kept.
    Done {
        fingerprint: String,
        #[serde(default)]
        caller: String,
        answer: StoredAnswer,
    },
    /// Only answered to a waiter: the run it waited for answered an error
    /// that freed the key (`errors: released` under `concurrent: wait`);
    /// the waiter arrived before, so it gets that answer replayed.
    Released { answer: StoredAnswer },
}

/// The key of the answer a freed lock leaves for the requests that waited
/// on it.
pub fn waiters_key(key: &str, token: &str) -> String {
    format!("waiters:{key}:{token}")
}

/// A backend that did not answer. The middleware answers 503.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("idempotency storage: {0}")]
pub struct StorageError(pub String);

#[async_trait]
pub trait IdemStorage: Send + Sync + 'static {
    /// `memory` or `redis`, for `/.reqkey/health`.
    fn name(&self) -> &'static str;
    /// Whether a completed key survives a restart of the app.
    fn durable(&self) -> bool;
    /// Atomically: when the lock `waiting_on` (a token) was freed leaving an
    /// answer for its waiters, answers [`Slot::Released`]; else when nothing
    /// (unexpired) holds `key`, puts `ours` (an in-flight slot) for
    /// `lock_ms` (`None`: until released or completed) and answers `None`;
    /// otherwise answers what holds it.
    async fn try_lock(
        &self,
        key: &str,
        ours: &Slot,
        lock_ms: Option<u64>,
        waiting_on: Option<&str>,
    ) -> Result<Option<Slot>, StorageError>;
    /// What holds `key` now (not atomic with anything).
    async fn peek(&self, key: &str) -> Result<Option<Slot>, StorageError>;
    /// Puts `ours` whatever holds `key` (not atomic with anything).
    async fn put_lock(
        &self,
        key: &str,
        ours: &Slot,
        lock_ms: Option<u64>,
    ) -> Result<(), StorageError>;
    /// Extends the lock `ours` by `lock_ms` from now, if `key` still holds it.
    async fn renew(&self, key: &str, ours: &Slot, lock_ms: u64) -> Result<(), StorageError>;
    /// Frees `key`, leaving `answer` for `keep_ms` to the requests that
    /// waited on the lock `token`.
    async fn release_to_waiters(
        &self,
        key: &str,
        token: &str,
        answer: &StoredAnswer,
        keep_ms: u64,
    ) -> Result<(), StorageError>;
    /// Keeps `answer` for `key`, for `expiry_ms` (`None`: forever).
    async fn complete(
        &self,
        key: &str,
        fingerprint: &str,
        caller: &str,
        answer: &StoredAnswer,
        expiry_ms: Option<u64>,
    ) -> Result<(), StorageError>;
    /// Frees `key` (after an error answer under `errors: released`).
    async fn release(&self, key: &str) -> Result<(), StorageError>;
}

/// The memory backend: one mutex over a map; each entry's deadline is its
/// lock's or its record's expiry.
#[derive(Debug, Default)]
pub struct MemoryStorage {
    slots: Mutex<HashMap<String, (Slot, Option<Instant>)>>,
}

impl MemoryStorage {
    pub fn new() -> Self {
        Self::default()
    }

    fn deadline(ms: Option<u64>) -> Option<Instant> {
        ms.map(|ms| Instant::now() + Duration::from_millis(ms))
    }

    fn with<T>(
        &self,
        f: impl FnOnce(&mut HashMap<String, (Slot, Option<Instant>)>) -> Result<T, StorageError>,
    ) -> Result<T, StorageError> {
        let mut map = self
            .slots
            .lock()
            .map_err(|_| StorageError("memory storage lock poisoned".into()))?;
        f(&mut map)
    }

    fn live(map: &HashMap<String, (Slot, Option<Instant>)>, key: &str) -> Option<Slot> {
        let now = Instant::now();
        map.get(key)
            .filter(|(_, until)| until.is_none_or(|t| t > now))
            .map(|(slot, _)| slot.clone())
    }

    fn insert(
        map: &mut HashMap<String, (Slot, Option<Instant>)>,
        key: &str,
        entry: (Slot, Option<Instant>),
    ) -> Result<(), StorageError> {
        if map.len() >= MEMORY_MAX_KEYS && !map.contains_key(key) {
            let now = Instant::now();
            map.retain(|_, (_, until)| until.is_none_or(|t| t > now));
            if map.len() >= MEMORY_MAX_KEYS {
                return Err(StorageError(format!(
                    "memory storage full ({MEMORY_MAX_KEYS} keys)"
                )));
            }
        }
        map.insert(key.to_owned(), entry);
        Ok(())
    }
}

#[async_trait]
impl IdemStorage for MemoryStorage {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn durable(&self) -> bool {
        false
    }

    async fn try_lock(
        &self,
        key: &str,
        ours: &Slot,
        lock_ms: Option<u64>,
        waiting_on: Option<&str>,
    ) -> Result<Option<Slot>, StorageError> {
        self.with(|map| {
            if let Some(token) = waiting_on {
                if let Some(left) = Self::live(map, &waiters_key(key, token)) {
                    return Ok(Some(left));
                }
            }
            if let Some(held) = Self::live(map, key) {
                return Ok(Some(held));
            }
            Self::insert(map, key, (ours.clone(), Self::deadline(lock_ms)))?;
            Ok(None)
        })
    }

    async fn renew(&self, key: &str, ours: &Slot, lock_ms: u64) -> Result<(), StorageError> {
        self.with(|map| {
            if let Some((slot, until)) = map.get_mut(key) {
                if slot == ours {
                    *until = Self::deadline(Some(lock_ms));
                }
            }
            Ok(())
        })
    }

    async fn release_to_waiters(
        &self,
        key: &str,
        token: &str,
        answer: &StoredAnswer,
        keep_ms: u64,
    ) -> Result<(), StorageError> {
        self.with(|map| {
            let left = Slot::Released {
                answer: answer.clone(),
            };
            Self::insert(
                map,
                &waiters_key(key, token),
                (left, Self::deadline(Some(keep_ms))),
            )?;
            map.remove(key);
            Ok(())
        })
    }

    async fn peek(&self, key: &str) -> Result<Option<Slot>, StorageError> {
        self.with(|map| Ok(Self::live(map, key)))
    }

    async fn put_lock(
        &self,
        key: &str,
        ours: &Slot,
        lock_ms: Option<u64>,
    ) -> Result<(), StorageError> {
        self.with(|map| Self::insert(map, key, (ours.clone(), Self::deadline(lock_ms))))
    }

    async fn complete(
        &self,
        key: &str,
        fingerprint: &str,
        caller: &str,
        answer: &StoredAnswer,
        expiry_ms: Option<u64>,
    ) -> Result<(), StorageError> {
        self.with(|map| {
            let slot = Slot::Done {
                fingerprint: fingerprint.to_owned(),
                caller: caller.to_owned(),
                answer: answer.clone(),
            };
            Self::insert(map, key, (slot, Self::deadline(expiry_ms)))
        })
    }

    async fn release(&self, key: &str) -> Result<(), StorageError> {
        self.with(|map| {
            map.remove(key);
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn answer() -> StoredAnswer {
        StoredAnswer {
            status: 201,
            headers: vec![("x-reqkey-order".into(), "1".into())],
            body: "{}".into(),
        }
    }

    fn lock(fp: &str, token: &str) -> Slot {
        Slot::InFlight {
            fingerprint: fp.into(),
            caller: "c".into(),
            token: token.into(),
        }
    }

    #[tokio::test]
    async fn a_key_is_locked_once_then_completed_then_expires() {
        let m = MemoryStorage::new();
        assert_eq!(
            m.try_lock("k", &lock("f", "1"), None, None).await.unwrap(),
            None
        );
        assert!(matches!(
            m.try_lock("k", &lock("g", "2"), None, None).await.unwrap(),
            Some(Slot::InFlight { fingerprint, .. }) if fingerprint == "f"
        ));
        m.complete("k", "f", "c", &answer(), Some(30))
            .await
            .unwrap();
        assert!(matches!(
            m.try_lock("k", &lock("f", "3"), None, None).await.unwrap(),
            Some(Slot::Done { .. })
        ));
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert_eq!(
            m.try_lock("k", &lock("f", "4"), None, None).await.unwrap(),
            None
        );
        m.release("k").await.unwrap();
        assert_eq!(m.peek("k").await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_lock_with_a_length_lapses_unless_renewed() {
        let m = MemoryStorage::new();
        let ours = lock("f", "1");
        assert_eq!(m.try_lock("k", &ours, Some(40), None).await.unwrap(), None);
        for _ in 0..4 {
            tokio::time::sleep(Duration::from_millis(20)).await;
            m.renew("k", &ours, 40).await.unwrap();
        }
        assert!(m
            .try_lock("k", &lock("f", "2"), None, None)
            .await
            .unwrap()
            .is_some());
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert_eq!(
            m.try_lock("k", &lock("f", "2"), None, None).await.unwrap(),
            None
        );
    }

    #[tokio::test]
    async fn waiters_of_a_freed_lock_find_its_answer_and_newcomers_the_free_key() {
        let m = MemoryStorage::new();
        assert_eq!(
            m.try_lock("k", &lock("f", "1"), None, None).await.unwrap(),
            None
        );
        m.release_to_waiters("k", "1", &answer(), 1_000)
            .await
            .unwrap();
        assert!(matches!(
            m.try_lock("k", &lock("f", "2"), None, Some("1"))
                .await
                .unwrap(),
            Some(Slot::Released { .. })
        ));
        assert_eq!(
            m.try_lock("k", &lock("f", "3"), None, None).await.unwrap(),
            None
        );
    }
}
