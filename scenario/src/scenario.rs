//! A scenario as loaded: its id, level, clauses, profile needs and steps,
//! and the bounds a scenario's numbers are held to.

use std::path::PathBuf;

use serde::Deserialize;

pub use crate::clause::ClauseRef;
use crate::requires::Requires;
use crate::step::Step;
use reqkey_model::vocab::Level;

/// Upper bounds that keep a scenario's cost bounded.
pub const MAX_REPEAT: u32 = 10_000;
pub const MAX_COPIES: u32 = 256;
pub const MAX_SLEEP_MS: u64 = 10_000;
/// Bounds of a `mixed_histories` step.
pub const MAX_MIXED_PROGRAMS: u32 = 10_000;
pub const MAX_MIXED_IN_FLIGHT: u32 = 64;

/// The value of a `mixed_histories` step.
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MixedHistoriesSpec {
    /// How many random programs to run (1 to 10 000).
    pub programs: u32,
    /// How many run at once, each on sessions of its own (1 to 64).
    #[serde(default = "default_in_flight")]
    pub in_flight: u32,
}

fn default_in_flight() -> u32 {
    8
}

/// A reqkey scenario: one file under scenarios/store or scenarios/agent (docs/scenario-format.md).
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "reqkey scenario")]
pub struct Scenario {
    /// Unique, dotted; reports and --expected-failures use it.
    #[schemars(regex(pattern = r"^[A-Za-z0-9._-]+$"))]
    pub id: String,
    pub level: Level,
    /// Free labels; `reqkey run --tag X` filters on them.
    #[serde(default)]
    pub tags: Vec<String>,
    /// The clauses of spec/SPEC.md this scenario checks (`[[...]]` ids,
    /// each certified at the scenario's level); `reqkey coverage` reads them.
    #[serde(default)]
    pub checks: Vec<ClauseRef>,
    /// One line saying what the scenario proves.
    #[schemars(length(min = 1))]
    pub summary: String,
    /// The profile an agent server must have for this scenario to apply
    /// (SPEC 8); absent: it applies to every profile. Store scenarios take
    /// none (a store's profile is fixed).
    #[serde(default)]
    pub requires: Requires,
    /// Trials; each gets fresh variables.
    #[serde(default = "one")]
    #[schemars(range(min = 1, max = 10_000))]
    pub repeat: u32,
    /// The steps, run in order.
    #[schemars(length(min = 1))]
    pub steps: Vec<Step>,
    /// Where it was loaded from (set by the loader).
    #[serde(skip)]
    pub file: PathBuf,
}

fn one() -> u32 {
    1
}
