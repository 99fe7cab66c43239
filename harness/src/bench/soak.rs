//! `reqkey bench soak`: the reference servers and the proxy under mixed
//! honest and hostile load on loopback (issue 29), reporting the server
//! process's resident memory and a fresh client's latency.
//!
//! Why a benchmark and not a test: its figures are memory and latency
//! under minutes of load on a shared machine, which a timed test would
//! turn into flakes; the bounds it exercises have their own tests
//! (`reference-impl/tests/http_limits.rs`, `harness/tests/proxy.rs`).
//!
//! For each server (`reqkey serve store --store memory`, `reqkey serve
//! agent --store memory`, and `reqkey proxy` in front of a `serve agent`)
//! it starts the real binary as a child process, creates a "fat" session
//! (four inputs of 900 KB), warms it up with honest requests, reads the
//! start RSS, and then for `duration_s` runs at once:
//!
//! - **honest clients** (4): small keyed commits / chat sends and reads,
//!   each answer checked;
//! - **large bodies** (2): 1 MiB JSON bodies (a long array of numbers,
//!   the costliest shape to parse), committed and then deleted, so the
//!   store's retained state does not grow with them;
//! - **big numbers**: inputs with `18446744073709551616`, `1e400`, `-0`
//!   among the honest ones (counted as failures when refused or respelt);
//! - **idle flood**: 64 connections that send nothing, reopened when
//!   closed;
//! - **slow heads**: 8 connections sending a request head a byte every
//!   500 ms;
//! - **non-readers**: 4 connections asking for the fat session's 3.6 MB
//!   answer and never reading it, reopened when closed (or after 15 s);
//! - **long polls** (agent, proxy): 100 polls with `waitMs=60000` on a run
//!   sleeping a minute;
//! - **a fresh client**: every 100 ms a new connection asks `GET /health`;
//!   its latency (2 s bound; a timeout counts as 2,000 ms and a failure).
//!
//! RSS is read from `/proc/PID/status` of the server process it started:
//! the start `settle_s` after the warm-up, then `VmRSS` every 250 ms and
//! `VmHWM` (the kernel's own peak), and once more after the load stopped
//! and `settle_s` passed. Every loop ends at
//! the deadline, every call has a timeout, and every connection count is
//! fixed, so the benchmark is bounded in time and in sockets.

use std::fmt;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinSet;

/// Which server a soak run loads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SoakServer {
    /// `reqkey serve store --store memory`.
    Store,
    /// `reqkey serve agent --store memory`.
    Agent,
    /// `reqkey proxy` in front of `reqkey serve agent --store memory` (the
    /// proxy's RSS is the one reported).
    Proxy,
}

impl SoakServer {
    pub const ALL: [SoakServer; 3] = [SoakServer::Store, SoakServer::Agent, SoakServer::Proxy];

    pub(super) fn name(self) -> &'static str {
        match self {
            SoakServer::Store => "serve store",
            SoakServer::Agent => "serve agent",
            SoakServer::Proxy => "proxy",
        }
    }
}

/// How a soak runs.
#[derive(Debug, Clone)]
pub struct SoakConfig {
    /// How long the load runs against each server.
    pub duration_s: u64,
    /// How long after the load the final RSS is read.
    pub settle_s: u64,
    /// How long after the warm-up the start RSS is read (`settle_s` for
    /// figures that compare the two; 0 where they are not judged).
    pub start_settle_s: u64,
    pub servers: Vec<SoakServer>,
    /// The `reqkey` binary whose servers are loaded (default this one):
    /// the same load on an older build.
    pub exe: Option<PathBuf>,
}

/// The targets of issue 29.
pub const PEAK_RSS_TARGET_KB: u64 = 512 * 1024;
/// The final RSS may be at most this much above the start (20%).
pub const FINAL_RSS_SLACK: f64 = 0.20;
/// A fresh client's p99 latency target.
pub const FRESH_P99_TARGET_MS: f64 = 100.0;

/// The figures of one server.
#[derive(Debug, Clone, Default)]
pub struct SoakFigures {
    pub server: &'static str,
    pub duration_s: u64,
    pub settle_s: u64,
    pub start_rss_kb: u64,
    /// The highest VmRSS sampled (every 250 ms).
    pub sampled_peak_rss_kb: u64,
    /// VmHWM: the kernel's peak RSS over the process's life.
    pub hwm_rss_kb: u64,
    pub final_rss_kb: u64,
    pub honest_ok: u64,
    pub honest_failed: u64,
    pub large_bodies: u64,
    pub idle_connections_opened: u64,
    pub slow_heads_opened: u64,
    pub non_readers_opened: u64,
    pub long_polls: u64,
    pub probes: usize,
    pub probe_failures: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl SoakFigures {
    pub fn peak_ok(&self) -> bool {
        self.hwm_rss_kb.max(self.sampled_peak_rss_kb) < PEAK_RSS_TARGET_KB
    }

    pub fn final_ok(&self) -> bool {
        (self.final_rss_kb as f64) <= (self.start_rss_kb as f64) * (1.0 + FINAL_RSS_SLACK)
    }

    pub fn p99_ok(&self) -> bool {
        self.p99_ms < FRESH_P99_TARGET_MS && self.probe_failures == 0
    }

    pub fn honest_ok(&self) -> bool {
        self.honest_failed == 0 && self.honest_ok > 0
    }

    pub fn all_ok(&self) -> bool {
        self.peak_ok() && self.final_ok() && self.p99_ok() && self.honest_ok()
    }
}

fn mb(kb: u64) -> f64 {
    kb as f64 / 1024.0
}

fn mark(ok: bool) -> &'static str {
    if ok {
        "ok"
    } else {
        "MISSED"
    }
}

impl fmt::Display for SoakFigures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "soak {}: {} s of load, final RSS read {} s after",
            self.server, self.duration_s, self.settle_s
        )?;
        writeln!(
            f,
            "  RSS start {:.1} MB, peak {:.1} MB (VmHWM {:.1} MB) [{}: < {:.0} MB], final {:.1} MB [{}: <= start + {:.0}%]",
            mb(self.start_rss_kb),
            mb(self.sampled_peak_rss_kb),
            mb(self.hwm_rss_kb),
            mark(self.peak_ok()),
            mb(PEAK_RSS_TARGET_KB),
            mb(self.final_rss_kb),
            mark(self.final_ok()),
            FINAL_RSS_SLACK * 100.0
        )?;
        writeln!(
            f,
            "  fresh client: {} probes, {} failed, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms [{}: p99 < {:.0} ms, none failed]",
            self.probes,
            self.probe_failures,
            self.p50_ms,
            self.p99_ms,
            self.max_ms,
            mark(self.p99_ok()),
            FRESH_P99_TARGET_MS
        )?;
        write!(
            f,
            "  honest requests {} ok, {} failed [{}]; hostile: {} 1 MiB bodies, {} idle, {} slow-head, {} non-reading connections, {} long polls",
            self.honest_ok,
            self.honest_failed,
            mark(self.honest_ok()),
            self.large_bodies,
            self.idle_connections_opened,
            self.slow_heads_opened,
            self.non_readers_opened,
            self.long_polls
        )
    }
}

/// A child process; killed when dropped.
pub(super) struct Proc {
    child: Child,
    base: String,
}

impl Proc {
    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(super) fn addr(&self) -> &str {
        self.base.trim_start_matches("http://")
    }

    /// The URL it printed (`http://...`, `idem+http://...`).
    pub(super) fn base(&self) -> &str {
        &self.base
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How long a child may take to print its address.
const START_TIMEOUT_MS: u64 = 20_000;

/// Starts `reqkey ARGS` (`exe`, default this binary) and waits for its
/// `listening on URL` line.
pub(super) async fn start(exe: Option<&Path>, args: &[&str]) -> Result<Proc, String> {
    let exe = match exe {
        Some(exe) => exe.to_path_buf(),
        None => std::env::current_exe().map_err(|e| format!("cannot find this binary: {e}"))?,
    };
    let mut child = Command::new(exe)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start `reqkey {}`: {e}", args.join(" ")))?;
    let Some(stdout) = child.stdout.take() else {
        let _ = child.kill();
        return Err("the child has no stdout".into());
    };
    let read = tokio::task::spawn_blocking(move || {
        let mut reader = BufReader::new(stdout);
        // Bounded: the address is on one of the first lines.
        for _ in 0..8 {
            let mut line = String::new();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
            if let Some((_, rest)) = line.split_once("listening on ") {
                let url = rest
                    .split([',', ' ', '\n'])
                    .next()
                    .unwrap_or_default()
                    .to_owned();
                // Keep draining stdout so the child never blocks on it.
                std::thread::spawn(move || {
                    let mut sink = String::new();
                    while reader.read_line(&mut sink).is_ok_and(|n| n > 0) {
                        sink.clear();
                    }
                });
                return Some(url);
            }
        }
        None
    });
    match tokio::time::timeout(Duration::from_millis(START_TIMEOUT_MS), read).await {
        Ok(Ok(Some(base))) => Ok(Proc { child, base }),
        other => {
            let _ = child.kill();
            let _ = child.wait();
            Err(format!(
                "`reqkey {}` did not print its address ({other:?})",
                args.join(" ")
            ))
        }
    }
}

/// `(VmRSS, VmHWM)` of a process, in kB.
fn rss_kb(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// Counters the load tasks share.
#[derive(Debug, Default)]
struct Counters {
    honest_ok: AtomicU64,
    honest_failed: AtomicU64,
    large_bodies: AtomicU64,
    idle: AtomicU64,
    slow: AtomicU64,
    non_readers: AtomicU64,
    long_polls: AtomicU64,
    /// One fresh client's latencies, in ms (`None`: failed).
    probes: Mutex<Vec<Option<f64>>>,
}

/// Bound on one whole request and answer.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Bound on the fresh client's request.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// One request on a fresh connection (`connection: close`); the whole
/// answer, or `None` on any failure or after `bound`.
async fn call(
    addr: &str,
    method: &str,
    path: &str,
    body: &[u8],
    bound: Duration,
) -> Option<String> {
    let attempt = async {
        let mut s = TcpStream::connect(addr).await.ok()?;
        let head = format!(
            "{method} {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        s.write_all(head.as_bytes()).await.ok()?;
        s.write_all(body).await.ok()?;
        let mut out = Vec::new();
        s.read_to_end(&mut out).await.ok()?;
        Some(String::from_utf8_lossy(&out).into_owned())
    };
    tokio::time::timeout(bound, attempt).await.ok().flatten()
}

fn status_of(answer: &str) -> u16 {
    answer
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

fn body_of(answer: &str) -> &str {
    answer.split_once("\r\n\r\n").map_or("", |(_, b)| b)
}

/// A JSON array of about `bytes` bytes of small integers.
fn number_array(bytes: usize) -> String {
    let mut out = String::with_capacity(bytes + 16);
    out.push('[');
    let mut i: u32 = 0;
    while out.len() < bytes {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&(i % 1000).to_string());
        i += 1;
    }
    out.push(']');
    out
}

/// The numbers the honest clients put in their inputs (issue 29: every
/// one must come back as sent; an exponent as `e+N`).
const BIG_NUMBERS: &str =
    r#"{"a":18446744073709551616,"b":-9223372036854775809,"c":1e+400,"d":-0,"e":1e-400}"#;

/// The wire protocol the load speaks to one server.
#[derive(Clone, Copy)]
enum Wire {
    Store,
    Agent,
}

fn commit_body(session: &str, run: &str, expected: Option<&str>, input: &str) -> String {
    let expected = expected.map_or("null".to_owned(), |r| format!("\"{r}\""));
    format!(
        r#"{{"op":"commitRunStart","args":{{"startRun":{{"sessionId":"{session}","runId":"{run}","input":{input},"expectedCurrentRunId":{expected}}}}}}}"#
    )
}

fn rpc(op: &str, session: &str) -> String {
    format!(r#"{{"op":"{op}","args":{{"sessionId":"{session}"}}}}"#)
}

/// One chat send; the stream read to its end. Whether it finished.
async fn chat(addr: &str, session: &str, text: &str) -> bool {
    let body = serde_json::json!({"messages": [{"role": "user", "content": text}]}).to_string();
    let path = format!("/sessions/{session}/chat");
    match call(addr, "POST", &path, body.as_bytes(), CALL_TIMEOUT).await {
        Some(a) => status_of(&a) == 200 && a.contains("event: finish"),
        None => false,
    }
}

/// Creates the fat session (four 900 KB inputs).
async fn fat_session(addr: &str, wire: Wire) -> Result<(), String> {
    let text = "x".repeat(900 * 1024);
    let mut previous: Option<String> = None;
    for i in 0..4 {
        let ok = match wire {
            Wire::Store => {
                let run = format!("fat-{i}");
                let input = format!(r#"{{"text":"{text}"}}"#);
                let body = commit_body("fat", &run, previous.as_deref(), &input);
                previous = Some(run);
                call(addr, "POST", "/rpc", body.as_bytes(), CALL_TIMEOUT)
                    .await
                    .is_some_and(|a| a.contains(r#""outcome":"started""#))
            }
            Wire::Agent => chat(addr, "fat", &text).await,
        };
        if !ok {
            return Err(format!("could not create the fat session (input {i})"));
        }
    }
    Ok(())
}

/// One honest exchange; whether every answer was right.
async fn honest_once(addr: &str, wire: Wire, worker: usize, i: u64) -> bool {
    let session = format!("honest-{worker}-{i}");
    match wire {
        Wire::Store => {
            let body = commit_body(&session, "r1", None, BIG_NUMBERS);
            let committed = call(addr, "POST", "/rpc", body.as_bytes(), CALL_TIMEOUT).await;
            if !committed.is_some_and(|a| a.contains(r#""outcome":"started""#)) {
                return false;
            }
            let listed = call(
                addr,
                "POST",
                "/rpc",
                rpc("listInputs", &session).as_bytes(),
                CALL_TIMEOUT,
            )
            .await;
            let echoed = listed.is_some_and(|a| body_of(&a).contains(BIG_NUMBERS));
            let deleted = call(
                addr,
                "POST",
                "/rpc",
                rpc("deleteSession", &session).as_bytes(),
                CALL_TIMEOUT,
            )
            .await;
            echoed && deleted.is_some_and(|a| a.contains(r#""deleted":true"#))
        }
        Wire::Agent => {
            if !chat(addr, &session, "hello").await {
                return false;
            }
            let snapshot = call(
                addr,
                "GET",
                &format!("/sessions/{session}"),
                b"",
                CALL_TIMEOUT,
            )
            .await;
            let ok = snapshot.is_some_and(|a| status_of(&a) == 200 && a.contains("hello"));
            let deleted = call(
                addr,
                "DELETE",
                &format!("/sessions/{session}"),
                b"",
                CALL_TIMEOUT,
            )
            .await;
            ok && deleted.is_some_and(|a| status_of(&a) == 204)
        }
    }
}

/// One 1 MiB body committed and its session deleted.
async fn large_once(addr: &str, wire: Wire, worker: usize, i: u64) {
    let session = format!("large-{worker}-{i}");
    let numbers = number_array(1_000_000);
    match wire {
        Wire::Store => {
            let body = commit_body(&session, "r1", None, &format!(r#"{{"n":{numbers}}}"#));
            let _ = call(addr, "POST", "/rpc", body.as_bytes(), CALL_TIMEOUT).await;
            let _ = call(
                addr,
                "POST",
                "/rpc",
                rpc("deleteSession", &session).as_bytes(),
                CALL_TIMEOUT,
            )
            .await;
        }
        Wire::Agent => {
            let body = format!(r#"{{"input":{{"text":"large","n":{numbers}}}}}"#);
            let path = format!("/sessions/{session}/start");
            let _ = call(addr, "POST", &path, body.as_bytes(), CALL_TIMEOUT).await;
            let _ = call(
                addr,
                "DELETE",
                &format!("/sessions/{session}"),
                b"",
                CALL_TIMEOUT,
            )
            .await;
        }
    }
}

/// Sleeps until `deadline` or `pause`, whichever is first; `false` once
/// the deadline passed.
async fn pause_until(deadline: Instant, pause: Duration) -> bool {
    let now = Instant::now();
    if now >= deadline {
        return false;
    }
    tokio::time::sleep(pause.min(deadline - now)).await;
    Instant::now() < deadline
}

/// Runs the load against `addr` until `deadline`.
async fn load(
    addr: String,
    wire: Wire,
    long_polls: bool,
    deadline: Instant,
    counters: Arc<Counters>,
) {
    let mut tasks = JoinSet::new();
    for worker in 0..4 {
        let (addr, c) = (addr.clone(), counters.clone());
        tasks.spawn(async move {
            let mut i = 0u64;
            while Instant::now() < deadline {
                i += 1;
                if honest_once(&addr, wire, worker, i).await {
                    c.honest_ok.fetch_add(1, Ordering::Relaxed);
                } else {
                    c.honest_failed.fetch_add(1, Ordering::Relaxed);
                }
                if !pause_until(deadline, Duration::from_millis(25)).await {
                    break;
                }
            }
        });
    }
    for worker in 0..2 {
        let (addr, c) = (addr.clone(), counters.clone());
        tasks.spawn(async move {
            let mut i = 0u64;
            while Instant::now() < deadline {
                i += 1;
                large_once(&addr, wire, worker, i).await;
                c.large_bodies.fetch_add(1, Ordering::Relaxed);
                if !pause_until(deadline, Duration::from_millis(250)).await {
                    break;
                }
            }
        });
    }
    // The idle flood: 64 connections that send nothing, reopened when the
    // server closes them (checked every second).
    {
        let (addr, c) = (addr.clone(), counters.clone());
        tasks.spawn(async move {
            let mut idle: Vec<Option<TcpStream>> = (0..64).map(|_| None).collect();
            loop {
                for slot in idle.iter_mut() {
                    let closed = match slot {
                        Some(s) => {
                            let mut b = [0u8; 1];
                            matches!(
                                tokio::time::timeout(Duration::from_millis(1), s.read(&mut b))
                                    .await,
                                Ok(Ok(0) | Err(_))
                            )
                        }
                        None => true,
                    };
                    if closed {
                        *slot = TcpStream::connect(&addr).await.ok();
                        c.idle.fetch_add(1, Ordering::Relaxed);
                    }
                }
                if !pause_until(deadline, Duration::from_secs(1)).await {
                    break;
                }
            }
        });
    }
    // Slow heads: 8 connections, a byte every 500 ms.
    for _ in 0..8 {
        let (addr, c) = (addr.clone(), counters.clone());
        tasks.spawn(async move {
            let head = b"GET /health HTTP/1.1\r\nhost: x\r\nx-slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
            while Instant::now() < deadline {
                let Ok(mut s) = TcpStream::connect(&addr).await else {
                    if !pause_until(deadline, Duration::from_millis(500)).await {
                        break;
                    }
                    continue;
                };
                c.slow.fetch_add(1, Ordering::Relaxed);
                for byte in head {
                    if s.write_all(&[*byte]).await.is_err() {
                        break;
                    }
                    if !pause_until(deadline, Duration::from_millis(500)).await {
                        break;
                    }
                }
            }
        });
    }
    // Non-readers: 4 connections asking for the fat session, never read.
    for _ in 0..4 {
        let (addr, c) = (addr.clone(), counters.clone());
        tasks.spawn(async move {
            let (head, body) = match wire {
                Wire::Store => {
                    let body = rpc("listInputs", "fat");
                    (
                        format!(
                            "POST /rpc HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                            body.len()
                        ),
                        body,
                    )
                }
                Wire::Agent => ("GET /sessions/fat HTTP/1.1\r\nhost: x\r\n\r\n".to_owned(), String::new()),
            };
            while Instant::now() < deadline {
                let socket = match tokio::net::TcpSocket::new_v4() {
                    Ok(s) => s,
                    Err(_) => break,
                };
                let _ = socket.set_recv_buffer_size(4096);
                let Ok(Ok(mut s)) = tokio::time::timeout(
                    PROBE_TIMEOUT,
                    socket.connect(addr.parse().unwrap_or_else(|_| std::net::SocketAddr::from(([127, 0, 0, 1], 0)))),
                )
                .await
                else {
                    if !pause_until(deadline, Duration::from_millis(500)).await {
                        break;
                    }
                    continue;
                };
                c.non_readers.fetch_add(1, Ordering::Relaxed);
                let _ = s.write_all(head.as_bytes()).await;
                let _ = s.write_all(body.as_bytes()).await;
                // Held until the server gives up on it (or 15 s): probe
                // for a close by peeking, without reading the answer.
                let held_until = Instant::now() + Duration::from_secs(15);
                loop {
                    let mut b = [0u8; 1];
                    let peeked = tokio::time::timeout(Duration::from_millis(250), s.peek(&mut b)).await;
                    if matches!(peeked, Ok(Ok(0) | Err(_))) || Instant::now() >= held_until {
                        break;
                    }
                    if Instant::now() >= deadline {
                        break;
                    }
                    // A peek with data ready returns at once: wait anyway.
                    if peeked.is_ok() && !pause_until(deadline, Duration::from_millis(250)).await {
                        break;
                    }
                }
            }
        });
    }
    // Long polls on a run that sleeps a minute.
    if long_polls {
        let started = call(
            &addr,
            "POST",
            "/sessions/sleeper/start",
            br#"{"input":{"text":"[sleep:60000]"}}"#,
            CALL_TIMEOUT,
        )
        .await
        .and_then(|a| {
            serde_json::from_str::<serde_json::Value>(body_of(&a))
                .ok()
                .and_then(|v| v.get("runId").and_then(|r| r.as_str()).map(str::to_owned))
        });
        if let Some(run) = started {
            for _ in 0..100 {
                let (addr, c, run) = (addr.clone(), counters.clone(), run.clone());
                tasks.spawn(async move {
                    let path = format!("/sessions/sleeper/runs/{run}?waitMs=60000");
                    while Instant::now() < deadline {
                        c.long_polls.fetch_add(1, Ordering::Relaxed);
                        let left = deadline.saturating_duration_since(Instant::now());
                        let answered =
                            call(&addr, "GET", &path, b"", left.min(Duration::from_secs(65))).await;
                        // Answered at once (over the cap): poll again a
                        // little later, as a client would.
                        if answered.is_some()
                            && !pause_until(deadline, Duration::from_millis(100)).await
                        {
                            break;
                        }
                    }
                });
            }
        }
    }
    // The fresh client.
    {
        let (addr, c) = (addr.clone(), counters.clone());
        tasks.spawn(async move {
            while Instant::now() < deadline {
                let t = Instant::now();
                let answer = call(&addr, "GET", "/health", b"", PROBE_TIMEOUT).await;
                let sample = answer
                    .filter(|a| status_of(a) == 200)
                    .map(|_| t.elapsed().as_secs_f64() * 1000.0);
                if let Ok(mut probes) = c.probes.lock() {
                    probes.push(sample);
                }
                if !pause_until(deadline, Duration::from_millis(100)).await {
                    break;
                }
            }
        });
    }
    // Every task ends at the deadline (plus one call's timeout); a task
    // still running 20 s after is aborted.
    let drained = tokio::time::timeout(
        deadline.saturating_duration_since(Instant::now()) + Duration::from_secs(20),
        async { while tasks.join_next().await.is_some() {} },
    )
    .await;
    if drained.is_err() {
        tasks.shutdown().await;
    }
}

pub(super) fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * (sorted.len() as f64)).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Starts `server` (the proxy with the `serve agent` it fronts, which
/// must live as long as it): `(upstream, server)`.
/// `exe` is the `reqkey` binary to start (default this one).
pub(super) async fn start_server(
    server: SoakServer,
    exe: Option<&Path>,
) -> Result<(Option<Proc>, Proc), String> {
    let memory = ["--store", "memory", "--listen", "127.0.0.1:0"];
    Ok(match server {
        SoakServer::Store => (
            None,
            start(exe, &[&["serve", "store"][..], &memory[..]].concat()).await?,
        ),
        SoakServer::Agent => (
            None,
            start(exe, &[&["serve", "agent"][..], &memory[..]].concat()).await?,
        ),
        SoakServer::Proxy => {
            let agent = start(exe, &[&["serve", "agent"][..], &memory[..]].concat()).await?;
            let target = agent.base.clone();
            let p = start(
                exe,
                &[
                    "proxy",
                    "--target",
                    &target,
                    "--plan",
                    "",
                    "--requests",
                    "1000000",
                    "--listen",
                    "127.0.0.1:0",
                ],
            )
            .await?;
            (Some(agent), p)
        }
    })
}

/// Soaks one server.
async fn soak_one(server: SoakServer, cfg: &SoakConfig) -> Result<SoakFigures, String> {
    let (_upstream, proc_) = start_server(server, cfg.exe.as_deref()).await?;
    let wire = if server == SoakServer::Store {
        Wire::Store
    } else {
        Wire::Agent
    };
    let addr = proc_.addr().to_owned();
    let pid = proc_.pid();
    fat_session(&addr, wire).await?;
    // Warm up with honest requests only, then read the start as the final
    // RSS is read: a settle after the last request. An allocator that
    // gives freed memory back after a delay (the binary's, issue 29) would
    // otherwise count the warm-up's garbage in the start.
    for i in 0..20 {
        let _ = honest_once(&addr, wire, 99, i).await;
    }
    tokio::time::sleep(Duration::from_secs(cfg.start_settle_s)).await;
    let (start_rss_kb, _) = rss_kb(pid).ok_or("cannot read the server's /proc status")?;
    let counters = Arc::new(Counters::default());
    let deadline = Instant::now() + Duration::from_secs(cfg.duration_s);
    let sampler = {
        tokio::spawn(async move {
            let mut peak = 0u64;
            while Instant::now() < deadline {
                if let Some((rss, _)) = rss_kb(pid) {
                    peak = peak.max(rss);
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            peak
        })
    };
    load(
        addr.clone(),
        wire,
        wire_polls(server),
        deadline,
        counters.clone(),
    )
    .await;
    let sampled_peak_rss_kb = sampler.await.unwrap_or(0);
    tokio::time::sleep(Duration::from_secs(cfg.settle_s)).await;
    let (final_rss_kb, hwm_rss_kb) = rss_kb(pid).ok_or("the server is gone after the load")?;
    let probes = counters
        .probes
        .lock()
        .map(|p| p.clone())
        .unwrap_or_default();
    let failures = probes.iter().filter(|p| p.is_none()).count();
    let mut ms: Vec<f64> = probes
        .iter()
        .map(|p| p.unwrap_or(PROBE_TIMEOUT.as_secs_f64() * 1000.0))
        .collect();
    ms.sort_by(f64::total_cmp);
    Ok(SoakFigures {
        server: server.name(),
        duration_s: cfg.duration_s,
        settle_s: cfg.settle_s,
        start_rss_kb,
        sampled_peak_rss_kb,
        hwm_rss_kb,
        final_rss_kb,
        honest_ok: counters.honest_ok.load(Ordering::Relaxed),
        honest_failed: counters.honest_failed.load(Ordering::Relaxed),
        large_bodies: counters.large_bodies.load(Ordering::Relaxed),
        idle_connections_opened: counters.idle.load(Ordering::Relaxed),
        slow_heads_opened: counters.slow.load(Ordering::Relaxed),
        non_readers_opened: counters.non_readers.load(Ordering::Relaxed),
        long_polls: counters.long_polls.load(Ordering::Relaxed),
        probes: ms.len(),
        probe_failures: failures,
        p50_ms: percentile(&ms, 50.0),
        p99_ms: percentile(&ms, 99.0),
        max_ms: ms.last().copied().unwrap_or(0.0),
    })
}

fn wire_polls(server: SoakServer) -> bool {
    server != SoakServer::Store
}

/// Soaks every configured server in turn, reporting each as it ends.
pub async fn soak_benchmark(
    cfg: &SoakConfig,
    report: impl FnMut(&SoakFigures),
) -> Result<Vec<SoakFigures>, String> {
    each_server(&cfg.servers, |server| soak_one(server, cfg), report).await
}

/// Measures `servers` one after another with `one` (one server's load at
/// a time: they would share the cores), reporting each as it ends; the
/// first that cannot be measured ends the benchmark.
pub async fn each_server<T, F, Fut>(
    servers: &[SoakServer],
    mut one: F,
    mut report: impl FnMut(&T),
) -> Result<Vec<T>, String>
where
    F: FnMut(SoakServer) -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let mut all = Vec::new();
    for server in servers {
        let figures = one(*server).await?;
        report(&figures);
        all.push(figures);
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&[], 99.0), 0.0);
    }

    #[test]
    fn a_number_array_is_json_of_the_size_asked() {
        let a = number_array(10_000);
        assert!(a.len() >= 10_000 && a.len() < 10_010);
        let v: serde_json::Value = serde_json::from_str(&a).unwrap_or_default();
        assert!(v.as_array().is_some_and(|a| a.len() > 2_000));
    }
}
