//! The strict model's account of an answer it cannot place (the message
//! a violation carries before blame picks its clauses), and what differs
//! between an answer and a replay: shared by the batch judge
//! (`idem_batch.rs`) and the placement of answers (`idem_place.rs`).

use crate::idem_blame::{Rule, Rules};
use crate::idem_model::{
    caller_of, clause, echo_of, order_of, shown_answer, IdemAnswer, IdemModel, IdemRequest, Item,
    Judged, Kept, KeyRead, Outcome,
};
use crate::idem_profile::Fingerprint;

thread_local! {
    /// Set while blame searches for the clauses to waive: the messages of
    /// its many candidate explanations are never read (the one it picks
    /// is searched again with them), and building them was most of the
    /// search's time (`reqkey fuzz` on a racy app: over half its CPU).
    static QUIET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// `f` with the requests' and answers' texts left empty in every message.
pub(crate) fn quietly<T>(f: impl FnOnce() -> T) -> T {
    let before = QUIET.with(|q| q.replace(true));
    let out = f();
    QUIET.with(|q| q.set(before));
    out
}

/// Whether messages are being left empty ([`quietly`]).
pub(crate) fn quiet() -> bool {
    QUIET.with(std::cell::Cell::get)
}

pub(crate) fn fail(clause: &'static str, message: String) -> Judged {
    Judged::Violation(crate::idem_model::violation(clause, message))
}

/// The request and its answer, as a waiver names them.
pub(crate) fn answered(item: &Item) -> String {
    if quiet() {
        return String::new();
    }
    format!("{} answered {}", label(&item.0), shown_answer(&item.1))
}

pub(crate) fn label(req: &IdemRequest) -> String {
    if quiet() {
        return String::new();
    }
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

/// Whether `ans` replays `kept` (status, order, the handler's header, the
/// echo, the replay mark): `None` when it does, else what differs.
pub(crate) fn replay_mismatch(
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
pub(crate) fn replay_rules(
    state: &IdemModel,
    kept: &Kept,
    ans: &IdemAnswer,
) -> Option<(Rules, String)> {
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
pub(crate) fn replay_of(kept: &Kept) -> String {
    format!(
        "the first answer replayed ({} order {})",
        kept.status,
        kept.order.map_or("-".into(), |o| o.to_string())
    )
}

/// Why one answer fits nowhere in a chain (a batch of several).
pub(crate) fn explain_single_in(state: &IdemModel, runs: usize, item: &Item) -> Judged {
    if runs == 0 {
        return explain_single(state, item);
    }
    let (req, ans, _) = item;
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
pub(crate) fn explain_single(state: &IdemModel, item: &Item) -> Judged {
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
pub(crate) fn why_not_run(
    state: &IdemModel,
    req: &IdemRequest,
    ans: &IdemAnswer,
) -> (&'static str, String) {
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
