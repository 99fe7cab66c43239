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

use crate::contract::digest::{canonical_json, request_digest, DigestKind};
use crate::contract::plan::{plan_keyed_entry, KeyedEntryPlan};
use crate::contract::seq::{
    CommitArgs, SeqStore, SessionArgs, SessionState, StatusArgs, StoreOp, StoreReply,
};
use crate::contract::types::{RunMetadata, RunStatus, StartRun};
use crate::contract::vocab::{ConcurrentEntry, Profile};

/// The key header a request carries.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum KeyHeader {
    None,
    /// A well-formed key.
    Valid(String),
    /// A malformed value (never echoed).
    Malformed(String),
}

/// One request of SPEC 7, over sessions named by id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentOp {
    Start {
        session: String,
        key: KeyHeader,
        input: Value,
    },
    Resume {
        session: String,
        key: KeyHeader,
        input: Value,
    },
    Retry {
        session: String,
        key: KeyHeader,
    },
    /// `POST .../chat`; `tool`: the last message has role `tool` (keyless).
    ChatSend {
        session: String,
        key: KeyHeader,
        content: String,
        tool: bool,
    },
    /// `GET .../chat`; the key header, if any, is ignored.
    Reconnect {
        session: String,
        key: KeyHeader,
    },
    Snapshot {
        session: String,
    },
    /// `GET .../runs/{run}?waitMs=0`.
    ReadRun {
        session: String,
        run_id: String,
    },
    Delete {
        session: String,
    },
}

impl AgentOp {
    pub fn session(&self) -> &str {
        match self {
            AgentOp::Start { session, .. }
            | AgentOp::Resume { session, .. }
            | AgentOp::Retry { session, .. }
            | AgentOp::ChatSend { session, .. }
            | AgentOp::Reconnect { session, .. }
            | AgentOp::Snapshot { session }
            | AgentOp::ReadRun { session, .. }
            | AgentOp::Delete { session } => session,
        }
    }
}

/// What a chat stream showed: its `run-start`, its `finish`, how many runs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StreamSeen {
    pub run_id: Option<String>,
    pub start_sequence: Option<u64>,
    pub attached: Option<bool>,
    pub finish: Option<String>,
    /// Distinct run ids over all events (SPEC 7: one).
    pub runs: usize,
}

/// An answer as the server gave it: status, JSON body, stream.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Observed {
    pub status: u16,
    pub json: Option<Value>,
    pub stream: Option<StreamSeen>,
    /// The raw body text, for the no-echo rule.
    pub body: String,
}

/// How a run of the test agent ends (SPEC 7 "Test agent"); `None`: the
/// input is not `{"text": string}`, or its markers clash: any end.
pub fn scripted_end(input: &Value) -> Option<RunStatus> {
    let text = input.get("text")?.as_str()?;
    match (text.contains("[fail]"), text.contains("[suspend]")) {
        (true, true) => None,
        (true, false) => Some(RunStatus::Failed),
        (false, true) => Some(RunStatus::SuspendedInput),
        (false, false) => Some(RunStatus::Completed),
    }
}

const ANY_END: [RunStatus; 3] = [
    RunStatus::Completed,
    RunStatus::Failed,
    RunStatus::SuspendedInput,
];

/// One state a server may be in.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AgentModel {
    store: SeqStore,
    /// Runs still `running`: (session, run id) -> how they end (`None`: any).
    running: BTreeMap<(String, String), Option<RunStatus>>,
    keys: bool,
    interrupt: bool,
}

/// What one request may be answered, in one state.
#[derive(Debug, Clone)]
enum Expect {
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
}

impl AgentModel {
    pub fn new(profile: &Profile) -> Self {
        Self {
            store: SeqStore::new(),
            running: BTreeMap::new(),
            keys: profile.supports_request_key,
            interrupt: profile.concurrent_entry == ConcurrentEntry::InterruptPrevious,
        }
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
        let mut out = vec![self.clone()];
        for ((session, run), end) in &self.running {
            let ends: Vec<RunStatus> = end.map_or(ANY_END.to_vec(), |e| vec![e]);
            let mut next = Vec::new();
            for state in &out {
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

    /// Every subset of the running runs may have ended by now (inside a
    /// concurrent batch).
    pub fn settle_choices(&self) -> Vec<AgentModel> {
        let mut out = vec![self.clone()];
        for ((session, run), end) in &self.running {
            let ends: Vec<RunStatus> = end.map_or(ANY_END.to_vec(), |e| vec![e]);
            let mut next = Vec::new();
            for state in &out {
                next.push(state.clone());
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

    fn session(&self, id: &str) -> Option<&SessionState> {
        self.store.session(id).filter(|s| !s.is_empty())
    }

    fn effective_key(&self, key: &KeyHeader) -> Option<String> {
        match key {
            KeyHeader::Valid(k) if self.keys => Some(k.clone()),
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
            AgentOp::ReadRun { session, run_id } => match self.session(session) {
                None => vec![Expect::NotFound(&[
                    "state_session_not_found",
                    "state_run_not_found",
                ])],
                Some(s) => match s.run(run_id) {
                    Some(r) => vec![Expect::Run(r.clone())],
                    None => vec![Expect::NotFound(&["state_run_not_found"])],
                },
            },
            AgentOp::Delete { session } => match self.session(session) {
                None => vec![Expect::NotFound(&["state_session_not_found"])],
                Some(_) => vec![Expect::Deleted],
            },
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
        let interrupts = self.interrupt && (key.is_some() || kind != Entry::Chat);
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
                if self.interrupt {
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
        let chat = matches!(op, AgentOp::ChatSend { .. } | AgentOp::Reconnect { .. });
        let stream = |run_id: &str, seq: u64, attached: bool, finish: RunStatus| Observed {
            status: 200,
            json: None,
            body: String::new(),
            stream: Some(StreamSeen {
                run_id: Some(run_id.to_owned()),
                start_sequence: Some(seq),
                attached: Some(attached),
                finish: Some(finish.as_str().to_owned()),
                runs: 1,
            }),
        };
        let body = |status: u16, v: Value| Observed {
            status,
            body: v.to_string(),
            json: Some(v),
            stream: None,
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
                    )
                } else {
                    body(
                        201,
                        json!({"sessionId": start.session_id, "runId": fresh_run_id,
                               "status": "started", "startSequence": start_sequence}),
                    )
                }
            }
            Expect::Attach(r) if chat => stream(&r.run_id, r.start_sequence, true, r.status),
            Expect::Reconnect(r) => stream(&r.run_id, r.start_sequence, true, r.status),
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
        if let KeyHeader::Malformed(raw) = op_key(op) {
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
        for e in self.expect(op) {
            allowed.push(describe(&e, op));
            match self.matches(&e, op, obs, sequential) {
                Ok(Some(s)) => out.push(s),
                Ok(None) => {}
                Err(e) => return Err(e),
            }
        }
        if out.is_empty() {
            return Err(format!("the spec allows {}", allowed.join(" or ")));
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
        let chat = matches!(op, AgentOp::ChatSend { .. } | AgentOp::Reconnect { .. });
        let field = |name: &str| obs.json.as_ref().and_then(|j| j.get(name)).cloned();
        Ok(match e {
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
                    });
                ok.then(|| self.clone())
            }
            Expect::New {
                start,
                start_sequence,
                previous,
                end,
            } => {
                let (run_id, finish) = if chat {
                    let Some(s) = obs.stream.as_ref().filter(|_| obs.status == 200) else {
                        return Ok(None);
                    };
                    if s.attached != Some(false) || s.start_sequence != Some(*start_sequence) {
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
                s.running.insert((session.clone(), run_id.clone()), *end);
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

fn op_key(op: &AgentOp) -> &KeyHeader {
    match op {
        AgentOp::Start { key, .. }
        | AgentOp::Resume { key, .. }
        | AgentOp::Retry { key, .. }
        | AgentOp::ChatSend { key, .. }
        | AgentOp::Reconnect { key, .. } => key,
        _ => &KeyHeader::None,
    }
}

/// A stream's `finish`: once everything settled it is the run's status;
/// inside a batch any status the run may end in.
fn finish_ok(s: &StreamSeen, run: &RunMetadata, sequential: bool) -> bool {
    match (&s.finish, sequential) {
        (Some(f), true) => run.status != RunStatus::Running && f == run.status.as_str(),
        (Some(f), false) => RunStatus::parse(f).is_some_and(|st| st != RunStatus::Running),
        (None, _) => false,
    }
}

/// A run as the snapshot and run reads write it (the digest's value is
/// the server's own business: only its presence is compared).
fn run_json(r: &RunMetadata) -> Value {
    let mut v = json!({
        "sessionId": r.session_id,
        "runId": r.run_id,
        "status": r.status.as_str(),
        "startSequence": r.start_sequence,
    });
    if let Some(k) = &r.request_key {
        v["requestKey"] = json!(k);
        // Any string: the server's digest is its own business.
        v["requestDigest"] = json!("");
    }
    v
}

fn run_matches(want: &RunMetadata, got: &Value) -> bool {
    let w = run_json(want);
    let digest_present = got.get("requestDigest").is_some_and(Value::is_string);
    [
        "sessionId",
        "runId",
        "status",
        "startSequence",
        "requestKey",
    ]
    .iter()
    .all(|k| w.get(*k) == got.get(*k))
        && digest_present == w.get("requestDigest").is_some()
}

fn snapshot_matches(want: &Value, got: &Value) -> bool {
    let list = |v: &Value, k: &str| {
        v.get(k)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let (wr, gr) = (list(want, "runs"), list(got, "runs"));
    let (wi, gi) = (list(want, "inputs"), list(got, "inputs"));
    want.get("sessionId") == got.get("sessionId")
        && wr.len() == gr.len()
        && wr
            .iter()
            .zip(&gr)
            .all(|(w, g)| meta_of(w).is_some_and(|w| run_matches(&w, g)))
        && wi.len() == gi.len()
        && wi.iter().zip(&gi).all(|(w, g)| {
            w.get("runId") == g.get("runId")
                && g.get("input")
                    .is_some_and(|gi| canonical_json(gi) == canonical_json(&w["input"]))
        })
}

/// The metadata `run_json` wrote (its digest replaced by a marker).
fn meta_of(v: &Value) -> Option<RunMetadata> {
    Some(RunMetadata {
        session_id: v.get("sessionId")?.as_str()?.to_owned(),
        run_id: v.get("runId")?.as_str()?.to_owned(),
        status: RunStatus::parse(v.get("status")?.as_str()?)?,
        start_sequence: v.get("startSequence")?.as_u64()?,
        request_key: v
            .get("requestKey")
            .and_then(Value::as_str)
            .map(str::to_owned),
        request_digest: v.get("requestKey").map(|_| String::new()),
    })
}

fn describe(e: &Expect, op: &AgentOp) -> String {
    let chat = matches!(op, AgentOp::ChatSend { .. } | AgentOp::Reconnect { .. });
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
    }
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
    let mut out = Vec::new();
    for state in states {
        explore(state, ops, obs, &mut vec![false; ops.len()], &mut out);
    }
    dedup(out)
}

fn explore(
    state: &AgentModel,
    ops: &[AgentOp],
    obs: &[Observed],
    done: &mut Vec<bool>,
    out: &mut Vec<AgentModel>,
) {
    if done.iter().all(|d| *d) {
        out.push(state.clone());
        return;
    }
    for i in 0..ops.len() {
        if done[i] {
            continue;
        }
        for settled in state.settle_choices() {
            let Ok(nexts) = settled.next(&ops[i], &obs[i], false) else {
                continue;
            };
            done[i] = true;
            for n in nexts {
                explore(&n, ops, obs, done, out);
            }
            done[i] = false;
        }
    }
}
