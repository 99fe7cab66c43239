//! The sequential agent model: the executor's rules of SPEC 5 and 7 over [`SeqStore`].
//!
//! An agent server's answers depend on things a client cannot see in
//! advance: the run ids it picks, how long a run stays `running`, which
//! order concurrent requests were decided in. So the model does not
//! predict one answer; it keeps a *set* of states the server may be in and,
//! given a request and the answer the server gave, keeps the successors
//! that answer is consistent with ([`AgentModel::next`]). An empty set is a
//! nonconforming answer, and the error names what the spec allowed.
//!
//! Choices it leaves open, so that it never flags a conforming server:
//! run ids (any id fresh in its session, bound when first seen); when a
//! run leaves `running` (settling is a branch: [`AgentModel::settle_choices`]
//! before a request of a concurrent batch, [`AgentModel::settle_all`] once
//! the harness waited); how a run of an input that is not the test agent's
//! `{"text": string}` ends (any end, resolved by later answers); the digest
//! a server writes (only its presence is judged, SPEC 3 `[[digest.black-box]]`);
//! which of the two not-found codes an unknown session's run read gets; and
//! whether `interrupt_previous` interrupts a suspended run on retry (SPEC 7
//! says only what it does to a `running` one).
//!
//! Decisions are the spec's functions, never restated: keyed planning is
//! [`plan_keyed_entry`], commits and status changes go through
//! [`SeqStore::apply`], digests through [`request_digest`].

use std::collections::BTreeMap;

use serde_json::{json, Value};

pub use crate::contract::agent_exchange::{
    echo_of, scripted_end, sleep_ms, AgentOp, KeyHeader, Observed, RunLife, StreamSeen, Timing,
};
use crate::contract::agent_exchange::{
    finish_ok, health_matches, run_json, run_matches, snapshot_matches, texts_ok,
};
use crate::contract::digest::{request_digest, DigestKind};
use crate::contract::plan::{plan_keyed_entry, KeyedEntryPlan};
use crate::contract::seq::{
    CommitArgs, SeqStore, SessionArgs, SessionState, StatusArgs, StoreOp, StoreReply,
};
use crate::contract::types::{RunMetadata, RunStatus, StartRun};
use crate::contract::vocab::{ConcurrentEntry, Profile};

const ANY_END: [RunStatus; 3] = [
    RunStatus::Completed,
    RunStatus::Failed,
    RunStatus::SuspendedInput,
];

/// One state a server may be in.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AgentModel {
    store: SeqStore,
    /// Runs still `running`: (session, run id) -> how they end and when
    /// they may end at the earliest.
    running: BTreeMap<(String, String), RunLife>,
    profile: Profile,
}

/// What one request may be answered, in one state.
#[derive(Debug, Clone)]
pub(crate) enum Expect {
    /// A new run: 201 started, or a stream with `attached: false`.
    New {
        start: StartRun,
        start_sequence: u64,
        /// The current run's transition, after the commit.
        previous: Option<(String, RunStatus)>,
        end: Option<RunStatus>,
    },
    /// 200 attached (or a stream with `attached: true`) naming the run.
    Attach(RunMetadata),
    Refused {
        status: u16,
        code: &'static str,
        run_id: Option<String>,
    },
    /// A 404 whose code is one of these.
    NotFound(&'static [&'static str]),
    Snapshot(Value),
    Run(RunMetadata),
    Deleted,
    /// A reconnect's stream of this run.
    Reconnect(RunMetadata),
    /// `/health` declaring the profile.
    Health,
}

impl AgentModel {
    pub fn new(profile: &Profile) -> Self {
        Self {
            store: SeqStore::new(),
            running: BTreeMap::new(),
            profile: *profile,
        }
    }

    fn keys(&self) -> bool {
        self.profile.supports_request_key
    }

    fn interrupt(&self) -> bool {
        self.profile.concurrent_entry == ConcurrentEntry::InterruptPrevious
    }

    /// The store as the model holds it.
    pub fn store(&self) -> &SeqStore {
        &self.store
    }

    /// Run ids of `session`, by `startSequence`.
    pub fn run_ids(&self, session: &str) -> Vec<String> {
        self.store
            .session(session)
            .map(|s| s.runs().map(|r| r.run_id.clone()).collect())
            .unwrap_or_default()
    }

    /// Whether some run is still `running`.
    pub fn has_running(&self) -> bool {
        !self.running.is_empty()
    }

    /// The runs still `running` here, with their lives.
    pub fn running(&self) -> impl Iterator<Item = (&(String, String), &RunLife)> {
        self.running.iter()
    }

    fn set_status(&mut self, session: &str, run_id: &str, to: RunStatus) {
        let op = StoreOp::SetRunStatus(StatusArgs {
            session_id: session.to_owned(),
            run_id: run_id.to_owned(),
            status: to,
        });
        // A refusal means the run finished already: nothing to change.
        let _ = self.store.apply(&op);
        if to != RunStatus::Running {
            self.running
                .remove(&(session.to_owned(), run_id.to_owned()));
        }
    }

    /// Every run left `running` ends (the harness waited for them); a run
    /// of unknown end branches over every end.
    pub fn settle_all(&self) -> Vec<AgentModel> {
        self.settle_all_at(u64::MAX)
    }

    /// [`Self::settle_all`] at `now_ms`: a run whose earliest end is later
    /// stays `running` (it cannot have ended; a server that says it did
    /// is caught by the next read of it).
    pub fn settle_all_at(&self, now_ms: u64) -> Vec<AgentModel> {
        self.branch(now_ms, false)
    }

    /// Every subset of the running runs may have ended by now (inside a
    /// concurrent batch, or after a step the harness did not wait for).
    pub fn settle_choices(&self) -> Vec<AgentModel> {
        self.settle_choices_at(u64::MAX)
    }

    /// [`Self::settle_choices`] at `now_ms`: only runs whose earliest end
    /// is not after it may have ended.
    pub fn settle_choices_at(&self, now_ms: u64) -> Vec<AgentModel> {
        self.branch(now_ms, true)
    }

    /// Each run that may have ended by `now_ms` ends (every end it may
    /// have), or (`optional`) also stays running.
    fn branch(&self, now_ms: u64, optional: bool) -> Vec<AgentModel> {
        let mut out = vec![self.clone()];
        for ((session, run), life) in &self.running {
            if life.not_before_ms > now_ms {
                continue;
            }
            let ends: Vec<RunStatus> = life.end.map_or(ANY_END.to_vec(), |e| vec![e]);
            let mut next = Vec::new();
            for state in &out {
                if optional {
                    next.push(state.clone());
                }
                for e in &ends {
                    let mut s = state.clone();
                    s.set_status(session, run, *e);
                    next.push(s);
                }
            }
            out = dedup(next);
        }
        out
    }

    /// The states one request (answered `obs`) may have met: after the
    /// harness waited for every run (`settled`), each run that could end
    /// before the request was sent has ended; a run that could end while
    /// it was in flight may have; none other.
    pub fn before(&self, obs: &Observed, settled: bool) -> Vec<AgentModel> {
        let (invoke, ret) = obs
            .timing
            .map_or((u64::MAX, u64::MAX), |t| (t.invoke_ms, t.return_ms));
        let base = if settled {
            self.settle_all_at(invoke)
        } else {
            vec![self.clone()]
        };
        dedup(base.iter().flat_map(|s| s.settle_choices_at(ret)).collect())
    }

    /// The input `run_id` of `session` was committed with.
    fn run_input(&self, session: &str, run_id: &str) -> Option<Value> {
        self.session(session)?
            .inputs()
            .into_iter()
            .find(|i| i.run_id == run_id)
            .map(|i| i.input)
    }

    fn session(&self, id: &str) -> Option<&SessionState> {
        self.store.session(id).filter(|s| !s.is_empty())
    }

    /// Whether `op` is a keyed entry that plans (SPEC 5): a valid key the
    /// profile honours, on an entry that is not a reconnect or a
    /// tool-result send (keyless, `[[agent.chat.tool-send-keyless]]`).
    pub fn plans(&self, op: &AgentOp) -> bool {
        match op {
            AgentOp::Reconnect { .. } | AgentOp::ChatSend { tool: true, .. } => false,
            _ => self.effective_key(op.key()).is_some(),
        }
    }

    fn effective_key(&self, key: &KeyHeader) -> Option<String> {
        match key {
            KeyHeader::Valid(k) if self.keys() => Some(k.clone()),
            _ => None,
        }
    }

    /// The answers `op` may get in this state (several where the spec
    /// leaves a choice).
    fn expect(&self, op: &AgentOp) -> Vec<Expect> {
        let malformed = |k: &KeyHeader| matches!(k, KeyHeader::Malformed(_));
        match op {
            AgentOp::Start { key, .. }
            | AgentOp::Resume { key, .. }
            | AgentOp::Retry { key, .. }
            | AgentOp::ChatSend { key, .. }
                if malformed(key) =>
            {
                vec![Expect::Refused {
                    status: 400,
                    code: "validation_error",
                    run_id: None,
                }]
            }
            AgentOp::Start {
                session,
                key,
                input,
            } => self.entry(session, Entry::Start, self.effective_key(key), input),
            AgentOp::Resume {
                session,
                key,
                input,
            } => self.entry(session, Entry::Resume, self.effective_key(key), input),
            AgentOp::Retry { session, key } => {
                self.entry(session, Entry::Retry, self.effective_key(key), &Value::Null)
            }
            AgentOp::ChatSend {
                session,
                key,
                content,
                tool,
            } => {
                let key = if *tool { None } else { self.effective_key(key) };
                self.entry(session, Entry::Chat, key, &json!({ "text": content }))
            }
            AgentOp::Reconnect { session, .. } => match self.session(session) {
                None => vec![Expect::NotFound(&["state_session_not_found"])],
                Some(s) => s
                    .current_run()
                    .map(|r| vec![Expect::Reconnect(r.clone())])
                    .unwrap_or_default(),
            },
            AgentOp::Snapshot { session } => match self.session(session) {
                None => vec![Expect::NotFound(&["state_session_not_found"])],
                Some(s) => {
                    let runs: Vec<Value> = s.runs().map(run_json).collect();
                    let inputs: Vec<Value> = s
                        .inputs()
                        .into_iter()
                        .map(|i| json!({"runId": i.run_id, "input": i.input}))
                        .collect();
                    vec![Expect::Snapshot(
                        json!({"sessionId": session, "runs": runs, "inputs": inputs}),
                    )]
                }
            },
            AgentOp::ReadRun {
                session, run_id, ..
            } => match self.session(session) {
                None => vec![Expect::NotFound(&[
                    "state_session_not_found",
                    "state_run_not_found",
                ])],
                Some(s) => match s.run(run_id) {
                    Some(r) => vec![Expect::Run(r.clone())],
                    None => vec![Expect::NotFound(&["state_run_not_found"])],
                },
            },
            AgentOp::BadWait { session, run_id } => {
                let read = AgentOp::ReadRun {
                    session: session.clone(),
                    run_id: run_id.clone(),
                    wait_ms: 0,
                };
                let mut out: Vec<Expect> = self
                    .expect(&read)
                    .into_iter()
                    .filter(|e| matches!(e, Expect::NotFound(_)))
                    .collect();
                out.push(Expect::Refused {
                    status: 400,
                    code: "validation_error",
                    run_id: None,
                });
                out
            }
            AgentOp::Delete { session } => match self.session(session) {
                None => vec![Expect::NotFound(&["state_session_not_found"])],
                Some(_) => vec![Expect::Deleted],
            },
            AgentOp::Health => vec![Expect::Health],
            AgentOp::Refusal { status, code, .. } => vec![Expect::Refused {
                status: *status,
                code,
                run_id: None,
            }],
        }
    }

    /// An entry: the key planned first (SPEC 5), then the route's policy
    /// (SPEC 7) for a new run.
    fn entry(&self, session: &str, kind: Entry, key: Option<String>, input: &Value) -> Vec<Expect> {
        let state = self.session(session);
        let current = state.and_then(SessionState::current_run);
        let digest = request_digest(kind.digest_kind(), input);
        if let Some(k) = &key {
            let holder = state.and_then(|s| s.run_by_request_key(k));
            if let Some(holder) = holder {
                return match plan_keyed_entry(
                    Some(holder),
                    current.map(|r| r.run_id.as_str()),
                    &digest,
                ) {
                    KeyedEntryPlan::Attach(run) | KeyedEntryPlan::Replay(run) => {
                        vec![Expect::Attach(run)]
                    }
                    KeyedEntryPlan::Conflict { holder_run_id } => vec![Expect::Refused {
                        status: 409,
                        code: "state_request_key_conflict",
                        run_id: Some(holder_run_id),
                    }],
                    KeyedEntryPlan::AlreadyCompleted { holder_run_id } => {
                        vec![Expect::Refused {
                            status: 409,
                            code: "state_request_already_completed",
                            run_id: Some(holder_run_id),
                        }]
                    }
                    KeyedEntryPlan::New => Vec::new(),
                };
            }
        }
        let busy = Expect::Refused {
            status: 409,
            code: "state_already_running",
            run_id: None,
        };
        let not_found = Expect::NotFound(&["state_session_not_found"]);
        // Which transitions of the current run a new run may come with.
        let mut previous: Vec<Option<(String, RunStatus)>> = Vec::new();
        let mut refusals = Vec::new();
        let interrupts = self.interrupt() && (key.is_some() || kind != Entry::Chat);
        match (kind, current) {
            (Entry::Start, Some(_)) => refusals.push(Expect::Refused {
                status: 409,
                code: "state_session_exists",
                run_id: None,
            }),
            (Entry::Start | Entry::Chat, None) => previous.push(None),
            (Entry::Resume | Entry::Retry, None) => refusals.push(not_found),
            (_, Some(run)) if run.status == RunStatus::Running => {
                if interrupts {
                    previous.push(Some((run.run_id.clone(), RunStatus::Interrupted)));
                } else {
                    refusals.push(busy);
                }
            }
            (Entry::Retry, Some(run)) if run.status.is_live() => {
                refusals.push(busy);
                if self.interrupt() {
                    // SPEC 7 leaves a suspended run on retry open here.
                    previous.push(Some((run.run_id.clone(), RunStatus::Interrupted)));
                }
            }
            (Entry::Resume | Entry::Chat, Some(run)) if run.status.is_live() => {
                previous.push(Some((run.run_id.clone(), RunStatus::Completed)));
            }
            (_, Some(_)) => previous.push(None),
        }
        let run_input = match kind {
            Entry::Retry => state.and_then(|s| s.inputs().pop()).map(|i| i.input),
            _ => Some(input.clone()),
        };
        let Some(run_input) = run_input else {
            return refusals;
        };
        let start_sequence = state.map_or(0, SessionState::run_count) as u64 + 1;
        let end = scripted_end(&run_input);
        for prev in previous {
            refusals.push(Expect::New {
                start: StartRun {
                    session_id: session.to_owned(),
                    run_id: String::new(),
                    expected_current_run_id: current.map(|r| r.run_id.clone()),
                    input: run_input.clone(),
                    request_key: key.clone(),
                    request_digest: key.as_ref().map(|_| digest.clone()),
                },
                start_sequence,
                previous: prev,
                end,
            });
        }
        refusals
    }

    /// A conforming answer to `op` in this state (the first the spec
    /// allows), a new run named `fresh_run_id`: what a scenario written
    /// from a program expects.
    pub fn conforming(&self, op: &AgentOp, fresh_run_id: &str) -> Option<Observed> {
        let chat = op.streams();
        let stream =
            |run_id: &str, seq: u64, attached: bool, finish: RunStatus, input: &Value| Observed {
                status: 200,
                stream: Some(StreamSeen {
                    run_id: Some(run_id.to_owned()),
                    start_sequence: Some(seq),
                    attached: Some(attached),
                    finish: Some(finish.as_str().to_owned()),
                    runs: 1,
                    texts: echo_of(input).into_iter().collect(),
                }),
                ..Observed::default()
            };
        let body = |status: u16, v: Value| Observed {
            status,
            body: v.to_string(),
            json: Some(v),
            ..Observed::default()
        };
        let input_of = |r: &RunMetadata| {
            self.run_input(&r.session_id, &r.run_id)
                .unwrap_or(Value::Null)
        };
        Some(match self.expect(op).into_iter().next()? {
            Expect::New {
                start,
                start_sequence,
                end,
                ..
            } => {
                if chat {
                    stream(
                        fresh_run_id,
                        start_sequence,
                        false,
                        end.unwrap_or(RunStatus::Completed),
                        &start.input,
                    )
                } else {
                    body(
                        201,
                        json!({"sessionId": start.session_id, "runId": fresh_run_id,
                               "status": "started", "startSequence": start_sequence}),
                    )
                }
            }
            Expect::Attach(r) | Expect::Reconnect(r) if chat => {
                stream(&r.run_id, r.start_sequence, true, r.status, &input_of(&r))
            }
            Expect::Attach(r) => body(
                200,
                json!({"sessionId": r.session_id, "runId": r.run_id,
                       "status": "attached", "startSequence": r.start_sequence}),
            ),
            Expect::Refused {
                status,
                code,
                run_id,
            } => {
                let mut v = json!({"code": code, "message": ""});
                if let Some(r) = run_id {
                    v["runId"] = json!(r);
                }
                body(status, v)
            }
            Expect::NotFound(codes) => body(404, json!({"code": codes.first()?, "message": ""})),
            Expect::Snapshot(v) => body(200, v),
            Expect::Run(r) => body(200, run_json(&r)),
            Expect::Deleted => Observed {
                status: 204,
                ..Observed::default()
            },
            Expect::Reconnect(_) => return None,
            Expect::Health => {
                let mut v = json!({"protocol": "reqkey-agent/1",
                                   "supportsRequestKey": self.keys()});
                if self.interrupt() {
                    v["concurrentEntry"] = json!("interrupt_previous");
                }
                body(200, v)
            }
        })
    }

    /// The successors of this state after `op` was answered `obs`, with
    /// `sequential`: the harness waited for every run before `op` and
    /// after it (a stream's `finish` then is the run's end). `Err` says
    /// what the spec allowed instead.
    pub fn next(
        &self,
        op: &AgentOp,
        obs: &Observed,
        sequential: bool,
    ) -> Result<Vec<AgentModel>, String> {
        let mut out = Vec::new();
        let mut allowed = Vec::new();
        if let KeyHeader::Malformed(raw) = op.key() {
            if obs.body.contains(raw.as_str()) {
                return Err(
                    "the answer echoes the malformed key (SPEC 2 [[key.parse.not-echoed]])".into(),
                );
            }
        }
        if let Some(stream) = &obs.stream {
            if stream.runs > 1 {
                return Err("a stream shows two runs ([[agent.chat.one-run-per-stream]])".into());
            }
        }
        if let (AgentOp::ReadRun { wait_ms, .. }, Some(t), true) = (op, obs.timing, sequential) {
            let running =
                obs.json.as_ref().and_then(|j| j.get("status")) == Some(&json!("running"));
            let waited = t.return_ms.saturating_sub(t.invoke_ms);
            if obs.status == 200 && running && *wait_ms > 0 && waited < *wait_ms {
                return Err(format!(
                    "a poll of waitMs={wait_ms} answered `running` after {waited} ms, while no \
                     other poll waited: a server waits while the run is running \
                     ([[agent.route.run]], [[agent.run.wait-capped]])"
                ));
            }
        }
        for e in self.expect(op) {
            allowed.push(describe(&e, op));
            match self.matches(&e, op, obs, sequential) {
                Ok(Some(s)) => out.push(s),
                Ok(None) => {}
                Err(e) => return Err(e),
            }
        }
        if out.is_empty() {
            let blamed = blame(&self.expect(op), self.plans(op), obs);
            let named = if blamed.is_empty() {
                String::new()
            } else {
                format!(" [[{}]]", blamed.join(", "))
            };
            return Err(format!("the spec allows {}{named}", allowed.join(" or ")));
        }
        Ok(dedup(out))
    }

    /// The successor if `obs` is the answer `e`.
    fn matches(
        &self,
        e: &Expect,
        op: &AgentOp,
        obs: &Observed,
        sequential: bool,
    ) -> Result<Option<AgentModel>, String> {
        let chat = op.streams();
        let field = |name: &str| obs.json.as_ref().and_then(|j| j.get(name)).cloned();
        // The stream of an existing run: its one echo (SPEC 7
        // `[[agent.test-agent.echo]]`), all of it once everything settled.
        let echo_ok = |s: &StreamSeen, run: &RunMetadata| {
            let input = self.run_input(&run.session_id, &run.run_id);
            texts_ok(s, input.as_ref().and_then(echo_of).as_deref(), sequential)
        };
        Ok(match e {
            Expect::Health => (obs.status == 200
                && obs
                    .json
                    .as_ref()
                    .is_some_and(|j| health_matches(&self.profile, j)))
            .then(|| self.clone()),
            Expect::Refused {
                status,
                code,
                run_id,
            } => {
                let ok = obs.status == *status
                    && field("code") == Some(json!(code))
                    && field("runId") == run_id.as_ref().map(|r| json!(r));
                ok.then(|| self.clone())
            }
            Expect::NotFound(codes) => {
                let code = field("code");
                let ok = obs.status == 404
                    && codes.iter().any(|c| code.as_ref() == Some(&json!(c)))
                    && field("runId").is_none();
                ok.then(|| self.clone())
            }
            Expect::Deleted => (obs.status == 204).then(|| {
                let mut s = self.clone();
                let session = op.session().to_owned();
                let _ = s.store.apply(&StoreOp::DeleteSession(SessionArgs {
                    session_id: session.clone(),
                }));
                s.running.retain(|(sid, _), _| *sid != session);
                s
            }),
            Expect::Run(run) => (obs.status == 200
                && obs.json.as_ref().is_some_and(|j| run_matches(run, j)))
            .then(|| self.clone()),
            Expect::Snapshot(want) => (obs.status == 200
                && obs.json.as_ref().is_some_and(|j| snapshot_matches(want, j)))
            .then(|| self.clone()),
            Expect::Attach(run) => {
                let ok = if chat {
                    obs.status == 200
                        && obs.stream.as_ref().is_some_and(|s| {
                            s.run_id.as_deref() == Some(run.run_id.as_str())
                                && s.start_sequence == Some(run.start_sequence)
                                && s.attached == Some(true)
                                && finish_ok(s, run, sequential)
                                && echo_ok(s, run)
                        })
                } else {
                    obs.status == 200
                        && field("status") == Some(json!("attached"))
                        && field("runId") == Some(json!(run.run_id))
                        && field("startSequence") == Some(json!(run.start_sequence))
                        && field("sessionId") == Some(json!(run.session_id))
                };
                ok.then(|| self.clone())
            }
            Expect::Reconnect(run) => {
                let ok = obs.status == 200
                    && obs.stream.as_ref().is_some_and(|s| {
                        s.run_id.as_deref() == Some(run.run_id.as_str())
                            && s.start_sequence == Some(run.start_sequence)
                            && s.attached == Some(true)
                            && finish_ok(s, run, sequential)
                            && echo_ok(s, run)
                    });
                ok.then(|| self.clone())
            }
            Expect::New {
                start,
                start_sequence,
                previous,
                end,
            } => {
                // The earliest the run may end: sent, then `[sleep:N]`.
                let not_before_ms = obs
                    .timing
                    .map_or(0, |t| t.invoke_ms.saturating_add(sleep_ms(&start.input)));
                let (run_id, finish) = if chat {
                    let Some(s) = obs.stream.as_ref().filter(|_| obs.status == 200) else {
                        return Ok(None);
                    };
                    if s.attached != Some(false) || s.start_sequence != Some(*start_sequence) {
                        return Ok(None);
                    }
                    if !texts_ok(s, echo_of(&start.input).as_deref(), sequential) {
                        return Ok(None);
                    }
                    // A stream that finished before its run could end.
                    let early = obs.timing.is_some_and(|t| t.return_ms < not_before_ms);
                    if s.finish.is_some() && early && sequential {
                        return Ok(None);
                    }
                    (s.run_id.clone(), s.finish.clone())
                } else {
                    let ok = obs.status == 201
                        && field("status") == Some(json!("started"))
                        && field("startSequence") == Some(json!(start_sequence))
                        && field("sessionId") == Some(json!(start.session_id));
                    if !ok {
                        return Ok(None);
                    }
                    (
                        field("runId").and_then(|v| v.as_str().map(str::to_owned)),
                        None,
                    )
                };
                let Some(run_id) = run_id else {
                    return Ok(None);
                };
                let mut s = self.clone();
                let mut start = start.clone();
                start.run_id = run_id.clone();
                let fresh = s
                    .session(&start.session_id)
                    .is_none_or(|st| st.run(&run_id).is_none());
                if !fresh {
                    return Ok(None);
                }
                let committed = s
                    .store
                    .apply(&StoreOp::CommitRunStart(CommitArgs { start_run: start }));
                if !matches!(committed, Ok(StoreReply::Commit(_))) {
                    return Ok(None);
                }
                let session = op.session().to_owned();
                if let Some((prev, to)) = previous {
                    s.set_status(&session, prev, *to);
                }
                s.running.insert(
                    (session.clone(), run_id.clone()),
                    RunLife {
                        end: *end,
                        not_before_ms,
                    },
                );
                if let Some(finish) = finish {
                    let status = RunStatus::parse(&finish);
                    let allowed = match end {
                        Some(e) => vec![*e],
                        None => ANY_END.to_vec(),
                    };
                    match status {
                        Some(st) if allowed.contains(&st) && sequential => {
                            s.set_status(&session, &run_id, st);
                        }
                        Some(st)
                            if !sequential
                                && (allowed.contains(&st) || st == RunStatus::Interrupted) => {}
                        _ => return Ok(None),
                    }
                }
                Some(s)
            }
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Entry {
    Start,
    Resume,
    Retry,
    Chat,
}

impl Entry {
    fn digest_kind(self) -> DigestKind {
        match self {
            Entry::Start | Entry::Chat => DigestKind::Execute,
            Entry::Resume => DigestKind::Resume,
            Entry::Retry => DigestKind::Retry,
        }
    }
}

fn describe(e: &Expect, op: &AgentOp) -> String {
    let chat = op.streams();
    match e {
        Expect::New { start_sequence, .. } if chat => {
            format!("200 a stream of a new run (startSequence {start_sequence}, attached false)")
        }
        Expect::New { start_sequence, .. } => {
            format!("201 started (startSequence {start_sequence})")
        }
        Expect::Attach(r) if chat => format!(
            "200 the stream of run {} from its start (attached true, finish {})",
            r.run_id,
            r.status.as_str()
        ),
        Expect::Attach(r) => format!(
            "200 attached to run {} (startSequence {})",
            r.run_id, r.start_sequence
        ),
        Expect::Refused {
            status,
            code,
            run_id,
        } => match run_id {
            Some(r) => format!("{status} {code} naming run {r}"),
            None => format!("{status} {code} without runId"),
        },
        Expect::NotFound(codes) => format!("404 {}", codes.join("|")),
        Expect::Snapshot(v) => format!("200 snapshot {v}"),
        Expect::Run(r) => format!("200 run {}", run_json(r)),
        Expect::Deleted => "204".into(),
        Expect::Reconnect(r) => format!(
            "200 the stream of current run {} (attached true, finish {})",
            r.run_id,
            r.status.as_str()
        ),
        Expect::Health => "200 /health declaring the profile it declared first".into(),
    }
}

/// The clauses an answer that no expectation of `expected` matched
/// breaks, by counterfactual over SPEC 5's plan and SPEC 7's refusals:
/// where an expectation differs from the answer only in the `runId` a
/// refusal names, the clause that names it (relaxed, the answer would
/// be allowed); otherwise the clause of each refusal expected (its plan
/// row, or the not-found refusal), in order. Empty where no refusal was
/// expected (the caller names the route's clause). The clauses named
/// are the ones a scenario step expecting the same answer judges
/// (`harness/src/run/fuzz/agent_scenario.rs`).
pub(crate) fn blame(expected: &[Expect], plans: bool, obs: &Observed) -> Vec<&'static str> {
    let field = |name: &str| obs.json.as_ref().and_then(|j| j.get(name)).cloned();
    let keyed = |code: &str| {
        matches!(
            code,
            "state_request_key_conflict" | "state_request_already_completed"
        )
    };
    // A keyed entry answered as if its key had a holder (attached, or a
    // keyed 409) where the spec has none: the plan's first row.
    let held = |e: &Expect| {
        matches!(e, Expect::Attach(_) | Expect::Reconnect(_))
            || matches!(e, Expect::Refused { code, .. } if keyed(code))
    };
    if plans && answered_as_held(obs) && !expected.iter().any(held) {
        return vec!["plan.row.new"];
    }
    for e in expected {
        if let Expect::Refused { status, code, .. } = e {
            if keyed(code) && obs.status == *status && field("code") == Some(json!(code)) {
                // Status and code as expected: the runId is what differs.
                return vec!["agent.keys.conflict-run-id"];
            }
        }
    }
    let mut out: Vec<&'static str> = Vec::new();
    for e in expected {
        let clause = match e {
            Expect::Refused {
                code: "state_request_key_conflict",
                ..
            } => "plan.row.key-conflict",
            Expect::Refused {
                code: "state_request_already_completed",
                ..
            } => "plan.row.already-completed",
            Expect::NotFound(_) => "agent.refusal.not-found",
            _ => continue,
        };
        if !out.contains(&clause) {
            out.push(clause);
        }
    }
    out
}

/// Whether an answer says the entry's key had a holder: attached (a body
/// or a stream saying so), or one of the two keyed 409s.
pub fn answered_as_held(obs: &Observed) -> bool {
    let field = |name: &str| obs.json.as_ref().and_then(|j| j.get(name)).cloned();
    obs.stream.as_ref().and_then(|s| s.attached) == Some(true)
        || (obs.status == 200 && field("status") == Some(json!("attached")))
        || (obs.status == 409
            && matches!(
                field("code").as_ref().and_then(Value::as_str),
                Some("state_request_key_conflict" | "state_request_already_completed")
            ))
}

/// States without repeats (the sets stay small: a handful of runs).
pub fn dedup(states: Vec<AgentModel>) -> Vec<AgentModel> {
    let mut out: Vec<AgentModel> = Vec::with_capacity(states.len());
    for s in states {
        if !out.contains(&s) {
            out.push(s);
        }
    }
    out
}

/// The states after a batch of `ops` released together answered `obs`
/// (index for index): every order of the batch, every run ending at any
/// point. Empty: no order explains the answers.
pub fn next_batch(states: &[AgentModel], ops: &[AgentOp], obs: &[Observed]) -> Vec<AgentModel> {
    // No run ends after the batch's last answer arrived.
    let now = obs
        .iter()
        .map(|o| o.timing.map_or(u64::MAX, |t| t.return_ms))
        .max()
        .unwrap_or(u64::MAX);
    let mut out = Vec::new();
    for state in states {
        explore(
            state,
            (ops, obs, now),
            &mut vec![false; ops.len()],
            &mut out,
        );
    }
    dedup(out)
}

fn explore(
    state: &AgentModel,
    walk: (&[AgentOp], &[Observed], u64),
    done: &mut Vec<bool>,
    out: &mut Vec<AgentModel>,
) {
    explore_with(state, walk, done, out, &mut |_, _| {});
}

pub(crate) fn explore_with(
    state: &AgentModel,
    (ops, obs, now): (&[AgentOp], &[Observed], u64),
    done: &mut Vec<bool>,
    out: &mut Vec<AgentModel>,
    on_fail: &mut dyn FnMut(usize, &str),
) {
    if done.iter().all(|d| *d) {
        out.push(state.clone());
        return;
    }
    let depth = done.iter().filter(|d| **d).count();
    for i in 0..ops.len() {
        if done[i] {
            continue;
        }
        for settled in state.settle_choices_at(now) {
            let nexts = match settled.next(&ops[i], &obs[i], false) {
                Ok(n) => n,
                Err(why) => {
                    on_fail(depth, &why);
                    continue;
                }
            };
            done[i] = true;
            for n in nexts {
                explore_with(&n, (ops, obs, now), done, out, on_fail);
            }
            done[i] = false;
        }
    }
}
