//! The keyed-entry protocol as a stateright [`Model`]: every interleaving of
//! clients, executor steps, run completions and session deletes.
//!
//! # Why a plain `Model` and not the actor framework
//!
//! The protocol has one shared object (the store) and many independent
//! sequential processes (executor tasks). An action is simply "which task
//! takes its next step" (or "a run finishes", "a session is deleted"), and a
//! step is one atomic store interaction. The actor framework would add
//! network envelopes and timers that carry no information here and multiply
//! the state space.
//!
//! # What a step is
//!
//! Each executor task (one HTTP request of a client) goes through the steps
//! of SPEC 5, each a separate action so that every other task can interleave
//! between them:
//!
//! 1. **Lookup**: `getRunByRequestKey` and `getCurrentRun`, then
//!    [`plan_keyed_entry`]; the current run read there becomes the commit's
//!    `expectedCurrentRunId`. A keyless entry only reads the current run
//!    (**ReadCurrent**). The first step happens in the action that sends
//!    the request: sending alone is invisible to everybody else.
//! 3. **Commit**: the store's atomic run-start commit,
//!    [`SessionState::commit_variant`] (or [`SessionState::decide`] with the
//!    holder a broken store would pass).
//! 4. **Replan** (once, after `request_key_taken`): `getRun` of the named
//!    holder and `getCurrentRun`, then [`plan_keyed_entry`] again.
//!
//! A `cas_mismatch` sends the task back to step 1 a bounded number of times
//! (SPEC 7), then the entry answers busy.
//!
//! Clients send the requests of their script one after another. A client
//! may resend the current request (same key, same input) while an earlier
//! attempt is in flight or after it answered: its response was lost. Runs
//! finish (`completed`) at any time, and a bounded number of
//! `deleteSession`s happen at any time; a later request re-uses the session.
//!
//! # Ghost state
//!
//! Some properties are about answers at the moment they were given (an
//! attach names the holder *at that moment*). The model records, in the
//! answer, facts computed from the true store state at that moment (for
//! instance whether the named run was the key's holder). These flags never
//! influence a transition; they exist only for the properties.
//!
//! # Symmetry
//!
//! Clients with the same script are interchangeable: their run ids come from
//! a counter per script ("role"), not per client, so swapping two such
//! clients is a pure permutation of the client vector. [`SystemState`]
//! implements [`Representative`] by sorting the clients.
//!
//! # A compact state, the rules still decide
//!
//! The state is small integers, flags and inline vectors: a run is its id
//! (role and counter), status, key index and input index; a session is its
//! runs in start order. Cloning a state copies bytes and hashing it hashes
//! a few hundred bytes, where a state of `SessionState`s and strings cost
//! dozens of allocations and SHA-256 digests per step. Every decision is
//! still taken by the crate's rules: [`crate::checker::bridge`] turns the compact
//! values into `RunMetadata`, `StartRun` and `SessionState`, asks
//! [`plan_keyed_entry`](crate::contract::plan::plan_keyed_entry) and
//! [`SessionState::decide`](crate::contract::seq::SessionState::decide) /
//! `apply` / `set_run_status`, and turns the answer back, remembering it
//! per thread (the rules are pure functions, so a remembered answer is the
//! answer). The indexes a session keeps (the key index, the current run)
//! are copied from the `SessionState` the rules produced.

use stateright::{Model, Property};

use crate::checker::bridge::{CommitOut, Names, PlanOut, RuleCache};
pub use crate::checker::compact::{
    session_name, AnswerKind, Config, Meta, Request, Run, RunRef, StoreSession, MAX_CLIENTS,
    MAX_KEYS, MAX_RUNS, MAX_SESSIONS, MAX_TASKS,
};
use crate::checker::inline::Inline;
use crate::checker::mutants::Mutant;
use crate::checker::props;
pub use crate::checker::state::{Action, Answer, Client, Phase, Session, SystemState, Task};
use crate::contract::seq::{CommitArgs, KeyArgs, RunArgs, SessionArgs, StatusArgs, StoreOp};
use crate::contract::types::RunStatus;

/// The model: a configuration and the names it uses.
#[derive(Debug, Clone)]
pub struct KeyedEntryModel {
    pub config: Config,
    scripts: Vec<Vec<Request>>,
    /// Role (distinct script) of each client.
    roles: Vec<u8>,
    /// The script of each role.
    role_scripts: Vec<Vec<Request>>,
    names: Names,
    rules: RuleCache,
}

/// Store operations recorded while applying an action, when asked for
/// (exported scenarios, step descriptions); the checker's own steps build
/// none.
struct Trace<'a>(Option<&'a mut Vec<StoreOp>>);

impl Trace<'_> {
    fn push(&mut self, op: impl FnOnce() -> StoreOp) {
        if let Some(ops) = &mut self.0 {
            ops.push(op());
        }
    }
}

impl KeyedEntryModel {
    pub fn new(config: Config) -> Self {
        let scripts = config.scripts();
        let mut distinct: Vec<&Vec<Request>> = Vec::new();
        let roles = scripts
            .iter()
            .map(|s| match distinct.iter().position(|d| *d == s) {
                Some(i) => i as u8,
                None => {
                    distinct.push(s);
                    (distinct.len() - 1) as u8
                }
            })
            .collect();
        let role_scripts: Vec<Vec<Request>> = distinct.into_iter().cloned().collect();
        let names = Names::new(&config);
        KeyedEntryModel {
            scripts,
            roles,
            role_scripts,
            rules: RuleCache::new(&config),
            names,
            config,
        }
    }

    pub fn scripts(&self) -> &[Vec<Request>] {
        &self.scripts
    }

    /// The strings the model's small integers stand for.
    pub fn names(&self) -> &Names {
        &self.names
    }

    /// Whether two clients share a script (symmetry reduction can pay).
    pub fn has_twins(&self) -> bool {
        self.role_scripts.len() < self.scripts.len()
    }

    /// The script of a role (every client of the role sends it).
    pub(super) fn role_script(&self, role: u8) -> &[Request] {
        &self.role_scripts[role as usize]
    }

    /// The request a client is working on, if its script is not done.
    pub(super) fn current_request(&self, state: &SystemState, client: usize) -> Option<Request> {
        let client = &state.clients[client];
        self.role_scripts[client.role as usize]
            .get(client.request as usize)
            .copied()
    }

    fn mutant(&self) -> Option<Mutant> {
        self.config.mutant
    }

    /// The store's key index: what `getRunByRequestKey` answers and what the
    /// store's commit sees as the holder. Correct: the session's own index.
    pub(super) fn read_holder(&self, state: &SystemState, session: u8, key: u8) -> Option<Meta> {
        let own = state.sessions[session as usize]
            .store
            .run_by_request_key(session, key);
        match self.mutant() {
            Some(Mutant::GlobalKeyIndex) => state
                .sessions
                .iter()
                .enumerate()
                .find_map(|(s, sess)| sess.store.run_by_request_key(s as u8, key)),
            Some(Mutant::DeleteKeepsKeys) => own.or_else(|| {
                state.sessions[session as usize]
                    .zombie_keys
                    .iter()
                    .find(|(k, _)| *k == key)
                    .map(|(_, run)| *run)
            }),
            _ => own,
        }
    }

    /// The digest (as the input it is the digest of) the executor hands to
    /// the plan. The spec: this request's.
    fn digest_for_plan(&self, request: Request, holder: Option<&Meta>) -> u8 {
        match (self.mutant(), holder) {
            (Some(Mutant::DigestNotCompared), Some(h)) if h.run.key.is_some() => h.run.input,
            _ => request.input,
        }
    }

    /// An answer that names a run, with its ghost facts.
    fn named_answer(
        &self,
        state: &SystemState,
        request: Request,
        task: &Task,
        kind: AnswerKind,
        run: RunRef,
        run_digest: Option<u8>,
    ) -> Answer {
        let session = &state.sessions[request.session as usize];
        let true_holder = request
            .key
            .and_then(|k| session.store.run_by_request_key(request.session, k));
        // Any session: under the global-key-index mutant the named run may
        // live in another one.
        let interrupted = state.sessions.iter().any(|s| {
            s.store
                .runs
                .iter()
                .any(|r| r.id == run && r.status == RunStatus::Interrupted)
        });
        Answer {
            kind,
            run: Some(run),
            replanned: task.replanned,
            epoch: session.epoch,
            names_holder: true_holder.is_some_and(|h| h.run.id == run),
            same_input: run_digest == Some(request.input),
            reused_key: false,
            deleted_meanwhile: task.epoch != session.epoch,
            replayed_interrupted: kind == AnswerKind::Replayed && interrupted,
        }
    }

    fn plain_answer(
        &self,
        state: &SystemState,
        request: Request,
        task: &Task,
        kind: AnswerKind,
    ) -> Answer {
        let epoch = state.sessions[request.session as usize].epoch;
        Answer {
            kind,
            run: None,
            replanned: task.replanned,
            epoch,
            names_holder: false,
            same_input: false,
            reused_key: false,
            deleted_meanwhile: task.epoch != epoch,
            replayed_interrupted: false,
        }
    }

    /// Plans with [`plan_keyed_entry`](crate::contract::plan::plan_keyed_entry) and
    /// turns the plan into the task's next phase (New: commit expecting the
    /// current run read with the holder) or its answer.
    fn plan_step(
        &self,
        state: &SystemState,
        request: Request,
        task: &Task,
        holder: Option<Meta>,
        current: Option<RunRef>,
    ) -> Phase {
        let digest = self.digest_for_plan(request, holder.as_ref());
        let plan = self.rules.plan(&self.names, holder, current, digest);
        match plan {
            PlanOut::New => Phase::Commit { expected: current },
            PlanOut::Named {
                kind,
                run,
                run_digest,
            } => Phase::Done(self.named_answer(state, request, task, kind, run, run_digest)),
            PlanOut::Unreadable => {
                Phase::Done(self.plain_answer(state, request, task, AnswerKind::Internal))
            }
        }
    }

    /// One executor step of task `t` of client `c`, recording the store
    /// operations it performs.
    fn step_task(&self, state: &mut SystemState, c: usize, t: usize, trace: &mut Trace<'_>) {
        let Some(request) = self.current_request(state, c) else {
            return;
        };
        let task = state.clients[c].tasks[t];
        let s = request.session;
        let names = &self.names;
        let sid = || names.session(s).to_owned();
        let current = |state: &SystemState| {
            state.sessions[s as usize]
                .store
                .current_run(s)
                .map(|m| m.run.id)
        };
        let next_phase = match task.phase {
            Phase::Done(_) => return,
            Phase::Lookup => match request.key {
                None => Phase::ReadCurrent,
                Some(k) => {
                    trace.push(|| {
                        StoreOp::GetRunByRequestKey(KeyArgs {
                            session_id: sid(),
                            request_key: names.key(k).to_owned(),
                        })
                    });
                    trace.push(|| StoreOp::GetCurrentRun(SessionArgs { session_id: sid() }));
                    let holder = self.read_holder(state, s, k);
                    self.plan_step(state, request, &task, holder, current(state))
                }
            },
            Phase::ReadCurrent => {
                trace.push(|| StoreOp::GetCurrentRun(SessionArgs { session_id: sid() }));
                Phase::Commit {
                    expected: current(state),
                }
            }
            Phase::Commit { expected } => {
                if self.mutant() == Some(Mutant::HolderReadOutsideCommit) && request.key.is_some() {
                    // The broken store reads the holder now and decides later.
                    let k = request.key.unwrap_or_default();
                    trace.push(|| {
                        StoreOp::GetRunByRequestKey(KeyArgs {
                            session_id: sid(),
                            request_key: names.key(k).to_owned(),
                        })
                    });
                    Phase::CommitWrite {
                        expected,
                        stale_holder: self.read_holder(state, s, k),
                    }
                } else {
                    trace.push(|| {
                        StoreOp::CommitRunStart(CommitArgs {
                            start_run: names.start_run(request, task.run, expected),
                        })
                    });
                    let holder = request.key.and_then(|k| self.read_holder(state, s, k));
                    self.commit(state, request, &task, expected, holder)
                }
            }
            Phase::CommitWrite {
                expected,
                stale_holder,
            } => {
                trace.push(|| {
                    StoreOp::CommitRunStart(CommitArgs {
                        start_run: names.start_run(request, task.run, expected),
                    })
                });
                self.commit(state, request, &task, expected, stale_holder)
            }
            Phase::Replan { holder } => {
                trace.push(|| {
                    StoreOp::GetRun(RunArgs {
                        session_id: sid(),
                        run_id: holder.to_string(),
                    })
                });
                trace.push(|| StoreOp::GetCurrentRun(SessionArgs { session_id: sid() }));
                let found = state.sessions[s as usize].store.run(s, holder);
                self.plan_step(state, request, &task, found, current(state))
            }
        };
        let task_mut = &mut state.clients[c].tasks[t];
        match (&task.phase, &next_phase) {
            (Phase::Replan { .. }, _) => task_mut.replanned = true,
            (
                Phase::Commit { .. } | Phase::CommitWrite { .. },
                Phase::Lookup | Phase::ReadCurrent,
            ) => {
                task_mut.cas_tries += 1;
            }
            _ => {}
        }
        if let Phase::Done(mut answer) = next_phase {
            answer.replanned = task_mut.replanned;
            task_mut.phase = Phase::Done(answer);
        } else {
            task_mut.phase = next_phase;
        }
    }

    /// The store's atomic run-start commit with `holder` as the key holder
    /// the store saw, and the executor's reaction to the answer.
    fn commit(
        &self,
        state: &mut SystemState,
        request: Request,
        task: &Task,
        expected: Option<RunRef>,
        holder: Option<Meta>,
    ) -> Phase {
        let s = request.session;
        let true_holder = request
            .key
            .and_then(|k| state.sessions[s as usize].store.run_by_request_key(s, k))
            .filter(|h| h.run.id != task.run)
            .map(|h| h.run.id);
        let out = self.rules.commit(
            &self.names,
            s,
            &state.sessions[s as usize].store,
            request,
            task.run,
            expected,
            holder,
        );
        let refused_by_key = match &out {
            CommitOut::KeyTaken(holder) => Some(*holder),
            _ => None,
        };
        if request.key.is_some() && refused_by_key != true_holder {
            state.key_refusal_wrong = true;
        }
        match out {
            CommitOut::Started { store, run } => {
                state.sessions[s as usize].store = store;
                let digest = run.key.map(|_| run.input);
                let mut answer =
                    self.named_answer(state, request, task, AnswerKind::Started, run.id, digest);
                answer.reused_key = request
                    .key
                    .is_some_and(|k| state.sessions[s as usize].freed & (1 << k) != 0);
                Phase::Done(answer)
            }
            CommitOut::KeyTaken(holder) => {
                if task.replanned || self.mutant() == Some(Mutant::NoReplan) {
                    Phase::Done(self.plain_answer(state, request, task, AnswerKind::KeyTaken))
                } else {
                    Phase::Replan { holder }
                }
            }
            CommitOut::CasMismatch => {
                if (task.cas_tries as usize) < self.config.cas_retries {
                    if request.key.is_some() {
                        Phase::Lookup
                    } else {
                        Phase::ReadCurrent
                    }
                } else {
                    Phase::Done(self.plain_answer(state, request, task, AnswerKind::Busy))
                }
            }
            CommitOut::Replayed | CommitOut::Other => {
                Phase::Done(self.plain_answer(state, request, task, AnswerKind::Internal))
            }
        }
    }

    /// Applies an action, recording the store operations it performs.
    fn apply(
        &self,
        state: &SystemState,
        action: &Action,
        trace: &mut Trace<'_>,
    ) -> Option<SystemState> {
        let mut next = state.clone();
        match *action {
            Action::Send { client } => {
                let c = client as usize;
                let request = self.current_request(state, c)?;
                let role = state.clients[c].role as usize;
                next.role_counters[role] += 1;
                let run = RunRef {
                    role: role as u8,
                    n: next.role_counters[role],
                };
                if state.clients[c].sent > 0 {
                    next.retries_left = next.retries_left.checked_sub(1)?;
                }
                let client = &mut next.clients[c];
                client.sent += 1;
                client.tasks.push(Task {
                    run,
                    epoch: state.sessions[request.session as usize].epoch,
                    cas_tries: 0,
                    replanned: false,
                    // A keyless entry has nothing to look up.
                    phase: if request.key.is_some() {
                        Phase::Lookup
                    } else {
                        Phase::ReadCurrent
                    },
                });
                // Sending is invisible to everyone else: the executor's
                // first step happens in the same action.
                let t = client.tasks.len() - 1;
                self.step_task(&mut next, c, t, trace);
            }
            Action::Step { client, task } => {
                self.step_task(&mut next, client as usize, task as usize, trace);
            }
            Action::Next { client } => {
                let client = &mut next.clients[client as usize];
                client.request += 1;
                client.sent = 0;
                client.tasks.clear();
            }
            Action::Finish { session, run } => {
                trace.push(|| {
                    StoreOp::SetRunStatus(StatusArgs {
                        session_id: self.names.session(session).to_owned(),
                        run_id: run.to_string(),
                        status: RunStatus::Completed,
                    })
                });
                let s = &mut next.sessions[session as usize];
                s.store = self.rules.set_run_status(
                    &self.names,
                    session,
                    &s.store,
                    run,
                    RunStatus::Completed,
                )?;
            }
            Action::Expire { session, run } => {
                trace.push(|| {
                    StoreOp::SetRunStatus(StatusArgs {
                        session_id: self.names.session(session).to_owned(),
                        run_id: run.to_string(),
                        status: RunStatus::Interrupted,
                    })
                });
                next.expiries_left = next.expiries_left.checked_sub(1)?;
                let s = &mut next.sessions[session as usize];
                s.store = self.rules.set_run_status(
                    &self.names,
                    session,
                    &s.store,
                    run,
                    RunStatus::Interrupted,
                )?;
            }
            Action::Delete { session } => {
                trace.push(|| {
                    StoreOp::DeleteSession(SessionArgs {
                        session_id: self.names.session(session).to_owned(),
                    })
                });
                let s = &mut next.sessions[session as usize];
                let old = std::mem::take(&mut s.store);
                for k in 0..self.config.keys as u8 {
                    if let Some(run) = old.run_by_request_key(session, k) {
                        s.freed |= 1 << k;
                        if self.mutant() == Some(Mutant::DeleteKeepsKeys) {
                            s.zombie_keys.retain(|(zk, _)| *zk != k);
                            s.zombie_keys.push((k, run));
                        }
                    }
                }
                s.epoch += 1;
                next.deletes_left -= 1;
            }
        }
        Some(next)
    }

    /// The store operations an action performs (for exported scenarios).
    pub fn store_ops(&self, state: &SystemState, action: &Action) -> Vec<StoreOp> {
        let mut ops = Vec::new();
        let _ = self.apply(state, action, &mut Trace(Some(&mut ops)));
        ops
    }

    /// One line saying what an action did from `state`: who moved, the
    /// store operations it performed and where the task ended up.
    pub fn describe_step(&self, state: &SystemState, action: &Action) -> String {
        let mut trace = Vec::new();
        let next = self.apply(state, action, &mut Trace(Some(&mut trace)));
        let ops: Vec<&str> = trace.iter().map(StoreOp::name).collect();
        let ops = if ops.is_empty() {
            String::new()
        } else {
            format!(" [{}]", ops.join(", "))
        };
        let task_line = |c: usize, t: usize| -> String {
            let Some(next) = &next else {
                return "no change".into();
            };
            let request = self
                .current_request(state, c)
                .map_or_else(|| "-".into(), |r| r.to_string());
            let task = &next.clients[c].tasks[t];
            let outcome = match &task.phase {
                Phase::Lookup => "refused cas_mismatch; decides again from a fresh read".to_owned(),
                Phase::ReadCurrent => "reads the current run next".to_owned(),
                Phase::Commit { expected } => format!(
                    "plans new; commit next expecting current {}",
                    expected.map_or_else(|| "null".to_owned(), |r| r.to_string())
                ),
                Phase::CommitWrite { stale_holder, .. } => format!(
                    "store read the holder outside its commit: {}",
                    stale_holder.map_or_else(|| "none".to_owned(), |h| h.run.id.to_string())
                ),
                Phase::Replan { holder } => {
                    format!("refused request_key_taken by {holder}; re-plans")
                }
                Phase::Done(a) => format!(
                    "answers {:?}{}",
                    a.kind,
                    a.run.map(|r| format!(" {r}")).unwrap_or_default()
                ),
            };
            format!(
                "client {c} ({request}) attempt {}{ops} -> {outcome}",
                task.run
            )
        };
        match action {
            Action::Send { client } => {
                let c = *client as usize;
                let t = state.clients[c].tasks.len();
                format!("sends: {}", task_line(c, t))
            }
            Action::Step { client, task } => task_line(*client as usize, *task as usize),
            Action::Next { client } => format!("client {client} moves to its next request"),
            Action::Finish { session, run } => {
                format!("run {run} of s{session} completes{ops}")
            }
            Action::Delete { session } => format!("deleteSession s{session}{ops}"),
            Action::Expire { session, run } => {
                format!("the lease of run {run} of s{session} expires; a reader interrupts it{ops}")
            }
        }
    }

    /// Every answer given so far, with its client.
    pub fn answers<'a>(
        &'a self,
        state: &'a SystemState,
    ) -> impl Iterator<Item = (usize, &'a Answer)> {
        state.clients.iter().enumerate().flat_map(|(c, client)| {
            client.tasks.iter().filter_map(move |t| match &t.phase {
                Phase::Done(a) => Some((c, a)),
                _ => None,
            })
        })
    }

    pub(super) fn is_keyed(&self, state: &SystemState, client: usize) -> bool {
        self.current_request(state, client)
            .is_some_and(|r| r.key.is_some())
    }
}

impl Model for KeyedEntryModel {
    type State = SystemState;
    type Action = Action;

    fn init_states(&self) -> Vec<SystemState> {
        let n = self.config.sessions;
        vec![SystemState {
            sessions: (0..n).map(|_| Session::default()).collect(),
            deletes_left: self.config.deletes as u8,
            retries_left: self.config.retries as u8,
            expiries_left: self.config.expiries as u8,
            role_counters: self.role_scripts.iter().map(|_| 0).collect(),
            clients: self
                .roles
                .iter()
                .map(|&role| Client {
                    role,
                    request: 0,
                    sent: 0,
                    tasks: Inline::default(),
                })
                .collect(),
            key_refusal_wrong: false,
            reduced: self.config.reduction,
        }]
    }

    fn actions(&self, state: &SystemState, actions: &mut Vec<Action>) {
        let reduction = self.config.reduction;
        if reduction {
            if let Some(client) = self.forced_next(state) {
                actions.push(Action::Next { client });
                return;
            }
        }
        let watched = reduction.then(|| self.watched_keys(state));
        let offered = |s: usize, run: &Run| {
            watched
                .as_ref()
                .is_none_or(|w| Self::is_watched(w, s, run.key))
        };
        for (c, client) in state.clients.iter().enumerate() {
            if self.current_request(state, c).is_none() {
                continue;
            }
            let c8 = c as u8;
            if client.sent == 0 || state.retries_left > 0 {
                actions.push(Action::Send { client: c8 });
            }
            let mut all_done = !client.tasks.is_empty();
            for (t, task) in client.tasks.iter().enumerate() {
                if !matches!(task.phase, Phase::Done(_)) {
                    all_done = false;
                    actions.push(Action::Step {
                        client: c8,
                        task: t as u8,
                    });
                }
            }
            if all_done {
                actions.push(Action::Next { client: c8 });
            }
        }
        if self.config.finishes {
            for (s, session) in state.sessions.iter().enumerate() {
                for run in session
                    .store
                    .runs
                    .iter()
                    .filter(|r| r.status.is_live() && offered(s, r))
                {
                    actions.push(Action::Finish {
                        session: s as u8,
                        run: run.id,
                    });
                }
            }
        }
        if state.expiries_left > 0 {
            for (s, session) in state.sessions.iter().enumerate() {
                for run in session
                    .store
                    .runs
                    .iter()
                    .filter(|r| r.status == RunStatus::Running && offered(s, r))
                {
                    actions.push(Action::Expire {
                        session: s as u8,
                        run: run.id,
                    });
                }
            }
        }
        if state.deletes_left > 0 {
            for (s, session) in state.sessions.iter().enumerate() {
                if !session.store.is_empty() {
                    actions.push(Action::Delete { session: s as u8 });
                }
            }
        }
    }

    fn next_state(&self, state: &SystemState, action: Action) -> Option<SystemState> {
        self.apply(state, &action, &mut Trace(None))
    }

    fn format_action(&self, action: &Action) -> String {
        match action {
            Action::Send { client } => format!("client {client} sends its current request"),
            Action::Step { client, task } => {
                format!("client {client} attempt {task}: executor step")
            }
            Action::Next { client } => format!("client {client} moves to its next request"),
            Action::Finish { session, run } => format!("run {run} of s{session} completes"),
            Action::Delete { session } => format!("deleteSession s{session}"),
            Action::Expire { session, run } => {
                format!("the lease of run {run} of s{session} expires")
            }
        }
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut properties = self.base_properties();
        if self.config.expiries > 0 {
            properties.push(Property::sometimes(
                props::SOMETIMES_EXPIRED_REPLAY,
                |m: &Self, st: &SystemState| {
                    m.answers(st)
                        .any(|(_, a)| a.kind == AnswerKind::Replayed && a.replayed_interrupted)
                },
            ));
        }
        properties
    }
}
