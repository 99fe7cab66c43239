//! The `reqkey-store/1` server over real HTTP: every op answers what the
//! store answers, every malformed request is `invalid_argument` with a 200
//! and leaves the store unchanged, and requests are served concurrently.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use reqkey_model::{CommitResult, InputEntry, RunMetadata, RunStatus, StartRun, StoreError};
use reqkey_reference::store::{MemoryStore, SessionStateStore};
use reqkey_reference::store_server::{serve, MAX_BODY_BYTES};
use serde_json::{json, Value};
use tokio::sync::{oneshot, Barrier};

struct Server {
    base: String,
    client: reqwest::Client,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Server {
    async fn start(store: Arc<dyn SessionStateStore>) -> Server {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(serve(store, listener, async {
            let _ = stopped.await;
        }));
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap();
        Server {
            base,
            client,
            stop: Some(stop),
            task,
        }
    }

    /// POSTs raw bytes to /rpc; asserts the status is 200 and the body is
    /// exactly `{ok}` or `{error}`.
    async fn raw(&self, body: impl Into<reqwest::Body>) -> Value {
        let resp = self
            .client
            .post(format!("{}/rpc", self.base))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let v: Value = resp.json().await.unwrap();
        let keys: Vec<_> = v.as_object().unwrap().keys().cloned().collect();
        assert!(keys == ["ok"] || keys == ["error"], "{v}");
        v
    }

    async fn rpc(&self, op: &str, args: Value) -> Value {
        self.raw(json!({"op": op, "args": args}).to_string()).await
    }

    async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        self.task.await.unwrap().unwrap();
    }
}

fn start_run(session: &str, run: &str, expected: Value, key: Option<&str>) -> Value {
    let mut s = json!({"sessionId": session, "runId": run, "expectedCurrentRunId": expected, "input": {"text": run}});
    if let Some(k) = key {
        s["requestKey"] = json!(k);
        s["requestDigest"] = json!("d");
    }
    s
}

#[tokio::test]
async fn health_names_the_protocol() {
    let server = Server::start(Arc::new(MemoryStore::new())).await;
    let resp = server
        .client
        .get(format!("{}/health", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["protocol"], "reqkey-store/1");
    assert_eq!(v["name"], "reqkey-reference/memory");
    assert!(v["version"].is_string());
    server.stop().await;
}

#[tokio::test]
async fn every_op_answers_over_the_wire() {
    let server = Server::start(Arc::new(MemoryStore::new())).await;
    let s = json!("s1");
    let r = server
        .rpc(
            "commitRunStart",
            json!({"startRun": start_run("s1", "r1", Value::Null, Some("k"))}),
        )
        .await;
    assert_eq!(r["ok"]["outcome"], "started");
    assert_eq!(r["ok"]["run"]["startSequence"], 1);
    let r = server
        .rpc(
            "commitRunStart",
            json!({"startRun": start_run("s1", "r2", json!("r1"), Some("k"))}),
        )
        .await;
    assert_eq!(
        r,
        json!({"error": {"kind": "run_start_rejected", "cause": "request_key_taken", "details": {"existingRunId": "r1"}}})
    );
    assert_eq!(
        server
            .rpc("getRun", json!({"sessionId": s, "runId": "r1"}))
            .await["ok"]["runId"],
        "r1"
    );
    assert_eq!(
        server
            .rpc("getRun", json!({"sessionId": s, "runId": "zz"}))
            .await,
        json!({"ok": null})
    );
    assert_eq!(
        server.rpc("getCurrentRun", json!({"sessionId": s})).await["ok"]["runId"],
        "r1"
    );
    assert_eq!(
        server.rpc("listRuns", json!({"sessionId": s})).await["ok"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        server
            .rpc(
                "getRunByRequestKey",
                json!({"sessionId": s, "requestKey": "k"})
            )
            .await["ok"]["requestKey"],
        "k"
    );
    assert_eq!(
        server.rpc("listInputs", json!({"sessionId": s})).await,
        json!({"ok": [{"runId": "r1", "input": {"text": "r1"}}]})
    );
    let r = server
        .rpc(
            "setRunStatus",
            json!({"sessionId": s, "runId": "r1", "status": "completed"}),
        )
        .await;
    assert_eq!(r["ok"]["status"], "completed");
    let r = server
        .rpc(
            "setRunStatus",
            json!({"sessionId": s, "runId": "r1", "status": "running"}),
        )
        .await;
    assert_eq!(r["error"]["kind"], "invalid_transition");
    let r = server
        .rpc(
            "setRunStatus",
            json!({"sessionId": "nope", "runId": "r1", "status": "running"}),
        )
        .await;
    assert_eq!(r["error"]["kind"], "not_found");
    assert_eq!(
        server.rpc("deleteSession", json!({"sessionId": s})).await,
        json!({"ok": {"deleted": true}})
    );
    assert_eq!(
        server.rpc("deleteSession", json!({"sessionId": s})).await,
        json!({"ok": {"deleted": false}})
    );
    server.stop().await;
}

#[tokio::test]
async fn malformed_requests_are_invalid_arguments_and_change_nothing() {
    let store = Arc::new(MemoryStore::new());
    let server = Server::start(store.clone()).await;
    server
        .rpc(
            "commitRunStart",
            json!({"startRun": start_run("s1", "r1", Value::Null, Some("k"))}),
        )
        .await;
    let too_big = format!(
        r#"{{"op":"listRuns","args":{{"sessionId":"{}"}}}}"#,
        "a".repeat(MAX_BODY_BYTES)
    );
    let malformed: Vec<Vec<u8>> = vec![
        b"{not json".to_vec(),
        b"".to_vec(),
        b"[]".to_vec(),
        br#"{"op":"dropTables","args":{}}"#.to_vec(),
        br#"{"op":"getRun","args":{"sessionId":"s1"}}"#.to_vec(),
        br#"{"op":"getRun"}"#.to_vec(),
        br#"{"op":"getRun","args":{"sessionId":"s1","runId":7}}"#.to_vec(),
        br#"{"op":"getRun","args":{"sessionId":"","runId":"r1"}}"#.to_vec(),
        br#"{"op":"setRunStatus","args":{"sessionId":"s1","runId":"r1","status":"done"}}"#.to_vec(),
        br#"{"op":"deleteSession","args":{"sessionId":"s1","extra":1}}"#.to_vec(),
        br#"{"op":"commitRunStart","args":{"startRun":{"sessionId":"s1","runId":"r2","expectedCurrentRunId":"r1","input":1,"requestKey":"k2"}}}"#.to_vec(),
        br#"{"op":"commitRunStart","args":{"startRun":{"sessionId":"s1","runId":"r2","expectedCurrentRunId":"r1","input":1,"requestKey":"a b","requestDigest":"d"}}}"#.to_vec(),
        too_big.into_bytes(),
    ];
    for body in malformed {
        let shown = String::from_utf8_lossy(&body[..body.len().min(80)]).into_owned();
        let v = server.raw(body).await;
        assert_eq!(v["error"]["kind"], "invalid_argument", "{shown}: {v}");
        assert!(v["error"]["message"].is_string(), "{shown}: {v}");
    }
    // Still up, and nothing changed.
    let runs = server.rpc("listRuns", json!({"sessionId": "s1"})).await;
    assert_eq!(runs["ok"].as_array().unwrap().len(), 1);
    assert_eq!(store.list_inputs("s1").await.unwrap().len(), 1);
    server.stop().await;
}

#[tokio::test]
async fn concurrent_keyed_commits_over_http_start_one_run() {
    let server = Arc::new(Server::start(Arc::new(MemoryStore::new())).await);
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let server = Arc::clone(&server);
            tokio::spawn(async move {
                server
                    .rpc("commitRunStart", json!({"startRun": start_run("race", &format!("r{i}"), Value::Null, Some("k"))}))
                    .await
            })
        })
        .collect();
    let mut started = 0;
    for t in tasks {
        let v = t.await.unwrap();
        if v.get("ok").is_some() {
            started += 1;
        } else {
            assert_eq!(v["error"]["cause"], "request_key_taken", "{v}");
        }
    }
    assert_eq!(started, 1);
}

/// A store whose `getCurrentRun` returns only once 4 calls are inside it:
/// a server that handled requests one at a time would never answer.
#[derive(Debug)]
struct Rendezvous {
    inner: MemoryStore,
    barrier: Barrier,
}

#[async_trait]
impl SessionStateStore for Rendezvous {
    fn backend(&self) -> &'static str {
        "rendezvous"
    }
    async fn commit_run_start(&self, start: StartRun) -> Result<CommitResult, StoreError> {
        self.inner.commit_run_start(start).await
    }
    async fn get_run(&self, s: &str, r: &str) -> Result<Option<RunMetadata>, StoreError> {
        self.inner.get_run(s, r).await
    }
    async fn get_current_run(&self, s: &str) -> Result<Option<RunMetadata>, StoreError> {
        self.barrier.wait().await;
        self.inner.get_current_run(s).await
    }
    async fn list_runs(&self, s: &str) -> Result<Vec<RunMetadata>, StoreError> {
        self.inner.list_runs(s).await
    }
    async fn get_run_by_request_key(
        &self,
        s: &str,
        k: &str,
    ) -> Result<Option<RunMetadata>, StoreError> {
        self.inner.get_run_by_request_key(s, k).await
    }
    async fn list_inputs(&self, s: &str) -> Result<Vec<InputEntry>, StoreError> {
        self.inner.list_inputs(s).await
    }
    async fn set_run_status(
        &self,
        s: &str,
        r: &str,
        st: RunStatus,
    ) -> Result<RunMetadata, StoreError> {
        self.inner.set_run_status(s, r, st).await
    }
    async fn delete_session(&self, s: &str) -> Result<bool, StoreError> {
        self.inner.delete_session(s).await
    }
    async fn renew_lease(&self, s: &str, r: &str, o: &str, at: u64) -> Result<bool, StoreError> {
        self.inner.renew_lease(s, r, o, at).await
    }
    async fn expire_lease(
        &self,
        s: &str,
        r: &str,
        now: u64,
    ) -> Result<Option<RunMetadata>, StoreError> {
        self.inner.expire_lease(s, r, now).await
    }
}

#[tokio::test]
async fn requests_are_served_concurrently() {
    let store = Arc::new(Rendezvous {
        inner: MemoryStore::new(),
        barrier: Barrier::new(4),
    });
    let server = Arc::new(Server::start(store).await);
    let calls: Vec<_> = (0..4)
        .map(|i| {
            let server = Arc::clone(&server);
            tokio::spawn(async move {
                server
                    .rpc("getCurrentRun", json!({"sessionId": format!("s{i}")}))
                    .await
            })
        })
        .collect();
    let all = tokio::time::timeout(Duration::from_secs(5), async {
        let mut out = Vec::new();
        for c in calls {
            out.push(c.await.unwrap());
        }
        out
    })
    .await
    .expect("the server did not serve 4 requests at once");
    assert!(all.iter().all(|v| *v == json!({"ok": null})));
}
