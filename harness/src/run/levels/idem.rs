//! The Idempotency-Key level (`reqkey-idem/1`, SPEC 10) in the runner: its
//! exchanges are HTTP requests to an app behind the implementation judged,
//! shown as `METHOD path` and answers as their status; its answers are
//! judged by their scenarios alone (SPEC 8's invariants are the agent
//! API's), and an app has no sessions to delete.

use serde_json::Value;

use crate::run::event::OpShown;
use crate::run::levels::agent::{http_answer_label, http_label};
use crate::run::levels::LevelRules;
use crate::run::request::Request;
use crate::targets::Level;
use reqkey_check::answer::Violation;

/// The Idempotency-Key level's rules.
#[derive(Debug)]
pub struct IdemRules;

impl LevelRules for IdemRules {
    fn level(&self) -> Level {
        Level::Idem
    }

    fn shown(&self, request: &Request, answer: Option<&Value>) -> OpShown {
        OpShown {
            request: http_label(request),
            answer: answer.map_or_else(|| "(no answer)".to_owned(), http_answer_label),
            session: None,
        }
    }

    fn check_answer(&self, _: &Request, _: &Value, _: bool) -> Option<Violation> {
        None
    }

    fn delete_session(&self, _: &str) -> Option<Request> {
        None
    }

    fn store_histories(&self) -> bool {
        false
    }
}
