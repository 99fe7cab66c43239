//! The checker's words: an operation of a history, the options of a check,
//! its verdict and report, and a counterexample as a reader sees it.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The default search budget (steps across all partitions).
pub const DEFAULT_BUDGET_STEPS: u64 = 2_000_000;

/// The most threads one check starts, whatever `CheckOptions::threads`
/// asks.
pub const MAX_THREADS: usize = 64;

/// The least budget of one trial search while minimizing.
pub(super) const MIN_CHECK_STEPS: u64 = 10_000;

/// One completed (or unanswered) operation of a history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Operation {
    /// Who issued it (`c.3`, `client 2`): only for the report.
    pub client: String,
    /// The raw request `{"op", "args"}`, possibly malformed on purpose.
    pub request: Value,
    /// Monotonic instant of the invocation, in nanoseconds.
    pub invoke_ns: u64,
    /// Monotonic instant of the return, in nanoseconds (ignored when
    /// `answer` is `None`).
    pub return_ns: u64,
    /// The wire answer `{"ok": ..}` / `{"error": ..}`; `None` when the call
    /// never answered (timeout): it may or may not have taken effect.
    pub answer: Option<Value>,
}

impl Operation {
    pub(super) fn end_ns(&self) -> u64 {
        if self.answer.is_some() {
            self.return_ns
        } else {
            u64::MAX
        }
    }
}

/// Options of a check.
#[derive(Debug, Clone, Copy)]
pub struct CheckOptions {
    /// The bound on search steps, for the check and (separately) for the
    /// minimization of a counterexample.
    pub budget_steps: u64,
    /// Whether to shrink a counterexample (costs further searches).
    pub minimize: bool,
    /// Threads checking partitions at once; 0: one per available core.
    /// The verdict is the same whatever the number (see the module docs).
    pub threads: usize,
    /// Asked every 65,536 steps of a search, shrinking or
    /// explanation: `true` stops it (a search is then no verdict, the
    /// shrinking and the explanation end where they are). `reqkey check
    /// history` passes its memory ceiling (`--max-memory-bytes`).
    pub over_memory: Option<fn() -> bool>,
}

impl Default for CheckOptions {
    fn default() -> Self {
        Self {
            budget_steps: DEFAULT_BUDGET_STEPS,
            minimize: true,
            threads: 0,
            over_memory: None,
        }
    }
}

/// The outcome of a check.
#[derive(Debug, Clone)]
pub enum Verdict {
    Linearizable,
    NotLinearizable(Box<Counterexample>),
    /// The budget ran out before a verdict.
    Unknown {
        reason: String,
    },
}

impl Verdict {
    pub fn is_linearizable(&self) -> bool {
        matches!(self, Verdict::Linearizable)
    }
}

/// What a check found, with its cost.
#[derive(Debug, Clone)]
pub struct CheckReport {
    pub verdict: Verdict,
    /// Search steps spent deciding (minimization excluded).
    pub steps: u64,
    /// Sessions the history was split into.
    pub partitions: usize,
    /// Configurations in the largest partition's cache (16 bytes each plus
    /// the hash table's overhead): the search's memory.
    pub largest_cache: usize,
    /// Threads that checked partitions (1 when the check was sequential).
    pub threads: usize,
}

/// Why a history is not linearizable, readably.
#[derive(Debug, Clone)]
pub struct Counterexample {
    /// The session whose sub-history fails (`None` for a lone bad op).
    pub session: Option<String>,
    /// What is wrong, in one sentence.
    pub reason: String,
    /// Indices (into the checked history) of the failing partition.
    pub partition: Vec<usize>,
    /// Indices of the smallest non-linearizable subset found.
    pub minimal: Vec<usize>,
    /// Indices in `minimal` counted as unanswered (in flight at the cut).
    pub minimal_in_flight: Vec<usize>,
    /// The failing partition as a timeline.
    pub timeline: String,
    /// The minimal subset as a timeline.
    pub minimal_timeline: String,
    /// Search steps spent shrinking (bounded by the check's budget).
    pub minimize_steps: u64,
    /// The first answer no order of the minimal subset can give and the
    /// rule that forbids it (`None`: not shrunk, or no single rule
    /// explains it within its bound).
    pub anomaly: Option<super::explain::Anomaly>,
    /// SPEC 4's atomicity clauses of the kinds of write in the minimal
    /// subset (`wire.store.concurrent` when it has none): what it breaks
    /// when no single rule explains it.
    pub atomicity: Vec<&'static str>,
}

impl fmt::Display for Counterexample {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "not linearizable: {}", self.reason)?;
        if let Some(s) = &self.session {
            writeln!(f, "session {s}, {} operations:", self.partition.len())?;
        }
        f.write_str(&self.timeline)?;
        writeln!(
            f,
            "smallest non-linearizable subset found ({} of {} operations):",
            self.minimal.len(),
            self.partition.len()
        )?;
        f.write_str(&self.minimal_timeline)
    }
}
