//! `reqkey serve store` as a process: it prints the address it listens on,
//! answers independent clients, survives malformed requests, and exits 2
//! when it cannot open its store.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Command;

use serde_json::{json, Value};

use common::Served;

fn serve(store: &str) -> Served {
    Served::start(&["serve", "store", "--store", store])
}

async fn rpc(client: &reqwest::Client, base: &str, body: String) -> Value {
    let resp = client
        .post(format!("{base}/rpc"))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    resp.json().await.unwrap()
}

#[tokio::test]
async fn serve_store_answers_independent_clients_and_survives_malformed_requests() {
    let served = serve("memory");
    let (a, b) = (reqwest::Client::new(), reqwest::Client::new());
    let health: Value = a
        .get(format!("{}/health", served.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health["protocol"], "reqkey-store/1");

    let commit = |run: &str| {
        json!({"op": "commitRunStart", "args": {"startRun": {"sessionId": "s", "runId": run,
            "expectedCurrentRunId": null, "input": {}, "requestKey": "k", "requestDigest": "d"}}})
        .to_string()
    };
    let first = rpc(&a, &served.base, commit("r1")).await;
    assert_eq!(first["ok"]["outcome"], "started");
    let bad = rpc(&b, &served.base, "{\"op\":".into()).await;
    assert_eq!(bad["error"]["kind"], "invalid_argument");
    let second = rpc(&b, &served.base, commit("r2")).await;
    assert_eq!(second["error"]["details"]["existingRunId"], "r1");
    let by_key = rpc(
        &a,
        &served.base,
        json!({"op": "getRunByRequestKey", "args": {"sessionId": "s", "requestKey": "k"}})
            .to_string(),
    )
    .await;
    assert_eq!(by_key["ok"]["runId"], "r1");
}

#[test]
fn serve_store_exits_2_when_the_store_cannot_be_opened() {
    let out = Command::new(env!("CARGO_BIN_EXE_reqkey"))
        .args([
            "serve",
            "store",
            "--store",
            "mongodb://x",
            "--listen",
            "127.0.0.1:0",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown store"));
}
