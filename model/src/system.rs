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
//! implements [`Representative`] by sorting each group of twins.

use std::fmt;

use serde_json::{json, Value};
use stateright::{Model, Property, Representative};

use crate::digest::execute_request_digest;
use crate::error::{RunStartRejection, StoreError};
use crate::mutants::Mutant;
use crate::plan::{plan_keyed_entry, KeyedEntryPlan};
use crate::props;
use crate::seq::{CommitArgs, KeyArgs, RunArgs, SessionArgs, SessionState, StatusArgs, StoreOp};
use crate::types::{CommitOutcome, RunMetadata, RunStatus, StartRun};

/// One logical request: which session, which key (none: keyless), which
/// input. Its retries are the same logical request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Request {
    pub session: u8,
    pub key: Option<u8>,
    pub input: u8,
}

/// The size of the world the checker explores.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Clients; client `i` sends the requests of its script in order.
    pub clients: usize,
    /// Sessions, `s0..`.
    pub sessions: usize,
    /// Request keys, `k0..` (0: every request is keyless).
    pub keys: usize,
    /// Distinct inputs, `{"text": "in0"}..`.
    pub inputs: usize,
    /// Logical requests in all (at least one per client), dealt to the
    /// clients in turn.
    pub requests: usize,
    /// Resends after a lost response, in the whole run (any client's
    /// current request; a resend may overtake the attempt still in flight).
    pub retries: usize,
    /// `deleteSession` calls in the whole run.
    pub deletes: usize,
    /// Extra clients with the same script as client 0 (symmetric twins).
    pub twins: usize,
    /// Whether runs complete.
    pub finishes: bool,
    /// Lease expiries in the whole run (SPEC 5, `[[lease.expire.any-reader]]`):
    /// a running run's executor dies, its lease runs out and a reader sets
    /// the run `interrupted`. 0 by default (the documented figures).
    pub expiries: usize,
    /// How many times an entry decides again after `cas_mismatch`.
    pub cas_retries: usize,
    /// A deliberate bug, or `None` for the spec.
    pub mutant: Option<Mutant>,
}

impl Default for Config {
    /// The default configuration: 3 clients, 2 sessions, 2 keys, 2 inputs,
    /// 4 requests (client 0 sends two), one resend, one delete, runs finish.
    fn default() -> Self {
        Config {
            clients: 3,
            sessions: 2,
            keys: 2,
            inputs: 2,
            requests: 4,
            retries: 1,
            deletes: 1,
            twins: 0,
            finishes: true,
            expiries: 0,
            cas_retries: 1,
            mutant: None,
        }
    }
}

impl Config {
    /// Checks the bounds the model relies on (ids fit in `u8`, at least one
    /// of each thing).
    pub fn validate(&self) -> Result<(), String> {
        let total = self.clients + self.twins;
        if self.clients == 0 || self.sessions == 0 || self.inputs == 0 || self.requests == 0 {
            return Err("clients, sessions, inputs and requests must be at least 1".into());
        }
        if total > 8 || self.sessions > 8 || self.keys > 8 || self.inputs > 8 {
            return Err("at most 8 clients (with twins), sessions, keys and inputs".into());
        }
        if self.requests > 16
            || self.retries > 4
            || self.deletes > 4
            || self.cas_retries > 4
            || self.expiries > 4
        {
            return Err(
                "at most 16 requests, 4 retries, 4 deletes, 4 cas retries and 4 expiries".into(),
            );
        }
        Ok(())
    }

    /// The scripts: logical request `n` (of `requests` in all, at least one
    /// per client) is `ROLES[n % 8]` and goes to client `n % clients`, so
    /// client `i` sends requests `i, i + clients, ...` one after another.
    /// The roles are ordered so that small configurations already reach
    /// every answer kind: a keyed request, the same key with another input
    /// (conflict), a keyless entry (a later run: a finished holder is no
    /// longer current), a second key in the second session, ...
    pub fn scripts(&self) -> Vec<Vec<Request>> {
        let s1 = (1 % self.sessions) as u8;
        let in1 = (1 % self.inputs) as u8;
        let key = |k: u8| {
            if self.keys == 0 {
                None
            } else {
                Some(k % self.keys as u8)
            }
        };
        let r = |session, key, input| Request {
            session,
            key,
            input,
        };
        let roles = [
            r(0, key(0), 0),
            r(0, key(0), in1),
            r(0, None, in1),
            r(s1, key(1), 0),
            r(0, key(1), 0),
            r(s1, key(0), 0),
            r(s1, None, in1),
            r(s1, key(0), in1),
        ];
        let total = self.requests.max(self.clients);
        let mut scripts: Vec<Vec<Request>> = (0..self.clients)
            .map(|i| {
                (i..total)
                    .step_by(self.clients)
                    .map(|n| roles[n % roles.len()])
                    .collect()
            })
            .collect();
        for _ in 0..self.twins {
            scripts.push(scripts[0].clone());
        }
        scripts
    }
}

/// How an entry ended, as its client sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AnswerKind {
    /// A new run started (keyed: the key recorded).
    Started,
    Attached,
    Replayed,
    /// 409 `state_request_key_conflict`.
    KeyConflict,
    /// 409 `state_request_already_completed`.
    AlreadyCompleted,
    /// `cas_mismatch` more often than the executor retries.
    Busy,
    /// A raw `request_key_taken` reached the client.
    KeyTaken,
    /// Anything the protocol cannot produce (a bug in the model).
    Internal,
}

/// A client-visible answer plus ghost facts about the moment it was given.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Answer {
    pub kind: AnswerKind,
    /// The run the answer names (started, attached, replayed, 409).
    pub run: Option<String>,
    /// The answer came from the re-plan after `request_key_taken`.
    pub replanned: bool,
    /// The session's epoch (deletes so far) when the answer was given.
    pub epoch: u8,
    /// Ghost: the named run was the key's holder in this session.
    pub names_holder: bool,
    /// Ghost: the named run carries this request's digest.
    pub same_input: bool,
    /// Ghost: a started run took a key that an earlier epoch held.
    pub reused_key: bool,
    /// Ghost: the session was deleted while the entry was in flight.
    pub deleted_meanwhile: bool,
}

/// Where an executor task is.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Phase {
    Lookup,
    ReadCurrent,
    Commit {
        expected: Option<String>,
    },
    /// Only under [`Mutant::HolderReadOutsideCommit`]: the holder was read,
    /// the decision and write come later.
    CommitWrite {
        expected: Option<String>,
        stale_holder: Option<RunMetadata>,
    },
    Replan {
        holder: String,
    },
    Done(Answer),
}

/// One attempt (HTTP request) of a client.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Task {
    pub run_id: String,
    /// The session's epoch when the attempt was sent.
    pub epoch: u8,
    pub cas_tries: u8,
    pub replanned: bool,
    pub phase: Phase,
}

/// A client: where it is in its script, and the attempts of the current
/// request.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Client {
    /// The client's role: its script, shared with its twins.
    pub role: u8,
    pub request: u8,
    pub sent: u8,
    pub tasks: Vec<Task>,
}

/// The whole system.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SystemState {
    /// One store session per session index (the store is a map of these).
    pub sessions: Vec<SessionState>,
    /// Deletes per session so far.
    pub epochs: Vec<u8>,
    pub deletes_left: u8,
    pub retries_left: u8,
    /// Lease expiries still possible.
    pub expiries_left: u8,
    /// Ghost: per session, a bit per key held at some delete.
    pub freed: Vec<u8>,
    /// Only under [`Mutant::DeleteKeepsKeys`]: the key index a delete left.
    pub zombie_keys: Vec<Vec<(u8, RunMetadata)>>,
    /// Run ids handed out so far, per role.
    pub role_counters: Vec<u8>,
    pub clients: Vec<Client>,
    /// Ghost: some keyed commit was answered other than "request_key_taken
    /// naming the holder" exactly when another run held its key.
    pub key_refusal_wrong: bool,
}

/// Which client (and task) moves, or which environment event happens.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Action {
    /// The client sends its current request (again, after a lost response).
    Send { client: u8 },
    /// One executor step of a task.
    Step { client: u8, task: u8 },
    /// The client moves on to its next request.
    Next { client: u8 },
    /// A live run completes.
    Finish { session: u8, run_id: String },
    /// `deleteSession`.
    Delete { session: u8 },
    /// The executor of a running run died; its lease ran out and a reader
    /// (any replica) set the run `interrupted` in one atomic step that
    /// compares the lease (SPEC 5, `[[lease.expire.compare]]`). The dead
    /// executor's own finish is then no longer possible: `interrupted` is
    /// final.
    Expire { session: u8, run_id: String },
}

/// The model: a configuration and the names it uses.
#[derive(Debug, Clone)]
pub struct KeyedEntryModel {
    pub config: Config,
    scripts: Vec<Vec<Request>>,
    /// Role (distinct script) of each client.
    roles: Vec<u8>,
    /// The script of each role.
    role_scripts: Vec<Vec<Request>>,
    session_ids: Vec<String>,
    key_names: Vec<String>,
    inputs: Vec<Value>,
    digests: Vec<String>,
}

/// The session id of session `i` in the model and in exported scenarios.
pub fn session_name(i: u8) -> String {
    format!("s{i}")
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
        let inputs: Vec<Value> = (0..config.inputs)
            .map(|i| json!({ "text": format!("in{i}") }))
            .collect();
        KeyedEntryModel {
            scripts,
            roles,
            role_scripts,
            session_ids: (0..config.sessions as u8).map(session_name).collect(),
            key_names: (0..config.keys).map(|k| format!("k{k}")).collect(),
            digests: inputs.iter().map(execute_request_digest).collect(),
            inputs,
            config,
        }
    }

    pub fn scripts(&self) -> &[Vec<Request>] {
        &self.scripts
    }

    /// Whether two clients share a script (symmetry reduction can pay).
    pub fn has_twins(&self) -> bool {
        self.role_scripts.len() < self.scripts.len()
    }

    /// The request a client is working on, if its script is not done.
    fn current_request(&self, state: &SystemState, client: usize) -> Option<Request> {
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
    fn read_holder(&self, state: &SystemState, session: u8, key: u8) -> Option<RunMetadata> {
        let name = &self.key_names[key as usize];
        let own = state.sessions[session as usize].run_by_request_key(name);
        match self.mutant() {
            Some(Mutant::GlobalKeyIndex) => state
                .sessions
                .iter()
                .find_map(|s| s.run_by_request_key(name))
                .cloned(),
            Some(Mutant::DeleteKeepsKeys) => own.cloned().or_else(|| {
                state.zombie_keys[session as usize]
                    .iter()
                    .find(|(k, _)| *k == key)
                    .map(|(_, run)| run.clone())
            }),
            _ => own.cloned(),
        }
    }

    /// The digest the executor hands to the plan. The spec: this request's.
    fn digest_for_plan<'a>(&'a self, request: Request, holder: Option<&'a RunMetadata>) -> &'a str {
        let own = self.digests[request.input as usize].as_str();
        match (self.mutant(), holder) {
            (Some(Mutant::DigestNotCompared), Some(h)) => {
                h.request_digest.as_deref().unwrap_or(own)
            }
            _ => own,
        }
    }

    fn start_run(&self, request: Request, run_id: &str, expected: Option<String>) -> StartRun {
        StartRun {
            session_id: self.session_ids[request.session as usize].clone(),
            run_id: run_id.to_owned(),
            expected_current_run_id: expected,
            input: self.inputs[request.input as usize].clone(),
            request_key: request.key.map(|k| self.key_names[k as usize].clone()),
            request_digest: request
                .key
                .map(|_| self.digests[request.input as usize].clone()),
        }
    }

    /// An answer that names a run, with its ghost facts.
    fn named_answer(
        &self,
        state: &SystemState,
        request: Request,
        task: &Task,
        kind: AnswerKind,
        run: &str,
        run_digest: Option<&str>,
    ) -> Answer {
        let session = &state.sessions[request.session as usize];
        let true_holder = request
            .key
            .and_then(|k| session.run_by_request_key(&self.key_names[k as usize]));
        Answer {
            kind,
            run: Some(run.to_owned()),
            replanned: task.replanned,
            epoch: state.epochs[request.session as usize],
            names_holder: true_holder.is_some_and(|h| h.run_id == run),
            same_input: run_digest == Some(self.digests[request.input as usize].as_str()),
            reused_key: false,
            deleted_meanwhile: task.epoch != state.epochs[request.session as usize],
        }
    }

    fn plain_answer(
        &self,
        state: &SystemState,
        request: Request,
        task: &Task,
        kind: AnswerKind,
    ) -> Answer {
        Answer {
            kind,
            run: None,
            replanned: task.replanned,
            epoch: state.epochs[request.session as usize],
            names_holder: false,
            same_input: false,
            reused_key: false,
            deleted_meanwhile: task.epoch != state.epochs[request.session as usize],
        }
    }

    /// Turns a plan into the task's next phase (New) or its answer.
    fn follow_plan(
        &self,
        state: &SystemState,
        request: Request,
        task: &Task,
        plan: KeyedEntryPlan,
    ) -> Phase {
        let (kind, run, digest) = match &plan {
            KeyedEntryPlan::New => return Phase::ReadCurrent,
            KeyedEntryPlan::Attach(h) => {
                (AnswerKind::Attached, &h.run_id, h.request_digest.as_deref())
            }
            KeyedEntryPlan::Replay(h) => {
                (AnswerKind::Replayed, &h.run_id, h.request_digest.as_deref())
            }
            KeyedEntryPlan::Conflict { holder_run_id } => {
                (AnswerKind::KeyConflict, holder_run_id, None)
            }
            KeyedEntryPlan::AlreadyCompleted { holder_run_id } => {
                (AnswerKind::AlreadyCompleted, holder_run_id, None)
            }
        };
        Phase::Done(self.named_answer(state, request, task, kind, run, digest))
    }

    /// One executor step of task `t` of client `c`. Pushes the store
    /// operations the step performs onto `trace`.
    fn step_task(&self, state: &mut SystemState, c: usize, t: usize, trace: &mut Vec<StoreOp>) {
        let Some(request) = self.current_request(state, c) else {
            return;
        };
        let task = state.clients[c].tasks[t].clone();
        let s = request.session as usize;
        let sid = self.session_ids[s].clone();
        let current =
            |state: &SystemState| state.sessions[s].current_run().map(|r| r.run_id.clone());
        let next_phase = match &task.phase {
            Phase::Done(_) => return,
            Phase::Lookup => match request.key {
                None => Phase::ReadCurrent,
                Some(k) => {
                    trace.push(StoreOp::GetRunByRequestKey(KeyArgs {
                        session_id: sid.clone(),
                        request_key: self.key_names[k as usize].clone(),
                    }));
                    trace.push(StoreOp::GetCurrentRun(SessionArgs { session_id: sid }));
                    let holder = self.read_holder(state, request.session, k);
                    let cur = current(state);
                    let plan = plan_keyed_entry(
                        holder.as_ref(),
                        cur.as_deref(),
                        self.digest_for_plan(request, holder.as_ref()),
                    );
                    match self.follow_plan(state, request, &task, plan) {
                        // The current run read with the holder is the
                        // commit's expectation.
                        Phase::ReadCurrent => Phase::Commit { expected: cur },
                        other => other,
                    }
                }
            },
            Phase::ReadCurrent => {
                trace.push(StoreOp::GetCurrentRun(SessionArgs { session_id: sid }));
                Phase::Commit {
                    expected: current(state),
                }
            }
            Phase::Commit { expected } => {
                let start = self.start_run(request, &task.run_id, expected.clone());
                if self.mutant() == Some(Mutant::HolderReadOutsideCommit) && request.key.is_some() {
                    // The broken store reads the holder now and decides later.
                    let k = request.key.unwrap_or_default();
                    trace.push(StoreOp::GetRunByRequestKey(KeyArgs {
                        session_id: sid,
                        request_key: self.key_names[k as usize].clone(),
                    }));
                    Phase::CommitWrite {
                        expected: expected.clone(),
                        stale_holder: self.read_holder(state, request.session, k),
                    }
                } else {
                    trace.push(StoreOp::CommitRunStart(CommitArgs {
                        start_run: start.clone(),
                    }));
                    let holder = request
                        .key
                        .and_then(|k| self.read_holder(state, request.session, k));
                    self.commit(state, request, &task, &start, holder)
                }
            }
            Phase::CommitWrite {
                expected,
                stale_holder,
            } => {
                let start = self.start_run(request, &task.run_id, expected.clone());
                trace.push(StoreOp::CommitRunStart(CommitArgs {
                    start_run: start.clone(),
                }));
                self.commit(state, request, &task, &start, stale_holder.clone())
            }
            Phase::Replan { holder } => {
                trace.push(StoreOp::GetRun(RunArgs {
                    session_id: sid.clone(),
                    run_id: holder.clone(),
                }));
                trace.push(StoreOp::GetCurrentRun(SessionArgs { session_id: sid }));
                let found = state.sessions[s].run(holder).cloned();
                let cur = current(state);
                let plan = plan_keyed_entry(
                    found.as_ref(),
                    cur.as_deref(),
                    self.digest_for_plan(request, found.as_ref()),
                );
                match self.follow_plan(state, request, &task, plan) {
                    Phase::ReadCurrent => Phase::Commit { expected: cur },
                    other => other,
                }
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
        if let Phase::Done(answer) = &next_phase {
            let mut answer = answer.clone();
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
        start: &StartRun,
        holder: Option<RunMetadata>,
    ) -> Phase {
        let s = request.session as usize;
        let variant = Mutant::rule_variant(self.mutant());
        let true_holder = request
            .key
            .and_then(|k| state.sessions[s].run_by_request_key(&self.key_names[k as usize]))
            .filter(|h| h.run_id != start.run_id)
            .map(|h| h.run_id.clone());
        let session = &mut state.sessions[s];
        let result = session
            .decide(start, holder.as_ref(), variant)
            .map(|decision| session.apply(start, decision));
        let refused_by_key = match &result {
            Err(StoreError::RunStartRejected(RunStartRejection::RequestKeyTaken {
                existing_run_id,
            })) => Some(existing_run_id.clone()),
            _ => None,
        };
        if request.key.is_some() && refused_by_key != true_holder {
            state.key_refusal_wrong = true;
        }
        match result {
            Ok(commit) if commit.outcome == CommitOutcome::Started => {
                let mut answer = self.named_answer(
                    state,
                    request,
                    task,
                    AnswerKind::Started,
                    &commit.run.run_id,
                    commit.run.request_digest.as_deref(),
                );
                answer.reused_key = request.key.is_some_and(|k| state.freed[s] & (1 << k) != 0);
                Phase::Done(answer)
            }
            Ok(_) => Phase::Done(self.plain_answer(state, request, task, AnswerKind::Internal)),
            Err(StoreError::RunStartRejected(RunStartRejection::RequestKeyTaken {
                existing_run_id,
            })) => {
                if task.replanned || self.mutant() == Some(Mutant::NoReplan) {
                    Phase::Done(self.plain_answer(state, request, task, AnswerKind::KeyTaken))
                } else {
                    Phase::Replan {
                        holder: existing_run_id,
                    }
                }
            }
            Err(StoreError::RunStartRejected(RunStartRejection::CasMismatch { .. })) => {
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
            Err(_) => Phase::Done(self.plain_answer(state, request, task, AnswerKind::Internal)),
        }
    }

    /// Applies an action, recording the store operations it performs.
    pub fn apply_traced(
        &self,
        state: &SystemState,
        action: &Action,
        trace: &mut Vec<StoreOp>,
    ) -> Option<SystemState> {
        let mut next = state.clone();
        match action {
            Action::Send { client } => {
                let c = *client as usize;
                let request = self.current_request(state, c)?;
                let role = state.clients[c].role as usize;
                next.role_counters[role] += 1;
                let run_id = format!("c{role}r{}", next.role_counters[role]);
                if state.clients[c].sent > 0 {
                    next.retries_left = next.retries_left.checked_sub(1)?;
                }
                let client = &mut next.clients[c];
                client.sent += 1;
                client.tasks.push(Task {
                    run_id,
                    epoch: state.epochs[request.session as usize],
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
                self.step_task(&mut next, *client as usize, *task as usize, trace);
            }
            Action::Next { client } => {
                let client = &mut next.clients[*client as usize];
                client.request += 1;
                client.sent = 0;
                client.tasks.clear();
            }
            Action::Finish { session, run_id } => {
                let s = *session as usize;
                trace.push(StoreOp::SetRunStatus(StatusArgs {
                    session_id: self.session_ids[s].clone(),
                    run_id: run_id.clone(),
                    status: RunStatus::Completed,
                }));
                next.sessions[s]
                    .set_run_status(run_id, RunStatus::Completed)
                    .ok()?;
            }
            Action::Expire { session, run_id } => {
                let s = *session as usize;
                trace.push(StoreOp::SetRunStatus(StatusArgs {
                    session_id: self.session_ids[s].clone(),
                    run_id: run_id.clone(),
                    status: RunStatus::Interrupted,
                }));
                next.expiries_left = next.expiries_left.checked_sub(1)?;
                next.sessions[s]
                    .set_run_status(run_id, RunStatus::Interrupted)
                    .ok()?;
            }
            Action::Delete { session } => {
                let s = *session as usize;
                trace.push(StoreOp::DeleteSession(SessionArgs {
                    session_id: self.session_ids[s].clone(),
                }));
                let old = std::mem::take(&mut next.sessions[s]);
                for (k, name) in self.key_names.iter().enumerate() {
                    if let Some(run) = old.run_by_request_key(name) {
                        next.freed[s] |= 1 << k;
                        if self.mutant() == Some(Mutant::DeleteKeepsKeys) {
                            next.zombie_keys[s].retain(|(zk, _)| *zk as usize != k);
                            next.zombie_keys[s].push((k as u8, run.clone()));
                        }
                    }
                }
                next.epochs[s] += 1;
                next.deletes_left -= 1;
            }
        }
        Some(next)
    }

    /// The store operations an action performs (for exported scenarios).
    pub fn store_ops(&self, state: &SystemState, action: &Action) -> Vec<StoreOp> {
        let mut trace = Vec::new();
        let _ = self.apply_traced(state, action, &mut trace);
        trace
    }

    /// One line saying what an action did from `state`: who moved, the
    /// store operations it performed and where the task ended up.
    pub fn describe_step(&self, state: &SystemState, action: &Action) -> String {
        let mut trace = Vec::new();
        let next = self.apply_traced(state, action, &mut trace);
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
                    expected.as_deref().unwrap_or("null")
                ),
                Phase::CommitWrite { stale_holder, .. } => format!(
                    "store read the holder outside its commit: {}",
                    stale_holder.as_ref().map_or("none", |h| h.run_id.as_str())
                ),
                Phase::Replan { holder } => {
                    format!("refused request_key_taken by {holder}; re-plans")
                }
                Phase::Done(a) => format!(
                    "answers {:?}{}",
                    a.kind,
                    a.run
                        .as_deref()
                        .map(|r| format!(" {r}"))
                        .unwrap_or_default()
                ),
            };
            format!(
                "client {c} ({request}) attempt {}{ops} -> {outcome}",
                task.run_id
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
            Action::Finish { session, run_id } => {
                format!("run {run_id} of s{session} completes{ops}")
            }
            Action::Delete { session } => format!("deleteSession s{session}{ops}"),
            Action::Expire { session, run_id } => {
                format!(
                    "the lease of run {run_id} of s{session} expires; a reader interrupts it{ops}"
                )
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

    fn is_keyed(&self, state: &SystemState, client: usize) -> bool {
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
            sessions: vec![SessionState::default(); n],
            epochs: vec![0; n],
            deletes_left: self.config.deletes as u8,
            retries_left: self.config.retries as u8,
            expiries_left: self.config.expiries as u8,
            freed: vec![0; n],
            zombie_keys: vec![Vec::new(); n],
            role_counters: vec![0; self.role_scripts.len()],
            clients: self
                .roles
                .iter()
                .map(|&role| Client {
                    role,
                    request: 0,
                    sent: 0,
                    tasks: Vec::new(),
                })
                .collect(),
            key_refusal_wrong: false,
        }]
    }

    fn actions(&self, state: &SystemState, actions: &mut Vec<Action>) {
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
                for run in session.runs().filter(|r| r.status.is_live()) {
                    actions.push(Action::Finish {
                        session: s as u8,
                        run_id: run.run_id.clone(),
                    });
                }
            }
        }
        if state.expiries_left > 0 {
            for (s, session) in state.sessions.iter().enumerate() {
                for run in session.runs().filter(|r| r.status == RunStatus::Running) {
                    actions.push(Action::Expire {
                        session: s as u8,
                        run_id: run.run_id.clone(),
                    });
                }
            }
        }
        if state.deletes_left > 0 {
            for (s, session) in state.sessions.iter().enumerate() {
                if !session.is_empty() {
                    actions.push(Action::Delete { session: s as u8 });
                }
            }
        }
    }

    fn next_state(&self, state: &SystemState, action: Action) -> Option<SystemState> {
        self.apply_traced(state, &action, &mut Vec::new())
    }

    fn format_action(&self, action: &Action) -> String {
        match action {
            Action::Send { client } => format!("client {client} sends its current request"),
            Action::Step { client, task } => {
                format!("client {client} attempt {task}: executor step")
            }
            Action::Next { client } => format!("client {client} moves to its next request"),
            Action::Finish { session, run_id } => format!("run {run_id} of s{session} completes"),
            Action::Delete { session } => format!("deleteSession s{session}"),
            Action::Expire { session, run_id } => {
                format!("the lease of run {run_id} of s{session} expires")
            }
        }
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut properties = self.base_properties();
        if self.config.expiries > 0 {
            properties.push(Property::sometimes(
                props::SOMETIMES_EXPIRED_REPLAY,
                |m: &Self, st: &SystemState| {
                    m.answers(st).any(|(_, a)| {
                        a.kind == AnswerKind::Replayed
                            && a.run.as_deref().is_some_and(|id| {
                                st.sessions.iter().any(|s| {
                                    s.run(id)
                                        .is_some_and(|r| r.status == RunStatus::Interrupted)
                                })
                            })
                    })
                },
            ));
        }
        properties
    }
}

impl KeyedEntryModel {
    fn base_properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(props::ONE_RUN_PER_KEY, |_, st: &SystemState| {
                st.sessions.iter().all(|s| {
                    let mut keys: Vec<&str> =
                        s.runs().filter_map(|r| r.request_key.as_deref()).collect();
                    let n = keys.len();
                    keys.sort_unstable();
                    keys.dedup();
                    keys.len() == n
                })
            }),
            Property::always(props::INPUT_ONCE, |m: &Self, st: &SystemState| {
                st.clients.iter().enumerate().all(|(c, client)| {
                    let Some(r) = m.current_request(st, c) else {
                        return true;
                    };
                    r.key.is_none()
                        || client
                            .tasks
                            .iter()
                            .filter(|t| {
                                matches!(&t.phase, Phase::Done(a)
                                    if a.kind == AnswerKind::Started && a.epoch == st.epochs[r.session as usize])
                            })
                            .count()
                            <= 1
                })
            }),
            Property::always(props::KEY_PER_SESSION, |m: &Self, st: &SystemState| {
                (0..m.config.sessions as u8).all(|s| {
                    (0..m.config.keys as u8).all(|k| {
                        m.read_holder(st, s, k)
                            .is_none_or(|h| h.session_id == m.session_ids[s as usize])
                    })
                })
            }),
            Property::always(props::NAMES_HOLDER, |m: &Self, st: &SystemState| {
                m.answers(st).all(|(_, a)| match a.kind {
                    AnswerKind::Attached
                    | AnswerKind::Replayed
                    | AnswerKind::KeyConflict
                    | AnswerKind::AlreadyCompleted => a.names_holder,
                    _ => true,
                })
            }),
            Property::always(props::DELETE_FREES_KEYS, |m: &Self, st: &SystemState| {
                (0..m.config.sessions as u8).all(|s| {
                    !st.sessions[s as usize].is_empty()
                        || (0..m.config.keys as u8).all(|k| m.read_holder(st, s, k).is_none())
                })
            }),
            Property::always(
                props::KEYLESS_NEVER_ATTACHED,
                |m: &Self, st: &SystemState| {
                    m.answers(st).all(|(c, a)| {
                        m.is_keyed(st, c)
                            || !matches!(a.kind, AnswerKind::Attached | AnswerKind::Replayed)
                    })
                },
            ),
            Property::always(props::ATTACH_SAME_INPUT, |m: &Self, st: &SystemState| {
                m.answers(st).all(|(_, a)| {
                    !matches!(a.kind, AnswerKind::Attached | AnswerKind::Replayed) || a.same_input
                })
            }),
            Property::always(props::KEY_REFUSAL, |_, st: &SystemState| {
                !st.key_refusal_wrong
            }),
            Property::always(props::LOST_RACE_ATTACHES, |m: &Self, st: &SystemState| {
                m.answers(st)
                    .all(|(_, a)| a.kind != AnswerKind::KeyTaken || a.deleted_meanwhile)
            }),
            Property::sometimes(props::SOMETIMES_NEW, |m: &Self, st: &SystemState| {
                m.answers(st)
                    .any(|(c, a)| a.kind == AnswerKind::Started && m.is_keyed(st, c))
            }),
            Property::sometimes(props::SOMETIMES_ATTACH, |m: &Self, st: &SystemState| {
                m.answers(st).any(|(_, a)| a.kind == AnswerKind::Attached)
            }),
            Property::sometimes(props::SOMETIMES_REPLAY, |m: &Self, st: &SystemState| {
                m.answers(st).any(|(_, a)| a.kind == AnswerKind::Replayed)
            }),
            Property::sometimes(props::SOMETIMES_CONFLICT, |m: &Self, st: &SystemState| {
                m.answers(st)
                    .any(|(_, a)| a.kind == AnswerKind::KeyConflict)
            }),
            Property::sometimes(
                props::SOMETIMES_ALREADY_COMPLETED,
                |m: &Self, st: &SystemState| {
                    m.answers(st)
                        .any(|(_, a)| a.kind == AnswerKind::AlreadyCompleted)
                },
            ),
            Property::sometimes(props::SOMETIMES_LOST_RACE, |m: &Self, st: &SystemState| {
                m.answers(st).any(|(_, a)| {
                    a.replanned && matches!(a.kind, AnswerKind::Attached | AnswerKind::Replayed)
                })
            }),
            Property::sometimes(props::SOMETIMES_REUSED, |m: &Self, st: &SystemState| {
                m.answers(st)
                    .any(|(_, a)| a.kind == AnswerKind::Started && a.reused_key)
            }),
        ]
    }
}

impl Representative for SystemState {
    /// Sorts the clients. A client's behaviour depends only on its own
    /// fields (its role names its script), and run ids are per role, so any
    /// permutation of the client vector is an equivalent state; sorting
    /// picks one per class. Only twins (same role) really move: `role` is
    /// the first field of the order.
    fn representative(&self) -> Self {
        let mut rep = self.clone();
        rep.clients.sort();
        rep
    }
}

impl fmt::Display for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.key {
            Some(k) => write!(f, "s{} k{} in{}", self.session, k, self.input),
            None => write!(f, "s{} keyless in{}", self.session, self.input),
        }
    }
}
