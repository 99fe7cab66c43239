//! Blame of a batch at the agent level (SPEC
//! `[[certify.blame.every-level]]`): where no order of a batch explains
//! its answers, which clauses to blame ([`batch_blame`], by the orders
//! that got furthest). The model (`agent.rs`) names the clause an answer
//! alone breaks (`AgentModel::next`); this walks its orders with it.
//! `harness/src/run/fuzz/agent.rs` names the clauses in a failing
//! program's reason and `agent_scenario.rs` judges the same clauses in
//! its reproduction.

use crate::contract::agent::{explore_with, AgentModel};
use crate::contract::agent_exchange::{AgentOp, Observed};

/// Where no order of a batch explains its answers ([`next_batch`] is
/// empty): the clauses to blame, by counterfactual over its orders. Each
/// order is followed until an answer the model does not allow; the orders
/// that got furthest are the nearest explanations, and the clauses their
/// failing answers break (the ones [`AgentModel::next`] names) are blamed:
/// one clause where every such order fails on it, else all they name.
/// Empty where one of them names none (the caller names the routes).
pub fn batch_blame(states: &[AgentModel], ops: &[AgentOp], obs: &[Observed]) -> Vec<String> {
    let now = obs
        .iter()
        .map(|o| o.timing.map_or(u64::MAX, |t| t.return_ms))
        .max()
        .unwrap_or(u64::MAX);
    let mut nearest = Nearest::default();
    for state in states {
        let mut out = Vec::new();
        explore_blamed(
            state,
            (ops, obs, now),
            &mut vec![false; ops.len()],
            &mut out,
            &mut nearest,
        );
        if !out.is_empty() {
            return Vec::new();
        }
    }
    if nearest.failures.iter().any(Vec::is_empty) {
        return Vec::new();
    }
    let common: Vec<String> = nearest
        .failures
        .first()
        .map(|first| {
            first
                .iter()
                .filter(|c| nearest.failures.iter().all(|f| f.contains(c)))
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    if !common.is_empty() {
        return common;
    }
    let mut all: Vec<String> = Vec::new();
    for c in nearest.failures.into_iter().flatten() {
        if !all.contains(&c) {
            all.push(c);
        }
    }
    all
}

/// The furthest an order of a batch got, and the clauses named by each
/// failing answer at that depth (bounded: the first few dozen).
#[derive(Default)]
struct Nearest {
    depth: usize,
    failures: Vec<Vec<String>>,
}

const NEAREST_MAX: usize = 64;

impl Nearest {
    /// An order failed at `depth` (answers explained before it) on `why`.
    fn record(&mut self, depth: usize, why: &str) {
        if depth > self.depth {
            self.depth = depth;
            self.failures.clear();
        }
        if depth == self.depth && self.failures.len() < NEAREST_MAX {
            self.failures.push(named_clauses(why));
        }
    }
}

/// The `[[id]]` clauses a message of [`AgentModel::next`] names.
fn named_clauses(message: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = message;
    while let Some(open) = rest.find("[[") {
        let after = &rest[open + 2..];
        let Some(close) = after.find("]]") else { break };
        for id in after[..close].split(',').map(str::trim) {
            if !id.is_empty() && !out.iter().any(|c: &String| c == id) {
                out.push(id.to_owned());
            }
        }
        rest = &after[close..];
    }
    out
}

fn explore_blamed(
    state: &AgentModel,
    walk: (&[AgentOp], &[Observed], u64),
    done: &mut Vec<bool>,
    out: &mut Vec<AgentModel>,
    nearest: &mut Nearest,
) {
    explore_with(state, walk, done, out, &mut |depth, why| {
        nearest.record(depth, why);
    });
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::contract::agent::{answered_as_held, blame, Expect};
    use serde_json::{json, Value};

    fn obs(status: u16, body: Value) -> Observed {
        Observed {
            status,
            json: Some(body),
            ..Observed::default()
        }
    }

    #[test]
    fn the_clauses_a_message_names_are_read_in_order_once() {
        assert_eq!(
            named_clauses("x [[a.b]] y [[c.d, a.b]] z [[e.f"),
            ["a.b", "c.d"]
        );
        assert!(named_clauses("the spec allows 201 started").is_empty());
    }

    #[test]
    fn a_keyed_409_naming_another_run_breaks_the_run_id_clause_alone() {
        let expected = [Expect::Refused {
            status: 409,
            code: "state_request_key_conflict",
            run_id: Some("r1".into()),
        }];
        let answered = obs(
            409,
            json!({"code": "state_request_key_conflict", "runId": "r2"}),
        );
        assert_eq!(
            blame(&expected, true, &answered),
            ["agent.keys.conflict-run-id"]
        );
        // Another code: the plan row that should have answered.
        let other = obs(409, json!({"code": "state_already_running"}));
        assert_eq!(blame(&expected, true, &other), ["plan.row.key-conflict"]);
    }

    #[test]
    fn an_entry_answered_attached_without_a_holder_breaks_the_first_plan_row() {
        let attached = obs(200, json!({"status": "attached", "runId": "r1"}));
        assert!(answered_as_held(&attached));
        // The model expected a 404 (no session): still the plan's first row.
        let expected = [Expect::NotFound(&["state_session_not_found"])];
        assert_eq!(blame(&expected, true, &attached), ["plan.row.new"]);
        // A keyless entry (or keys ignored) does not plan: the refusal's clause.
        assert_eq!(
            blame(&expected, false, &attached),
            ["agent.refusal.not-found"]
        );
        // Nothing expected but a run: no clause of these (the route's).
        assert!(blame(&[], false, &obs(500, json!({}))).is_empty());
    }
}
