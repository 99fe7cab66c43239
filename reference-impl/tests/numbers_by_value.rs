//! Every JSON number a client may send in `input` is accepted, stored and
//! echoed as sent (SPEC 3 `[[digest.numbers]]`, SPEC 6; issue 29): integers
//! beyond 64 bits, exponents beyond the double range, `-0` and decimals
//! that underflow a double. Before, an integer beyond 64 bits was refused
//! `invalid_argument` (serde's adjacently tagged enum buffered `args`
//! through a type that holds at most 128-bit integers, and failed on them),
//! and every store echoed the canonical double (`18446744073709552000`,
//! `0` for `-0` and `1e-400`).
//!
//! Checked on memory and SQLite always, Postgres and Redis when
//! `REQKEY_POSTGRES_URL` / `REQKEY_REDIS_URL` are set, and through the
//! store server's HTTP body (the bytes of the answer, not a parsed value).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use reqkey_model::seq::answer_to_wire;
use reqkey_reference::store::{dispatch_wire, open, SessionStateStore};
use serde_json::Value;

/// Spellings a JSON client may send, each echoed with the same digits (an
/// exponent is written `e+N` / `e-N`: the same value, serde_json's form).
const NUMBERS: &[&str] = &[
    "18446744073709551616",
    "-9223372036854775809",
    "123456789012345678901234567890123456789",
    "1e400",
    "-1E+400",
    "-0",
    "1e-400",
    "0.1",
    "1.50",
];

fn unique(prefix: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{prefix}-{nanos}")
}

/// `n` as echoed: the same digits, the exponent marker as `e+` / `e-`.
fn echoed(n: &str) -> String {
    let lower = n.replace('E', "e");
    match lower.split_once('e') {
        Some((m, e)) if !e.starts_with(['+', '-']) => format!("{m}e+{e}"),
        _ => lower,
    }
}

fn commit_body(session: &str, n: &str) -> String {
    format!(
        r#"{{"op":"commitRunStart","args":{{"startRun":{{"sessionId":"{session}","runId":"r1","input":{{"n":{n},"list":[{n}]}},"expectedCurrentRunId":null}}}}}}"#
    )
}

fn list_body(session: &str) -> String {
    format!(r#"{{"op":"listInputs","args":{{"sessionId":"{session}"}}}}"#)
}

/// Commits `{"n": N, "list": [N]}` for every spelling and reads it back.
async fn check_store(name: &str, store: &dyn SessionStateStore) {
    for (i, n) in NUMBERS.iter().enumerate() {
        let session = unique(&format!("num{i}"));
        let req: Value = serde_json::from_str(&commit_body(&session, n)).unwrap();
        let answer = answer_to_wire(&dispatch_wire(store, &req).await);
        assert!(answer.get("ok").is_some(), "{name}, {n}: {answer}");
        let list: Value = serde_json::from_str(&list_body(&session)).unwrap();
        let text =
            serde_json::to_string(&answer_to_wire(&dispatch_wire(store, &list).await)).unwrap();
        let e = echoed(n);
        let want = format!(r#""input":{{"list":[{e}],"n":{e}}}"#);
        assert!(text.contains(&want), "{name}, {n}: {text}");
        let del: Value = serde_json::from_str(&format!(
            r#"{{"op":"deleteSession","args":{{"sessionId":"{session}"}}}}"#
        ))
        .unwrap();
        let _ = dispatch_wire(store, &del).await;
    }
}

#[tokio::test]
async fn memory_store_keeps_every_number() {
    let store = open("memory").await.unwrap();
    check_store("memory", store.as_ref()).await;
}

#[tokio::test]
async fn sqlite_store_keeps_every_number() {
    let dir = std::env::temp_dir().join(unique("reqkey-numbers"));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("store.db");
    let store = open(&format!("sqlite:{}", path.display())).await.unwrap();
    check_store("sqlite", store.as_ref()).await;
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn postgres_and_redis_stores_keep_every_number() {
    for var in ["REQKEY_POSTGRES_URL", "REQKEY_REDIS_URL"] {
        let Ok(url) = std::env::var(var) else {
            eprintln!("{var} unset: skipped");
            continue;
        };
        let store = open(&url).await.unwrap();
        check_store(var, store.as_ref()).await;
    }
}

#[tokio::test]
async fn store_server_echoes_every_number_as_sent() {
    let store: Arc<dyn SessionStateStore> = open("memory").await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/rpc", listener.local_addr().unwrap());
    let (_stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(reqkey_reference::store_server::serve(
        store,
        listener,
        async {
            let _ = stopped.await;
        },
    ));
    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(10))
        .build()
        .unwrap();
    for (i, n) in NUMBERS.iter().enumerate() {
        let session = unique(&format!("http{i}"));
        let text = client
            .post(&base)
            .body(commit_body(&session, n))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(text.starts_with(r#"{"ok":"#), "{n}: {text}");
        let text = client
            .post(&base)
            .body(list_body(&session))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let e = echoed(n);
        let want = format!(r#""input":{{"list":[{e}],"n":{e}}}"#);
        assert!(text.contains(&want), "{n}: {text}");
    }
}
