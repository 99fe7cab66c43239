//! A step's request once its variables are filled in: typed, so the runner
//! sends it by its kind and never probes a JSON value for magic keys (an
//! `rpc:` body with a member named `raw` or `http` is a store request like
//! any other). Its shape was checked once, when the scenario loaded
//! (`reqkey_scenario::agent_step`); here only what a variable brings in
//! can still be wrong (a path that fills in to something that is not one).

use std::time::Duration;

use reqkey_scenario::agent_step::WaitRunStep;
use reqkey_scenario::fault::FaultStep;
use reqkey_scenario::link::LinkStep;
use serde_json::Value;

use crate::run::agent_steps::{http_step, wait_run_step};
use crate::targets::{HttpRequest, Target, TargetError};

/// One request of a trial, ready to send.
#[derive(Debug, Clone)]
pub enum Request {
    /// A `reqkey-store/1` request `{op, args}` (a store step or `rpc:`).
    Store(Value),
    /// A store request as text, sent byte for byte (`raw:`).
    Raw(String),
    /// An HTTP exchange with an agent server, after `delay_ms`.
    Http {
        request: HttpRequest,
        delay_ms: u64,
        /// The step as reports show it (`{"http": spec}`, filled in).
        shown: Value,
    },
    /// Poll a run until it reaches one of `statuses`.
    WaitRun {
        session_id: String,
        run_id: String,
        statuses: Vec<String>,
        timeout_ms: u64,
        shown: Value,
    },
    /// A fault done to a process the harness started (bounded by the
    /// target: a kill reaps within seconds, a restart within
    /// `--start-timeout-ms`).
    Fault(FaultStep),
    /// A fault armed on (or a heal of) the database links the harness
    /// owns: at once, nothing waits.
    Link(LinkStep),
}

impl Request {
    /// A store operation `op` with its (filled-in) args, as the wire
    /// carries it (`commitRunStart` wraps its args in `startRun`).
    pub fn store(op: &str, args: Value) -> Request {
        let args = if op == "commitRunStart" {
            object([("startRun", args)])
        } else {
            args
        };
        Request::Store(object([("op", Value::from(op)), ("args", args)]))
    }

    /// A `wait_run` step, filled in.
    pub fn wait_run(step: &WaitRunStep, fill: &mut dyn FnMut(&Value) -> Value) -> Request {
        let (session_id, run_id) = step.instantiate(&mut *fill);
        let mut shown = serde_json::Map::new();
        shown.insert("wait_run".to_owned(), fill(&step.source));
        Request::WaitRun {
            session_id,
            run_id,
            statuses: step.statuses.clone(),
            timeout_ms: step.timeout_ms,
            shown: Value::Object(shown),
        }
    }

    /// The request as a report or a recorded history shows it: a store
    /// request as sent (a raw one parsed, when its text is JSON); an agent
    /// step as `{"http": ...}` / `{"wait_run": ...}`.
    pub fn shown(&self) -> Value {
        match self {
            Request::Store(v) => v.clone(),
            Request::Raw(text) => serde_json::from_str(text).unwrap_or_else(|_| {
                let mut m = serde_json::Map::new();
                m.insert("raw".to_owned(), Value::String(text.clone()));
                Value::Object(m)
            }),
            Request::Http { shown, .. } | Request::WaitRun { shown, .. } => shown.clone(),
            Request::Fault(f) => {
                let mut m = serde_json::Map::new();
                m.insert("fault".to_owned(), Value::from(f.action.name()));
                m.insert("replica".to_owned(), Value::from(f.replica));
                Value::Object(m)
            }
            Request::Link(l) => {
                let mut m = serde_json::Map::new();
                m.insert("link".to_owned(), Value::from(l.label()));
                Value::Object(m)
            }
        }
    }

    /// The session the request names, if any.
    pub fn session(&self) -> Option<String> {
        match self {
            Request::Store(v) => store_session(v),
            Request::Raw(text) => serde_json::from_str::<Value>(text)
                .ok()
                .and_then(|v| store_session(&v)),
            Request::Http { request, .. } => session_in_path(&request.path).map(str::to_owned),
            Request::WaitRun { session_id, .. } => Some(session_id.clone()),
            Request::Fault(_) | Request::Link(_) => None,
        }
    }

    /// How long the request waits before it leaves (`http.delay_ms`).
    pub fn delay(&self) -> Duration {
        match self {
            Request::Http { delay_ms, .. } => Duration::from_millis(*delay_ms),
            _ => Duration::ZERO,
        }
    }

    /// Is it an HTTP exchange (whose answer's JSON is its body's)?
    pub fn is_http(&self) -> bool {
        matches!(self, Request::Http { .. })
    }

    /// Sends it under the call timeout (agent steps bound their own
    /// exchanges and waits).
    pub async fn send(&self, target: &dyn Target, timeout_ms: u64) -> Result<Value, TargetError> {
        let bounded = |answer: Result<Result<Value, TargetError>, tokio::time::error::Elapsed>| {
            answer.unwrap_or(Err(TargetError::Timeout { timeout_ms }))
        };
        let limit = Duration::from_millis(timeout_ms);
        match self {
            Request::Store(v) => bounded(tokio::time::timeout(limit, target.store_call(v)).await),
            Request::Raw(text) => {
                bounded(tokio::time::timeout(limit, target.store_call_raw(text)).await)
            }
            Request::Http {
                request, delay_ms, ..
            } => http_step(target, request.clone(), *delay_ms, timeout_ms).await,
            Request::WaitRun {
                session_id,
                run_id,
                statuses,
                timeout_ms: wait_ms,
                ..
            } => wait_run_step(target, session_id, run_id, statuses, *wait_ms, timeout_ms).await,
            Request::Fault(step) => target.fault(step).await.map(|()| self.shown()),
            Request::Link(step) => target.link(step).await.map(|()| self.shown()),
        }
    }
}

/// An object of `pairs`, the values moved in as they are. Not `json!`,
/// which re-serialises a `Value` it is given: with serde_json's
/// `arbitrary_precision` that respells a number's exponent (`2E+3` becomes
/// `2e+3`), and a body must reach the target as the scenario wrote it.
pub fn object<const N: usize>(pairs: [(&str, Value); N]) -> Value {
    Value::Object(pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}

/// The session id of a store request's args, if any.
fn store_session(request: &Value) -> Option<String> {
    let args = request.get("args")?;
    args.get("sessionId")
        .or_else(|| args.get("startRun").and_then(|s| s.get("sessionId")))
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// The session id in an agent route (`/sessions/{id}/...`), if any.
fn session_in_path(path: &str) -> Option<&str> {
    let path = path.split('?').next().unwrap_or(path);
    let rest = path.strip_prefix("/sessions/")?;
    let id = rest.split('/').next().unwrap_or(rest);
    (!id.is_empty()).then_some(id)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn an_rpc_body_with_a_member_named_raw_or_http_is_a_store_request() {
        let rpc = Request::Store(json!({"op": "getRun", "raw": "x", "http": {"path": "/"},
                                        "args": {"sessionId": "s1"}}));
        assert_eq!(rpc.session().as_deref(), Some("s1"));
        assert_eq!(rpc.delay(), Duration::ZERO);
        assert!(!rpc.is_http());
        assert_eq!(rpc.shown()["raw"], json!("x"));
    }

    #[test]
    fn sessions_are_read_from_each_kind() {
        let raw = Request::Raw(
            r#"{"op":"commitRunStart","args":{"startRun":{"sessionId":"s2"}}}"#.into(),
        );
        assert_eq!(raw.session().as_deref(), Some("s2"));
        assert_eq!(Request::Raw("not json".into()).session(), None);
        let http = Request::Http {
            request: HttpRequest {
                method: "GET".into(),
                path: "/sessions/s3/runs?x=1".into(),
                ..HttpRequest::default()
            },
            delay_ms: 5,
            shown: json!({}),
        };
        assert_eq!(http.session().as_deref(), Some("s3"));
        assert_eq!(http.delay(), Duration::from_millis(5));
    }
}
