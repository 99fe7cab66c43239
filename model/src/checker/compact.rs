//! The compact values the model's state is made of: a request, a run (its
//! id, status, key and input as small integers), a session's runs in start
//! order with the indexes derived from them, and the world's bounds. They
//! sit below both the model (`system.rs`) and the bridge to the rules
//! (`bridge.rs`), which both read them; hashing packs each into words.

use std::fmt;

use crate::checker::inline::Inline;
use crate::checker::mutants::Mutant;
use crate::contract::types::RunStatus;

/// Most sessions, clients, keys and inputs (ids are small integers).
pub const MAX_SESSIONS: usize = 8;
pub const MAX_CLIENTS: usize = 8;
pub const MAX_KEYS: usize = 8;
/// Most attempts (HTTP requests) in a whole run: a session never holds more
/// runs than this.
pub const MAX_RUNS: usize = 24;
/// Most attempts of one logical request: the first send plus every resend.
pub const MAX_TASKS: usize = 5;

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
    /// The state-space reductions of `reduction.rs` (on by default; off
    /// gives the unreduced counts for comparison).
    pub reduction: bool,
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
            reduction: true,
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
        if total > MAX_CLIENTS
            || self.sessions > MAX_SESSIONS
            || self.keys > MAX_KEYS
            || self.inputs > 8
        {
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
        let attempts: usize = self.scripts().iter().map(Vec::len).sum::<usize>() + self.retries;
        if attempts > MAX_RUNS {
            return Err(format!(
                "at most {MAX_RUNS} attempts in all (every client's requests, twins included, plus retries); this world has {attempts}"
            ));
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum AnswerKind {
    /// A new run started (keyed: the key recorded).
    #[default]
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

/// A run id, `c{role}r{n}`: the `n`th attempt sent by clients of `role`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct RunRef {
    pub role: u8,
    pub n: u8,
}

impl fmt::Display for RunRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "c{}r{}", self.role, self.n)
    }
}

impl RunRef {
    /// Reads `c{role}r{n}` back.
    pub fn parse(s: &str) -> Option<RunRef> {
        let (role, n) = s.strip_prefix('c')?.split_once('r')?;
        Some(RunRef {
            role: role.parse().ok()?,
            n: n.parse().ok()?,
        })
    }
}

/// A run as its session stores it: id, status, key and input (its digest
/// and its `startSequence`, the position in the session, follow).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Run {
    pub id: RunRef,
    pub status: RunStatus,
    pub key: Option<u8>,
    pub input: u8,
}

impl Default for Run {
    fn default() -> Self {
        Run {
            id: RunRef::default(),
            status: RunStatus::Running,
            key: None,
            input: 0,
        }
    }
}

/// A run's metadata as a read returned it (what `RunMetadata` says):
/// the run, its session and its `startSequence`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Meta {
    pub session: u8,
    pub seq: u8,
    pub run: Run,
}

/// One session of the store, as [`crate::contract::seq::SessionState`] has it: the
/// runs in start order (the input log holds one entry per run, so it
/// follows), plus the indexes that `SessionState` derived from them, which
/// like there take no part in equality and hashing.
#[derive(Debug, Clone, Copy, Default)]
pub struct StoreSession {
    pub runs: Inline<Run, MAX_RUNS>,
    /// Per key, the position of the run that holds it (the key index).
    pub by_key: [Option<u8>; MAX_KEYS],
    /// The position of the current run.
    pub current: Option<u8>,
}

impl PartialEq for StoreSession {
    fn eq(&self, other: &Self) -> bool {
        self.runs == other.runs
    }
}
impl Eq for StoreSession {}
impl std::hash::Hash for StoreSession {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.runs.hash(state);
    }
}

impl StoreSession {
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    pub(crate) fn meta(&self, session: u8, i: u8) -> Meta {
        Meta {
            session,
            seq: i + 1,
            run: self.runs[i as usize],
        }
    }

    /// `getRunByRequestKey`.
    pub fn run_by_request_key(&self, session: u8, key: u8) -> Option<Meta> {
        self.by_key[key as usize].map(|i| self.meta(session, i))
    }

    /// `getCurrentRun`.
    pub fn current_run(&self, session: u8) -> Option<Meta> {
        self.current.map(|i| self.meta(session, i))
    }

    /// `getRun`.
    pub fn run(&self, session: u8, id: RunRef) -> Option<Meta> {
        self.runs
            .iter()
            .position(|r| r.id == id)
            .map(|i| self.meta(session, i as u8))
    }
}

// Hashing. The checker tells states apart by a 64-bit hash alone, so the
// hash must see every field; these pack the small structs into words
// (each field within its own bits: ids and counters below 256, statuses
// below 8, key and input indexes below 15) and hash the words, a few
// writes per run or task instead of one per field.

pub(crate) fn pack_ref(r: RunRef) -> u64 {
    u64::from(r.role) << 8 | u64::from(r.n)
}

pub(crate) fn pack_opt_ref(r: Option<RunRef>) -> u64 {
    r.map_or(0, |r| 1 << 16 | pack_ref(r))
}

pub(crate) fn pack_status(s: RunStatus) -> u64 {
    RunStatus::ALL.iter().position(|x| *x == s).unwrap_or(7) as u64
}

impl Run {
    /// 27 bits: id (16), status (3), key (4, 15 = none), input (4).
    pub(crate) fn pack(&self) -> u64 {
        pack_ref(self.id) << 11
            | pack_status(self.status) << 8
            | u64::from(self.key.unwrap_or(15) & 15) << 4
            | u64::from(self.input & 15)
    }
}

impl std::hash::Hash for Run {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u32(self.pack() as u32);
    }
}

impl Meta {
    /// 44 bits: session (8), seq (8), run (27).
    pub(crate) fn pack(&self) -> u64 {
        u64::from(self.session) << 36 | u64::from(self.seq) << 28 | self.run.pack()
    }
}

/// The session id of session `i` in the model and in exported scenarios.
pub fn session_name(i: u8) -> String {
    format!("s{i}")
}

impl fmt::Display for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.key {
            Some(k) => write!(f, "s{} k{} in{}", self.session, k, self.input),
            None => write!(f, "s{} keyless in{}", self.session, self.input),
        }
    }
}
