//! Searching each session's partition of a history, on threads, within
//! one shared budget; and the operations that fail on their own.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

use reqkey_model::StoreError;

use super::item::Item;
use super::prepare::{Observed, Prepared};
use super::search::{search, Search};
use super::types::{CheckOptions, MAX_THREADS};

/// Why an operation fails on its own, whatever the state: a malformed
/// answer, a malformed request not answered `invalid_argument`, or an
/// `internal` error (which the spec never gives).
pub(super) fn lone_failure(p: &Prepared) -> Option<String> {
    match (&p.op, &p.observed) {
        (_, Observed::Malformed(why)) => Some(format!("malformed answer: {why}")),
        (None, Observed::Answer(Err(e))) if e.kind() == "invalid_argument" => None,
        (None, Observed::Pending) => None,
        (None, _) => Some(
            "the request is malformed, so the spec answers invalid_argument, but the target answered otherwise"
                .to_owned(),
        ),
        (Some(_), Observed::Answer(Err(StoreError::Internal(_)))) => {
            Some("the target answered `internal`, which the spec never does".to_owned())
        }
        _ => None,
    }
}

/// What the search of one partition found.
#[derive(Debug)]
pub(super) struct PartitionOutcome {
    pub(super) search: Search,
    pub(super) used: u64,
    pub(super) cached: usize,
}

/// Searches every partition, on up to `opts.threads` threads (0: one per
/// available core, never more than there are partitions). Returns each
/// partition's outcome, in the order given (`None`: skipped, because a
/// partition before it in that order was already decisive), and the
/// number of threads used.
///
/// Threads take partitions largest first from a shared cursor (so one big
/// partition does not start last); a decisive outcome (not linearizable,
/// or out of budget) at position `k` lowers `stop_at` to `k`, and a thread
/// skips a partition only when its position is after `stop_at`. So every
/// partition before the first decisive one (in the order given) is
/// searched, whatever the interleaving, and the report is the sequential
/// check's. The budget is shared: each partition gets what the others
/// have not spent when it starts.
pub(super) fn search_partitions(
    prepared: &[Prepared],
    partitions: &[(&str, Vec<usize>)],
    opts: &CheckOptions,
) -> (Vec<Option<PartitionOutcome>>, usize) {
    let sizes: Vec<usize> = partitions.iter().map(|(_, p)| p.len()).collect();
    let search_one = |k: usize, remaining: u64| {
        let items: Vec<Item<'_>> = partitions[k]
            .1
            .iter()
            .map(|&i| Item::of(prepared, i, false))
            .collect();
        search(&items, remaining, opts.over_memory)
    };
    search_each(&sizes, opts, &search_one)
}

/// The threads of [`search_partitions`]: `search_one(k, remaining)`
/// searches partition `k` (of `sizes[k]` operations) within `remaining`
/// steps.
pub(super) fn search_each(
    sizes: &[usize],
    opts: &CheckOptions,
    search_one: &(dyn Fn(usize, u64) -> (Search, u64, usize) + Sync),
) -> (Vec<Option<PartitionOutcome>>, usize) {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let wanted = if opts.threads == 0 {
        cores
    } else {
        opts.threads
    };
    let threads = wanted.min(sizes.len()).clamp(1, MAX_THREADS);
    let mut order: Vec<usize> = (0..sizes.len()).collect();
    order.sort_by_key(|&k| (std::cmp::Reverse(sizes[k]), k));
    let results: Vec<OnceLock<PartitionOutcome>> =
        (0..sizes.len()).map(|_| OnceLock::new()).collect();
    let cursor = AtomicUsize::new(0);
    let stop_at = AtomicUsize::new(usize::MAX);
    let spent = AtomicU64::new(0);
    let worker = || {
        // Bounded: each turn takes the cursor one partition further.
        loop {
            let turn = cursor.fetch_add(1, Ordering::Relaxed);
            let Some(&k) = order.get(turn) else {
                break;
            };
            if k > stop_at.load(Ordering::Acquire) {
                continue;
            }
            let remaining = opts
                .budget_steps
                .saturating_sub(spent.load(Ordering::Relaxed));
            let (search, used, cached) = search_one(k, remaining);
            spent.fetch_add(used, Ordering::Relaxed);
            if !matches!(search, Search::Linearizable) {
                stop_at.fetch_min(k, Ordering::AcqRel);
            }
            // Each position is taken once (the cursor), so the cell is empty.
            let _ = results[k].set(PartitionOutcome {
                search,
                used,
                cached,
            });
        }
    };
    if threads == 1 {
        worker();
    } else {
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(worker);
            }
        });
    }
    (
        results.into_iter().map(OnceLock::into_inner).collect(),
        threads,
    )
}
