//! `reqkey proxy` end to end against the reference agent server in
//! process: a small Rust-scripted chat client (correct, and the three
//! broken twins of the TypeScript reference client) drives a conversation
//! through the proxy under a fault plan that fails well over a third of
//! the answers; the client verdict (SPEC 9) must be green for the correct
//! client and name the broken clause for each twin, and the same seed must
//! replay the same faults. The TypeScript client itself is certified by
//! `clients/typescript/check.sh` (run by CI).
//!
//! The tool-result conversation (issue 27) adds keyless sends SPEC 9
//! handles apart: a correct client re-reads the snapshot after a lost
//! tool-result answer and re-sends only when the result is not there; it
//! must be green under every fault on several seeds, and the twin that
//! re-sends without reading is caught by
//! `client.tool-result.reread-before-resend`.
//!
//! Deterministic: the client is sequential, so the `n`-th entry request,
//! and so its fault, is the same on every run with one seed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{reqkey, text};
use reqkey_harness::check::client::{judge, ClientEnd, ClientVerdict};
use reqkey_harness::check::plan::{Fault, FaultPlan};
use reqkey_harness::check::trace::Exchange;
use reqkey_harness::proxy::server::{read_snapshots, serve, ProxyConfig, Recorder};
use reqkey_harness::targets::reference_agent::spawn_reference_agent;
use reqkey_harness::targets::TargetOptions;

const PLAN: &str = "drop-after-commit=0.35,delay=0.05,502=0.05,503=0.05,duplicate=0.1";
/// Every fault often enough that each hits a tool-result send over a few seeds.
const TOOL_PLAN: &str = "drop-after-commit=0.3,delay=0.15,502=0.1,503=0.1,duplicate=0.15";
const DELAY_MS: u64 = 1_500;
const CLIENT_TIMEOUT_MS: u64 = 1_000;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Correct,
    NewKeyPerRetry,
    SameKeyForTwoMessages,
    NoKeyOnRetry,
    /// Re-sends a lost tool result at once, without reading the snapshot.
    ResendToolWithoutReread,
}

/// One user action of a scripted conversation.
#[derive(Debug, Clone, Copy)]
enum Step {
    Send(&'static str),
    Regenerate,
    /// A tool result (SPEC 7: a chat send whose last message has role
    /// `tool`), with a key (which the server ignores) or without.
    Tool {
        content: &'static str,
        keyed: bool,
    },
}

/// The conversation of the reference client.
const SCRIPT: &[Step] = &[
    Step::Send("hello"),
    Step::Send("what is a request key?"),
    Step::Regenerate,
    Step::Send("thanks"),
    Step::Send("one more"),
    Step::Regenerate,
    Step::Send("bye"),
];

/// A conversation with tool calls: `[suspend]` ends a run waiting for
/// input (the tool call), the tool result starts the next run.
const TOOL_SCRIPT: &[Step] = &[
    Step::Send("hello"),
    Step::Send("[suspend] look up the weather"),
    Step::Tool {
        content: "sunny, 21 C",
        keyed: false,
    },
    Step::Send("[suspend] and tomorrow?"),
    Step::Tool {
        content: "rain, 14 C",
        keyed: true,
    },
    Step::Regenerate,
    Step::Send("[suspend] convert to F"),
    Step::Tool {
        content: "57 F",
        keyed: false,
    },
    Step::Send("[suspend] one more lookup"),
    Step::Tool {
        content: "done",
        keyed: true,
    },
    Step::Send("bye"),
];

struct Client {
    base: String,
    session: String,
    mode: Mode,
    http: reqwest::Client,
    minted: u32,
    sends: u32,
    last_send_key: Option<String>,
    failed_actions: u32,
    /// The last run an answer named (the run a tool result answers).
    last_run: Option<String>,
}

/// The run a `2xx` answer names: `runId`, or a stream's `run-start`.
fn run_of(answer: &str) -> Option<String> {
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(answer) {
        return v["runId"].as_str().map(str::to_owned);
    }
    let mut start = false;
    for line in answer.lines() {
        if line.trim() == "event: run-start" {
            start = true;
        } else if let (true, Some(data)) = (start, line.strip_prefix("data:")) {
            let v: serde_json::Value = serde_json::from_str(data.trim()).ok()?;
            return v["runId"].as_str().map(str::to_owned);
        }
    }
    None
}

impl Client {
    fn fresh_key(&mut self) -> String {
        self.minted += 1;
        format!("k-{}-{}", self.session, self.minted)
    }

    fn key_for_send(&mut self) -> String {
        self.sends += 1;
        if self.mode == Mode::SameKeyForTwoMessages && self.sends % 2 == 0 {
            if let Some(k) = &self.last_send_key {
                return k.clone();
            }
        }
        let k = self.fresh_key();
        self.last_send_key = Some(k.clone());
        k
    }

    /// One user action: the request re-sent after every failure (an error,
    /// a timeout, 502/503/504); its 2xx body, or `None`.
    async fn action(&mut self, route: &str, body: &str, key: String) -> Option<String> {
        let url = format!("{}/sessions/{}/{route}", self.base, self.session);
        for attempt in 1..=12u32 {
            let k = match (attempt, self.mode) {
                (1, _) => Some(key.clone()),
                (_, Mode::NewKeyPerRetry) => Some(self.fresh_key()),
                (_, Mode::NoKeyOnRetry) => None,
                _ => Some(key.clone()),
            };
            let mut req = self
                .http
                .post(&url)
                .header("content-type", "application/json")
                .body(body.to_owned());
            if let Some(k) = k {
                req = req.header("x-helix-request-key", k);
            }
            let Ok(resp) = req.send().await else { continue };
            let status = resp.status().as_u16();
            let Ok(text) = resp.text().await else {
                continue;
            };
            if matches!(status, 502..=504) {
                continue;
            }
            if (200..300).contains(&status) {
                return Some(text);
            }
            break;
        }
        self.failed_actions += 1;
        None
    }

    async fn send(&mut self, text: &str) {
        let key = self.key_for_send();
        let body = serde_json::json!({"messages": [{"role": "user", "content": text}]});
        if let Some(answer) = self.action("chat", &body.to_string(), key).await {
            self.last_run = run_of(&answer).or(self.last_run.take());
        }
    }

    /// Reads the snapshot (not faulted, so a few tries suffice): is there
    /// an input `{"text": content}` of a run after `self.last_run`'s?
    /// `None` when no snapshot could be read.
    async fn tool_result_recorded(&self, content: &str) -> Option<bool> {
        let url = format!("{}/sessions/{}", self.base, self.session);
        for _ in 0..5 {
            let Ok(r) = self.http.get(&url).send().await else {
                continue;
            };
            if r.status() != 200 {
                continue;
            }
            let Ok(v) = r.json::<serde_json::Value>().await else {
                continue;
            };
            let inputs = v["inputs"].as_array()?;
            let after = inputs
                .iter()
                .position(|i| i["runId"].as_str() == self.last_run.as_deref())
                .map_or(0, |p| p + 1);
            return Some(
                inputs[after..]
                    .iter()
                    .any(|i| i["input"]["text"].as_str() == Some(content)),
            );
        }
        None
    }

    /// A tool result (SPEC 9, `client.tool-result.*`): sent until answered;
    /// after a failed answer the snapshot is read first, and the result is
    /// re-sent only when it is not recorded there (the twin skips the read).
    async fn tool_result(&mut self, content: &str, keyed: bool) {
        let url = format!("{}/sessions/{}/chat", self.base, self.session);
        let body = serde_json::json!({"messages": [{"role": "tool", "content": content}]});
        let key = if keyed { Some(self.fresh_key()) } else { None };
        for attempt in 1..=12u32 {
            if attempt > 1 && self.mode != Mode::ResendToolWithoutReread {
                match self.tool_result_recorded(content).await {
                    Some(true) => {
                        self.last_run = None;
                        return;
                    }
                    Some(false) => {}
                    None => break,
                }
            }
            let mut req = self
                .http
                .post(&url)
                .header("content-type", "application/json")
                .body(body.to_string());
            if let Some(k) = &key {
                req = req.header("x-helix-request-key", k);
            }
            let Ok(resp) = req.send().await else { continue };
            let status = resp.status().as_u16();
            let Ok(text) = resp.text().await else {
                continue;
            };
            if matches!(status, 502..=504) {
                continue;
            }
            if (200..300).contains(&status) {
                self.last_run = run_of(&text);
                return;
            }
            break;
        }
        self.failed_actions += 1;
    }

    async fn regenerate(&mut self) {
        let key = self.fresh_key();
        let Some(answer) = self.action("retry", "{}", key).await else {
            return;
        };
        let v: serde_json::Value = serde_json::from_str(&answer).unwrap();
        let run = v["runId"].as_str().unwrap().to_owned();
        self.last_run = Some(run.clone());
        let url = format!(
            "{}/sessions/{}/runs/{run}?waitMs=2000",
            self.base, self.session
        );
        for _ in 0..5 {
            if let Ok(r) = self
                .http
                .get(&url)
                .timeout(Duration::from_secs(3))
                .send()
                .await
            {
                if r.status() == 200 {
                    return;
                }
            }
        }
    }
}

struct Outcome {
    verdict: ClientVerdict,
    exchanges: Vec<Exchange>,
}

async fn converse(mode: Mode, seed: u64, session: &str) -> Outcome {
    converse_with(mode, PLAN, seed, session, SCRIPT).await
}

async fn converse_with(
    mode: Mode,
    plan: &str,
    seed: u64,
    session: &str,
    script: &[Step],
) -> Outcome {
    let server = spawn_reference_agent(None, None, &TargetOptions::default())
        .await
        .unwrap();
    let upstream = format!("http://{}", server.addr);
    let config = Arc::new(ProxyConfig {
        upstream: upstream.clone(),
        plan: FaultPlan::parse(plan).unwrap(),
        seed,
        delay_ms: DELAY_MS,
        max_body_bytes: 1 << 20,
        max_response_bytes: 1 << 20,
        upstream_timeout_ms: 5_000,
        max_connections: 16,
        max_requests: 1_000,
        upstream_auth: Default::default(),
    });
    let recorder = Arc::new(Recorder::new());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let proxy = tokio::spawn(serve(listener, config, recorder.clone(), async move {
        let _ = rx.await;
    }));
    let mut client = Client {
        base: format!("http://{addr}"),
        session: session.to_owned(),
        mode,
        http: reqwest::Client::builder()
            .timeout(Duration::from_millis(CLIENT_TIMEOUT_MS))
            .build()
            .unwrap(),
        minted: 0,
        sends: 0,
        last_send_key: None,
        failed_actions: 0,
        last_run: None,
    };
    for step in script {
        match *step {
            Step::Send(text) => client.send(text).await,
            Step::Regenerate => client.regenerate().await,
            Step::Tool { content, keyed } => client.tool_result(content, keyed).await,
        }
    }
    assert!(
        recorder.settle(DELAY_MS + 5_000).await,
        "requests in flight"
    );
    let _ = tx.send(());
    proxy.await.unwrap().unwrap();
    let exchanges = recorder.exchanges();
    let snapshots = read_snapshots(
        &upstream,
        &Default::default(),
        &[session.to_owned()],
        5_000,
        1 << 20,
    )
    .await;
    let end = ClientEnd::Exited {
        code: i32::from(client.failed_actions > 0),
    };
    let verdict = judge(&exchanges, &snapshots, Some(&end));
    server.stop().await.unwrap();
    Outcome { verdict, exchanges }
}

fn failed_rules(v: &ClientVerdict) -> Vec<&'static str> {
    v.rules.iter().filter(|r| !r.passed).map(|r| r.id).collect()
}

fn faults(exchanges: &[Exchange]) -> Vec<Fault> {
    exchanges
        .iter()
        .filter(|e| e.entry.is_some())
        .map(|e| e.fault)
        .collect()
}

const SEED: u64 = 20_251_203;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_correct_client_is_green_under_a_plan_that_fails_over_a_third_of_answers() {
    let o = converse(Mode::Correct, SEED, "proxy-test-correct").await;
    let v = &o.verdict;
    assert_eq!(v.exit_code(), 0, "{:#?}", v);
    assert!(
        v.stats.failed_answers * 3 >= v.stats.entry_requests,
        "only {} of {} answers failed",
        v.stats.failed_answers,
        v.stats.entry_requests
    );
    // Every kind of fault that matters to a client happened at least once
    // over the plan's seed (drop and a refusal at the least).
    let seen = faults(&o.exchanges);
    assert!(seen.contains(&Fault::DropAfterCommit), "{seen:?}");
    assert!(
        seen.iter()
            .any(|f| matches!(f, Fault::Status502 | Fault::Status503)),
        "{seen:?}"
    );
    assert_eq!(v.stats.actions, 7, "{:#?}", v.stats);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_key_on_every_retry_is_caught_by_retry_same_key() {
    let o = converse(Mode::NewKeyPerRetry, SEED, "proxy-test-new-key").await;
    let failed = failed_rules(&o.verdict);
    assert!(
        failed.contains(&"client.retry.same-key"),
        "{:#?}",
        o.verdict
    );
    // The harm end to end: a dropped answer re-sent with a new key ran twice.
    assert!(
        failed.contains(&"client.e2e.one-run-per-action"),
        "{failed:?}"
    );
    assert_eq!(o.verdict.exit_code(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_key_for_two_messages_is_caught_by_fresh_key() {
    let o = converse(Mode::SameKeyForTwoMessages, SEED, "proxy-test-same-key").await;
    let failed = failed_rules(&o.verdict);
    assert!(
        failed.contains(&"client.action.fresh-key"),
        "{:#?}",
        o.verdict
    );
    assert!(!failed.contains(&"client.retry.same-key"), "{failed:?}");
    assert_eq!(o.verdict.exit_code(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_key_on_retry_is_caught_by_entry_keyed() {
    let o = converse(Mode::NoKeyOnRetry, SEED, "proxy-test-no-key").await;
    let failed = failed_rules(&o.verdict);
    assert!(failed.contains(&"client.entry.keyed"), "{:#?}", o.verdict);
    assert!(!failed.contains(&"client.retry.same-key"), "{failed:?}");
    assert_eq!(o.verdict.exit_code(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_seed_replays_the_same_faults() {
    let a = converse(Mode::NewKeyPerRetry, 99, "proxy-test-replay-a").await;
    let b = converse(Mode::NewKeyPerRetry, 99, "proxy-test-replay-b").await;
    assert_eq!(faults(&a.exchanges), faults(&b.exchanges));
    assert_eq!(failed_rules(&a.verdict), failed_rules(&b.verdict));
    let c = converse(Mode::NewKeyPerRetry, 100, "proxy-test-replay-c").await;
    assert_ne!(faults(&a.exchanges), faults(&c.exchanges));
}

/// The tool-result sends of a trace.
fn tool_sends(exchanges: &[Exchange]) -> impl Iterator<Item = &Exchange> {
    exchanges.iter().filter(|e| e.tool_result)
}

/// Issue 27: a correct client that sends tool results (keyed and keyless)
/// is green through every fault on several seeds, and every fault hit a
/// tool-result send on one of them. Before the fix the judge counted the
/// justified re-send of a lost tool result against the client, and
/// `duplicate` forwarded a keyed tool result twice (the server ignores
/// that key, so it ran twice).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_correct_client_with_tool_results_is_green_under_every_fault_on_several_seeds() {
    let mut runs = Vec::new();
    for seed in 1..=8u64 {
        runs.push(tokio::spawn(async move {
            let session = format!("proxy-test-tools-{seed}");
            (
                seed,
                converse_with(Mode::Correct, TOOL_PLAN, seed, &session, TOOL_SCRIPT).await,
            )
        }));
    }
    let mut hit: std::collections::BTreeSet<Fault> = std::collections::BTreeSet::new();
    for run in runs {
        let (seed, o) = run.await.unwrap();
        let v = &o.verdict;
        assert_eq!(v.exit_code(), 0, "seed {seed}: {v:#?}");
        assert_eq!(v.stats.actions, TOOL_SCRIPT.len(), "seed {seed}: {v:#?}");
        for e in tool_sends(&o.exchanges) {
            hit.insert(e.fault);
            if e.fault == Fault::Duplicate {
                assert_eq!(
                    e.forwarded, 1,
                    "seed {seed}: a tool result duplicated: {e:?}"
                );
            }
        }
    }
    for fault in Fault::ALL {
        assert!(
            hit.contains(&fault),
            "no tool-result send got {fault}: {hit:?}"
        );
    }
}

/// Issue 27: the twin that re-sends a lost tool result without reading the
/// snapshot makes a second run, and is failed by the clause that says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_result_resent_without_a_reread_is_caught_by_its_clause() {
    let o = converse_with(
        Mode::ResendToolWithoutReread,
        "drop-after-commit=0.5",
        SEED,
        "proxy-test-tool-no-reread",
        TOOL_SCRIPT,
    )
    .await;
    assert!(
        tool_sends(&o.exchanges).any(|e| e.fault == Fault::DropAfterCommit),
        "the seed dropped no tool-result answer"
    );
    let failed = failed_rules(&o.verdict);
    assert!(
        failed.contains(&"client.tool-result.reread-before-resend"),
        "{:#?}",
        o.verdict
    );
    assert!(
        failed.contains(&"client.e2e.one-run-per-action"),
        "{failed:?}"
    );
    let rule = o.verdict.rule("client.tool-result.reread-before-resend");
    let first = rule
        .and_then(|r| r.violations.first())
        .cloned()
        .unwrap_or_default();
    assert!(
        first.contains("POST /sessions/proxy-test-tool-no-reread/chat"),
        "{first}"
    );
    // The correct client on the same seed and plan: green.
    let o = converse_with(
        Mode::Correct,
        "drop-after-commit=0.5",
        SEED,
        "proxy-test-tool-reread",
        TOOL_SCRIPT,
    )
    .await;
    assert_eq!(o.verdict.exit_code(), 0, "{:#?}", o.verdict);
}

#[test]
fn the_binary_refuses_what_it_cannot_judge_with_exit_2() {
    let o = reqkey(&["proxy", "--target", "memory", "--", "true"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("is not an agent server"), "{}", text(&o));
    let o = reqkey(&["proxy", "--target", "reference-agent", "--plan", "boom=0.5"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("unknown fault `boom`"), "{}", text(&o));
    let o = reqkey(&[
        "proxy",
        "--target",
        "reference-agent:no-request-keys",
        "--",
        "true",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("does not record request keys"),
        "{}",
        text(&o)
    );
}

#[test]
fn a_client_that_sends_nothing_gets_no_verdict_and_the_reports_say_so() {
    let dir = std::env::temp_dir().join(format!("reqkey-proxy-{}", std::process::id()));
    let (json, junit) = (dir.join("client.json"), dir.join("junit.xml"));
    let o = reqkey(&[
        "proxy",
        "--target",
        "reference-agent",
        "--seed",
        "5",
        "--json",
        json.to_str().unwrap(),
        "--junit",
        junit.to_str().unwrap(),
        "--",
        "true",
    ]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(2), "{out}");
    assert!(
        out.contains("seed: 5 (replay the fault plan: reqkey proxy --target reference-agent"),
        "{out}"
    );
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(doc["schema"], "reqkey-client-results/1");
    assert_eq!(doc["exit_code"], 2);
    assert_eq!(doc["seed"], 5);
    assert!(doc["indefinite"]["reason"]
        .as_str()
        .unwrap()
        .contains("no entry request"));
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(xml.contains("reqkey.no-verdict"), "{xml}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 29: the proxy keeps the reference servers' connection policy. 64
/// idle connections against a cap of 16 used to hold every slot (the
/// proxy never closed an idle connection before its 10 s head timeout), so
/// a fresh client waited a second and was closed; now the oldest idle ones
/// are closed to make room and the fresh client is answered at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_serves_a_fresh_client_through_a_flood_of_idle_connections() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = spawn_reference_agent(None, None, &TargetOptions::default())
        .await
        .unwrap();
    let config = Arc::new(ProxyConfig {
        upstream: format!("http://{}", server.addr),
        plan: FaultPlan::parse("").unwrap(),
        seed: 1,
        delay_ms: DELAY_MS,
        max_body_bytes: 1 << 20,
        max_response_bytes: 1 << 20,
        upstream_timeout_ms: 5_000,
        max_connections: 16,
        max_requests: 1_000,
        upstream_auth: Default::default(),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (_stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(serve(
        listener,
        config,
        Arc::new(Recorder::new()),
        async move {
            let _ = stopped.await;
        },
    ));
    let mut idle = Vec::new();
    for _ in 0..64 {
        idle.push(tokio::net::TcpStream::connect(addr).await.unwrap());
    }
    let fresh = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        s.write_all(b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .ok()?;
        let mut out = Vec::new();
        s.read_to_end(&mut out).await.ok()?;
        Some(String::from_utf8_lossy(&out).into_owned())
    };
    let answer = tokio::time::timeout(Duration::from_secs(2), fresh).await;
    let answer = answer.ok().flatten().unwrap_or_default();
    assert!(
        answer.starts_with("HTTP/1.1 200"),
        "a fresh client through 64 idle connections: {answer:?}"
    );
    drop(idle);
}
