//! Where a node of a YAML text is, by its path (`steps[2].parallel[0]`).
//!
//! serde_yaml gives no spans to a visitor, but every error it raises
//! carries the position of the event it stood on. So the locator parses the
//! text again, walks down the path skipping everything else, and raises an
//! error on the node itself: that error's position is the node's. Used only
//! after a check that runs on the loaded scenario (duplicate answer names,
//! ids, ...) has failed, so that its message too carries `file:line:col`.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// One step of a path into a document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seg {
    /// The value of a map's key.
    Key(&'static str),
    /// An element of a sequence.
    Index(usize),
}

/// The line and column (1-based) of the node at `path` in `text`, if the
/// path is there and the parser names a position.
pub fn locate(text: &str, path: &[Seg]) -> Option<(usize, usize)> {
    let de = serde_yaml::Deserializer::from_str(text);
    let err = match Walk(path).deserialize(de) {
        Ok(()) => return None,
        Err(e) => e,
    };
    // Only the error raised on the node itself is its position.
    if !err.to_string().contains(HERE) {
        return None;
    }
    err.location().map(|l| (l.line(), l.column()))
}

const HERE: &str = "reqkey-locate-here";

struct Walk<'p>(&'p [Seg]);

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        match self.0.first() {
            None => d.deserialize_any(Here),
            Some(Seg::Key(_)) => d.deserialize_map(self),
            Some(Seg::Index(_)) => d.deserialize_seq(self),
        }
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a path into the document")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let Some((Seg::Key(want), rest)) = self.0.split_first() else {
            return Ok(());
        };
        while let Some(key) = map.next_key::<serde_yaml::Value>()? {
            if key.as_str() == Some(*want) {
                return map.next_value_seed(Walk(rest));
            }
            map.next_value::<IgnoredAny>()?;
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let Some((Seg::Index(want), rest)) = self.0.split_first() else {
            return Ok(());
        };
        for _ in 0..*want {
            if seq.next_element::<IgnoredAny>()?.is_none() {
                return Ok(());
            }
        }
        seq.next_element_seed(Walk(rest)).map(|_| ())
    }
}

/// Raises the marker error on whatever node it is given, before reading it.
struct Here;

impl<'de> Visitor<'de> for Here {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(HERE)
    }

    fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        Err(de::Error::custom(HERE))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        Err(de::Error::custom(HERE))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_are_found_by_path() {
        let text = "id: t\nsteps:\n  - a: 1\n  - parallel:\n      - b: 2\n      - c: 3\n";
        assert_eq!(locate(text, &[Seg::Key("id")]), Some((1, 5)));
        assert_eq!(
            locate(text, &[Seg::Key("steps"), Seg::Index(1)]),
            Some((4, 5))
        );
        assert_eq!(
            locate(
                text,
                &[
                    Seg::Key("steps"),
                    Seg::Index(1),
                    Seg::Key("parallel"),
                    Seg::Index(1)
                ]
            ),
            Some((6, 9))
        );
        assert_eq!(locate(text, &[Seg::Key("steps"), Seg::Index(9)]), None);
    }
}
