//! The store's sequential specification as a stateright [`SequentialSpec`].
//!
//! [`SeqStore`] is the oracle; this module is its stateright-compatible
//! face, so that a recorded history of concurrent store calls can be
//! checked with stateright's `LinearizabilityTester` (the harness has its
//! own checker that calls `SeqStore` directly; both agree because both ask
//! the same oracle).
//!
//! Answers are compared the way the wire protocol means them: an error
//! matches by kind (and, for a refused commit, by cause and details); the
//! free-text `message` of the other kinds is an implementation's own
//! business and never compared.

use stateright::semantics::SequentialSpec;

use crate::contract::error::StoreError;
use crate::contract::seq::{SeqStore, StoreOp, StoreReply};

/// What a store operation answers.
pub type StoreAnswer = Result<StoreReply, StoreError>;

/// A store, sequentially, as a stateright reference object.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct StoreSpec(pub SeqStore);

impl StoreSpec {
    pub fn new() -> Self {
        Self::default()
    }
}

/// Whether two answers mean the same on the wire (messages aside).
pub fn same_answer(a: &StoreAnswer, b: &StoreAnswer) -> bool {
    match (a, b) {
        (Ok(x), Ok(y)) => x == y,
        (Err(StoreError::RunStartRejected(x)), Err(StoreError::RunStartRejected(y))) => x == y,
        (Err(x), Err(y)) => x.kind() == y.kind(),
        _ => false,
    }
}

impl SequentialSpec for StoreSpec {
    type Op = StoreOp;
    type Ret = StoreAnswer;

    fn invoke(&mut self, op: &StoreOp) -> StoreAnswer {
        self.0.apply(op)
    }

    fn is_valid_step(&mut self, op: &StoreOp, ret: &StoreAnswer) -> bool {
        let expected = self.0.apply(op);
        same_answer(&expected, ret)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::contract::error::RunStartRejection;
    use crate::contract::seq::CommitArgs;
    use crate::contract::types::{CommitOutcome, CommitResult, RunMetadata, RunStatus, StartRun};
    use serde_json::json;
    use stateright::semantics::{ConsistencyTester, LinearizabilityTester};

    fn commit(run: &str) -> StoreOp {
        StoreOp::CommitRunStart(CommitArgs {
            start_run: StartRun {
                session_id: "s".into(),
                run_id: run.into(),
                expected_current_run_id: None,
                input: json!({"text": "a"}),
                request_key: Some("k".into()),
                request_digest: Some("d".into()),
            },
        })
    }

    fn started(run: &str) -> StoreAnswer {
        Ok(StoreReply::Commit(CommitResult {
            outcome: CommitOutcome::Started,
            run: RunMetadata {
                session_id: "s".into(),
                run_id: run.into(),
                status: RunStatus::Running,
                start_sequence: 1,
                request_key: Some("k".into()),
                request_digest: Some("d".into()),
            },
        }))
    }

    fn taken(holder: &str) -> StoreAnswer {
        Err(RunStartRejection::RequestKeyTaken {
            existing_run_id: holder.into(),
        }
        .into())
    }

    #[test]
    fn a_race_where_the_loser_names_the_winner_is_linearizable() {
        let mut t = LinearizabilityTester::new(StoreSpec::new());
        t.on_invoke(0, commit("r1")).unwrap();
        t.on_invoke(1, commit("r2")).unwrap();
        t.on_return(1, taken("r1")).unwrap();
        t.on_return(0, started("r1")).unwrap();
        assert!(t.is_consistent());
    }

    #[test]
    fn two_winners_are_not_linearizable() {
        let mut t = LinearizabilityTester::new(StoreSpec::new());
        t.on_invoke(0, commit("r1")).unwrap();
        t.on_invoke(1, commit("r2")).unwrap();
        t.on_return(0, started("r1")).unwrap();
        t.on_return(1, started("r2")).unwrap();
        assert!(!t.is_consistent());
    }

    #[test]
    fn a_loser_naming_a_run_that_never_won_is_not_linearizable() {
        let mut t = LinearizabilityTester::new(StoreSpec::new());
        t.on_invret(0, commit("r1"), started("r1")).unwrap();
        t.on_invret(1, commit("r2"), taken("r9")).unwrap();
        assert!(!t.is_consistent());
    }

    #[test]
    fn error_messages_are_not_compared() {
        let a: StoreAnswer = Err(StoreError::NotFound("one wording".into()));
        let b: StoreAnswer = Err(StoreError::NotFound("another".into()));
        assert!(same_answer(&a, &b));
        assert!(!same_answer(&a, &Err(StoreError::Internal("x".into()))));
        assert!(!same_answer(&taken("r1"), &taken("r2")));
    }
}
