//! Shrinking a failing session to a small non-linearizable subset.

use super::item::Item;
use super::prepare::{writes_nothing, Prepared};
use super::search::{search, Search};
use super::types::CheckOptions;

/// Shrinks a failing partition; returns (subset, the subset's in-flight ops).
pub(super) fn minimize(
    prepared: &[Prepared],
    partition: &[usize],
    opts: &CheckOptions,
    per_check_steps: u64,
    spent: &mut u64,
) -> (Vec<usize>, Vec<usize>) {
    let budget_steps = opts.budget_steps;
    let over_memory = opts.over_memory;
    // Is `subset` (with `in_flight` counted unanswered) provably failing?
    // `None`: the budget ran out (not shown to fail).
    let mut fails = |subset: &[usize], in_flight: &[usize], spent: &mut u64| -> Option<bool> {
        let remaining = budget_steps.saturating_sub(*spent).min(per_check_steps);
        if remaining == 0 {
            return None;
        }
        let items: Vec<Item<'_>> = subset
            .iter()
            .map(|&i| Item::of(prepared, i, in_flight.contains(&i)))
            .collect();
        let (outcome, used, _) = search(&items, remaining, over_memory);
        *spent += used;
        match outcome {
            Search::NotLinearizable => Some(true),
            Search::Linearizable => Some(false),
            Search::OutOfBudget => None,
            Search::OverMemory => {
                // Shrinking ends here: what is held is what is shown.
                *spent = budget_steps;
                None
            }
        }
    };

    // 0. A session whose operations never overlap fails at one
    //    operation of its one order: that one and the writes before it.
    let items: Vec<Item<'_>> = partition
        .iter()
        .map(|&i| Item::of(prepared, i, false))
        .collect();
    if let Some((Some(subset), _)) = super::search::replay_in_order(&items) {
        return (
            subset.into_iter().map(|k| partition[k]).collect(),
            Vec::new(),
        );
    }
    drop(items);

    // 1. The shortest failing prefix, cut at the k-th return: ops that
    //    returned by then as recorded, ops invoked by then as in flight,
    //    except those whose recorded answer claims no write: they are
    //    dropped (as in step 2) rather than left to match anything, which
    //    would let the search wander through every order of them.
    let mut ends: Vec<u64> = partition.iter().map(|&i| prepared[i].end_ns).collect();
    ends.sort_unstable();
    let cut = |k: usize| -> (Vec<usize>, Vec<usize>) {
        let t = ends[k];
        let subset: Vec<usize> = partition
            .iter()
            .copied()
            .filter(|&i| prepared[i].invoke_ns <= t)
            .filter(|&i| prepared[i].end_ns <= t || !writes_nothing(&prepared[i]))
            .collect();
        let in_flight: Vec<usize> = subset
            .iter()
            .copied()
            .filter(|&i| prepared[i].end_ns > t)
            .collect();
        (subset, in_flight)
    };
    let (mut lo, mut hi) = (0usize, ends.len().saturating_sub(1));
    // Invariant: the cut at `hi` fails (the whole partition does).
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let (s, f) = cut(mid);
        match fails(&s, &f, spent) {
            Some(true) => hi = mid,
            Some(false) | None => lo = mid + 1,
        }
        if *spent >= budget_steps {
            break;
        }
    }
    let (mut subset, in_flight) = cut(hi);
    if hi == ends.len().saturating_sub(1) {
        // The full partition, as recorded (no op forced in flight).
        subset = partition.to_vec();
        return greedy(subset, vec![], prepared, &mut fails, spent, budget_steps);
    }
    greedy(subset, in_flight, prepared, &mut fails, spent, budget_steps)
}

pub(super) type FailsFn<'a> = dyn FnMut(&[usize], &[usize], &mut u64) -> Option<bool> + 'a;

/// 2. Drops operations that claim no write while the rest still fails.
pub(super) fn greedy(
    mut subset: Vec<usize>,
    in_flight: Vec<usize>,
    prepared: &[Prepared],
    fails: &mut FailsFn<'_>,
    spent: &mut u64,
    budget_steps: u64,
) -> (Vec<usize>, Vec<usize>) {
    // An op counted in flight may go too: in the whole history it has its
    // recorded answer, which claims no write.
    let mut in_flight = in_flight;
    let candidates: Vec<usize> = subset
        .iter()
        .rev()
        .copied()
        .filter(|&i| writes_nothing(&prepared[i]))
        .collect();
    // Drop chunks first (halving, as delta debugging does): most
    // candidates are irrelevant and go in a few checks; the last round
    // (chunks of one) is the plain greedy pass.
    let mut candidates = candidates;
    let mut chunk = candidates.len().div_ceil(2).max(1);
    'rounds: loop {
        let mut kept: Vec<usize> = Vec::with_capacity(candidates.len());
        for group in candidates.chunks(chunk) {
            let trial: Vec<usize> = subset
                .iter()
                .copied()
                .filter(|i| !group.contains(i))
                .collect();
            match fails(&trial, &in_flight, spent) {
                Some(true) => {
                    subset = trial;
                    in_flight.retain(|i| !group.contains(i));
                }
                Some(false) => kept.extend_from_slice(group),
                None if *spent >= budget_steps => break 'rounds,
                None => kept.extend_from_slice(group),
            }
        }
        candidates = kept;
        if chunk == 1 || candidates.is_empty() {
            break;
        }
        chunk = chunk.div_ceil(2);
    }
    (subset, in_flight)
}
