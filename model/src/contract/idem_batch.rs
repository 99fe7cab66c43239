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

use std::collections::BTreeMap;

use crate::idem_model::{
    caller_of, clause, echo_of, order_of, releases, shown_answer, waits, Handler, IdemAnswer,
    IdemModel, IdemRequest, Judged, Kept, KeyRead, Outcome, Record, Scoped, Violation, Window,
    EXPIRY_MARGIN_MS, MAX_EXPLANATIONS,
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
/// explain every answer, or why none does.
pub fn judge(states: &[IdemModel], items: &[Item]) -> Result<Vec<IdemModel>, Judged> {
    let mut out: Vec<IdemModel> = Vec::new();
    let mut error: Option<Judged> = None;
    for state in states {
        match explain(state, items) {
            Ok(next) => {
                for n in next {
                    if !out.contains(&n) {
                        out.push(n);
                    }
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

fn fail(clause: &'static str, message: String) -> Judged {
    Judged::Violation(Violation { clause, message })
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

/// What one state explains of `items`: every successor state.
fn explain(state: &IdemModel, items: &[Item]) -> Result<Vec<IdemModel>, Judged> {
    let p = state.profile().clone();
    let mut base = state.clone();
    let mut groups: BTreeMap<Scoped, Vec<usize>> = BTreeMap::new();
    for (i, (req, ans, w)) in items.iter().enumerate() {
        let Some(handler) = crate::idem_model::handler_of(&req.method, &req.path, &req.body) else {
            continue;
        };
        match state.read_key(req) {
            KeyRead::Key(s) => groups.entry(s).or_default().push(i),
            KeyRead::Unjudged => {
                // What such a key does is not judged; a run still counts.
                if let Some(o) = order_of(ans).filter(|o| base.is_fresh(*o)) {
                    base.count_run(req, o, false);
                }
            }
            KeyRead::Missing if !p.key_required => {
                let fresh = order_of(ans).filter(|o| base.is_fresh(*o));
                match fresh {
                    Some(o) if ans.status == handler.status() => base.count_run(req, o, false),
                    _ => {
                        return Err(fail(
                            clause::MISSING_OPTIONAL,
                            format!(
                                "{}: without a key under keyRequired false it must run (status {}, a new order); the app answered {}",
                                label(req),
                                handler.status(),
                                shown_answer(ans)
                            ),
                        ))
                    }
                }
            }
            KeyRead::Missing | KeyRead::Malformed(_) => {
                let Some(Outcome::Refused { status, clause }) =
                    state.outcomes(req, *w).into_iter().next()
                else {
                    continue;
                };
                if let Some(o) = order_of(ans).filter(|o| base.is_fresh(*o)) {
                    return Err(fail(
                        clause,
                        format!(
                            "{}: must be refused {status} and run nothing; it ran (order {o})",
                            label(req)
                        ),
                    ));
                }
                if ans.status != status {
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
                    return Err(fail(
                        clause::ERROR_BODY,
                        format!("{}: the refusal {status} has no JSON body", label(req)),
                    ));
                }
            }
        }
    }
    // An order shown in two scoped keys' answers: one key's answer reached another.
    let mut owner: BTreeMap<u64, &Scoped> = BTreeMap::new();
    for (s, idx) in &groups {
        for &i in idx {
            if let Some(o) = order_of(&items[i].1).filter(|o| state.is_fresh(*o)) {
                if let Some(other) = owner.insert(o, s) {
                    if other != s {
                        return Err(cross_scope(&items[i].0, &items[i].1, o, other, s));
                    }
                }
            }
        }
    }
    let mut states = vec![base];
    for (scoped, idx) in &groups {
        let alternatives = explain_key(state, scoped, idx, items)?;
        let mut next = Vec::new();
        for s in &states {
            for alt in &alternatives {
                let mut n = s.clone();
                alt.apply(&mut n, scoped, items);
                if !next.contains(&n) {
                    next.push(n);
                }
            }
        }
        if next.len() > MAX_EXPLANATIONS {
            return Err(Judged::NoVerdict(format!(
                "more than {MAX_EXPLANATIONS} states explain the batch"
            )));
        }
        states = next;
    }
    Ok(states)
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

/// The answers of one scoped key, explained: every story that fits.
fn explain_key(
    state: &IdemModel,
    scoped: &Scoped,
    idx: &[usize],
    items: &[Item],
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
        let mut bad = None;
        for &r in runners {
            match as_run(state, &items[r]) {
                Ok(run) => runs.push(Run { item: r, ..run }),
                Err(e) => bad = Some(e),
            }
        }
        if let Some(e) = bad {
            why.get_or_insert(e);
            continue;
        }
        let others: Vec<usize> = idx
            .iter()
            .copied()
            .filter(|i| !runners.contains(i))
            .collect();
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
            match place_all(state, prior, &chain, &others, items, &mut tried) {
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
        }
    }
    if stories.is_empty() {
        return Err(match why {
            Some(e @ Judged::NoVerdict(_)) => e,
            _ if idx.len() == 1 => explain_single(state, &items[idx[0]]),
            _ => {
                let runs = by_order.len();
                // Several runs that no order frees one after another are a
                // double effect; otherwise the first answer that fits no
                // phase names the clause.
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
                if let Some(Judged::Violation(v)) = why.filter(|_| runs < 2) {
                    msg.push_str(&format!("\n  (one reason: [{}] {})", v.clause, v.message));
                }
                fail(clause, msg)
            }
        });
    }
    Ok(stories)
}

/// `item` as a run: its answer must be its handler's.
fn as_run(state: &IdemModel, item: &Item) -> Result<Run, Judged> {
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
    if ans.status != handler.status() {
        return Err(fail(
            clause::REPLAY,
            format!(
                "{}: answered {} with a new order; a run answers {}",
                label(req),
                shown_answer(ans),
                handler.status()
            ),
        ));
    }
    if p.replay_header.is_some() && ans.replayed {
        return Err(fail(
            clause::REPLAY_HEADER,
            format!(
                "{}: a first execution (a new order) carries the replay header",
                label(req)
            ),
        ));
    }
    Ok(Run {
        item: 0,
        handler,
        print: crate::idem_model::payload_print(p.fingerprint, &req.body),
        kept: Kept {
            status: ans.status,
            order: order_of(ans),
            order_header: ans.order_header.clone(),
            caller: req.caller.clone(),
            echo: echo_of(ans),
        },
        released: releases(p, ans.status),
    })
}

/// Whether `ans` replays `kept` (status, order, the handler's header, the
/// echo, the replay mark): `None` when it does, else what differs.
fn replay_mismatch(
    state: &IdemModel,
    kept: &Kept,
    ans: &IdemAnswer,
) -> Option<(&'static str, String)> {
    let cl = if kept.status >= 400 {
        clause::REPLAY_ERRORS
    } else {
        clause::REPLAY
    };
    if ans.status != kept.status || order_of(ans) != kept.order {
        return Some((
            cl,
            format!(
                "a replay must answer {} order {}",
                kept.status,
                kept.order.map_or("-".into(), |o| o.to_string())
            ),
        ));
    }
    if kept.order_header.is_some() && ans.order_header != kept.order_header {
        return Some((
            cl,
            format!(
                "a replay must carry the handler's X-Reqkey-Order {}",
                kept.order_header.as_deref().unwrap_or("")
            ),
        ));
    }
    if kept.echo.is_some() && echo_of(ans) != kept.echo {
        return Some((cl, "a replay must carry the first answer's echo".into()));
    }
    if caller_of(ans).is_some_and(|c| c != kept.caller) {
        return Some((clause::NO_LEAK, "the replay names another caller".into()));
    }
    if state.profile().replay_header.is_some() && !ans.replayed {
        return Some((
            clause::REPLAY_HEADER,
            "a replay must carry the declared replay header".into(),
        ));
    }
    None
}

/// The places an answer that did not run may take, given the chain.
fn places(state: &IdemModel, prior: Option<&Record>, chain: &[&Run], item: &Item) -> Vec<Place> {
    let (req, ans, _) = item;
    let p = state.profile();
    let print = crate::idem_model::payload_print(p.fingerprint, &req.body);
    let compares = p.fingerprint != Fingerprint::None;
    let refusal = |status: Option<u16>| status == Some(ans.status) && ans.json.is_some();
    let mut out = Vec::new();
    let phases = prior
        .map(|r| (Phase::Prior, r.print.clone(), r.kept.clone(), false))
        .into_iter()
        .chain(
            chain
                .iter()
                .enumerate()
                .map(|(k, r)| (Phase::Run(k), r.print.clone(), r.kept.clone(), r.released)),
        );
    for (phase, rprint, kept, released) in phases {
        let same_payload = !compares || rprint == print;
        if kept.caller != req.caller {
            // Another caller on a key not scoped by caller: refused, never shown the answer.
            let leaks = order_of(ans) == kept.order || caller_of(ans) == Some(kept.caller.as_str());
            if ans.status >= 400 && !leaks {
                out.push(Place::Whole(phase));
            }
            continue;
        }
        let replays = same_payload && replay_mismatch(state, &kept, ans).is_none();
        match phase {
            Phase::Prior => {
                if replays {
                    out.push(Place::Done(phase));
                }
                if !same_payload && refusal(p.mismatch_status) {
                    out.push(Place::Done(phase));
                }
            }
            Phase::Run(k) => {
                if replays && waits(p) {
                    out.push(Place::Whole(phase));
                } else if replays && !released {
                    out.push(Place::Done(phase));
                }
                if p.concurrent == Concurrent::Conflict && refusal(p.concurrent_status) {
                    out.push(Place::InFlight(k));
                }
                if !same_payload && refusal(p.mismatch_status) {
                    out.push(Place::InFlight(k));
                    if !released {
                        out.push(Place::Done(phase));
                    }
                }
            }
        }
    }
    out.dedup();
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

fn chain_constraints(
    state: &IdemModel,
    prior: Option<&Record>,
    chain: &[&Run],
    items: &[Item],
) -> Option<(Constraints, ChainVars)> {
    let expiry = state.profile().expiry_ms.map(|e| e as i64);
    let margin = EXPIRY_MARGIN_MS as i64;
    let mut c = Constraints {
        vars: 1,
        edges: Vec::new(),
    };
    // When a completed record ends: it expires between `expiryMs` and
    // `expiryMs` + the margin after it completed (never, without expiry).
    let ends = |c: &mut Constraints, done: usize| {
        expiry.map(|e| {
            let end = c.var();
            c.le(done, end, -e);
            c.le(end, done, e + margin);
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
        let since = freed?;
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
/// constraints at each step): the story, or why none fits.
fn place_all(
    state: &IdemModel,
    prior: Option<&Record>,
    chain: &[&Run],
    others: &[usize],
    items: &[Item],
    tried: &mut usize,
) -> Result<KeyStory, Judged> {
    let Some((mut c, vars)) = chain_constraints(state, prior, chain, items) else {
        return Err(fail(
            clause::AT_MOST_ONCE,
            format!(
                "{} ran while the key was held for good (no expiry)",
                chain
                    .first()
                    .map_or(String::new(), |r| label(&items[r.item].0))
            ),
        ));
    };
    if !c.feasible() {
        return Err(fail(
            clause::AT_MOST_ONCE,
            format!(
                "{} runs of one key cannot have run one after another, each after the key was freed",
                chain.len()
            ),
        ));
    }
    let mut cands = Vec::new();
    for &i in others {
        let pl = places(state, prior, chain, &items[i]);
        if pl.is_empty() {
            return Err(explain_single_in(state, prior, chain, &items[i]));
        }
        cands.push(pl);
    }
    if !place_rest(&mut c, &vars, &cands, others, items, 0, tried)? {
        return Err(fail(
            clause::CONCURRENT,
            "no time of the answers fits the key's runs".into(),
        ));
    }
    let after = match chain.last() {
        None => None,
        Some(r) if r.released => None,
        Some(r) => {
            let w = items[r.item].2;
            Some(Record {
                print: r.print.clone(),
                kept: r.kept.clone(),
                completed_from_ms: w.sent_ms.saturating_add(r.handler.sleep_ms),
                completed_by_ms: w.answered_ms,
            })
        }
    };
    Ok(KeyStory {
        runs: chain.iter().map(|r| (r.item, r.released)).collect(),
        after,
        keep_prior: chain.is_empty(),
    })
}

fn place_rest(
    c: &mut Constraints,
    vars: &ChainVars,
    cands: &[Vec<Place>],
    others: &[usize],
    items: &[Item],
    at: usize,
    tried: &mut usize,
) -> Result<bool, Judged> {
    if at == others.len() {
        return Ok(true);
    }
    let w = items[others[at]].2;
    for place in &cands[at] {
        *tried += 1;
        if *tried > MAX_EXPLANATIONS {
            return Err(Judged::NoVerdict(format!(
                "more than {MAX_EXPLANATIONS} placements of one key's answers to try"
            )));
        }
        let mark = (c.vars, c.edges.len());
        let x = c.var();
        c.within(x, w.sent_ms, w.arrived_by_ms.min(w.answered_ms));
        match *place {
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
        if c.feasible() && place_rest(c, vars, cands, others, items, at + 1, tried)? {
            return Ok(true);
        }
        c.vars = mark.0;
        c.edges.truncate(mark.1);
    }
    Ok(false)
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
