//! Histories in and out: the two file forms of a recorded store history.
//!
//! # Why
//!
//! A history is what [`crate::lin`] judges: store operations with their
//! call and return instants and their answers. Kept inside a run it can
//! only be judged by reqkey, on histories reqkey recorded. Written to a
//! file, the same history can be judged again (`reqkey check history`),
//! by another checker, or be one that someone else's tooling recorded.
//! So there are two forms, both plain JSON text:
//!
//! - **reqkey's form** ([`HistoryFormat::Json`]): one JSON array, one
//!   entry per operation, `{"process", "call_ns", "return_ns", "op",
//!   "args", "answer"}`: the fields of [`Operation`], with the request
//!   split into the wire's `op` and `args`. An entry without `answer` was
//!   never answered (a timeout): it may or may not have taken effect.
//!   Unknown fields are refused (a misspelt `answer` must not turn an
//!   operation into an unanswered one).
//! - **Jepsen's event form** ([`HistoryFormat::Jepsen`]): one JSON object
//!   a line, an event each, `{"process", "type", "f", "value", "time"}`,
//!   the event model of Jepsen, Knossos and Elle: an `invoke` opens an
//!   operation of its process, the process's next event completes it
//!   (`ok`: it happened, its `value` the answer; `fail`: it did not,
//!   `error` (or else `value`) the error; `info`: unknown, it may or may
//!   not have happened). The invoke's `value` is the op's `args`. Events
//!   of the `nemesis` process are not operations and are skipped, as
//!   Jepsen's own checkers do. Jepsen writes EDN; this is its JSON-lines
//!   rendering (what `jet` or a recorder's JSON output gives).
//!
//! Reading either form gives [`Operation`]s; writing either form from
//! them and reading it back gives the same operations (tested), so a
//! history judged in a run is judged the same from its file. To judge a
//! file, [`parse_prepared`] reads it straight into the checker's form
//! (each entry typed as it is read, its request and answer kept only as
//! JSON text for a report), never holding the history as `Operation`s:
//! the same operations and the same report (tested), in a fraction of
//! the memory (docs/benchmarks.md).
//!
//! # Errors
//!
//! Pure text in, typed values out, never a panic: every mistake is a
//! [`HistoryError`] with the 1-based line and column it was found at
//! (serde's position for JSON, the line and column 1 for an event that
//! does not pair up). Bounded by [`MAX_OPERATIONS`]; the caller bounds
//! the bytes it reads ([`MAX_HISTORY_BYTES`]). A file of any size is read
//! by [`crate::stream`] instead, one entry at a time, with the same entry
//! parser ([`entry_operation`], [`parse_jepsen_lines`]).

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::lin::{Operation, PreparedHistory, PreparedHistoryBuilder};

/// The most bytes a history file may hold (a caller reads no more).
pub const MAX_HISTORY_BYTES: u64 = 64 << 20;

/// The most operations a history may hold.
pub const MAX_OPERATIONS: usize = 1_000_000;

/// The process whose events Jepsen's checkers ignore (faults, not ops).
pub const NEMESIS: &str = "nemesis";

/// The two forms of a history file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HistoryFormat {
    /// reqkey's: a JSON array of operations.
    Json,
    /// Jepsen's: one event a line, as JSON.
    Jepsen,
}

impl HistoryFormat {
    /// The form of `text` by its first non-space byte: `[` is reqkey's
    /// array, `{` Jepsen's events; anything else is `None`.
    pub fn detect(text: &str) -> Option<Self> {
        match text.trim_start().as_bytes().first() {
            Some(b'[') => Some(Self::Json),
            Some(b'{') => Some(Self::Jepsen),
            _ => None,
        }
    }

    /// The name `--format` takes.
    pub fn name(self) -> &'static str {
        match self {
            Self::Json => "json",
            Self::Jepsen => "jepsen",
        }
    }
}

impl std::str::FromStr for HistoryFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "json" => Ok(Self::Json),
            "jepsen" => Ok(Self::Jepsen),
            other => Err(format!("unknown history format `{other}` (json or jepsen)")),
        }
    }
}

/// A history file that cannot be read, and where (1-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryError {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

impl fmt::Display for HistoryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.line, self.column, self.message)
    }
}

impl std::error::Error for HistoryError {}

impl HistoryError {
    pub(crate) fn at(line: usize, column: usize, message: impl Into<String>) -> Self {
        Self {
            line,
            column,
            message: message.into(),
        }
    }

    fn of_json(e: &serde_json::Error, line_offset: usize) -> Self {
        // serde_json's text ends with its own position; ours is in front.
        let text = e.to_string();
        let message = match text.rsplit_once(" at line ") {
            Some((message, _)) => message.to_owned(),
            None => text,
        };
        Self::at(e.line() + line_offset, e.column().max(1), message)
    }
}

/// Reads a history in `format` (or the form [`HistoryFormat::detect`]s).
pub fn parse_history(
    text: &str,
    format: Option<HistoryFormat>,
) -> Result<Vec<Operation>, HistoryError> {
    let mut history: Vec<Operation> = Vec::new();
    parse_history_into(
        text,
        format,
        &mut |index, op| match history.get_mut(index) {
            Some(slot) => *slot = op,
            None => history.push(op),
        },
    )?;
    Ok(history)
}

/// Reads a history straight into the checker's form: each operation is
/// prepared ([`PreparedHistoryBuilder::set`]: its request and answer
/// typed, and kept as compact text for a report) as soon as it is read,
/// so the history is never held as [`Operation`]s (JSON values). The same
/// operations, and the same mistakes at the same places, as
/// [`parse_history`].
pub fn parse_prepared(
    text: &str,
    format: Option<HistoryFormat>,
) -> Result<PreparedHistory<'static>, HistoryError> {
    let mut builder = PreparedHistoryBuilder::default();
    parse_history_into(text, format, &mut |index, op| builder.set(index, &op))?;
    Ok(builder.finish())
}

/// Reads a history in `format`, giving each operation to `sink` with its
/// index (the file's order of operations, the indices a report names):
/// `sink(n, op)` with `n` the number given so far adds an operation;
/// with a smaller `n` it replaces one given before (in Jepsen's form an
/// operation is given when invoked, unanswered, and again completed).
fn parse_history_into(
    text: &str,
    format: Option<HistoryFormat>,
    sink: &mut dyn FnMut(usize, Operation),
) -> Result<(), HistoryError> {
    let format = match format.or_else(|| HistoryFormat::detect(text)) {
        Some(f) => f,
        None if text.trim().is_empty() => {
            return Err(HistoryError::at(1, 1, "the history is empty"))
        }
        None => {
            let (line, column) = first_non_space(text);
            return Err(HistoryError::at(
                line,
                column,
                "not a history: reqkey's form starts with `[`, Jepsen's event form with `{`",
            ));
        }
    };
    let count = match format {
        HistoryFormat::Json => parse_json(text, sink)?,
        HistoryFormat::Jepsen => parse_jepsen(text, sink)?,
    };
    if count == 0 {
        return Err(HistoryError::at(
            1,
            1,
            "the history has no operations: nothing to judge",
        ));
    }
    Ok(())
}

fn first_non_space(text: &str) -> (usize, usize) {
    for (n, line) in text.lines().enumerate() {
        if let Some(col) = line.find(|c: char| !c.is_whitespace()) {
            return (n + 1, line[..col].chars().count() + 1);
        }
    }
    (1, 1)
}

/// One entry of reqkey's form as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntry {
    process: Value,
    call_ns: u64,
    #[serde(default)]
    return_ns: Option<u64>,
    #[serde(default)]
    op: Option<String>,
    #[serde(default)]
    args: Option<Value>,
    #[serde(default)]
    request: Option<Value>,
    /// Present (even `null`): what the target answered. Absent: no answer.
    #[serde(default, deserialize_with = "present")]
    answer: Option<Value>,
}

/// `Some` for a field that is present, whatever its value (`null` too).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

impl RawEntry {
    /// The operation the entry describes, once its fields agree.
    fn into_operation(self) -> Result<Operation, String> {
        let client = process_name(&self.process)?;
        let request = match (self.op, self.args, self.request) {
            (Some(op), args, None) => request_of(Value::String(op), args),
            (None, None, Some(request)) => request,
            (None, _, None) => {
                return Err("an operation needs `op` (and `args`), or a raw `request`".into())
            }
            (_, _, Some(_)) => return Err("`request` replaces `op` and `args`: give one".into()),
        };
        let return_ns = match (self.return_ns, &self.answer) {
            (Some(r), _) if r < self.call_ns => {
                return Err(format!(
                    "return_ns {r} is before call_ns {}: an operation returns after its call",
                    self.call_ns
                ))
            }
            (Some(r), _) => r,
            (None, Some(_)) => return Err("an answered operation needs `return_ns`".into()),
            (None, None) => self.call_ns,
        };
        Ok(Operation {
            client,
            request,
            invoke_ns: self.call_ns,
            return_ns,
            answer: self.answer,
        })
    }
}

/// A process as a name: a string, or an integer (Jepsen numbers them).
fn process_name(v: &Value) -> Result<String, String> {
    match v {
        Value::String(s) if !s.is_empty() => Ok(s.clone()),
        Value::Number(n) if n.is_u64() || n.is_i64() => Ok(n.to_string()),
        other => Err(format!(
            "`process` must be a non-empty string or an integer, not {other}"
        )),
    }
}

/// The wire request `{"op", "args"}` (without `args` when there are none).
fn request_of(op: Value, args: Option<Value>) -> Value {
    let mut m = Map::new();
    m.insert("op".into(), op);
    if let Some(args) = args {
        m.insert("args".into(), args);
    }
    Value::Object(m)
}

/// The 1-based line and column of byte `offset` of `text`.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

/// Gives each operation to `sink`; returns how many there are.
fn parse_json(text: &str, sink: &mut dyn FnMut(usize, Operation)) -> Result<usize, HistoryError> {
    // The array first, each entry kept as its text: an entry's mistakes
    // are then placed in the file, not after the entry.
    let raws: Vec<&serde_json::value::RawValue> =
        serde_json::from_str(text).map_err(|e| HistoryError::of_json(&e, 0))?;
    if raws.len() > MAX_OPERATIONS {
        return Err(HistoryError::at(
            1,
            1,
            format!(
                "{} operations: more than the {MAX_OPERATIONS} a history may hold",
                raws.len()
            ),
        ));
    }
    for (k, raw) in raws.iter().enumerate() {
        let piece = raw.get();
        // `piece` is a slice of `text` (a borrowed raw value).
        // Placed only on a mistake (a scan of the text before it).
        let at = || {
            line_col(
                text,
                (piece.as_ptr() as usize).saturating_sub(text.as_ptr() as usize),
            )
        };
        sink(k, entry_operation(k, piece, at)?);
    }
    Ok(raws.len())
}

/// Entry `k` of reqkey's form (`piece`, its JSON text) as an operation;
/// `at()` places the entry (1-based line and column of its first byte),
/// asked only on a mistake.
pub(crate) fn entry_operation(
    k: usize,
    piece: &str,
    at: impl Fn() -> (usize, usize),
) -> Result<Operation, HistoryError> {
    let entry: RawEntry = serde_json::from_str(piece).map_err(|e| {
        let (line, column) = at();
        let mut placed = HistoryError::of_json(&e, line - 1);
        if e.line() <= 1 {
            placed.column += column - 1;
        }
        // A mistake of JSON itself is the file's (as when the whole
        // array is parsed at once); one of the entry's fields, the entry's.
        if !(e.is_syntax() || e.is_eof()) {
            placed.message = format!("operation {k}: {}", placed.message);
        }
        placed
    })?;
    entry.into_operation().map_err(|m| {
        let (line, column) = at();
        HistoryError::at(line, column, format!("operation {k}: {m}"))
    })
}

/// What an event says happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EventType {
    Invoke,
    Ok,
    Fail,
    Info,
}

/// Gives each operation to `sink` when invoked (unanswered: what it
/// stays if it never completes) and again when it completes; returns how
/// many there are.
fn parse_jepsen(text: &str, sink: &mut dyn FnMut(usize, Operation)) -> Result<usize, HistoryError> {
    parse_jepsen_lines(text.lines().map(Ok), MAX_OPERATIONS, sink)
}

/// [`parse_jepsen`] over lines as they are read (a line that cannot be
/// read is its error), with at most `max_operations` operations.
pub(crate) fn parse_jepsen_lines<L: AsRef<str>>(
    lines: impl Iterator<Item = Result<L, HistoryError>>,
    max_operations: usize,
    sink: &mut dyn FnMut(usize, Operation),
) -> Result<usize, HistoryError> {
    // Open operations by process: (index, f, the operation so far).
    let mut open: BTreeMap<String, (usize, Value, Operation)> = BTreeMap::new();
    let mut count = 0usize;
    let mut timed: Option<bool> = None;
    let mut last_time = 0u64;
    for (n, line) in lines.enumerate() {
        let line = line?;
        let line = line.as_ref();
        let line_no = n + 1;
        let trimmed = line.trim();
        if trimmed.is_empty() {
            continue;
        }
        if trimmed.starts_with("{:") {
            return Err(HistoryError::at(
                line_no,
                1,
                "this is EDN: reqkey reads Jepsen's events as JSON, one object a line (convert with `jet --to json` or the recorder's JSON output)",
            ));
        }
        let event: Map<String, Value> =
            serde_json::from_str(line).map_err(|e| HistoryError::of_json(&e, n))?;
        let err = |m: String| HistoryError::at(line_no, 1, m);
        let process = process_name(event.get("process").unwrap_or(&Value::Null))
            .map_err(|m| err(m.replace("`process`", "an event's `process`")))?;
        if process == NEMESIS {
            continue;
        }
        let kind = match event.get("type").and_then(Value::as_str) {
            Some("invoke") => EventType::Invoke,
            Some("ok") => EventType::Ok,
            Some("fail") => EventType::Fail,
            Some("info") => EventType::Info,
            _ => {
                return Err(err(
                    "an event's `type` must be \"invoke\", \"ok\", \"fail\" or \"info\"".into(),
                ))
            }
        };
        let f = event.get("f").cloned().unwrap_or(Value::Null);
        if !matches!(f, Value::String(_) | Value::Null) {
            return Err(err(
                "`f` must be the op's name (a string), or null for a raw request in `value`".into(),
            ));
        }
        // The instant: `time` (ns) on every event, or on none (then the
        // line order is the real-time order, as in Jepsen's history).
        let time = match event.get("time") {
            Some(Value::Number(t)) => Some(t.as_u64().ok_or_else(|| {
                err("`time` must be a whole number of nanoseconds (0 or more)".into())
            })?),
            None | Some(Value::Null) => None,
            Some(_) => return Err(err("`time` must be a number of nanoseconds".into())),
        };
        if timed.is_some_and(|t| t != time.is_some()) {
            return Err(err(
                "`time` is on some events and not others: give it on every event or on none".into(),
            ));
        }
        timed = Some(time.is_some());
        let instant = time.unwrap_or(n as u64);
        if instant < last_time {
            return Err(err(format!(
                "time {instant} is before the previous event's {last_time}: events must be in time order"
            )));
        }
        last_time = instant;
        match kind {
            EventType::Invoke => {
                if open.contains_key(&process) {
                    return Err(err(format!(
                        "process {process} invokes again before its operation completed"
                    )));
                }
                if count >= max_operations {
                    return Err(err(format!(
                        "more than the {max_operations} operations a history may hold"
                    )));
                }
                let request = match (&f, event.get("value")) {
                    (Value::Null, Some(raw)) => raw.clone(),
                    (Value::Null, None) => {
                        return Err(err(
                            "an invoke with `f` null carries the raw request in `value`".into(),
                        ))
                    }
                    (op, args) => request_of(op.clone(), args.cloned()),
                };
                let op = Operation {
                    client: process.clone(),
                    request,
                    invoke_ns: instant,
                    return_ns: instant,
                    answer: None,
                };
                sink(count, op.clone());
                open.insert(process, (count, f, op));
                count += 1;
            }
            completion => {
                let Some((index, opened, mut op)) = open.remove(&process) else {
                    return Err(err(format!(
                        "process {process} completes an operation it never invoked"
                    )));
                };
                if !f.is_null() && f != opened {
                    return Err(err(format!(
                        "process {process} invoked {opened} but completes {f}"
                    )));
                }
                let answer = match (completion, event.get("answer")) {
                    (EventType::Info, _) => None,
                    (_, Some(raw)) => Some(raw.clone()),
                    (EventType::Ok, None) => Some(object(
                        "ok",
                        event.get("value").cloned().unwrap_or(Value::Null),
                    )),
                    (_, None) => Some(object(
                        "error",
                        event
                            .get("error")
                            .or_else(|| event.get("value"))
                            .cloned()
                            .unwrap_or(Value::Null),
                    )),
                };
                op.return_ns = instant;
                op.answer = answer;
                sink(index, op);
            }
        }
    }
    // An operation never completed stays as given when invoked.
    Ok(count)
}

fn object(key: &str, value: Value) -> Value {
    let mut m = Map::new();
    m.insert(key.into(), value);
    Value::Object(m)
}

/// The request split into the wire's `op` and `args`, when it is exactly
/// that (`None`: a raw request, written whole).
fn split_request(request: &Value) -> Option<(&str, Option<&Value>)> {
    let m = request.as_object()?;
    let op = m.get("op")?.as_str()?;
    if m.keys().any(|k| k != "op" && k != "args") {
        return None;
    }
    Some((op, m.get("args")))
}

/// The answer as Jepsen's completion: `ok` with its value, `fail` with its
/// error, or `None` when it is neither (written whole, as `answer`).
fn split_answer(answer: &Value) -> Option<(EventType, &Value)> {
    let m = answer.as_object()?;
    if m.len() != 1 {
        return None;
    }
    match m.iter().next() {
        Some((k, v)) if k == "ok" => Some((EventType::Ok, v)),
        Some((k, v)) if k == "error" => Some((EventType::Fail, v)),
        _ => None,
    }
}

/// One entry of reqkey's form, in its field order.
#[derive(Serialize)]
struct OutEntry<'a> {
    process: &'a str,
    call_ns: u64,
    return_ns: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    op: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    args: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    request: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    answer: Option<&'a Value>,
}

/// `history` in reqkey's form: an array, one operation a line, in the
/// order given.
pub fn write_json(history: &[Operation]) -> String {
    let mut out = String::from("[\n");
    for (k, o) in history.iter().enumerate() {
        let (op, args, request) = match split_request(&o.request) {
            Some((op, args)) => (Some(op), args, None),
            None => (None, None, Some(&o.request)),
        };
        let entry = OutEntry {
            process: &o.client,
            call_ns: o.invoke_ns,
            return_ns: o.return_ns.max(o.invoke_ns),
            op,
            args,
            request,
            answer: o.answer.as_ref(),
        };
        // A struct of strings, numbers and JSON values always serializes.
        out.push_str(&serde_json::to_string(&entry).unwrap_or_default());
        out.push_str(if k + 1 < history.len() { ",\n" } else { "\n" });
    }
    out.push_str("]\n");
    out
}

/// One event of Jepsen's form, in its field order.
#[derive(Serialize)]
struct OutEvent<'a> {
    process: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    f: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    value: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    answer: Option<&'a Value>,
    time: u64,
}

static NULL: Value = Value::Null;

/// `history` in Jepsen's event form, one event a line, in time order
/// (at one instant, in history order, an op's invoke before its
/// completion). A process is the operation's client; a client with an
/// operation still open gets a process of its own (`client~2`), as Jepsen
/// gives a new process to a client whose operation crashed. An operation
/// never answered completes with `info` at the instant it was given up on.
pub fn write_jepsen(history: &[Operation]) -> String {
    let mut events: Vec<(u64, usize, bool)> = Vec::with_capacity(history.len() * 2);
    for (i, o) in history.iter().enumerate() {
        events.push((o.invoke_ns, i, false));
        events.push((o.return_ns.max(o.invoke_ns), i, true));
    }
    // Stable: an op's invoke stays before its completion at one instant.
    events.sort_by_key(|&(t, _, _)| t);
    let mut busy: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
    let mut process_of: Vec<String> = vec![String::new(); history.len()];
    let mut out = String::new();
    for (time, i, completion) in events {
        let o = &history[i];
        let split = split_request(&o.request);
        let f = split.map(|(op, _)| op);
        let event = if completion {
            if o.answer.is_some() {
                busy.remove(&process_of[i]);
            }
            let (kind, value, error, answer) = match o.answer.as_ref().map(|a| (a, split_answer(a)))
            {
                None => ("info", Some(&NULL), None, None),
                Some((_, Some((EventType::Ok, value)))) => ("ok", Some(value), None, None),
                Some((_, Some((_, error)))) => ("fail", Some(&NULL), Some(error), None),
                Some((raw, None)) => ("ok", Some(&NULL), None, Some(raw)),
            };
            OutEvent {
                process: &process_of[i],
                kind,
                f,
                value,
                error,
                answer,
                time,
            }
        } else {
            let mut process = o.client.clone();
            let mut n = 1u32;
            while busy.contains(&process) || process == NEMESIS {
                n += 1;
                process = format!("{}~{n}", o.client);
            }
            busy.insert(process.clone());
            process_of[i] = process;
            let value = match split {
                Some((_, args)) => args,
                None => Some(&o.request),
            };
            OutEvent {
                process: &process_of[i],
                kind: "invoke",
                f,
                value,
                error: None,
                answer: None,
                time,
            }
        };
        // A struct of strings, numbers and JSON values always serializes.
        out.push_str(&serde_json::to_string(&event).unwrap_or_default());
        out.push('\n');
    }
    out
}

/// `history` written in `format`.
pub fn write_history(history: &[Operation], format: HistoryFormat) -> String {
    match format {
        HistoryFormat::Json => write_json(history),
        HistoryFormat::Jepsen => write_jepsen(history),
    }
}

/// Histories the tests of this crate share (here and in `stream.rs`).
#[cfg(test)]
pub(crate) mod fixtures {
    use super::Operation;
    use serde_json::{json, Value};

    pub(crate) fn commit(session: &str, run: &str, key: &str) -> Value {
        json!({"op": "commitRunStart", "args": {"startRun": {"sessionId": session, "runId": run, "input": {"text": "a"}, "requestKey": key, "requestDigest": "d"}}})
    }

    pub(crate) fn started(session: &str, run: &str, key: &str) -> Value {
        json!({"ok": {"outcome": "started", "run": {"sessionId": session, "runId": run, "status": "running", "startSequence": 1, "requestKey": key, "requestDigest": "d"}}})
    }

    pub(crate) fn taken(holder: &str) -> Value {
        json!({"error": {"kind": "run_start_rejected", "cause": "request_key_taken", "message": "taken", "details": {"existingRunId": holder}}})
    }

    pub(crate) fn op(
        client: &str,
        request: Value,
        invoke_ns: u64,
        return_ns: u64,
        answer: Option<Value>,
    ) -> Operation {
        Operation {
            client: client.into(),
            request,
            invoke_ns,
            return_ns,
            answer,
        }
    }

    /// A race the spec allows, with an unanswered op, a raw request and a
    /// malformed answer in it: every shape the forms must carry.
    pub(crate) fn varied() -> Vec<Operation> {
        vec![
            op(
                "a",
                commit("s", "r1", "k"),
                0,
                10,
                Some(started("s", "r1", "k")),
            ),
            op("b", commit("s", "r2", "k"), 5, 20, Some(taken("r1"))),
            op("c", commit("s", "r3", "k"), 6, 30, None),
            op("a", json!({"op": "getRun"}), 40, 50, Some(json!(null))),
            op(
                "d",
                json!("not an object"),
                41,
                41,
                Some(json!({"error": {"kind": "invalid_argument", "message": "x"}})),
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::lin::check;
    use serde_json::json;

    use super::fixtures::*;

    #[test]
    fn both_forms_read_back_what_they_wrote() {
        let h = varied();
        for format in [HistoryFormat::Json, HistoryFormat::Jepsen] {
            let text = write_history(&h, format);
            assert_eq!(HistoryFormat::detect(&text), Some(format), "{text}");
            let back = parse_history(&text, None).unwrap();
            let mut back_sorted = back.clone();
            back_sorted.sort_by_key(|o| (o.invoke_ns, o.client.clone()));
            assert_eq!(back_sorted, h, "{}:\n{text}", format.name());
        }
    }

    #[test]
    fn the_verdict_survives_either_form() {
        let good = vec![
            op(
                "a",
                commit("s", "r1", "k"),
                0,
                10,
                Some(started("s", "r1", "k")),
            ),
            op("b", commit("s", "r2", "k"), 5, 20, Some(taken("r1"))),
        ];
        let bad = vec![
            op(
                "a",
                commit("s", "r1", "k"),
                0,
                10,
                Some(started("s", "r1", "k")),
            ),
            op(
                "b",
                commit("s", "r2", "k"),
                5,
                20,
                Some(started("s", "r2", "k")),
            ),
        ];
        for format in [HistoryFormat::Json, HistoryFormat::Jepsen] {
            let g = parse_history(&write_history(&good, format), Some(format)).unwrap();
            assert!(check(&g).verdict.is_linearizable());
            let b = parse_history(&write_history(&bad, format), Some(format)).unwrap();
            assert!(!check(&b).verdict.is_linearizable());
        }
        // The malformed answer (`null`) stays an answer, not "no answer":
        // written and read back, the history is still not linearizable.
        let h = varied();
        assert!(!check(&h).verdict.is_linearizable());
        for format in [HistoryFormat::Json, HistoryFormat::Jepsen] {
            let back = parse_history(&write_history(&h, format), None).unwrap();
            assert!(!check(&back).verdict.is_linearizable(), "{}", format.name());
        }
    }

    #[test]
    fn reading_prepared_places_mistakes_as_reading_operations_does() {
        for text in [
            "[\n{\"process\": \"a\", \"call_ns\": 1, \"op\": \"getRun\", \"answr\": {}}\n]",
            "{\"process\": 0, \"type\": \"invoke\", \"f\": \"getRun\"}\n{\"process\": 0, \"type\": \"ok\", \"f\": \"listRuns\"}",
            "[]",
        ] {
            let a = parse_history(text, None).expect_err(text);
            let b = parse_prepared(text, None).expect_err(text);
            assert_eq!(a, b, "{text}");
        }
    }

    #[test]
    fn jepsen_events_as_a_recorder_writes_them() {
        // Integer processes, no `time` (line order is real-time order), a
        // nemesis event, `fail` with its error in `error`, an `info`.
        let text = r#"
{"process": 0, "type": "invoke", "f": "commitRunStart", "value": {"startRun": {"sessionId": "s", "runId": "r1", "input": {"text": "a"}, "requestKey": "k", "requestDigest": "d"}}, "index": 0}
{"process": 1, "type": "invoke", "f": "commitRunStart", "value": {"startRun": {"sessionId": "s", "runId": "r2", "input": {"text": "a"}, "requestKey": "k", "requestDigest": "d"}}}
{"process": "nemesis", "type": "info", "f": "start-partition", "value": null}
{"process": 0, "type": "ok", "f": "commitRunStart", "value": {"outcome": "started", "run": {"sessionId": "s", "runId": "r1", "status": "running", "startSequence": 1, "requestKey": "k", "requestDigest": "d"}}}
{"process": 1, "type": "fail", "f": "commitRunStart", "value": null, "error": {"kind": "run_start_rejected", "cause": "request_key_taken", "message": "m", "details": {"existingRunId": "r1"}}}
{"process": 2, "type": "invoke", "f": "getRun", "value": {"sessionId": "s", "runId": "r1"}}
{"process": 2, "type": "info", "f": "getRun", "value": null}
"#;
        let h = parse_history(text, None).unwrap();
        assert_eq!(h.len(), 3);
        assert_eq!(h[0].client, "0");
        assert_eq!((h[0].invoke_ns, h[0].return_ns), (1, 4));
        assert_eq!(
            h[1].answer,
            Some(taken("r1")).map(|mut t| {
                t["error"]["message"] = json!("m");
                t
            })
        );
        assert_eq!(h[2].answer, None);
        assert!(check(&h).verdict.is_linearizable());
    }

    #[test]
    fn mistakes_are_placed_by_line_and_column() {
        let cases: &[(&str, usize, usize, &str)] = &[
            ("[\n{\"process\": \"a\", \"call_ns\": 1,,}\n]", 2, 31, "key must be a string"),
            ("[\n{\"process\": \"a\", \"call_ns\": 1, \"op\": \"getRun\", \"answr\": {}}\n]", 2, 54, "unknown field `answr`"),
            ("[\n  {\"process\": \"a\", \"call_ns\": 9, \"return_ns\": 3, \"op\": \"getRun\", \"answer\": null}\n]", 2, 3, "before call_ns"),
            ("[\n{\"process\": \"a\", \"call_ns\": 1, \"op\": \"getRun\", \"answer\": null}]", 2, 1, "needs `return_ns`"),
            ("[{\"process\": [], \"call_ns\": 1, \"op\": \"x\"}]", 1, 2, "`process`"),
            ("[{\"process\": \"a\", \"call_ns\": -1, \"op\": \"x\"}]", 1, 31, "integer `-1`"),
            ("[]", 1, 1, "no operations"),
            ("   ", 1, 1, "empty"),
            ("\n  hello", 2, 3, "not a history"),
            ("{\"process\": 0, \"type\": \"ok\", \"f\": \"getRun\"}", 1, 1, "never invoked"),
            ("{\"process\": 0, \"type\": \"invoke\", \"f\": \"getRun\"}\n{\"process\": 0, \"type\": \"invoke\", \"f\": \"getRun\"}", 2, 1, "invokes again"),
            ("{\"process\": 0, \"type\": \"invoke\", \"f\": \"getRun\"}\n{\"process\": 0, \"type\": \"ok\", \"f\": \"listRuns\"}", 2, 1, "but completes"),
            ("{\"process\": 0, \"type\": \"invoke\", \"f\": \"getRun\", \"time\": 5}\n{\"process\": 0, \"type\": \"ok\", \"f\": \"getRun\", \"time\": 4}", 2, 1, "time order"),
            ("{\"process\": 0, \"type\": \"invoke\", \"f\": \"getRun\", \"time\": 5}\n{\"process\": 0, \"type\": \"ok\", \"f\": \"getRun\"}", 2, 1, "every event or on none"),
            ("{\"process\": 0, \"type\": \"begin\", \"f\": \"getRun\"}", 1, 1, "`type`"),
            ("{\"process\": 0, \"type\": \"invoke\", \"f\": \"getRun\"}\n{\"process\": 0, \"type\": ", 2, 23, "EOF"),
            ("{:process 0, :type :invoke, :f :read}", 1, 1, "EDN"),
        ];
        for (text, line, column, says) in cases {
            let e = parse_history(text, None).expect_err(text);
            assert_eq!((e.line, e.column), (*line, *column), "{text}: {e}");
            assert!(e.message.contains(says), "{text}: {e}");
        }
    }

    #[test]
    fn an_open_client_gets_a_process_of_its_own_in_jepsen_form() {
        // Two overlapping ops of one client (a recorder that names its
        // connections, say) still pair up once written as events.
        let h = vec![
            op("c", commit("s", "r1", "k"), 0, 10, None),
            op(
                "c",
                commit("s", "r2", "k"),
                5,
                20,
                Some(started("s", "r2", "k")),
            ),
        ];
        let text = write_jepsen(&h);
        assert!(text.contains("\"c~2\""), "{text}");
        let back = parse_history(&text, Some(HistoryFormat::Jepsen)).unwrap();
        assert_eq!(back.len(), 2);
        assert!(check(&back).verdict.is_linearizable());
    }
}
