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
pub use crate::idem_model::Item;
use crate::idem_model::{
    clause, order_of, shown_answer, IdemAnswer, IdemModel, IdemRequest, Judged, KeyRead, Outcome,
    Record, Scoped, Violation, Window, MAX_EXPLANATIONS,
};
use crate::idem_place::{as_run, place_all, KeyStory};
use crate::idem_timing::Run;
use crate::idem_why::{answered, explain_single, fail, label};

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
    // The scoped keys of the batch's runs (what a waiver of scope, caller
    // or key may let another scoped key's refusal stand on).
    let batch_keys: Vec<Scoped> = if relax.is_strict() {
        Vec::new()
    } else {
        items
            .iter()
            .filter(|(_, a, _)| order_of(a).is_some_and(|o| state.is_fresh(o)))
            .filter_map(|(r, _, _)| match state.read_key(r) {
                KeyRead::Key(s) => Some(s),
                _ => None,
            })
            .collect()
    };
    for (i, item) in items.iter().enumerate() {
        let (req, ans, w) = item;
        let Some(handler) = crate::idem_model::handler_of(&req.method, &req.path, &req.body) else {
            continue;
        };
        let fresh = order_of(ans).filter(|o| base.is_fresh(*o));
        match state.read_key(req) {
            KeyRead::Key(s) => {
                // [[idem.key.long-and-escaped]]: a key over 255 octets may
                // be refused for its length (any 4xx), running nothing.
                if s.key.len() > crate::idem_model::LONGEST_KEY_TAKEN_OCTETS
                    && fresh.is_none()
                    && (400..500).contains(&ans.status)
                {
                    continue;
                }
                // [[idem.key.syntax]] waived: a key the syntax admits refused
                // as malformed. Not for a key the app took before in the
                // same scope (it holds a record): that key is no malformed
                // value to it.
                let malformed = p.invalid_key_status.unwrap_or(400);
                // Taken before: it holds a record, or its last run's error
                // answer freed it (`errors: released`); an answer showing
                // a run seen before (a known order) is no refusal of a
                // malformed key either, which runs nothing.
                let taken_before = state.records().contains_key(&s) || state.freed_by_error(&s);
                let shows_a_run = order_of(ans).is_some_and(|o| !state.is_fresh(o));
                if fresh.is_none()
                    && !taken_before
                    && !shows_a_run
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
                // Refused because another scoped key of this batch with
                // the same key bytes holds the key: scope or caller waived.
                // Not where a request of its own scoped key ran in the
                // batch: that run holding the key explains the refusal
                // within its scope (the declared concurrency's to judge).
                if !relax.is_strict()
                    && ans.status >= 400
                    && fresh.is_none()
                    && !shows_a_run
                    && !batch_keys.contains(&s)
                {
                    let other = batch_keys.iter().find(|o| **o != s && o.key == s.key);
                    if let Some(other) = other {
                        let rule = apart(&s, other);
                        if take(
                            relax,
                            &mut used,
                            &mut waived,
                            rule,
                            item,
                            format!("{} (refused because another scoped key of the batch holds the key)", rule.allows()),
                        ) {
                            continue;
                        }
                    }
                }
                // The same, refused for another payload than another
                // scoped key's record holds.
                // (A refusal runs nothing: an answer showing a run seen
                // before is a replay, never this refusal.)
                if !relax.is_strict()
                    && p.mismatch_status == Some(ans.status)
                    && fresh.is_none()
                    && !shows_a_run
                {
                    let print = crate::idem_model::payload_print(p.fingerprint, &req.body);
                    let other = state
                        .records()
                        .iter()
                        .find(|(other, r)| **other != s && other.key == s.key && r.print != print);
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
                let rule = match clause {
                    clause::MISSING_REQUIRED => Rule::MissingRefused,
                    clause::TOKEN => Rule::TokenRefused,
                    _ => Rule::MalformedRefused,
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
    let mut too_quick: Option<Judged> = None;
    // The record before the batch; with [[idem.replay.errors]] waived, the
    // one an error answer should have freed, still kept (or held).
    let mut priors: Vec<(Option<&Record>, bool, Option<Waiver>)> = vec![(prior, false, None)];
    if prior.is_none() && relax.allows(Rule::ErrorReleased) {
        if let Some(r) = state.released_record(scoped) {
            priors.push((
                Some(r),
                true,
                Some(Waiver {
                    rules: Rules::default().with(Rule::ErrorReleased),
                    request: idx.first().map(|&i| answered(&items[i])),
                    allowed: format!(
                        "a new run: the error answer {} order {} freed the key (errors released), never kept or held",
                        r.kept.status,
                        r.kept.order.map_or("-".into(), |o| o.to_string())
                    ),
                }),
            ));
        }
    }
    for ((prior, prior_held, prior_waiver), runners) in priors
        .iter()
        .flat_map(|p| runner_choices.iter().map(move |r| (p, r)))
    {
        let (prior, prior_held) = (*prior, *prior_held);
        let mut runs = Vec::new();
        let mut used = Rules::default();
        let mut waived = Vec::new();
        if let Some(w) = prior_waiver {
            used = used.union(w.rules);
            waived.push(w.clone());
        }
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
            // One choice of runners the answers' timing rules out (an
            // answer too quick to be a run): the other choices still
            // decide, and this stands only when none explains or fails.
            too_quick.get_or_insert(e);
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
                    held: r.released,
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
                    state,
                    (prior, prior_held),
                    &chain,
                    &others,
                    items,
                    &mut tried,
                    relax,
                    taken,
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
        let why = why.or(too_quick);
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
