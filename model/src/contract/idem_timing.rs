//! The timeline of one scoped key as difference constraints: its runs one
//! after another (each arriving once the key was freed, completing its
//! handler's `sleepMs` later, its record ending at expiry), every other
//! answer placed in a phase of that life, and Bellman-Ford deciding
//! whether some times fit them all. What `idem_place.rs` places answers in.

use crate::idem_blame::{Relax, Rules};
use crate::idem_model::{
    Handler, IdemModel, Item, Judged, Kept, Record, EXPIRY_MARGIN_MS, MAX_EXPLANATIONS,
};

/// A run of the key: an item, its handler, its payload and its kept answer.
#[derive(Debug, Clone)]
pub(crate) struct Run {
    pub(crate) item: usize,
    pub(crate) handler: Handler,
    pub(crate) print: String,
    pub(crate) alt_print: String,
    pub(crate) kept: Kept,
    pub(crate) released: bool,
    /// Kept by a waiver of `[[idem.replay.errors]]` though its error answer
    /// should have freed the key: replayed, or the key still held.
    pub(crate) held: bool,
}

/// A phase of the key's life an answer may be placed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// The record before the batch.
    Prior,
    /// The `k`-th run of the chosen order.
    Run(usize),
}

/// Where an answer is placed, and what that requires of its arrival.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    /// While run `k` is in flight.
    InFlight(usize),
    /// While phase's record is completed (from completion to its end).
    Done(Phase),
    /// Any time from run `k`'s arrival to its record's end, answered once
    /// it completed (a waiter).
    Whole(Phase),
    /// Any time from run `k`'s arrival to its record's end, answered at
    /// any time (another caller refused).
    Span(Phase),
}

/// A place an answer may take and the rules it waives there (none: the
/// strict model's), with what they would have allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Fit {
    pub(crate) place: Place,
    pub(crate) rules: Rules,
    pub(crate) allowed: String,
}

/// The difference constraints of a chain and placements: variables are
/// event times (index 0 is the clock's zero); an edge (from, to, w) says
/// `t[to] - t[from] <= w`.
pub(crate) struct Constraints {
    pub(crate) vars: usize,
    pub(crate) edges: Vec<(usize, usize, i64)>,
}

impl Constraints {
    pub(crate) fn var(&mut self) -> usize {
        self.vars += 1;
        self.vars - 1
    }
    /// `t[a] - t[b] <= w`.
    pub(crate) fn le(&mut self, a: usize, b: usize, w: i64) {
        self.edges.push((b, a, w));
    }
    pub(crate) fn within(&mut self, a: usize, lo: u64, hi: u64) {
        self.le(a, 0, hi as i64);
        self.le(0, a, -(lo as i64));
    }
    /// Bellman-Ford from the zero: no negative cycle means some times fit.
    pub(crate) fn feasible(&self) -> bool {
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
pub(crate) struct ChainVars {
    pub(crate) prior_end: Option<usize>,
    pub(crate) runs: Vec<(usize, usize, Option<usize>)>,
}

/// What the key's timeline may break, by waiver: runs that take a held
/// key ([[idem.effect.at-most-once]]), records kept past their expiry
/// ([[idem.expiry.honoured]]), a run of another payload than the key's
/// holder once it completed ([[idem.fingerprint.mismatch]]) or while it
/// is in flight ([[idem.concurrent.other-payload]]), a run of another
/// caller on a key not scoped by caller ([[idem.scope.no-leak]]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Timeline {
    pub(crate) runs_on_held_key: bool,
    pub(crate) kept_past_expiry: bool,
    pub(crate) other_payload_after: bool,
    pub(crate) other_payload_in_flight: bool,
    pub(crate) other_caller_runs: bool,
}

pub(crate) fn chain_constraints(
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
    // The key's holder: its payload, arrival (none for the prior record)
    // and completion.
    let mut holder: Option<(&str, Option<usize>, usize, &str)> = None;
    let prior_end = match prior {
        None => None,
        Some(r) => {
            let done = c.var();
            c.within(done, r.completed_from_ms, r.completed_by_ms);
            let end = ends(&mut c, done);
            freed = end.map(Some);
            holder = Some((r.print.as_str(), None, done, r.kept.caller.as_str()));
            end
        }
    };
    let compares = state.profile().fingerprint != crate::idem_profile::Fingerprint::None;
    let mut runs = Vec::new();
    for run in chain {
        let w = items[run.item].2;
        let a = c.var();
        c.within(a, w.sent_ms, w.arrived_by_ms.min(w.answered_ms));
        let other = holder.filter(|(print, ..)| compares && *print != run.print);
        let caller = holder.filter(|(.., caller)| *caller != run.kept.caller);
        match (other, caller) {
            _ if timeline.runs_on_held_key => {}
            (_, Some(_)) if timeline.other_caller_runs => {}
            (Some((_, _, done, _)), _) if timeline.other_payload_after => c.le(done, a, 0),
            (Some((_, arrived, _, _)), _) if timeline.other_payload_in_flight => {
                if let Some(arrived) = arrived {
                    c.le(arrived, a, 0);
                }
            }
            _ => {
                if let Some(end) = freed? {
                    c.le(end, a, 0);
                }
            }
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
        holder = Some((run.print.as_str(), Some(a), done, run.kept.caller.as_str()));
    }
    Some((c, ChainVars { prior_end, runs }))
}

/// Places `others[at..]` depth first: the rules waived by the first fit
/// within `relax` (`chosen` holds each answer's fit), or `None`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn place_rest(
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
            Place::Whole(Phase::Prior) | Place::Span(Phase::Prior) => {
                if let Some(end) = vars.prior_end {
                    c.le(x, end, 0);
                }
            }
            Place::Span(Phase::Run(k)) => {
                let (a, _, end) = vars.runs[k];
                c.le(a, x, 0);
                if let Some(end) = end {
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
