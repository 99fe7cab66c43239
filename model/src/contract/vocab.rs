//! The shared vocabulary: the words every crate of the workspace uses for
//! what the spec names, defined once and low in the stack. A level is a
//! contract (SPEC 4's store protocol or SPEC 7's agent API); a profile is
//! what an agent server declares it does with keys (SPEC 7, SPEC 8).

use std::fmt;

use serde::{Deserialize, Serialize};

/// Which contract something speaks: a target, a scenario, a clause.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    /// `reqkey-store/1`: the SPEC 4 operations.
    Store,
    /// `reqkey-agent/1`: the SPEC 7 HTTP API.
    Agent,
    /// `reqkey-idem/1`: an app behind an `Idempotency-Key` implementation (SPEC 10).
    Idem,
}

/// What the workspace knows of a level, in one row: adding a level is a
/// variant of [`Level`] and its row here (ARCHITECTURE.md, "Adding a
/// protocol level", lists the files that follow).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LevelInfo {
    /// The word scenarios, clauses and reports use (`level: store`).
    pub name: &'static str,
    /// The protocol a target of this level names in its `/health`.
    pub protocol: &'static str,
    /// How `--target` is written for an implementation of this level
    /// reached over HTTP.
    pub target_form: &'static str,
    /// The folder of its scenarios under a scenarios root.
    pub suite_dir: &'static str,
    /// What its implementations are called, in the plural (`stores`).
    pub implementations: &'static str,
}

impl Level {
    pub const ALL: [Level; 3] = [Level::Store, Level::Agent, Level::Idem];

    /// The level's row: its names, protocol and forms.
    pub const fn info(self) -> LevelInfo {
        match self {
            Level::Store => LevelInfo {
                name: "store",
                protocol: "reqkey-store/1",
                target_form: "store+http://HOST:PORT",
                suite_dir: "store",
                implementations: "stores",
            },
            Level::Agent => LevelInfo {
                name: "agent",
                protocol: "reqkey-agent/1",
                target_form: "http://HOST:PORT",
                suite_dir: "agent",
                implementations: "agent servers",
            },
            Level::Idem => LevelInfo {
                name: "idem",
                protocol: "reqkey-idem/1",
                target_form: "idem+http://HOST:PORT",
                suite_dir: "idempotency-key",
                implementations: "Idempotency-Key implementations",
            },
        }
    }

    pub fn name(self) -> &'static str {
        self.info().name
    }

    /// The level whose protocol a `/health` names, if any.
    pub fn of_protocol(protocol: &str) -> Option<Level> {
        Level::ALL
            .into_iter()
            .find(|l| l.info().protocol == protocol)
    }

    pub fn parse(name: &str) -> Option<Level> {
        Level::ALL.into_iter().find(|l| l.name() == name)
    }
}

impl schemars::JsonSchema for Level {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Level".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": format!("Which contract the scenario speaks: {}.", spoken_list()),
            "type": "string",
            "enum": Level::ALL.iter().map(|l| l.name()).collect::<Vec<_>>()
        })
    }
}

/// "`store` (reqkey-store/1) or `agent` (reqkey-agent/1)": every level.
fn spoken_list() -> String {
    let items: Vec<String> = Level::ALL
        .iter()
        .map(|l| format!("`{}` ({})", l.name(), l.info().protocol))
        .collect();
    match items.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a new entry does to a `running` current run (SPEC 7
/// `concurrentEntry`): one word for the server's policy and the profile
/// a target declares.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Default,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ConcurrentEntry {
    /// Refuse it 409 `state_already_running` (the default).
    #[default]
    Reject,
    /// A keyed send or an entry that is not a duplicate interrupts the
    /// running run and starts its own; a keyless chat send is still refused.
    InterruptPrevious,
}

impl ConcurrentEntry {
    pub const ALL: [ConcurrentEntry; 2] = [Self::Reject, Self::InterruptPrevious];

    pub fn name(self) -> &'static str {
        match self {
            ConcurrentEntry::Reject => "reject",
            ConcurrentEntry::InterruptPrevious => "interrupt_previous",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.name() == name)
    }
}

/// A target's profile: what the scenarios that apply to it depend on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Profile {
    pub supports_request_key: bool,
    pub concurrent_entry: ConcurrentEntry,
    /// `entryWaitMs`: how long a keyed entry waits for another entry's
    /// admission (SPEC 7); 0 when the server declares none (no promise).
    #[serde(skip_serializing_if = "is_zero")]
    pub entry_wait_ms: u64,
}

fn is_zero(ms: &u64) -> bool {
    *ms == 0
}

impl Default for Profile {
    /// Keys recorded, concurrent entries refused: what every store is and
    /// what an agent server is unless it declares otherwise.
    fn default() -> Self {
        Self {
            supports_request_key: true,
            concurrent_entry: ConcurrentEntry::Reject,
            entry_wait_ms: 0,
        }
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "supportsRequestKey: {}, concurrentEntry: {}",
            self.supports_request_key,
            self.concurrent_entry.name()
        )?;
        if self.entry_wait_ms > 0 {
            write!(f, ", entryWaitMs: {}", self.entry_wait_ms)?;
        }
        Ok(())
    }
}

impl Profile {
    /// The fields an agent server declares (SPEC 7 "Profiles"), as
    /// `/health` names them: what `$profile.FIELD` may name.
    pub const FIELDS: [&'static str; 3] = ["supportsRequestKey", "concurrentEntry", "entryWaitMs"];

    /// The declared fields by name (`entryWaitMs` 0 when none is declared).
    pub fn fields(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut m = serde_json::Map::new();
        m.insert(
            "supportsRequestKey".into(),
            self.supports_request_key.into(),
        );
        m.insert(
            "concurrentEntry".into(),
            self.concurrent_entry.name().into(),
        );
        m.insert("entryWaitMs".into(), self.entry_wait_ms.into());
        m
    }

    /// The `--profile` value that states this profile.
    pub fn flag(&self) -> String {
        let mut flag = format!(
            "supportsRequestKey={},concurrentEntry={}",
            self.supports_request_key,
            self.concurrent_entry.name()
        );
        if self.entry_wait_ms > 0 {
            flag.push_str(&format!(",entryWaitMs={}", self.entry_wait_ms));
        }
        flag
    }
}
