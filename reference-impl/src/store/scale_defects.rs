//! What the memory store's defects at scale remember (issue 55): when each
//! key was taken and each run started, and which keys a bounded index
//! dropped.
//!
//! Each bug here is correct for a few keys and a few seconds, which is all
//! the suite and the fuzz pass's programs ever show: a key index bounded to
//! its [`KEPT_KEYS`] most recent keys, a key index whose entries live
//! [`TTL_MS`] (a Redis `EXPIRE` on it), and a janitor that sets a run left
//! `running` for [`TTL_MS`] to `interrupted` (a store must never change
//! state by itself; an agent's leases do that, above the store). The
//! fuzz pass's probes at scale find them (`harness/src/run/fuzz/scale.rs`).
//! Only `memory.rs` builds one, for those defects; every map is bounded.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use reqkey_model::seq::SessionState;
use reqkey_model::{CommitOutcome, CommitResult, RunStatus, StartRun};

/// The keys the bounded index keeps (the most recent).
pub const KEPT_KEYS: usize = 1_000;
/// How long a key index entry lives, and how long a run may stay
/// `running` before the janitor interrupts it.
pub const TTL_MS: u64 = 5_000;
/// The most entries a book keeps (a book, not a store).
const MAX_ENTRIES: usize = 1_000_000;

/// Which bug a book serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScaleBug {
    /// Only the [`KEPT_KEYS`] most recently taken keys are found.
    BoundedKeyIndex,
    /// A key is found for [`TTL_MS`] after it was taken.
    KeyIndexTtl,
    /// A run `running` for [`TTL_MS`] is set `interrupted`.
    RunJanitor,
}

type Pair = (String, String);

#[derive(Debug, Default)]
struct Entries {
    /// (session, key) -> when it was last taken.
    taken: HashMap<Pair, Instant>,
    /// Keys in the order they were taken (the bounded index's queue).
    order: VecDeque<Pair>,
    /// Keys the bounded index dropped.
    dropped: HashSet<Pair>,
    /// (session, run) -> when it started.
    started: HashMap<Pair, Instant>,
}

/// The memory store's record for one [`ScaleBug`].
#[derive(Debug)]
pub struct ScaleBook {
    bug: ScaleBug,
    entries: Mutex<Entries>,
}

impl ScaleBook {
    pub fn new(bug: ScaleBug) -> Self {
        Self {
            bug,
            entries: Mutex::default(),
        }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, Entries> {
        // Single inserts and reads; poison is benign.
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the bug's index no longer finds `key` in `session`.
    pub fn forgets(&self, session: &str, key: &str) -> bool {
        let pair = (session.to_owned(), key.to_owned());
        let e = self.entries();
        match self.bug {
            ScaleBug::BoundedKeyIndex => e.dropped.contains(&pair),
            ScaleBug::KeyIndexTtl => e
                .taken
                .get(&pair)
                .is_some_and(|at| at.elapsed() >= Duration::from_millis(TTL_MS)),
            ScaleBug::RunJanitor => false,
        }
    }

    /// A commit answered `result`: a run it started is recorded.
    pub fn committed(&self, start: &StartRun, result: &CommitResult) {
        if result.outcome == CommitOutcome::Started {
            self.started(
                &start.session_id,
                &result.run.run_id,
                start.request_key.as_deref(),
            );
        }
    }

    /// A commit started `run` in `session`, taking `key`.
    pub fn started(&self, session: &str, run: &str, key: Option<&str>) {
        let mut e = self.entries();
        if e.started.len() >= MAX_ENTRIES || e.taken.len() >= MAX_ENTRIES {
            *e = Entries::default();
        }
        e.started
            .insert((session.to_owned(), run.to_owned()), Instant::now());
        let Some(key) = key else { return };
        let pair = (session.to_owned(), key.to_owned());
        e.taken.insert(pair.clone(), Instant::now());
        e.dropped.remove(&pair);
        if self.bug == ScaleBug::BoundedKeyIndex {
            e.order.push_back(pair);
            while e.order.len() > KEPT_KEYS {
                if let Some(old) = e.order.pop_front() {
                    // Dropped unless taken again since (a later entry).
                    if !e.order.contains(&old) {
                        e.dropped.insert(old);
                    }
                }
            }
        }
    }

    /// The janitor: every run of `session` left `running` for [`TTL_MS`]
    /// is set `interrupted`.
    pub fn sweep(&self, session_id: &str, session: &mut SessionState) {
        if self.bug != ScaleBug::RunJanitor {
            return;
        }
        let stale: Vec<String> = {
            let e = self.entries();
            session
                .runs()
                .filter(|r| r.status == RunStatus::Running)
                .filter(|r| {
                    e.started
                        .get(&(session_id.to_owned(), r.run_id.clone()))
                        .is_some_and(|at| at.elapsed() >= Duration::from_millis(TTL_MS))
                })
                .map(|r| r.run_id.clone())
                .collect()
        };
        for run in stale {
            let _ = session.set_run_status(&run, RunStatus::Interrupted);
        }
    }
}
