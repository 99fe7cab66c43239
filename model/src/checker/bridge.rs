//! Between the system model's compact state and the crate's rules.
//!
//! The model's state is small integers ([`crate::checker::compact`]); the rules take
//! `RunMetadata`, `StartRun` and `SessionState`. [`Names`] holds the strings
//! the integers stand for (the same ones the exported scenarios use) and
//! converts both ways. [`RuleCache`] asks the rules — [`plan_keyed_entry`],
//! [`SessionState::decide`] and `apply`, [`SessionState::set_run_status`] —
//! on the real types and remembers each answer per thread, keyed by the
//! compact arguments. The rules are pure, so a remembered answer is what
//! the rule would say again; the model restates none of them.
//!
//! A compact session is turned into a `SessionState` by committing its runs
//! one after another through `SessionState::decide` and `apply` (each
//! expecting the run before it, which is what a started run's commit
//! expected: CAS let it through) and setting finished runs' status; the
//! answer is turned back by reading the `SessionState`'s runs, input log,
//! key index and current run.

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::atomic::{AtomicU64, Ordering};

use ahash::AHasher;
use serde_json::{json, Value};

use crate::checker::compact::{
    session_name, AnswerKind, Config, Meta, Request, Run, RunRef, StoreSession, MAX_KEYS, MAX_RUNS,
};
use crate::checker::inline::Inline;
use crate::checker::mutants::Mutant;
use crate::contract::digest::execute_request_digest;
use crate::contract::error::{RunStartRejection, StoreError};
use crate::contract::plan::{plan_keyed_entry, KeyedEntryPlan};
use crate::contract::rules::{KeyRule, RuleVariant};
use crate::contract::seq::SessionState;
use crate::contract::types::{CommitOutcome, RunMetadata, RunStatus, StartRun};

/// The strings behind the model's integers.
#[derive(Debug, Clone)]
pub struct Names {
    session_ids: Vec<String>,
    key_names: Vec<String>,
    inputs: Vec<Value>,
    digests: Vec<String>,
}

impl Names {
    pub fn new(config: &Config) -> Self {
        let inputs: Vec<Value> = (0..config.inputs)
            .map(|i| json!({ "text": format!("in{i}") }))
            .collect();
        Names {
            session_ids: (0..config.sessions as u8).map(session_name).collect(),
            key_names: (0..config.keys).map(|k| format!("k{k}")).collect(),
            digests: inputs.iter().map(execute_request_digest).collect(),
            inputs,
        }
    }

    pub fn session(&self, s: u8) -> &str {
        &self.session_ids[s as usize]
    }

    pub fn key(&self, k: u8) -> &str {
        &self.key_names[k as usize]
    }

    /// The `StartRun` of an attempt.
    pub fn start_run(&self, request: Request, run: RunRef, expected: Option<RunRef>) -> StartRun {
        StartRun {
            session_id: self.session(request.session).to_owned(),
            run_id: run.to_string(),
            expected_current_run_id: expected.map(|r| r.to_string()),
            input: self.inputs[request.input as usize].clone(),
            request_key: request.key.map(|k| self.key(k).to_owned()),
            request_digest: request
                .key
                .map(|_| self.digests[request.input as usize].clone()),
        }
    }

    /// The `RunMetadata` a read returns for `m`.
    pub fn metadata(&self, m: &Meta) -> RunMetadata {
        RunMetadata {
            session_id: self.session(m.session).to_owned(),
            run_id: m.run.id.to_string(),
            status: m.run.status,
            start_sequence: u64::from(m.seq),
            request_key: m.run.key.map(|k| self.key(k).to_owned()),
            request_digest: m
                .run
                .key
                .map(|_| self.digests[m.run.input as usize].clone()),
        }
    }

    fn key_index(&self, name: &str) -> Option<u8> {
        self.key_names
            .iter()
            .position(|k| k == name)
            .map(|i| i as u8)
    }

    fn digest_index(&self, digest: &str) -> Option<u8> {
        self.digests
            .iter()
            .position(|d| d == digest)
            .map(|i| i as u8)
    }

    fn input_index(&self, input: &Value) -> Option<u8> {
        self.inputs.iter().position(|v| v == input).map(|i| i as u8)
    }

    /// A session's runs as `SessionState`: each committed in turn through
    /// the store's own decide and apply, finished ones marked so.
    pub fn session_state(&self, s: u8, runs: &[Run]) -> Option<SessionState> {
        // The rebuild replays runs that were started; the key rule has
        // nothing to say about them (CAS, expecting the previous run, lets
        // each through) and a broken store may have let a key in twice.
        let replay = RuleVariant {
            key_rule: KeyRule::Absent,
            replay_first: true,
        };
        let mut state = SessionState::default();
        let mut previous = None;
        for run in runs {
            let request = Request {
                session: s,
                key: run.key,
                input: run.input,
            };
            let start = self.start_run(request, run.id, previous);
            let decision = state.decide(&start, None, replay).ok()?;
            state.apply(&start, decision);
            if run.status != RunStatus::Running {
                state.set_run_status(&start.run_id, run.status).ok()?;
            }
            previous = Some(run.id);
        }
        Some(state)
    }

    /// A `SessionState` back as a compact session, indexes included.
    pub fn compact(&self, state: &SessionState) -> Option<StoreSession> {
        let inputs = state.inputs();
        let mut out = StoreSession::default();
        for meta in state.runs() {
            let input = inputs.iter().find(|e| e.run_id == meta.run_id)?;
            let key = match &meta.request_key {
                Some(k) => Some(self.key_index(k)?),
                None => None,
            };
            out.runs.push(Run {
                id: RunRef::parse(&meta.run_id)?,
                status: meta.status,
                key,
                input: self.input_index(&input.input)?,
            });
        }
        let position = |run_id: &str| {
            let id = RunRef::parse(run_id)?;
            out.runs.iter().position(|r| r.id == id).map(|i| i as u8)
        };
        let mut by_key = [None; MAX_KEYS];
        for (k, name) in self.key_names.iter().enumerate() {
            if let Some(h) = state.run_by_request_key(name) {
                by_key[k] = Some(position(&h.run_id)?);
            }
        }
        let current = match state.current_run() {
            Some(r) => Some(position(&r.run_id)?),
            None => None,
        };
        out.by_key = by_key;
        out.current = current;
        Some(out)
    }
}

/// What [`plan_keyed_entry`] said, compactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanOut {
    New,
    /// Attach, replay or a typed 409, naming a run; the named run's digest
    /// as the input it is the digest of (a 409 carries none).
    Named {
        kind: AnswerKind,
        run: RunRef,
        run_digest: Option<u8>,
    },
    /// The plan named a run the model does not know (a bug).
    Unreadable,
}

/// What the store's run-start commit said, compactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitOut {
    /// A run started; the session as it is now, and the new run.
    Started {
        store: StoreSession,
        run: Run,
    },
    Replayed,
    KeyTaken(RunRef),
    CasMismatch,
    /// Any other answer (none is expected).
    Other,
}

type Fast = BuildHasherDefault<AHasher>;
type PlanKey = (Option<Meta>, Option<RunRef>, u8);
type CommitKey = (
    u8,
    Inline<Run, MAX_RUNS>,
    Request,
    RunRef,
    Option<RunRef>,
    Option<Meta>,
);
type StatusKey = (u8, Inline<Run, MAX_RUNS>, RunRef, RunStatus);

/// The remembered answers of one thread, for one model.
#[derive(Default)]
struct Memo {
    model: u64,
    plans: HashMap<PlanKey, PlanOut, Fast>,
    commits: HashMap<CommitKey, CommitOut, Fast>,
    statuses: HashMap<StatusKey, Option<StoreSession>, Fast>,
}

thread_local! {
    static MEMO: RefCell<Memo> = RefCell::new(Memo::default());
}

static NEXT_MODEL: AtomicU64 = AtomicU64::new(1);

/// The rules, asked through a per-thread memo. Each model gets an id of its
/// own, so a thread that moves on to another model (another configuration
/// or mutant) starts afresh.
#[derive(Debug, Clone)]
pub struct RuleCache {
    model: u64,
    variant: RuleVariant,
}

impl RuleCache {
    pub fn new(config: &Config) -> Self {
        RuleCache {
            model: NEXT_MODEL.fetch_add(1, Ordering::Relaxed),
            variant: Mutant::rule_variant(config.mutant),
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut Memo) -> R) -> R {
        MEMO.with(|m| {
            let mut memo = m.borrow_mut();
            if memo.model != self.model {
                *memo = Memo {
                    model: self.model,
                    ..Memo::default()
                };
            }
            f(&mut memo)
        })
    }

    /// [`plan_keyed_entry`] with `holder`, the current run and the digest
    /// of input `digest`.
    pub fn plan(
        &self,
        names: &Names,
        holder: Option<Meta>,
        current: Option<RunRef>,
        digest: u8,
    ) -> PlanOut {
        let key = (holder, current, digest);
        self.with(|memo| {
            *memo.plans.entry(key).or_insert_with(|| {
                let holder = holder.map(|h| names.metadata(&h));
                let current = current.map(|r| r.to_string());
                let plan = plan_keyed_entry(
                    holder.as_ref(),
                    current.as_deref(),
                    &names.digests[digest as usize],
                );
                let named = |kind, run: &str, digest: Option<&str>| match RunRef::parse(run) {
                    Some(run) => PlanOut::Named {
                        kind,
                        run,
                        run_digest: digest.and_then(|d| names.digest_index(d)),
                    },
                    None => PlanOut::Unreadable,
                };
                match &plan {
                    KeyedEntryPlan::New => PlanOut::New,
                    KeyedEntryPlan::Attach(h) => {
                        named(AnswerKind::Attached, &h.run_id, h.request_digest.as_deref())
                    }
                    KeyedEntryPlan::Replay(h) => {
                        named(AnswerKind::Replayed, &h.run_id, h.request_digest.as_deref())
                    }
                    KeyedEntryPlan::Conflict { holder_run_id } => {
                        named(AnswerKind::KeyConflict, holder_run_id, None)
                    }
                    KeyedEntryPlan::AlreadyCompleted { holder_run_id } => {
                        named(AnswerKind::AlreadyCompleted, holder_run_id, None)
                    }
                }
            })
        })
    }

    /// The run-start commit of attempt `run` of `request` on session `s`,
    /// expecting `expected`, with `holder` as the key holder the store saw:
    /// [`SessionState::decide`] (under the model's rule variant) and
    /// [`SessionState::apply`].
    #[allow(clippy::too_many_arguments)]
    pub fn commit(
        &self,
        names: &Names,
        s: u8,
        store: &StoreSession,
        request: Request,
        run: RunRef,
        expected: Option<RunRef>,
        holder: Option<Meta>,
    ) -> CommitOut {
        let key = (s, store.runs, request, run, expected, holder);
        let variant = self.variant;
        self.with(|memo| {
            *memo.commits.entry(key).or_insert_with(|| {
                let Some(mut session) = names.session_state(s, &store.runs) else {
                    return CommitOut::Other;
                };
                let start = names.start_run(request, run, expected);
                let holder = holder.map(|h| names.metadata(&h));
                let result = session
                    .decide(&start, holder.as_ref(), variant)
                    .map(|decision| session.apply(&start, decision));
                match result {
                    Ok(commit) if commit.outcome == CommitOutcome::Started => {
                        let (Some(store), Some(id)) =
                            (names.compact(&session), RunRef::parse(&commit.run.run_id))
                        else {
                            return CommitOut::Other;
                        };
                        match store.runs.iter().find(|r| r.id == id) {
                            Some(&run) => CommitOut::Started { store, run },
                            None => CommitOut::Other,
                        }
                    }
                    Ok(_) => CommitOut::Replayed,
                    Err(StoreError::RunStartRejected(RunStartRejection::RequestKeyTaken {
                        existing_run_id,
                    })) => RunRef::parse(&existing_run_id)
                        .map_or(CommitOut::Other, CommitOut::KeyTaken),
                    Err(StoreError::RunStartRejected(RunStartRejection::CasMismatch {
                        ..
                    })) => CommitOut::CasMismatch,
                    Err(_) => CommitOut::Other,
                }
            })
        })
    }

    /// `setRunStatus` of `run` on session `s`: the session afterwards, or
    /// `None` when the store refuses.
    pub fn set_run_status(
        &self,
        names: &Names,
        s: u8,
        store: &StoreSession,
        run: RunRef,
        to: RunStatus,
    ) -> Option<StoreSession> {
        let key = (s, store.runs, run, to);
        self.with(|memo| {
            *memo.statuses.entry(key).or_insert_with(|| {
                let mut session = names.session_state(s, &store.runs)?;
                session.set_run_status(&run.to_string(), to).ok()?;
                names.compact(&session)
            })
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_compact_session_round_trips_through_session_state() {
        let names = Names::new(&Config::default());
        let run = |role, n, key, input, status| Run {
            id: RunRef { role, n },
            status,
            key,
            input,
        };
        let runs: Inline<Run, MAX_RUNS> = [
            run(0, 1, Some(0), 0, RunStatus::Completed),
            run(2, 1, None, 1, RunStatus::Running),
            run(1, 2, Some(1), 1, RunStatus::Running),
        ]
        .into_iter()
        .collect();
        let state = names.session_state(0, &runs).unwrap();
        assert_eq!(state.runs().count(), 3);
        assert_eq!(state.run_by_request_key("k1").unwrap().run_id, "c1r2");
        assert_eq!(state.current_run().unwrap().run_id, "c1r2");
        let back = names.compact(&state).unwrap();
        assert_eq!(&*back.runs, &*runs);
        assert_eq!(back.by_key[..2], [Some(0), Some(2)]);
        assert_eq!(back.current, Some(2));
    }

    /// A commit of a taken key: the spec refuses it naming the holder, a
    /// store without the key rule starts a second run. The same thread asks
    /// both models in turn; each gets its own rules' answer, not the other's
    /// remembered one.
    #[test]
    fn each_model_gets_its_own_rules_answers() {
        let spec_config = Config::default();
        let names = Names::new(&spec_config);
        let holder = Run {
            id: RunRef { role: 0, n: 1 },
            status: RunStatus::Running,
            key: Some(0),
            input: 0,
        };
        let state = names.session_state(0, &[holder]).unwrap();
        let store = names.compact(&state).unwrap();
        let request = Request {
            session: 0,
            key: Some(0),
            input: 0,
        };
        let commit = |cache: &RuleCache| {
            cache.commit(
                &names,
                0,
                &store,
                request,
                RunRef { role: 1, n: 1 },
                Some(holder.id),
                store.run_by_request_key(0, 0),
            )
        };
        let spec = RuleCache::new(&spec_config);
        let broken = RuleCache::new(&Config {
            mutant: Some(Mutant::NoKeyRule),
            ..Config::default()
        });
        for _ in 0..2 {
            assert_eq!(commit(&spec), CommitOut::KeyTaken(holder.id));
            let CommitOut::Started { store: after, run } = commit(&broken) else {
                panic!("no key rule: the commit starts a run");
            };
            assert_eq!((after.runs.len(), run.id), (2, RunRef { role: 1, n: 1 }));
            assert_eq!(after.current, Some(1));
        }
    }
}
