//! Unanswered operations as a class: dropped, pooled and deduplicated before the search.
//!
//! # Why
//!
//! An operation without an answer (a timeout) may have taken effect at
//! any instant after its call, or never. Put into the search's list of
//! calls and returns like the others, its call stays at the front of the
//! list until it is linearized and its return sits at the very end, so
//! every configuration walks past every unanswered call again: with 200k
//! of them the search was quadratic (84 s). This module takes them out of
//! the list and hands the search a [`PendingPool`] instead:
//!
//! - **Unanswered reads are dropped.** A read changes nothing, and an
//!   unanswered one has no answer to explain and no return to order
//!   anything after it: leaving it out of every linearization is always
//!   allowed, and adding it to one never changes another answer. So a
//!   history is linearizable with it iff it is without it.
//! - **Unanswered writes are pooled**, in call order. One may be
//!   linearized at any configuration where its call precedes the first
//!   return still to be linearized (its own return is at infinity, so it
//!   never forces a backtrack), and the search tries the pool only once
//!   the answered calls at that configuration are exhausted.
//! - **Equal unanswered writes are one class**: of several unanswered
//!   writes with the same request (the same op, arguments and commit
//!   digest), only the earliest-called one not yet linearized is tried.
//!   Any linearization that uses a later one can use the earlier one in
//!   its place instead (it is callable wherever the later one is, it has
//!   the same effect on the same state, and neither has an answer to
//!   match or a return to respect), so nothing is lost.
//! - **A write that would change nothing is not tried** (the search
//!   checks its undo): linearizing it leaves the state as it is, so the
//!   configuration it leads to can explain no more than the one without
//!   it, where it stays available for later.

use std::collections::HashMap;

use super::item::{Item, NONE};
use super::prepare::{is_read, Observed, Prepared};

/// The unanswered writes of one partition, by call instant.
#[derive(Debug)]
pub(super) struct PendingPool {
    /// Indices into the partition's items, sorted by call instant.
    members: Vec<usize>,
    /// Call instant of each member (`members`' order).
    invoke_ns: Vec<u64>,
    /// The previous member with an equal request, or [`NONE`].
    prev_same: Vec<usize>,
    /// Whether each member is linearized in the current configuration.
    done: Vec<bool>,
}

/// How the search treats one item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    /// Answered: a call and a return in the list.
    Listed,
    /// Unanswered write: in the pool.
    Pooled,
    /// Unanswered read: never needed (see the module docs).
    Dropped,
}

/// What the search does with `item`.
pub(super) fn role(item: &Item<'_>) -> Role {
    if !matches!(item.observed(), Observed::Pending) {
        return Role::Listed;
    }
    match &item.prepared.op {
        Some(op) if is_read(op) => Role::Dropped,
        Some(_) => Role::Pooled,
        // Never partitioned (a malformed request is checked alone), and
        // never matched by the search: nothing to try.
        None => Role::Dropped,
    }
}

impl PendingPool {
    /// The pool of `items`' unanswered writes.
    pub(super) fn new(items: &[Item<'_>]) -> Self {
        let mut members: Vec<usize> = (0..items.len())
            .filter(|&i| role(&items[i]) == Role::Pooled)
            .collect();
        members.sort_by_key(|&i| (items[i].invoke_ns, i));
        let invoke_ns = members.iter().map(|&i| items[i].invoke_ns).collect();
        // Classes by the request's full description (the op with its
        // arguments and, for a commit, the prepared commit: its digest
        // and canonical input); computed for unanswered writes only.
        let mut last_of_class: HashMap<String, usize> = HashMap::new();
        let prev_same = members
            .iter()
            .enumerate()
            .map(|(k, &i)| {
                let p = items[i].prepared;
                let class = format!("{:?}|{:?}", p.op, p.commit);
                last_of_class.insert(class, k).unwrap_or(NONE)
            })
            .collect();
        let done = vec![false; members.len()];
        Self {
            members,
            invoke_ns,
            prev_same,
            done,
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The first member at position `from` or after that is worth trying
    /// at a configuration whose first return is at `limit_ns`: called by
    /// then, not linearized, and the first of its class still open.
    /// Returns it (or `None`) and how many positions were looked at.
    pub(super) fn next_candidate(&self, from: usize, limit_ns: u64) -> (Option<usize>, u64) {
        let mut looked = 0u64;
        let mut k = from;
        while k < self.members.len() && self.invoke_ns[k] <= limit_ns {
            looked += 1;
            let earlier_open = self.prev_same[k] != NONE && !self.done[self.prev_same[k]];
            if !self.done[k] && !earlier_open {
                return (Some(k), looked);
            }
            k += 1;
        }
        (None, looked.max(1))
    }

    /// The item index of member `k`.
    pub(super) fn item(&self, k: usize) -> usize {
        self.members[k]
    }

    pub(super) fn set_done(&mut self, k: usize, done: bool) {
        self.done[k] = done;
    }
}

/// Why a search stopped at the caller's memory ceiling
/// ([`super::CheckOptions::over_memory`]).
pub(super) fn over_memory_reason(session: &str) -> String {
    format!(
        "stopped searching session {session} at the memory ceiling (reqkey: --max-memory-bytes): \
         the history and its search did not fit; raise the ceiling, or split the history by session"
    )
}

/// Why a search gave up, and what would help: the search grows with the
/// writes that overlap in one session (each is a choice of order), not
/// with the history's length, so the message names that figure.
pub(super) fn out_of_budget_reason(
    prepared: &[Prepared],
    session: &str,
    indices: &[usize],
    budget_steps: u64,
) -> String {
    // The most writes in flight at once: a sweep over calls and returns.
    let mut events: Vec<(u64, i8)> = Vec::new();
    let mut unanswered = 0usize;
    for &i in indices {
        let p = &prepared[i];
        if p.op.as_ref().is_none_or(is_read) {
            continue;
        }
        if matches!(p.observed, Observed::Pending) {
            unanswered += 1;
        }
        events.push((p.invoke_ns, 1));
        events.push((p.end_ns, -1));
    }
    // At equal instants calls first: ties overlap, as in the search.
    events.sort_unstable_by_key(|&(t, d)| (t, -d));
    let (mut open, mut widest) = (0i64, 0i64);
    for (_, d) in events {
        open += i64::from(d);
        widest = widest.max(open);
    }
    format!(
        "gave up after {budget_steps} search steps on session {session} ({} operations, up to {widest} writes in flight at once, {unanswered} writes unanswered): \
         the search grows with the writes that overlap within one session, not with the history's length; \
         what helps is a history with fewer of them per session (more sessions, fewer timed-out writes); \
         a larger --budget-steps costs time and up to 32 bytes a step and rarely decides such a session",
        indices.len()
    )
}
