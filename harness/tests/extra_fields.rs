//! The suite holds a target to the contract, not to the reference's own
//! choices: SPEC 4, 6 and 7 name the fields an answer must carry, not a
//! closed set, and never fix an error's `message` text. So a correct
//! implementation that adds fields (a `createdAt` on every run, a
//! `requestId` on every error) and words its messages differently passes,
//! at both levels. Each test wraps a correct reference target and rewrites
//! every answer that way, then runs the whole corpus; a control run over a
//! broken store shows the wrapper does not blunt the suite.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use common::{assert_failures_are_verdicts, corpus_for, failing, in_process_corpus};
use reqkey_harness::run::runner::{self, RunConfig};
use reqkey_harness::targets::profile::{parse_profile_flag, Profile};
use reqkey_harness::targets::spec::open_target;
use reqkey_harness::targets::{
    HttpRequest, HttpResponse, Level, Target, TargetError, TargetOptions,
};
use serde_json::{json, Value};

/// A target that adds fields to every answer and rewords every message.
#[derive(Debug)]
struct Embellished {
    inner: Arc<dyn Target>,
    /// How many values it changed (the test checks it really did).
    changes: AtomicUsize,
}

impl Embellished {
    fn new(inner: Arc<dyn Target>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            changes: AtomicUsize::new(0),
        })
    }

    fn add(&self, obj: &mut serde_json::Map<String, Value>, key: &str, value: Value) {
        obj.insert(key.to_owned(), value);
        self.changes.fetch_add(1, Ordering::Relaxed);
    }

    /// Every run gets `createdAt`, every input entry `seq`, every error a
    /// `requestId` and another `message`, every other object `extra`.
    fn embellish(&self, v: &mut Value) {
        match v {
            Value::Object(obj) => {
                let is_run = obj.contains_key("runId") && obj.contains_key("startSequence");
                let is_input = obj.contains_key("runId") && obj.contains_key("input");
                let is_error = obj.contains_key("code")
                    || (obj.contains_key("kind") && !obj.contains_key("runId"));
                for (key, child) in obj.iter_mut() {
                    // An input is the client's own JSON: it is never touched.
                    if key != "input" {
                        self.embellish(child);
                    }
                }
                if is_error {
                    self.add(obj, "requestId", json!("req-0001"));
                    self.add(
                        obj,
                        "message",
                        json!("Refused; see the code (reworded by a wrapper)."),
                    );
                } else if is_run {
                    self.add(obj, "createdAt", json!("2026-12-03T00:00:00Z"));
                } else if is_input {
                    self.add(obj, "seq", json!(7));
                } else {
                    self.add(
                        obj,
                        "extra",
                        json!({"note": "an implementation's own field"}),
                    );
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|i| self.embellish(i)),
            _ => {}
        }
    }

    fn embellish_sse(&self, body: &[u8]) -> Vec<u8> {
        let text = String::from_utf8_lossy(body);
        let mut out = String::new();
        for line in text.split_inclusive('\n') {
            let Some(data) = line.strip_prefix("data: ") else {
                out.push_str(line);
                continue;
            };
            match serde_json::from_str::<Value>(data.trim_end()) {
                Ok(Value::Object(mut obj)) => {
                    self.add(&mut obj, "streamId", json!("stream-1"));
                    out.push_str(&format!("data: {}\n", Value::Object(obj)));
                }
                _ => out.push_str(line),
            }
        }
        out.into_bytes()
    }
}

#[async_trait]
impl Target for Embellished {
    fn level(&self) -> Level {
        self.inner.level()
    }

    fn describe(&self) -> String {
        format!("embellished {}", self.inner.describe())
    }

    async fn health(&self) -> Result<Value, TargetError> {
        let mut h = self.inner.health().await?;
        h["build"] = json!("2026.12.03");
        Ok(h)
    }

    async fn store_call(&self, request: &Value) -> Result<Value, TargetError> {
        let mut answer = self.inner.store_call(request).await?;
        if let Some(ok) = answer.get_mut("ok") {
            self.embellish(ok);
        }
        if let Some(Value::Object(err)) = answer.get_mut("error") {
            self.add(err, "requestId", json!("req-0001"));
            self.add(
                err,
                "message",
                json!("Refused; see the kind (reworded by a wrapper)."),
            );
        }
        Ok(answer)
    }

    async fn http(&self, request: HttpRequest) -> Result<HttpResponse, TargetError> {
        let mut response = self.inner.http(request).await?;
        let content_type = response
            .headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case("content-type"))
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        if content_type.starts_with("text/event-stream") {
            response.body = self.embellish_sse(&response.body);
        } else if let Ok(mut body) = serde_json::from_slice::<Value>(&response.body) {
            self.embellish(&mut body);
            response.body = serde_json::to_vec(&body).unwrap();
        }
        response
            .headers
            .retain(|(n, _)| !n.eq_ignore_ascii_case("content-length"));
        Ok(response)
    }
}

async fn run(
    target: Arc<dyn Target>,
    scenarios: &[reqkey_harness::scenario::Scenario],
) -> reqkey_harness::run::event::RunSummary {
    runner::run(target, scenarios, &RunConfig::new(17), &mut []).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_store_that_adds_fields_and_rewords_messages_passes_the_whole_store_suite() {
    let inner = open_target("memory", TargetOptions::default())
        .await
        .unwrap();
    let target = Embellished::new(inner);
    let summary = run(target.clone(), &in_process_corpus("store")).await;
    assert_eq!(failing(&summary), BTreeSet::new(), "{summary:#?}");
    assert!(summary.passed >= 30, "only {} scenarios", summary.passed);
    assert!(
        target.changes.load(Ordering::Relaxed) > 1_000,
        "the wrapper changed little"
    );

    // The same wrapper over a store without the key rule still fails: the
    // suite's checks on named fields keep their teeth.
    let broken = open_target("broken-memory:no-key-rule", TargetOptions::default())
        .await
        .unwrap();
    let summary = run(Embellished::new(broken), &in_process_corpus("store")).await;
    let failed = failing(&summary);
    for id in ["request-key.taken-names-holder", "request-key.race"] {
        assert!(failed.contains(id), "{id}: {failed:?}");
    }
    assert_failures_are_verdicts("embellished broken-memory:no-key-rule", &summary);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_agent_server_that_adds_fields_and_rewords_messages_passes_its_profile() {
    for (spec, profile) in [
        ("reference-agent", Profile::default()),
        (
            "reference-agent:no-request-keys",
            parse_profile_flag("keys-ignored").unwrap(),
        ),
    ] {
        let inner = open_target(spec, TargetOptions::default()).await.unwrap();
        let target = Embellished::new(inner);
        let mut cfg = RunConfig::new(19);
        cfg.repeat_override = Some(2);
        let summary = runner::run(
            target.clone(),
            &corpus_for("agent", &profile),
            &cfg,
            &mut [],
        )
        .await;
        assert_eq!(failing(&summary), BTreeSet::new(), "{spec}: {summary:#?}");
        assert!(
            target.changes.load(Ordering::Relaxed) > 100,
            "{spec}: the wrapper changed little"
        );
    }
}
