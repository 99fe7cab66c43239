//! Why a history is not linearizable, named the way Elle names anomalies:
//! the first answer no order can give, what the spec answers in its place,
//! and the rule of SPEC 4 that forbids it, with its clause.
//!
//! Why a separate pass: the linearizability search ([`crate::lin`]) finds
//! that no order exists and shrinks the history to a small failing subset,
//! but "not linearizable" does not tell a store author which rule their
//! store broke; a store without the key holder rule was told
//! `[[store.commit.atomic]]`. This pass replays the small subset through
//! the sequential spec ([`SeqStore`]) in every order real time allows,
//! keeps the order that explains the most answers, and names the answer
//! that order cannot give and the rule whose decision differs. It is
//! bounded ([`MAX_EXPLAIN_STEPS`]); past the bound, or when no single rule
//! decides, it says nothing and the caller keeps the general clause.

use reqkey_model::seq::{answer_to_wire, SeqStore, StoreOp, StoreReply};
use reqkey_model::{CommitOutcome, RunStartRejection, StoreError};
use serde_json::Value;

use crate::lin::{answer_conforms, summarize_answer, summarize_request, Operation};

/// The most orders' steps one explanation tries (a minimal subset has a
/// handful of operations; this bounds a larger one).
pub const MAX_EXPLAIN_STEPS: u64 = 200_000;

/// The first answer no order can give, and the rule that forbids it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Anomaly {
    /// Its index in the given operations.
    pub index: usize,
    /// The operations linearized before it, by index, in that order.
    pub before: Vec<usize>,
    /// The operation, summarized (`commitRunStart s r2 key k`).
    pub request: String,
    /// What it answered, summarized.
    pub observed: String,
    /// What the spec answers there instead, summarized.
    pub spec: String,
    /// The clause of the rule (`store.commit.key-holder`).
    pub clause: &'static str,
    /// The rule in words.
    pub rule: &'static str,
}

impl std::fmt::Display for Anomaly {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let before = if self.before.is_empty() {
            "first, before any other".to_owned()
        } else {
            format!(
                "after {}",
                self.before
                    .iter()
                    .map(|i| format!("#{i}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        write!(
            f,
            "the first answer no order can give: #{} {} answered {}; placed {before} (the order that explains the most answers), the spec answers {} [[{}]]",
            self.index, self.request, self.observed, self.spec, self.clause
        )
    }
}

/// The rule whose decision differs between the spec's answer and the
/// observed one, for `op`.
fn rule_of(
    op: &StoreOp,
    spec: &Result<StoreReply, StoreError>,
    observed: &Value,
) -> (&'static str, &'static str) {
    let observed = StoreError::from_wire(observed.get("error").unwrap_or(&Value::Null));
    let rejected = |r: &Result<StoreReply, StoreError>| match r {
        Err(StoreError::RunStartRejected(why)) => Some(why.cause()),
        _ => None,
    };
    let observed_cause = match &observed {
        Some(StoreError::RunStartRejected(why)) => Some(why.cause()),
        _ => None,
    };
    let either = |cause: &str| rejected(spec) == Some(cause) || observed_cause == Some(cause);
    let key_taken = RunStartRejection::RequestKeyTaken {
        existing_run_id: String::new(),
    }
    .cause();
    let cas = RunStartRejection::CasMismatch {
        current_run_id: None,
    }
    .cause();
    let conflict = RunStartRejection::RunIdConflict {
        existing_run_id: String::new(),
    }
    .cause();
    match op {
        StoreOp::CommitRunStart(_) if either(key_taken) => (
            "store.commit.key-holder",
            "the key holder rule: a commit whose key another run of the session holds is refused with request_key_taken, and one whose key no run holds is not",
        ),
        StoreOp::CommitRunStart(_) if either(conflict) => (
            "store.commit.run-id-conflict",
            "the same-runId rule: a commit under an existing run id with a different digest is refused with run_id_conflict",
        ),
        StoreOp::CommitRunStart(_) if either(cas) => (
            "store.commit.cas",
            "the compare-and-set rule: a commit whose expected current run is not the session's current run is refused with cas_mismatch",
        ),
        StoreOp::CommitRunStart(_)
            if matches!(spec, Ok(StoreReply::Commit(c)) if c.outcome == CommitOutcome::Replayed) =>
        {
            (
                "store.commit.replay",
                "the replay rule: a commit repeating an existing run's id and digest is replayed and writes nothing",
            )
        }
        StoreOp::CommitRunStart(_) => (
            "store.commit.atomic",
            "the commit is one atomic step: its answer reflects every commit before it",
        ),
        StoreOp::SetRunStatus(_) => (
            "store.write.status-finished-refuses",
            "a finished run refuses every status change, and a live one takes it",
        ),
        StoreOp::DeleteSession(_) => (
            "store.delete-session.once",
            "a session is deleted once: a second delete answers deleted: false",
        ),
        StoreOp::GetRun(_) => (
            "store.reads.get-run",
            "getRun reads the run as every write before it left it",
        ),
        StoreOp::GetCurrentRun(_) => (
            "store.reads.current-run",
            "getCurrentRun reads the run the last commit made current",
        ),
        StoreOp::ListRuns(_) => (
            "store.reads.list-runs-order",
            "listRuns reads every run of the session, in start order",
        ),
        StoreOp::GetRunByRequestKey(_) => (
            "store.reads.by-key",
            "getRunByRequestKey reads the one run that holds the key",
        ),
        StoreOp::ListInputs(_) => (
            "store.reads.list-inputs",
            "listInputs reads the input of every started run, in order",
        ),
    }
}

/// One operation, parsed for the replay.
struct Step<'a> {
    index: usize,
    op: StoreOp,
    request: &'a Value,
    /// `None`: it never answered (it may have taken effect or not).
    answer: Option<&'a Value>,
    invoke_ns: u64,
    end_ns: u64,
}

/// The deepest dead end found so far: the order before it and the
/// operations that could come next but whose answers the spec does not
/// give there.
struct Best {
    before: Vec<usize>,
    blocked: Vec<(usize, Result<StoreReply, StoreError>)>,
}

struct Search<'a> {
    steps: Vec<Step<'a>>,
    budget: u64,
    best: Option<Best>,
}

impl Search<'_> {
    /// Tries every order real time allows from `state`; `true` when one
    /// explains every answer (the subset is linearizable after all).
    fn go(&mut self, state: &SeqStore, done: &mut Vec<usize>, left: &mut Vec<usize>) -> bool {
        if left.is_empty() {
            return true;
        }
        // Only an operation invoked before every other left one returned
        // may come next.
        let first_end = left
            .iter()
            .map(|&i| self.steps[i].end_ns)
            .min()
            .unwrap_or(u64::MAX);
        let mut blocked = Vec::new();
        for k in 0..left.len() {
            if self.budget == 0 {
                return false;
            }
            self.budget -= 1;
            let i = left[k];
            if self.steps[i].invoke_ns > first_end {
                continue;
            }
            let mut next = state.clone();
            let spec = next.apply(&self.steps[i].op);
            let fits = self.steps[i]
                .answer
                .is_none_or(|a| answer_conforms(self.steps[i].request, &spec, a));
            if !fits {
                blocked.push((i, spec));
                continue;
            }
            left.remove(k);
            done.push(i);
            let all = self.go(&next, done, left);
            done.pop();
            left.insert(k, i);
            if all {
                return true;
            }
        }
        if !blocked.is_empty()
            && self
                .best
                .as_ref()
                .is_none_or(|b| done.len() > b.before.len())
        {
            self.best = Some(Best {
                before: done.clone(),
                blocked,
            });
        }
        false
    }
}

/// The first answer no order of `ops` can give (`ops`: a failing subset,
/// in the history's order, with their indices in the file), or `None`
/// when the subset cannot be explained this way within
/// [`MAX_EXPLAIN_STEPS`] (a malformed request, a budget spent, an order
/// found after all).
pub fn first_impossible_answer(ops: &[(usize, &Operation)]) -> Option<Anomaly> {
    let mut steps = Vec::with_capacity(ops.len());
    for (k, (_, o)) in ops.iter().enumerate() {
        steps.push(Step {
            index: k,
            op: StoreOp::from_wire(&o.request).ok()?,
            request: &o.request,
            answer: o.answer.as_ref(),
            invoke_ns: o.invoke_ns,
            end_ns: if o.answer.is_some() {
                o.return_ns
            } else {
                u64::MAX
            },
        });
    }
    let mut search = Search {
        steps,
        budget: MAX_EXPLAIN_STEPS,
        best: None,
    };
    let mut left: Vec<usize> = (0..ops.len()).collect();
    if search.go(&SeqStore::new(), &mut Vec::new(), &mut left) || search.budget == 0 {
        return None;
    }
    let best = search.best?;
    // Of the answers blocked there, the first to return is the first no
    // order can give: every order must place it before the later ones.
    let (k, spec) = best
        .blocked
        .into_iter()
        .min_by_key(|(k, _)| (search.steps[*k].end_ns, *k))?;
    let step = &search.steps[k];
    let observed = step.answer?;
    let (clause, rule) = rule_of(&step.op, &spec, observed);
    Some(Anomaly {
        index: ops[step.index].0,
        before: best.before.iter().map(|&b| ops[b].0).collect(),
        request: summarize_request(step.request),
        observed: summarize_answer(observed),
        spec: summarize_answer(&answer_to_wire(&spec)),
        clause,
        rule,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn commit(client: &str, run: &str, at: u64, answer: Value) -> Operation {
        Operation {
            client: client.into(),
            request: json!({"op": "commitRunStart", "args": {"startRun": {
                "sessionId": "s", "runId": run,
                "input": {"text": run}, "requestKey": "k", "requestDigest": "d"}}}),
            invoke_ns: at,
            return_ns: at + 10,
            answer: Some(answer),
        }
    }

    fn started(run: &str) -> Value {
        json!({"ok": {"outcome": "started", "run": {"sessionId": "s", "runId": run,
            "status": "running", "startSequence": 1, "requestKey": "k", "requestDigest": "d"}}})
    }

    #[test]
    fn two_winners_of_one_key_break_the_key_holder_rule() {
        // Sequential: r1 started, then r2 with the same key also started.
        let a = commit("a", "r1", 0, started("r1"));
        let b = commit("b", "r2", 100, started("r2"));
        let found = first_impossible_answer(&[(4, &a), (9, &b)]).unwrap();
        assert_eq!(found.index, 9);
        assert_eq!(found.before, vec![4]);
        assert_eq!(found.clause, "store.commit.key-holder");
        assert!(found.spec.contains("request_key_taken"), "{}", found.spec);
        assert!(found.to_string().contains("[[store.commit.key-holder]]"));
    }

    #[test]
    fn two_keyless_starts_from_no_current_run_break_the_cas_rule() {
        let keyless = |client: &str, run: &str, at: u64| Operation {
            client: client.into(),
            request: json!({"op": "commitRunStart", "args": {"startRun": {
                "sessionId": "s", "runId": run, "input": {"text": run}}}}),
            invoke_ns: at,
            return_ns: at + 10,
            answer: Some(
                json!({"ok": {"outcome": "started", "run": {"sessionId": "s",
                "runId": run, "status": "running", "startSequence": 1}}}),
            ),
        };
        let (a, b) = (keyless("a", "r1", 0), keyless("b", "r2", 100));
        let found = first_impossible_answer(&[(0, &a), (1, &b)]).unwrap();
        assert_eq!((found.index, found.clause), (1, "store.commit.cas"));
        assert!(found.spec.contains("cas_mismatch"), "{}", found.spec);
    }

    #[test]
    fn a_linearizable_subset_has_no_anomaly() {
        let a = commit("a", "r1", 0, started("r1"));
        let taken = json!({"error": {"kind": "run_start_rejected", "cause": "request_key_taken",
            "message": "m", "details": {"existingRunId": "r1"}}});
        let b = commit("b", "r2", 100, taken);
        assert_eq!(first_impossible_answer(&[(0, &a), (1, &b)]), None);
    }
}
