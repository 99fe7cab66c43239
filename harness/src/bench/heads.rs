//! `reqkey bench heads`: how long a fresh client waits for `GET /health`
//! while `heads` connections hold half-sent request heads (issue 39).
//!
//! Why a benchmark and not a test: its figure is a latency on a shared
//! machine (the goal: answered within 100 ms under 400 of them), which a
//! timed test would turn into a flake; the behaviour it measures, that a
//! half-sent head counts as idle for the connection cap, has its own test
//! (`reference-impl/tests/http_limits.rs`,
//! `a_flood_of_half_sent_heads_does_not_starve_a_fresh_client`).
//!
//! For each server (`reqkey serve store --store memory`, `reqkey serve
//! agent --store memory`, and `reqkey proxy` in front of a `serve agent`)
//! it starts the real binary, opens `heads` connections that each send a
//! request head without its final blank line and then nothing, and keeps
//! that many open: every 250 ms, each one the server closed is reopened
//! and sends its half head again, as an attacker would. After a second
//! (the heads past the servers' grace for a head still arriving) a fresh
//! client asks `GET /health` on a new connection every 100 ms for
//! `duration_s`; each answer is awaited up to 10 s (a timeout or a
//! connection closed unanswered counts as 10,000 ms and a failure).
//!
//! Bounded: the connection count is fixed, every wait has a timeout, and
//! every loop ends at the deadline.

use std::fmt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::soak::{each_server, percentile, start_server, SoakServer};

/// The goal of issue 39: a fresh client answered within this (p99).
pub const FRESH_P99_TARGET_MS: f64 = 100.0;

/// Bound on one fresh client's request and answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the heads are held before the first probe.
const HOLD_BEFORE_PROBES: Duration = Duration::from_secs(1);

/// A request head without its final blank line: never complete.
const HALF_HEAD: &[u8] = b"GET /health HTTP/1.1\r\nhost: x\r\nx-half: sent\r\n";

/// How a heads run goes.
#[derive(Debug, Clone)]
pub struct HeadsConfig {
    /// Half-sent heads held open at once.
    pub heads: usize,
    /// How long the fresh client probes each server.
    pub duration_s: u64,
    pub servers: Vec<SoakServer>,
    /// The `reqkey` binary whose servers are measured (default this one).
    pub exe: Option<PathBuf>,
}

/// The figures of one server.
#[derive(Debug, Clone, Default)]
pub struct HeadsFigures {
    pub server: &'static str,
    pub heads: usize,
    pub duration_s: u64,
    /// Half-sent heads opened in all (the first `heads` and every reopen).
    pub heads_opened: u64,
    pub probes: usize,
    pub probe_failures: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl HeadsFigures {
    pub fn ok(&self) -> bool {
        self.probes > 0 && self.probe_failures == 0 && self.p99_ms < FRESH_P99_TARGET_MS
    }
}

impl fmt::Display for HeadsFigures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "heads {}: {} half-sent heads held for {} s ({} opened in all)",
            self.server, self.heads, self.duration_s, self.heads_opened
        )?;
        write!(
            f,
            "  fresh client: {} probes, {} failed, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms [{}: p99 < {:.0} ms, none failed]",
            self.probes,
            self.probe_failures,
            self.p50_ms,
            self.p99_ms,
            self.max_ms,
            if self.ok() { "ok" } else { "MISSED" },
            FRESH_P99_TARGET_MS
        )
    }
}

/// Opens one connection and sends the half head; `None` if either fails.
async fn half_head(addr: &str) -> Option<TcpStream> {
    let attempt = async {
        let mut s = TcpStream::connect(addr).await.ok()?;
        s.write_all(HALF_HEAD).await.ok()?;
        Some(s)
    };
    tokio::time::timeout(Duration::from_secs(2), attempt)
        .await
        .ok()
        .flatten()
}

/// Whether the server closed `s` (a read that returns at once: end of
/// stream, an error, or bytes the server sent before closing).
fn closed(s: &TcpStream) -> bool {
    let mut b = [0u8; 64];
    !matches!(s.try_read(&mut b), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

/// One `GET /health` on a new connection: its latency in ms, `None` when
/// it failed or was not answered 200 within [`PROBE_TIMEOUT`].
async fn probe(addr: &str) -> Option<f64> {
    let t = Instant::now();
    let attempt = async {
        let mut s = TcpStream::connect(addr).await.ok()?;
        s.write_all(b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .ok()?;
        let mut out = Vec::new();
        s.read_to_end(&mut out).await.ok()?;
        out.starts_with(b"HTTP/1.1 200").then_some(())
    };
    tokio::time::timeout(PROBE_TIMEOUT, attempt).await.ok()??;
    Some(t.elapsed().as_secs_f64() * 1000.0)
}

/// Measures one server.
async fn heads_one(server: SoakServer, cfg: &HeadsConfig) -> Result<HeadsFigures, String> {
    let (_upstream, proc_) = start_server(server, cfg.exe.as_deref()).await?;
    let addr = proc_.addr().to_owned();
    if probe(&addr).await.is_none() {
        return Err(format!(
            "{}: no answer to GET /health at rest",
            server.name()
        ));
    }
    let deadline = Instant::now() + HOLD_BEFORE_PROBES + Duration::from_secs(cfg.duration_s);
    let holder = {
        let addr = addr.clone();
        let heads = cfg.heads;
        tokio::spawn(async move {
            let mut slots: Vec<Option<TcpStream>> = (0..heads).map(|_| None).collect();
            let mut opened = 0u64;
            while Instant::now() < deadline {
                for slot in slots.iter_mut() {
                    if slot.as_ref().is_none_or(closed) {
                        *slot = half_head(&addr).await;
                        opened += 1;
                    }
                    if Instant::now() >= deadline {
                        break;
                    }
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            opened
        })
    };
    tokio::time::sleep(HOLD_BEFORE_PROBES).await;
    let mut samples = Vec::new();
    while Instant::now() < deadline {
        let started = Instant::now();
        samples.push(probe(&addr).await);
        let next = started + Duration::from_millis(100);
        tokio::time::sleep_until(next.into()).await;
    }
    let heads_opened = holder.await.unwrap_or(0);
    let failures = samples.iter().filter(|s| s.is_none()).count();
    let mut ms: Vec<f64> = samples
        .iter()
        .map(|s| s.unwrap_or(PROBE_TIMEOUT.as_secs_f64() * 1000.0))
        .collect();
    ms.sort_by(f64::total_cmp);
    Ok(HeadsFigures {
        server: server.name(),
        heads: cfg.heads,
        duration_s: cfg.duration_s,
        heads_opened,
        probes: ms.len(),
        probe_failures: failures,
        p50_ms: percentile(&ms, 50.0),
        p99_ms: percentile(&ms, 99.0),
        max_ms: ms.last().copied().unwrap_or(0.0),
    })
}

/// Measures every configured server in turn, reporting each as it ends.
pub async fn heads_benchmark(
    cfg: &HeadsConfig,
    report: impl FnMut(&HeadsFigures),
) -> Result<Vec<HeadsFigures>, String> {
    each_server(&cfg.servers, |server| heads_one(server, cfg), report).await
}
