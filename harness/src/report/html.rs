//! The HTML report: one self-contained page (no network: styles inline, no
//! scripts, no fonts) for what people would rather look at than read.
//!
//! At the top, the verdict (`#verdict`, with a `data-verdict` attribute a
//! browser test reads), the target, its declared profile and identity, the
//! suite and the seed. Then the scenarios by level, each with its steps (a
//! model counterexample is such a step list), its failure (a failing
//! linearizability check carries the history that broke it), and each race
//! as a timeline: one lane per trial, each request a bar over real time,
//! the failing trial marked. Race, `linearizable` and `mixed_histories`
//! scenarios also get a history viewer ([`history_svg`], after
//! Porcupine's): one trial's operations, a lane per client, each operation
//! a bar from its call to its return labelled with its request and answer,
//! a time axis with units, the smallest non-linearizable subset in red and
//! listed below; a checkbox widens it three times (CSS only: no script).
//!
//! Rendering is a pure function of the context, the scenarios and the
//! summary, so it is snapshot-tested like the other formats.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write;

use serde_json::Value;

use crate::report::context::{verdict_label, Rendered, ReportContext};
use crate::report::record::{self, RunRecord};
use crate::report::verdict::Outcome;
use crate::run::event::{Event, HistoryView, Reporter, RunSummary, ScenarioResult, TrialTimeline};
use crate::targets::Level;
use reqkey_scenario::{Action, Scenario, Step};

/// The most characters of one step's arguments the page shows.
const MAX_STEP_CHARS: usize = 400;
/// The width of a timeline's drawing area, in SVG user units.
const TIMELINE_WIDTH: u64 = 900;
/// The height of one request's bar, and the gap between lanes.
const BAR_HEIGHT: u64 = 4;
const LANE_GAP: u64 = 6;

/// Escapes text for HTML element content and attribute values: markup
/// escaped, control and bidi characters shown as escapes
/// ([`crate::report::inert::html`]).
pub fn escape(text: &str) -> String {
    crate::report::inert::html(text)
}

fn truncate(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// One step as a line: what it does and, briefly, with what.
fn step_line(step: &Step) -> String {
    let args = match &step.action {
        Action::Store { args, .. } => Some(args.clone()),
        Action::Rpc(v) => Some(v.clone()),
        Action::Http(http) => Some(http.source.clone()),
        Action::WaitRun(wait) => Some(wait.source.clone()),
        _ => None,
    };
    let mut line = step.action.label();
    if let Some(n) = step.copies {
        line.push_str(&format!(" ×{n}"));
    }
    if let Some(a) = args {
        line.push(' ');
        line.push_str(&truncate(&a.to_string(), MAX_STEP_CHARS));
    }
    if let Some(e) = &step.expect {
        line.push_str(" → expect ");
        line.push_str(&truncate(&e.to_string(), MAX_STEP_CHARS));
    }
    if step.linearizable {
        line.push_str(" (linearizable)");
    }
    line
}

fn steps_html(steps: &[Step], out: &mut String) {
    out.push_str("<ol class=\"steps\">");
    for step in steps {
        let _ = write!(out, "<li><code>{}</code>", escape(&step_line(step)));
        if let Action::Parallel(items) = &step.action {
            steps_html(items, out);
        }
        out.push_str("</li>");
    }
    out.push_str("</ol>");
}

/// A race as an SVG: one lane per trial, one bar per request.
pub fn timeline_svg(timelines: &[TrialTimeline]) -> String {
    let span_us = timelines
        .iter()
        .flat_map(|t| t.spans.iter().map(|s| s.end_us))
        .max()
        .unwrap_or(0)
        .max(1);
    let label_width = 110;
    let mut y = 0;
    let mut body = String::new();
    for t in timelines {
        let lane_height = (t.spans.len() as u64).max(1) * BAR_HEIGHT;
        let class = if t.failed { "lane failed" } else { "lane" };
        let label = if t.failed {
            format!("trial {} (failed)", t.trial + 1)
        } else {
            format!("trial {}", t.trial + 1)
        };
        let _ = write!(
            body,
            "<g class=\"{class}\" data-trial=\"{}\"><rect class=\"lane-bg\" x=\"0\" y=\"{y}\" width=\"{}\" height=\"{lane_height}\"/><text x=\"2\" y=\"{}\">{}</text>",
            t.trial + 1,
            label_width + TIMELINE_WIDTH,
            y + lane_height.min(10),
            escape(&label)
        );
        for (k, s) in t.spans.iter().enumerate() {
            let x = label_width + s.start_us * TIMELINE_WIDTH / span_us;
            let w = ((s.end_us.saturating_sub(s.start_us)) * TIMELINE_WIDTH / span_us).max(1);
            let _ = write!(
                body,
                "<rect class=\"bar\" x=\"{x}\" y=\"{}\" width=\"{w}\" height=\"{}\"><title>{} {}–{} µs</title></rect>",
                y + k as u64 * BAR_HEIGHT,
                BAR_HEIGHT - 1,
                escape(&s.name),
                s.start_us,
                s.end_us
            );
        }
        body.push_str("</g>");
        y += lane_height + LANE_GAP;
    }
    format!(
        "<svg class=\"timeline\" xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {} {}\" width=\"100%\" role=\"img\" aria-label=\"race timeline: {} trials over {} µs\">{body}</svg><p class=\"axis\">0 µs … {span_us} µs after each trial's first request</p>",
        label_width + TIMELINE_WIDTH,
        y.max(1),
        timelines.len(),
        span_us
    )
}

/// The history viewer's geometry, in SVG user units.
const HV_LABEL_WIDTH: u64 = 150;
const HV_PLOT_WIDTH: u64 = 900;
const HV_AXIS_HEIGHT: u64 = 26;
const HV_LANE_HEIGHT: u64 = 28;
/// The width of one character of a bar's label (9px monospace).
const HV_CHAR_WIDTH: f64 = 5.5;

/// A time axis for `span_ns`: its unit, the unit's size in ns, the tick
/// step in ns (1, 2 or 5 times a power of ten, about 8 ticks) and the
/// decimals a tick's label needs.
fn axis(span_ns: u64) -> (&'static str, u64, u64, usize) {
    let (unit, per) = match span_ns {
        0..=999 => ("ns", 1),
        1_000..=999_999 => ("µs", 1_000),
        1_000_000..=999_999_999 => ("ms", 1_000_000),
        _ => ("s", 1_000_000_000),
    };
    let raw = (span_ns / 8).max(1);
    let mut step = 1u64;
    'find: loop {
        for m in [1u64, 2, 5] {
            if step.saturating_mul(m) >= raw {
                step = step.saturating_mul(m);
                break 'find;
            }
        }
        if step > u64::MAX / 10 {
            break;
        }
        step *= 10;
    }
    let in_units = step as f64 / per as f64;
    let decimals = if in_units >= 1.0 {
        0
    } else {
        (-in_units.log10()).ceil() as usize
    };
    (unit, per, step, decimals)
}

/// An instant in the axis's unit (`2.960 ms`).
fn at_unit(ns: u64, unit: &str, per: u64) -> String {
    if per == 1 {
        format!("{ns} {unit}")
    } else {
        format!("{:.3} {unit}", ns as f64 / per as f64)
    }
}

/// A bar's label: `request → answer`, in at most `chars` characters,
/// the request cut first (the answer is what a reader compares).
fn bar_label(request: &str, answer: &str, chars: usize) -> String {
    let whole = format!("{request} → {answer}");
    if whole.chars().count() <= chars {
        return whole;
    }
    let answer_chars = answer.chars().count();
    let request_room = chars.saturating_sub(answer_chars + 3).max(12);
    truncate(
        &format!(
            "{} → {answer}",
            truncate(request, request_room.saturating_sub(1))
        ),
        chars.saturating_sub(1),
    )
}

/// A trial's history as Porcupine draws one: a lane per client, each
/// operation a bar from its call to its return labelled `request →
/// answer` (cut to the room before the lane's next bar; whole on hover),
/// an operation never answered open to the right edge, a time axis with
/// units, the smallest non-linearizable subset found in red and listed
/// under the drawing. Every client name, request and answer is target
/// text and goes through [`escape`].
pub fn history_svg(view: &HistoryView) -> String {
    let span = view
        .ops
        .iter()
        .map(|o| o.return_ns.unwrap_or(o.call_ns))
        .max()
        .unwrap_or(0)
        .max(1);
    let (unit, per, step, decimals) = axis(span);
    let x = |t: u64| {
        HV_LABEL_WIDTH
            + (u128::from(t.min(span)) * u128::from(HV_PLOT_WIDTH) / u128::from(span)) as u64
    };
    let mut clients: Vec<&str> = Vec::new();
    for o in &view.ops {
        if !clients.contains(&o.client.as_str()) {
            clients.push(&o.client);
        }
    }
    let height = HV_AXIS_HEIGHT + clients.len() as u64 * HV_LANE_HEIGHT + 4;
    let mut body = String::new();
    // The axis: ticks with their labels, and a grid line each.
    let mut tick = 0u64;
    while tick <= span {
        let tx = x(tick);
        let value = tick as f64 / per as f64;
        let anchor = if tick == 0 { "start" } else { "middle" };
        let _ = write!(
            body,
            "<line class=\"grid\" x1=\"{tx}\" y1=\"{}\" x2=\"{tx}\" y2=\"{height}\"/><text class=\"tick\" x=\"{tx}\" y=\"14\" text-anchor=\"{anchor}\">{value:.decimals$} {unit}</text>",
            HV_AXIS_HEIGHT - 6
        );
        match tick.checked_add(step) {
            Some(next) => tick = next,
            None => break,
        }
    }
    for (lane, client) in clients.iter().enumerate() {
        let y = HV_AXIS_HEIGHT + lane as u64 * HV_LANE_HEIGHT;
        let _ = write!(
            body,
            "<g class=\"hlane\" data-client=\"{}\"><rect class=\"hlane-bg\" x=\"0\" y=\"{y}\" width=\"{}\" height=\"{HV_LANE_HEIGHT}\"/><text class=\"client\" x=\"2\" y=\"{}\">{}</text>",
            escape(client),
            HV_LABEL_WIDTH + HV_PLOT_WIDTH,
            y + 17,
            escape(&truncate(client, 24))
        );
        let lane_ops: Vec<&crate::run::event::ViewOp> =
            view.ops.iter().filter(|o| o.client == *client).collect();
        for (k, o) in lane_ops.iter().enumerate() {
            let x0 = x(o.call_ns);
            let x1 = x(o.return_ns.unwrap_or(span));
            let w = x1.saturating_sub(x0).max(2);
            let class = match (o.failing, o.return_ns.is_some()) {
                (true, _) => "op failing",
                (false, true) => "op",
                (false, false) => "op open",
            };
            let until = o
                .return_ns
                .map_or_else(|| "no answer".to_owned(), |r| at_unit(r, unit, per));
            let room = lane_ops
                .get(k + 1)
                .map_or(HV_LABEL_WIDTH + HV_PLOT_WIDTH, |next| x(next.call_ns))
                .saturating_sub(x0 + 2);
            let chars = (room as f64 / HV_CHAR_WIDTH) as usize;
            let text = if chars >= 4 {
                format!(
                    "<text x=\"{x0}\" y=\"{}\">{}</text>",
                    y + 10,
                    escape(&bar_label(&o.request, &o.answer, chars))
                )
            } else {
                String::new()
            };
            let _ = write!(
                body,
                "<g class=\"{class}\"><title>{}: {} .. {until}\n{}\n→ {}</title><rect x=\"{x0}\" y=\"{}\" width=\"{w}\" height=\"10\"/>{text}</g>",
                escape(&o.client),
                at_unit(o.call_ns, unit, per),
                escape(&o.request),
                escape(&o.answer),
                y + 13,
            );
        }
        body.push_str("</g>");
    }
    let failing: Vec<&crate::run::event::ViewOp> = view.ops.iter().filter(|o| o.failing).collect();
    let mut out = format!(
        "<figure class=\"history\" data-trial=\"{}\"><label class=\"zoom-toggle\"><input type=\"checkbox\" class=\"zoom\"> wider (×3)</label><div class=\"scroll\"><svg class=\"history\" xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {} {height}\" width=\"100%\" role=\"img\" aria-label=\"history of trial {}: {} operations of {} clients over {} {unit}\">{body}</svg></div><figcaption>trial {}{}: a lane per client, each operation a bar from its call to its return, {unit} after the first call shown",
        view.trial + 1,
        HV_LABEL_WIDTH + HV_PLOT_WIDTH,
        view.trial + 1,
        view.ops.len(),
        clients.len(),
        format_args!("{:.decimals$}", span as f64 / per as f64),
        view.trial + 1,
        if view.failed { " (failed)" } else { "" },
    );
    if let Some(session) = &view.session {
        let _ = write!(out, "; session <code>{}</code>", escape(session));
    }
    if let Some(prefix) = &view.id_prefix {
        let _ = write!(
            out,
            "; ids without their prefix <code>{}</code>",
            escape(prefix)
        );
    }
    if view.omitted > 0 {
        let _ = write!(out, "; {} operations of the trial not drawn", view.omitted);
    }
    out.push_str("</figcaption>");
    if !failing.is_empty() {
        let _ = write!(
            out,
            "<p class=\"failing-subset\">In red, the smallest non-linearizable subset found ({} operations): no order of them consistent with real time gives every answer the spec\u{2019}s.</p><ol class=\"failing-ops\">",
            failing.len()
        );
        for o in failing {
            let _ = write!(
                out,
                "<li><code>{}</code> {} .. {}: <code>{}</code> → <code>{}</code></li>",
                escape(&o.client),
                at_unit(o.call_ns, unit, per),
                o.return_ns
                    .map_or_else(|| "(no answer)".to_owned(), |r| at_unit(r, unit, per)),
                escape(&o.request),
                escape(&o.answer)
            );
        }
        out.push_str("</ol>");
    }
    out.push_str("</figure>");
    out
}

fn json_pre(label: &str, v: &Value, out: &mut String) {
    let text = serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string());
    let _ = write!(
        out,
        "<p>{label}</p><pre>{}</pre>",
        escape(&truncate(&text, 20_000))
    );
}

fn scenario_html(r: &ScenarioResult, scenario: Option<&Scenario>, out: &mut String) {
    let verdict = r.verdict.as_str();
    let open = if r.verdict.is_green() { "" } else { " open" };
    let _ = write!(
        out,
        "<details class=\"scenario {verdict}\" id=\"{}\" data-verdict=\"{verdict}\"{open}><summary><span class=\"badge {verdict}\">{}</span> <code>{}</code> — {}</summary>",
        escape(&r.id),
        escape(verdict_label(r.verdict).trim()),
        escape(&r.id),
        escape(&r.summary)
    );
    let _ = write!(
        out,
        "<p class=\"meta\">{} trials; {} of {} with a parallel group overlapped; tags: {}</p>",
        r.trials_run,
        r.trials_overlapped,
        r.trials_with_groups,
        escape(&r.tags.join(", "))
    );
    if let Some(note) = &r.note {
        let _ = write!(out, "<p class=\"note\">{}</p>", escape(note));
    }
    if !r.clauses.is_empty() {
        let _ = write!(
            out,
            "<p class=\"clauses\">clauses of spec/SPEC.md: {}</p>",
            r.clauses
                .iter()
                .map(|c| {
                    let why = c
                        .why
                        .as_deref()
                        .filter(|_| c.standing == crate::run::event::ClauseStanding::NotJudged)
                        .map_or(String::new(), |w| format!(" ({})", escape(w)));
                    format!(
                        "<code class=\"clause\">{}</code> <span class=\"standing {}\">{}</span>{why}",
                        escape(&c.clause),
                        c.standing.as_str(),
                        crate::report::clauses::label(c.standing)
                    )
                })
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    for later in &r.later_failures {
        let _ = write!(
            out,
            "<p class=\"also\">also failed: {} breaks {}: {}</p>",
            escape(&later.step),
            escape(&later.clauses.join(", ")),
            escape(&later.message)
        );
    }
    if let Some(f) = &r.failure {
        let reason = r
            .reason
            .map_or_else(String::new, |why| format!(" (no verdict: {why})"));
        let _ = write!(
            out,
            "<div class=\"failure\"><p><strong>trial {}, {}</strong>{}: {}</p>",
            f.trial + 1,
            escape(&f.step),
            escape(&reason),
            escape(&f.message)
        );
        if let Some(e) = &f.expected {
            json_pre("expected", e, out);
        }
        if let Some(a) = &f.actual {
            json_pre("actual", a, out);
        }
        if let Some(d) = &f.detail {
            let _ = write!(out, "<pre class=\"detail\">{}</pre>", escape(d));
        }
        out.push_str("</div>");
    }
    if !r.timelines.is_empty() {
        out.push_str("<h4>race timeline</h4>");
        out.push_str(&timeline_svg(&r.timelines));
    }
    if let Some(view) = &r.history_view {
        let _ = write!(out, "<h4>history of trial {}</h4>", view.trial + 1);
        out.push_str(&history_svg(view));
    }
    if let Some(s) = scenario {
        out.push_str("<h4>steps</h4>");
        steps_html(&s.steps, out);
    }
    out.push_str("</details>");
}

const STYLE: &str = "body{font:14px/1.45 system-ui,sans-serif;margin:2em;color:#222;max-width:1200px}\
code,pre{font:12px ui-monospace,monospace}pre{background:#f6f6f6;padding:.5em;overflow:auto;max-height:30em}\
#verdict{font-size:1.6em;padding:.4em .6em;border-radius:4px;display:inline-block}\
#verdict.pass{background:#dff3df}#verdict.fail{background:#f9dcdc}#verdict.error{background:#fdf0c8}\
table.facts td{padding:.1em 1em .1em 0;vertical-align:top}\
.badge{font:bold 11px ui-monospace,monospace;padding:.1em .4em;border-radius:3px;background:#ddd}\
.badge.pass,.badge.expected_fail{background:#bfe5bf}.badge.fail,.badge.unexpected_pass{background:#f2b8b8}.badge.error{background:#f7df8f}\
details.scenario{border-bottom:1px solid #eee;padding:.3em 0}.meta{color:#666;margin:.2em 0}\
.failure{border-left:3px solid #c33;padding-left:.8em}\
svg.timeline{background:#fafafa;border:1px solid #eee}svg .bar{fill:#4a7bd0}svg .failed .bar{fill:#c33}\
svg .lane-bg{fill:transparent}svg .failed .lane-bg{fill:#fde8e8}svg text{font:9px sans-serif;fill:#555}\
.axis{color:#888;font-size:11px;margin:0}\
figure.history{margin:.4em 0}figure.history .scroll{overflow-x:auto}figure.history:has(.zoom:checked) svg{width:300%}\
.zoom-toggle{font-size:11px;color:#555}svg.history{background:#fcfcfc;border:1px solid #eee}\
svg.history .grid{stroke:#e4e4e4}svg.history .tick{font:10px sans-serif;fill:#666}\
svg.history .hlane-bg{fill:transparent}svg.history .hlane:nth-of-type(odd) .hlane-bg{fill:#f6f8fb}\
svg.history .client{font:10px ui-monospace,monospace;fill:#333}svg.history .op text{font:9px ui-monospace,monospace;fill:#333}\
svg.history .op rect{fill:#4a7bd0}svg.history .op.open rect{fill:#ccc;stroke:#888;stroke-dasharray:3 2}\
svg.history .op.failing rect{fill:#d33;stroke:#700}svg.history .op.failing text{fill:#900;font-weight:bold}\
.failing-subset{color:#900;margin:.3em 0}ol.failing-ops code{white-space:pre-wrap;word-break:break-all}ol.steps{margin:.2em 0}ol.steps code{white-space:pre-wrap;word-break:break-all}";

/// Renders a whole run as one HTML page.
pub fn render(ctx: &ReportContext, scenarios: &[Scenario], summary: &RunSummary) -> String {
    let by_id: BTreeMap<&str, &Scenario> = scenarios.iter().map(|s| (s.id.as_str(), s)).collect();
    let rec = record::of(ctx, summary);
    let run = rec.verdict;
    let (code, class) = (run.exit_code, run.outcome.class());
    let verdict = match (run.outcome, ctx.is_certification()) {
        (Outcome::NotJudged, _) => "NOT JUDGED",
        (Outcome::Interrupted, _) => "INTERRUPTED: NOT JUDGED",
        (Outcome::Pass, true) => "CONFORMS",
        (Outcome::Fail, true) => "DOES NOT CONFORM",
        (Outcome::Pass, false) => "GREEN",
        (Outcome::Fail, false) => "RED",
    };
    let title = if ctx.is_certification() {
        "reqkey certificate"
    } else {
        "reqkey run report (not a certification)"
    };
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{title}: {}</title><style>{STYLE}</style></head><body>",
        escape(&ctx.target)
    );
    let _ = write!(
        out,
        "<h1>{title}</h1><p id=\"verdict\" class=\"{class}\" data-verdict=\"{class}\" data-exit-code=\"{code}\">{verdict}</p><p id=\"closing-line\">{}</p>",
        escape(&rec.closing_line)
    );
    if !rec.closing_notes.is_empty() {
        out.push_str("<ul id=\"closing-notes\">");
        for note in &rec.closing_notes {
            let _ = write!(out, "<li>{}</li>", escape(note));
        }
        out.push_str("</ul>");
    }
    for w in &summary.warnings {
        let _ = write!(
            out,
            "<p class=\"warning\" data-code=\"{}\"><strong>warning[{}]</strong>: {} <strong>Fix:</strong> {}</p>",
            escape(w.code),
            escape(w.code),
            escape(&w.message),
            escape(&w.fix)
        );
    }
    if let Some(i) = &summary.indefinite {
        let _ = write!(
            out,
            "<p id=\"indefinite\" data-reason=\"{}\">no verdict ({}): {}</p>",
            escape(i.reason),
            escape(i.reason),
            escape(&i.message)
        );
    }
    out.push_str("<table class=\"facts\">");
    let mut fact = |k: &str, v: String| {
        let _ = write!(out, "<tr><td>{k}</td><td>{v}</td></tr>");
    };
    fact("target", format!("<code>{}</code>", escape(&ctx.target)));
    if ctx.target_defaulted {
        fact(
            "target defaulted",
            "yes: the built-in default, no --target was given".into(),
        );
    }
    if let Some(p) = &ctx.profile {
        fact(
            "profile",
            format!("<span id=\"profile\">{}</span>", escape(&p.describe())),
        );
        if let Some(crash) = &rec.crash {
            fact(
                "crash behaviour",
                format!("<span id=\"crash\">{}</span>", escape(crash)),
            );
        }
        if let Some(link) = &rec.link {
            fact(
                "database link",
                format!("<span id=\"link\">{}</span>", escape(link)),
            );
        }
    }
    if let Some(h) = &ctx.health {
        let field = |k: &str| h.get(k).and_then(serde_json::Value::as_str);
        let identity = match (field("name"), field("version"), field("protocol")) {
            (Some(n), Some(v), Some(p)) => format!(
                "<code>{}</code> {}, protocol <code>{}</code>",
                escape(n),
                escape(v),
                escape(p)
            ),
            _ => format!("<code>{}</code>", escape(&h.to_string())),
        };
        fact("identity (/health)", identity);
    }
    if let Some(s) = &ctx.suite {
        fact(
            "suite",
            format!(
                "<code>{}</code>{}, {} files, <code>{}</code>",
                escape(&s.source),
                s.version
                    .as_deref()
                    .map_or_else(String::new, |v| format!(", version {}", escape(v))),
                s.files,
                escape(&s.digest)
            ),
        );
    }
    if rec.fields.is_some() {
        fact("declared fields nothing judged", fields_html(&rec));
    }
    fact("reqkey", escape(&ctx.reqkey_version));
    fact("seed", format!("<code>{}</code>", summary.seed));
    if let Some(f) = &ctx.fuzz {
        let (line, reason) = f.line();
        let reason = reason
            .and_then(|r| r.lines().next())
            .map(|r| format!(": <code>{}</code>", escape(r)))
            .unwrap_or_default();
        fact(
            "fuzz",
            format!(
                "<span id=\"fuzz\" data-verdict=\"{}\">{}{reason}</span>",
                escape(f.verdict),
                escape(&line)
            ),
        );
        if let Some(scale) = &f.scale {
            // The probes at scale (issue 55): the patience, how far each
            // timing field was judged, capacity, final reads.
            for (what, line) in scale.lines() {
                fact(what, escape(&line));
            }
        }
    }
    fact("date", escape(&ctx.date));
    if !ctx.selection.is_empty() {
        fact("narrowed by", escape(&ctx.selection.join(" ")));
    }
    out.push_str("</table>");
    // What a reader looks for first: what broke, with links to it.
    let broken: Vec<&ScenarioResult> = summary
        .results
        .iter()
        .filter(|r| !r.verdict.is_green())
        .collect();
    if !broken.is_empty() {
        let _ = write!(
            out,
            "<h2 id=\"failures\">Not green: {} scenarios</h2><ul class=\"failures-index\">",
            broken.len()
        );
        for r in &broken {
            let failed = crate::report::clauses::of_scenario(r).failed;
            let clauses = if failed.is_empty() {
                String::new()
            } else {
                format!(
                    " — breaks {}",
                    failed
                        .iter()
                        .map(|c| format!("<code class=\"clause\">{}</code>", escape(c)))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            let _ = write!(
                out,
                "<li><a href=\"#{}\">{}</a> <span class=\"badge {}\">{}</span>{clauses}</li>",
                escape(&r.id),
                escape(&r.id),
                r.verdict.as_str(),
                escape(verdict_label(r.verdict).trim())
            );
        }
        out.push_str("</ul>");
        for r in &broken {
            scenario_html(r, by_id.get(r.id.as_str()).copied(), &mut out);
        }
    }
    clauses_html(&rec, &mut out);
    violations_html(&rec, &mut out);
    for level in Level::ALL {
        let results: Vec<&ScenarioResult> = summary
            .results
            .iter()
            .filter(|r| r.level == level)
            .collect();
        if results.is_empty() {
            continue;
        }
        let green: Vec<&&ScenarioResult> =
            results.iter().filter(|r| r.verdict.is_green()).collect();
        let _ = write!(
            out,
            "<h2 id=\"level-{level}\">{level} scenarios: {} of {} green</h2>",
            green.len(),
            results.len()
        );
        for r in green {
            scenario_html(r, by_id.get(r.id.as_str()).copied(), &mut out);
        }
    }
    if !ctx.not_applicable.is_empty() {
        let _ = write!(
            out,
            "<h2 id=\"not-applicable\">Not applicable to this profile: {} scenarios (not run)</h2><table class=\"facts\"><tr><th>scenario</th><th>requires</th></tr>",
            ctx.not_applicable.len()
        );
        for n in &ctx.not_applicable {
            let _ = write!(
                out,
                "<tr><td><code>{}</code></td><td>{}</td></tr>",
                escape(&n.id),
                escape(&n.requires)
            );
        }
        out.push_str("</table>");
    }
    out.push_str("</body></html>\n");
    out
}

/// The declared-fields fact: what nothing judged, what the fuzz pass
/// judged alone or only part way.
fn fields_html(rec: &RunRecord<'_>) -> String {
    let list = |names: &[String]| {
        names
            .iter()
            .map(|n| format!("<code>{}</code>", escape(n)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let unjudged = rec.unjudged_fields();
    let part = rec.part_judged_fields();
    let mut out = format!(
        "<span id=\"unjudged-fields\" data-count=\"{}\">",
        unjudged.len()
    );
    if unjudged.is_empty() && part.is_empty() {
        out.push_str(
            "none: every declared value is judged by a scenario that applied or by the fuzz pass",
        );
    } else if unjudged.is_empty() {
        // Judged part way is not judged at the declared value (issue 55).
        out.push_str("none entirely, but not each at its declared value");
    } else {
        let _ = write!(
            out,
            "{}: no scenario that applied and no program of the fuzz pass can fail on them",
            list(&unjudged)
        );
    }
    let by_fuzz = rec.fuzz_judged_fields();
    if !by_fuzz.is_empty() {
        let _ = write!(out, "; judged by the fuzz pass alone: {}", list(&by_fuzz));
    }
    if !part.is_empty() {
        let _ = write!(
            out,
            "; judged by the fuzz pass only part way: {}",
            part.iter()
                .map(|(f, ms)| format!("<code>{}</code> (up to {ms} ms)", escape(f)))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    out.push_str("</span>");
    out
}

/// The run by clause (the run's record): one row per clause, FAIL on a
/// failed check or a violation of the fuzz pass.
fn clauses_html(rec: &RunRecord<'_>, out: &mut String) {
    if rec.clauses.is_empty() && rec.unclaused.is_empty() {
        return;
    }
    let _ = write!(
        out,
        "<h2 id=\"clauses-heading\">Clauses: {} FAIL, {} pass, {} not judged</h2>",
        rec.clauses_with(crate::run::event::ClauseStanding::Fail)
            .len(),
        rec.clauses_with(crate::run::event::ClauseStanding::Pass)
            .len(),
        rec.clauses_with(crate::run::event::ClauseStanding::NotJudged)
            .len()
    );
    for why in &rec.unclaused {
        let _ = write!(
            out,
            "<p class=\"unclaused\">Also red beyond its clauses: {}.</p>",
            escape(why)
        );
    }
    out.push_str("<table id=\"clauses\" class=\"facts\"><tr><th>clause</th><th>verdict</th><th>evidence</th></tr>");
    for row in &rec.clauses {
        let standing = row.standing.as_str();
        let mut evidence: Vec<String> = row
            .findings
            .iter()
            .map(|f| {
                format!(
                    "<code>{}</code>: {} (in {})",
                    escape(f.step),
                    escape(f.message),
                    f.scenarios
                        .iter()
                        .map(|(id, _)| format!("<a href=\"#{0}\">{0}</a>", escape(id)))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })
            .collect();
        evidence.extend(row.fuzz.iter().map(|v| {
            format!(
                "the fuzz pass: {} ({})",
                escape(&v.message),
                escape(&record::reproduction(v, str::to_owned))
            )
        }));
        if evidence.is_empty() {
            evidence.push(match row.standing {
                crate::run::event::ClauseStanding::Pass => {
                    format!("{} scenario(s) passed a check of it", row.passed_in.len())
                }
                _ => row.not_judged.first().map_or_else(
                    || "no check of it reached a verdict".to_owned(),
                    |(id, why)| format!("{}: {}", escape(id), escape(why)),
                ),
            });
        }
        let _ = write!(
            out,
            "<tr class=\"clause {standing}\" data-clause=\"{}\" data-standing=\"{standing}\"><td><code>{}</code></td><td><span class=\"badge {standing}\">{}</span></td><td>{}</td></tr>",
            escape(row.clause),
            escape(row.clause),
            crate::report::clauses::label(row.standing),
            evidence.join("; ")
        );
    }
    out.push_str("</table>");
}

/// Every violation the fuzz pass proved, with its reproduction.
fn violations_html(rec: &RunRecord<'_>, out: &mut String) {
    if rec.violations.is_empty() {
        return;
    }
    let _ = write!(
        out,
        "<h2 id=\"fuzz-violations\">Fuzz violations: {}</h2>",
        rec.violations.len()
    );
    for v in rec.violations {
        let with = record::blamed_with(v);
        let _ = write!(
            out,
            "<div class=\"violation failure\" data-clause=\"{}\" data-reproduced=\"{}\"><p><strong>breaks <code>{}</code></strong>{}: {}</p><p>program: <code>{}</code></p><p class=\"reproduced\">{}</p><pre>{}</pre></div>",
            escape(&v.clause),
            v.reproduced,
            escape(&v.clause),
            if with.is_empty() {
                String::new()
            } else {
                format!(
                    " (blamed with {}: no single clause's relaxation explains the answers)",
                    escape(&with.join(", "))
                )
            },
            escape(&v.message),
            escape(&v.program),
            escape(&record::reproduction(v, str::to_owned)),
            escape(&truncate(&v.scenario_yaml, 20_000))
        );
    }
}

/// Writes the HTML page at the end of the run.
pub struct HtmlReporter<W: Write + Send> {
    ctx: ReportContext,
    scenarios: Vec<Scenario>,
    out: Rendered<W>,
}

impl<W: Write + Send> std::fmt::Debug for HtmlReporter<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HtmlReporter").finish_non_exhaustive()
    }
}

impl<W: Write + Send> HtmlReporter<W> {
    /// `scenarios` are the ones the run was given (for their steps).
    pub fn new(ctx: ReportContext, scenarios: Vec<Scenario>, out: W) -> Self {
        Self {
            ctx,
            scenarios,
            out: Rendered::new(out),
        }
    }
}

impl<W: Write + Send> Reporter for HtmlReporter<W> {
    fn on_event(&mut self, event: &Event) {
        let (ctx, scenarios) = (&self.ctx, &self.scenarios);
        self.out
            .on_event(event, |summary| render(ctx, scenarios, summary));
    }

    fn finish(&mut self) -> std::io::Result<()> {
        self.out.finish()
    }
}
