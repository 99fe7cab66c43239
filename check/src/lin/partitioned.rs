//! A history held for checking only, by session, each session let go once it is decided.
//!
//! # Why
//!
//! [`super::PreparedHistory`] keeps, beside the typed operations the
//! search walks, each operation's request and answer as text so that a
//! counterexample can be shown. For a file of a million operations that
//! copy is most of the memory, and it is read for one session at most
//! (the failing one). [`PartitionedHistory`] keeps only the typed
//! operations, grouped by session as they are read; a counterexample's
//! operations are asked of the caller ([`check_partitioned`]'s `fetch`),
//! who reads them again from the file. Each session's operations are
//! dropped as soon as its search says linearizable, so the memory of the
//! sessions decided goes back to the allocator while the others are
//! searched.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use super::each::{lone_failure, search_each};
use super::explain::{atomicity_clauses, explain};
use super::item::Item;
use super::minimize::minimize;
use super::pending::{out_of_budget_reason, over_memory_reason};
use super::prepare::{prepare, Prepared};
use super::search::{search, Search};
use super::timeline::{render_with, shown_lines, summarize_answer, summarize_request, Line, Span};
use super::types::{
    CheckOptions, CheckReport, Counterexample, Operation, Verdict, MIN_CHECK_STEPS,
};

/// The first operation (by index) that fails on its own: its index, why,
/// its session, and the atomicity clauses it breaks.
type Lone = (usize, String, Option<String>, Vec<&'static str>);

/// Where an operation without a session (a malformed request) is.
const NOWHERE: (u32, u32) = (u32::MAX, u32::MAX);

/// One session's operations: their indices in the history, and typed.
#[derive(Debug)]
struct Part {
    session: Box<str>,
    indices: Vec<usize>,
    ops: Vec<Prepared>,
    /// The history text its operations were read from, in bytes (what
    /// `reqkey check history` bounds per session).
    bytes: u64,
}

/// A history read for checking only (see the module docs).
#[derive(Debug)]
pub struct PartitionedHistory {
    parts: Vec<Part>,
    len: usize,
    /// The first operation (by index) that fails on its own, and why.
    lone: Option<Lone>,
}

impl PartitionedHistory {
    /// Operations read.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Sessions (the partitions the check searches).
    pub fn sessions(&self) -> usize {
        self.parts.len()
    }
}

/// Builds a [`PartitionedHistory`] one operation at a time.
#[derive(Debug, Default)]
pub struct PartitionedHistoryBuilder {
    sessions: HashMap<Box<str>, u32>,
    parts: Vec<Part>,
    /// (partition, position) of each operation, by index.
    located: Vec<(u32, u32)>,
    lone: Option<Lone>,
}

impl PartitionedHistoryBuilder {
    /// Operations given so far.
    pub fn len(&self) -> usize {
        self.located.len()
    }

    pub fn is_empty(&self) -> bool {
        self.located.is_empty()
    }

    /// Sets operation `index` to `o`: replaces it when it was given
    /// before, else appends it (as [`super::PreparedHistoryBuilder::set`]).
    pub fn set(&mut self, index: usize, o: &Operation) {
        self.set_sized(index, o, 0);
    }

    /// [`Self::set`] for an operation read from `bytes` of text, counted
    /// to its session: the session and the bytes it holds so far (`None`
    /// for an operation without one).
    pub fn set_sized(&mut self, index: usize, o: &Operation, bytes: u64) -> Option<(&str, u64)> {
        let p = prepare(o);
        if let Some(reason) = lone_failure(&p) {
            if self
                .lone
                .as_ref()
                .is_none_or(|(first, _, _, _)| index < *first)
            {
                let session = p.op.as_ref().map(|op| op.session_id().to_owned());
                let atomicity = atomicity_clauses(std::slice::from_ref(&p), &[0]);
                self.lone = Some((index, reason, session, atomicity));
            }
        }
        if let Some(&(part, pos)) = self.located.get(index) {
            if (part, pos) == NOWHERE {
                return None;
            }
            let target = &mut self.parts[part as usize];
            target.ops[pos as usize] = p;
            target.bytes = target.bytes.saturating_add(bytes);
            return Some((&target.session, target.bytes));
        }
        let Some(op) = &p.op else {
            self.located.push(NOWHERE);
            return None;
        };
        let part = match self.sessions.get(op.session_id()) {
            Some(&part) => part,
            None => {
                let part = u32::try_from(self.parts.len()).unwrap_or(u32::MAX - 1);
                let session: Box<str> = op.session_id().into();
                self.sessions.insert(session.clone(), part);
                self.parts.push(Part {
                    session,
                    indices: Vec::new(),
                    ops: Vec::new(),
                    bytes: 0,
                });
                part
            }
        };
        let target = &mut self.parts[part as usize];
        let pos = u32::try_from(target.ops.len()).unwrap_or(u32::MAX - 1);
        target.indices.push(index);
        target.ops.push(p);
        target.bytes = target.bytes.saturating_add(bytes);
        self.located.push((part, pos));
        let target = &self.parts[part as usize];
        Some((&target.session, target.bytes))
    }

    pub fn finish(self) -> PartitionedHistory {
        let len = self.located.len();
        drop(self.located);
        drop(self.sessions);
        let mut parts = self.parts;
        for part in &mut parts {
            // In place for a large vector (the allocator shrinks the
            // extent): no second copy of a session is made.
            part.indices.shrink_to_fit();
            part.ops.shrink_to_fit();
        }
        // Session order, as `check_prepared` reports the first failing one.
        parts.sort_by(|a, b| a.session.cmp(&b.session));
        PartitionedHistory {
            parts,
            len,
            lone: self.lone,
        }
    }
}

/// Reads the operations at some indices again, for a report.
pub type Fetch<'a> = dyn FnMut(&[usize]) -> Vec<Operation> + 'a;

/// Checks a history held by session, as [`super::check_prepared`] does
/// (the same verdict, steps and report); `fetch(indices)` gives the
/// operations at those indices (sorted), read again for a report's
/// timelines. Without `fetch` the timelines are left empty (a verdict
/// alone: nothing is read again).
pub fn check_partitioned(
    history: PartitionedHistory,
    opts: CheckOptions,
    mut fetch: Option<&mut Fetch<'_>>,
) -> CheckReport {
    if let Some((i, reason, session, atomicity)) = history.lone {
        let ops = by_index(&[i], &mut fetch);
        let timeline = render(&ops, &[i], &[], |i| ops.get(&i).map(Span::of));
        return CheckReport {
            verdict: Verdict::NotLinearizable(Box::new(Counterexample {
                session,
                reason,
                partition: vec![i],
                minimal: vec![i],
                minimal_in_flight: vec![],
                timeline: timeline.clone(),
                minimal_timeline: timeline,
                minimize_steps: 0,
                anomaly: None,
                atomicity,
            })),
            steps: 0,
            partitions: 0,
            largest_cache: 0,
            threads: 1,
        };
    }
    let n_partitions = history.parts.len();
    let sizes: Vec<usize> = history.parts.iter().map(|p| p.ops.len()).collect();
    let cells: Vec<Mutex<Option<Part>>> = history
        .parts
        .into_iter()
        .map(|p| Mutex::new(Some(p)))
        .collect();
    let search_one = |k: usize, remaining: u64| {
        let Some(part) = cells[k].lock().ok().and_then(|mut c| c.take()) else {
            return (Search::Linearizable, 0, 0);
        };
        let items: Vec<Item<'_>> = (0..part.ops.len())
            .map(|j| Item::of(&part.ops, j, false))
            .collect();
        let outcome = search(&items, remaining, opts.over_memory);
        drop(items);
        if !matches!(outcome.0, Search::Linearizable) {
            // Kept for the report; a decided session is let go here.
            if let Ok(mut cell) = cells[k].lock() {
                *cell = Some(part);
            }
        }
        outcome
    };
    let (outcomes, threads) = search_each(&sizes, &opts, &search_one);
    let mut steps = 0u64;
    let mut largest_cache = 0usize;
    for o in outcomes.iter().flatten() {
        steps += o.used;
        largest_cache = largest_cache.max(o.cached);
    }
    let decisive = outcomes.iter().enumerate().find_map(|(k, o)| match o {
        Some(o) if !matches!(o.search, Search::Linearizable) => Some((k, o)),
        _ => None,
    });
    let part = decisive.and_then(|(k, _)| cells[k].lock().ok().and_then(|mut c| c.take()));
    let (Some((_, outcome)), Some(part)) = (decisive, part) else {
        return CheckReport {
            verdict: Verdict::Linearizable,
            steps,
            partitions: n_partitions,
            largest_cache,
            threads,
        };
    };
    drop(cells);
    let local: Vec<usize> = (0..part.ops.len()).collect();
    if matches!(outcome.search, Search::OutOfBudget | Search::OverMemory) {
        let reason = if matches!(outcome.search, Search::OverMemory) {
            over_memory_reason(&part.session)
        } else {
            out_of_budget_reason(&part.ops, &part.session, &local, opts.budget_steps)
        };
        return CheckReport {
            verdict: Verdict::Unknown { reason },
            steps,
            partitions: n_partitions,
            largest_cache,
            threads,
        };
    }
    let mut minimize_steps = 0;
    let (minimal, in_flight) = if opts.minimize {
        let per_check = outcome.used.saturating_mul(4).max(MIN_CHECK_STEPS);
        minimize(&part.ops, &local, &opts, per_check, &mut minimize_steps)
    } else {
        (local.clone(), vec![])
    };
    let dead = if opts.minimize {
        explain(&part.ops, &minimal, &in_flight, opts.over_memory)
    } else {
        None
    };
    let atomicity = atomicity_clauses(&part.ops, &minimal);
    let global = |l: &[usize]| -> Vec<usize> { l.iter().map(|&j| part.indices[j]).collect() };
    let (minimal, in_flight) = (global(&minimal), global(&in_flight));
    // Each operation's place in the session, by its index in the history
    // (the indices are read in order, so sorted; a map otherwise).
    let local: Box<dyn Fn(usize) -> Option<usize>> = if part.indices.windows(2).all(|w| w[0] < w[1])
    {
        Box::new(|i| part.indices.binary_search(&i).ok())
    } else {
        let map: HashMap<usize, usize> = part
            .indices
            .iter()
            .enumerate()
            .map(|(j, &i)| (i, j))
            .collect();
        Box::new(move |i| map.get(&i).copied())
    };
    let span = |i: usize| {
        local(i).map(|j| {
            let p = &part.ops[j];
            Span {
                invoke_ns: p.invoke_ns,
                return_ns: p.end_ns,
                answered: p.end_ns != u64::MAX,
            }
        })
    };
    let placed = |i: usize| {
        span(i).unwrap_or(Span {
            invoke_ns: 0,
            return_ns: 0,
            answered: false,
        })
    };
    // Read again: the lines the two timelines show and the anomaly's
    // operation, at most a few hundred whatever the session's length.
    let mut wanted = shown_lines(&part.indices, placed);
    wanted.extend(shown_lines(&minimal, placed));
    if let Some(d) = &dead {
        wanted.push(part.indices[d.at]);
    }
    wanted.sort_unstable();
    wanted.dedup();
    let ops = by_index(&wanted, &mut fetch);
    let anomaly = dead.and_then(|d| {
        let o = ops.get(&part.indices[d.at])?;
        let request = summarize_request(&o.request);
        let answer = o
            .answer
            .as_ref()
            .map_or_else(|| "(no answer)".to_owned(), summarize_answer);
        Some(d.anomaly(|j| part.indices[j], &request, &answer))
    });
    CheckReport {
        verdict: Verdict::NotLinearizable(Box::new(Counterexample {
            session: Some(part.session.to_string()),
            reason:
                "no order of the operations consistent with real time gives every answer the spec's"
                    .to_owned(),
            timeline: render(&ops, &part.indices, &[], span),
            minimal_timeline: render(&ops, &minimal, &in_flight, span),
            partition: part.indices.clone(),
            minimal,
            minimal_in_flight: in_flight,
            minimize_steps,
            anomaly,
            atomicity,
        })),
        steps,
        partitions: n_partitions,
        largest_cache,
        threads,
    }
}

/// The operations at `indices`, by index, as `fetch` reads them (none
/// without it).
fn by_index(indices: &[usize], fetch: &mut Option<&mut Fetch<'_>>) -> BTreeMap<usize, Operation> {
    match fetch {
        Some(fetch) => indices.iter().copied().zip(fetch(indices)).collect(),
        None => BTreeMap::new(),
    }
}

/// The timeline of `indices` (placed by `span`; none without one), the
/// lines of those in `ops` (none read: empty).
fn render(
    ops: &BTreeMap<usize, Operation>,
    indices: &[usize],
    in_flight: &[usize],
    span: impl Fn(usize) -> Option<Span>,
) -> String {
    if ops.is_empty() {
        return String::new();
    }
    let placed: Vec<usize> = indices
        .iter()
        .copied()
        .filter(|&i| span(i).is_some())
        .collect();
    render_with(
        &placed,
        in_flight,
        |i| {
            span(i).unwrap_or(Span {
                invoke_ns: 0,
                return_ns: 0,
                answered: false,
            })
        },
        |i| {
            let o = ops.get(&i)?;
            Some(Line {
                client: o.client.clone(),
                request: summarize_request(&o.request),
                answer: o.answer.as_ref().map(summarize_answer),
            })
        },
    )
}
