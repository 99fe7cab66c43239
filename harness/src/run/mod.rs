//! Running scenarios on a target: trials, steps, parallel groups behind a
//! barrier, recorded instants; the events the runner emits; which scenarios
//! a run selects (suite, expected failures, the scenarios a profile admits). Reaches an implementation only
//! through [`crate::target::Target`]; renders nothing (reporters subscribe
//! to [`event::Event`]s).

pub mod agent_steps;
pub mod event;
pub mod expected;
pub mod record;
pub mod runner;
pub mod select;
pub mod suite;
