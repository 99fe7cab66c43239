//! Judging answers of an idem app against [`IdemModel`]: one request alone
//! ([`judge_one`]) or requests whose windows overlap ([`judge`]), by every
//! order real time allows (linearizability against the model).
//!
//! Requests with different scoped keys never meet in a conforming app, so
//! each scoped key is explained on its own. For one key: the answers with
//! a fresh `order` are its runs; they happen one after another (each
//! decided when its request arrived, completed at least its handler's
//! `sleepMs` later, the next one only once the key was freed: an error
//! answer released under `errors: released`, a completed record expired),
//! in some order. Every other answer is placed in a phase of the key's life
//! that explains it: a refusal while a run is in flight, a replay of a
//! completed run (under `concurrent: wait`, of the run it arrived during),
//! another payload refused, another caller refused. Each placement is a set
//! of difference constraints over the events' times (each inside its
//! request's window); Bellman-Ford decides whether some times satisfy them
//! all. Some order and placement must explain every answer.
//!
//! Every check is a [`Rule`] tagged with its clause, and every judge takes
//! a [`Relax`]: the rules it may waive. [`judge`] is the strict model;
//! where no order explains the answers it blames by counterfactual
//! (`idem_blame.rs`): the clause whose rules, waived alone, let some order
//! explain them (else the smallest set that does).

use std::collections::BTreeMap;

use crate::idem_blame::{blame, Relax, Rule, Rules, Waiver, MAX_BLAMED, MAX_WAIVED_RULES};
use crate::idem_model::{
    alt_payload_print, caller_of, clause, echo_of, order_of, releases, shown_answer, waits,
    Handler, IdemAnswer, IdemModel, IdemRequest, Judged, Kept, KeyRead, Outcome, Record, Scoped,
    Violation, Window, EXPIRY_MARGIN_MS, MAX_EXPLANATIONS,
};
use crate::idem_profile::{Concurrent, Fingerprint};

/// One request of a batch with its answer.
pub type Item = (IdemRequest, IdemAnswer, Window);

/// Judges `answer` to `req`, sent alone in `w`, from `state`: the states
/// it may leave (two where expiry was open), or the violation.
pub fn judge_one(
    state: &IdemModel,
    req: &IdemRequest,
    answer: &IdemAnswer,
    w: Window,
) -> Result<Vec<IdemModel>, Judged> {
    judge(
        std::slice::from_ref(state),
        &[(req.clone(), answer.clone(), w)],
    )
}

/// Judges requests that overlapped from any of `states`: the states that
/// explain every answer, or the violation, its clauses blamed by
/// counterfactual, or why there is no verdict.
pub fn judge(states: &[IdemModel], items: &[Item]) -> Result<Vec<IdemModel>, Judged> {
    match judge_relaxed(states, items, Relax::STRICT) {
        Ok(out) => Ok(out.into_iter().map(|(s, _)| s).collect()),
        Err(Judged::Violation(strict)) => Err(blamed(states, items, &strict)),
        Err(e) => Err(e),
    }
}

/// Judges `items` from `states` with `relax`'s rules waived: each state
/// that explains every answer, with the waivers its explanation took (none
/// when strict). Relaxed, the first explanation found is enough.
pub fn judge_relaxed(
    states: &[IdemModel],
    items: &[Item],
    relax: Relax,
) -> Result<Vec<(IdemModel, Vec<Waiver>)>, Judged> {
    let mut out: Vec<(IdemModel, Vec<Waiver>)> = Vec::new();
    let mut error: Option<Judged> = None;
    for state in states {
        match explain(state, items, relax) {
            Ok(next) => {
                for n in next {
                    if !out.iter().any(|(m, _)| *m == n.0) {
                        out.push(n);
                    }
                }
                if !relax.is_strict() {
                    break;
                }
            }
            Err(e) => {
                if error.is_none() || matches!(e, Judged::NoVerdict(_)) {
                    error = Some(e);
                }
            }
        }
    }
    if out.is_empty() {
        Err(error.unwrap_or_else(|| Judged::NoVerdict("no state to judge from".into())))
    } else {
        Ok(out)
    }
}

/// The violation of answers no strict order explains: the clauses whose
/// waiver explains them, the requests and answers waived, and what the
/// waived rules would have allowed.
fn blamed(states: &[IdemModel], items: &[Item], strict: &Violation) -> Judged {
    let found = blame(|relax| {
        judge_relaxed(states, items, relax)
            .ok()
            .and_then(|out| out.into_iter().next())
            .map(|(_, w)| w)
    });
    let Some((clauses, waivers, others)) = found else {
        return Judged::NoVerdict(format!(
            "no order of the answers fits the model, and none fits it with the rules of at most {MAX_BLAMED} clauses waived ({MAX_WAIVED_RULES} rules at most), so no clause can be blamed: {}",
            strict.message
        ));
    };
    let mut message = String::new();
    for w in waivers.iter().take(3) {
        if !message.is_empty() {
            message.push_str("; and ");
        }
        message.push_str(&w.to_string());
    }
    if waivers.len() > 3 {
        message.push_str(&format!(" (and {} more such answers)", waivers.len() - 3));
    }
    message.push_str(&format!(
        ". With the rules of {} waived some order explains every answer; ",
        clauses.join(" and ")
    ));
    if others.is_empty() {
        message.push_str("with no other clause's alone does one.");
    } else {
        message.push_str(&format!(
            "waiving {} alone explains them as well, at no lower cost.",
            others.join(" or ")
        ));
    }
    message.push_str(&format!("\n  {}", strict.message));
    Judged::Violation(Violation {
        clause: clauses[0],
        clauses,
        message,
    })
}

fn fail(clause: &'static str, message: String) -> Judged {
    Judged::Violation(crate::idem_model::violation(clause, message))
}

/// The request and its answer, as a waiver names them.
fn answered(item: &Item) -> String {
    format!("{} answered {}", label(&item.0), shown_answer(&item.1))
}

/// Takes a waiver of `rule` for `item` if `relax` admits it within its
/// count of rules.
fn take(
    relax: Relax,
    used: &mut Rules,
    waived: &mut Vec<Waiver>,
    rule: Rule,
    item: &Item,
    allowed: String,
) -> bool {
    let next = used.with(rule);
    if relax.is_strict() || !next.within(relax) {
        return false;
    }
    *used = next;
    waived.push(Waiver {
        rules: Rules::default().with(rule),
        request: Some(answered(item)),
        allowed,
    });
    true
}

/// The rule an answer breaks by showing `other`'s answer to `own`'s request
/// (another caller, another key, another route in scope).
fn apart(own: &Scoped, other: &Scoped) -> Rule {
    if own.caller != other.caller {
        Rule::CallerNotShown
    } else if own.key != other.key {
        Rule::KeysApart
    } else {
        Rule::ScopeApart
    }
}

fn label(req: &IdemRequest) -> String {
    let key = match &req.key {
        None => "no key".to_owned(),
        Some(k) => {
            let k: String = String::from_utf8_lossy(k).chars().take(60).collect();
            format!("key {k:?}")
        }
    };
    let caller: String = req.caller.chars().take(40).collect();
    format!("{} {} {key} caller {caller:?}", req.method, req.path)
}

/// One explanation of a batch: the state after it, the rules waived and
/// the waivers taken.
type Explained = (IdemModel, Vec<Waiver>);

/// What one state explains of `items` with `relax` waived: every successor
/// state.
fn explain(state: &IdemModel, items: &[Item], relax: Relax) -> Result<Vec<Explained>, Judged> {
    let p = state.profile().clone();
    let mut base = state.clone();
    let mut used = Rules::default();
    let mut waived: Vec<Waiver> = Vec::new();
    let mut groups: BTreeMap<Scoped, Vec<usize>> = BTreeMap::new();
    for (i, item) in items.iter().enumerate() {
        let (req, ans, w) = item;
        let Some(handler) = crate::idem_model::handler_of(&req.method, &req.path, &req.body) else {
            continue;
        };
        let fresh = order_of(ans).filter(|o| base.is_fresh(*o));
        match state.read_key(req) {
            KeyRead::Key(s) => {
                // [[idem.key.syntax]] waived: a key the syntax admits refused as malformed.
                let malformed = p.invalid_key_status.unwrap_or(400);
                if fresh.is_none()
                    && ans.status == malformed
                    && take(
                        relax,
                        &mut used,
                        &mut waived,
                        Rule::KeyTaken,
                        item,
                        format!("only taking the key as keySyntax {:?} admits it (a run or a replay), never a refusal {malformed}", p.key_syntax),
                    )
                {
                    continue;
                }
                // Scope, key and caller waived: another scoped key's kept answer shown.
                if let Some((other, r)) = order_of(ans).and_then(|o| {
                    state
                        .records()
                        .iter()
                        .find(|(other, r)| **other != s && r.kept.order == Some(o))
                }) {
                    let rule = apart(&s, other);
                    let order = r.kept.order.map_or("-".into(), |o| o.to_string());
                    if take(
                        relax,
                        &mut used,
                        &mut waived,
                        rule,
                        item,
                        format!(
                            "{} (order {order} is another scoped key's answer)",
                            rule.allows()
                        ),
                    ) {
                        continue;
                    }
                }
                // The same, refused for another payload than another
                // scoped key's record holds.
                if !relax.is_strict() && p.mismatch_status == Some(ans.status) && fresh.is_none() {
                    let print = crate::idem_model::payload_print(p.fingerprint, &req.body);
                    let other = state.records().iter().find(|(other, r)| {
                        **other != s
                            && (other.key == s.key || relax.allows(Rule::KeysApart))
                            && r.print != print
                    });
                    if let Some((other, r)) = other {
                        let rule = apart(&s, other);
                        let order = r.kept.order.map_or("-".into(), |o| o.to_string());
                        if take(
                            relax,
                            &mut used,
                            &mut waived,
                            rule,
                            item,
                            format!("{} (refused for another payload than order {order}, another scoped key's record, holds)", rule.allows()),
                        ) {
                            continue;
                        }
                    }
                }
                groups.entry(s).or_default().push(i);
            }
            KeyRead::Unjudged => {
                // What such a key does is not judged; a run still counts.
                if let Some(o) = fresh {
                    base.count_run(req, o, false);
                }
            }
            KeyRead::Missing if !p.key_required => match fresh {
                Some(o) if ans.status == handler.status() => base.count_run(req, o, false),
                _ => {
                    let allowed = format!("only a run (status {}, a new order)", handler.status());
                    if take(
                        relax,
                        &mut used,
                        &mut waived,
                        Rule::MissingRuns,
                        item,
                        allowed,
                    ) {
                        if let Some(o) = fresh {
                            base.count_run(req, o, false);
                        }
                        continue;
                    }
                    return Err(fail(
                        clause::MISSING_OPTIONAL,
                        format!(
                            "{}: without a key under keyRequired false it must run (status {}, a new order); the app answered {}",
                            label(req),
                            handler.status(),
                            shown_answer(ans)
                        ),
                    ));
                }
            },
            KeyRead::Missing | KeyRead::Malformed(_) => {
                let Some(Outcome::Refused { status, clause }) =
                    state.outcomes(req, *w).into_iter().next()
                else {
                    continue;
                };
                let rule = if clause == crate::idem_model::clause::MISSING_REQUIRED {
                    Rule::MissingRefused
                } else {
                    Rule::MalformedRefused
                };
                let allowed = format!("only a refusal {status} that runs nothing");
                if let Some(o) = fresh {
                    if take(relax, &mut used, &mut waived, rule, item, allowed) {
                        base.count_run(req, o, false);
                        continue;
                    }
                    return Err(fail(
                        clause,
                        format!(
                            "{}: must be refused {status} and run nothing; it ran (order {o})",
                            label(req)
                        ),
                    ));
                }
                if ans.status != status {
                    if take(relax, &mut used, &mut waived, rule, item, allowed) {
                        continue;
                    }
                    return Err(fail(
                        clause,
                        format!(
                            "{}: must be refused {status}; the app answered {}",
                            label(req),
                            shown_answer(ans)
                        ),
                    ));
                }
                if ans.json.is_none() {
                    let allowed = format!("only a refusal {status} with a JSON body");
                    if take(
                        relax,
                        &mut used,
                        &mut waived,
                        Rule::RefusalBody,
                        item,
                        allowed,
                    ) {
                        continue;
                    }
                    return Err(fail(
                        crate::idem_model::clause::ERROR_BODY,
                        format!("{}: the refusal {status} has no JSON body", label(req)),
                    ));
                }
            }
        }
    }
    // An order shown in two scoped keys' answers: one key's answer reached another.
    // Waived, the copy marked replayed (else the later one) is the other
    // key's answer shown, not a run of its own key.
    let mut owner: BTreeMap<u64, (&Scoped, usize)> = BTreeMap::new();
    let mut shown_elsewhere: Vec<usize> = Vec::new();
    for (s, idx) in &groups {
        for &i in idx {
            if let Some(o) = order_of(&items[i].1).filter(|o| state.is_fresh(*o)) {
                match owner.get(&o).copied() {
                    Some((other, j)) if other != s => {
                        let rule = apart(s, other);
                        let allowed = format!(
                            "{} (order {o} ran for another scoped key in the same batch)",
                            rule.allows()
                        );
                        let shown = if items[j].1.replayed && !items[i].1.replayed {
                            j
                        } else {
                            i
                        };
                        if take(relax, &mut used, &mut waived, rule, &items[shown], allowed) {
                            if shown == j {
                                owner.insert(o, (s, i));
                            }
                            shown_elsewhere.push(shown);
                            continue;
                        }
                        return Err(cross_scope(&items[i].0, &items[i].1, o, other, s));
                    }
                    Some(_) => {}
                    None => {
                        owner.insert(o, (s, i));
                    }
                }
            }
        }
    }
    for idx in groups.values_mut() {
        idx.retain(|i| !shown_elsewhere.contains(i));
    }
    groups.retain(|_, idx| !idx.is_empty());
    let mut states: Vec<(IdemModel, Rules, Vec<Waiver>)> = vec![(base, used, waived)];
    for (scoped, idx) in &groups {
        let alternatives = explain_key(state, scoped, idx, items, relax)?;
        let mut next: Vec<(IdemModel, Rules, Vec<Waiver>)> = Vec::new();
        for (s, u, w) in &states {
            for alt in &alternatives {
                let u = u.union(alt.used);
                if !u.within(relax) && !u.is_empty() {
                    continue;
                }
                let mut n = s.clone();
                alt.apply(&mut n, scoped, items);
                if !next.iter().any(|(m, _, _)| *m == n) {
                    let mut w = w.clone();
                    w.extend(alt.waived.iter().cloned());
                    next.push((n, u, w));
                }
            }
        }
        if next.is_empty() {
            return Err(Judged::NoVerdict(format!(
                "no explanation waives at most {} rules",
                relax.max_rules
            )));
        }
        if next.len() > MAX_EXPLANATIONS {
            return Err(Judged::NoVerdict(format!(
                "more than {MAX_EXPLANATIONS} states explain the batch"
            )));
        }
        states = next;
    }
    Ok(states.into_iter().map(|(s, _, w)| (s, w)).collect())
}

fn cross_scope(req: &IdemRequest, ans: &IdemAnswer, order: u64, a: &Scoped, b: &Scoped) -> Judged {
    let (clause, why) = if a.caller != b.caller {
        (clause::NO_LEAK, "another caller")
    } else if a.key != b.key {
        (
            "idem.key.exact",
            "another key (keys are compared octet for octet)",
        )
    } else {
        (
            clause::SCOPE,
            "another method or path the profile scopes by",
        )
    };
    fail(
        clause,
        format!(
            "{}: answered {} — order {order} ran for {why} in the same batch",
            label(req),
            shown_answer(ans)
        ),
    )
}

/// One explanation of a scoped key's requests: which of them ran, in
/// which order, and what the key holds after.
#[derive(Debug, Clone, PartialEq, Eq)]
struct KeyStory {
    /// Items that ran, in order, with whether their key was released.
    runs: Vec<(usize, bool)>,
    /// The record after the batch (`None`: freed or never taken).
    after: Option<Record>,
    /// Whether the record before the batch was used (kept as it was).
    keep_prior: bool,
    /// The rules it waived (none when strict) and how.
    used: Rules,
    waived: Vec<Waiver>,
}

impl KeyStory {
    fn apply(&self, n: &mut IdemModel, scoped: &Scoped, items: &[Item]) {
        for &(i, released) in &self.runs {
            if let Some(o) = order_of(&items[i].1) {
                n.count_run(&items[i].0, o, released);
            }
        }
        if self.keep_prior {
            return;
        }
        n.set_freed(
            scoped,
            self.runs.last().is_some_and(|(_, released)| *released),
        );
        match &self.after {
            Some(r) => {
                n.records_mut().insert(scoped.clone(), r.clone());
            }
            None => {
                n.records_mut().remove(scoped);
            }
        }
    }
}

/// A run of the key: an item, its handler, its payload and its kept answer.
#[derive(Debug, Clone)]
struct Run {
    item: usize,
    handler: Handler,
    print: String,
    alt_print: String,
    kept: Kept,
    released: bool,
}

/// A phase of the key's life an answer may be placed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The record before the batch.
    Prior,
    /// The `k`-th run of the chosen order.
    Run(usize),
}

/// Where an answer is placed, and what that requires of its arrival.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// While run `k` is in flight.
    InFlight(usize),
    /// While phase's record is completed (from completion to its end).
    Done(Phase),
    /// Any time from run `k`'s arrival to its record's end (a waiter, or
    /// another caller refused).
    Whole(Phase),
}

/// A place an answer may take and the rules it waives there (none: the
/// strict model's), with what they would have allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Fit {
    place: Place,
    rules: Rules,
    allowed: String,
}

/// The answers of one scoped key, explained: every story that fits.
fn explain_key(
    state: &IdemModel,
    scoped: &Scoped,
    idx: &[usize],
    items: &[Item],
    relax: Relax,
) -> Result<Vec<KeyStory>, Judged> {
    let prior = state.record(scoped);
    // The fresh orders and who shows them.
    let mut by_order: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
    for &i in idx {
        if let Some(o) = order_of(&items[i].1).filter(|o| state.is_fresh(*o)) {
            by_order.entry(o).or_default().push(i);
        }
    }
    // Every choice of the runner of each fresh order.
    let mut runner_choices: Vec<Vec<usize>> = vec![Vec::new()];
    for shown in by_order.values() {
        let mut next = Vec::new();
        for choice in &runner_choices {
            for &r in shown {
                let mut c = choice.clone();
                c.push(r);
                next.push(c);
            }
        }
        runner_choices = next;
    }
    let mut stories: Vec<KeyStory> = Vec::new();
    let mut tried = 0usize;
    let mut why: Option<Judged> = None;
    for runners in &runner_choices {
        let mut runs = Vec::new();
        let mut used = Rules::default();
        let mut waived = Vec::new();
        let mut bad = None;
        for &r in runners {
            match as_run(state, &items[r], relax) {
                Ok((run, waiver)) => {
                    runs.push(Run { item: r, ..run });
                    if let Some(w) = waiver {
                        used = used.union(w.rules);
                        waived.push(w);
                    }
                }
                Err(e) => bad = Some(e),
            }
        }
        if let Some(e) = bad {
            why.get_or_insert(e);
            continue;
        }
        if !used.is_empty() && !used.within(relax) {
            continue;
        }
        // [[idem.replay.errors]] waived: an error answer under `released` kept.
        let mut variants = vec![(runs.clone(), used, waived.clone())];
        if runs.iter().any(|r| r.released) && relax.allows(Rule::ErrorReleased) {
            let kept: Vec<Run> = runs
                .iter()
                .map(|r| Run {
                    released: false,
                    ..r.clone()
                })
                .collect();
            let first = runs
                .iter()
                .find(|r| r.released)
                .map(|r| r.item)
                .unwrap_or(0);
            let mut w = waived.clone();
            w.push(Waiver {
                rules: Rules::default().with(Rule::ErrorReleased),
                request: Some(answered(&items[first])),
                allowed: "a new run of the key after this error answer freed it (errors released), never its answer kept".into(),
            });
            let u = used.with(Rule::ErrorReleased);
            if u.within(relax) {
                variants.push((kept, u, w));
            }
        }
        let others: Vec<usize> = idx
            .iter()
            .copied()
            .filter(|i| !runners.contains(i))
            .collect();
        for (runs, used, waived) in &variants {
            let mut order: Vec<usize> = (0..runs.len()).collect();
            let mut first = true;
            loop {
                if !first && !next_permutation(&mut order) {
                    break;
                }
                first = false;
                tried += 1;
                if tried > MAX_EXPLANATIONS {
                    return Err(Judged::NoVerdict(format!(
                        "more than {MAX_EXPLANATIONS} orders of one key's requests to try"
                    )));
                }
                let chain: Vec<&Run> = order.iter().map(|&k| &runs[k]).collect();
                let taken = (*used, waived.clone());
                match place_all(
                    state, prior, &chain, &others, items, &mut tried, relax, taken,
                ) {
                    Ok(story) => {
                        if !stories.contains(&story) {
                            stories.push(story);
                        }
                    }
                    Err(e) => {
                        if matches!(e, Judged::NoVerdict(_)) {
                            return Err(e);
                        }
                        why.get_or_insert(e);
                    }
                }
                if !relax.is_strict() && !stories.is_empty() {
                    return Ok(stories);
                }
            }
        }
    }
    if stories.is_empty() {
        return Err(match why {
            Some(e @ Judged::NoVerdict(_)) => e,
            _ if idx.len() == 1 => explain_single(state, &items[idx[0]]),
            _ => {
                let runs = by_order.len();
                // The strict model's first account (its clause is only the
                // first check that failed: `judge` blames by counterfactual).
                let clause = match &why {
                    _ if runs >= 2 => clause::AT_MOST_ONCE,
                    Some(Judged::Violation(v)) => v.clause,
                    _ => clause::CONCURRENT,
                };
                let mut msg = format!(
                    "no order of {} overlapping requests with one key explains their answers ({runs} of them ran):",
                    idx.len()
                );
                for &i in idx {
                    msg.push_str(&format!(
                        "\n  {} sent at {} ms, answered at {} ms: {}",
                        label(&items[i].0),
                        items[i].2.sent_ms,
                        items[i].2.answered_ms,
                        shown_answer(&items[i].1)
                    ));
                }
                fail(clause, msg)
            }
        });
    }
    Ok(stories)
}

/// `item` as a run: its answer must be its handler's (a waiver where
/// `relax` admits one).
fn as_run(state: &IdemModel, item: &Item, relax: Relax) -> Result<(Run, Option<Waiver>), Judged> {
    let (req, ans, w) = item;
    let p = state.profile();
    let handler = crate::idem_model::handler_of(&req.method, &req.path, &req.body)
        .ok_or_else(|| Judged::NoVerdict("not a contract route".into()))?;
    if w.answered_ms.saturating_sub(w.sent_ms) < handler.sleep_ms {
        // The app broke reqkey-idem/1 itself: its handler did not sleep as
        // asked, so the times the model reasons with are not the app's.
        return Err(Judged::NoVerdict(format!(
            "{}: the app ran the handler and answered {} ms after the request was sent, sooner than the {} ms its body's sleepMs asks (reqkey-idem/1: the slow and failing routes sleep sleepMs before their side effect)",
            label(req),
            w.answered_ms.saturating_sub(w.sent_ms),
            handler.sleep_ms
        )));
    }
    let mut rules = Rules::default();
    let mut allowed = Vec::new();
    if ans.status != handler.status() {
        rules = rules.with(Rule::Replayed);
        allowed.push(format!("a run answering {}", handler.status()));
    }
    if p.replay_header.is_some() && ans.replayed {
        rules = rules.with(Rule::RunIsFirst);
        allowed.push("a first execution (a new order) without the replay header".to_owned());
    }
    let waiver = if rules.is_empty() {
        None
    } else if rules.within(relax) {
        Some(Waiver {
            rules,
            request: Some(answered(item)),
            allowed: format!("only {}", allowed.join(" and ")),
        })
    } else if ans.status != handler.status() {
        return Err(fail(
            clause::REPLAY,
            format!(
                "{}: answered {} with a new order; a run answers {}",
                label(req),
                shown_answer(ans),
                handler.status()
            ),
        ));
    } else {
        return Err(fail(
            clause::REPLAY_HEADER,
            format!(
                "{}: a first execution (a new order) carries the replay header",
                label(req)
            ),
        ));
    };
    Ok((
        Run {
            item: 0,
            handler,
            print: crate::idem_model::payload_print(p.fingerprint, &req.body),
            alt_print: alt_payload_print(p.fingerprint, &req.body),
            kept: Kept {
                status: ans.status,
                order: order_of(ans),
                order_header: ans.order_header.clone(),
                caller: req.caller.clone(),
                echo: echo_of(ans),
            },
            released: releases(p, ans.status),
        },
        waiver,
    ))
}

/// Whether `ans` replays `kept` (status, order, the handler's header, the
/// echo, the replay mark): `None` when it does, else what differs.
fn replay_mismatch(
    state: &IdemModel,
    kept: &Kept,
    ans: &IdemAnswer,
) -> Option<(&'static str, String)> {
    replay_rules(state, kept, ans).map(|(rules, why)| {
        let clause = rules.rules().first().map_or(clause::REPLAY, |r| r.clause());
        (clause, why)
    })
}

/// What differs between `ans` and a replay of `kept`: the rules it breaks
/// and the first difference (`None`: it is that replay).
fn replay_rules(state: &IdemModel, kept: &Kept, ans: &IdemAnswer) -> Option<(Rules, String)> {
    let content = if kept.status >= 400 {
        Rule::ErrorReplayed
    } else {
        Rule::Replayed
    };
    let mut rules = Rules::default();
    let mut first: Option<String> = None;
    let mut note = |rules: &mut Rules, rule: Rule, why: String| {
        *rules = rules.with(rule);
        first.get_or_insert(why);
    };
    if ans.status != kept.status || order_of(ans) != kept.order {
        note(
            &mut rules,
            content,
            format!(
                "a replay must answer {} order {}",
                kept.status,
                kept.order.map_or("-".into(), |o| o.to_string())
            ),
        );
    }
    if kept.order_header.is_some() && ans.order_header != kept.order_header {
        note(
            &mut rules,
            content,
            format!(
                "a replay must carry the handler's X-Reqkey-Order {}",
                kept.order_header.as_deref().unwrap_or("")
            ),
        );
    }
    if kept.echo.is_some() && echo_of(ans) != kept.echo {
        note(
            &mut rules,
            content,
            "a replay must carry the first answer's echo".into(),
        );
    }
    if caller_of(ans).is_some_and(|c| c != kept.caller) {
        note(
            &mut rules,
            Rule::CallerNotShown,
            "the replay names another caller".into(),
        );
    }
    if state.profile().replay_header.is_some() && !ans.replayed {
        note(
            &mut rules,
            Rule::ReplayMarked,
            "a replay must carry the declared replay header".into(),
        );
    }
    first.map(|f| (rules, f))
}

/// What a replay of `kept` is, for messages.
fn replay_of(kept: &Kept) -> String {
    format!(
        "the first answer replayed ({} order {})",
        kept.status,
        kept.order.map_or("-".into(), |o| o.to_string())
    )
}

/// The places an answer that did not run may take, given the chain, with
/// the rules each waives (only those `relax` admits).
fn places(
    state: &IdemModel,
    prior: Option<&Record>,
    chain: &[&Run],
    item: &Item,
    relax: Relax,
) -> Vec<Fit> {
    let (req, ans, _) = item;
    let p = state.profile();
    let print = crate::idem_model::payload_print(p.fingerprint, &req.body);
    let alt = alt_payload_print(p.fingerprint, &req.body);
    let compares = p.fingerprint != Fingerprint::None;
    let refusal = |status: Option<u16>| status == Some(ans.status);
    let mut out: Vec<Fit> = Vec::new();
    let mut add = |place: Place, rules: Rules, allowed: String| {
        if (rules.is_empty() || rules.within(relax))
            && !out.iter().any(|f| f.place == place && f.rules == rules)
        {
            out.push(Fit {
                place,
                rules,
                allowed,
            });
        }
    };
    let none = Rules::default();
    let phases = prior
        .map(|r| {
            (
                Phase::Prior,
                r.print.clone(),
                r.alt_print.clone(),
                r.kept.clone(),
                false,
            )
        })
        .into_iter()
        .chain(chain.iter().enumerate().map(|(k, r)| {
            (
                Phase::Run(k),
                r.print.clone(),
                r.alt_print.clone(),
                r.kept.clone(),
                r.released,
            )
        }));
    for (phase, rprint, ralt, kept, released) in phases {
        if kept.caller != req.caller {
            // Another caller on a key not scoped by caller: refused, never shown the answer.
            let leaks = order_of(ans) == kept.order || caller_of(ans) == Some(kept.caller.as_str());
            if ans.status >= 400 && !leaks {
                add(Place::Whole(phase), none, String::new());
            } else if !relax.is_strict() {
                add(
                    Place::Whole(phase),
                    none.with(Rule::CallerNotShown),
                    Rule::CallerNotShown.allows().into(),
                );
            }
            continue;
        }
        let same = !compares || rprint == print;
        // The payload as the rules compare it, and as a waiver of a
        // fingerprint clause may: by the other fingerprint
        // (equivalence), or as one payload (mismatch, other payload).
        let mut readings = vec![(same, None)];
        if !relax.is_strict() && compares && (ralt == alt) != same {
            readings.push((!same, Some(Rule::FingerprintEquivalence)));
        }
        if !relax.is_strict() && !same {
            readings.push((true, Some(Rule::MismatchRefused)));
        }
        for (same, reading) in readings {
            for fit in phase_places(state, phase, &kept, released, same, ans, refusal, relax) {
                let mut rules = fit.rules;
                let mut allowed = fit.allowed;
                if let Some(r) = reading {
                    // Another payload taken for the same one: refused
                    // after completion (mismatch), in flight (other payload).
                    let r = match (r, fit.place) {
                        (
                            Rule::MismatchRefused,
                            Place::InFlight(_) | Place::Whole(Phase::Run(_)),
                        ) => Rule::OtherPayloadRefused,
                        (r, _) => r,
                    };
                    rules = rules.with(r);
                    if !allowed.is_empty() {
                        allowed.push_str(", and ");
                    }
                    allowed.push_str(r.allows());
                }
                add(fit.place, rules, allowed);
            }
        }
    }
    out
}

/// The places in `phase` of an answer whose payload is (`same`) or is not
/// the record's.
#[allow(clippy::too_many_arguments)]
fn phase_places(
    state: &IdemModel,
    phase: Phase,
    kept: &Kept,
    released: bool,
    same: bool,
    ans: &IdemAnswer,
    refusal: impl Fn(Option<u16>) -> bool,
    relax: Relax,
) -> Vec<Fit> {
    let p = state.profile();
    let none = Rules::default();
    // A refusal without a JSON body breaks [[idem.error.body]].
    let bare = if ans.json.is_none() {
        none.with(Rule::RefusalBody)
    } else {
        none
    };
    let bare_allows = || {
        if ans.json.is_none() {
            Rule::RefusalBody.allows().to_owned()
        } else {
            String::new()
        }
    };
    let mut out = Vec::new();
    let mut add = |place: Place, rules: Rules, allowed: String| {
        out.push(Fit {
            place,
            rules,
            allowed,
        })
    };
    // A replay of `kept`: strict, or with the rules of what differs waived.
    let replay = match replay_rules(state, kept, ans) {
        None => Some((none, String::new())),
        Some((rules, why)) if !relax.is_strict() => {
            Some((rules, format!("only {} ({why})", replay_of(kept))))
        }
        Some(_) => None,
    };
    match phase {
        Phase::Prior => {
            if let Some((rules, allowed)) = replay.clone().filter(|_| same) {
                add(Place::Done(phase), rules, allowed);
            }
            if !same && refusal(p.mismatch_status) {
                add(Place::Done(phase), bare, bare_allows());
            }
        }
        Phase::Run(k) => {
            if let Some((rules, allowed)) = replay.clone().filter(|_| same) {
                if waits(p) {
                    add(Place::Whole(phase), rules, allowed);
                } else if !released {
                    add(Place::Done(phase), rules, allowed.clone());
                    // [[idem.concurrent.declared]] waived: a duplicate in
                    // flight waited under `conflict`.
                    if !relax.is_strict() {
                        add(
                            Place::Whole(phase),
                            rules.with(Rule::InFlightAnswered),
                            Rule::InFlightAnswered.allows().into(),
                        );
                    }
                }
            }
            if p.concurrent == Concurrent::Conflict && refusal(p.concurrent_status) {
                add(Place::InFlight(k), bare, bare_allows());
            }
            if !same && refusal(p.mismatch_status) {
                add(Place::InFlight(k), bare, bare_allows());
                if !released {
                    add(Place::Done(phase), bare, bare_allows());
                }
            }
            if !relax.is_strict() && ans.status >= 400 {
                // Any refusal in flight: [[idem.concurrent.declared]]
                // waived for the same payload, other-payload for another.
                let rule = if same {
                    Rule::InFlightAnswered
                } else {
                    Rule::OtherPayloadRefused
                };
                add(Place::InFlight(k), none.with(rule), rule.allows().into());
            }
        }
    }
    out
}

/// The difference constraints of a chain and placements: variables are
/// event times (index 0 is the clock's zero); an edge (from, to, w) says
/// `t[to] - t[from] <= w`.
struct Constraints {
    vars: usize,
    edges: Vec<(usize, usize, i64)>,
}

impl Constraints {
    fn var(&mut self) -> usize {
        self.vars += 1;
        self.vars - 1
    }
    /// `t[a] - t[b] <= w`.
    fn le(&mut self, a: usize, b: usize, w: i64) {
        self.edges.push((b, a, w));
    }
    fn within(&mut self, a: usize, lo: u64, hi: u64) {
        self.le(a, 0, hi as i64);
        self.le(0, a, -(lo as i64));
    }
    /// Bellman-Ford from the zero: no negative cycle means some times fit.
    fn feasible(&self) -> bool {
        let mut dist = vec![0i64; self.vars];
        for _ in 0..self.vars {
            let mut changed = false;
            for &(from, to, w) in &self.edges {
                let d = dist[from].saturating_add(w);
                if d < dist[to] {
                    dist[to] = d;
                    changed = true;
                }
            }
            if !changed {
                return true;
            }
        }
        false
    }
}

/// The chain's own constraints; returns the variables of each phase:
/// (arrival, completion, end) per run and the prior record's end.
struct ChainVars {
    prior_end: Option<usize>,
    runs: Vec<(usize, usize, Option<usize>)>,
}

/// What the key's timeline may break, by waiver: runs that take a held
/// key ([[idem.effect.at-most-once]]), records kept past their expiry
/// ([[idem.expiry.honoured]]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Timeline {
    runs_on_held_key: bool,
    kept_past_expiry: bool,
}

fn chain_constraints(
    state: &IdemModel,
    prior: Option<&Record>,
    chain: &[&Run],
    items: &[Item],
    timeline: Timeline,
) -> Option<(Constraints, ChainVars)> {
    let expiry = state.profile().expiry_ms.map(|e| e as i64);
    let margin = EXPIRY_MARGIN_MS as i64;
    let mut c = Constraints {
        vars: 1,
        edges: Vec::new(),
    };
    // When a completed record ends: it expires between `expiryMs` and
    // `expiryMs` + the margin after it completed (never, without expiry;
    // any time after `expiryMs` where expiry is waived).
    let ends = |c: &mut Constraints, done: usize| {
        expiry.map(|e| {
            let end = c.var();
            c.le(done, end, -e);
            if !timeline.kept_past_expiry {
                c.le(end, done, e + margin);
            }
            end
        })
    };
    // The time the key was last freed, or `None` while it is held for good.
    let mut freed: Option<Option<usize>> = Some(None);
    let prior_end = match prior {
        None => None,
        Some(r) => {
            let done = c.var();
            c.within(done, r.completed_from_ms, r.completed_by_ms);
            let end = ends(&mut c, done);
            freed = end.map(Some);
            end
        }
    };
    let mut runs = Vec::new();
    for run in chain {
        let since = if timeline.runs_on_held_key {
            None
        } else {
            freed?
        };
        let w = items[run.item].2;
        let a = c.var();
        c.within(a, w.sent_ms, w.arrived_by_ms.min(w.answered_ms));
        if let Some(end) = since {
            c.le(end, a, 0);
        }
        let done = c.var();
        c.le(a, done, -(run.handler.sleep_ms as i64));
        c.within(done, w.sent_ms, w.answered_ms);
        let end = if run.released {
            Some(done)
        } else {
            ends(&mut c, done)
        };
        runs.push((a, done, end));
        freed = end.map(Some);
    }
    Some((c, ChainVars { prior_end, runs }))
}

/// Places every other answer in the chain (depth first, checking the
/// constraints at each step): the story, or why none fits. `taken`: the
/// rules the runs waived already, and how.
#[allow(clippy::too_many_arguments)]
fn place_all(
    state: &IdemModel,
    prior: Option<&Record>,
    chain: &[&Run],
    others: &[usize],
    items: &[Item],
    tried: &mut usize,
    relax: Relax,
    taken: (Rules, Vec<Waiver>),
) -> Result<KeyStory, Judged> {
    let mut why: Option<Judged> = None;
    let expires = state.profile().expiry_ms.is_some();
    for (runs_on_held_key, kept_past_expiry) in
        [(false, false), (false, true), (true, false), (true, true)]
    {
        let timeline = Timeline {
            runs_on_held_key,
            kept_past_expiry,
        };
        let mut used = taken.0;
        let mut waived = taken.1.clone();
        let key = chain
            .first()
            .map(|r| r.item)
            .or_else(|| others.first().copied());
        let whose = key.map(|i| answered(&items[i]));
        if runs_on_held_key {
            if !relax.allows(Rule::RunsOnFreeKey) || chain.len() + usize::from(prior.is_some()) < 2
            {
                continue;
            }
            used = used.with(Rule::RunsOnFreeKey);
            waived.push(Waiver {
                rules: Rules::default().with(Rule::RunsOnFreeKey),
                request: chain.last().map(|r| answered(&items[r.item])),
                allowed: format!(
                    "{} ({} runs of one key)",
                    Rule::RunsOnFreeKey.allows(),
                    chain.len()
                ),
            });
        }
        if kept_past_expiry {
            if !relax.allows(Rule::Forgotten) || !expires {
                continue;
            }
            used = used.with(Rule::Forgotten);
            waived.push(Waiver {
                rules: Rules::default().with(Rule::Forgotten),
                request: whose.clone(),
                allowed: format!(
                    "{}: the key's record forgotten by then",
                    Rule::Forgotten.allows()
                ),
            });
        }
        if !used.is_empty() && !used.within(relax) {
            continue;
        }
        let Some((mut c, vars)) = chain_constraints(state, prior, chain, items, timeline) else {
            why.get_or_insert(fail(
                clause::AT_MOST_ONCE,
                format!(
                    "{} ran while the key was held for good (no expiry)",
                    chain
                        .first()
                        .map_or(String::new(), |r| label(&items[r.item].0))
                ),
            ));
            continue;
        };
        if !c.feasible() {
            why.get_or_insert(fail(
                clause::AT_MOST_ONCE,
                format!(
                    "{} runs of one key cannot have run one after another, each after the key was freed",
                    chain.len()
                ),
            ));
            continue;
        }
        let mut cands = Vec::new();
        let mut nowhere = None;
        for &i in others {
            let pl = places(state, prior, chain, &items[i], relax);
            if pl.is_empty() {
                nowhere = Some(i);
                break;
            }
            cands.push(pl);
        }
        if let Some(i) = nowhere {
            why.get_or_insert(explain_single_in(state, prior, chain, &items[i]));
            continue;
        }
        let mut chosen = Vec::new();
        match place_rest(
            &mut c,
            &vars,
            &cands,
            others,
            items,
            0,
            tried,
            relax,
            used,
            &mut chosen,
        )? {
            None => {
                why.get_or_insert(fail(
                    clause::CONCURRENT,
                    "no time of the answers fits the key's runs".into(),
                ));
                continue;
            }
            Some(u) => {
                used = u;
                for (at, k) in chosen.iter().enumerate() {
                    let fit = &cands[at][*k];
                    if !fit.rules.is_empty() {
                        waived.push(Waiver {
                            rules: fit.rules,
                            request: Some(answered(&items[others[at]])),
                            allowed: fit.allowed.clone(),
                        });
                    }
                }
            }
        }
        let after = match chain.last() {
            None => None,
            Some(r) if r.released => None,
            Some(r) => {
                let w = items[r.item].2;
                Some(Record {
                    print: r.print.clone(),
                    alt_print: r.alt_print.clone(),
                    kept: r.kept.clone(),
                    completed_from_ms: w.sent_ms.saturating_add(r.handler.sleep_ms),
                    completed_by_ms: w.answered_ms,
                })
            }
        };
        return Ok(KeyStory {
            runs: chain.iter().map(|r| (r.item, r.released)).collect(),
            after,
            keep_prior: chain.is_empty(),
            used,
            waived,
        });
    }
    Err(why.unwrap_or_else(|| {
        fail(
            clause::CONCURRENT,
            "no time of the answers fits the key's runs".into(),
        )
    }))
}

/// Places `others[at..]` depth first: the rules waived by the first fit
/// within `relax` (`chosen` holds each answer's fit), or `None`.
#[allow(clippy::too_many_arguments)]
fn place_rest(
    c: &mut Constraints,
    vars: &ChainVars,
    cands: &[Vec<Fit>],
    others: &[usize],
    items: &[Item],
    at: usize,
    tried: &mut usize,
    relax: Relax,
    used: Rules,
    chosen: &mut Vec<usize>,
) -> Result<Option<Rules>, Judged> {
    if at == others.len() {
        return Ok(Some(used));
    }
    let w = items[others[at]].2;
    for (k, fit) in cands[at].iter().enumerate() {
        let u = used.union(fit.rules);
        if !u.is_empty() && !u.within(relax) {
            continue;
        }
        *tried += 1;
        if *tried > MAX_EXPLANATIONS {
            return Err(Judged::NoVerdict(format!(
                "more than {MAX_EXPLANATIONS} placements of one key's answers to try"
            )));
        }
        let mark = (c.vars, c.edges.len());
        let x = c.var();
        c.within(x, w.sent_ms, w.arrived_by_ms.min(w.answered_ms));
        match fit.place {
            Place::InFlight(k) => {
                let (a, done, _) = vars.runs[k];
                c.le(a, x, 0);
                c.le(x, done, 0);
            }
            Place::Done(Phase::Prior) => {
                if let Some(end) = vars.prior_end {
                    c.le(x, end, 0);
                }
            }
            Place::Done(Phase::Run(k)) => {
                let (_, done, end) = vars.runs[k];
                c.le(done, x, 0);
                if let Some(end) = end {
                    c.le(x, end, 0);
                }
            }
            Place::Whole(Phase::Prior) => {
                if let Some(end) = vars.prior_end {
                    c.le(x, end, 0);
                }
            }
            Place::Whole(Phase::Run(k)) => {
                let (a, done, end) = vars.runs[k];
                c.le(a, x, 0);
                if let Some(end) = end {
                    c.le(x, end, 0);
                }
                // A waiter is answered once the run it waited for completed.
                c.le(done, 0, w.answered_ms as i64);
            }
        }
        chosen.push(k);
        if c.feasible() {
            if let Some(u) = place_rest(
                c,
                vars,
                cands,
                others,
                items,
                at + 1,
                tried,
                relax,
                u,
                chosen,
            )? {
                return Ok(Some(u));
            }
        }
        chosen.pop();
        c.vars = mark.0;
        c.edges.truncate(mark.1);
    }
    Ok(None)
}

/// Why one answer fits nowhere in a chain (a batch of several).
fn explain_single_in(
    state: &IdemModel,
    prior: Option<&Record>,
    chain: &[&Run],
    item: &Item,
) -> Judged {
    if chain.is_empty() {
        return explain_single(state, item);
    }
    let (req, ans, _) = item;
    let _ = prior;
    fail(
        if order_of(ans).is_some_and(|o| !state.is_fresh(o)) {
            clause::REPLAY
        } else {
            clause::CONCURRENT
        },
        format!(
            "{}: answered {}, which no phase of the key explains (a refusal while it runs, a replay of a completed run)",
            label(req),
            shown_answer(ans)
        ),
    )
}

/// Why `item`, sent alone, is not a conforming answer: each outcome the
/// model allowed, and the first difference.
fn explain_single(state: &IdemModel, item: &Item) -> Judged {
    let (req, ans, w) = item;
    let fresh = order_of(ans).filter(|o| state.is_fresh(*o));
    let mut first: Option<Judged> = None;
    for outcome in state.outcomes(req, *w) {
        let v = match &outcome {
            Outcome::Run(h) => {
                if fresh.is_some() && ans.status != h.status() {
                    Some((clause::REPLAY, format!("a run answers {}", h.status())))
                } else {
                    Some(why_not_run(state, req, ans))
                }
            }
            Outcome::Replay(k) => {
                if fresh.is_some() {
                    Some((
                        clause::AT_MOST_ONCE,
                        format!(
                            "a retry of a completed key must be replayed (order {}), it ran again",
                            k.order.map_or("-".into(), |o| o.to_string())
                        ),
                    ))
                } else if state.profile().fingerprint == Fingerprint::Json
                    && state.profile().mismatch_status == Some(ans.status)
                {
                    Some((
                        clause::EQUIVALENCE,
                        "the same JSON payload (as fingerprint json compares it) was refused as another"
                            .to_owned(),
                    ))
                } else {
                    replay_mismatch(state, k, ans)
                }
            }
            Outcome::Refused { status, clause } => {
                if fresh.is_some() {
                    Some((
                        *clause,
                        format!("must be refused {status} and run nothing; it ran"),
                    ))
                } else if ans.status != *status {
                    Some((*clause, format!("must be refused {status}")))
                } else if ans.json.is_none() {
                    Some((
                        clause::ERROR_BODY,
                        format!("the refusal {status} has no JSON body"),
                    ))
                } else {
                    None
                }
            }
            Outcome::RefusedNoLeak(k) => Some((
                clause::NO_LEAK,
                format!(
                    "another caller's key (order {}) must be refused and never shown",
                    k.order.map_or("-".into(), |o| o.to_string())
                ),
            )),
        };
        if let Some((clause, why)) = v {
            first.get_or_insert(fail(
                clause,
                format!(
                    "{}: {why}; the app answered {}",
                    label(req),
                    shown_answer(ans)
                ),
            ));
        }
    }
    first.unwrap_or_else(|| {
        fail(
            clause::CONCURRENT,
            format!(
                "{}: the app answered {}, which no outcome explains",
                label(req),
                shown_answer(ans)
            ),
        )
    })
}

/// Why an answer that should have been a run was not, by what the key
/// went through.
fn why_not_run(state: &IdemModel, req: &IdemRequest, ans: &IdemAnswer) -> (&'static str, String) {
    let shown = order_of(ans);
    if let Some(o) = shown.filter(|o| state.was_released(*o)) {
        return (
            clause::REPLAY_ERRORS,
            format!("under errors released the error answer (order {o}) freed the key: a retry runs again"),
        );
    }
    if let KeyRead::Key(s) = state.read_key(req) {
        if state.freed_by_error(&s) {
            return (
                clause::REPLAY_ERRORS,
                "under errors released the last run's error answer freed the key: a retry runs again".into(),
            );
        }
        if let Some(r) = state.record(&s) {
            return (
                clause::EXPIRY,
                format!(
                    "the key completed (order {}) more than expiryMs and its margin ago: it is forgotten, a retry runs again",
                    r.kept.order.map_or("-".into(), |o| o.to_string())
                ),
            );
        }
        for (other, r) in state.records() {
            if shown.is_some() && r.kept.order == shown {
                let clause = if r.kept.caller != req.caller {
                    clause::NO_LEAK
                } else if other.key != s.key {
                    "idem.key.exact"
                } else {
                    clause::SCOPE
                };
                return (
                    clause,
                    format!(
                        "order {} is another scoped key's answer: this request must run on its own",
                        shown.unwrap_or(0)
                    ),
                );
            }
        }
        if state
            .records()
            .keys()
            .any(|o| o.key != s.key && o.caller == s.caller)
        {
            return (
                "idem.key.exact",
                "a key never used before (keys are compared octet for octet) must run".into(),
            );
        }
        if state.records().keys().any(|o| o.key == s.key) {
            return (
                clause::SCOPE,
                "the key on another method, path or caller the profile scopes by is another key: it must run".into(),
            );
        }
    }
    (
        clause::CONCURRENT,
        "a free key must run (nothing holds it)".into(),
    )
}

/// The next permutation in lexicographic order (false after the last).
fn next_permutation(v: &mut [usize]) -> bool {
    if v.len() < 2 {
        return false;
    }
    let mut i = v.len() - 1;
    while i > 0 && v[i - 1] >= v[i] {
        i -= 1;
    }
    if i == 0 {
        return false;
    }
    let mut j = v.len() - 1;
    while v[j] <= v[i - 1] {
        j -= 1;
    }
    v.swap(i - 1, j);
    v[i..].reverse();
    true
}
