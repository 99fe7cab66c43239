//! How the agent fuzzer writes a request (`run::fuzz::agent_program`
//! builds them): the forms a request takes on the wire (the headers HTTP
//! and SSE let a client add, the key header's spellings, the body's
//! framing and spelling) and the requests SPEC 7 refuses whatever the
//! state (methods a route does not take, unknown routes, ids past their
//! limit). Each table is a dimension's values in `run::fuzz::alphabet`.

use reqkey_model::agent::{AgentOp, KeyHeader};
use serde_json::{json, Value};

use crate::run::fuzz::inputs::{self, Spelling};
use crate::targets::HttpRequest;
use reqkey_scenario::agent_step::Wire;

/// How a request is dressed beyond what it means: the headers HTTP and
/// SSE let a client add, the key header's wire forms, the body's framing
/// and spelling. Every form of a request is the same request (SPEC 7
/// `[[agent.wire.http-semantics]]`, `[[agent.keys.wire-forms]]`), but a
/// repeated key header, which is a malformed key
/// (`[[agent.keys.repeated-header]]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    Plain,
    /// A `Content-Type` of `application/json` as clients write it.
    ContentType(&'static str),
    /// `Accept: */*` (fetch's default).
    AcceptAny,
    /// The route's own media type as clients ask for it: axios's
    /// `application/json, text/plain, */*`, EventSource's
    /// `text/event-stream`.
    AcceptRoute,
    /// What EventSource sends on a reconnect: `Accept: text/event-stream`,
    /// `Cache-Control: no-cache`, `Last-Event-ID` (naming no event: the
    /// stream's events carry no `id`); on a chat send too, as a client that
    /// resends after its stream broke does (still a repeat of its key,
    /// `[[agent.wire.last-event-id-on-entry]]`).
    EventSource,
    /// A cache's or a client's conditional read: `If-None-Match` with an
    /// entity tag and `If-Modified-Since`, on every request
    /// (`[[agent.wire.conditional-ignored]]`).
    Conditional,
    /// A client asking past its caches: `Cache-Control: max-age=0` and
    /// `Pragma: no-cache` (`[[agent.wire.cache-directives]]`).
    Revalidate,
    /// What a proxy adds: `Via`, `X-Forwarded-For`, `Forwarded`
    /// (`[[agent.wire.proxy-headers]]`).
    Proxied,
    /// `Connection: keep-alive`.
    KeepAlive,
    /// `Expect: 100-continue` on a request with a body (the body sent at
    /// once, as curl does after its wait; `[[agent.wire.expect-continue]]`).
    ExpectContinue,
    /// `Connection: close`.
    ConnectionClose,
    /// The body sent `Transfer-Encoding: chunked`.
    Chunked,
    /// The key header's name spelt otherwise on the wire.
    KeyName(&'static str),
    /// Blanks (SP, HTAB) around the key header's value on the wire.
    KeyBlanks,
    /// The key header sent twice with one value: a malformed key.
    KeyRepeated,
    /// The body's value written otherwise.
    Spelled(Spelling),
}

/// Every form, [`Form::Plain`] first (drawn most often).
pub const FORMS: [Form; 22] = [
    Form::Plain,
    Form::ContentType("application/json"),
    Form::ContentType("application/json; charset=utf-8"),
    Form::ContentType("Application/JSON;charset=UTF-8"),
    Form::AcceptAny,
    Form::AcceptRoute,
    Form::EventSource,
    Form::ConnectionClose,
    Form::Chunked,
    Form::KeyName("X-HELIX-REQUEST-KEY"),
    Form::KeyName("x-Helix-Request-KEY"),
    Form::KeyBlanks,
    Form::KeyRepeated,
    Form::Conditional,
    Form::Revalidate,
    Form::Proxied,
    Form::KeepAlive,
    Form::ExpectContinue,
    Form::Spelled(Spelling::Spaced),
    Form::Spelled(Spelling::Reversed),
    Form::Spelled(Spelling::Escaped),
    Form::Spelled(Spelling::Numbers),
];

/// The `i`-th form (modulo [`FORMS`]).
pub fn form(i: usize) -> Form {
    FORMS[i % FORMS.len()]
}

/// A request SPEC 7 refuses whatever the state: a method a route does not
/// take (405 `method_not_allowed`), a route that does not exist (404
/// `not_found`), an id in the path one character past its limit (400
/// `validation_error`). In `path`, `{s}` is the session, `{r}` a run id
/// of the program, `{S}` and `{R}` a session and run id of 257 characters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    pub method: &'static str,
    pub path: &'static str,
    pub body: Option<&'static str>,
    pub status: u16,
    pub code: &'static str,
}

const fn refused(
    method: &'static str,
    path: &'static str,
    body: Option<&'static str>,
    status: u16,
) -> Refused {
    let code = match status {
        405 => "method_not_allowed",
        404 => "not_found",
        _ => "validation_error",
    };
    Refused {
        method,
        path,
        body,
        status,
        code,
    }
}

pub const ROUTES: [Refused; 23] = [
    refused("GET", "/sessions/{s}/start", None, 405),
    refused("PUT", "/sessions/{s}/resume", Some("{}"), 405),
    refused("DELETE", "/sessions/{s}/retry", None, 405),
    refused("PATCH", "/sessions/{s}/chat", Some("{}"), 405),
    refused("DELETE", "/sessions/{s}/chat", None, 405),
    refused(
        "POST",
        "/sessions/{s}",
        Some("{\"input\":{\"text\":\"a\"}}"),
        405,
    ),
    refused("PATCH", "/sessions/{s}", Some("{}"), 405),
    refused("POST", "/sessions/{s}/runs/{r}", Some("{}"), 405),
    refused("DELETE", "/sessions/{s}/runs/{r}", None, 405),
    refused("PUT", "/sessions/{s}/runs/{r}", Some("{}"), 405),
    refused("DELETE", "/sessions/{s}/start", None, 405),
    refused("POST", "/health", Some("{}"), 405),
    refused("DELETE", "/health", None, 405),
    refused("GET", "/sessions", None, 404),
    refused("GET", "/sessions/{s}/runs", None, 404),
    refused("DELETE", "/sessions/{s}/runs", None, 404),
    refused("POST", "/sessions/{s}/stop", Some("{}"), 404),
    refused("GET", "/sessions/{s}/runs/{r}/events", None, 404),
    refused("GET", "/session/{s}", None, 404),
    refused("GET", "/sessions/{S}", None, 400),
    refused(
        "POST",
        "/sessions/{S}/start",
        Some("{\"input\":{\"text\":\"a\"}}"),
        400,
    ),
    refused("DELETE", "/sessions/{S}", None, 400),
    refused("GET", "/sessions/{s}/runs/{R}", None, 400),
];

pub fn get(path: String) -> HttpRequest {
    HttpRequest {
        method: "GET".into(),
        path,
        ..HttpRequest::default()
    }
}

/// A repeated key header is a malformed key (SPEC 7).
pub fn malformed_key(op: AgentOp) -> AgentOp {
    let bad = |k: KeyHeader| match k {
        KeyHeader::Valid(v) => KeyHeader::Malformed(v),
        other => other,
    };
    match op {
        AgentOp::Start {
            session,
            key,
            input,
        } => AgentOp::Start {
            session,
            key: bad(key),
            input,
        },
        AgentOp::Resume {
            session,
            key,
            input,
        } => AgentOp::Resume {
            session,
            key: bad(key),
            input,
        },
        AgentOp::Retry { session, key } => AgentOp::Retry {
            session,
            key: bad(key),
        },
        AgentOp::ChatSend {
            session,
            key,
            content,
            tool,
        } => AgentOp::ChatSend {
            session,
            key: bad(key),
            content,
            tool,
        },
        other => other,
    }
}

/// The HTTP request of a model request: (method, path, key, JSON body).
pub fn http_parts(op: &AgentOp) -> (&'static str, String, Option<String>, Option<Value>) {
    let key = |k: &KeyHeader| match k {
        KeyHeader::None => None,
        KeyHeader::Valid(v) | KeyHeader::Malformed(v) => Some(v.clone()),
    };
    let s = op.session();
    match op {
        AgentOp::Start { key: k, input, .. } => (
            "POST",
            format!("/sessions/{s}/start"),
            key(k),
            Some(json!({ "input": input })),
        ),
        AgentOp::Resume { key: k, input, .. } => (
            "POST",
            format!("/sessions/{s}/resume"),
            key(k),
            Some(json!({ "input": input })),
        ),
        AgentOp::Retry { key: k, .. } => (
            "POST",
            format!("/sessions/{s}/retry"),
            key(k),
            Some(json!({})),
        ),
        AgentOp::ChatSend {
            key: k,
            content,
            tool,
            ..
        } => {
            let role = if *tool { "tool" } else { "user" };
            (
                "POST",
                format!("/sessions/{s}/chat"),
                key(k),
                Some(json!({"messages": [{"role": role, "content": content}]})),
            )
        }
        AgentOp::Reconnect { key: k, .. } => ("GET", format!("/sessions/{s}/chat"), key(k), None),
        AgentOp::Snapshot { .. } => ("GET", format!("/sessions/{s}"), None, None),
        AgentOp::ReadRun {
            run_id, wait_ms, ..
        } => (
            "GET",
            format!("/sessions/{s}/runs/{run_id}?waitMs={wait_ms}"),
            None,
            None,
        ),
        AgentOp::BadWait { run_id, .. } => (
            "GET",
            format!("/sessions/{s}/runs/{run_id}?waitMs=abc"),
            None,
            None,
        ),
        AgentOp::Delete { .. } | AgentOp::Refusal { .. } => {
            ("DELETE", format!("/sessions/{s}"), None, None)
        }
        AgentOp::Health => ("GET", "/health".into(), None, None),
    }
}

/// The key header's name as SPEC 1 writes it.
pub const KEY_HEADER: &str = "X-Helix-Request-Key";

/// `op`'s request in form `f`.
pub fn request_of(op: &AgentOp, f: Form) -> HttpRequest {
    let (method, path, key, body) = http_parts(op);
    let streams = op.streams();
    let mut headers: Vec<(String, Vec<u8>)> = Vec::new();
    let mut wire = Wire::Library;
    if let Some(k) = &key {
        match f {
            Form::KeyName(name) => {
                wire = Wire::Exact;
                headers.push((name.to_owned(), k.clone().into_bytes()));
            }
            Form::KeyBlanks => {
                wire = Wire::Exact;
                headers.push((KEY_HEADER.to_owned(), format!(" \t{k} ").into_bytes()));
            }
            Form::KeyRepeated => {
                headers.push((KEY_HEADER.to_owned(), k.clone().into_bytes()));
                headers.push((KEY_HEADER.to_owned(), k.clone().into_bytes()));
            }
            _ => headers.push((KEY_HEADER.to_owned(), k.clone().into_bytes())),
        }
    }
    let mut add =
        |name: &str, value: &str| headers.push((name.to_owned(), value.as_bytes().to_vec()));
    match f {
        Form::ContentType(ct) if body.is_some() => add("Content-Type", ct),
        Form::AcceptAny => add("Accept", "*/*"),
        Form::AcceptRoute if streams => add("Accept", "text/event-stream"),
        Form::AcceptRoute => add("Accept", "application/json, text/plain, */*"),
        Form::EventSource if streams => {
            add("Accept", "text/event-stream");
            add("Cache-Control", "no-cache");
            add("Last-Event-ID", "fz-0");
        }
        Form::Conditional => {
            add("If-None-Match", "\"fz-0\"");
            add("If-Modified-Since", "Thu, 01 Jan 2026 00:00:00 GMT");
        }
        Form::Revalidate => {
            add("Cache-Control", "max-age=0");
            add("Pragma", "no-cache");
        }
        Form::Proxied => {
            add("Via", "1.1 edge-proxy");
            add("X-Forwarded-For", "203.0.113.7, 198.51.100.2");
            add(
                "Forwarded",
                "for=203.0.113.7;proto=https;host=api.example.com",
            );
        }
        Form::KeepAlive => add("Connection", "keep-alive"),
        Form::ExpectContinue if body.is_some() => add("Expect", "100-continue"),
        Form::ConnectionClose => add("Connection", "close"),
        Form::Chunked if body.is_some() => wire = Wire::Chunked,
        _ => {}
    }
    let spelling = match f {
        Form::Spelled(how) => how,
        _ => Spelling::Compact,
    };
    HttpRequest {
        method: method.into(),
        path,
        headers,
        body: body.map(|b| inputs::spell(&b, spelling).into_bytes()),
        replica: None,
        wire,
    }
}
