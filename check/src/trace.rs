//! What the proxy records: one [`Exchange`] per client request, and the
//! server's snapshot of every session it saw ([`SessionSnapshot`]). Pure
//! data, serialized into the `reqkey-client-results/1` JSON as it is, so a
//! recorded run can be judged again (`check::client::judge`).

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::plan::Fault;

/// The entry routes of `reqkey-agent/1` (SPEC 7): the requests a client
/// must key, and the only ones the proxy injects faults into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Entry {
    Start,
    Resume,
    Retry,
    Chat,
}

/// The key a request carried. A malformed key is kept only as a
/// fingerprint (the raw value is never written anywhere, as SPEC 2 asks of
/// servers), which is enough to tell whether two requests sent the same one.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "lowercase")]
pub enum KeySent {
    Absent,
    Valid { key: String },
    Malformed { fingerprint: String, reason: String },
}

impl KeySent {
    /// Reads the key header's values as the server would (SPEC 2): none,
    /// one well-formed value, or malformed (a repeated header included).
    pub fn from_header_values<'a>(values: impl Iterator<Item = &'a [u8]>) -> KeySent {
        let values: Vec<&[u8]> = values.collect();
        match reqkey_model::key::parse_request_key_header(values.iter().copied()) {
            Ok(None) => KeySent::Absent,
            Ok(Some(k)) => KeySent::Valid {
                key: k.as_str().to_owned(),
            },
            Err(e) => {
                let mut h = Sha256::new();
                for v in &values {
                    h.update((v.len() as u64).to_be_bytes());
                    h.update(v);
                }
                KeySent::Malformed {
                    fingerprint: hex(&h.finalize()[..8]),
                    reason: e.to_string(),
                }
            }
        }
    }

    pub fn is_absent(&self) -> bool {
        matches!(self, KeySent::Absent)
    }

    /// The key as a report shows it: the value, `(none)`, or `(malformed …)`.
    pub fn describe(&self) -> String {
        match self {
            KeySent::Absent => "(no key)".to_owned(),
            KeySent::Valid { key } => format!("`{key}`"),
            KeySent::Malformed { fingerprint, .. } => format!("(malformed key #{fingerprint})"),
        }
    }
}

/// One client request and what became of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Exchange {
    /// Arrival order among all client requests, from 0.
    pub index: u64,
    /// Milliseconds from the proxy's start to the request's arrival.
    pub at_ms: u64,
    pub method: String,
    pub path: String,
    /// The `{id}` of a `/sessions/{id}/...` path.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub session: Option<String>,
    /// Set on `POST /sessions/{id}/{start,resume,retry,chat}`.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub entry: Option<Entry>,
    pub key: KeySent,
    /// sha256 of the body's canonical JSON (SPEC 3), or of its bytes when
    /// it is not JSON.
    pub body_digest: String,
    /// A chat send whose last message has role `tool` (keyless by SPEC 7).
    #[serde(default)]
    pub tool_result: bool,
    pub fault: Fault,
    /// How many times it reached the server (0, 1, or 2 under `duplicate`).
    pub forwarded: u32,
    /// The server's status for each forward.
    #[serde(default)]
    pub upstream_statuses: Vec<u16>,
    /// Why a forward got no answer from the server.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub upstream_error: Option<String>,
    /// The status the client got; absent when its connection was closed
    /// without an answer.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub client_status: Option<u16>,
    /// The run each `2xx` answer of the server named (its `runId`, or the
    /// `runId` of a chat stream's `run-start`), in forwarding order: which
    /// request made (or attached to) which run, so a violation can name
    /// the requests behind each run.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub run_ids: Vec<String>,
    /// On a snapshot read (`GET /sessions/{id}`) the server answered `200`
    /// with a readable snapshot: the `runId` of each of its `inputs`, in
    /// order. What the client could see of its sends (SPEC 9: a client
    /// re-reads the snapshot before re-sending a keyless tool result).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub snapshot_inputs: Option<Vec<String>>,
}

impl Exchange {
    /// How a violation names the request: `#7 POST /sessions/s/chat`.
    pub fn label(&self) -> String {
        format!("#{} {} {}", self.index, self.method, self.path)
    }

    /// A read of the session's snapshot the client made and got whole.
    pub fn is_snapshot_read(&self) -> bool {
        self.method == "GET" && self.entry.is_none() && self.snapshot_inputs.is_some()
    }

    /// The server answered one of the forwards `2xx` (a run was started or
    /// attached; a refusal such as a 409 makes none).
    pub fn committed(&self) -> bool {
        self.upstream_statuses
            .iter()
            .any(|s| (200..300).contains(s))
    }

    /// The client did not get the server's answer: a fault the proxy
    /// injected, or a server that gave no whole answer (the client got 502).
    pub fn answer_failed(&self) -> bool {
        self.fault.fails_answer()
            || self.client_status.is_none()
            || (self.forwarded > 0 && self.upstream_statuses.is_empty())
    }
}

/// A run as the server's snapshot shows it: only what the verdict reads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunSeen {
    pub run_id: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub request_key: Option<String>,
}

/// `GET /sessions/{id}` at the end of the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "lowercase")]
pub enum SessionSnapshot {
    Found {
        runs: Vec<RunSeen>,
        inputs: usize,
    },
    /// 404: the session has no runs (or was deleted).
    Missing,
    /// No whole, well-formed answer: the verdict cannot be reached.
    Unreadable {
        reason: String,
    },
}

impl SessionSnapshot {
    /// Reads a `reqkey-agent/1` snapshot body (SPEC 7).
    pub fn from_body(body: &serde_json::Value) -> SessionSnapshot {
        let runs = body.get("runs").and_then(|r| r.as_array());
        let inputs = body.get("inputs").and_then(|r| r.as_array());
        let (Some(runs), Some(inputs)) = (runs, inputs) else {
            return SessionSnapshot::Unreadable {
                reason: "the snapshot has no `runs` and `inputs` arrays".to_owned(),
            };
        };
        let mut seen = Vec::with_capacity(runs.len());
        for run in runs {
            let Some(run_id) = run.get("runId").and_then(|v| v.as_str()) else {
                return SessionSnapshot::Unreadable {
                    reason: "a run of the snapshot has no string `runId`".to_owned(),
                };
            };
            seen.push(RunSeen {
                run_id: run_id.to_owned(),
                request_key: run
                    .get("requestKey")
                    .and_then(|v| v.as_str())
                    .map(str::to_owned),
            });
        }
        SessionSnapshot::Found {
            runs: seen,
            inputs: inputs.len(),
        }
    }
}

/// The run an entry's `2xx` answer names: the body's `runId` (start,
/// resume, retry), or the `runId` of the first `run-start` event of a chat
/// stream (SPEC 7). `None` when the answer names none.
pub fn run_id_of_answer(body: &[u8]) -> Option<String> {
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) {
        return v.get("runId").and_then(|r| r.as_str()).map(str::to_owned);
    }
    let text = std::str::from_utf8(body).ok()?;
    let mut event = "";
    for line in text.lines() {
        let line = line.trim_end_matches('\r');
        if line.is_empty() {
            event = "";
        } else if let Some(name) = line.strip_prefix("event:") {
            event = name.trim();
        } else if let Some(data) = line.strip_prefix("data:") {
            if event == "run-start" {
                let v: serde_json::Value = serde_json::from_str(data.trim()).ok()?;
                return v.get("runId").and_then(|r| r.as_str()).map(str::to_owned);
            }
        }
    }
    None
}

/// The `runId` of each entry of a snapshot body's `inputs` (SPEC 7), or
/// `None` when the body is not a snapshot.
pub fn snapshot_input_runs(body: &[u8]) -> Option<Vec<String>> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    v.get("runs")?.as_array()?;
    v.get("inputs")?
        .as_array()?
        .iter()
        .map(|i| i.get("runId").and_then(|r| r.as_str()).map(str::to_owned))
        .collect()
}

/// `GET /sessions/{id}` (query aside): a snapshot read.
pub fn is_snapshot_path(method: &str, path: &str) -> bool {
    let path = path.split('?').next().unwrap_or(path);
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    method == "GET" && parts.len() == 2 && parts[0] == "sessions" && !parts[1].is_empty()
}

/// The digest of a request body: canonical JSON when it parses, else bytes.
pub fn body_digest(body: &[u8]) -> String {
    let canonical = serde_json::from_slice::<serde_json::Value>(body)
        .map(|v| reqkey_model::digest::canonical_json(&v).into_bytes());
    let bytes = canonical.as_deref().unwrap_or(body);
    hex(&Sha256::digest(bytes))
}

/// The session and entry a request path names.
pub fn route_of(method: &str, path: &str) -> (Option<String>, Option<Entry>) {
    let path = path.split('?').next().unwrap_or(path);
    let mut parts = path.trim_start_matches('/').split('/');
    if parts.next() != Some("sessions") {
        return (None, None);
    }
    let Some(session) = parts.next().filter(|s| !s.is_empty()) else {
        return (None, None);
    };
    let tail: Vec<&str> = parts.collect();
    let entry = match (method, tail.as_slice()) {
        ("POST", ["start"]) => Some(Entry::Start),
        ("POST", ["resume"]) => Some(Entry::Resume),
        ("POST", ["retry"]) => Some(Entry::Retry),
        ("POST", ["chat"]) => Some(Entry::Chat),
        _ => None,
    };
    (Some(session.to_owned()), entry)
}

/// A chat body whose last message has role `tool`.
pub fn is_tool_result(body: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| {
            v.get("messages")
                .and_then(|m| m.as_array())
                .and_then(|m| m.last())
                .and_then(|m| m.get("role"))
                .and_then(|r| r.as_str())
                .map(|r| r == "tool")
        })
        .unwrap_or(false)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_keys_and_digests() {
        assert_eq!(
            route_of("POST", "/sessions/s1/chat"),
            (Some("s1".to_owned()), Some(Entry::Chat))
        );
        assert_eq!(
            route_of("GET", "/sessions/s1"),
            (Some("s1".to_owned()), None)
        );
        assert_eq!(route_of("GET", "/health"), (None, None));
        let one: [&[u8]; 1] = [b"k-1"];
        assert_eq!(
            KeySent::from_header_values(one.into_iter()),
            KeySent::Valid { key: "k-1".into() }
        );
        let bad: [&[u8]; 1] = [b"a b"];
        let KeySent::Malformed { fingerprint, .. } = KeySent::from_header_values(bad.into_iter())
        else {
            panic!("a blank inside is malformed")
        };
        assert!(!fingerprint.contains("a b"));
        let two: [&[u8]; 2] = [b"k", b"k"];
        assert!(matches!(
            KeySent::from_header_values(two.into_iter()),
            KeySent::Malformed { .. }
        ));
        assert_eq!(
            body_digest(br#"{"a":1,"b":2}"#),
            body_digest(br#"{ "b":2, "a":1 }"#)
        );
        assert_ne!(body_digest(br#"{"a":1}"#), body_digest(br#"{"a":2}"#));
        assert!(is_tool_result(
            br#"{"messages":[{"role":"tool","content":"x"}]}"#
        ));
        assert!(!is_tool_result(
            br#"{"messages":[{"role":"user","content":"x"}]}"#
        ));
    }

    #[test]
    fn answers_name_their_run_and_snapshots_their_inputs() {
        assert_eq!(
            run_id_of_answer(br#"{"runId":"r1","status":"started"}"#).as_deref(),
            Some("r1")
        );
        let sse = b"event: run-start\r\ndata: {\"runId\":\"r2\",\"attached\":false}\r\n\r\nevent: text\ndata: {\"runId\":\"no\"}\n\n";
        assert_eq!(run_id_of_answer(sse).as_deref(), Some("r2"));
        let text_first = b"event: text\ndata: {\"runId\":\"no\"}\n\n";
        assert_eq!(run_id_of_answer(text_first), None);
        assert_eq!(
            snapshot_input_runs(br#"{"runs":[],"inputs":[{"runId":"a"},{"runId":"b"}]}"#),
            Some(vec!["a".to_owned(), "b".to_owned()])
        );
        assert_eq!(snapshot_input_runs(br#"{"inputs":[]}"#), None);
        assert_eq!(snapshot_input_runs(br#"{"runs":[],"inputs":[{}]}"#), None);
        assert!(is_snapshot_path("GET", "/sessions/s?x=1"));
        assert!(!is_snapshot_path("GET", "/sessions/s/chat"));
        assert!(!is_snapshot_path("DELETE", "/sessions/s"));
    }
}
