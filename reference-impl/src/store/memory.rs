//! The in-memory reference store.
//!
//! Sessions are spread over [`SHARDS`] maps by a hash of their id, each
//! behind its own mutex; every operation touches one session, so it takes
//! one shard's lock for one short critical section with no `.await` inside,
//! and a run-start commit reads the holder, decides with the model's rules
//! and writes, atomically. (One map behind one lock stalled every request
//! for hundreds of ms each time the map doubled, at a few hundred
//! thousand sessions; a shard doubles at 1/64 of the size and blocks only
//! its own sessions. Sessions are boxed so a doubling moves pointers.) Each session keeps
//! its keys in a hash index (`reqkey_model::seq::SessionState`), so
//! `getRunByRequestKey` is two hash lookups whatever the store's size.
//!
//! [`MemoryDefect`] builds deliberately broken variants. They exist to prove
//! that the conformance corpus has teeth (each must fail named scenarios);
//! they are never a default.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;
use reqkey_model::json_text::JsonText;
use reqkey_model::rules::{KeyRule, RuleVariant};
use reqkey_model::seq::{PreparedCommit, SessionState, StoreOp};
use reqkey_model::{CommitResult, InputEntry, RunMetadata, RunStatus, StartRun, StoreError};
use serde_json::Value;

use super::api::{lease_over, SessionStateStore};
use super::scale_defects::{ScaleBook, ScaleBug};

/// A deliberate bug, for testing the tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MemoryDefect {
    /// The commit never checks the key's holder.
    NoKeyRule,
    /// The key rule runs after the CAS instead of before it.
    KeyRuleAfterCas,
    /// No same-runId replay check first: a retried commit meets its own key.
    NoReplayFirst,
    /// `deleteSession` leaves the session's keys behind.
    DeleteKeepsKeys,
    /// The holder is read outside the critical section, with a yield
    /// before the commit: concurrent commits with one key both start.
    HolderReadOutsideCommit,
    /// The key is guarded only by a unique index whose violation leaks as
    /// `internal` (a raw constraint error) instead of `request_key_taken`.
    LeakConstraintError,
    /// No CAS: a stale `expectedCurrentRunId` is ignored (last writer wins).
    NoCas,
    /// The input log is appended before the decision: a refused commit
    /// leaves its input behind.
    RefusalAppendsInput,
    /// The same-runId replay compares only `runId` and `input`, not the
    /// other StartRun fields (key, digest, expected current run).
    StartDigestInputOnly,
    /// Runs are indexed by `runId` alone: `getRun` finds another session's
    /// run with that id.
    GlobalRunIds,
    /// Keys are compared ASCII case-insensitively.
    KeysCaseInsensitive,
    /// Setting a finished run to its own status answers ok (a "no-op").
    FinishedSameStatusOk,
    /// `deleteSession` answers `deleted: true` whether or not the session
    /// existed.
    DeleteAlwaysTrue,
    /// A `replayed` answer carries the run as it was started, not as it is.
    ReplayAnswersStartedRun,
    /// A refused commit creates the (empty) session.
    RefusalCreatesSession,
    /// Arguments are not checked before the reads: an empty or malformed
    /// id is looked up (and not found) instead of refused.
    NoArgumentChecks,
    /// A commit with `requestKey` but no `requestDigest` (or the reverse)
    /// drops the half it got and starts a keyless run.
    HalfKeyStartsKeyless,
    /// `deleteSession` in two critical sections with a yield between: the
    /// first frees the session's keys (and decides the `deleted` answer),
    /// the second drops its runs. A commit in between finds the key free
    /// while the old runs still stand, and two deletes both answer
    /// `deleted: true`.
    DeleteInTwoSteps,
    /// `setRunStatus` as a read-check-write of the session record: it
    /// reads the session and checks the transition under one lock, yields,
    /// and writes the record back under another. Two finishes both
    /// succeed; a commit or a delete in between is undone.
    StatusCheckThenWrite,
    /// The commit decides on a copy of the session read under one lock,
    /// yields, and writes under another: two keyless commits on one
    /// expected run both start (and two keyed ones both take the key).
    CommitDecidesOnSnapshot,
    /// The store is correct, but its wire answers write a keyless run's
    /// `requestKey` and `requestDigest` as `null` instead of leaving them
    /// out. Applied where the harness turns the answer into JSON
    /// ([`keyless_fields_null`]), so only the in-process target
    /// `broken-memory:keyless-fields-null` has it; opened as a backend
    /// elsewhere it is the correct memory store.
    KeylessFieldsNull,
    /// The store keeps everything in process memory, like the correct
    /// one, but its `/health` declares `durable: true`: a restart of its
    /// server loses every key and run it promised to keep (SPEC 6
    /// `[[wire.store.durable]]`). Only a scenario that restarts the
    /// server (`--start`) can see it.
    ClaimsDurable,
    /// `listRuns` and `listInputs` answer at most the last 256 entries, as
    /// a capped list (a Redis `LTRIM` ring, a `LIMIT`) does: correct for
    /// every session of fewer runs (`[[store.reads.list-runs-order]]`).
    ListsCapped,
    /// Key holders are found through one index keyed `{sessionId}:{key}`,
    /// as a Redis key or a concatenated column often is: `:` is in both
    /// alphabets, so session `a:x` with key `y` and session `a` with key
    /// `x:y` share an entry (`[[store.key.per-session]]`).
    JoinedKeyIndex,
    /// Key holders are found by prefix, as a SQL `LIKE key || '%'` or a
    /// Redis `SCAN` over `key*` does: the exact holder when there is one,
    /// else any run whose key starts with the one asked for, so `k` is
    /// "held" by the run keyed `k1` (`[[key.compare.byte-exact]]`).
    KeyPrefixMatch,
    /// Session and run ids compare ASCII case-insensitively, as under a
    /// case-insensitive collation (MySQL's default `_ci` ones): `aX` is
    /// the session `ax` first written, under that spelling
    /// (`[[terms.session-id.syntax]]`, `[[store.session.isolation]]`).
    IdsCaseInsensitive,
    /// An empty `requestKey` or `requestDigest` is read as absent before
    /// the checks, as a truthiness test (`if (args.requestKey)`) does:
    /// either one empty alone is still refused (the other is then half a
    /// key), so only the pair shows it - an empty key with an empty digest
    /// starts a keyless run (`[[wire.store.invalid-argument]]`).
    EmptyFieldsAbsent,
    /// Runs are found through one index keyed `{sessionId}:{runId}`:
    /// session `a:x`'s run `y` is also session `a`'s run `x:y`
    /// (`[[store.session.isolation]]`).
    JoinedRunIndex,
    /// Key holders and runs are found through an index on the first 64
    /// characters (a MySQL prefix index, `request_key(64)`), the whole
    /// value stored: a key or a run id that shares its first 64 with
    /// another finds the other (`[[key.compare.byte-exact]]`,
    /// `[[store.reads.by-key]]`).
    PrefixIndex64,
    /// `input` is kept the way a JavaScript store keeps it (`JSON.parse`
    /// then `JSON.stringify`): every number through a double, so 2^64
    /// comes back `18446744073709552000`, `1e400` as `null`, `-0` as `0`
    /// and `1.50` as `1.5` (`[[certify.match.input-exact]]`; the
    /// TypeScript adapter had this bug, issue 41).
    NumbersAsDoubles,
    /// Strings in `input` are kept the way a MySQL `utf8` (3-byte,
    /// `utf8mb3`) column keeps them: every character outside the Basic
    /// Multilingual Plane (an emoji, a musical symbol, a rare CJK one)
    /// comes back as `?` (`[[certify.match.input-exact]]`). Found by the
    /// store fuzzer's texts of every kind.
    TextAsUtf8mb3,
    // The defects below pass the whole store suite; only a dimension of
    // the store fuzzer's alphabet finds each (docs/fuzz.md).
    /// `setRunStatus` reads its `status` in any letter case (`Completed`,
    /// `COMPLETED`), as a MySQL `ENUM` under a case-insensitive collation
    /// or a case-insensitive enum parse does, instead of refusing it
    /// `invalid_argument` (`[[wire.store.invalid-argument]]`; dimension
    /// `store.args.type-and-spelling`).
    StatusCaseFolded,
    /// Inputs are kept in a column of 65,535 bytes (MySQL `TEXT`, strict
    /// mode): a longer input's commit fails `internal` ("Data too long")
    /// though SPEC 6 lets a store refuse only a request over 1 MiB
    /// (`[[wire.store.no-internal]]`, `[[certify.match.input-exact]]`;
    /// dimension `store.limits.sizes`).
    InputsIn64kColumn,
    // Below: defects found only at scale (issue 55, `scale_defects.rs`).
    /// The key index keeps the 1,000 most recent keys: an older one is not
    /// found, its commit starts a second run (`[[store.keys.kept-at-scale]]`).
    KeysEvictedBeyond1000,
    /// Key index entries expire 5 s after they were taken (a Redis `EXPIRE`)
    /// (`[[store.state.changes-only-by-operations]]`).
    KeyIndexTtl5s,
    /// A janitor interrupts runs left `running` for 5 s
    /// (`[[store.state.changes-only-by-operations]]`).
    RunsReapedAfter5s,
}

impl MemoryDefect {
    pub const ALL: [MemoryDefect; 36] = [
        MemoryDefect::NoKeyRule,
        MemoryDefect::KeyRuleAfterCas,
        MemoryDefect::NoReplayFirst,
        MemoryDefect::DeleteKeepsKeys,
        MemoryDefect::HolderReadOutsideCommit,
        MemoryDefect::LeakConstraintError,
        MemoryDefect::NoCas,
        MemoryDefect::RefusalAppendsInput,
        MemoryDefect::StartDigestInputOnly,
        MemoryDefect::GlobalRunIds,
        MemoryDefect::KeysCaseInsensitive,
        MemoryDefect::FinishedSameStatusOk,
        MemoryDefect::DeleteAlwaysTrue,
        MemoryDefect::ReplayAnswersStartedRun,
        MemoryDefect::RefusalCreatesSession,
        MemoryDefect::NoArgumentChecks,
        MemoryDefect::HalfKeyStartsKeyless,
        MemoryDefect::DeleteInTwoSteps,
        MemoryDefect::StatusCheckThenWrite,
        MemoryDefect::CommitDecidesOnSnapshot,
        MemoryDefect::KeylessFieldsNull,
        MemoryDefect::ClaimsDurable,
        MemoryDefect::ListsCapped,
        MemoryDefect::JoinedKeyIndex,
        MemoryDefect::KeyPrefixMatch,
        MemoryDefect::IdsCaseInsensitive,
        MemoryDefect::EmptyFieldsAbsent,
        MemoryDefect::JoinedRunIndex,
        MemoryDefect::PrefixIndex64,
        MemoryDefect::NumbersAsDoubles,
        MemoryDefect::TextAsUtf8mb3,
        MemoryDefect::StatusCaseFolded,
        MemoryDefect::InputsIn64kColumn,
        MemoryDefect::KeysEvictedBeyond1000,
        MemoryDefect::KeyIndexTtl5s,
        MemoryDefect::RunsReapedAfter5s,
    ];

    pub fn name(self) -> &'static str {
        match self {
            MemoryDefect::NoKeyRule => "no-key-rule",
            MemoryDefect::KeyRuleAfterCas => "key-rule-after-cas",
            MemoryDefect::NoReplayFirst => "no-replay-first",
            MemoryDefect::DeleteKeepsKeys => "delete-keeps-keys",
            MemoryDefect::HolderReadOutsideCommit => "holder-read-outside-commit",
            MemoryDefect::LeakConstraintError => "leak-constraint-error",
            MemoryDefect::NoCas => "no-cas",
            MemoryDefect::RefusalAppendsInput => "refusal-appends-input",
            MemoryDefect::StartDigestInputOnly => "start-digest-input-only",
            MemoryDefect::GlobalRunIds => "global-run-ids",
            MemoryDefect::KeysCaseInsensitive => "keys-case-insensitive",
            MemoryDefect::FinishedSameStatusOk => "finished-same-status-ok",
            MemoryDefect::DeleteAlwaysTrue => "delete-always-true",
            MemoryDefect::ReplayAnswersStartedRun => "replay-answers-started-run",
            MemoryDefect::RefusalCreatesSession => "refusal-creates-session",
            MemoryDefect::NoArgumentChecks => "no-argument-checks",
            MemoryDefect::HalfKeyStartsKeyless => "half-key-starts-keyless",
            MemoryDefect::DeleteInTwoSteps => "delete-in-two-steps",
            MemoryDefect::StatusCheckThenWrite => "status-check-then-write",
            MemoryDefect::CommitDecidesOnSnapshot => "commit-decides-on-snapshot",
            MemoryDefect::KeylessFieldsNull => "keyless-fields-null",
            MemoryDefect::ClaimsDurable => "claims-durable",
            MemoryDefect::ListsCapped => "lists-capped",
            MemoryDefect::JoinedKeyIndex => "joined-key-index",
            MemoryDefect::KeyPrefixMatch => "key-prefix-match",
            MemoryDefect::IdsCaseInsensitive => "ids-case-insensitive",
            MemoryDefect::EmptyFieldsAbsent => "empty-fields-absent",
            MemoryDefect::JoinedRunIndex => "joined-run-index",
            MemoryDefect::PrefixIndex64 => "prefix-index-64",
            MemoryDefect::NumbersAsDoubles => "numbers-as-doubles",
            MemoryDefect::TextAsUtf8mb3 => "text-as-utf8mb3",
            MemoryDefect::StatusCaseFolded => "status-case-folded",
            MemoryDefect::InputsIn64kColumn => "inputs-in-a-64k-column",
            MemoryDefect::KeysEvictedBeyond1000 => "keys-evicted-beyond-1000",
            MemoryDefect::KeyIndexTtl5s => "key-index-ttl-5s",
            MemoryDefect::RunsReapedAfter5s => "runs-reaped-after-5s",
        }
    }

    /// Does the defect live in the wire answer rather than in the store?
    pub fn breaks_the_wire(self) -> bool {
        self == MemoryDefect::KeylessFieldsNull
    }

    /// The bug at scale this defect is, if it is one.
    pub fn scale_bug(self) -> Option<ScaleBug> {
        Some(match self {
            MemoryDefect::KeysEvictedBeyond1000 => ScaleBug::BoundedKeyIndex,
            MemoryDefect::KeyIndexTtl5s => ScaleBug::KeyIndexTtl,
            MemoryDefect::RunsReapedAfter5s => ScaleBug::RunJanitor,
            _ => return None,
        })
    }

    pub fn parse(name: &str) -> Option<MemoryDefect> {
        MemoryDefect::ALL.into_iter().find(|d| d.name() == name)
    }

    fn variant(self) -> RuleVariant {
        match self {
            MemoryDefect::NoKeyRule => RuleVariant {
                key_rule: KeyRule::Absent,
                ..RuleVariant::SPEC
            },
            MemoryDefect::KeyRuleAfterCas => RuleVariant {
                key_rule: KeyRule::AfterCas,
                ..RuleVariant::SPEC
            },
            MemoryDefect::NoReplayFirst => RuleVariant {
                replay_first: false,
                ..RuleVariant::SPEC
            },
            _ => RuleVariant::SPEC,
        }
    }
}

/// How many independently locked maps the sessions are spread over.
pub const SHARDS: usize = 64;

#[derive(Debug, Default)]
struct Inner {
    sessions: HashMap<String, Box<SessionState>>,
    /// Only with [`MemoryDefect::DeleteKeepsKeys`]: keys of deleted sessions.
    leaked_keys: HashMap<(String, String), RunMetadata>,
    /// (session id, run id) -> (owner, expires at ms): run leases.
    leases: HashMap<(String, String), (String, u64)>,
    /// Only with [`MemoryDefect::RefusalAppendsInput`]: inputs of refused
    /// commits, each with the count of real inputs it follows.
    ghost_inputs: HashMap<String, Vec<(usize, InputEntry)>>,
    /// Only with [`MemoryDefect::ReplayAnswersStartedRun`]: runs as started.
    as_started: HashMap<(String, String), RunMetadata>,
    /// Only with [`MemoryDefect::DeleteInTwoSteps`]: sessions whose keys a
    /// half-done delete has freed (their runs still stand).
    freed_keys: HashSet<String>,
}

/// The window a racy defect leaves between its two critical sections: long
/// enough that an operation released together with it lands inside.
async fn racy_pause() {
    tokio::task::yield_now().await;
    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
}

/// The in-memory reference store (optionally with one [`MemoryDefect`]).
#[derive(Debug)]
pub struct MemoryStore {
    shards: Box<[Mutex<Inner>]>,
    hasher: std::hash::RandomState,
    defect: Option<MemoryDefect>,
    /// Only with [`MemoryDefect::IdsCaseInsensitive`]: the first spelling
    /// of each id, by its ASCII-lowercased form (session ids by
    /// themselves, run ids under their session's).
    first_spellings: Mutex<HashMap<String, String>>,
    /// Only with a defect at scale: when keys were taken and runs started.
    book: Option<ScaleBook>,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            hasher: std::hash::RandomState::new(),
            defect: None,
            first_spellings: Mutex::default(),
            book: None,
        }
    }
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// A deliberately broken store (see [`MemoryDefect`]).
    pub fn with_defect(defect: MemoryDefect) -> Self {
        Self {
            defect: Some(defect),
            book: defect.scale_bug().map(ScaleBook::new),
            ..Self::default()
        }
    }

    /// The shard of `session_id`, locked.
    fn lock(&self, session_id: &str) -> MutexGuard<'_, Inner> {
        use std::hash::BuildHasher;
        // One index over every session needs every session in one map.
        let shard = if self.defect == Some(MemoryDefect::JoinedKeyIndex) {
            0
        } else {
            (self.hasher.hash_one(session_id) as usize) % self.shards.len()
        };
        // A panic while holding the lock cannot leave a session half-written
        // (every write is applied after its decision), so poison is benign.
        let mut inner = self.shards[shard].lock().unwrap_or_else(|p| p.into_inner());
        // The janitor's bug: runs changed by a timer, seen at the next
        // operation on their session.
        if let (Some(book), Some(session)) = (&self.book, inner.sessions.get_mut(session_id)) {
            book.sweep(session_id, session);
        }
        inner
    }

    fn holder(&self, inner: &Inner, session_id: &str, key: &str) -> Option<RunMetadata> {
        if inner.freed_keys.contains(session_id) {
            return None;
        }
        if self
            .book
            .as_ref()
            .is_some_and(|b| b.forgets(session_id, key))
        {
            return None;
        }
        let own = inner.sessions.get(session_id).and_then(|s| {
            if self.defect == Some(MemoryDefect::KeysCaseInsensitive) {
                s.runs()
                    .find(|r| {
                        r.request_key
                            .as_deref()
                            .is_some_and(|k| k.eq_ignore_ascii_case(key))
                    })
                    .cloned()
            } else if self.defect == Some(MemoryDefect::PrefixIndex64) {
                // The bug: the index holds the first 64 characters only.
                s.runs()
                    .find(|r| {
                        r.request_key
                            .as_deref()
                            .is_some_and(|k| prefix_64(k) == prefix_64(key))
                    })
                    .cloned()
            } else if self.defect == Some(MemoryDefect::KeyPrefixMatch) {
                // The bug: `WHERE request_key LIKE key || '%'`.
                s.run_by_request_key(key).cloned().or_else(|| {
                    s.runs()
                        .find(|r| r.request_key.as_deref().is_some_and(|k| k.starts_with(key)))
                        .cloned()
                })
            } else {
                s.run_by_request_key(key).cloned()
            }
        });
        own.or_else(|| {
            inner
                .leaked_keys
                .get(&(session_id.to_owned(), key.to_owned()))
                .cloned()
        })
        .or_else(|| {
            // The bug: one index of joined ids, where two pairs can meet.
            if self.defect != Some(MemoryDefect::JoinedKeyIndex) {
                return None;
            }
            let joined = format!("{session_id}:{key}");
            inner.sessions.iter().find_map(|(sid, s)| {
                s.runs()
                    .find(|r| {
                        r.request_key
                            .as_deref()
                            .is_some_and(|k| format!("{sid}:{k}") == joined)
                    })
                    .cloned()
            })
        })
    }
}

impl MemoryStore {
    /// `list`, or only its last [`CAPPED_LIST`] entries for the
    /// `lists-capped` defect.
    fn capped<T>(&self, mut list: Vec<T>) -> Vec<T> {
        if self.defect == Some(MemoryDefect::ListsCapped) && list.len() > CAPPED_LIST {
            list.drain(..list.len() - CAPPED_LIST);
        }
        list
    }
}

/// How many entries the `lists-capped` defect keeps.
const CAPPED_LIST: usize = 256;

/// `value` as `JSON.stringify(JSON.parse(...))` gives it back (the
/// `numbers-as-doubles` defect): each number through an IEEE 754 double,
/// written in the ECMAScript form; one beyond the double range is `null`.
fn through_doubles(value: &Value) -> Value {
    match value {
        Value::Number(n) => match n.to_string().parse::<f64>() {
            Ok(f) if f.is_finite() => {
                let written = reqkey_model::digest::canonical_json(&Value::from(f));
                serde_json::from_str(&written).unwrap_or(Value::Null)
            }
            _ => Value::Null,
        },
        Value::Array(items) => Value::Array(items.iter().map(through_doubles).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), through_doubles(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// `value` as a 3-byte `utf8` column gives it back (the `text-as-utf8mb3`
/// defect): every character outside the BMP of every string `?`.
fn through_utf8mb3(value: &Value) -> Value {
    let bmp = |s: &str| -> String {
        s.chars()
            .map(|c| if u32::from(c) > 0xffff { '?' } else { c })
            .collect()
    };
    match value {
        Value::String(s) => Value::String(bmp(s)),
        Value::Array(items) => Value::Array(items.iter().map(through_utf8mb3).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (bmp(k), through_utf8mb3(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// The first 64 characters of an id (the `prefix-index-64` defect).
fn prefix_64(id: &str) -> &str {
    id.char_indices().nth(64).map_or(id, |(at, _)| &id[..at])
}

/// [`MemoryDefect::InputsIn64kColumn`]: the column's size in bytes.
const INPUT_COLUMN_BYTES: usize = 65_535;

/// [`MemoryDefect::StatusCaseFolded`]: a `setRunStatus` status in another
/// letter case read as the status it folds to.
fn status_case_folded(request: &Value) -> Value {
    let mut request = request.clone();
    if request.get("op").and_then(Value::as_str) == Some("setRunStatus") {
        if let Some(status) = request.pointer_mut("/args/status") {
            if let Some(text) = status.as_str() {
                *status = Value::String(text.to_ascii_lowercase());
            }
        }
    }
    request
}

/// The `empty-fields-absent` defect: `""` read as absent.
fn empty_fields_absent(mut op: StoreOp) -> StoreOp {
    if let StoreOp::CommitRunStart(a) = &mut op {
        let start = &mut a.start_run;
        for field in [&mut start.request_key, &mut start.request_digest] {
            if field.as_deref() == Some("") {
                *field = None;
            }
        }
    }
    op
}

impl MemoryStore {
    /// The `ids-case-insensitive` defect: every session and run id the
    /// operation names becomes the first spelling seen of its lowercased
    /// form (a commit records the spellings it brings).
    fn first_spelling_of_ids(&self, mut op: StoreOp) -> StoreOp {
        let mut seen = self
            .first_spellings
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let mut spell = |scope: &str, id: &mut String| {
            let folded = format!("{scope}\u{0}{}", id.to_ascii_lowercase());
            let first = seen.entry(folded).or_insert_with(|| id.clone());
            id.clone_from(first);
        };
        match &mut op {
            StoreOp::CommitRunStart(a) => {
                let start = &mut a.start_run;
                spell("", &mut start.session_id);
                let session = start.session_id.clone();
                spell(&session, &mut start.run_id);
                if let Some(expected) = &mut start.expected_current_run_id {
                    spell(&session, expected);
                }
            }
            StoreOp::GetRun(a) => {
                spell("", &mut a.session_id);
                spell(&a.session_id.clone(), &mut a.run_id);
            }
            StoreOp::SetRunStatus(a) => {
                spell("", &mut a.session_id);
                spell(&a.session_id.clone(), &mut a.run_id);
            }
            StoreOp::GetRunByRequestKey(a) => spell("", &mut a.session_id),
            StoreOp::GetCurrentRun(a)
            | StoreOp::ListRuns(a)
            | StoreOp::ListInputs(a)
            | StoreOp::DeleteSession(a) => spell("", &mut a.session_id),
        }
        op
    }
}

#[async_trait]
impl SessionStateStore for MemoryStore {
    fn backend(&self) -> &'static str {
        "memory"
    }

    fn durable(&self) -> bool {
        // The correct memory store is honest: nothing survives its process.
        self.defect == Some(MemoryDefect::ClaimsDurable)
    }

    fn skip_argument_checks(&self) -> bool {
        matches!(
            self.defect,
            Some(MemoryDefect::NoArgumentChecks | MemoryDefect::HalfKeyStartsKeyless)
        )
    }

    fn prepare_op(&self, op: StoreOp) -> StoreOp {
        match self.defect {
            Some(MemoryDefect::EmptyFieldsAbsent) => empty_fields_absent(op),
            Some(MemoryDefect::IdsCaseInsensitive) => self.first_spelling_of_ids(op),
            _ => op,
        }
    }

    fn wire_rewrite(&self) -> Option<fn(&Value) -> Value> {
        (self.defect == Some(MemoryDefect::StatusCaseFolded)).then_some(status_case_folded as _)
    }

    async fn commit_run_start(&self, mut start: StartRun) -> Result<CommitResult, StoreError> {
        if self.defect == Some(MemoryDefect::InputsIn64kColumn)
            && start.input.to_string().len() > INPUT_COLUMN_BYTES
        {
            return Err(StoreError::Internal(
                "Data too long for column 'input' at row 1".into(),
            ));
        }
        if self.defect == Some(MemoryDefect::NumbersAsDoubles) {
            start.input = through_doubles(&start.input);
        }
        if self.defect == Some(MemoryDefect::TextAsUtf8mb3) {
            start.input = through_utf8mb3(&start.input);
        }
        if self.defect == Some(MemoryDefect::HalfKeyStartsKeyless)
            && start.request_key.is_some() != start.request_digest.is_some()
        {
            start.request_key = None;
            start.request_digest = None;
        }
        let variant = self.defect.map_or(RuleVariant::SPEC, MemoryDefect::variant);
        if self.defect == Some(MemoryDefect::CommitDecidesOnSnapshot) {
            let snapshot = self
                .lock(&start.session_id)
                .sessions
                .get(&start.session_id)
                .cloned()
                .unwrap_or_default();
            racy_pause().await;
            let holder = start
                .request_key
                .as_deref()
                .and_then(|k| snapshot.run_by_request_key(k));
            let decided = snapshot.decide(&start, holder, variant)?;
            let mut inner = self.lock(&start.session_id);
            let session = inner.sessions.entry(start.session_id.clone()).or_default();
            return Ok(session.apply(&start, decided));
        }
        let stale_holder = if self.defect == Some(MemoryDefect::HolderReadOutsideCommit) {
            let holder = start
                .request_key
                .as_deref()
                .and_then(|k| self.holder(&self.lock(&start.session_id), &start.session_id, k));
            racy_pause().await;
            Some(holder)
        } else {
            None
        };
        let mut inner = self.lock(&start.session_id);
        let holder = match stale_holder {
            Some(h) => h,
            None => start
                .request_key
                .as_deref()
                .and_then(|k| self.holder(&inner, &start.session_id, k)),
        };
        let defect = self.defect;
        let session = inner.sessions.entry(start.session_id.clone()).or_default();
        if defect == Some(MemoryDefect::StartDigestInputOnly) {
            let same_input = session.run(&start.run_id).cloned().filter(|_| {
                session.inputs().iter().any(|e| {
                    e.run_id == start.run_id
                        && reqkey_model::canonical_json(&e.input)
                            == reqkey_model::canonical_json(&start.input)
                })
            });
            if let Some(run) = same_input {
                return Ok(CommitResult {
                    outcome: reqkey_model::CommitOutcome::Replayed,
                    run,
                });
            }
        }
        let mut decided = session.decide(&start, holder.as_ref(), variant);
        if let (Some(MemoryDefect::NoCas), Err(StoreError::RunStartRejected(r))) =
            (defect, &decided)
        {
            if r.cause() == "cas_mismatch" {
                let mut last_writer = start.clone();
                last_writer.expected_current_run_id =
                    session.current_run().map(|r| r.run_id.clone());
                decided = session.decide(&last_writer, holder.as_ref(), variant);
            }
        }
        let result = decided.map(|d| session.apply(&start, d));
        let real_inputs = session.input_count();
        if session.is_empty() && defect != Some(MemoryDefect::RefusalCreatesSession) {
            // A refused commit does not create the session.
            inner.sessions.remove(&start.session_id);
        }
        match (defect, result) {
            (Some(MemoryDefect::LeakConstraintError), Err(StoreError::RunStartRejected(r)))
                if r.cause() == "request_key_taken" =>
            {
                Err(StoreError::internal(
                    "UNIQUE constraint failed: runs.session_id, runs.request_key",
                ))
            }
            (Some(MemoryDefect::RefusalAppendsInput), Err(e @ StoreError::RunStartRejected(_))) => {
                inner
                    .ghost_inputs
                    .entry(start.session_id.clone())
                    .or_default()
                    .push((
                        real_inputs,
                        InputEntry {
                            run_id: start.run_id.clone(),
                            input: start.input.clone(),
                        },
                    ));
                Err(e)
            }
            (Some(MemoryDefect::ReplayAnswersStartedRun), Ok(mut r)) => {
                let key = (start.session_id.clone(), r.run.run_id.clone());
                match r.outcome {
                    reqkey_model::CommitOutcome::Started => {
                        inner.as_started.insert(key, r.run.clone());
                    }
                    reqkey_model::CommitOutcome::Replayed => {
                        if let Some(first) = inner.as_started.get(&key) {
                            r.run = first.clone();
                        }
                    }
                }
                Ok(r)
            }
            (_, result) => {
                if let (Some(book), Ok(r)) = (&self.book, &result) {
                    book.committed(&start, r);
                }
                result
            }
        }
    }

    /// Without a defect, the input stays text: its digests and canonical
    /// form come from [`JsonText`], and the session keeps its written
    /// text as [`MemoryStore::commit_run_start`] keeps the value's. Every
    /// defect reads or rewrites the input as a value: those take the value
    /// path.
    async fn commit_run_start_text(
        &self,
        mut start: StartRun,
        input: &JsonText,
    ) -> Result<CommitResult, StoreError> {
        if self.defect.is_some() {
            start.input = input.to_value();
            return self.commit_run_start(start).await;
        }
        let prepared = PreparedCommit::from_text(&start, input)?;
        let mut inner = self.lock(&start.session_id);
        let holder = start
            .request_key
            .as_deref()
            .and_then(|k| self.holder(&inner, &start.session_id, k));
        let session = inner.sessions.entry(start.session_id.clone()).or_default();
        let result =
            session.commit_prepared_written(&prepared, holder.as_ref(), input.written().to_owned());
        if session.is_empty() {
            // A refused commit does not create the session.
            inner.sessions.remove(&start.session_id);
        }
        result
    }

    async fn get_run(
        &self,
        session_id: &str,
        run_id: &str,
    ) -> Result<Option<RunMetadata>, StoreError> {
        let own = self
            .lock(session_id)
            .sessions
            .get(session_id)
            .and_then(|s| s.run(run_id))
            .cloned();
        if self.defect == Some(MemoryDefect::PrefixIndex64) {
            // The bug: the index holds the first 64 characters only.
            return Ok(self
                .lock(session_id)
                .sessions
                .get(session_id)
                .and_then(|s| {
                    s.runs()
                        .find(|r| prefix_64(&r.run_id) == prefix_64(run_id))
                        .cloned()
                }));
        }
        if own.is_none() && self.defect == Some(MemoryDefect::JoinedRunIndex) {
            // The bug: one index of joined ids, where two pairs can meet.
            let joined = format!("{session_id}:{run_id}");
            return Ok(self.shards.iter().find_map(|shard| {
                let inner = shard.lock().unwrap_or_else(|p| p.into_inner());
                inner.sessions.iter().find_map(|(sid, s)| {
                    s.runs()
                        .find(|r| format!("{sid}:{}", r.run_id) == joined)
                        .cloned()
                })
            }));
        }
        if own.is_none() && self.defect == Some(MemoryDefect::GlobalRunIds) {
            // One shard locked at a time (the session's was released).
            return Ok(self.shards.iter().find_map(|shard| {
                let inner = shard.lock().unwrap_or_else(|p| p.into_inner());
                inner.sessions.values().find_map(|s| s.run(run_id)).cloned()
            }));
        }
        Ok(own)
    }

    async fn get_current_run(&self, session_id: &str) -> Result<Option<RunMetadata>, StoreError> {
        Ok(self
            .lock(session_id)
            .sessions
            .get(session_id)
            .and_then(|s| s.current_run())
            .cloned())
    }

    async fn list_runs(&self, session_id: &str) -> Result<Vec<RunMetadata>, StoreError> {
        let runs: Vec<RunMetadata> = self
            .lock(session_id)
            .sessions
            .get(session_id)
            .map(|s| s.runs().cloned().collect())
            .unwrap_or_default();
        Ok(self.capped(runs))
    }

    async fn get_run_by_request_key(
        &self,
        session_id: &str,
        request_key: &str,
    ) -> Result<Option<RunMetadata>, StoreError> {
        let inner = self.lock(session_id);
        Ok(self.holder(&inner, session_id, request_key))
    }

    async fn list_inputs(&self, session_id: &str) -> Result<Vec<InputEntry>, StoreError> {
        let inner = self.lock(session_id);
        let mut inputs = inner
            .sessions
            .get(session_id)
            .map(|s| s.inputs())
            .unwrap_or_default();
        if let Some(ghosts) = inner.ghost_inputs.get(session_id) {
            for (after, entry) in ghosts.iter().rev() {
                inputs.insert((*after).min(inputs.len()), entry.clone());
            }
        }
        Ok(self.capped(inputs))
    }

    async fn set_run_status(
        &self,
        session_id: &str,
        run_id: &str,
        status: RunStatus,
    ) -> Result<RunMetadata, StoreError> {
        if self.defect == Some(MemoryDefect::StatusCheckThenWrite) {
            let mut record = self
                .lock(session_id)
                .sessions
                .get(session_id)
                .cloned()
                .ok_or_else(|| StoreError::NotFound(format!("no session {session_id}")))?;
            let run = record.set_run_status(run_id, status)?;
            racy_pause().await;
            self.lock(session_id)
                .sessions
                .insert(session_id.to_owned(), record);
            return Ok(run);
        }
        let mut inner = self.lock(session_id);
        let session = inner
            .sessions
            .get_mut(session_id)
            .ok_or_else(|| StoreError::NotFound(format!("no session {session_id}")))?;
        let result = session.set_run_status(run_id, status);
        if self.defect == Some(MemoryDefect::FinishedSameStatusOk)
            && matches!(result, Err(StoreError::InvalidTransition(_)))
        {
            if let Some(run) = session.run(run_id).filter(|r| r.status == status) {
                return Ok(run.clone());
            }
        }
        result
    }

    async fn delete_session(&self, session_id: &str) -> Result<bool, StoreError> {
        if self.defect == Some(MemoryDefect::DeleteInTwoSteps) {
            let existed = {
                let mut inner = self.lock(session_id);
                let existed = inner.sessions.contains_key(session_id);
                if existed {
                    inner.freed_keys.insert(session_id.to_owned());
                }
                existed
            };
            racy_pause().await;
            let mut inner = self.lock(session_id);
            inner.freed_keys.remove(session_id);
            inner.sessions.remove(session_id);
            return Ok(existed);
        }
        let mut inner = self.lock(session_id);
        let removed = inner.sessions.remove(session_id);
        inner.leases.retain(|(s, _), _| s != session_id);
        inner.ghost_inputs.remove(session_id);
        inner.as_started.retain(|(s, _), _| s != session_id);
        if let (Some(session), Some(MemoryDefect::DeleteKeepsKeys)) = (&removed, self.defect) {
            for run in session.runs().filter(|r| r.request_key.is_some()) {
                let key = run.request_key.clone().unwrap_or_default();
                inner
                    .leaked_keys
                    .insert((session_id.to_owned(), key), run.clone());
            }
        }
        Ok(removed.is_some() || self.defect == Some(MemoryDefect::DeleteAlwaysTrue))
    }

    async fn renew_lease(
        &self,
        session_id: &str,
        run_id: &str,
        owner: &str,
        expires_at_ms: u64,
    ) -> Result<bool, StoreError> {
        let mut inner = self.lock(session_id);
        let slot = inner
            .leases
            .entry((session_id.to_owned(), run_id.to_owned()))
            .or_insert_with(|| (owner.to_owned(), expires_at_ms));
        if slot.0 != owner {
            return Ok(false);
        }
        slot.1 = expires_at_ms;
        Ok(true)
    }

    async fn expire_lease(
        &self,
        session_id: &str,
        run_id: &str,
        now_ms: u64,
    ) -> Result<Option<RunMetadata>, StoreError> {
        let mut inner = self.lock(session_id);
        let expires = inner
            .leases
            .get(&(session_id.to_owned(), run_id.to_owned()))
            .map(|l| l.1);
        let Some(session) = inner.sessions.get_mut(session_id) else {
            return Ok(None);
        };
        let Some(run) = session.run(run_id).cloned() else {
            return Ok(None);
        };
        if run.status != RunStatus::Running || !lease_over(expires, now_ms) {
            return Ok(Some(run));
        }
        session
            .set_run_status(run_id, RunStatus::Interrupted)
            .map(Some)
    }
}

/// The wire answer of [`MemoryDefect::KeylessFieldsNull`]: every
/// `RunMetadata` in `answer` without a key gets `requestKey` and
/// `requestDigest` as `null`.
pub fn keyless_fields_null(answer: &mut serde_json::Value) {
    use serde_json::Value;
    match answer {
        Value::Object(map) => {
            let is_run = ["sessionId", "runId", "status", "startSequence"]
                .iter()
                .all(|k| map.contains_key(*k));
            if is_run && !map.contains_key("requestKey") {
                map.insert("requestKey".into(), Value::Null);
                map.insert("requestDigest".into(), Value::Null);
            }
            map.values_mut().for_each(keyless_fields_null);
        }
        Value::Array(items) => items.iter_mut().for_each(keyless_fields_null),
        _ => {}
    }
}
