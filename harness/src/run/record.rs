//! Recording operations with their instants, and random concurrent workloads.
//!
//! A linearizability check is only as good as its instants: an operation's
//! interval must contain the moment the target really executed it. So the
//! invoke instant is taken immediately before the call is handed to the
//! target, the return instant immediately after the answer arrives, both
//! from one monotonic clock ([`Clock`]) shared by every task of a history.
//! Widening an interval only makes the check more permissive (never a false
//! alarm), which is why the clock is read outside the call, never inside.
//!
//! [`random_history`] drives a target with concurrent clients issuing
//! random operations over a few sessions: the workload of the checker
//! benchmark, recorded exactly as the runner records `parallel:` groups.

use std::sync::Arc;
use std::time::Instant;

use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};
use serde_json::{json, Value};

use reqkey_model::rules::{KeyRule, RuleVariant};
use reqkey_model::seq::{answer_to_wire, SeqStore, StoreOp, StoreReply};
use reqkey_model::CommitOutcome;

use crate::targets::{Target, TargetError};
use reqkey_check::lin::Operation;

/// One monotonic clock per history; instants are ns since its creation.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    origin: Instant,
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock {
    pub fn new() -> Self {
        Self {
            origin: Instant::now(),
        }
    }

    /// Nanoseconds since the clock was created (saturating at `u64::MAX`).
    pub fn now_ns(&self) -> u64 {
        self.ns_at(Instant::now())
    }

    /// Nanoseconds from the clock's origin to `at` (0 if `at` is earlier).
    pub fn ns_at(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.origin).as_nanos()).unwrap_or(u64::MAX)
    }
}

/// Runs one store call, bounded by `timeout_ms`, and records it. A call
/// that fails to be judged (unreachable, timeout) is recorded without an
/// answer: it may or may not have taken effect. The error is returned
/// alongside for the caller.
pub async fn timed_store_call(
    target: &dyn Target,
    clock: &Clock,
    client: &str,
    request: Value,
    timeout_ms: u64,
) -> (Operation, Result<Value, TargetError>) {
    let invoke_ns = clock.now_ns();
    let result = match tokio::time::timeout(
        std::time::Duration::from_millis(timeout_ms),
        target.store_call(&request),
    )
    .await
    {
        Ok(result) => result,
        Err(_) => Err(TargetError::Timeout { timeout_ms }),
    };
    let return_ns = clock.now_ns();
    let answer = result.as_ref().ok().cloned();
    (
        Operation {
            client: client.to_owned(),
            request,
            invoke_ns,
            return_ns,
            answer,
        },
        result,
    )
}

/// The bound on each call of a random workload.
const CALL_TIMEOUT_MS: u64 = 10_000;

/// The shape of a random concurrent workload.
#[derive(Debug, Clone)]
pub struct Workload {
    pub clients: usize,
    pub sessions: usize,
    pub ops_total: usize,
    pub seed: u64,
    /// Prefix of the session ids, so that runs sharing a backend never
    /// touch each other's sessions.
    pub namespace: String,
}

/// Drives `target` with `clients` concurrent tasks, `ops_total` operations
/// in all, over `sessions` sessions, and returns the recorded history.
/// Every random choice derives from `seed` (the interleaving does not).
pub async fn random_history(
    target: Arc<dyn Target>,
    w: &Workload,
) -> Result<Vec<Operation>, TargetError> {
    let clock = Clock::new();
    let clients = w.clients.max(1);
    let per_client = w.ops_total / clients;
    let extra = w.ops_total % clients;
    let sessions: Vec<String> = (0..w.sessions.max(1))
        .map(|j| format!("{}-s{j}", w.namespace))
        .collect();
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..clients {
        let target = Arc::clone(&target);
        let sessions = sessions.clone();
        let n = per_client + usize::from(c < extra);
        let seed = w
            .seed
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .wrapping_add(c as u64);
        tasks.spawn(async move {
            let mut client = RandomClient::new(c, seed, sessions);
            let name = format!("c{c}");
            let mut ops = Vec::with_capacity(n);
            for _ in 0..n {
                let request = client.next_request();
                let (op, result) =
                    timed_store_call(target.as_ref(), &clock, &name, request, CALL_TIMEOUT_MS)
                        .await;
                let answer = result?;
                client.observe(&op.request, &answer);
                ops.push(op);
                // An in-process store answers without ever suspending; let
                // the other clients in between, or they would run in turn.
                tokio::task::yield_now().await;
            }
            Ok::<_, TargetError>(ops)
        });
    }
    let mut history = Vec::with_capacity(w.ops_total);
    while let Some(joined) = tasks.join_next().await {
        let ops = joined.map_err(|e| TargetError::Unreachable(format!("client task: {e}")))??;
        history.extend(ops);
    }
    history.sort_by_key(|o| o.invoke_ns);
    Ok(history)
}

/// How the store of a [`simulated_history`] behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimulatedStore {
    /// Every operation takes effect at one instant inside its interval,
    /// as the spec says: the history is linearizable by construction.
    Correct,
    /// As [`SimulatedStore::Correct`], except that once, after 90% of the
    /// operations, a commit whose key another run of the session holds is
    /// decided without the key rule (a racy store's symptom: `started`
    /// where the spec answers `request_key_taken`, and the run written).
    SkipsKeyRuleOnce,
}

/// Time bounds of the simulation, in ns: from invocation to the instant
/// the op takes effect, from there to the return, and between a return
/// and the client's next invocation.
const SIM_TO_EFFECT_NS: (u64, u64) = (500, 20_000);
const SIM_TO_RETURN_NS: (u64, u64) = (500, 20_000);
const SIM_THINK_NS: (u64, u64) = (0, 4_000);

/// A concurrent history without a target: `w.clients` simulated clients
/// (the same random clients as [`random_history`]) issue `w.ops_total`
/// operations over `w.sessions` sessions; each op takes effect on the
/// spec ([`SeqStore`]) at a random instant inside its interval. Everything,
/// instants included, derives from `w.seed`, so the history is the same on
/// every machine: the input of `reqkey bench lin`.
pub fn simulated_history(w: &Workload, store: SimulatedStore) -> Vec<Operation> {
    let clients = w.clients.max(1);
    let sessions: Vec<String> = (0..w.sessions.max(1))
        .map(|j| format!("{}-s{j}", w.namespace))
        .collect();
    let mut sim = Simulation {
        rng: Xoshiro256PlusPlus::seed_from_u64(w.seed ^ 0x5157_0000_0000_0001),
        random: (0..clients)
            .map(|c| {
                let seed = w
                    .seed
                    .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                    .wrapping_add(c as u64);
                RandomClient::new(c, seed, sessions.clone())
            })
            .collect(),
        in_flight: (0..clients).map(|_| None).collect(),
        left: (0..clients)
            .map(|c| w.ops_total / clients + usize::from(c < w.ops_total % clients))
            .collect(),
        events: std::collections::BinaryHeap::new(),
        tie: 0,
    };
    for c in 0..clients {
        let at = sim.between(SIM_THINK_NS);
        sim.invoke(c, at);
    }
    let mut spec = SeqStore::new();
    let mut history = Vec::with_capacity(w.ops_total);
    let bug_after = w.ops_total - w.ops_total / 10;
    let mut bug_pending = store == SimulatedStore::SkipsKeyRuleOnce;
    while let Some(std::cmp::Reverse((at, _, c, is_effect))) = sim.events.pop() {
        if is_effect {
            let Some((o, op)) = sim.in_flight[c].as_mut() else {
                continue;
            };
            let answer = match op {
                StoreOp::CommitRunStart(a)
                    if bug_pending && history.len() >= bug_after && {
                        let start = &a.start_run;
                        start.request_key.as_deref().is_some_and(|k| {
                            spec.session(&start.session_id)
                                .and_then(|s| s.run_by_request_key(k))
                                .is_some_and(|holder| holder.run_id != start.run_id)
                        })
                    } =>
                {
                    let variant = RuleVariant {
                        key_rule: KeyRule::Absent,
                        replay_first: true,
                    };
                    let result = spec.commit_variant(&a.start_run, variant);
                    bug_pending = !matches!(&result, Ok(r) if r.outcome == CommitOutcome::Started);
                    result.map(StoreReply::Commit)
                }
                _ => spec.apply(op),
            };
            o.answer = Some(answer_to_wire(&answer));
            let back = at + sim.between(SIM_TO_RETURN_NS);
            sim.push(back, c, false);
        } else {
            let Some((mut o, _)) = sim.in_flight[c].take() else {
                continue;
            };
            o.return_ns = at;
            if let Some(answer) = &o.answer {
                sim.random[c].observe(&o.request, answer);
            }
            history.push(o);
            let next = at + sim.between(SIM_THINK_NS);
            sim.invoke(c, next);
        }
    }
    history.sort_by_key(|o| o.invoke_ns);
    history
}

/// The state of a [`simulated_history`] between events.
#[derive(Debug)]
struct Simulation {
    rng: Xoshiro256PlusPlus,
    random: Vec<RandomClient>,
    /// Per client: the op in flight (its answer set once it took effect).
    in_flight: Vec<Option<(Operation, StoreOp)>>,
    /// Per client: ops still to issue.
    left: Vec<usize>,
    /// (instant, tie-breaker, client, is the effect (else the return)).
    events: std::collections::BinaryHeap<std::cmp::Reverse<(u64, u64, usize, bool)>>,
    tie: u64,
}

impl Simulation {
    fn between(&mut self, (lo, hi): (u64, u64)) -> u64 {
        self.rng.random_range(lo..=hi)
    }

    fn push(&mut self, at: u64, c: usize, is_effect: bool) {
        self.tie += 1;
        self.events
            .push(std::cmp::Reverse((at, self.tie, c, is_effect)));
    }

    /// Client `c` issues its next op at `at`, if it has one left.
    fn invoke(&mut self, c: usize, at: u64) {
        if self.left[c] == 0 {
            return;
        }
        self.left[c] -= 1;
        let request = self.random[c].next_request();
        // The random clients only send well-formed requests.
        let Ok(op) = StoreOp::from_wire(&request) else {
            return;
        };
        let effect = at + self.between(SIM_TO_EFFECT_NS);
        self.in_flight[c] = Some((
            Operation {
                client: format!("c{c}"),
                request,
                invoke_ns: at,
                return_ns: 0,
                answer: None,
            },
            op,
        ));
        self.push(effect, c, true);
    }
}

/// One client's random choices: mostly commits that can succeed (it
/// remembers the last current run it saw), reads, status changes, keys
/// from a small set so that they collide, and rare deletes.
#[derive(Debug)]
struct RandomClient {
    id: usize,
    rng: Xoshiro256PlusPlus,
    sessions: Vec<String>,
    /// Last current run seen per session.
    current: Vec<Option<String>>,
    /// Runs this client started per session (for replays and statuses).
    mine: Vec<Vec<String>>,
    next_run: usize,
}

const KEYS: [&str; 4] = ["k0", "k1", "k2", "k3"];
const STATUSES: [&str; 4] = ["suspended_input", "running", "completed", "failed"];

impl RandomClient {
    fn new(id: usize, seed: u64, sessions: Vec<String>) -> Self {
        let n = sessions.len();
        Self {
            id,
            rng: Xoshiro256PlusPlus::seed_from_u64(seed),
            sessions,
            current: vec![None; n],
            mine: vec![Vec::new(); n],
            next_run: 0,
        }
    }

    fn next_request(&mut self) -> Value {
        let j = self.rng.random_range(0..self.sessions.len());
        let session = self.sessions[j].clone();
        let roll = self.rng.random_range(0..100u32);
        let known = |c: &mut Self| -> Option<String> {
            let runs = &c.mine[j];
            (!runs.is_empty()).then(|| runs[c.rng.random_range(0..runs.len())].clone())
        };
        match roll {
            0..=34 => {
                self.next_run += 1;
                let run_id = format!("c{}-r{}", self.id, self.next_run);
                let mut start = json!({
                    "sessionId": session,
                    "runId": run_id,
                    "expectedCurrentRunId": self.current[j],
                    "input": {"text": format!("t{}", self.rng.random_range(0..3u8))},
                });
                if self.rng.random_bool(0.5) {
                    let key = KEYS[self.rng.random_range(0..KEYS.len())];
                    start["requestKey"] = json!(key);
                    start["requestDigest"] = json!(format!("d-{key}"));
                }
                json!({"op": "commitRunStart", "args": {"startRun": start}})
            }
            35..=49 => json!({"op": "getCurrentRun", "args": {"sessionId": session}}),
            50..=59 => {
                let key = KEYS[self.rng.random_range(0..KEYS.len())];
                json!({"op": "getRunByRequestKey", "args": {"sessionId": session, "requestKey": key}})
            }
            60..=69 => match known(self) {
                Some(run_id) => {
                    json!({"op": "getRun", "args": {"sessionId": session, "runId": run_id}})
                }
                None => json!({"op": "listRuns", "args": {"sessionId": session}}),
            },
            70..=77 => json!({"op": "listRuns", "args": {"sessionId": session}}),
            78..=84 => json!({"op": "listInputs", "args": {"sessionId": session}}),
            85..=98 => match known(self) {
                Some(run_id) => {
                    let status = STATUSES[self.rng.random_range(0..STATUSES.len())];
                    json!({"op": "setRunStatus", "args": {"sessionId": session, "runId": run_id, "status": status}})
                }
                None => json!({"op": "getCurrentRun", "args": {"sessionId": session}}),
            },
            _ => json!({"op": "deleteSession", "args": {"sessionId": session}}),
        }
    }

    fn observe(&mut self, request: &Value, answer: &Value) {
        let Some(j) = request["args"]
            .get("sessionId")
            .or_else(|| request["args"]["startRun"].get("sessionId"))
            .and_then(Value::as_str)
            .and_then(|s| self.sessions.iter().position(|x| x == s))
        else {
            return;
        };
        match request["op"].as_str() {
            Some("commitRunStart") => {
                if let Some(run) = answer["ok"].get("run") {
                    if let Some(id) = run["runId"].as_str() {
                        self.current[j] = Some(id.to_owned());
                        if answer["ok"]["outcome"] == "started" {
                            self.mine[j].push(id.to_owned());
                        }
                    }
                } else if let Some(cur) = answer["error"]["details"].get("currentRunId") {
                    self.current[j] = cur.as_str().map(str::to_owned);
                }
            }
            Some("getCurrentRun") => {
                self.current[j] = answer["ok"]["runId"].as_str().map(str::to_owned);
            }
            Some("deleteSession") => {
                self.current[j] = None;
                self.mine[j].clear();
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use reqkey_check::lin::{check, Verdict};

    fn workload(clients: usize, ops_total: usize, seed: u64) -> Workload {
        Workload {
            clients,
            sessions: 1,
            ops_total,
            seed,
            namespace: "t".into(),
        }
    }

    #[test]
    fn a_simulated_history_is_fixed_by_its_seed() {
        let w = workload(8, 300, 7);
        let a = simulated_history(&w, SimulatedStore::Correct);
        let b = simulated_history(&w, SimulatedStore::Correct);
        assert_eq!(a, b);
        assert_eq!(a.len(), 300);
        let c = simulated_history(&workload(8, 300, 8), SimulatedStore::Correct);
        assert_ne!(a, c);
    }

    #[test]
    fn the_correct_simulation_is_linearizable_and_the_buggy_one_is_not() {
        for (clients, seed) in [(8, 1), (16, 2), (16, 3)] {
            let w = workload(clients, 2_000, seed);
            let ok = check(&simulated_history(&w, SimulatedStore::Correct));
            assert!(
                ok.verdict.is_linearizable(),
                "{clients}/{seed}: {:?}",
                ok.verdict
            );
            let bad = check(&simulated_history(&w, SimulatedStore::SkipsKeyRuleOnce));
            assert!(
                matches!(bad.verdict, Verdict::NotLinearizable(_)),
                "{clients}/{seed}: {:?}",
                bad.verdict
            );
        }
    }
}
