//! One distinct violation a fuzz pass proved, the record every report
//! renders: kept apart from the pass (`pass.rs`) so that the fuzzers that
//! find violations (`idem.rs`, `scale.rs`) and the pass that runs them do
//! not import each other.

use serde::{Deserialize, Serialize};

/// One distinct violation a fuzz pass proved: the clause blamed by
/// counterfactual (the clause whose rule, relaxed alone, lets the model
/// explain the answers; where no single one does, the smallest set that
/// does), the program that showed it, and its shrunk reproduction, replayed
/// against the target before it was written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FuzzViolation {
    /// The clause blamed (where a set is blamed, its first clause).
    pub clause: String,
    /// Every clause of the set blamed: `[clause]` when one clause alone
    /// explains the answers.
    pub clauses: Vec<String>,
    /// The program that showed it (its case and generated steps, one line).
    pub program: String,
    /// The request and the answer that break the clause, and the answer
    /// the relaxed clause would have allowed.
    pub message: String,
    /// The shrunk reproduction, a scenario.
    pub scenario_yaml: String,
    /// Whether the reproduction, replayed against the target before it was
    /// written, failed on the same clause.
    pub reproduced: bool,
    /// Where it did not reproduce: why (timing, load, another clause).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_reproduced: Option<String>,
}
