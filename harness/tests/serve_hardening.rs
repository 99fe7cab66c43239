//! `reqkey serve store|agent` as real processes under hostile conditions
//! (issue 15): a flood of idle connections against a process limited to
//! 256 file descriptors (F5), and a `kill -9` in the middle of a run on
//! every durable store (F4).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use common::Served;

/// A bound no correct answer comes near.
const PROMPT: Duration = Duration::from_secs(2);

/// The lease the servers here run with (`--lease-ms`), and a wait after
/// which a lease that nobody renews has surely run out.
const LEASE_MS_ARG: &str = "300";
const LEASE_RUNS_OUT: Duration = Duration::from_millis(450);

/// Reads until the peer closes or `bound` passes.
async fn read_until_closed(stream: &mut TcpStream, bound: Duration) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + bound;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return out,
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
        }
    }
}

/// The status of one `GET /health` on a fresh connection, within PROMPT.
async fn health_status(addr: &str) -> Option<u16> {
    let attempt = async {
        let mut s = TcpStream::connect(addr).await.ok()?;
        s.write_all(b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .ok()?;
        let bytes = read_until_closed(&mut s, PROMPT).await;
        String::from_utf8_lossy(&bytes)
            .split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
    };
    tokio::time::timeout(PROMPT, attempt).await.ok().flatten()
}

/// F5: 600 idle connections to a server limited to 256 descriptors; a
/// fresh client must still be answered promptly.
async fn fresh_client_is_served_through_an_idle_flood(args: &[&str]) {
    let served = Served::start_limited(args, 256);
    assert_eq!(health_status(served.addr()).await, Some(200));
    let mut idle = Vec::new();
    for i in 0..600 {
        // A server that stops accepting fills its backlog: connects hang.
        let connect = tokio::time::timeout(PROMPT, TcpStream::connect(served.addr())).await;
        match connect {
            Ok(Ok(s)) => idle.push(s),
            other => panic!("idle connection {i} could not connect within {PROMPT:?}: {other:?}"),
        }
    }
    let started = Instant::now();
    assert_eq!(
        health_status(served.addr()).await,
        Some(200),
        "no answer to a fresh client after 600 idle connections ({args:?})"
    );
    assert!(started.elapsed() < PROMPT);
    drop(idle);
}

/// One test for both servers, one after the other: 600 client sockets at a
/// time stay well inside a default limit of 1,024 descriptors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_store_and_agent_answer_a_fresh_client_through_600_idle_connections() {
    fresh_client_is_served_through_an_idle_flood(&["serve", "store", "--store", "memory"]).await;
    fresh_client_is_served_through_an_idle_flood(&["serve", "agent", "--store", "memory"]).await;
}

// ---- F4: kill -9 in the middle of a run -----------------------------------

fn postgres_url() -> String {
    std::env::var("REQKEY_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

fn redis_url() -> String {
    std::env::var("REQKEY_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// An id no other test run uses.
fn unique(tag: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("orph-{}-{nanos}-{tag}", std::process::id())
}

/// A SQLite file removed (with its WAL) when the test ends.
struct TempDb(std::path::PathBuf);

impl Drop for TempDb {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let mut p = self.0.clone().into_os_string();
            p.push(suffix);
            let _ = std::fs::remove_file(p);
        }
    }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder().timeout(PROMPT).build().unwrap()
}

async fn post(
    addr: &str,
    path: &str,
    key: Option<&str>,
    body: serde_json::Value,
) -> (u16, serde_json::Value) {
    let mut req = client().post(format!("http://{addr}{path}")).json(&body);
    if let Some(key) = key {
        req = req.header("X-Helix-Request-Key", key);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(serde_json::Value::Null))
}

async fn get(addr: &str, path: &str) -> (u16, serde_json::Value) {
    let resp = client()
        .get(format!("http://{addr}{path}"))
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(serde_json::Value::Null))
}

/// A keyed chat send; the SSE text read until `finish` (or until `bound`
/// when `until_finish`, else until the `run-start` event).
async fn chat(addr: &str, session: &str, key: &str, text: &str, until_finish: bool) -> String {
    let body = serde_json::json!({"messages": [{"role": "user", "content": text}]});
    let read = async {
        let mut resp = reqwest::Client::new()
            .post(format!("http://{addr}/sessions/{session}/chat"))
            .header("X-Helix-Request-Key", key)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let mut text = String::new();
        while let Ok(Some(chunk)) = resp.chunk().await {
            text.push_str(&String::from_utf8_lossy(&chunk));
            let done = if until_finish {
                text.contains("event: finish")
            } else {
                text.contains("event: run-start")
            };
            if done {
                break;
            }
        }
        text
    };
    tokio::time::timeout(PROMPT, read)
        .await
        .unwrap_or_else(|_| panic!("the chat stream did not get there within {PROMPT:?}"))
}

/// Starts keyed `[sleep:60000]` runs (one by `start`, one by `chat`),
/// kills the server with SIGKILL, restarts it on the same store, and
/// checks SPEC 5 `[S5-orphaned]`: the keyed retries get the interrupted
/// run promptly (replay), the runs read `interrupted`, and the session
/// takes a new entry.
async fn kill9_leaves_no_run_running_forever(store: &str) {
    let args = [
        "serve",
        "agent",
        "--store",
        store,
        "--lease-ms",
        LEASE_MS_ARG,
    ];
    let (s, s2) = (unique("start"), unique("chat"));
    let input = serde_json::json!({"input": {"text": "[sleep:60000] orphan"}});

    let first = Served::start(&args);
    let (status, started) = post(
        first.addr(),
        &format!("/sessions/{s}/start"),
        Some("k1"),
        input.clone(),
    )
    .await;
    assert_eq!(status, 201, "{started}");
    let run_id = started["runId"].as_str().unwrap().to_owned();
    let stream = chat(first.addr(), &s2, "k2", "[sleep:60000] chat orphan", false).await;
    assert!(stream.contains("\"attached\":false"), "{stream}");
    first.kill9();
    // The dead server's leases run out ([[lease.expire.any-reader]]).
    tokio::time::sleep(LEASE_RUNS_OUT).await;

    let second = Served::start(&args);
    let began = Instant::now();
    let (status, retry) = post(
        second.addr(),
        &format!("/sessions/{s}/start"),
        Some("k1"),
        input.clone(),
    )
    .await;
    assert_eq!(status, 200, "{retry}");
    assert_eq!(retry["status"], "attached");
    assert_eq!(retry["runId"], run_id.as_str());
    assert!(began.elapsed() < PROMPT);
    let (status, run) = get(second.addr(), &format!("/sessions/{s}/runs/{run_id}")).await;
    assert_eq!(status, 200);
    assert_eq!(run["status"], "interrupted", "{run}");

    let stream = chat(second.addr(), &s2, "k2", "[sleep:60000] chat orphan", true).await;
    assert!(stream.contains("\"attached\":true"), "{stream}");
    assert!(stream.contains("\"status\":\"interrupted\""), "{stream}");
    let (_, snapshot) = get(second.addr(), &format!("/sessions/{s2}")).await;
    assert_eq!(snapshot["runs"][0]["status"], "interrupted", "{snapshot}");

    // The session is not wedged: a keyless resume starts run 2.
    let (status, resumed) = post(
        second.addr(),
        &format!("/sessions/{s}/resume"),
        None,
        serde_json::json!({"input": {"text": "go on"}}),
    )
    .await;
    assert_eq!(status, 201, "{resumed}");
    assert_eq!(resumed["startSequence"], 2);

    for session in [&s, &s2] {
        let resp = client()
            .delete(format!("http://{}/sessions/{session}", second.addr()))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 204);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_on_sqlite_leaves_no_run_running_forever() {
    let db = TempDb(std::env::temp_dir().join(format!("{}.sqlite", unique("db"))));
    kill9_leaves_no_run_running_forever(&format!("sqlite:{}", db.0.display())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_on_postgres_leaves_no_run_running_forever() {
    kill9_leaves_no_run_running_forever(&postgres_url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_on_redis_leaves_no_run_running_forever() {
    kill9_leaves_no_run_running_forever(&redis_url()).await;
}

/// Two servers over one store (replicas): a run the first executes is
/// left `running` by the second while the first renews its lease, and
/// becomes `interrupted` once the first is killed and the lease runs out
/// (SPEC 5, [[lease.renew.owner-only]], [[lease.expire.any-reader]]).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_leaves_a_leased_run_running_and_expires_it_when_its_owner_dies() {
    let db = TempDb(std::env::temp_dir().join(format!("{}.sqlite", unique("shared"))));
    let store = format!("sqlite:{}", db.0.display());
    let args = [
        "serve",
        "agent",
        "--store",
        &store,
        "--lease-ms",
        LEASE_MS_ARG,
    ];
    let s = unique("shared");
    let input = serde_json::json!({"input": {"text": "[sleep:60000] elsewhere"}});
    let first = Served::start(&args);
    let second = Served::start(&args);
    let (status, started) = post(
        first.addr(),
        &format!("/sessions/{s}/start"),
        Some("k1"),
        input.clone(),
    )
    .await;
    assert_eq!(status, 201, "{started}");
    let run_id = started["runId"].as_str().unwrap().to_owned();
    // Several lease lengths: the first server keeps renewing.
    tokio::time::sleep(3 * LEASE_RUNS_OUT).await;
    let (status, retry) = post(
        second.addr(),
        &format!("/sessions/{s}/start"),
        Some("k1"),
        input.clone(),
    )
    .await;
    assert_eq!((status, &retry["runId"]), (200, &serde_json::json!(run_id)));
    assert_eq!(retry["status"], "attached", "{retry}");
    let (_, run) = get(second.addr(), &format!("/sessions/{s}/runs/{run_id}")).await;
    assert_eq!(run["status"], "running", "{run}");

    first.kill9();
    tokio::time::sleep(LEASE_RUNS_OUT).await;
    let (_, run) = get(second.addr(), &format!("/sessions/{s}/runs/{run_id}")).await;
    assert_eq!(run["status"], "interrupted", "{run}");
    let (status, retry) = post(
        second.addr(),
        &format!("/sessions/{s}/start"),
        Some("k1"),
        input,
    )
    .await;
    assert_eq!(status, 200, "{retry}");
    assert_eq!(retry["runId"], run_id.as_str());
    assert_eq!(retry["status"], "attached", "{retry}");
}
