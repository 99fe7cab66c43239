//! `reqkey bench failover`: the kill-one-replica fault test (issue 17).
//!
//! Starts `replicas` `reqkey serve agent` processes (this binary) over one
//! store, on loopback, with a short lease; drives a bounded keyed load
//! (`requests` keyed starts, each in its own session, `concurrency` at a
//! time, each request sent first to the replica `i mod replicas`); once
//! `kill_after` requests have been answered it kills one replica with
//! SIGKILL (`kill -9`). A client whose attempt fails (connection refused or
//! reset, a timeout, a 5xx) retries the same request with the same key on
//! the next replica, a bounded number of times.
//!
//! Then it reads every session from a live replica until no run is
//! `running` (the killed replica's runs are interrupted once their leases
//! run out, SPEC 5 `[[lease.expire.any-reader]]`) and checks, per request:
//! exactly one run, carrying the request's key; exactly one input, the one
//! sent, of that run; every answer of every attempt named that run; the
//! run ended `completed` or `interrupted`; every live replica sees the
//! same runs. Any miss is counted (duplicates,
//! lost, doubled inputs, answers naming another run) and makes the command
//! exit 1.
//!
//! Every wait is bounded; the seed picks the killed replica and names the
//! sessions.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use reqkey_reference::store::redact_url;

/// What one failover run is made of.
#[derive(Debug, Clone)]
pub struct FailoverConfig {
    /// The store every replica opens (`postgres://...`, `redis://...`,
    /// `sqlite:PATH`).
    pub store: String,
    pub replicas: usize,
    pub requests: usize,
    pub concurrency: usize,
    /// `--lease-ms` of every replica.
    pub lease_ms: u64,
    /// How long each run executes (`[sleep:MS]`), so that runs are in
    /// flight when the replica dies.
    pub run_ms: u64,
    /// Answered requests before the kill.
    pub kill_after: usize,
    /// Bound on every single HTTP call, in ms.
    pub call_timeout_ms: u64,
    pub seed: u64,
}

/// What it measured.
#[derive(Debug, Clone, Default)]
pub struct FailoverFigures {
    pub store: String,
    pub replicas: usize,
    pub requests: usize,
    pub attempts: usize,
    /// Attempts that failed (the killed replica) and were retried elsewhere.
    pub failed_attempts: usize,
    /// Requests that needed a retry on another replica.
    pub retried_requests: usize,
    pub kills: usize,
    pub killed_replica: usize,
    /// Sessions with more than one run (a key that ran twice).
    pub duplicates: usize,
    /// Requests with no run or no input (lost), or never answered.
    pub lost: usize,
    /// Sessions with more than one input.
    pub doubled_inputs: usize,
    /// Answers that named another run than the session's one run.
    pub wrong_answers: usize,
    pub completed: usize,
    pub interrupted: usize,
    /// Runs that ended otherwise, or stayed `running` past the bound.
    pub unsettled: usize,
    /// The longest time from a request's first failed attempt to its
    /// answer from another replica.
    pub max_retry_recovery_ms: f64,
    /// From the kill until the last session first read settled (the
    /// killed replica's runs interrupted), read by `concurrency` readers
    /// polling every 20 ms.
    pub settled_after_kill_ms: f64,
    /// Runs of the killed replica that answers named (watched from the
    /// kill on), and when the last of them first read settled
    /// (`interrupted` by a live replica once its lease ran out, or
    /// `completed` before the kill), in ms after the kill: the time to
    /// recover.
    pub orphans_watched: usize,
    pub orphans_settled_ms: f64,
    pub elapsed_ms: f64,
    pub seed: u64,
    pub lease_ms: u64,
}

impl FailoverFigures {
    /// No duplicate, no loss, no doubled input, every answer right.
    pub fn clean(&self) -> bool {
        self.duplicates == 0
            && self.lost == 0
            && self.doubled_inputs == 0
            && self.wrong_answers == 0
            && self.unsettled == 0
    }
}

impl std::fmt::Display for FailoverFigures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "failover: {} replicas over {} (lease {} ms), {} keyed requests, kill -9 of replica {} \
             [seed {}]",
            self.replicas, self.store, self.lease_ms, self.requests, self.killed_replica, self.seed
        )?;
        writeln!(
            f,
            "  attempts {} (failed and retried on another replica: {}, in {} requests); kills {}",
            self.attempts, self.failed_attempts, self.retried_requests, self.kills
        )?;
        writeln!(
            f,
            "  duplicates {}, lost {}, doubled inputs {}, answers naming another run {}, unsettled {}",
            self.duplicates, self.lost, self.doubled_inputs, self.wrong_answers, self.unsettled
        )?;
        writeln!(
            f,
            "  runs: {} completed, {} interrupted (the killed replica's, after its lease)",
            self.completed, self.interrupted
        )?;
        writeln!(
            f,
            "  the killed replica's runs named in answers: {}, the last read settled {:.0} ms \
             after the kill (lease {} ms)",
            self.orphans_watched, self.orphans_settled_ms, self.lease_ms
        )?;
        write!(
            f,
            "  recovery: longest retry {:.0} ms; the whole load read settled {:.0} ms after the \
             kill; total {:.0} ms: {}",
            self.max_retry_recovery_ms,
            self.settled_after_kill_ms,
            self.elapsed_ms,
            if self.clean() {
                "NO duplicate, NO loss"
            } else {
                "FAILED"
            }
        )
    }
}

/// One `reqkey serve agent` child; SIGKILLed when dropped.
struct Replica {
    child: Child,
    base: String,
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How long a replica may take to print its address.
const START_TIMEOUT_MS: u64 = 20_000;

async fn start_replica(store: &str, lease_ms: u64) -> Result<Replica, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this binary: {e}"))?;
    let mut child = Command::new(exe)
        .args(["serve", "agent", "--store", store, "--lease-ms"])
        .arg(lease_ms.to_string())
        .args(["--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start `reqkey serve agent`: {e}"))?;
    let Some(stdout) = child.stdout.take() else {
        let _ = child.kill();
        return Err("the replica has no stdout".into());
    };
    let read = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).map(|_| line)
    });
    let line = match tokio::time::timeout(Duration::from_millis(START_TIMEOUT_MS), read).await {
        Ok(Ok(Ok(line))) => line,
        other => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "a replica over {} did not start within {START_TIMEOUT_MS} ms ({other:?})",
                redact_url(store)
            ));
        }
    };
    match line.trim().strip_prefix("listening on ") {
        Some(base) => Ok(Replica {
            base: base.to_owned(),
            child,
        }),
        None => {
            let _ = child.kill();
            let _ = child.wait();
            Err(format!(
                "a replica over {} did not start (first line {line:?}); is the store up?",
                redact_url(store)
            ))
        }
    }
}

/// What the clients saw for one request.
#[derive(Debug, Default, Clone)]
struct Outcome {
    /// The runId of every answered attempt.
    answers: Vec<String>,
    failed_attempts: usize,
    first_failure: Option<Instant>,
    recovered_after_ms: Option<f64>,
    answered: bool,
    /// The replica whose answer ended the request.
    answered_by: usize,
}

fn session_of(prefix: &str, i: usize) -> String {
    format!("{prefix}-{i}")
}

fn input_of(run_ms: u64, i: usize) -> Value {
    json!({"text": format!("[sleep:{run_ms}] request {i}")})
}

/// One session as read after the load.
#[derive(Debug, Clone)]
struct SessionRead {
    /// The snapshot once no run was `running` (or at the bound).
    snapshot: Option<Value>,
    /// When it first read settled.
    settled_at: Option<Instant>,
    /// The run ids every live replica shows for the session.
    run_ids: std::collections::BTreeSet<String>,
}

/// Reads session `session` from a live replica until no run is `running`
/// (bounded by `bound`), then from every other live replica once: replicas
/// over stores that are not one show a second run for the key there.
async fn read_session(
    client: &reqwest::Client,
    live: &[String],
    session: &str,
    i: usize,
    bound: Instant,
) -> SessionRead {
    let home = &live[i % live.len()];
    let get = |base: &str| {
        let url = format!("{base}/sessions/{session}");
        let client = client.clone();
        async move {
            match client.get(url).send().await {
                Ok(resp) if resp.status().as_u16() == 404 => {
                    Some(json!({"runs": [], "inputs": []}))
                }
                Ok(resp) if resp.status().is_success() => resp.json::<Value>().await.ok(),
                _ => None,
            }
        }
    };
    let ids = |snap: &Value| -> Vec<String> {
        snap["runs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["runId"].as_str().map(str::to_owned))
            .collect()
    };
    let (snapshot, settled_at) = loop {
        let snap = get(home).await;
        let running = snap.as_ref().is_none_or(|s| {
            s["runs"]
                .as_array()
                .is_some_and(|runs| runs.iter().any(|r| r["status"] == "running"))
        });
        if !running {
            break (snap, Some(Instant::now()));
        }
        if Instant::now() >= bound {
            break (snap, None);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let mut run_ids: std::collections::BTreeSet<String> = snapshot
        .as_ref()
        .map(ids)
        .unwrap_or_default()
        .into_iter()
        .collect();
    for base in live.iter().filter(|b| *b != home) {
        if let Some(other) = get(base).await {
            run_ids.extend(ids(&other));
        }
    }
    SessionRead {
        snapshot,
        settled_at,
        run_ids,
    }
}

/// Runs the fault test. `Err` only when it could not run (a replica did
/// not start): a harness error, never a verdict.
pub async fn failover_benchmark(cfg: &FailoverConfig) -> Result<FailoverFigures, String> {
    if cfg.replicas < 2 || cfg.requests == 0 || cfg.concurrency == 0 {
        return Err("failover needs at least 2 replicas, 1 request and concurrency 1".into());
    }
    let began = Instant::now();
    let mut replicas = Vec::with_capacity(cfg.replicas);
    for _ in 0..cfg.replicas {
        replicas.push(start_replica(&cfg.store, cfg.lease_ms).await?);
    }
    let bases: Arc<Vec<String>> = Arc::new(replicas.iter().map(|r| r.base.clone()).collect());
    let killed = usize::try_from(cfg.seed % cfg.replicas as u64).unwrap_or(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let prefix = format!("fo-{:x}-{nanos:x}", cfg.seed);
    let client = reqwest::Client::builder()
        .timeout(Duration::from_millis(cfg.call_timeout_ms))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))?;

    let next = Arc::new(AtomicUsize::new(0));
    let answered = Arc::new(AtomicUsize::new(0));
    let outcomes: Arc<Mutex<BTreeMap<usize, Outcome>>> = Arc::default();
    let max_attempts = cfg.replicas * 3;

    let mut workers = Vec::new();
    for _ in 0..cfg.concurrency {
        let (client, bases, next, answered, outcomes) = (
            client.clone(),
            Arc::clone(&bases),
            Arc::clone(&next),
            Arc::clone(&answered),
            Arc::clone(&outcomes),
        );
        let (prefix, run_ms, requests) = (prefix.clone(), cfg.run_ms, cfg.requests);
        workers.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= requests {
                    return;
                }
                let session = session_of(&prefix, i);
                let body = json!({"input": input_of(run_ms, i)});
                let mut outcome = Outcome::default();
                for attempt in 0..max_attempts {
                    let base = &bases[(i + attempt) % bases.len()];
                    let sent = client
                        .post(format!("{base}/sessions/{session}/start"))
                        .header("X-Helix-Request-Key", format!("k{i}"))
                        .json(&body)
                        .send()
                        .await;
                    let ok = match sent {
                        Ok(resp) if resp.status().is_success() => {
                            resp.json::<Value>().await.ok().and_then(|v| {
                                v.get("runId").and_then(Value::as_str).map(str::to_owned)
                            })
                        }
                        _ => None,
                    };
                    match ok {
                        Some(run_id) => {
                            outcome.answers.push(run_id);
                            outcome.answered = true;
                            outcome.answered_by = (i + attempt) % bases.len();
                            outcome.recovered_after_ms = outcome
                                .first_failure
                                .map(|t| t.elapsed().as_secs_f64() * 1e3);
                            break;
                        }
                        None => {
                            outcome.failed_attempts += 1;
                            outcome.first_failure.get_or_insert_with(Instant::now);
                            let backoff = 20 * u64::try_from(attempt + 1).unwrap_or(1);
                            tokio::time::sleep(Duration::from_millis(backoff)).await;
                        }
                    }
                }
                answered.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut map) = outcomes.lock() {
                    map.insert(i, outcome);
                }
            }
        }));
    }

    // The kill, once `kill_after` requests were answered (or all were).
    let kill_after = cfg.kill_after.min(cfg.requests);
    let deadline = Instant::now() + Duration::from_millis(cfg.call_timeout_ms * 4 + 60_000);
    while answered.load(Ordering::Relaxed) < kill_after && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let killed_at = Instant::now();
    let kills = match replicas[killed].child.kill() {
        Ok(()) => {
            let _ = replicas[killed].child.wait();
            1
        }
        Err(_) => 0,
    };
    // The killed replica's runs (its run-id prefix, learnt from its answers
    // before the kill), watched while the load goes on: when each is first
    // read settled is the time to recover.
    let killed_prefix = outcomes.lock().ok().and_then(|m| {
        m.values()
            .find(|o| o.answered && o.answered_by == killed)
            .and_then(|o| o.answers.last())
            .and_then(|id| id.rsplit_once('-').map(|(p, _)| format!("{p}-")))
    });
    let live: Vec<String> = bases
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != killed)
        .map(|(_, b)| b.clone())
        .collect();
    let orphan_watch = {
        let (client, live, outcomes, prefix) = (
            client.clone(),
            live.clone(),
            Arc::clone(&outcomes),
            prefix.clone(),
        );
        let done = Arc::clone(&answered);
        let (requests, bound) = (
            cfg.requests,
            Instant::now() + Duration::from_millis(cfg.lease_ms * 4 + cfg.run_ms + 30_000),
        );
        tokio::spawn(async move {
            let Some(killed_prefix) = killed_prefix else {
                return (0usize, 0.0f64);
            };
            let mut settled: BTreeMap<usize, f64> = BTreeMap::new();
            loop {
                let pending: Vec<usize> = outcomes
                    .lock()
                    .map(|m| {
                        m.iter()
                            .filter(|(i, o)| {
                                !settled.contains_key(i)
                                    && o.answers.iter().any(|a| a.starts_with(&killed_prefix))
                            })
                            .map(|(i, _)| *i)
                            .collect()
                    })
                    .unwrap_or_default();
                // One read per pending session, all at once.
                let polls: Vec<_> = pending
                    .iter()
                    .map(|&i| {
                        let url = format!(
                            "{}/sessions/{}",
                            live[i % live.len()],
                            session_of(&prefix, i)
                        );
                        let client = client.clone();
                        tokio::spawn(async move {
                            let snap = match client.get(url).send().await {
                                Ok(resp) if resp.status().is_success() => {
                                    resp.json::<Value>().await.ok()
                                }
                                _ => None,
                            };
                            let running = snap.as_ref().is_none_or(|s| {
                                s["runs"].as_array().is_some_and(|runs| {
                                    runs.iter().any(|r| r["status"] == "running")
                                })
                            });
                            (i, !running, killed_at.elapsed().as_secs_f64() * 1e3)
                        })
                    })
                    .collect();
                for poll in polls {
                    if let Ok((i, true, ms)) = poll.await {
                        settled.insert(i, ms);
                    }
                }
                let all_in = done.load(Ordering::Relaxed) >= requests;
                if (all_in && pending.is_empty()) || Instant::now() >= bound {
                    let last = settled.values().copied().fold(0.0, f64::max);
                    return (settled.len(), last);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    for w in workers {
        let _ = w.await;
    }
    let (orphans_watched, orphans_settled_ms) = orphan_watch.await.unwrap_or((0, 0.0));
    let outcomes = outcomes.lock().map(|m| m.clone()).unwrap_or_default();

    // Every session read from a live replica until no run is running.
    let settle_bound = Instant::now()
        + Duration::from_millis(cfg.lease_ms * 4 + cfg.run_ms + cfg.call_timeout_ms + 10_000);
    // Read concurrently (as many readers as clients), so that when a
    // session first reads settled is close to when it settled.
    let reads: Arc<Mutex<BTreeMap<usize, SessionRead>>> = Arc::default();
    let next = Arc::new(AtomicUsize::new(0));
    let live = Arc::new(live);
    let mut readers = Vec::new();
    for _ in 0..cfg.concurrency {
        let (client, live, next, reads, prefix) = (
            client.clone(),
            Arc::clone(&live),
            Arc::clone(&next),
            Arc::clone(&reads),
            prefix.clone(),
        );
        let requests = cfg.requests;
        readers.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= requests {
                    return;
                }
                let read =
                    read_session(&client, &live, &session_of(&prefix, i), i, settle_bound).await;
                if let Ok(mut map) = reads.lock() {
                    map.insert(i, read);
                }
            }
        }));
    }
    for r in readers {
        let _ = r.await;
    }
    let reads = reads.lock().map(|m| m.clone()).unwrap_or_default();

    let mut figures = FailoverFigures {
        store: redact_url(&cfg.store),
        replicas: cfg.replicas,
        requests: cfg.requests,
        kills,
        killed_replica: killed,
        seed: cfg.seed,
        lease_ms: cfg.lease_ms,
        orphans_watched,
        orphans_settled_ms,
        ..FailoverFigures::default()
    };
    for i in 0..cfg.requests {
        let outcome = outcomes.get(&i).cloned().unwrap_or_default();
        figures.attempts += outcome.answers.len() + outcome.failed_attempts;
        figures.failed_attempts += outcome.failed_attempts;
        if outcome.failed_attempts > 0 {
            figures.retried_requests += 1;
        }
        if let Some(ms) = outcome.recovered_after_ms {
            figures.max_retry_recovery_ms = figures.max_retry_recovery_ms.max(ms);
        }
        let Some(read) = reads.get(&i) else {
            figures.unsettled += 1;
            continue;
        };
        if let Some(at) = read.settled_at {
            let ms = at.saturating_duration_since(killed_at).as_secs_f64() * 1e3;
            figures.settled_after_kill_ms = figures.settled_after_kill_ms.max(ms);
        }
        let Some(snapshot) = &read.snapshot else {
            figures.unsettled += 1;
            continue;
        };
        let runs = snapshot["runs"].as_array().cloned().unwrap_or_default();
        let inputs = snapshot["inputs"].as_array().cloned().unwrap_or_default();
        if read.run_ids.len() > 1 {
            figures.duplicates += 1;
        }
        if inputs.len() > 1 {
            figures.doubled_inputs += 1;
        }
        let Some(run) = runs.first() else {
            figures.lost += 1;
            continue;
        };
        let run_id = run["runId"].as_str().unwrap_or_default();
        let input_ok = inputs
            .first()
            .is_some_and(|e| e["runId"] == run_id && e["input"] == input_of(cfg.run_ms, i));
        if !outcome.answered || !input_ok || run["requestKey"] != format!("k{i}").as_str() {
            figures.lost += 1;
        }
        if outcome.answers.iter().any(|a| a != run_id) {
            figures.wrong_answers += 1;
        }
        match run["status"].as_str() {
            Some("completed") => figures.completed += 1,
            Some("interrupted") => figures.interrupted += 1,
            _ => figures.unsettled += 1,
        }
    }
    figures.elapsed_ms = began.elapsed().as_secs_f64() * 1e3;
    // Leave the store as found.
    for i in 0..cfg.requests {
        let base = &live[i % live.len()];
        let _ = client
            .delete(format!("{base}/sessions/{}", session_of(&prefix, i)))
            .send()
            .await;
    }
    drop(replicas);
    Ok(figures)
}
