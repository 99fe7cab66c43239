//! Running scenarios on a target: trials, steps, parallel groups behind a
//! barrier, recorded instants; the events the runner emits; which scenarios
//! a run selects (suite, expected failures, the scenarios a profile admits). Reaches an implementation only
//! through [`crate::targets::Target`]; renders nothing (reporters subscribe
//! to [`event::Event`]s).
//!
//! Two stages generate their own work instead of reading it from a
//! scenario: [`fuzz`] (the fuzzers, a room of their own: proptest programs
//! of store operations and of agent requests against a target and the sequential spec, shrunk to a YAML scenario) and [`mixed`]
//! (the bounded certification stage of random concurrent programs behind
//! the `mixed_histories` step). Both hand their histories to
//! `reqkey_check::lin`. [`export`] keeps the histories a run judged for
//! `--export-histories`.

pub mod agent_steps;
pub mod blame;
pub mod bound;
pub mod config;
pub mod event;
pub mod expectations;
pub mod expected;
pub mod export;
pub mod fuzz;
pub mod group;
pub mod levels;
pub mod mixed;
pub mod partition;
pub mod record;
pub mod request;
pub mod runner;
pub mod select;
pub mod suite;
pub mod trial;
pub mod trials;
