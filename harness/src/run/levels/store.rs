//! The store level (`reqkey-store/1`, SPEC 4 and 6) in the runner: its
//! exchanges are `{op, args}` requests shown as the checker summarizes
//! them, its histories are judged for linearizability, and its answers
//! carry no invariant beyond what each step expects.

use serde_json::{json, Value};

use crate::run::event::OpShown;
use crate::run::levels::LevelRules;
use crate::run::request::Request;
use crate::targets::Level;
use reqkey_check::answer::Violation;
use reqkey_check::lin::{summarize_answer, summarize_request};

/// The store level's rules.
#[derive(Debug)]
pub struct StoreRules;

impl LevelRules for StoreRules {
    fn level(&self) -> Level {
        Level::Store
    }

    fn shown(&self, request: &Request, answer: Option<&Value>) -> OpShown {
        OpShown {
            request: summarize_request(&request.shown()),
            answer: answer.map_or_else(|| "(no answer)".to_owned(), summarize_answer),
            session: request.session(),
        }
    }

    fn check_answer(&self, _: &Request, _: &Value, _: bool) -> Option<Violation> {
        None
    }

    fn delete_session(&self, session: &str) -> Option<Request> {
        Some(Request::store(
            "deleteSession",
            json!({ "sessionId": session }),
        ))
    }

    fn store_histories(&self) -> bool {
        true
    }
}

/// An operation a `mixed_histories` stage recorded (a store request as
/// sent, its wire answer), shown as any store exchange is.
pub fn shown_operation(op: &reqkey_check::lin::Operation) -> OpShown {
    OpShown {
        request: summarize_request(&op.request),
        answer: op
            .answer
            .as_ref()
            .map_or_else(|| "(no answer)".to_owned(), summarize_answer),
        session: Request::Store(op.request.clone()).session(),
    }
}

/// The clause of SPEC 6 a protocol violation of a `store+http` answer
/// breaks, read from the violation the target reported
/// (`targets::http_store`): a status other than 200 or a body that is not
/// one `{ok}|{error}` is the envelope, an error object of another shape
/// the error shape, and the rest (content type, repeated members,
/// trailing bytes, not JSON) strict JSON.
pub fn protocol_clause(message: &str) -> &'static str {
    if message.contains("not a reqkey-store/1 error object") {
        "wire.store.error-shape"
    } else if message.contains("always answers 200") || message.contains("not exactly one of") {
        "wire.store.envelope"
    } else {
        "wire.store.strict-json"
    }
}
