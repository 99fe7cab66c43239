//! The universal invariants of an agent answer (SPEC 2, SPEC 7): what
//! every answer of every scenario must keep, whatever the scenario is about.
//!
//! A scenario's `expect` says what *its* clause requires of a step; a
//! server can still break a clause nobody was looking at in that step: a
//! 409 whose `message` is an object, a stream that goes on after its
//! `finish`, a correlation header that echoes a malformed key on a route
//! that ignores it. Those bugs hide between the scenarios written about
//! them, so the runner asks this module about every answered `http` and
//! `wait_run` step, and a violation fails the step naming its clause:
//!
//! - `[[agent.error.shape]]`: every answer with status 400 or above has
//!   the body `{"code": string, "message": string, "runId"?: string}`,
//!   except the bare refusal an HTTP layer may give a key byte HTTP
//!   refuses (`[[key.http-layer-refusal]]`);
//! - `[[agent.chat.sse-events]]`: a `text/event-stream` answer starts with
//!   one `run-start`, ends with one `finish` carrying a string `status`,
//!   and has nothing after it; the only exception is a step a fault may
//!   cut (`may_be_cut`), whose stream may stop before its `finish`
//!   (SPEC 8.1, `[[cert.judge.silence-is-indefinite]]`);
//! - `[[agent.chat.one-run-per-stream]]`: a stream names one run;
//! - `[[key.parse.not-echoed]]`: the answer to a request that carries a
//!   malformed key (or a repeated key header) contains no value of that
//!   header, raw or JSON-escaped, in its body, header names or values,
//!   on every route (a chat reconnect and a tool-result send, which ignore
//!   the key, included). Values shorter than [`MIN_ECHO_NEEDLE`]
//!   characters, and values the request's own body contains (a server
//!   echoes its input by design), are not looked for: they would be found
//!   in correct answers by chance.
//!
//! Pure: an answer in the JSON form of the runner (`status`, `headers`,
//! `body`, `json`, `sse`) and the request that got it, a verdict out.

use reqkey_model::key::{parse_request_key_header, REQUEST_KEY_HEADER};
use reqkey_scenario::agent_step::HttpRequest;
use serde_json::Value;

/// The shortest malformed key value looked for in every answer.
pub const MIN_ECHO_NEEDLE: usize = 6;

/// A universal invariant an answer broke.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The clause id of `spec/SPEC.md` (without brackets).
    pub clause: &'static str,
    /// What was wrong, naming no value the target sent beyond its shape.
    pub message: String,
}

impl Violation {
    fn new(clause: &'static str, message: impl Into<String>) -> Self {
        Self {
            clause,
            message: message.into(),
        }
    }
}

/// The first universal invariant `answer` breaks, if any. `request` is
/// the exchange's request when the step wrote it (`None` for the polls of
/// a `wait_run`, which carry no key); `may_be_cut` is the step's flag.
pub fn check_answer(
    request: Option<&HttpRequest>,
    answer: &Value,
    may_be_cut: bool,
) -> Option<Violation> {
    if let Some(request) = request {
        if let Some(v) = malformed_key_echo(request, answer) {
            return Some(v);
        }
    }
    if let Some(v) = error_shape(request, answer) {
        return Some(v);
    }
    answer
        .get("sse")
        .and_then(|sse| stream_shape(sse, may_be_cut))
}

/// Is `name` the key header, in any spelling (RFC 9110: field names are
/// case-insensitive)?
fn is_key_header(name: &str) -> bool {
    name.eq_ignore_ascii_case(REQUEST_KEY_HEADER)
}

/// The values of the key header in `request`, blanks around each trimmed
/// (RFC 9110 OWS is not part of a field value).
fn key_values(request: &HttpRequest) -> Vec<&[u8]> {
    request
        .headers
        .iter()
        .filter(|(name, _)| is_key_header(name))
        .map(|(_, value)| value.trim_ascii())
        .collect()
}

/// `[[key.parse.not-echoed]]` over any answer to a request whose key
/// header is malformed or repeated.
fn malformed_key_echo(request: &HttpRequest, answer: &Value) -> Option<Violation> {
    let values = key_values(request);
    if values.is_empty() || parse_request_key_header(values.iter().copied()).is_ok() {
        return None;
    }
    let own_body = request
        .body
        .as_deref()
        .map(String::from_utf8_lossy)
        .unwrap_or_default();
    for value in values {
        let needle = String::from_utf8_lossy(value);
        if needle.chars().count() < MIN_ECHO_NEEDLE || own_body.contains(needle.as_ref()) {
            continue;
        }
        if let Some(place) = echoed_in(answer, &needle) {
            return Some(Violation::new(
                "key.parse.not-echoed",
                format!(
                    "the answer to a request with a malformed {REQUEST_KEY_HEADER} header \
                     echoes the header's value in {place}"
                ),
            ));
        }
    }
    None
}

/// A key byte HTTP itself refuses (SPEC 2 `[S2-http-layer]`): a C0
/// control other than HTAB, or DEL.
fn http_refuses(value: &[u8]) -> bool {
    value.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f)
}

/// `[[agent.error.shape]]` of an answer with status 400 or above.
fn error_shape(request: Option<&HttpRequest>, answer: &Value) -> Option<Violation> {
    let status = answer.get("status").and_then(Value::as_u64)?;
    if status < 400 {
        return None;
    }
    let layer_refusal =
        status == 400 && request.is_some_and(|r| key_values(r).into_iter().any(http_refuses));
    if layer_refusal {
        return None;
    }
    let wrong = |what: &str| {
        Some(Violation::new(
            "agent.error.shape",
            format!(
                "the {status} answer's body {what}; every error is \
                 {{\"code\": string, \"message\": string, \"runId\"?: string}}"
            ),
        ))
    };
    let Some(body) = answer.get("json") else {
        return wrong("is not JSON");
    };
    let Some(body) = body.as_object() else {
        return wrong("is not a JSON object");
    };
    for field in ["code", "message"] {
        match body.get(field) {
            None => return wrong(&format!("lacks `{field}`")),
            Some(Value::String(_)) => {}
            Some(_) => return wrong(&format!("has a `{field}` that is not a string")),
        }
    }
    match body.get("runId") {
        None | Some(Value::String(_)) => None,
        Some(_) => wrong("has a `runId` that is not a string"),
    }
}

/// `[[agent.chat.sse-events]]` and `[[agent.chat.one-run-per-stream]]`
/// of a stream read whole (the runner's `sse` form).
fn stream_shape(sse: &Value, may_be_cut: bool) -> Option<Violation> {
    let empty = Vec::new();
    let events = sse
        .get("events")
        .and_then(Value::as_array)
        .unwrap_or(&empty);
    let name = |e: &Value| e.get("event").and_then(Value::as_str).map(str::to_owned);
    let events_clause = |message: String| Some(Violation::new("agent.chat.sse-events", message));
    let runs = sse
        .get("runIds")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    if runs > 1 {
        return Some(Violation::new(
            "agent.chat.one-run-per-stream",
            format!("the stream names {runs} runs; a stream never mixes two runs"),
        ));
    }
    let Some(first) = events.first() else {
        if may_be_cut {
            return None;
        }
        return events_clause("the stream has no event; it starts with `run-start`".into());
    };
    if name(first).as_deref() != Some("run-start") {
        return events_clause(format!(
            "the stream starts with `{}`, not `run-start`",
            name(first).unwrap_or_default()
        ));
    }
    if let Some(at) = events
        .iter()
        .skip(1)
        .position(|e| name(e).as_deref() == Some("run-start"))
    {
        return events_clause(format!(
            "a second `run-start` at event {}: a stream is one run's, from one `run-start`",
            at + 1
        ));
    }
    let finish = events
        .iter()
        .position(|e| name(e).as_deref() == Some("finish"));
    let Some(finish) = finish else {
        if may_be_cut {
            return None;
        }
        return events_clause(
            "the stream ended without a `finish` event (a stream ends with its run's `finish`)"
                .into(),
        );
    };
    if finish + 1 != events.len() {
        return events_clause(format!(
            "{} event(s) after `finish`: `finish` is the stream's last event",
            events.len() - finish - 1
        ));
    }
    let status = events[finish].get("data").and_then(|d| d.get("status"));
    if !matches!(status, Some(Value::String(_))) {
        return events_clause("the `finish` event has no string `status`".into());
    }
    None
}

/// Where `needle` appears in an answer's body or headers (names and
/// values), raw or JSON-escaped; `None` when it appears nowhere.
pub fn echoed_in(answer: &Value, needle: &str) -> Option<String> {
    if needle.is_empty() {
        return None;
    }
    let escaped = Value::String(needle.to_owned()).to_string();
    let escaped = escaped.trim_matches('"').to_owned();
    let forms = [needle.to_owned(), escaped];
    let hit = |hay: &str| forms.iter().any(|f| hay.contains(f.as_str()));
    if answer.get("body").and_then(Value::as_str).is_some_and(hit) {
        return Some("the body".into());
    }
    if let Some(Value::Object(headers)) = answer.get("headers") {
        for (name, value) in headers {
            if hit(name) || value.as_str().is_some_and(hit) {
                return Some(format!("the header `{name}`"));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn keyed(name: &str, value: &str) -> HttpRequest {
        HttpRequest {
            method: "POST".into(),
            path: "/sessions/s/start".into(),
            headers: vec![(name.into(), value.as_bytes().to_vec())],
            body: Some(br#"{"input":{"text":"a"}}"#.to_vec()),
            ..HttpRequest::default()
        }
    }

    fn stream(names: &[&str], runs: &[&str]) -> Value {
        let events: Vec<Value> = names
            .iter()
            .map(|n| match *n {
                "finish" => json!({"event": n, "data": {"status": "completed"}}),
                _ => json!({"event": n, "data": {"runId": runs.first().copied().unwrap_or("r")}}),
            })
            .collect();
        json!({"status": 200, "headers": {}, "body": "",
               "sse": {"names": names, "events": events, "runIds": runs}})
    }

    #[test]
    fn echo_detection_sees_raw_and_json_escaped_values_in_body_and_headers() {
        let a = json!({"status": 400, "headers": {"x-echo": "k y"},
                       "body": r#"{"message":"bad \"q\""}"#});
        assert_eq!(echoed_in(&a, "k y").as_deref(), Some("the header `x-echo`"));
        assert_eq!(echoed_in(&a, "\"q\"").as_deref(), Some("the body"));
        assert_eq!(echoed_in(&a, "zz"), None);
    }

    #[test]
    fn a_malformed_key_echoed_in_any_answer_names_not_echoed() {
        let request = keyed("x-HELIX-request-key", "  leak me  ");
        let ok = json!({"status": 200, "headers": {"x-helix-request-key": "leak me"}, "body": ""});
        let v = check_answer(Some(&request), &ok, false).unwrap();
        assert_eq!(v.clause, "key.parse.not-echoed");
        let clean = json!({"status": 200, "headers": {}, "body": "{}"});
        assert_eq!(check_answer(Some(&request), &clean, false), None);
        // A valid key may be echoed; a short malformed one is not looked for.
        let valid = keyed("X-Helix-Request-Key", " leak-me ");
        assert_eq!(check_answer(Some(&valid), &ok, false), None);
        let short = keyed("X-Helix-Request-Key", "a b");
        let a = json!({"status": 400, "headers": {}, "body": "a b",
                       "json": {"code": "validation_error", "message": "a b"}});
        assert_eq!(check_answer(Some(&short), &a, false), None);
    }

    #[test]
    fn a_repeated_key_header_is_malformed_even_with_valid_values() {
        let mut request = keyed("X-Helix-Request-Key", "valid-key-1");
        request
            .headers
            .push(("x-helix-request-key".into(), b"valid-key-1".to_vec()));
        let a = json!({"status": 400, "headers": {}, "body": "valid-key-1",
                       "json": {"code": "validation_error", "message": "valid-key-1"}});
        assert_eq!(
            check_answer(Some(&request), &a, false).unwrap().clause,
            "key.parse.not-echoed"
        );
    }

    #[test]
    fn error_bodies_must_have_their_shape() {
        let shaped = json!({"status": 409, "headers": {}, "body": "",
                            "json": {"code": "state_already_running", "message": "m", "runId": "r"}});
        assert_eq!(check_answer(None, &shaped, false), None);
        for body in [
            json!({"code": "x", "message": {"text": "m"}}),
            json!({"code": 1, "message": "m"}),
            json!({"message": "m"}),
            json!({"code": "x", "message": "m", "runId": 7}),
            json!(["x"]),
        ] {
            let a = json!({"status": 404, "headers": {}, "body": "", "json": body});
            assert_eq!(
                check_answer(None, &a, false).unwrap().clause,
                "agent.error.shape",
                "{body}"
            );
        }
        let not_json = json!({"status": 503, "headers": {}, "body": "oops"});
        assert_eq!(
            check_answer(None, &not_json, false).unwrap().clause,
            "agent.error.shape"
        );
        // Success answers are not error bodies.
        let created = json!({"status": 201, "headers": {}, "body": "", "json": {"x": 1}});
        assert_eq!(check_answer(None, &created, false), None);
        // A bare 400 to a key byte HTTP refuses is the HTTP layer's.
        let bare = json!({"status": 400, "headers": {}, "body": ""});
        let control = keyed("X-Helix-Request-Key", "bad\u{1}key");
        assert_eq!(check_answer(Some(&control), &bare, false), None);
    }

    #[test]
    fn streams_start_with_run_start_and_end_with_one_finish() {
        let good = stream(&["run-start", "text", "finish"], &["r1"]);
        assert_eq!(check_answer(None, &good, false), None);
        for (names, clause) in [
            (
                &["run-start", "text", "finish", "text"][..],
                "agent.chat.sse-events",
            ),
            (&["run-start", "text"][..], "agent.chat.sse-events"),
            (&["text", "finish"][..], "agent.chat.sse-events"),
            (
                &["run-start", "finish", "finish"][..],
                "agent.chat.sse-events",
            ),
            (
                &["run-start", "run-start", "finish"][..],
                "agent.chat.sse-events",
            ),
            (&[][..], "agent.chat.sse-events"),
        ] {
            let a = stream(names, &["r1"]);
            assert_eq!(
                check_answer(None, &a, false).unwrap().clause,
                clause,
                "{names:?}"
            );
        }
        let mixed = stream(&["run-start", "text", "finish"], &["r1", "r2"]);
        assert_eq!(
            check_answer(None, &mixed, false).unwrap().clause,
            "agent.chat.one-run-per-stream"
        );
        let no_status = json!({"status": 200, "headers": {}, "body": "", "sse": {
            "events": [{"event": "run-start", "data": {}}, {"event": "finish", "data": {}}],
            "runIds": []}});
        assert!(check_answer(None, &no_status, false).is_some());
    }

    #[test]
    fn a_step_a_fault_may_cut_may_end_before_its_finish_but_not_mix_runs() {
        let cut = stream(&["run-start", "text"], &["r1"]);
        assert_eq!(check_answer(None, &cut, true), None);
        assert_eq!(check_answer(None, &stream(&[], &[]), true), None);
        let after = stream(&["run-start", "finish", "text"], &["r1"]);
        assert!(check_answer(None, &after, true).is_some());
        let mixed = stream(&["run-start", "text"], &["r1", "r2"]);
        assert!(check_answer(None, &mixed, true).is_some());
    }
}
