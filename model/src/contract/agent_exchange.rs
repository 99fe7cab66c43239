//! The requests and answers of `reqkey-agent/1` as the agent model reads
//! them (SPEC 7), and how an answer is compared with what the spec allows:
//! runs, snapshots, `/health`, a stream's events, and the test agent's
//! script (how long a run runs at the least, how it ends, what it echoes).
//!
//! Kept apart from [`crate::contract::agent`], which decides *which*
//! answers a state allows; this file only says what an answer is and
//! whether it is one of those. Pure: no clock is read here, times are
//! numbers the caller measured.

use serde_json::{json, Value};

use crate::contract::digest::canonical_json;
use crate::contract::types::{RunMetadata, RunStatus};
use crate::contract::vocab::{ConcurrentEntry, Profile};

/// The key header a request carries.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum KeyHeader {
    None,
    /// A well-formed key.
    Valid(String),
    /// A malformed value, or a header sent twice (never echoed; SPEC 2
    /// `[[key.parse.invalid-400]]`, SPEC 7 `[[agent.keys.repeated-header]]`).
    Malformed(String),
}

/// One request of SPEC 7, over sessions named by id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentOp {
    Start {
        session: String,
        key: KeyHeader,
        input: Value,
    },
    Resume {
        session: String,
        key: KeyHeader,
        input: Value,
    },
    Retry {
        session: String,
        key: KeyHeader,
    },
    /// `POST .../chat`; `tool`: the last message has role `tool` (keyless).
    ChatSend {
        session: String,
        key: KeyHeader,
        content: String,
        tool: bool,
    },
    /// `GET .../chat`; the key header, if any, is ignored.
    Reconnect {
        session: String,
        key: KeyHeader,
    },
    Snapshot {
        session: String,
    },
    /// `GET .../runs/{run}?waitMs=N` (`wait_ms` 0: answered at once).
    ReadRun {
        session: String,
        run_id: String,
        wait_ms: u64,
    },
    /// A run read whose `waitMs` is not an integer (400
    /// `validation_error`, or the read's own 404 where the run is unknown:
    /// SPEC 7 orders neither refusal first).
    BadWait {
        session: String,
        run_id: String,
    },
    Delete {
        session: String,
    },
    /// `GET /health`: the profile the server declared, again.
    Health,
    /// A request SPEC 7 refuses whatever the state, writing nothing: an
    /// unknown route (404 `not_found`), a method a route does not take
    /// (405 `method_not_allowed`), a body over 1 MiB (413
    /// `payload_too_large`), an id in the path past its limit (400
    /// `validation_error`).
    Refusal {
        session: String,
        status: u16,
        code: &'static str,
    },
}

impl AgentOp {
    /// The session the request names (`""` for `/health`).
    pub fn session(&self) -> &str {
        match self {
            AgentOp::Start { session, .. }
            | AgentOp::Resume { session, .. }
            | AgentOp::Retry { session, .. }
            | AgentOp::ChatSend { session, .. }
            | AgentOp::Reconnect { session, .. }
            | AgentOp::Snapshot { session }
            | AgentOp::ReadRun { session, .. }
            | AgentOp::BadWait { session, .. }
            | AgentOp::Delete { session }
            | AgentOp::Refusal { session, .. } => session,
            AgentOp::Health => "",
        }
    }

    /// The key header it carries (entries and reconnects).
    pub fn key(&self) -> &KeyHeader {
        match self {
            AgentOp::Start { key, .. }
            | AgentOp::Resume { key, .. }
            | AgentOp::Retry { key, .. }
            | AgentOp::ChatSend { key, .. }
            | AgentOp::Reconnect { key, .. } => key,
            _ => &KeyHeader::None,
        }
    }

    /// Whether its answer is a chat stream.
    pub fn streams(&self) -> bool {
        matches!(self, AgentOp::ChatSend { .. } | AgentOp::Reconnect { .. })
    }
}

/// What a chat stream showed: its `run-start`, its `text` events, its
/// `finish`, how many runs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StreamSeen {
    pub run_id: Option<String>,
    pub start_sequence: Option<u64>,
    pub attached: Option<bool>,
    pub finish: Option<String>,
    /// Distinct run ids over all events (SPEC 7: one).
    pub runs: usize,
    /// The `delta` of every `text` event, in order (the test agent emits
    /// one, `echo: <text>`; SPEC 7 `[[agent.test-agent.echo]]`).
    pub texts: Vec<String>,
}

/// When a request was sent and its answer was whole, in milliseconds on
/// the caller's clock (one origin per program).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Timing {
    pub invoke_ms: u64,
    pub return_ms: u64,
}

/// An answer as the server gave it: status, JSON body, stream.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Observed {
    pub status: u16,
    pub json: Option<Value>,
    pub stream: Option<StreamSeen>,
    /// The raw body text, for the no-echo rule.
    pub body: String,
    /// When it was asked and answered (`None`: no time is judged).
    pub timing: Option<Timing>,
}

/// How a run of the test agent ends (SPEC 7 "Test agent"); `None`: the
/// input is not `{"text": string}`, or its markers clash: any end.
pub fn scripted_end(input: &Value) -> Option<RunStatus> {
    let text = input.get("text")?.as_str()?;
    match (text.contains("[fail]"), text.contains("[suspend]")) {
        (true, true) => None,
        (true, false) => Some(RunStatus::Failed),
        (false, true) => Some(RunStatus::SuspendedInput),
        (false, false) => Some(RunStatus::Completed),
    }
}

/// The longest `[sleep:N]` the model counts on (SPEC 7 names no cap; the
/// reference caps at 60 s, and so does the lower bound here).
const MAX_SLEEP_MS: u64 = 60_000;

/// How long a run of `input` stays `running` at the least: the first
/// well-formed `[sleep:N]` of its `{"text"}` (SPEC 7
/// `[[agent.test-agent.sleep]]`), 0 for any other input.
pub fn sleep_ms(input: &Value) -> u64 {
    let Some(mut rest) = input.get("text").and_then(Value::as_str) else {
        return 0;
    };
    while let Some(at) = rest.find("[sleep:") {
        rest = &rest[at + "[sleep:".len()..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits > 0 && rest.as_bytes().get(digits) == Some(&b']') {
            return rest[..digits]
                .parse::<u64>()
                .unwrap_or(MAX_SLEEP_MS)
                .min(MAX_SLEEP_MS);
        }
    }
    0
}

/// The `text` event a run of `input` emits (SPEC 7
/// `[[agent.test-agent.echo]]`): `echo: <text>` for `{"text": string}`,
/// `None` for any other input (the spec's test agent takes only that).
pub fn echo_of(input: &Value) -> Option<String> {
    input
        .get("text")
        .and_then(Value::as_str)
        .map(|t| format!("echo: {t}"))
}

/// A run the model holds `running`: how it ends (`None`: any end) and the
/// earliest time it may end, on the caller's clock (its entry's send time
/// plus its `[sleep:N]`; 0 when nothing is known).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RunLife {
    pub end: Option<RunStatus>,
    pub not_before_ms: u64,
}

/// Whether a stream's `text` events are those of a run whose test-agent
/// echo is `echo` (`None`: not judged). A stream of a run that ended
/// normally, seen whole (`whole`), has exactly the one echo; one that
/// ended `interrupted`, or may have been cut, has it or nothing.
pub fn texts_ok(s: &StreamSeen, echo: Option<&str>, whole: bool) -> bool {
    let Some(echo) = echo else {
        return true;
    };
    let interrupted = s.finish.as_deref() == Some(RunStatus::Interrupted.as_str());
    match s.texts.as_slice() {
        [one] => one == echo,
        [] => interrupted || !whole,
        _ => false,
    }
}

/// A stream's `finish`: once everything settled it is the run's status;
/// inside a batch any status the run may end in.
pub fn finish_ok(s: &StreamSeen, run: &RunMetadata, sequential: bool) -> bool {
    match (&s.finish, sequential) {
        (Some(f), true) => run.status != RunStatus::Running && f == run.status.as_str(),
        (Some(f), false) => RunStatus::parse(f).is_some_and(|st| st != RunStatus::Running),
        (None, _) => false,
    }
}

/// A run as the snapshot and run reads write it (the digest's value is
/// the server's own business: only its presence is compared).
pub fn run_json(r: &RunMetadata) -> Value {
    let mut v = json!({
        "sessionId": r.session_id,
        "runId": r.run_id,
        "status": r.status.as_str(),
        "startSequence": r.start_sequence,
    });
    if let Some(k) = &r.request_key {
        v["requestKey"] = json!(k);
        // Any string: the server's digest is its own business.
        v["requestDigest"] = json!("");
    }
    v
}

/// Whether `got` is the run `want` (its digest only present).
pub fn run_matches(want: &RunMetadata, got: &Value) -> bool {
    let w = run_json(want);
    let digest_present = got.get("requestDigest").is_some_and(Value::is_string);
    [
        "sessionId",
        "runId",
        "status",
        "startSequence",
        "requestKey",
    ]
    .iter()
    .all(|k| w.get(*k) == got.get(*k))
        && digest_present == w.get("requestDigest").is_some()
}

/// Whether `got` is the snapshot `want` (runs as [`run_matches`], inputs
/// compared canonically: SPEC 3, a spelling may change).
pub fn snapshot_matches(want: &Value, got: &Value) -> bool {
    let list = |v: &Value, k: &str| {
        v.get(k)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let (wr, gr) = (list(want, "runs"), list(got, "runs"));
    let (wi, gi) = (list(want, "inputs"), list(got, "inputs"));
    want.get("sessionId") == got.get("sessionId")
        && wr.len() == gr.len()
        && wr
            .iter()
            .zip(&gr)
            .all(|(w, g)| meta_of(w).is_some_and(|w| run_matches(&w, g)))
        && wi.len() == gi.len()
        && wi.iter().zip(&gi).all(|(w, g)| {
            w.get("runId") == g.get("runId")
                && g.get("input")
                    .is_some_and(|gi| canonical_json(gi) == canonical_json(&w["input"]))
        })
}

/// The metadata `run_json` wrote (its digest replaced by a marker).
fn meta_of(v: &Value) -> Option<RunMetadata> {
    Some(RunMetadata {
        session_id: v.get("sessionId")?.as_str()?.to_owned(),
        run_id: v.get("runId")?.as_str()?.to_owned(),
        status: RunStatus::parse(v.get("status")?.as_str()?)?,
        start_sequence: v.get("startSequence")?.as_u64()?,
        request_key: v
            .get("requestKey")
            .and_then(Value::as_str)
            .map(str::to_owned),
        request_digest: v.get("requestKey").map(|_| String::new()),
    })
}

/// Whether a `/health` body declares `profile` (SPEC 7
/// `[[agent.route.health]]`, `[[agent.profile.declared-in-health]]`): the
/// protocol, `supportsRequestKey`, `concurrentEntry` (absent is
/// `reject`) and `entryWaitMs` (absent is 0) as first read.
pub fn health_matches(profile: &Profile, got: &Value) -> bool {
    let policy = match got.get("concurrentEntry") {
        None => Some(ConcurrentEntry::Reject),
        Some(v) => v.as_str().and_then(ConcurrentEntry::parse),
    };
    let wait = match got.get("entryWaitMs") {
        None => Some(0),
        Some(v) => v.as_u64(),
    };
    got.get("protocol").and_then(Value::as_str) == Some("reqkey-agent/1")
        && got.get("supportsRequestKey").and_then(Value::as_bool)
            == Some(profile.supports_request_key)
        && policy == Some(profile.concurrent_entry)
        && wait == Some(profile.entry_wait_ms)
        && got.get("name").is_some_and(Value::is_string)
        && got.get("version").is_some_and(Value::is_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_well_formed_sleep_counts() {
        assert_eq!(sleep_ms(&json!({"text": "[sleep:80] x"})), 80);
        assert_eq!(sleep_ms(&json!({"text": "[sleep:x] [sleep:5]"})), 5);
        assert_eq!(sleep_ms(&json!({"text": "[sleep:99999999]"})), MAX_SLEEP_MS);
        assert_eq!(sleep_ms(&json!({"text": "plain"})), 0);
        assert_eq!(sleep_ms(&json!(["[sleep:80]"])), 0);
    }

    #[test]
    fn a_stream_has_its_one_echo_unless_it_was_interrupted_or_cut() {
        let s = |texts: &[&str], finish: &str| StreamSeen {
            finish: Some(finish.into()),
            texts: texts.iter().map(|t| (*t).to_owned()).collect(),
            ..StreamSeen::default()
        };
        let echo = Some("echo: a");
        assert!(texts_ok(&s(&["echo: a"], "completed"), echo, true));
        assert!(!texts_ok(&s(&[], "completed"), echo, true));
        assert!(texts_ok(&s(&[], "interrupted"), echo, true));
        assert!(texts_ok(&s(&[], "completed"), echo, false));
        assert!(!texts_ok(&s(&["echo: ?"], "completed"), echo, true));
        assert!(!texts_ok(
            &s(&["echo: a", "echo: a"], "completed"),
            echo,
            true
        ));
        assert!(texts_ok(&s(&["whatever"], "completed"), None, true));
    }

    #[test]
    fn health_is_read_as_its_profile() {
        let p = Profile::default();
        let h = json!({"name": "x", "version": "1", "protocol": "reqkey-agent/1", "supportsRequestKey": true});
        assert!(health_matches(&p, &h));
        let mut other = h.clone();
        other["concurrentEntry"] = json!("interrupt_previous");
        assert!(!health_matches(&p, &other));
        let mut wait = h.clone();
        wait["entryWaitMs"] = json!(0);
        assert!(health_matches(&p, &wait));
        assert!(!health_matches(&p, &json!({"protocol": "reqkey-store/1"})));
    }
}
