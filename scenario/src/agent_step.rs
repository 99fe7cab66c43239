//! The `http` and `wait_run` steps of agent scenarios as data: their keys,
//! their bounds, and the HTTP request an `http` step describes. Validated
//! at load time, so a mistake is a load error with a position. Nothing here
//! talks to a network; `run::agent_steps` executes them.

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

const HTTP_KEYS: [&str; 8] = [
    "method",
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

/// Checks the shape of an `http` step when the scenario loads.
pub fn validate_http(spec: &Value) -> Result<(), String> {
    let Value::Object(map) = spec else {
        return Err("`http` takes a map: {method, path, headers, json | body}".into());
    };
    unknown_keys(map, &HTTP_KEYS, "http")?;
    match map.get("path") {
        Some(Value::String(p)) if p.starts_with('/') || p.starts_with('$') => {}
        _ => return Err("`http.path` must be a string starting with `/`".into()),
    }
    if !matches!(map.get("method"), None | Some(Value::String(_))) {
        return Err("`http.method` must be a string".into());
    }
    if map.contains_key("json") && map.contains_key("body") {
        return Err("`http` takes `json` or `body`, not both".into());
    }
    if !matches!(map.get("body"), None | Some(Value::String(_))) {
        return Err("`http.body` must be a string (use `json` for a JSON body)".into());
    }
    bounded(map.get("pad_to_bytes"), "pad_to_bytes", MAX_BODY_BYTES)?;
    bounded(map.get("delay_ms"), "delay_ms", MAX_WAIT_MS)?;
    bounded(map.get("replica"), "replica", MAX_REPLICA_INDEX)?;
    headers_of(map.get("headers")).map(|_| ())
}

/// Checks the shape of a `wait_run` step when the scenario loads.
pub fn validate_wait(spec: &Value) -> Result<(), String> {
    let Value::Object(map) = spec else {
        return Err("`wait_run` takes a map: {sessionId, runId, status, timeout_ms}".into());
    };
    unknown_keys(map, &WAIT_KEYS, "wait_run")?;
    for field in ["sessionId", "runId"] {
        if !matches!(map.get(field), Some(Value::String(_))) {
            return Err(format!("`wait_run.{field}` must be a string"));
        }
    }
    match map.get("status") {
        Some(Value::String(_)) => {}
        Some(Value::Array(a)) if !a.is_empty() && a.iter().all(Value::is_string) => {}
        _ => return Err("`wait_run.status` must be a status or a list of them".into()),
    }
    bounded(map.get("timeout_ms"), "timeout_ms", MAX_WAIT_MS).map(|_| ())
}

/// The request's headers: a list of `[name, value]` pairs (a name may
/// repeat) or a map. A value is a string, or `{hex: "..."}` for raw bytes.
fn headers_of(v: Option<&Value>) -> Result<Vec<(String, Vec<u8>)>, String> {
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
        .map(|(name, value)| Ok((name, header_bytes(value)?)))
        .collect()
}

fn header_bytes(v: &Value) -> Result<Vec<u8>, String> {
    match v {
        Value::String(s) => Ok(s.as_bytes().to_vec()),
        Value::Object(m) if m.len() == 1 => match m.get("hex") {
            Some(Value::String(hex)) => decode_hex(hex),
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

/// Builds the HTTP request of a substituted `http` step.
pub fn build_request(spec: &Value) -> Result<HttpRequest, String> {
    validate_http(spec)?;
    let method = spec
        .get("method")
        .and_then(Value::as_str)
        .unwrap_or("GET")
        .to_ascii_uppercase();
    let path = spec
        .get("path")
        .and_then(Value::as_str)
        .unwrap_or("/")
        .to_owned();
    let headers = headers_of(spec.get("headers"))?;
    let mut body = match (spec.get("json"), spec.get("body")) {
        (Some(j), _) => Some(j.to_string().into_bytes()),
        (None, Some(Value::String(b))) => Some(b.clone().into_bytes()),
        _ => None,
    };
    let pad = bounded(spec.get("pad_to_bytes"), "pad_to_bytes", MAX_BODY_BYTES)?;
    if pad > 0 {
        let b = body.get_or_insert_with(Vec::new);
        let want = usize::try_from(pad).unwrap_or(usize::MAX);
        if b.len() < want {
            b.resize(want, b' ');
        }
    }
    let replica = match spec.get("replica") {
        None => None,
        Some(r) => {
            Some(usize::try_from(bounded(Some(r), "replica", MAX_REPLICA_INDEX)?).unwrap_or(0))
        }
    };
    Ok(HttpRequest {
        method,
        path,
        headers,
        body,
        replica,
    })
}
