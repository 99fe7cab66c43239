//! A clause id of spec/SPEC.md as a scenario names it (`checks:`,
//! `judges:`), checked against the embedded spec while the parser stands
//! on it.

use std::fmt;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer};

/// A clause id of spec/SPEC.md, checked against the embedded spec while the
/// YAML parser stands on it (so an unknown id is reported at its
/// `file:line:col`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClauseRef(pub String);

impl<'de> Deserialize<'de> for ClauseRef {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_str(ClauseVisitor)
    }
}

struct ClauseVisitor;

impl Visitor<'_> for ClauseVisitor {
    type Value = ClauseRef;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a clause id of spec/SPEC.md")
    }

    fn visit_str<E: de::Error>(self, id: &str) -> Result<ClauseRef, E> {
        let clauses = reqkey_model::clauses::clauses()
            .map_err(|e| E::custom(format!("the embedded spec's clauses: {e}")))?;
        if clauses.iter().any(|c| c.id == id) {
            Ok(ClauseRef(id.to_owned()))
        } else {
            Err(E::custom(format!(
                "`{id}` is not a clause id of spec/SPEC.md (`reqkey coverage --list` prints them)"
            )))
        }
    }
}
