//! Bounds on what a target can make the judge keep and write: every text
//! a target controls is cut to a stated length, with its size shown.
//!
//! Why here, once: a target writes its `/health` identity, its answers
//! and its error messages, and every report quotes them, several times
//! (a failure's message, its actual answer, a history view, the JUnit
//! stdout). Without a bound, a target answering 1 MB made the judge hold
//! a gigabyte and write reports of hundreds of megabytes. So each
//! scenario's result is cut as soon as it is made ([`scenario_result`]),
//! before any reporter sees or keeps it, and the identity and a run's
//! reason before they reach a report ([`value`], [`text`]). The bounds
//! are stated in docs/reports.md ("Limits of the harness").

use serde_json::Value;

use crate::run::event::{Failure, ScenarioResult};

/// The longest target-controlled text kept whole, in bytes; a longer one
/// keeps its first `MAX_TEXT_BYTES` bytes and says its size.
pub const MAX_TEXT_BYTES: usize = 4096;
/// The largest JSON value (a `/health` identity, an expected or actual
/// answer) kept as a value, in serialized bytes; a larger one is shown as
/// a text: its serialized form, cut by [`text`].
pub const MAX_VALUE_BYTES: usize = 16 * 1024;

/// `text`, or its first [`MAX_TEXT_BYTES`] bytes (at a character
/// boundary) and `… (N bytes, first M shown)`.
pub fn text(text: &str) -> String {
    if text.len() <= MAX_TEXT_BYTES {
        return text.to_owned();
    }
    let mut end = MAX_TEXT_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}… ({} bytes, first {end} shown)",
        &text[..end],
        text.len()
    )
}

/// `value`, or when its serialized form is over [`MAX_VALUE_BYTES`], a
/// string holding that form cut by [`text`].
pub fn value(value: &Value) -> Value {
    let serialized = value.to_string();
    if serialized.len() <= MAX_VALUE_BYTES {
        return value.clone();
    }
    Value::String(text(&serialized))
}

fn failure(f: &mut Failure) {
    f.message = text(&f.message);
    f.detail = f.detail.as_deref().map(text);
    f.expected = f.expected.as_ref().map(value);
    f.actual = f.actual.as_ref().map(value);
}

/// A scenario's result with every target-controlled text cut: the
/// failure's message, detail and values, the note, and the history
/// view's requests and answers.
pub fn scenario_result(mut result: ScenarioResult) -> ScenarioResult {
    if let Some(f) = result.failure.as_mut() {
        failure(f);
    }
    result.later_failures.iter_mut().for_each(failure);
    for c in &mut result.clauses {
        c.why = c.why.as_deref().map(text);
    }
    result.note = result.note.as_deref().map(text);
    if let Some(view) = result.history_view.as_mut() {
        for op in &mut view.ops {
            op.request = text(&op.request);
            op.answer = text(&op.answer);
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_text_is_cut_with_its_size_and_a_short_one_kept() {
        assert_eq!(text("short"), "short");
        let long = "é".repeat(MAX_TEXT_BYTES); // 2 bytes each
        let cut = text(&long);
        assert!(cut.len() < MAX_TEXT_BYTES + 100, "{}", cut.len());
        assert!(
            cut.ends_with(&format!(
                "… ({} bytes, first {MAX_TEXT_BYTES} shown)",
                2 * MAX_TEXT_BYTES
            )),
            "{}",
            &cut[cut.len() - 60..]
        );
    }

    #[test]
    fn a_large_value_becomes_a_cut_text_and_a_small_one_stays() {
        let small = serde_json::json!({"name": "x"});
        assert_eq!(value(&small), small);
        let big = serde_json::json!({"name": "n".repeat(1 << 20)});
        let shown = value(&big);
        let s = shown.as_str().unwrap_or_default();
        assert!(s.starts_with("{\"name\":\"nnn"), "{s:.40}");
        assert!(s.len() < MAX_TEXT_BYTES + 100);
        assert!(s.contains("1048587 bytes"), "{}", &s[s.len() - 60..]);
    }
}
