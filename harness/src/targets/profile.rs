//! Profiles: what a target says it does with request keys (SPEC 7 and 8).
//!
//! Not every conforming server records keys or refuses concurrent entries:
//! a runtime that cannot record keys declares `supportsRequestKey: false`
//! (keys are ignored, with a warning), and a server may run its entries on
//! `concurrentEntry: "interrupt_previous"`. An agent server declares both
//! in `GET /health`; a store's profile is fixed (every store records keys).
//! Scenarios say what they need (`requires:`) and the runner certifies a
//! target against the scenarios its profile admits, so a correct server of
//! either profile passes and a server that breaks its own profile fails.
//!
//! A profile that cannot be read (no `/health`, another protocol, a field
//! of the wrong type) is an error (exit 2), never a verdict: the harness
//! cannot know which scenarios apply. `--profile` states one instead (for
//! a server whose `/health` cannot say, or to force another profile), and
//! every report then says it was stated, not declared.

use reqkey_scenario::fault::FaultSupport;
use serde::Serialize;
use serde_json::Value;

pub use reqkey_model::vocab::{ConcurrentEntry, Profile};

use crate::targets::{Level, Target};

/// The agent protocol whose `/health` declares a profile.
pub const AGENT_PROTOCOL: &str = "reqkey-agent/1";

/// The `--profile` forms, for help texts.
pub const PROFILE_HELP: &str = "default (supportsRequestKey: true, concurrentEntry: reject), \
keys-ignored (supportsRequestKey: false), interrupt-previous (concurrentEntry: \
interrupt_previous), or supportsRequestKey=BOOL,concurrentEntry=reject|interrupt_previous[,entryWaitMs=MS]";

/// The largest `entryWaitMs` a profile may declare (SPEC 7).
pub const MAX_ENTRY_WAIT_MS: u64 = 60_000;

/// Why a profile could not be read. Exit 2.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProfileError {
    #[error("{0}")]
    Health(String),
    #[error("`{0}` is not a profile; use {PROFILE_HELP}")]
    BadFlag(String),
    #[error(
        "a store's profile is fixed (every store records keys); --profile applies to agent targets"
    )]
    StoreProfileFixed,
}

/// The profile an agent server declares in its `/health` answer:
/// `protocol` must be `reqkey-agent/1`, `supportsRequestKey` a boolean,
/// `concurrentEntry` absent (`reject`) or one of the two names.
pub fn profile_from_health(health: &Value) -> Result<Profile, ProfileError> {
    let bad = |what: String| Err(ProfileError::Health(format!("GET /health: {what}")));
    let Some(obj) = health.as_object() else {
        return bad(format!("not a JSON object: {}", short(health)));
    };
    match obj.get("protocol").and_then(Value::as_str) {
        Some(AGENT_PROTOCOL) => {}
        Some(other) => return bad(format!("protocol `{other}`, not {AGENT_PROTOCOL}")),
        None => return bad(format!("no protocol (expected {AGENT_PROTOCOL})")),
    }
    let supports_request_key = match obj.get("supportsRequestKey") {
        Some(Value::Bool(b)) => *b,
        Some(v) => return bad(format!("supportsRequestKey is {}, not a boolean", short(v))),
        None => return bad("no supportsRequestKey".into()),
    };
    let concurrent_entry = match obj.get("concurrentEntry") {
        None => ConcurrentEntry::Reject,
        Some(Value::String(s)) => match ConcurrentEntry::parse(s) {
            Some(c) => c,
            None => {
                return bad(format!(
                    "concurrentEntry `{}` is neither reject nor interrupt_previous",
                    short(&Value::String(s.clone()))
                ))
            }
        },
        Some(v) => return bad(format!("concurrentEntry is {}, not a string", short(v))),
    };
    let entry_wait_ms = match obj.get("entryWaitMs") {
        None => 0,
        Some(v) => match v.as_u64().filter(|ms| *ms <= MAX_ENTRY_WAIT_MS) {
            Some(ms) => ms,
            None => {
                return bad(format!(
                    "entryWaitMs is {}, not an integer from 0 to {MAX_ENTRY_WAIT_MS}",
                    short(v)
                ))
            }
        },
    };
    Ok(Profile {
        supports_request_key,
        concurrent_entry,
        entry_wait_ms,
    })
}

/// Parses a `--profile` value (see [`PROFILE_HELP`]).
pub fn parse_profile_flag(text: &str) -> Result<Profile, ProfileError> {
    let bad = || ProfileError::BadFlag(text.to_owned());
    let named = match text {
        "default" => Some(Profile::default()),
        "keys-ignored" => Some(Profile {
            supports_request_key: false,
            ..Profile::default()
        }),
        "interrupt-previous" => Some(Profile {
            concurrent_entry: ConcurrentEntry::InterruptPrevious,
            ..Profile::default()
        }),
        _ => None,
    };
    if let Some(p) = named {
        return Ok(p);
    }
    let mut profile = Profile::default();
    let mut seen = (false, false, false);
    for part in text.split(',') {
        let (key, value) = part.split_once('=').ok_or_else(bad)?;
        match (key.trim(), value.trim()) {
            ("supportsRequestKey", v) if !seen.0 => {
                seen.0 = true;
                profile.supports_request_key = v.parse().map_err(|_| bad())?;
            }
            ("concurrentEntry", v) if !seen.1 => {
                seen.1 = true;
                profile.concurrent_entry = ConcurrentEntry::parse(v).ok_or_else(bad)?;
            }
            ("entryWaitMs", v) if !seen.2 => {
                seen.2 = true;
                profile.entry_wait_ms = v
                    .parse()
                    .ok()
                    .filter(|ms| *ms <= MAX_ENTRY_WAIT_MS)
                    .ok_or_else(bad)?;
            }
            _ => return Err(bad()),
        }
    }
    Ok(profile)
}

/// Where the profile a run certifies came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProfileSource {
    /// A store: every store records keys.
    Fixed,
    /// Declared by the target's `GET /health`.
    Declared,
    /// Stated with `--profile` (whatever `/health` said).
    Stated,
}

impl ProfileSource {
    pub fn name(self) -> &'static str {
        match self {
            ProfileSource::Fixed => "fixed",
            ProfileSource::Declared => "declared",
            ProfileSource::Stated => "stated",
        }
    }
}

/// The profile a run certifies, and where it came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProfileInfo {
    pub profile: Profile,
    pub source: ProfileSource,
    /// What `/health` declared, when `--profile` stated another profile
    /// (`None` when it was not asked, could not say, or said the same).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub declared: Option<Profile>,
    /// Whether crash behaviour was certified: the harness started the
    /// target (`--start`) or not ([`FaultSupport::describe`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub crash: Option<String>,
    /// When the harness started the target: the crash scenarios that
    /// applied and why the others did not (the certificate's crash claim
    /// is made from their results, `report::crash::claim`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub crash_scenarios: Option<CrashScenarios>,
    /// Whether the database link was faulted: the links the harness
    /// owned (`--db`), or that it owned none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
    /// With `--db`: the link scenarios that applied and why the others
    /// did not (the link claim is made from their results,
    /// `report::crash::link_claim`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link_scenarios: Option<CrashScenarios>,
    /// An idem target's declared `Idempotency-Key` profile (SPEC 10);
    /// `profile` is then unused (the default).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idem: Option<reqkey_model::idem_profile::IdemProfile>,
    /// `--api`: the map that declared the idem profile and the effect
    /// oracle it judged by (`FILE; effect oracle: ...`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_map: Option<String>,
}

impl ProfileInfo {
    /// One line for people: the profile and where it came from.
    pub fn describe(&self) -> String {
        if let Some(idem) = &self.idem {
            return match &self.api_map {
                Some(map) => format!("{idem} (declared by the API map {map})"),
                None => format!("{idem} (declared by /.reqkey/health)"),
            };
        }
        match self.source {
            ProfileSource::Fixed => {
                "supportsRequestKey: true (fixed: every store records keys)".to_owned()
            }
            ProfileSource::Declared => format!("{} (declared by /health)", self.profile),
            ProfileSource::Stated => match self.declared {
                Some(d) => format!(
                    "{} (stated with --profile; /health declares {d})",
                    self.profile
                ),
                None => format!("{} (stated with --profile, not declared)", self.profile),
            },
        }
    }
}

/// The profile to certify `target` against: a store's fixed one, the one
/// `--profile` states, or the one its `/health` declares. Bounded by
/// `timeout_ms`; an agent whose `/health` cannot say, with no `--profile`,
/// is an error.
pub async fn resolve_profile(
    target: &dyn Target,
    stated: Option<Profile>,
    timeout_ms: u64,
) -> Result<ProfileInfo, ProfileError> {
    if target.level() == Level::Idem {
        return resolve_idem_profile(target, stated.is_some(), timeout_ms).await;
    }
    if target.level() == Level::Store {
        return match stated {
            None => Ok(ProfileInfo {
                profile: Profile::default(),
                source: ProfileSource::Fixed,
                declared: None,
                crash: None,
                crash_scenarios: None,
                link: None,
                link_scenarios: None,
                idem: None,
                api_map: None,
            }),
            Some(_) => Err(ProfileError::StoreProfileFixed),
        };
    }
    let health = tokio::time::timeout(
        std::time::Duration::from_millis(timeout_ms),
        target.health(),
    )
    .await;
    let declared = match health {
        Ok(Ok(h)) => profile_from_health(&h),
        Ok(Err(e)) => Err(ProfileError::Health(format!("GET /health: {e}"))),
        Err(_) => Err(ProfileError::Health(format!(
            "GET /health did not answer within {timeout_ms} ms"
        ))),
    };
    match (stated, declared) {
        (Some(profile), declared) => Ok(ProfileInfo {
            profile,
            source: ProfileSource::Stated,
            declared: declared.ok().filter(|d| *d != profile),
            crash: None,
            crash_scenarios: None,
            link: None,
            link_scenarios: None,
            idem: None,
            api_map: None,
        }),
        (None, Ok(profile)) => Ok(ProfileInfo {
            profile,
            source: ProfileSource::Declared,
            declared: None,
            crash: None,
            crash_scenarios: None,
            link: None,
            link_scenarios: None,
            idem: None,
            api_map: None,
        }),
        (None, Err(e)) => Err(ProfileError::Health(format!(
            "{} declares no profile: {e}",
            target.describe()
        ))),
    }
}

/// The crash scenarios of a run whose target the harness started.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct CrashScenarios {
    /// The ids of the crash scenarios that applied (and so ran).
    pub applied: Vec<String>,
    /// Why the others did not apply (each reason once, in order).
    pub unmet: Vec<String>,
    /// The faults the applied scenarios arm, each once, in the order the
    /// suite first arms them (the link scenarios': what a certified
    /// database-link claim names; empty for crash scenarios).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub faults: Vec<String>,
}

/// The crash scenarios of a run: which of `faulty` (the ids of the
/// suite's crash scenarios) are among `applied`, and the reasons that
/// kept the others out (`not_applied`: id and reason).
pub fn crash_scenarios<'a>(
    faulty: &std::collections::BTreeSet<String>,
    applied: impl Iterator<Item = &'a str>,
    not_applied: impl Iterator<Item = (&'a str, &'a str)>,
) -> CrashScenarios {
    let mut out = CrashScenarios {
        applied: applied
            .filter(|id| faulty.contains(*id))
            .map(str::to_owned)
            .collect(),
        unmet: Vec::new(),
        faults: Vec::new(),
    };
    for (id, why) in not_applied {
        if faulty.contains(id) && !out.unmet.iter().any(|u| u == why) {
            out.unmet.push(why.to_owned());
        }
    }
    out
}

/// Where an idem app (SPEC 10) answers its identity and profile.
pub const IDEM_HEALTH_PATH: &str = "/.reqkey/health";

/// The profile an idem target declares (SPEC 10 `[[idem.profile.declared]]`):
/// read from `/.reqkey/health`, never stated; a health that cannot say
/// is an error (exit 2), never a verdict.
async fn resolve_idem_profile(
    target: &dyn Target,
    stated: bool,
    timeout_ms: u64,
) -> Result<ProfileInfo, ProfileError> {
    if stated {
        return Err(ProfileError::Health(
            "an idem app's profile is declared by /.reqkey/health; --profile applies to agent targets"
                .into(),
        ));
    }
    let health = tokio::time::timeout(
        std::time::Duration::from_millis(timeout_ms),
        target.health(),
    )
    .await
    .map_err(|_| {
        ProfileError::Health(format!(
            "GET {IDEM_HEALTH_PATH} did not answer within {timeout_ms} ms"
        ))
    })?
    .map_err(|e| ProfileError::Health(format!("GET {IDEM_HEALTH_PATH}: {e}")))?;
    let parsed = reqkey_model::idem_profile::parse_health(&health).map_err(|e| {
        ProfileError::Health(format!(
            "{} declares no profile: GET {IDEM_HEALTH_PATH}: {e}",
            target.describe()
        ))
    })?;
    Ok(ProfileInfo {
        profile: Default::default(),
        source: ProfileSource::Declared,
        declared: None,
        crash: None,
        crash_scenarios: None,
        link: None,
        link_scenarios: None,
        idem: Some(parsed.profile),
        api_map: health.get("apiMap").map(|m| {
            format!(
                "{}; effect oracle: {}",
                m.get("file").and_then(Value::as_str).unwrap_or("?"),
                m.get("oracle").and_then(Value::as_str).unwrap_or("?")
            )
        }),
    })
}

/// What a run offers fault scenarios: how many processes the harness
/// started, and (only then asked) what `/health` declares of durability
/// and leases. Bounded by `timeout_ms`; a `/health` that cannot say
/// declares nothing.
pub async fn fault_support(target: &dyn Target, timeout_ms: u64) -> FaultSupport {
    let processes = target.started_processes();
    if processes == 0 {
        return FaultSupport::default();
    }
    let links = target.owned_links();
    let health = tokio::time::timeout(
        std::time::Duration::from_millis(timeout_ms),
        target.health(),
    )
    .await
    .ok()
    .and_then(Result::ok);
    FaultSupport {
        started: true,
        processes,
        durable: health
            .as_ref()
            // An idem app declares it inside its profile (SPEC 10).
            .and_then(|h| {
                h.get("durable")
                    .or_else(|| h.get("profile")?.get("durable"))
            })
            .and_then(Value::as_bool),
        lease_ms: health
            .as_ref()
            .and_then(|h| h.get("leaseMs"))
            .and_then(Value::as_u64),
        links,
    }
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    match s.char_indices().nth(60) {
        Some((cut, _)) => format!("{}...", &s[..cut]),
        None => s,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn health_declares_a_profile_with_reject_as_the_default() {
        let p = |h: Value| profile_from_health(&h);
        assert_eq!(
            p(json!({"protocol": "reqkey-agent/1", "supportsRequestKey": true})),
            Ok(Profile::default())
        );
        assert_eq!(
            p(
                json!({"protocol": "reqkey-agent/1", "supportsRequestKey": false,
                     "concurrentEntry": "interrupt_previous", "name": "x"})
            ),
            Ok(Profile {
                supports_request_key: false,
                concurrent_entry: ConcurrentEntry::InterruptPrevious,
                entry_wait_ms: 0,
            })
        );
        assert_eq!(
            p(
                json!({"protocol": "reqkey-agent/1", "supportsRequestKey": true, "entryWaitMs": 2000})
            ),
            Ok(Profile {
                entry_wait_ms: 2000,
                ..Profile::default()
            })
        );
    }

    #[test]
    fn a_health_that_cannot_say_is_an_error_not_a_guess() {
        for h in [
            json!({"protocol": "reqkey-store/1", "supportsRequestKey": true}),
            json!({"supportsRequestKey": true}),
            json!({"protocol": "reqkey-agent/1"}),
            json!({"protocol": "reqkey-agent/1", "supportsRequestKey": "yes"}),
            json!({"protocol": "reqkey-agent/1", "supportsRequestKey": true, "concurrentEntry": "queue"}),
            json!({"protocol": "reqkey-agent/1", "supportsRequestKey": true, "concurrentEntry": null}),
            json!({"protocol": "reqkey-agent/1", "supportsRequestKey": true, "entryWaitMs": -1}),
            json!({"protocol": "reqkey-agent/1", "supportsRequestKey": true, "entryWaitMs": "2000"}),
            json!({"protocol": "reqkey-agent/1", "supportsRequestKey": true, "entryWaitMs": 60001}),
            json!([1]),
        ] {
            assert!(
                matches!(profile_from_health(&h), Err(ProfileError::Health(_))),
                "{h}"
            );
        }
    }

    #[test]
    fn profile_flags_parse_by_name_and_by_fields() {
        let ip = Profile {
            supports_request_key: true,
            concurrent_entry: ConcurrentEntry::InterruptPrevious,
            entry_wait_ms: 0,
        };
        let waits = Profile {
            entry_wait_ms: 2000,
            ..Profile::default()
        };
        assert_eq!(parse_profile_flag(&waits.flag()), Ok(waits));
        assert_eq!(parse_profile_flag("default"), Ok(Profile::default()));
        assert_eq!(parse_profile_flag("interrupt-previous"), Ok(ip));
        assert_eq!(parse_profile_flag(&ip.flag()), Ok(ip));
        assert_eq!(
            parse_profile_flag("supportsRequestKey=true,concurrentEntry=interrupt_previous"),
            Ok(ip)
        );
        assert_eq!(
            parse_profile_flag("keys-ignored").map(|p| p.supports_request_key),
            Ok(false)
        );
        for bad in [
            "",
            "keys",
            "supportsRequestKey=maybe",
            "concurrentEntry=queue",
            "supportsRequestKey=true,supportsRequestKey=false",
            "other=1",
        ] {
            assert!(parse_profile_flag(bad).is_err(), "{bad}");
        }
    }
}
