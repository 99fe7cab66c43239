//! Where each answer of one scoped key may be placed: as a run (its
//! handler's answer), or in a phase of the key's life (a refusal while a
//! run is in flight, a replay of a completed one, another payload or
//! caller refused), each place with the rules it waives; and the search
//! that places them all in one order of the runs (`idem_timing.rs`).

use crate::idem_blame::{Relax, Rule, Rules, Waiver};
use crate::idem_model::{
    alt_payload_print, caller_of, clause, echo_of, order_of, releases, shown_answer, waits,
    IdemAnswer, IdemModel, Item, Judged, Kept, Record, Scoped,
};
use crate::idem_profile::{Concurrent, Fingerprint};
use crate::idem_timing::{chain_constraints, place_rest, Fit, Phase, Place, Run, Timeline};
use crate::idem_why::{answered, explain_single_in, fail, label, replay_of, replay_rules};

/// One explanation of a scoped key's requests: which of them ran, in
/// which order, and what the key holds after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeyStory {
    /// Items that ran, in order, with whether their key was released.
    pub(crate) runs: Vec<(usize, bool)>,
    /// The record after the batch (`None`: freed or never taken).
    pub(crate) after: Option<Record>,
    /// The record the last run would have kept had its error answer not
    /// freed the key.
    pub(crate) released_after: Option<Record>,
    /// Whether the record before the batch was used (kept as it was).
    pub(crate) keep_prior: bool,
    /// The rules it waived (none when strict) and how.
    pub(crate) used: Rules,
    pub(crate) waived: Vec<Waiver>,
}

impl KeyStory {
    pub(crate) fn apply(&self, n: &mut IdemModel, scoped: &Scoped, items: &[Item]) {
        for &(i, released) in &self.runs {
            if let Some(o) = order_of(&items[i].1) {
                n.count_run(&items[i].0, o, released);
            }
        }
        if self.keep_prior {
            return;
        }
        // Freed by an error answer exactly when the last run released it.
        n.set_freed(scoped, self.released_after.clone());
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

/// `item` as a run: its answer must be its handler's (a waiver where
/// `relax` admits one).
pub(crate) fn as_run(
    state: &IdemModel,
    item: &Item,
    relax: Relax,
) -> Result<(Run, Option<Waiver>), Judged> {
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
            held: false,
        },
        waiver,
    ))
}

/// The places an answer that did not run may take, given the chain, with
/// the rules each waives (only those `relax` admits).
pub(crate) fn places(
    state: &IdemModel,
    (prior, prior_held): (Option<&Record>, bool),
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
                prior_held,
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
                r.held,
            )
        }));
    for (phase, rprint, ralt, kept, released, held) in phases {
        if kept.caller != req.caller {
            // Another caller on a key not scoped by caller: refused, never shown the answer.
            let leaks = order_of(ans) == kept.order || caller_of(ans) == Some(kept.caller.as_str());
            if ans.status >= 400 && !leaks {
                add(Place::Span(phase), none, String::new());
            } else if !relax.is_strict() {
                add(
                    Place::Span(phase),
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
        if !relax.is_strict() && (ralt == alt) != same {
            readings.push((!same, Some(Rule::FingerprintEquivalence)));
        }
        if !relax.is_strict() && !same {
            readings.push((true, Some(Rule::MismatchRefused)));
        }
        for (same, reading) in readings {
            let phase = (phase, released, held);
            for fit in phase_places(state, phase, &kept, same, ans, refusal, relax) {
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
pub(crate) fn phase_places(
    state: &IdemModel,
    (phase, released, held): (Phase, bool, bool),
    kept: &Kept,
    same: bool,
    ans: &IdemAnswer,
    refusal: impl Fn(Option<u16>) -> bool,
    relax: Relax,
) -> Vec<Fit> {
    let p = state.profile();
    let none = Rules::default();
    // Under `none` another payload is compared only by a waiver of
    // [[idem.fingerprint.equivalence]]: refused as the draft's 422.
    let mismatch = p
        .mismatch_status
        .or((p.fingerprint == Fingerprint::None).then_some(422));
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
    // An error answer kept by a waiver of [[idem.replay.errors]]: the key
    // may also stay held (refused concurrentStatus, the waiver paid).
    if held && refusal(p.concurrent_status) {
        add(Place::Done(phase), bare, bare_allows());
    }
    match phase {
        Phase::Prior => {
            if let Some((rules, allowed)) = replay.clone().filter(|_| same) {
                add(Place::Done(phase), rules, allowed);
            }
            if !same && refusal(mismatch) {
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
            if !same && refusal(mismatch) {
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

/// Places every other answer in the chain (depth first, checking the
/// constraints at each step): the story, or why none fits. `taken`: the
/// rules the runs waived already, and how.
#[allow(clippy::too_many_arguments)]
pub(crate) fn place_all(
    state: &IdemModel,
    (prior, prior_held): (Option<&Record>, bool),
    chain: &[&Run],
    others: &[usize],
    items: &[Item],
    tried: &mut usize,
    relax: Relax,
    taken: (Rules, Vec<Waiver>),
) -> Result<KeyStory, Judged> {
    let mut why: Option<Judged> = None;
    let expires = state.profile().expiry_ms.is_some();
    // Whether a run's payload differs from the one before it (a waiver of
    // a fingerprint clause may let it run).
    let prints: Vec<&str> = prior
        .map(|r| r.print.as_str())
        .into_iter()
        .chain(chain.iter().map(|r| r.print.as_str()))
        .collect();
    let other_payloads =
        state.profile().fingerprint != Fingerprint::None && prints.windows(2).any(|w| w[0] != w[1]);
    let callers: Vec<&str> = prior
        .map(|r| r.kept.caller.as_str())
        .into_iter()
        .chain(chain.iter().map(|r| r.kept.caller.as_str()))
        .collect();
    let other_callers = callers.windows(2).any(|w| w[0] != w[1]);
    for bits in 0u8..32 {
        let timeline = Timeline {
            runs_on_held_key: bits & 1 != 0,
            kept_past_expiry: bits & 2 != 0,
            other_payload_after: bits & 4 != 0,
            other_payload_in_flight: bits & 8 != 0,
            other_caller_runs: bits & 16 != 0,
        };
        let Timeline {
            runs_on_held_key,
            kept_past_expiry,
            ..
        } = timeline;
        if bits != 0 && relax.is_strict() {
            break;
        }
        let mut used = taken.0;
        let mut waived = taken.1.clone();
        if timeline.other_caller_runs && (!other_callers || !relax.allows(Rule::CallerNotShown)) {
            continue;
        }
        for (on, rule) in [
            (timeline.other_payload_after, Rule::MismatchRefused),
            (timeline.other_payload_in_flight, Rule::OtherPayloadRefused),
            (timeline.other_caller_runs, Rule::CallerNotShown),
        ] {
            if on {
                used = used.with(rule);
                waived.push(Waiver {
                    rules: Rules::default().with(rule),
                    request: chain.last().map(|r| answered(&items[r.item])),
                    allowed: format!("{}, never a run of it", rule.allows()),
                });
            }
        }
        if (timeline.other_payload_after || timeline.other_payload_in_flight)
            && (!other_payloads
                || (timeline.other_payload_after && !relax.allows(Rule::MismatchRefused))
                || (timeline.other_payload_in_flight && !relax.allows(Rule::OtherPayloadRefused))
                || (timeline.other_payload_after && timeline.other_payload_in_flight))
        {
            continue;
        }
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
            let pl = places(state, (prior, prior_held), chain, &items[i], relax);
            if pl.is_empty() {
                nowhere = Some(i);
                break;
            }
            cands.push(pl);
        }
        if let Some(i) = nowhere {
            why.get_or_insert(explain_single_in(state, chain.len(), &items[i]));
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
        let record = chain.last().map(|r| {
            let w = items[r.item].2;
            Record {
                print: r.print.clone(),
                alt_print: r.alt_print.clone(),
                kept: r.kept.clone(),
                completed_from_ms: w.sent_ms.saturating_add(r.handler.sleep_ms),
                completed_by_ms: w.answered_ms,
            }
        });
        let released = chain.last().is_some_and(|r| r.released);
        let (after, released_after) = if released {
            (None, record)
        } else {
            (record, None)
        };
        return Ok(KeyStory {
            runs: chain.iter().map(|r| (r.item, r.released)).collect(),
            after,
            released_after,
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
