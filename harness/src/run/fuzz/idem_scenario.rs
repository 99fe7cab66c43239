//! A failing idem fuzz program written as a scenario (`reqkey fuzz`'s
//! output on an idem target): the requests with the keys, callers and
//! byte-exact bodies the program sent (keys and callers as fresh `${...}`
//! values), while the program is sequential each step's answer as the
//! model allows it (a run binds its `order`, a replay must show it), pauses
//! as `sleep_ms`, concurrent steps as `parallel` groups, and reads of
//! `/.reqkey/effects` (`always: true`) holding each entry to the count the
//! model allows: exact while the program is sequential, at most the runs
//! the declared profile could allow once requests overlapped.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use reqkey_model::idem_batch::judge_one;
use reqkey_model::idem_model::{clause, handler_of, EffectKey, IdemModel, Outcome, Window};
use reqkey_model::idem_profile::{
    Concurrent, Errors, Fingerprint, IdemProfile, KeySyntax, ScopeBy,
};
use serde_json::{json, Value};

use crate::run::fuzz::idem_program::{pause_ms, requests_of, Req, Sent, Step};
use crate::run::fuzz::scenario::yaml_safe;

/// Trials of a scenario whose generated program sent requests together
/// (a battery's program repeats as often as the battery sent its kind).
pub const RACE_REPEAT: u32 = 5;

/// The tag requests are resolved with, replaced by fresh values in the file.
const TAG: &str = "TAG";

/// Keys and callers of the placeholder tag as scenario text: the tag's
/// run in every key (`run/fuzz/key_forms.rs`) and in every caller becomes
/// the fresh value `${c}`; the rest of a key is written as it was sent
/// (a `$` of it as `$$`, the scenario format's literal `$`).
fn templatize(s: &str) -> String {
    s.replace('$', "$$").replace(TAG, "${c}")
}

/// What the model's states know of the program so far.
enum Known {
    /// Sequential so far: the model's one state.
    Exact(Box<IdemModel>),
    /// Requests overlapped: for each effect entry, the most runs the
    /// profile could allow.
    Bound(BTreeMap<EffectKey, u64>),
}

fn text_field(s: &str) -> String {
    yaml_safe(&Value::String(templatize(s)))
}

/// One request as an `http` step's map (flow YAML).
fn http_map(s: &Sent, delay_ms: u64) -> String {
    let r = &s.request;
    let name = s.req.key_header_name();
    let mut headers = vec![format!("[X-Reqkey-Caller, {}]", text_field(&r.caller))];
    if let Some(k) = &r.key {
        headers.push(format!(
            "[{name}, {}]",
            text_field(&String::from_utf8_lossy(k))
        ));
    }
    // A name in another case than the library's goes out byte for byte.
    let wire = if r.key.is_some() && name != name.to_ascii_lowercase() {
        ", wire: exact"
    } else {
        ""
    };
    headers.push("[Content-Type, application/json]".into());
    let delay = if delay_ms > 0 {
        format!(", delay_ms: {delay_ms}")
    } else {
        String::new()
    };
    format!(
        "{{method: {}, path: {}, headers: [{}], body: {}{delay}{wire}}}",
        r.method,
        r.path,
        headers.join(", "),
        text_field(&String::from_utf8_lossy(&r.body))
    )
}

/// The `requires:` of the profile the expectations follow.
fn requires(p: &IdemProfile) -> String {
    let mut f = vec![
        format!("keyRequired: {}", p.key_required),
        format!(
            "keySyntax: {}",
            match p.key_syntax {
                KeySyntax::SfString => "sf-string",
                KeySyntax::Token => "token",
                KeySyntax::Any => "any",
            }
        ),
        format!("invalidKeyRefused: {}", p.invalid_key_status.is_some()),
        format!(
            "fingerprint: {}",
            match p.fingerprint {
                Fingerprint::None => "none",
                Fingerprint::Bytes => "bytes",
                Fingerprint::Json => "json",
            }
        ),
        format!(
            "concurrent: {}",
            match p.concurrent {
                Concurrent::Conflict => "conflict",
                Concurrent::Wait => "wait",
            }
        ),
        format!(
            "errors: {}",
            match p.errors {
                Errors::Stored => "stored",
                Errors::Released => "released",
            }
        ),
        format!("scopedByCaller: {}", p.scoped_by(ScopeBy::Caller)),
        format!("scopedByMethod: {}", p.scoped_by(ScopeBy::Method)),
        format!("scopedByPath: {}", p.scoped_by(ScopeBy::Path)),
        format!("replayHeader: {}", p.replay_header.is_some()),
    ];
    if let Some(s) = p.invalid_key_status {
        f.push(format!("invalidKeyStatus: {s}"));
    }
    if let Some(s) = p.mismatch_status {
        f.push(format!("mismatchStatus: {s}"));
    }
    if let Some(s) = p.concurrent_status {
        f.push(format!("concurrentStatus: {s}"));
    }
    if let Some(e) = p.expiry_ms {
        f.push(format!("expiryMsAtMost: {e}, expiryMsAtLeast: {e}"));
    }
    format!("{{idem: {{{}}}}}", f.join(", "))
}

/// The most runs `group` may add to each effect entry (every request in it
/// released together): one per scoped key, or every copy of a failing
/// request under `errors: released` whose handler is quicker than the
/// arrival bound (a duplicate may then arrive after the release). A copy
/// sent later (past a declared `lockMs`) adds none: the model lets no
/// duplicate run while its first runs (`[[idem.lock.held]]`), and one
/// arriving after it completed is a replay.
fn add_bounds(bounds: &mut BTreeMap<EffectKey, u64>, group: &[Sent], p: &IdemProfile) {
    let model = IdemModel::new(p);
    let mut per_key: BTreeMap<String, Vec<&Sent>> = BTreeMap::new();
    for s in group {
        let key = format!("{:?}", model.read_key(&s.request));
        per_key.entry(key).or_default().push(s);
    }
    for (key, sent) in per_key {
        let keyless = key.starts_with("Missing") || key.starts_with("Unjudged");
        for (i, s) in sent.iter().enumerate() {
            let h = handler_of(&s.request.method, &s.request.path, &s.request.body);
            let rerun = h.is_some_and(|h| {
                h.fails()
                    && p.errors == Errors::Released
                    && h.sleep_ms <= crate::run::fuzz::idem_program::ARRIVAL_SLACK_MS
            });
            if i == 0 || keyless || rerun {
                *bounds.entry(s.request.effect_key()).or_default() += 1;
            }
        }
    }
}

/// How long a group lasts at least on the program's clock: its slowest
/// handler after its latest delay.
fn group_ms(group: &[Sent]) -> u64 {
    let longest = group
        .iter()
        .filter_map(|s| handler_of(&s.request.method, &s.request.path, &s.request.body))
        .map(|h| h.sleep_ms)
        .max()
        .unwrap_or(0);
    longest + group.iter().map(|s| s.delay_ms).max().unwrap_or(0) + 1
}

/// Copies of one request sent together, from a state the model knows
/// exactly, whose first copy's outcome leaves no choice: a replay of a
/// completed record or a refusal (every copy then gets the same answer
/// and nothing changes), each copy judged as a request alone. Writes the
/// group and returns true; false (nothing written) where copies may run.
fn copies_judged(
    steps: &mut String,
    m: &mut IdemModel,
    group: &[Sent],
    now: u64,
    profile: &IdemProfile,
    order_vars: &BTreeMap<u64, usize>,
    judged: &mut Vec<&'static str>,
) -> bool {
    let Some(first) = group.first() else {
        return false;
    };
    if group.iter().any(|s| s.request != first.request) {
        return false;
    }
    let sleep = handler_of(
        &first.request.method,
        &first.request.path,
        &first.request.body,
    )
    .map_or(0, |h| h.sleep_ms);
    let w = Window::new(now, now + group_ms(group) + sleep);
    let outcomes = m.outcomes(&first.request, w);
    let (Some(outcome), 1) = (outcomes.first(), outcomes.len()) else {
        return false;
    };
    if !matches!(outcome, Outcome::Replay(_) | Outcome::Refused { .. }) {
        return false;
    }
    let keyed = first.request.key.is_some();
    let (expect, mut judges) = expectation(outcome, profile, order_vars, keyed);
    judges.extend(equivalence_judged(m, outcome, &first.request));
    let _ = writeln!(steps, "  - parallel:");
    for s in group {
        let _ = writeln!(steps, "      - http: {}", http_map(s, s.delay_ms));
        let _ = writeln!(steps, "        expect: {expect}");
        if !judges.is_empty() {
            let _ = writeln!(steps, "        judges: [{}]", judges.join(", "));
        }
    }
    judged.extend(judges);
    true
}

/// Copies of one request sent together after the model knows its key's
/// record expired (past `expiryMs` and its margin): one of them must run,
/// so its entry counts at least one more than before
/// (`[[idem.expiry.honoured]]`). `None` elsewhere.
fn after_expiry(m: &IdemModel, group: &[Sent], now: u64) -> Option<(EffectKey, u64)> {
    let first = group.first()?;
    if group.iter().any(|s| s.request != first.request) {
        return None;
    }
    let reqkey_model::idem_model::KeyRead::Key(scoped) = m.read_key(&first.request) else {
        return None;
    };
    m.record(&scoped)?;
    if m.freed_by_error(&scoped) {
        return None;
    }
    let w = Window::new(now, now + 1);
    let outcomes = m.outcomes(&first.request, w);
    let (Some(Outcome::Run(_)), 1) = (outcomes.first(), outcomes.len()) else {
        return None;
    };
    let entry = first.request.effect_key();
    let before = m.effects().get(&entry).copied().map_or(0, u64::from);
    Some((entry, before + 1))
}

/// A read of `/.reqkey/effects` holding `entry` to at least `n` runs.
fn effects_at_least(steps: &mut String, k: &EffectKey, n: u64) {
    let key = match &k.key {
        Some(key) => text_field(key),
        None => "null".into(),
    };
    let _ = writeln!(
        steps,
        "  - http: {{method: GET, path: /.reqkey/effects}}\n    expect: {{status: 200, json: {{effects: {{$contains: {{method: {}, path: {}, caller: {}, key: {key}, bodySha256: {}, count: {{$at_least: {n}}}}}}}}}}}\n    judges: [{}]",
        k.method,
        k.path,
        text_field(&k.caller),
        k.body_sha256,
        clause::EXPIRY
    );
}

/// The program as a scenario (see the module docs).
pub fn scenario_yaml(
    program: &[Step],
    profile: &IdemProfile,
    target_name: &str,
    seed: u64,
    reason: &str,
    race_repeat: u32,
) -> String {
    let mut steps = String::new();
    let mut judged: Vec<&'static str> = Vec::new();
    let mut known = Known::Exact(Box::new(IdemModel::new(profile)));
    let mut sent: Vec<Req> = Vec::new();
    let mut order_vars: BTreeMap<u64, usize> = BTreeMap::new();
    let mut now = 0u64;
    let mut fresh = 1_000_000u64;
    // Requests sent per effect entry: a bound as large can never fail.
    let mut sent_to: BTreeMap<EffectKey, u64> = BTreeMap::new();
    for step in program {
        match step {
            Step::Pause(p) => {
                let ms = pause_ms(*p, profile);
                now += ms;
                let _ = writeln!(steps, "  - sleep_ms: {ms}");
                continue;
            }
            Step::Effects => {
                effects_steps(&mut steps, &known, &sent_to, &mut judged);
                continue;
            }
            _ => {}
        }
        let group = requests_of(step, &sent, profile, TAG);
        sent.extend(group.iter().map(|s| s.req.clone()));
        for s in &group {
            *sent_to.entry(s.request.effect_key()).or_default() += 1;
        }
        if group.len() > 1 {
            if let Known::Exact(m) = &mut known {
                if copies_judged(
                    &mut steps,
                    m,
                    &group,
                    now,
                    profile,
                    &order_vars,
                    &mut judged,
                ) {
                    now += group_ms(&group);
                    continue;
                }
            }
            let lower = match &known {
                Known::Exact(m) => after_expiry(m, &group, now),
                Known::Bound(_) => None,
            };
            let mut bounds = match &known {
                Known::Exact(m) => m
                    .effects()
                    .iter()
                    .map(|(k, n)| (k.clone(), u64::from(*n)))
                    .collect(),
                Known::Bound(b) => b.clone(),
            };
            add_bounds(&mut bounds, &group, profile);
            known = Known::Bound(bounds);
            let _ = writeln!(steps, "  - parallel:");
            for s in &group {
                let _ = writeln!(steps, "      - http: {}", http_map(s, s.delay_ms));
                let _ = writeln!(steps, "        expect: any");
            }
            if let Some((entry, at_least)) = lower {
                effects_at_least(&mut steps, &entry, at_least);
                judged.push(clause::EXPIRY);
            }
            now += group_ms(&group);
            continue;
        }
        let Some(s) = group.first() else { continue };
        let line = http_map(s, 0);
        let sleep = handler_of(&s.request.method, &s.request.path, &s.request.body)
            .map_or(0, |h| h.sleep_ms);
        let w = Window::new(now, now + sleep + 1);
        now += sleep + 2;
        match &mut known {
            Known::Bound(b) => {
                *b.entry(s.request.effect_key()).or_default() += 1;
                let _ = writeln!(steps, "  - http: {line}\n    expect: any");
            }
            Known::Exact(m) => {
                let outcomes = m.outcomes(&s.request, w);
                let (Some(outcome), true) = (outcomes.first().cloned(), outcomes.len() == 1) else {
                    // Expiry left open: from here on, bounds only.
                    let mut b: BTreeMap<EffectKey, u64> = m
                        .effects()
                        .iter()
                        .map(|(k, n)| (k.clone(), u64::from(*n)))
                        .collect();
                    *b.entry(s.request.effect_key()).or_default() += 1;
                    known = Known::Bound(b);
                    let _ = writeln!(steps, "  - http: {line}\n    expect: any");
                    continue;
                };
                fresh += 1;
                let Some(answer) = m.conforming(&s.request, w, fresh) else {
                    let leaked = match &outcome {
                        Outcome::RefusedNoLeak(k) => templatize(&k.caller),
                        _ => String::new(),
                    };
                    let _ = writeln!(
                        steps,
                        "  - http: {line}\n    expect: {{status: {{$one_of: [400, 401, 403, 404, 409, 422, 423, 429, 500, 503]}}}}\n    expect_not_echoed: [{}]\n    judges: [{}]",
                        yaml_safe(&json!(leaked)),
                        clause::NO_LEAK
                    );
                    judged.push(clause::NO_LEAK);
                    continue;
                };
                let keyed = s.request.key.is_some();
                let (expect, mut judges) = expectation(&outcome, profile, &order_vars, keyed);
                judges.extend(equivalence_judged(m, &outcome, &s.request));
                judges.extend(released_judged(m, &outcome, &s.request));
                let _ = writeln!(steps, "  - http: {line}\n    expect: {expect}");
                if matches!(outcome, Outcome::Run(_)) {
                    let n = order_vars.len();
                    order_vars.insert(fresh, n);
                    let _ = writeln!(steps, "    bind: {{o{n}: json.order}}");
                }
                if !judges.is_empty() {
                    let _ = writeln!(steps, "    judges: [{}]", judges.join(", "));
                    judged.extend(judges);
                }
                // A replay or a refusal runs nothing and changes no record:
                // the state stays the one the model knows.
                if !matches!(outcome, Outcome::Run(_)) {
                    continue;
                }
                match judge_one(m, &s.request, &answer, w) {
                    Ok(next) if next.len() == 1 => {
                        if let Some(n) = next.into_iter().next() {
                            **m = n;
                        }
                    }
                    _ => {
                        let b = m
                            .effects()
                            .iter()
                            .map(|(k, n)| (k.clone(), u64::from(*n)))
                            .collect();
                        known = Known::Bound(b);
                    }
                }
            }
        }
    }
    effects_steps(&mut steps, &known, &sent_to, &mut judged);
    judged.sort();
    judged.dedup();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Found by `reqkey fuzz --target {target_name} --seed {seed}`, shrunk to {} steps.",
        program.len()
    );
    for line in reason.lines().take(1) {
        let _ = writeln!(out, "# {line}");
    }
    let _ = writeln!(out, "id: idem.fuzz.seed-{seed}");
    let _ = writeln!(out, "level: idem");
    let races = program
        .iter()
        .any(|s| matches!(s, Step::Burst { .. } | Step::Batch(_) | Step::PastLock(_)));
    if races {
        // A race the program won once: run it a few times.
        let _ = writeln!(out, "tags: [idem, fuzz, race]");
        let _ = writeln!(out, "repeat: {race_repeat}");
    } else {
        let _ = writeln!(out, "tags: [idem, fuzz]");
    }
    let _ = writeln!(out, "requires: {}", requires(profile));
    let _ = writeln!(out, "checks: [{}]", judged.join(", "));
    let _ = writeln!(
        out,
        "summary: A program found by reqkey fuzz (seed {seed}); every answer must be one the idem model allows under the declared profile."
    );
    let _ = writeln!(out, "steps:");
    out.push_str(&steps);
    out
}

/// `[[idem.replay.errors]]` where a run is expected because the key's
/// last run answered an error that freed it (`errors: released`): that
/// step judges the release too (a layer that kept the error answer
/// replays it there).
fn released_judged(
    m: &IdemModel,
    outcome: &Outcome,
    req: &reqkey_model::idem_model::IdemRequest,
) -> Option<&'static str> {
    if !matches!(outcome, Outcome::Run(_)) {
        return None;
    }
    let reqkey_model::idem_model::KeyRead::Key(scoped) = m.read_key(req) else {
        return None;
    };
    m.freed_by_error(&scoped).then_some(clause::REPLAY_ERRORS)
}

/// `[[idem.fingerprint.equivalence]]` where the declared fingerprint
/// alone decides `outcome`: a replay of a record whose payload `req`'s
/// equals only as that fingerprint compares it (the same JSON in other
/// bytes under `json`, any other payload under `none`), or a mismatch
/// refusal of a payload the other fingerprint calls equal (the same JSON
/// in other bytes under `bytes`). That step then judges the comparison
/// too.
fn equivalence_judged(
    m: &IdemModel,
    outcome: &Outcome,
    req: &reqkey_model::idem_model::IdemRequest,
) -> Option<&'static str> {
    let replay = match outcome {
        Outcome::Replay(_) => true,
        Outcome::Refused { clause, .. } if *clause == clause::MISMATCH => false,
        _ => return None,
    };
    let reqkey_model::idem_model::KeyRead::Key(scoped) = m.read_key(req) else {
        return None;
    };
    let record = m.record(&scoped)?;
    let alt = reqkey_model::idem_model::alt_payload_print(m.profile().fingerprint, &req.body);
    ((alt != record.alt_print) == replay).then_some(clause::EQUIVALENCE)
}

/// A sequential step's `expect` and the clauses it judges.
fn expectation(
    outcome: &Outcome,
    p: &IdemProfile,
    order_vars: &BTreeMap<u64, usize>,
    keyed: bool,
) -> (String, Vec<&'static str>) {
    let header = p.replay_header.as_deref();
    match outcome {
        Outcome::Run(h) => {
            let mut e = format!("{{status: {}", h.status());
            if let Some(name) = header {
                let _ = write!(e, ", headers: {{{name}: $absent}}");
            }
            e.push('}');
            // A run: the key read as declared (or, keyless, let through).
            let mut judges = vec![if keyed {
                "idem.key.syntax"
            } else {
                clause::MISSING_OPTIONAL
            }];
            if header.is_some() {
                judges.push(clause::REPLAY_HEADER);
            }
            (e, judges)
        }
        Outcome::Replay(k) => {
            let var = k
                .order
                .and_then(|o| order_vars.get(&o))
                .map(|n| format!("$o{n}"));
            let mut e = format!("{{status: {}", k.status);
            let mut headers = Vec::new();
            if let (Some(v), Some(_)) = (&var, &k.order_header) {
                headers.push(format!("x-reqkey-order: '${{o{}}}'", &v[2..]));
            }
            if let Some(name) = header {
                headers.push(format!("{name}: $any"));
            }
            if !headers.is_empty() {
                let _ = write!(e, ", headers: {{{}}}", headers.join(", "));
            }
            if let Some(v) = &var {
                let _ = write!(e, ", json: {{order: {v}}}");
            }
            e.push('}');
            let mut judges = vec![if k.status >= 400 {
                clause::REPLAY_ERRORS
            } else {
                clause::REPLAY
            }];
            if header.is_some() {
                judges.push(clause::REPLAY_HEADER);
            }
            (e, judges)
        }
        Outcome::Refused { status, clause } => (
            format!("{{status: {status}, json: $any}}"),
            vec![*clause, clause::ERROR_BODY],
        ),
        Outcome::RefusedNoLeak(_) => ("any".into(), Vec::new()),
    }
}

/// Reads of `/.reqkey/effects`, one per entry the program made, each
/// holding it to what the model allows: while the program is sequential
/// its exact count (the model knows each request ran or not); once
/// requests overlapped, at most the runs the profile could allow, where an
/// absent entry is a count of 0 (`$none` of an entry counting more). A
/// bound no smaller than the requests sent to the entry cannot fail and is
/// not written.
fn effects_steps(
    steps: &mut String,
    known: &Known,
    sent_to: &BTreeMap<EffectKey, u64>,
    judged: &mut Vec<&'static str>,
) {
    let entries: Vec<(EffectKey, String, bool)> = match known {
        Known::Exact(m) => m
            .effects()
            .iter()
            .map(|(k, n)| (k.clone(), n.to_string(), true))
            .collect(),
        Known::Bound(b) => b
            .iter()
            .filter(|(k, n)| **n < sent_to.get(*k).copied().unwrap_or(0))
            .map(|(k, n)| (k.clone(), format!("{{$at_least: {}}}", n + 1), false))
            .collect(),
    };
    for (k, count, exact) in entries {
        let key = match &k.key {
            Some(key) => text_field(key),
            None => "null".into(),
        };
        let op = if exact { "$contains" } else { "$none" };
        let _ = writeln!(
            steps,
            "  - http: {{method: GET, path: /.reqkey/effects}}\n    always: true\n    expect: {{status: 200, json: {{effects: {{{op}: {{method: {}, path: {}, caller: {}, key: {key}, bodySha256: {}, count: {count}}}}}}}}}\n    judges: [{}]",
            k.method,
            k.path,
            text_field(&k.caller),
            k.body_sha256,
            clause::AT_MOST_ONCE
        );
        judged.push(clause::AT_MOST_ONCE);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::run::fuzz::idem_battery::{battery, ProbeKind};

    fn probe_yaml(kind: ProbeKind, profile: &IdemProfile) -> String {
        let probe = battery(profile)
            .into_iter()
            .find(|p| p.kind == kind)
            .expect("the battery has the probe");
        scenario_yaml(&probe.program, profile, "t", 1, "r", 5)
    }

    #[test]
    fn a_burst_past_expiry_must_show_one_more_run() {
        let mut p = IdemProfile::draft_default();
        p.expiry_ms = Some(2_000);
        let yaml = probe_yaml(ProbeKind::Expiry, &p);
        assert!(yaml.contains("count: {$at_least: 2}"), "{yaml}");
        assert!(yaml.contains("judges: [idem.expiry.honoured]"), "{yaml}");
    }

    /// The refused-body probe's reproduction: under `stored` the retry of
    /// the handler's 422 is held to its order and its `X-Reqkey-Order`
    /// (every answer of a handler carries it, SPEC 10), judging
    /// `idem.replay.errors`; under `released` the retry is a run, and
    /// judges the release.
    #[test]
    fn a_refused_body_retried_is_held_to_the_errors_rule_and_the_order_header() {
        let p = IdemProfile::draft_default();
        let yaml = probe_yaml(ProbeKind::HandlerRefusal, &p);
        assert!(
            yaml.contains("expect: {status: 422, headers: {x-reqkey-order: '${o0}'"),
            "{yaml}"
        );
        assert!(yaml.contains("judges: [idem.replay.errors"), "{yaml}");
        let mut released = p.clone();
        released.errors = Errors::Released;
        let yaml = probe_yaml(ProbeKind::HandlerRefusal, &released);
        assert!(yaml.contains("bind: {o1: json.order}"), "{yaml}");
        assert!(
            yaml.contains("judges: [idem.key.syntax, idem.replay.header, idem.replay.errors]"),
            "{yaml}"
        );
    }

    #[test]
    fn a_duplicate_past_the_lock_is_held_to_one_run_and_absence_is_zero() {
        let mut p = IdemProfile::draft_default();
        p.lock_ms = Some(500);
        let yaml = probe_yaml(ProbeKind::PastLock, &p);
        assert!(!yaml.contains("$at_most"), "{yaml}");
        assert!(yaml.contains("$none: {"), "{yaml}");
        assert!(yaml.contains("count: {$at_least: 2}"), "{yaml}");
    }
}
