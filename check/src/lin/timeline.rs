//! Counterexamples rendered as readable timelines of requests and answers.

use std::fmt::Write as _;

use reqkey_model::seq::StoreOp;
use serde_json::Value;

use super::types::Operation;

/// The most lines a timeline shows. Past it, the first half and the last
/// half are shown (a failing subset fails at its end), and the number
/// left out between them: a timeline is a few KiB whatever the history,
/// and only the operations shown are read again for it.
pub(super) const MAX_LINES: usize = 200;

/// A readable timeline: one line per op, ordered by invocation, times in
/// µs from the first invocation, and a bar showing the overlap.
pub fn render_timeline(history: &[Operation], indices: &[usize], in_flight: &[usize]) -> String {
    render_with(
        indices,
        in_flight,
        |i| Span::of(&history[i]),
        |i| {
            let o = &history[i];
            Some(Line {
                client: o.client.clone(),
                request: summarize_request(&o.request),
                answer: o.answer.as_ref().map(summarize_answer),
            })
        },
    )
}

/// When an operation ran, as a timeline places it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Span {
    pub(super) invoke_ns: u64,
    pub(super) return_ns: u64,
    pub(super) answered: bool,
}

impl Span {
    pub(super) fn of(o: &Operation) -> Self {
        Span {
            invoke_ns: o.invoke_ns,
            return_ns: o.return_ns,
            answered: o.answer.is_some(),
        }
    }
}

/// What a timeline's line says of an operation (read for the lines
/// shown only).
pub(super) struct Line {
    pub(super) client: String,
    pub(super) request: String,
    pub(super) answer: Option<String>,
}

/// `indices` in a timeline's order (invocation, then index), with their
/// spans.
fn ordered(indices: &[usize], span: impl Fn(usize) -> Span) -> Vec<(usize, Span)> {
    let mut idx: Vec<(usize, Span)> = indices.iter().map(|&i| (i, span(i))).collect();
    idx.sort_by_key(|(i, o)| (o.invoke_ns, *i));
    idx
}

/// The operations a timeline of `indices` shows lines for (at most
/// [`MAX_LINES`]), sorted: what a caller reads again to render it.
pub(super) fn shown_lines(indices: &[usize], span: impl Fn(usize) -> Span) -> Vec<usize> {
    let idx = ordered(indices, span);
    let mut shown: Vec<usize> = if idx.len() <= MAX_LINES {
        idx.iter().map(|(i, _)| *i).collect()
    } else {
        let half = MAX_LINES / 2;
        idx[..half]
            .iter()
            .chain(&idx[idx.len() - half..])
            .map(|(i, _)| *i)
            .collect()
    };
    shown.sort_unstable();
    shown
}

/// [`render_timeline`] over `span` (every op placed: the bars' scale)
/// and `line` (what the lines shown say: [`shown_lines`]; `None`: the
/// line is left out).
pub(super) fn render_with(
    indices: &[usize],
    in_flight: &[usize],
    span: impl Fn(usize) -> Span,
    mut line: impl FnMut(usize) -> Option<Line>,
) -> String {
    const BAR_COLS: usize = 24;
    let idx = ordered(indices, span);
    let t0 = idx.iter().map(|(_, o)| o.invoke_ns).min().unwrap_or(0);
    let t1 = idx
        .iter()
        .map(|(_, o)| if o.answered { o.return_ns } else { o.invoke_ns })
        .max()
        .unwrap_or(t0)
        .max(t0 + 1);
    let span_ns = (t1 - t0) as f64;
    let col = |t: u64| (((t.saturating_sub(t0)) as f64 / span_ns) * (BAR_COLS - 1) as f64) as usize;
    let flying: std::collections::HashSet<usize> = in_flight.iter().copied().collect();
    let half = MAX_LINES / 2;
    let cut = idx.len() > MAX_LINES;
    let mut lines: Vec<(usize, Span, Line)> = Vec::new();
    let mut left_out = None;
    for (k, &(i, o)) in idx.iter().enumerate() {
        if cut && k == half {
            left_out = Some(lines.len());
        }
        if cut && (half..idx.len() - half).contains(&k) {
            continue;
        }
        if let Some(l) = line(i) {
            lines.push((i, o, l));
        }
    }
    let client_w = lines
        .iter()
        .map(|(_, _, l)| l.client.len())
        .max()
        .unwrap_or(0)
        .min(16);
    let mut out = String::new();
    for (k, (i, o, l)) in lines.into_iter().enumerate() {
        if left_out == Some(k) {
            let _ = writeln!(out, "  ... {} more", idx.len() - MAX_LINES);
        }
        let pending = !o.answered || flying.contains(&i);
        let a = col(o.invoke_ns);
        let b = if pending {
            BAR_COLS - 1
        } else {
            col(o.return_ns).max(a)
        };
        let mut bar = vec![' '; BAR_COLS];
        for c in bar.iter_mut().take(b + 1).skip(a) {
            *c = '-';
        }
        bar[a] = '|';
        bar[b] = if pending { '>' } else { '|' };
        let bar: String = bar.into_iter().collect();
        let us = |t: u64| t.saturating_sub(t0) as f64 / 1000.0;
        let when = if !o.answered {
            format!("{:>9.1} .. (no answer)", us(o.invoke_ns))
        } else {
            format!("{:>9.1} .. {:>9.1}", us(o.invoke_ns), us(o.return_ns))
        };
        let answer = match l.answer {
            None => "(no answer)".to_owned(),
            Some(a) if flying.contains(&i) => format!("(counted in flight) {a}"),
            Some(a) => a,
        };
        let _ = writeln!(
            out,
            "  #{i:<4} {:<client_w$} [{bar}] {when} µs  {}  =>  {}",
            truncate(&l.client, 16),
            truncate(&l.request, 90),
            truncate(&answer, 110),
        );
    }
    out
}

/// `#a, #b, #c` of the first `max` of `indices`, then `… and N more`:
/// a list of operations bounded whatever the history.
pub fn listed(indices: &[usize], max: usize) -> String {
    let mut out = String::new();
    for (k, i) in indices.iter().take(max).enumerate() {
        let sep = if k == 0 { "" } else { ", " };
        let _ = write!(out, "{sep}#{i}");
    }
    if indices.len() > max {
        let _ = write!(out, ", … and {} more", indices.len() - max);
    }
    out
}

pub(super) fn truncate(s: &str, max_chars: usize) -> String {
    if s.chars().count() <= max_chars {
        s.to_owned()
    } else {
        let mut t: String = s.chars().take(max_chars.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

pub(super) fn s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "null".into(),
        other => other.to_string(),
    }
}

/// `commitRunStart r1 exp=null key=k1 input={"text":"a"}` and the like.
pub fn summarize_request(request: &Value) -> String {
    let op = request.get("op").and_then(Value::as_str).unwrap_or("?");
    let args = request.get("args").unwrap_or(&Value::Null);
    let field = |name: &str| args.get(name).map(s);
    match (op, StoreOp::from_wire(request).is_ok()) {
        ("commitRunStart", true) => {
            let sr = &args["startRun"];
            let mut out = format!(
                "commitRunStart {} exp={}",
                s(&sr["runId"]),
                sr.get("expectedCurrentRunId").map_or("null".into(), s)
            );
            if let Some(k) = sr.get("requestKey").filter(|k| !k.is_null()) {
                let _ = write!(out, " key={}", s(k));
            }
            let _ = write!(
                out,
                " input={}",
                sr.get("input").map_or("null".into(), |v| v.to_string())
            );
            out
        }
        ("getRun", true) => format!("getRun {}", field("runId").unwrap_or_default()),
        ("getRunByRequestKey", true) => {
            format!(
                "getRunByRequestKey {}",
                field("requestKey").unwrap_or_default()
            )
        }
        ("setRunStatus", true) => format!(
            "setRunStatus {} -> {}",
            field("runId").unwrap_or_default(),
            field("status").unwrap_or_default()
        ),
        (name, true) => name.to_owned(),
        (_, false) => format!("(malformed request) {request}"),
    }
}

pub(super) fn summarize_run(r: &Value) -> String {
    if r.is_null() {
        return "null".into();
    }
    let mut out = format!(
        "{}#{} {}",
        s(&r["runId"]),
        r.get("startSequence").map_or("?".into(), s),
        r.get("status").map_or("?".into(), s)
    );
    if let Some(k) = r.get("requestKey") {
        let _ = write!(out, " key={}", s(k));
    }
    out
}

/// `ok started r1#1 running key=k1`, `error request_key_taken {existingRunId: r1}`...
pub fn summarize_answer(answer: &Value) -> String {
    if let Some(e) = answer.get("error") {
        let kind = e.get("kind").map_or("?".into(), s);
        return match e.get("cause") {
            Some(c) => format!(
                "error {} {}",
                s(c),
                e.get("details").map_or(String::new(), Value::to_string)
            ),
            None => format!("error {kind}"),
        };
    }
    let Some(ok) = answer.get("ok") else {
        return format!("(malformed answer) {answer}");
    };
    if let (Some(outcome), Some(run)) = (ok.get("outcome"), ok.get("run")) {
        return format!("ok {} {}", s(outcome), summarize_run(run));
    }
    if let Some(d) = ok.get("deleted") {
        return format!("ok deleted={}", s(d));
    }
    if let Some(items) = ok.as_array() {
        let parts: Vec<String> = items
            .iter()
            .map(|it| {
                if it.get("startSequence").is_some() {
                    summarize_run(it)
                } else {
                    format!(
                        "{}:{}",
                        it.get("runId").map_or("?".into(), s),
                        it.get("input").map_or("?".into(), |v| v.to_string())
                    )
                }
            })
            .collect();
        return format!("ok [{}]", parts.join(", "));
    }
    if ok.get("runId").is_some() || ok.is_null() {
        return format!("ok {}", summarize_run(ok));
    }
    format!("ok {ok}")
}
