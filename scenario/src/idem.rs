//! What an idem scenario needs of the declared `Idempotency-Key` profile
//! (SPEC 10): `requires: {idem: {...}}`. Each field names one choice the
//! draft leaves open; an absent field admits every value.

use reqkey_model::idem_profile::{self as p, IdemProfile, ScopeBy};
use serde::Deserialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum KeySyntax {
    SfString,
    Any,
    Token,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Fingerprint {
    None,
    Bytes,
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Concurrent {
    Conflict,
    Wait,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Errors {
    Stored,
    Released,
}

/// The idem profile a scenario needs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct IdemRequires {
    pub key_required: Option<bool>,
    pub key_syntax: Option<KeySyntax>,
    /// `true`: `invalidKeyStatus` is a status (malformed keys refused).
    pub invalid_key_refused: Option<bool>,
    pub fingerprint: Option<Fingerprint>,
    /// `true`: `mismatchStatus` is a status (payloads are compared).
    pub mismatch_refused: Option<bool>,
    pub concurrent: Option<Concurrent>,
    pub errors: Option<Errors>,
    /// `true`/`false`: `scope` holds / lacks `caller`.
    pub scoped_by_caller: Option<bool>,
    pub scoped_by_method: Option<bool>,
    pub scoped_by_path: Option<bool>,
    /// The most `expiryMs` the profile may declare (the scenario waits
    /// longer); a profile without expiry does not qualify.
    pub expiry_ms_at_most: Option<u64>,
    /// The least `expiryMs` (or none): the scenario's replays come sooner.
    pub expiry_ms_at_least: Option<u64>,
    /// `true`: `replayHeader` is a name.
    pub replay_header: Option<bool>,
    /// `true`: `lockMs` is null (the lock lasts until completion).
    pub lock_until_completion: Option<bool>,
    /// The least `lockMs` the profile may declare (or null): the
    /// scenario's duplicates come sooner.
    pub lock_ms_at_least: Option<u64>,
    /// The exact statuses the scenario expects for a malformed key, another
    /// payload, and a duplicate in flight.
    pub invalid_key_status: Option<u16>,
    pub mismatch_status: Option<u16>,
    pub concurrent_status: Option<u16>,
}

/// A profile value as `/.reqkey/health` spells it (`sf-string`, `json`,
/// `wait`): the model's own serialisation, never a Rust name.
fn spelled(value: impl serde::Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => "?".to_owned(),
    }
}

impl IdemRequires {
    /// What `profile` lacks, or `None` when the scenario applies.
    pub fn unmet(&self, profile: &IdemProfile) -> Option<String> {
        let mut unmet = Vec::new();
        let mut want = |ok: bool, what: String| {
            if !ok {
                unmet.push(what);
            }
        };
        if let Some(w) = self.key_required {
            want(profile.key_required == w, format!("keyRequired: {w}"));
        }
        if let Some(w) = self.key_syntax {
            let is = match w {
                KeySyntax::SfString => p::KeySyntax::SfString,
                KeySyntax::Any => p::KeySyntax::Any,
                KeySyntax::Token => p::KeySyntax::Token,
            };
            want(
                profile.key_syntax == is,
                format!("keySyntax: {}", spelled(is)),
            );
        }
        if let Some(w) = self.invalid_key_refused {
            want(
                profile.invalid_key_status.is_some() == w,
                format!("invalidKeyStatus {}", if w { "a status" } else { "null" }),
            );
        }
        if let Some(w) = self.fingerprint {
            let is = match w {
                Fingerprint::None => p::Fingerprint::None,
                Fingerprint::Bytes => p::Fingerprint::Bytes,
                Fingerprint::Json => p::Fingerprint::Json,
            };
            want(
                profile.fingerprint == is,
                format!("fingerprint: {}", spelled(is)),
            );
        }
        if let Some(w) = self.mismatch_refused {
            want(
                profile.mismatch_status.is_some() == w,
                format!("mismatchStatus {}", if w { "a status" } else { "null" }),
            );
        }
        if let Some(w) = self.concurrent {
            let is = match w {
                Concurrent::Conflict => p::Concurrent::Conflict,
                Concurrent::Wait => p::Concurrent::Wait,
            };
            want(
                profile.concurrent == is,
                format!("concurrent: {}", spelled(is)),
            );
        }
        if let Some(w) = self.errors {
            let is = match w {
                Errors::Stored => p::Errors::Stored,
                Errors::Released => p::Errors::Released,
            };
            want(profile.errors == is, format!("errors: {}", spelled(is)));
        }
        for (req, by) in [
            (self.scoped_by_caller, ScopeBy::Caller),
            (self.scoped_by_method, ScopeBy::Method),
            (self.scoped_by_path, ScopeBy::Path),
        ] {
            if let Some(w) = req {
                let has = if w { "holds" } else { "lacks" };
                want(
                    profile.scoped_by(by) == w,
                    format!("scope {has} {}", by.name()),
                );
            }
        }
        if let Some(most) = self.expiry_ms_at_most {
            want(
                profile.expiry_ms.is_some_and(|ms| ms <= most),
                format!("expiryMs at most {most}"),
            );
        }
        if let Some(least) = self.expiry_ms_at_least {
            want(
                profile.expiry_ms.is_none_or(|ms| ms >= least),
                format!("expiryMs at least {least} or null"),
            );
        }
        if let Some(w) = self.replay_header {
            want(
                profile.replay_header.is_some() == w,
                format!("replayHeader {}", if w { "a name" } else { "null" }),
            );
        }
        if let Some(w) = self.lock_until_completion {
            want(
                profile.lock_ms.is_none() == w,
                format!("lockMs {}", if w { "null" } else { "an integer" }),
            );
        }
        if let Some(least) = self.lock_ms_at_least {
            want(
                profile.lock_ms.is_none_or(|ms| ms >= least),
                format!("lockMs at least {least} or null"),
            );
        }
        for (name, req, is) in [
            (
                "invalidKeyStatus",
                self.invalid_key_status,
                profile.invalid_key_status,
            ),
            (
                "mismatchStatus",
                self.mismatch_status,
                profile.mismatch_status,
            ),
            (
                "concurrentStatus",
                self.concurrent_status,
                profile.concurrent_status,
            ),
        ] {
            if let Some(w) = req {
                want(is == Some(w), format!("{name}: {w}"));
            }
        }
        (!unmet.is_empty()).then(|| format!("idem {}", unmet.join(", ")))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_requirement_names_what_the_profile_lacks() {
        let draft = IdemProfile::draft_default();
        let r = IdemRequires {
            concurrent: Some(Concurrent::Wait),
            scoped_by_caller: Some(true),
            ..IdemRequires::default()
        };
        assert_eq!(r.unmet(&draft).as_deref(), Some("idem concurrent: wait"));
        let mut wait = draft.clone();
        wait.concurrent = p::Concurrent::Wait;
        assert_eq!(r.unmet(&wait), None);
        let e = IdemRequires {
            expiry_ms_at_most: Some(3000),
            ..IdemRequires::default()
        };
        assert!(e.unmet(&draft).is_some());
        let mut expiring = draft;
        expiring.expiry_ms = Some(2000);
        assert_eq!(e.unmet(&expiring), None);
    }

    /// Issue 50: reasons said `SfString`, `Json`, `Wait` where the profile
    /// says `sf-string`, `json`, `wait`.
    #[test]
    fn unmet_values_are_spelled_as_the_profile_declares_them() {
        let mut declared = IdemProfile::draft_default();
        declared.key_syntax = p::KeySyntax::Any;
        declared.fingerprint = p::Fingerprint::Bytes;
        declared.errors = p::Errors::Released;
        let r = IdemRequires {
            key_syntax: Some(KeySyntax::SfString),
            fingerprint: Some(Fingerprint::Json),
            concurrent: Some(Concurrent::Wait),
            errors: Some(Errors::Stored),
            ..IdemRequires::default()
        };
        assert_eq!(
            r.unmet(&declared).as_deref(),
            Some("idem keySyntax: sf-string, fingerprint: json, concurrent: wait, errors: stored")
        );
    }
}
