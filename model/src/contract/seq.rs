//! The sequential specification of a store (SPEC 4).
//!
//! [`SessionState`] is one session's runs, input log and key index, with
//! every SPEC 4 operation as a method that calls the pure rules. The
//! reference memory store keeps one per session behind a lock; [`SeqStore`]
//! keeps them in a `BTreeMap` and is the oracle that recorded histories are
//! checked against (linearizability) and that model-based tests compare a
//! target with. [`StoreOp`] and [`StoreReply`] are the operations and
//! answers as the `reqkey-store/1` wire names them.

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::contract::digest::{canonical_json, start_digest, written_json};
use crate::contract::error::StoreError;
use crate::contract::json_text::{start_digest_of_canonical, JsonText};
use crate::contract::rules::{
    apply_run_start_rules_variant, apply_validated_run_start_rules, check_status_transition,
    validate_run_id, validate_session_id, validate_start_run, RuleVariant, RunStartContext,
    RunStartDecision,
};
use crate::contract::types::{
    CommitOutcome, CommitResult, DeleteResult, InputEntry, RunMetadata, RunStatus, StartRun,
};

/// One session: runs by `startSequence`, the input log, and the indexes.
///
/// Equality and hashing look only at runs and inputs; the indexes are
/// derived from them.
#[derive(Debug, Clone, Default)]
pub struct SessionState {
    runs: Vec<StoredRun>,
    /// Inputs as canonical JSON text, so the state is hashable.
    inputs: Vec<(String, String)>,
    /// The same inputs as written ([`written_json`]), in the same order:
    /// what [`SessionState::inputs`] echoes. Not part of equality: two
    /// spellings of one value are one input (SPEC 3).
    written: Vec<String>,
    by_run_id: HashMap<String, usize>,
    by_key: HashMap<String, usize>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct StoredRun {
    meta: RunMetadata,
    start_digest: String,
}

impl PartialEq for SessionState {
    fn eq(&self, other: &Self) -> bool {
        self.runs == other.runs && self.inputs == other.inputs
    }
}
impl Eq for SessionState {}
impl Hash for SessionState {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.runs.hash(state);
        self.inputs.hash(state);
    }
}

impl SessionState {
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// How many runs the session holds.
    pub fn run_count(&self) -> usize {
        self.runs.len()
    }

    pub fn current_run(&self) -> Option<&RunMetadata> {
        self.runs.last().map(|r| &r.meta)
    }

    pub fn run(&self, run_id: &str) -> Option<&RunMetadata> {
        self.by_run_id.get(run_id).map(|&i| &self.runs[i].meta)
    }

    pub fn run_by_request_key(&self, key: &str) -> Option<&RunMetadata> {
        self.by_key.get(key).map(|&i| &self.runs[i].meta)
    }

    pub fn runs(&self) -> impl Iterator<Item = &RunMetadata> {
        self.runs.iter().map(|r| &r.meta)
    }

    pub fn inputs(&self) -> Vec<InputEntry> {
        self.inputs
            .iter()
            .zip(&self.written)
            .map(|((run_id, _), text)| InputEntry {
                run_id: run_id.clone(),
                input: serde_json::from_str(text).unwrap_or(Value::Null),
            })
            .collect()
    }

    /// How many inputs the session has logged (a store that keeps inputs
    /// apart from the session reads it to check its own bookkeeping).
    pub fn input_count(&self) -> usize {
        self.inputs.len()
    }

    /// Decides a commit against this session with `holder` as the key's
    /// holder. The correct holder is [`SessionState::run_by_request_key`];
    /// a store that passes anything else (a stale read) is broken, and the
    /// parameter exists so that tests can build such a store.
    pub fn decide(
        &self,
        start: &StartRun,
        holder: Option<&RunMetadata>,
        variant: RuleVariant,
    ) -> Result<RunStartDecision, StoreError> {
        let same = self
            .by_run_id
            .get(&start.run_id)
            .map(|&i| (&self.runs[i].meta, self.runs[i].start_digest.as_str()));
        let ctx = RunStartContext {
            same_run_id: same,
            request_key_holder: holder,
            current_run_id: self.current_run().map(|r| r.run_id.as_str()),
            next_start_sequence: self.runs.len() as u64 + 1,
        };
        apply_run_start_rules_variant(start, ctx, variant)
    }

    /// Writes what [`SessionState::decide`] decided.
    pub fn apply(&mut self, start: &StartRun, decision: RunStartDecision) -> CommitResult {
        match decision {
            RunStartDecision::Replay(run) => {
                // Answer the run as it is now.
                let run = self.run(&run.run_id).cloned().unwrap_or(run);
                CommitResult {
                    outcome: CommitOutcome::Replayed,
                    run,
                }
            }
            RunStartDecision::Start { run, start_digest } => {
                let index = self.runs.len();
                self.by_run_id.insert(run.run_id.clone(), index);
                if let Some(key) = &run.request_key {
                    self.by_key.insert(key.clone(), index);
                }
                self.inputs
                    .push((run.run_id.clone(), canonical_json(&start.input)));
                self.written.push(written_json(&start.input));
                self.runs.push(StoredRun {
                    meta: run.clone(),
                    start_digest,
                });
                CommitResult {
                    outcome: CommitOutcome::Started,
                    run,
                }
            }
        }
    }

    /// The whole run-start commit, as one step over this session.
    pub fn commit(&mut self, start: &StartRun) -> Result<CommitResult, StoreError> {
        self.commit_variant(start, RuleVariant::SPEC)
    }

    pub fn commit_variant(
        &mut self,
        start: &StartRun,
        variant: RuleVariant,
    ) -> Result<CommitResult, StoreError> {
        let holder = start
            .request_key
            .as_deref()
            .and_then(|k| self.run_by_request_key(k));
        let decision = self.decide(start, holder, variant)?;
        Ok(self.apply(start, decision))
    }

    /// The run-start commit of a [`PreparedCommit`]: the same step as
    /// [`SessionState::commit`] without validating, digesting and
    /// canonicalizing the request again.
    pub fn commit_prepared(
        &mut self,
        prepared: &PreparedCommit,
    ) -> Result<CommitResult, StoreError> {
        let holder = prepared
            .start
            .request_key
            .as_deref()
            .and_then(|k| self.run_by_request_key(k));
        let decision = self.decide_prepared(prepared, holder)?;
        let written = written_json(&prepared.start.input);
        Ok(self.apply_prepared(prepared, decision, written))
    }

    /// [`SessionState::commit_prepared`] for a commit prepared from text
    /// ([`PreparedCommit::from_text`]): `holder` is the key's holder as
    /// the store read it (see [`SessionState::decide`]) and `written` the
    /// input's written text, which the session keeps for its echo.
    pub fn commit_prepared_written(
        &mut self,
        prepared: &PreparedCommit,
        holder: Option<&RunMetadata>,
        written: String,
    ) -> Result<CommitResult, StoreError> {
        let decision = self.decide_prepared(prepared, holder)?;
        Ok(self.apply_prepared(prepared, decision, written))
    }

    fn decide_prepared(
        &self,
        prepared: &PreparedCommit,
        holder: Option<&RunMetadata>,
    ) -> Result<RunStartDecision, StoreError> {
        let start = &prepared.start;
        let same = self
            .by_run_id
            .get(&start.run_id)
            .map(|&i| (&self.runs[i].meta, self.runs[i].start_digest.as_str()));
        let ctx = RunStartContext {
            same_run_id: same,
            request_key_holder: holder,
            current_run_id: self.current_run().map(|r| r.run_id.as_str()),
            next_start_sequence: self.runs.len() as u64 + 1,
        };
        apply_validated_run_start_rules(start, &prepared.start_digest, ctx, RuleVariant::SPEC)
    }

    fn apply_prepared(
        &mut self,
        prepared: &PreparedCommit,
        decision: RunStartDecision,
        written: String,
    ) -> CommitResult {
        match decision {
            RunStartDecision::Replay(run) => CommitResult {
                outcome: CommitOutcome::Replayed,
                // The run as it is now, as [`SessionState::apply`] answers.
                run: self.run(&run.run_id).cloned().unwrap_or(run),
            },
            RunStartDecision::Start { run, start_digest } => {
                let index = self.runs.len();
                self.by_run_id.insert(run.run_id.clone(), index);
                if let Some(key) = &run.request_key {
                    self.by_key.insert(key.clone(), index);
                }
                self.inputs
                    .push((run.run_id.clone(), prepared.canonical_input.clone()));
                self.written.push(written);
                self.runs.push(StoredRun {
                    meta: run.clone(),
                    start_digest,
                });
                CommitResult {
                    outcome: CommitOutcome::Started,
                    run,
                }
            }
        }
    }

    /// Undoes the last `started` commit (the linearizability checker's
    /// backtracking; nothing else may call it). A started run is the last
    /// one and neither its id nor its key was indexed before it, so popping
    /// restores the session exactly.
    pub fn undo_last_start(&mut self) {
        if let Some(last) = self.runs.pop() {
            self.by_run_id.remove(&last.meta.run_id);
            if let Some(key) = &last.meta.request_key {
                self.by_key.remove(key);
            }
            self.inputs.pop();
            self.written.pop();
        }
    }

    /// Undoes a status change: puts `status` back on the run at `index`
    /// (the linearizability checker's backtracking; nothing else may call it).
    pub fn undo_status_change(&mut self, index: usize, status: RunStatus) {
        if let Some(run) = self.runs.get_mut(index) {
            run.meta.status = status;
        }
    }

    /// The position of a run by `startSequence` order.
    pub fn run_index(&self, run_id: &str) -> Option<usize> {
        self.by_run_id.get(run_id).copied()
    }

    /// Everything the state's equality looks at for the run at `index`:
    /// the run, its start digest, and its input as canonical JSON.
    pub fn entry(&self, index: usize) -> Option<(&RunMetadata, &str, &str)> {
        let run = self.runs.get(index)?;
        let (_, input) = self.inputs.get(index)?;
        Some((&run.meta, run.start_digest.as_str(), input.as_str()))
    }

    /// The input log as `(runId, canonical JSON of the input)`.
    pub fn inputs_canonical(&self) -> impl Iterator<Item = (&str, &str)> {
        self.inputs.iter().map(|(r, i)| (r.as_str(), i.as_str()))
    }

    /// `setRunStatus` within this session.
    pub fn set_run_status(
        &mut self,
        run_id: &str,
        to: RunStatus,
    ) -> Result<RunMetadata, StoreError> {
        let &i = self
            .by_run_id
            .get(run_id)
            .ok_or_else(|| StoreError::NotFound(format!("no run {run_id} in this session")))?;
        let run = &mut self.runs[i].meta;
        check_status_transition(run, to)?;
        run.status = to;
        Ok(run.clone())
    }
}

/// A `commitRunStart` request that passed validation, with what every
/// evaluation of it needs computed once: its start digest and its input as
/// canonical JSON. The input is kept as that text only (the
/// linearizability checker holds one of these per commit of a history, and
/// a JSON value costs several times its text), so [`PreparedCommit::start`]
/// answers the request with a null `input`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreparedCommit {
    start: StartRun,
    start_digest: String,
    canonical_input: String,
}

impl PreparedCommit {
    /// Validates `start` (SPEC 4 field rules) and digests it.
    pub fn new(start: &StartRun) -> Result<Self, StoreError> {
        validate_start_run(start)?;
        Ok(Self {
            start: StartRun {
                session_id: start.session_id.clone(),
                run_id: start.run_id.clone(),
                expected_current_run_id: start.expected_current_run_id.clone(),
                input: Value::Null,
                request_key: start.request_key.clone(),
                request_digest: start.request_digest.clone(),
            },
            start_digest: start_digest(start),
            canonical_input: canonical_json(&start.input),
        })
    }

    /// [`PreparedCommit::new`] for a `start` whose input is given as text
    /// (`start.input` is not read): the digests and the canonical input
    /// come from `input`'s canonical text, identical to those of its value.
    pub fn from_text(start: &StartRun, input: &JsonText) -> Result<Self, StoreError> {
        validate_start_run(start)?;
        Ok(Self {
            start: StartRun {
                session_id: start.session_id.clone(),
                run_id: start.run_id.clone(),
                expected_current_run_id: start.expected_current_run_id.clone(),
                input: Value::Null,
                request_key: start.request_key.clone(),
                request_digest: start.request_digest.clone(),
            },
            start_digest: start_digest_of_canonical(start, input.canonical()),
            canonical_input: input.canonical().to_owned(),
        })
    }

    /// The request, its `input` null (see the type's docs).
    pub fn start(&self) -> &StartRun {
        &self.start
    }
}

/// Arguments of the session-only operations.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionArgs {
    pub session_id: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunArgs {
    pub session_id: String,
    pub run_id: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KeyArgs {
    pub session_id: String,
    pub request_key: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StatusArgs {
    pub session_id: String,
    pub run_id: String,
    pub status: RunStatus,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CommitArgs {
    pub start_run: StartRun,
}

/// One store operation, in the wire form `{"op": ..., "args": {...}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", content = "args", rename_all = "camelCase")]
pub enum StoreOp {
    CommitRunStart(CommitArgs),
    GetRun(RunArgs),
    GetCurrentRun(SessionArgs),
    ListRuns(SessionArgs),
    GetRunByRequestKey(KeyArgs),
    ListInputs(SessionArgs),
    SetRunStatus(StatusArgs),
    DeleteSession(SessionArgs),
}

/// The operation names of `reqkey-store/1`.
pub const STORE_OPS: [&str; 8] = [
    "commitRunStart",
    "getRun",
    "getCurrentRun",
    "listRuns",
    "getRunByRequestKey",
    "listInputs",
    "setRunStatus",
    "deleteSession",
];

impl StoreOp {
    /// Parses `{"op", "args"}`; anything malformed is `invalid_argument`.
    pub fn from_wire(request: &Value) -> Result<StoreOp, StoreError> {
        let parsed = Self::parse_wire(request)?;
        parsed.validate()?;
        Ok(parsed)
    }

    /// [`StoreOp::from_wire`] without [`StoreOp::validate`]: the shape only
    /// (a store's dispatch validates after it).
    pub fn parse_wire(request: &Value) -> Result<StoreOp, StoreError> {
        let op = request
            .get("op")
            .and_then(Value::as_str)
            .ok_or_else(|| StoreError::invalid_argument("request needs a string field `op`"))?;
        if !STORE_OPS.contains(&op) {
            return Err(StoreError::invalid_argument(format!("unknown op `{op}`")));
        }
        // The arguments are read straight into the op's own type, not
        // through serde's adjacently tagged enum: that one buffers `args`
        // in serde's private `Content` when it comes before `op` (always,
        // in a `Value`'s sorted map), and `Content` cannot hold a number
        // beyond 64 bits, so `input: 18446744073709551616` was refused
        // (issue 29). Read directly, `input` keeps every number as written.
        let args = request
            .get("args")
            .ok_or_else(|| StoreError::invalid_argument(format!("{op} needs a field `args`")))?;
        let bad =
            |e: serde_json::Error| StoreError::invalid_argument(format!("bad args for {op}: {e}"));
        Ok(match op {
            "commitRunStart" => {
                let mut a = CommitArgs::deserialize(args).map_err(bad)?;
                // A `Value` deserialized from a `Value` respells `-0` as
                // `0` (serde_json reads it as an i64 first); the input is
                // taken over as it was parsed instead.
                if let Some(input) = args.get("startRun").and_then(|s| s.get("input")) {
                    a.start_run.input = input.clone();
                }
                StoreOp::CommitRunStart(a)
            }
            "getRun" => StoreOp::GetRun(RunArgs::deserialize(args).map_err(bad)?),
            "getCurrentRun" => StoreOp::GetCurrentRun(SessionArgs::deserialize(args).map_err(bad)?),
            "listRuns" => StoreOp::ListRuns(SessionArgs::deserialize(args).map_err(bad)?),
            "getRunByRequestKey" => {
                StoreOp::GetRunByRequestKey(KeyArgs::deserialize(args).map_err(bad)?)
            }
            "listInputs" => StoreOp::ListInputs(SessionArgs::deserialize(args).map_err(bad)?),
            "setRunStatus" => StoreOp::SetRunStatus(StatusArgs::deserialize(args).map_err(bad)?),
            "deleteSession" => StoreOp::DeleteSession(SessionArgs::deserialize(args).map_err(bad)?),
            other => {
                return Err(StoreError::invalid_argument(format!(
                    "unknown op `{other}`"
                )))
            }
        })
    }

    /// [`StoreOp::parse_wire`] straight from the request's bytes: the
    /// arguments are parsed once, into the op's own type, from their raw
    /// text, so a large `input` is held once (not as a request `Value` and
    /// then a copy), and numbers keep their text (issue 29).
    pub fn parse_wire_bytes(bytes: &[u8]) -> Result<StoreOp, StoreError> {
        #[derive(Deserialize)]
        struct Wire<'a> {
            op: Option<Value>,
            #[serde(borrow)]
            args: Option<&'a serde_json::value::RawValue>,
        }
        let wire: Wire<'_> = serde_json::from_slice(bytes).map_err(|e| {
            StoreError::invalid_argument(format!("the request body is not a JSON object: {e}"))
        })?;
        let op = wire
            .op
            .as_ref()
            .and_then(Value::as_str)
            .ok_or_else(|| StoreError::invalid_argument("request needs a string field `op`"))?;
        if !STORE_OPS.contains(&op) {
            return Err(StoreError::invalid_argument(format!("unknown op `{op}`")));
        }
        let args = wire
            .args
            .ok_or_else(|| StoreError::invalid_argument(format!("{op} needs a field `args`")))?
            .get();
        let bad =
            |e: serde_json::Error| StoreError::invalid_argument(format!("bad args for {op}: {e}"));
        Ok(match op {
            "commitRunStart" => StoreOp::CommitRunStart(serde_json::from_str(args).map_err(bad)?),
            "getRun" => StoreOp::GetRun(serde_json::from_str(args).map_err(bad)?),
            "getCurrentRun" => StoreOp::GetCurrentRun(serde_json::from_str(args).map_err(bad)?),
            "listRuns" => StoreOp::ListRuns(serde_json::from_str(args).map_err(bad)?),
            "getRunByRequestKey" => {
                StoreOp::GetRunByRequestKey(serde_json::from_str(args).map_err(bad)?)
            }
            "listInputs" => StoreOp::ListInputs(serde_json::from_str(args).map_err(bad)?),
            "setRunStatus" => StoreOp::SetRunStatus(serde_json::from_str(args).map_err(bad)?),
            "deleteSession" => StoreOp::DeleteSession(serde_json::from_str(args).map_err(bad)?),
            other => {
                return Err(StoreError::invalid_argument(format!(
                    "unknown op `{other}`"
                )))
            }
        })
    }

    /// The wire name of this operation.
    pub fn name(&self) -> &'static str {
        match self {
            StoreOp::CommitRunStart(_) => "commitRunStart",
            StoreOp::GetRun(_) => "getRun",
            StoreOp::GetCurrentRun(_) => "getCurrentRun",
            StoreOp::ListRuns(_) => "listRuns",
            StoreOp::GetRunByRequestKey(_) => "getRunByRequestKey",
            StoreOp::ListInputs(_) => "listInputs",
            StoreOp::SetRunStatus(_) => "setRunStatus",
            StoreOp::DeleteSession(_) => "deleteSession",
        }
    }

    /// The session the operation touches.
    pub fn session_id(&self) -> &str {
        match self {
            StoreOp::CommitRunStart(a) => &a.start_run.session_id,
            StoreOp::GetRun(a) => &a.session_id,
            StoreOp::GetCurrentRun(a) | StoreOp::ListRuns(a) | StoreOp::ListInputs(a) => {
                &a.session_id
            }
            StoreOp::DeleteSession(a) => &a.session_id,
            StoreOp::GetRunByRequestKey(a) => &a.session_id,
            StoreOp::SetRunStatus(a) => &a.session_id,
        }
    }

    /// Empty strings and malformed ids are `invalid_argument` (SPEC 6).
    pub fn validate(&self) -> Result<(), StoreError> {
        validate_session_id(self.session_id())?;
        match self {
            StoreOp::CommitRunStart(a) => crate::contract::rules::validate_start_run(&a.start_run),
            StoreOp::GetRun(a) => validate_run_id("runId", &a.run_id),
            StoreOp::SetRunStatus(a) => validate_run_id("runId", &a.run_id),
            StoreOp::GetRunByRequestKey(a) => {
                crate::contract::key::parse_request_key(&a.request_key)
                    .map(drop)
                    .map_err(|e| StoreError::invalid_argument(e.to_string()))
            }
            StoreOp::GetCurrentRun(_)
            | StoreOp::ListRuns(_)
            | StoreOp::ListInputs(_)
            | StoreOp::DeleteSession(_) => Ok(()),
        }
    }
}

/// The `ok` result of a store operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum StoreReply {
    Commit(CommitResult),
    Run(Option<RunMetadata>),
    Runs(Vec<RunMetadata>),
    Inputs(Vec<InputEntry>),
    Deleted(DeleteResult),
}

impl StoreReply {
    /// Reads an `ok` value back, knowing which op it answers.
    pub fn from_wire(op: &str, ok: Value) -> Result<StoreReply, serde_json::Error> {
        Ok(match op {
            "commitRunStart" => StoreReply::Commit(serde_json::from_value(ok)?),
            "listRuns" => StoreReply::Runs(serde_json::from_value(ok)?),
            "listInputs" => StoreReply::Inputs(serde_json::from_value(ok)?),
            "deleteSession" => StoreReply::Deleted(serde_json::from_value(ok)?),
            "setRunStatus" => StoreReply::Run(Some(serde_json::from_value(ok)?)),
            _ => StoreReply::Run(serde_json::from_value(ok)?),
        })
    }
}

/// The wire answer of an operation: `{"ok": ...}` or `{"error": ...}`.
pub fn answer_to_wire(answer: &Result<StoreReply, StoreError>) -> Value {
    match answer {
        Ok(reply) => serde_json::json!({ "ok": reply }),
        Err(e) => serde_json::json!({ "error": e.to_wire() }),
    }
}

/// A whole store, sequentially: the oracle.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct SeqStore {
    sessions: BTreeMap<String, SessionState>,
}

impl SeqStore {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn session(&self, session_id: &str) -> Option<&SessionState> {
        self.sessions.get(session_id)
    }

    /// Commits `start` under a [`RuleVariant`]: how a deliberately broken
    /// store would (benchmarks build non-linearizable histories with it).
    /// With [`RuleVariant::SPEC`] it is `apply` of the commit.
    pub fn commit_variant(
        &mut self,
        start: &StartRun,
        variant: RuleVariant,
    ) -> Result<CommitResult, StoreError> {
        validate_start_run(start)?;
        let session = self.sessions.entry(start.session_id.clone()).or_default();
        let result = session.commit_variant(start, variant);
        if session.is_empty() {
            self.sessions.remove(&start.session_id);
        }
        result
    }

    /// Applies one operation, exactly as SPEC 4 says a store answers it.
    pub fn apply(&mut self, op: &StoreOp) -> Result<StoreReply, StoreError> {
        op.validate()?;
        Ok(match op {
            StoreOp::CommitRunStart(a) => {
                let start = &a.start_run;
                // A refused commit does not create the session.
                let session = self.sessions.entry(start.session_id.clone()).or_default();
                let result = session.commit(start);
                if session.is_empty() {
                    self.sessions.remove(&start.session_id);
                }
                StoreReply::Commit(result?)
            }
            StoreOp::GetRun(a) => StoreReply::Run(
                self.sessions
                    .get(&a.session_id)
                    .and_then(|s| s.run(&a.run_id))
                    .cloned(),
            ),
            StoreOp::GetCurrentRun(a) => StoreReply::Run(
                self.sessions
                    .get(&a.session_id)
                    .and_then(SessionState::current_run)
                    .cloned(),
            ),
            StoreOp::ListRuns(a) => StoreReply::Runs(
                self.sessions
                    .get(&a.session_id)
                    .map(|s| s.runs().cloned().collect())
                    .unwrap_or_default(),
            ),
            StoreOp::GetRunByRequestKey(a) => StoreReply::Run(
                self.sessions
                    .get(&a.session_id)
                    .and_then(|s| s.run_by_request_key(&a.request_key))
                    .cloned(),
            ),
            StoreOp::ListInputs(a) => StoreReply::Inputs(
                self.sessions
                    .get(&a.session_id)
                    .map(SessionState::inputs)
                    .unwrap_or_default(),
            ),
            StoreOp::SetRunStatus(a) => {
                let session = self
                    .sessions
                    .get_mut(&a.session_id)
                    .ok_or_else(|| StoreError::NotFound(format!("no session {}", a.session_id)))?;
                StoreReply::Run(Some(session.set_run_status(&a.run_id, a.status)?))
            }
            StoreOp::DeleteSession(a) => StoreReply::Deleted(DeleteResult {
                deleted: self.sessions.remove(&a.session_id).is_some(),
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn op(v: Value) -> StoreOp {
        StoreOp::from_wire(&v).unwrap()
    }

    fn commit(session: &str, run: &str, expected: Value, key: Option<&str>) -> StoreOp {
        let mut start = json!({"sessionId": session, "runId": run, "expectedCurrentRunId": expected, "input": {"text": run}});
        if let Some(k) = key {
            start["requestKey"] = json!(k);
            start["requestDigest"] = json!("d");
        }
        op(json!({"op": "commitRunStart", "args": {"startRun": start}}))
    }

    #[test]
    fn a_refused_commit_does_not_create_the_session() {
        let mut store = SeqStore::new();
        assert!(store
            .apply(&commit("s", "r1", json!("nope"), None))
            .is_err());
        assert_eq!(store, SeqStore::new());
    }

    #[test]
    fn delete_frees_keys_and_restarts_sequences() {
        let mut store = SeqStore::new();
        store
            .apply(&commit("s", "r1", Value::Null, Some("k")))
            .unwrap();
        assert!(matches!(
            store.apply(&op(
                json!({"op": "deleteSession", "args": {"sessionId": "s"}})
            )),
            Ok(StoreReply::Deleted(DeleteResult { deleted: true }))
        ));
        let again = store
            .apply(&commit("s", "r2", Value::Null, Some("k")))
            .unwrap();
        let StoreReply::Commit(c) = again else {
            panic!()
        };
        assert_eq!(
            (c.outcome, c.run.start_sequence),
            (CommitOutcome::Started, 1)
        );
    }

    #[test]
    fn malformed_requests_are_invalid_arguments() {
        for bad in [
            json!({"op": "nope", "args": {}}),
            json!({"args": {}}),
            json!({"op": "getRun", "args": {"sessionId": "s"}}),
            json!({"op": "getRun", "args": {"sessionId": "", "runId": "r"}}),
            json!({"op": "getRun", "args": {"sessionId": 1, "runId": "r"}}),
            json!({"op": "setRunStatus", "args": {"sessionId": "s", "runId": "r", "status": "done"}}),
            json!({"op": "getRunByRequestKey", "args": {"sessionId": "s", "requestKey": "a b"}}),
        ] {
            assert_eq!(
                StoreOp::from_wire(&bad).map_err(|e| e.kind()),
                Err("invalid_argument"),
                "{bad}"
            );
        }
    }

    #[test]
    fn replies_round_trip_through_the_wire() {
        let mut store = SeqStore::new();
        let ops = [
            commit("s", "r1", Value::Null, Some("k")),
            op(json!({"op": "getRunByRequestKey", "args": {"sessionId": "s", "requestKey": "k"}})),
            op(json!({"op": "listRuns", "args": {"sessionId": "s"}})),
            op(json!({"op": "listInputs", "args": {"sessionId": "s"}})),
            op(
                json!({"op": "setRunStatus", "args": {"sessionId": "s", "runId": "r1", "status": "completed"}}),
            ),
            op(json!({"op": "deleteSession", "args": {"sessionId": "s"}})),
        ];
        for o in ops {
            let reply = store.apply(&o).unwrap();
            let wire = serde_json::to_value(&reply).unwrap();
            assert_eq!(StoreReply::from_wire(o.name(), wire).unwrap(), reply);
        }
    }
}
