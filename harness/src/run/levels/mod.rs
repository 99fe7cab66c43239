//! What differs by protocol level while scenarios run, behind one seam.
//!
//! A scenario names its level (`level: store`); everything the runner does
//! that depends on it asks [`rules`] for that level's [`LevelRules`]: which
//! invariants every answer keeps whatever its step expects, how an
//! exchange is shown on a timeline and in the history viewer, how a
//! passing trial deletes the sessions it made, and whether its histories
//! are store operations a linearizability check can judge. Nothing in the
//! runner matches a level or probes a request's JSON for its kind; a new
//! level is a file here and one arm of [`rules`] (ARCHITECTURE.md, "Adding
//! a protocol level").

pub mod agent;
pub mod idem;
pub mod store;

use std::fmt;

use serde_json::Value;

use crate::run::event::OpShown;
use crate::run::request::Request;
use crate::targets::Level;
use reqkey_check::answer::Violation;

/// One level's part in running scenarios.
pub trait LevelRules: Sync + Send + fmt::Debug {
    /// The level these rules are for.
    fn level(&self) -> Level;

    /// How an exchange is shown (timeline, history viewer): the request
    /// briefly, its answer briefly (`None`: never answered), the session it
    /// names.
    fn shown(&self, request: &Request, answer: Option<&Value>) -> OpShown;

    /// The invariants every answer of this level keeps, whatever its step
    /// expects; a violation names its clause. `may_be_cut`: the step
    /// accepts a connection cut by a fault.
    fn check_answer(&self, sent: &Request, answer: &Value, may_be_cut: bool) -> Option<Violation>;

    /// The request that deletes a session a passing trial created; `None`
    /// where the level has no sessions to delete.
    fn delete_session(&self, session: &str) -> Option<Request>;

    /// Are this level's recorded operations store operations, which the
    /// linearizability checker judges and `--export-histories` writes?
    fn store_histories(&self) -> bool;
}

/// The rules of `level`: the one registration of a level in the runner.
pub fn rules(level: Level) -> &'static dyn LevelRules {
    match level {
        Level::Store => &store::StoreRules,
        Level::Agent => &agent::AgentRules,
        Level::Idem => &idem::IdemRules,
    }
}
