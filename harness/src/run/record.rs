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

use crate::check::lin::Operation;
use crate::target::{Target, TargetError};

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
