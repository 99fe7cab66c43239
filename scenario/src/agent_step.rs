//! The `http` and `wait_run` steps of agent scenarios as data: their keys,
//! their bounds, and the HTTP request an `http` step describes. Validated
//! once, at load time, into [`HttpStep`] and [`WaitRunStep`], so a mistake
//! is a load error with a position and the runner never validates again.
//! Nothing here talks to a network; the harness's `run::agent_steps`
//! executes them.

use serde_json::{Map, Value};

/// One HTTP request of an agent-level step, with full control of headers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HttpRequest {
    pub method: String,
    /// Path and query, starting with `/`.
    pub path: String,
    /// Raw header values; a name may repeat, values need not be UTF-8.
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Option<Vec<u8>>,
    /// The replica of a replicated target this request goes to (the
    /// step's `replica:`, taken modulo the number of replicas); `None`:
    /// the next in turn. A one-endpoint target ignores it.
    pub replica: Option<usize>,
    /// How the request goes on the wire (the step's `wire:`).
    pub wire: Wire,
}

/// How an `http` step's request goes on the wire.
///
/// An HTTP library respells what it sends: header names lower-cased,
/// blanks around values kept or dropped as it likes, the request target
/// always in origin form. RFC 9110 lets clients, proxies and browsers send
/// other spellings, and a server must judge them the same; `exact` and
/// `absolute-form` write the request head byte for byte instead.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Wire {
    /// Through the harness's HTTP client (`wire` absent or `library`).
    #[default]
    Library,
    /// `exact`: the request line, then each header as `Name: value` with
    /// the name as written and the value's bytes as they are (blanks
    /// around it included), then `Host`, `Content-Length` (with a body)
    /// and `Connection: close`.
    Exact,
    /// `absolute-form`: as `exact`, the request target in absolute form
    /// (`POST http://HOST:PORT/sessions/... HTTP/1.1`, RFC 9112 3.2.2).
    AbsoluteForm,
    /// `chunked`: as `exact`, the body sent with `Transfer-Encoding:
    /// chunked` in chunks instead of with `Content-Length` (RFC 9112
    /// section 7.1: one body either way).
    Chunked,
}

impl Wire {
    /// The spelling a step writes.
    pub fn name(self) -> &'static str {
        match self {
            Wire::Library => "library",
            Wire::Exact => "exact",
            Wire::AbsoluteForm => "absolute-form",
            Wire::Chunked => "chunked",
        }
    }

    /// Every spelling, in the order the format lists them.
    pub const ALL: [Wire; 4] = [
        Wire::Library,
        Wire::Exact,
        Wire::AbsoluteForm,
        Wire::Chunked,
    ];
}

/// The whole answer to an [`HttpRequest`] (an SSE body read to its end).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// The largest body a step may send (`pad_to_bytes` included).
pub const MAX_BODY_BYTES: u64 = 8 * 1024 * 1024;
/// The longest `delay_ms` of an `http` step and `timeout_ms` of a `wait_run`.
pub const MAX_WAIT_MS: u64 = 60_000;
/// The default `timeout_ms` of a `wait_run`.
pub const DEFAULT_WAIT_MS: u64 = 5_000;

/// The largest `replica` index a step may name.
pub const MAX_REPLICA_INDEX: u64 = 15;

const HTTP_KEYS: [&str; 9] = [
    "method",
    "wire",
    "replica",
    "path",
    "headers",
    "json",
    "body",
    "pad_to_bytes",
    "delay_ms",
];
const WAIT_KEYS: [&str; 4] = ["sessionId", "runId", "status", "timeout_ms"];

pub fn bounded(v: Option<&Value>, what: &str, max: u64) -> Result<u64, String> {
    match v {
        None => Ok(0),
        Some(Value::Number(n)) => match n.as_u64() {
            Some(x) if x <= max => Ok(x),
            _ => Err(format!("{what} must be a whole number from 0 to {max}")),
        },
        Some(_) => Err(format!("{what} must be a whole number from 0 to {max}")),
    }
}

fn unknown_keys(map: &Map<String, Value>, known: &[&str], step: &str) -> Result<(), String> {
    match map.keys().find(|k| !known.contains(&k.as_str())) {
        Some(k) => Err(format!(
            "`{step}` has no field `{k}` (fields: {})",
            known.join(", ")
        )),
        None => Ok(()),
    }
}

/// An `http` step, parsed once when the scenario loads: every field typed
/// and bounded. What stays a template is text that may hold `${var}` (the
/// path, header values, the body): [`HttpStep::instantiate`] fills it in
/// when the step is sent, and checks nothing else.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpStep {
    /// The step as written, for reports and labels.
    pub source: Value,
    /// Upper case (`GET` when absent).
    pub method: String,
    /// Starts with `/` (or is a `${var}` that must fill in to one).
    pub path: String,
    /// In order; a name may repeat.
    pub headers: Vec<(String, HeaderTemplate)>,
    pub body: Option<BodyTemplate>,
    /// The body is padded with spaces to this many bytes (0: not padded).
    pub pad_to_bytes: u64,
    /// How long the request waits before it leaves.
    pub delay_ms: u64,
    /// The replica it goes to; `None`: the next in turn.
    pub replica: Option<usize>,
    /// How the request goes on the wire.
    pub wire: Wire,
}

/// A header value as a step gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderTemplate {
    /// Text, `${var}` filled in.
    Text(String),
    /// `{hex: "..."}`: exact bytes, sent as they are.
    Bytes(Vec<u8>),
}

/// A request body as a step gives it.
#[derive(Debug, Clone, PartialEq)]
pub enum BodyTemplate {
    /// `json:`: sent as the JSON text of the value once filled in, each
    /// number as written.
    Json(Value),
    /// `body:`: text, `${var}` filled in.
    Text(String),
}

/// A `wait_run` step, parsed once when the scenario loads.
#[derive(Debug, Clone, PartialEq)]
pub struct WaitRunStep {
    /// The step as written, for reports and labels.
    pub source: Value,
    /// Templates (`${var}` filled in when sent).
    pub session_id: String,
    pub run_id: String,
    /// The statuses that end the wait (at least one).
    pub statuses: Vec<String>,
    /// The longest wait ([`DEFAULT_WAIT_MS`] when absent).
    pub timeout_ms: u64,
}

/// Fills `${var}`s into a text template: the filled value when it is a
/// string, else its JSON text.
fn fill_text(fill: &mut dyn FnMut(&Value) -> Value, template: &str) -> String {
    match fill(&Value::String(template.to_owned())) {
        Value::String(s) => s,
        other => other.to_string(),
    }
}

impl HttpStep {
    /// Parses an `http` step's map; a mistake is the message a load error
    /// carries (with the step's position).
    pub fn parse(spec: Value) -> Result<HttpStep, String> {
        let Value::Object(map) = &spec else {
            return Err("`http` takes a map: {method, path, headers, json | body}".into());
        };
        unknown_keys(map, &HTTP_KEYS, "http")?;
        let path = match map.get("path") {
            Some(Value::String(p)) if p.starts_with('/') || p.starts_with('$') => p.clone(),
            _ => return Err("`http.path` must be a string starting with `/`".into()),
        };
        let method = match map.get("method") {
            None => "GET".to_owned(),
            Some(Value::String(m)) => m.to_ascii_uppercase(),
            Some(_) => return Err("`http.method` must be a string".into()),
        };
        let body = match (map.get("json"), map.get("body")) {
            (Some(_), Some(_)) => return Err("`http` takes `json` or `body`, not both".into()),
            (Some(j), None) => Some(BodyTemplate::Json(j.clone())),
            (None, Some(Value::String(b))) => Some(BodyTemplate::Text(b.clone())),
            (None, Some(_)) => {
                return Err("`http.body` must be a string (use `json` for a JSON body)".into())
            }
            (None, None) => None,
        };
        let pad_to_bytes = bounded(map.get("pad_to_bytes"), "pad_to_bytes", MAX_BODY_BYTES)?;
        let delay_ms = bounded(map.get("delay_ms"), "delay_ms", MAX_WAIT_MS)?;
        let replica = match map.get("replica") {
            None => None,
            Some(r) => Some(
                usize::try_from(bounded(Some(r), "replica", MAX_REPLICA_INDEX)?)
                    .map_err(|_| "replica is out of range".to_owned())?,
            ),
        };
        let headers = headers_of(map.get("headers"))?;
        let wire =
            match map.get("wire") {
                None => Wire::Library,
                Some(Value::String(w)) => Wire::ALL
                    .into_iter()
                    .find(|k| k.name() == w)
                    .ok_or_else(|| {
                        format!(
                        "`http.wire` is `library`, `exact`, `absolute-form` or `chunked`, not `{w}`"
                    )
                    })?,
                Some(_) => return Err("`http.wire` must be a string".into()),
            };
        if wire != Wire::Library {
            let line_break = |b: &[u8]| b.iter().any(|&c| c == b'\r' || c == b'\n');
            for (name, value) in &headers {
                let bytes = match value {
                    HeaderTemplate::Text(t) => t.as_bytes(),
                    HeaderTemplate::Bytes(b) => b.as_slice(),
                };
                if line_break(name.as_bytes()) || line_break(bytes) || name.contains(':') {
                    return Err(format!(
                        "`http.wire: {}` writes headers as they are: `{name}` or its value \
                         holds a line break or a colon in the name",
                        wire.name()
                    ));
                }
            }
        }
        Ok(HttpStep {
            source: spec,
            method,
            path,
            headers,
            body,
            pad_to_bytes,
            delay_ms,
            replica,
            wire,
        })
    }

    /// The request this step sends, its `${var}`s filled in by `fill`. Only
    /// what a variable brings can be wrong here: a path that does not fill
    /// in to `/...`.
    pub fn instantiate(
        &self,
        fill: &mut dyn FnMut(&Value) -> Value,
    ) -> Result<HttpRequest, String> {
        let path = fill_text(&mut *fill, &self.path);
        if !path.starts_with('/') {
            return Err(format!(
                "`http.path` filled in to `{path}`, which does not start with `/`"
            ));
        }
        let headers = self
            .headers
            .iter()
            .map(|(name, value)| {
                let bytes = match value {
                    HeaderTemplate::Text(t) => fill_text(&mut *fill, t).into_bytes(),
                    HeaderTemplate::Bytes(b) => b.clone(),
                };
                (fill_text(&mut *fill, name), bytes)
            })
            .collect();
        let mut body = match &self.body {
            Some(BodyTemplate::Json(j)) => Some(fill(j).to_string().into_bytes()),
            Some(BodyTemplate::Text(t)) => Some(fill_text(&mut *fill, t).into_bytes()),
            None => None,
        };
        if self.pad_to_bytes > 0 {
            let b = body.get_or_insert_with(Vec::new);
            let want = usize::try_from(self.pad_to_bytes).unwrap_or(usize::MAX);
            if b.len() < want {
                b.resize(want, b' ');
            }
        }
        Ok(HttpRequest {
            method: self.method.clone(),
            path,
            headers,
            body,
            replica: self.replica,
            wire: self.wire,
        })
    }

    /// `http METHOD PATH`, for step labels.
    pub fn label(&self) -> String {
        format!("http {} {}", self.method, self.path)
    }
}

impl WaitRunStep {
    /// Parses a `wait_run` step's map.
    pub fn parse(spec: Value) -> Result<WaitRunStep, String> {
        let Value::Object(map) = &spec else {
            return Err("`wait_run` takes a map: {sessionId, runId, status, timeout_ms}".into());
        };
        unknown_keys(map, &WAIT_KEYS, "wait_run")?;
        let text = |field: &str| match map.get(field) {
            Some(Value::String(s)) => Ok(s.clone()),
            _ => Err(format!("`wait_run.{field}` must be a string")),
        };
        let session_id = text("sessionId")?;
        let run_id = text("runId")?;
        let statuses = match map.get("status") {
            Some(Value::String(s)) => vec![s.clone()],
            Some(Value::Array(a)) if !a.is_empty() && a.iter().all(Value::is_string) => a
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect(),
            _ => return Err("`wait_run.status` must be a status or a list of them".into()),
        };
        let timeout_ms = match map.get("timeout_ms") {
            None => DEFAULT_WAIT_MS,
            some => bounded(some, "timeout_ms", MAX_WAIT_MS)?,
        };
        Ok(WaitRunStep {
            source: spec,
            session_id,
            run_id,
            statuses,
            timeout_ms,
        })
    }

    /// The session and run ids, filled in.
    pub fn instantiate(&self, fill: &mut dyn FnMut(&Value) -> Value) -> (String, String) {
        let session = fill_text(&mut *fill, &self.session_id);
        (session, fill_text(fill, &self.run_id))
    }
}

/// The request's headers: a list of `[name, value]` pairs (a name may
/// repeat) or a map. A value is a string, or `{hex: "..."}` for raw bytes.
fn headers_of(v: Option<&Value>) -> Result<Vec<(String, HeaderTemplate)>, String> {
    let pairs: Vec<(String, &Value)> = match v {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Object(m)) => m.iter().map(|(k, v)| (k.clone(), v)).collect(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| match item.as_array().map(Vec::as_slice) {
                Some([Value::String(name), value]) => Ok((name.clone(), value)),
                _ => Err("each of `http.headers` is a pair [name, value]".to_owned()),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err("`http.headers` is a list of [name, value] or a map".into()),
    };
    pairs
        .into_iter()
        .map(|(name, value)| Ok((name, header_template(value)?)))
        .collect()
}

fn header_template(v: &Value) -> Result<HeaderTemplate, String> {
    match v {
        Value::String(s) => Ok(HeaderTemplate::Text(s.clone())),
        Value::Object(m) if m.len() == 1 => match m.get("hex") {
            Some(Value::String(hex)) => decode_hex(hex).map(HeaderTemplate::Bytes),
            _ => Err("a header value is a string or {hex: \"...\"}".into()),
        },
        _ => Err("a header value is a string or {hex: \"...\"}".into()),
    }
}

fn decode_hex(hex: &str) -> Result<Vec<u8>, String> {
    if hex.len() % 2 != 0 {
        return Err("hex needs an even number of digits".into());
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| {
            hex.get(i..i + 2)
                .and_then(|d| u8::from_str_radix(d, 16).ok())
                .ok_or_else(|| "hex digits only".to_owned())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn as_is(v: &Value) -> Value {
        v.clone()
    }

    #[test]
    fn headers_keep_order_and_repeats_and_take_raw_bytes() {
        let spec = json!({"method": "post", "path": "/x", "headers": [["K", "a b"], ["K", {"hex": "ff00"}]],
                          "json": {"input": 1}});
        let req = HttpStep::parse(spec)
            .unwrap()
            .instantiate(&mut as_is)
            .unwrap();
        assert_eq!(req.method, "POST");
        assert_eq!(
            req.headers,
            vec![("K".into(), b"a b".to_vec()), ("K".into(), vec![0xff, 0])]
        );
        assert_eq!(req.body.unwrap(), br#"{"input":1}"#);
    }

    #[test]
    fn wire_is_typed_and_its_headers_hold_no_line_break() {
        let parse = |wire: Value, name: &str, value: &str| {
            HttpStep::parse(json!({"path": "/x", "wire": wire, "headers": [[name, value]]}))
        };
        assert_eq!(parse(json!("exact"), "K", " a ").unwrap().wire, Wire::Exact);
        assert_eq!(
            parse(json!("absolute-form"), "K", "a").unwrap().wire,
            Wire::AbsoluteForm
        );
        let plain = HttpStep::parse(json!({"path": "/x"})).unwrap();
        assert_eq!(plain.wire, Wire::Library);
        let req = parse(json!("exact"), "X-HELIX", " a ")
            .unwrap()
            .instantiate(&mut as_is)
            .unwrap();
        assert_eq!(
            (req.wire, req.headers[0].1.as_slice()),
            (Wire::Exact, &b" a "[..])
        );
        assert!(parse(json!("raw"), "K", "a")
            .unwrap_err()
            .contains("`http.wire`"));
        assert!(parse(json!(true), "K", "a").is_err());
        assert!(parse(json!("exact"), "K", "a\r\nX: y").is_err());
        assert!(parse(json!("exact"), "K: v", "a").is_err());
        // Through the client, the client refuses what it cannot send.
        assert!(parse(json!("library"), "K", "a\r\nX: y").is_ok());
    }

    #[test]
    fn pad_to_bytes_grows_the_body_with_blanks() {
        let spec = json!({"path": "/x", "json": {}, "pad_to_bytes": 10});
        let req = HttpStep::parse(spec)
            .unwrap()
            .instantiate(&mut as_is)
            .unwrap();
        assert_eq!(req.body.unwrap(), b"{}        ");
    }

    #[test]
    fn bad_step_shapes_are_refused_at_load() {
        for bad in [
            json!({"path": "x"}),
            json!({"path": "/x", "json": 1, "body": "a"}),
            json!({"path": "/x", "headers": [["only-name"]]}),
            json!({"path": "/x", "pad_to_bytes": 99_999_999_999u64}),
            json!({"path": "/x", "nope": 1}),
            json!({"path": "/x", "delay_ms": "5"}),
            json!({"path": "/x", "replica": 16}),
        ] {
            assert!(HttpStep::parse(bad.clone()).is_err(), "{bad}");
        }
        assert!(WaitRunStep::parse(json!({"sessionId": "s", "runId": "r"})).is_err());
        assert!(WaitRunStep::parse(json!({"sessionId": "s", "runId": "r", "status": []})).is_err());
    }

    #[test]
    fn variables_fill_in_the_templates_and_nothing_else_is_checked_again() {
        let step = HttpStep::parse(json!({"method": "POST", "path": "${p}",
            "headers": {"Idempotency-Key": "${k}"}, "body": "a ${k}", "delay_ms": 7, "replica": 1}))
        .unwrap();
        assert_eq!((step.delay_ms, step.replica), (7, Some(1)));
        let mut fill = |v: &Value| match v.as_str() {
            Some("${p}") => json!("/sessions/s/start"),
            Some("${k}") => json!("key-1"),
            Some("a ${k}") => json!("a key-1"),
            _ => v.clone(),
        };
        let req = step.instantiate(&mut fill).unwrap();
        assert_eq!(req.path, "/sessions/s/start");
        assert_eq!(
            req.headers,
            vec![("Idempotency-Key".into(), b"key-1".to_vec())]
        );
        assert_eq!(req.body.unwrap(), b"a key-1");
        // A variable that fills the path in with something else is the one
        // thing that can still be wrong when the step is sent.
        let mut bad = |_: &Value| json!(42);
        assert!(step
            .instantiate(&mut bad)
            .unwrap_err()
            .contains("does not start with `/`"));
        let wait = WaitRunStep::parse(
            json!({"sessionId": "${k}", "runId": "r", "status": ["completed", "failed"]}),
        )
        .unwrap();
        assert_eq!(wait.timeout_ms, DEFAULT_WAIT_MS);
        assert_eq!(
            wait.instantiate(&mut fill),
            ("key-1".to_owned(), "r".to_owned())
        );
    }
}
