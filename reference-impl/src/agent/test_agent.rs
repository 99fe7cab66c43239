//! The scripted test agent of SPEC 7 and the per-run event logs.
//!
//! A conformance suite needs runs whose life it controls from the outside:
//! one that stays `running` long enough to be attached to, one that
//! suspends, one that fails. The test agent reads that script from the
//! input text (`[sleep:N]`, `[suspend]`, `[fail]`, combinable; `[admit:N]`
//! slows the entry's admission before its run exists), emits one
//! `text` event `echo: <text>`, then its final status.
//!
//! Every run's events go into a [`RunLog`], an append-only buffer with a
//! change signal. That buffer is what makes an attached chat stream honest:
//! a retried send replays the holder's run *from its start* (the buffer)
//! and then follows it live (the signal), and it can never show another
//! run because a follower holds exactly one run's log.
//!
//! Bounds: a sleep is capped at [`MAX_SLEEP_MS`]; a log holds at most
//! [`MAX_EVENTS_PER_RUN`] events (the test agent emits two).

use std::sync::{Mutex, MutexGuard};

use reqkey_model::json_text::JsonText;
use reqkey_model::RunStatus;
use serde_json::Value;
use tokio::sync::watch;

/// The longest `[sleep:N]` honoured; a larger N sleeps this long.
pub const MAX_SLEEP_MS: u64 = 60_000;

/// A log refuses events beyond this many (the test agent emits two).
pub const MAX_EVENTS_PER_RUN: usize = 8;

/// What a run of the test agent does, read from its input text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Script {
    /// How long the run stays `running` before it ends.
    pub sleep_ms: u64,
    /// The status it ends in: `completed`, `suspended_input` or `failed`.
    pub end: RunStatus,
    /// `[admit:N]`: how much longer the entry's admission lasts, before
    /// its run-start commit (the run does not exist meanwhile).
    pub admit_ms: u64,
}

/// Reads the markers of SPEC 7 anywhere in `text`. `[fail]` wins over
/// `[suspend]`; the first well-formed `[sleep:N]` counts.
pub fn parse_script(text: &str) -> Script {
    let end = if text.contains("[fail]") {
        RunStatus::Failed
    } else if text.contains("[suspend]") {
        RunStatus::SuspendedInput
    } else {
        RunStatus::Completed
    };
    Script {
        sleep_ms: marker_ms(text, "[sleep:").unwrap_or(0),
        end,
        admit_ms: marker_ms(text, "[admit:").unwrap_or(0),
    }
}

/// The first well-formed `MARKERN]` in `text`, capped at [`MAX_SLEEP_MS`].
fn marker_ms(text: &str, marker: &str) -> Option<u64> {
    let mut rest = text;
    while let Some(at) = rest.find(marker) {
        rest = &rest[at + marker.len()..];
        let digits_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits_len > 0 && rest.as_bytes().get(digits_len) == Some(&b']') {
            // Saturate absurd numbers instead of failing on them.
            let ms = rest[..digits_len].parse::<u64>().unwrap_or(u64::MAX);
            return Some(ms.min(MAX_SLEEP_MS));
        }
    }
    None
}

/// The text a run's input carries: `input.text` when it is a string, the
/// canonical JSON of the input otherwise (so any input still echoes).
pub fn input_text(input: &Value) -> String {
    match input.get("text") {
        Some(Value::String(s)) => s.clone(),
        _ => reqkey_model::canonical_json(input),
    }
}

/// [`input_text`] of an input kept as text (the same text: the string
/// member `text`, else the canonical JSON).
pub fn input_text_of(input: &JsonText) -> String {
    input
        .string_member("text")
        .unwrap_or_else(|| input.canonical().to_owned())
}

/// One event of a run, as a chat stream shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunEvent {
    /// `event: text`, `{"delta"}`.
    Text(String),
    /// `event: finish`, `{"status"}`; always the last event.
    Finish(RunStatus),
}

#[derive(Debug, Default)]
struct LogInner {
    events: Vec<RunEvent>,
    finished: bool,
}

/// The append-only event buffer of one run, with a change signal.
#[derive(Debug)]
pub struct RunLog {
    inner: Mutex<LogInner>,
    /// Carries the number of events; bumped on every append.
    version: watch::Sender<usize>,
}

impl Default for RunLog {
    fn default() -> Self {
        Self::new()
    }
}

impl RunLog {
    pub fn new() -> Self {
        Self {
            inner: Mutex::default(),
            version: watch::Sender::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, LogInner> {
        // Every mutation is a single push; a poisoned log is still consistent.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn push(&self, event: RunEvent) -> bool {
        let len = {
            let mut inner = self.lock();
            if inner.finished || inner.events.len() >= MAX_EVENTS_PER_RUN {
                return false;
            }
            inner.finished = matches!(event, RunEvent::Finish(_));
            inner.events.push(event);
            inner.events.len()
        };
        self.version.send_replace(len);
        true
    }

    /// Appends a `text` event (ignored once the run has finished).
    pub fn push_text(&self, delta: impl Into<String>) -> bool {
        self.push(RunEvent::Text(delta.into()))
    }

    /// Appends the `finish` event; only the first one counts.
    pub fn finish(&self, status: RunStatus) -> bool {
        self.push(RunEvent::Finish(status))
    }

    pub fn is_finished(&self) -> bool {
        self.lock().finished
    }

    pub fn len(&self) -> usize {
        self.lock().events.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The events from index `from` on, and whether the log is finished.
    pub fn events_from(&self, from: usize) -> (Vec<RunEvent>, bool) {
        let inner = self.lock();
        let events = inner
            .events
            .get(from..)
            .map(<[_]>::to_vec)
            .unwrap_or_default();
        (events, inner.finished)
    }

    /// A receiver that changes whenever an event is appended.
    pub fn subscribe(&self) -> watch::Receiver<usize> {
        self.version.subscribe()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn markers_match_anywhere_and_combine() {
        assert_eq!(
            parse_script("hi"),
            Script {
                sleep_ms: 0,
                end: RunStatus::Completed,
                admit_ms: 0
            }
        );
        assert_eq!(
            parse_script("x [sleep:300] y [fail]"),
            Script {
                sleep_ms: 300,
                end: RunStatus::Failed,
                admit_ms: 0
            }
        );
        assert_eq!(parse_script("[suspend]now").end, RunStatus::SuspendedInput);
        assert_eq!(parse_script("[suspend][fail]").end, RunStatus::Failed);
        assert_eq!(parse_script("[admit:1500] [sleep:20]").admit_ms, 1500);
        assert_eq!(parse_script("[admit:1500] [sleep:20]").sleep_ms, 20);
    }

    #[test]
    fn malformed_sleep_markers_are_ignored_and_huge_ones_capped() {
        assert_eq!(parse_script("[sleep:] [sleep:x]").sleep_ms, 0);
        assert_eq!(parse_script("[sleep:12 [sleep:40]").sleep_ms, 40);
        assert_eq!(
            parse_script("[sleep:99999999999999999999999]").sleep_ms,
            MAX_SLEEP_MS
        );
    }

    #[test]
    fn input_text_prefers_the_text_field() {
        assert_eq!(input_text(&json!({"text": "a"})), "a");
        assert_eq!(input_text(&json!({"b": 1, "a": 2})), r#"{"a":2,"b":1}"#);
        for v in [
            json!({"text": "a"}),
            json!({"b": 1, "a": 2}),
            json!({"text": 5}),
            json!([1, {"text": "no"}]),
            json!("text"),
        ] {
            assert_eq!(
                input_text_of(&JsonText::from_value(&v)),
                input_text(&v),
                "{v}"
            );
        }
    }

    #[test]
    fn a_log_keeps_order_and_refuses_events_after_finish() {
        let log = RunLog::new();
        let rx = log.subscribe();
        assert!(log.push_text("echo: a"));
        assert!(log.finish(RunStatus::Completed));
        assert!(!log.finish(RunStatus::Interrupted));
        assert!(!log.push_text("late"));
        let (events, finished) = log.events_from(0);
        assert!(finished);
        assert_eq!(
            events,
            vec![
                RunEvent::Text("echo: a".into()),
                RunEvent::Finish(RunStatus::Completed)
            ]
        );
        assert_eq!(*rx.borrow(), 2);
        assert_eq!(log.events_from(5).0, vec![]);
    }
}
