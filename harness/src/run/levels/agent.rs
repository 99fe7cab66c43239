//! The agent level (`reqkey-agent/1`, SPEC 7) in the runner: its exchanges
//! are HTTP requests shown as `METHOD path` and answers as their status
//! and what their body says of the run; every answer keeps the invariants
//! of SPEC 8 "What every answer keeps" (`reqkey_check::answer`); a session
//! is deleted with `DELETE /sessions/{id}`.

use serde_json::Value;

use crate::run::event::OpShown;
use crate::run::levels::LevelRules;
use crate::run::request::Request;
use crate::targets::{HttpRequest, Level};
use reqkey_check::answer::Violation;

/// The agent level's rules.
#[derive(Debug)]
pub struct AgentRules;

impl LevelRules for AgentRules {
    fn level(&self) -> Level {
        Level::Agent
    }

    fn shown(&self, request: &Request, answer: Option<&Value>) -> OpShown {
        OpShown {
            request: http_label(request),
            answer: answer.map_or_else(|| "(no answer)".to_owned(), http_answer_label),
            session: request.session(),
        }
    }

    fn check_answer(&self, sent: &Request, answer: &Value, may_be_cut: bool) -> Option<Violation> {
        let http = match sent {
            Request::Http { request, .. } => Some(request),
            Request::WaitRun { .. } => None,
            _ => return None,
        };
        reqkey_check::answer::check_answer(http, answer, may_be_cut)
    }

    fn delete_session(&self, session: &str) -> Option<Request> {
        Some(Request::Http {
            request: HttpRequest {
                method: "DELETE".into(),
                path: format!("/sessions/{session}"),
                ..HttpRequest::default()
            },
            delay_ms: 0,
            shown: Value::Null,
        })
    }

    fn store_histories(&self) -> bool {
        false
    }
}

/// An HTTP exchange as `METHOD path`; another request as its step shows it.
pub fn http_label(request: &Request) -> String {
    match request {
        Request::Http { request, .. } => format!("{} {}", request.method, request.path),
        Request::WaitRun {
            session_id, run_id, ..
        } => format!("wait_run {session_id} {run_id}"),
        other => other.shown().to_string(),
    }
}

/// An HTTP answer, briefly: its status and what its JSON body says of the
/// run (`201 started r1`, `409 request_key_in_use`).
pub fn http_answer_label(answer: &Value) -> String {
    let Some(status) = answer.get("status") else {
        return answer.to_string();
    };
    let mut out = status.to_string();
    let json = answer.get("json");
    let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_owned);
    let said = [
        text(json.and_then(|j| j.get("status"))),
        text(json.and_then(|j| j.get("runId"))),
        text(
            json.and_then(|j| j.get("error"))
                .and_then(|e| e.get("code")),
        )
        .or_else(|| text(json.and_then(|j| j.get("error")))),
    ];
    for word in said.into_iter().flatten() {
        out.push(' ');
        out.push_str(&word);
    }
    out
}
