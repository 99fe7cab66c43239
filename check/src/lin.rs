//! Linearizability of recorded store histories against the sequential spec.
//!
//! # Why
//!
//! The bugs that matter for request keys (a holder read outside the commit's
//! atomic step, a uniqueness backstop that leaks a raw error) only show under
//! true concurrency, and a concurrent history has no single "expected
//! answer" per operation: it is correct when *some* order of its operations,
//! consistent with real time, makes every answer the one the sequential
//! specification ([`SeqStore`]) gives. That is linearizability (Herlihy &
//! Wing), and this module decides it.
//!
//! # How
//!
//! - **Partition by session.** Every SPEC 4 operation reads and writes one
//!   session only (`deleteSession` included: it removes its own session and
//!   nothing else; a refused commit creates nothing). A [`SeqStore`] is thus
//!   the product of independent per-session objects, and linearizability is
//!   local: a history is linearizable iff each session's sub-history is. The
//!   test `operations_on_different_sessions_commute` checks the claim for
//!   every operation. Partitioning turns one search over thousands of
//!   operations into a few small ones. The partitions are **checked in
//!   parallel** (scoped std threads, at most one per available core, the
//!   largest partitions first), and the verdict does not depend on the
//!   threads: the partition reported is the first failing one in session
//!   order, and a thread skips only partitions after a failure already
//!   found, so every partition before the reported one was checked. (The
//!   step budget is shared, so a history that nearly exhausts it may be
//!   `Unknown` on one interleaving and decided on another; it is never
//!   linearizable on one and not on another.)
//! - **Parsed once, typed.** [`PreparedHistory`] parses every request and
//!   answer once into the model's types (the op, the commit validated and
//!   digested, the answer, inputs as canonical JSON); what the search
//!   touches holds no `serde_json::Value` (a commit's input and a
//!   `listInputs` answer are kept as canonical text only). Callers that
//!   time the check (`reqkey bench lin`) parse before they start the clock
//!   and call [`check_prepared`]; the raw [`Operation`]s are read again
//!   only to render a counterexample. A history read from a file
//!   ([`crate::history::parse_prepared`]) is never held as `Operation`s:
//!   each entry is prepared as it is read and kept for the report as a
//!   [`CompactOperation`] (its request and answer as JSON text), rebuilt
//!   only for the operations a report shows.
//! - **Search with memoization** (Wing & Gong, with Lowe's cache, the way
//!   Porcupine does it): walk the calls and returns in time order; at a call,
//!   try to linearize the operation now (apply it to the spec; its answer
//!   must match); at a return whose call was not linearized yet, backtrack.
//!   The cache of (linearized set, spec state) — kept as a 128-bit
//!   fingerprint, 16 bytes an entry — prunes every configuration
//!   already explored, which keeps ordinary histories linear in practice.
//! - **Bounded.** Every step counts against `budget_steps`; an exhausted
//!   budget is the verdict [`Verdict::Unknown`], never a hang.
//! - **Requests the spec refuses.** A request that does not parse
//!   (`StoreOp::from_wire` fails) is answered `invalid_argument` by the spec
//!   whatever the state and changes nothing, so it is checked on its own.
//!   A malformed answer (neither `{ok}` nor a well-formed `{error}`, or an
//!   `ok` value that is not the op's result type) is never linearizable.
//! - **Answers.** `ok` values are compared typed (extra fields ignored,
//!   like the scenario patterns); refusals by cause and details; other
//!   errors by kind (their message is free text). An operation without an
//!   answer (timed out) may have taken effect at any instant after its
//!   invocation, or never.
//!
//! # On failure
//!
//! [`Counterexample`] carries the failing session's history as a timeline
//! and the smallest non-linearizable subset found: first the shortest
//! prefix (ops still in flight at the cut count as unanswered, so the cut
//! is sound), then operations whose recorded answer claims no write (reads,
//! refusals, replays, `deleted: false`) are dropped greedily while the rest
//! stays non-linearizable. Dropping such an operation cannot change what
//! the others can be explained by (in the whole history it wrote nothing),
//! so the subset is a witness of the whole history's failure, not an
//! artefact of the minimization. Operations that wrote are never dropped
//! except by the cut: dropping a commit would make a later read of its run
//! fail for a reason the target is not guilty of.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashSet};
use std::fmt::{self, Write as _};
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

#[cfg(doc)]
use reqkey_model::seq::SeqStore;
use reqkey_model::seq::{PreparedCommit, SessionState, StoreOp, StoreReply};
use reqkey_model::{
    canonical_json, CommitOutcome, DeleteResult, RunMetadata, RunStatus, StoreError,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The default search budget (steps across all partitions).
pub const DEFAULT_BUDGET_STEPS: u64 = 2_000_000;

/// The most threads one check starts, whatever `CheckOptions::threads`
/// asks.
pub const MAX_THREADS: usize = 64;

/// The least budget of one trial search while minimizing.
const MIN_CHECK_STEPS: u64 = 10_000;

/// One completed (or unanswered) operation of a history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Operation {
    /// Who issued it (`c.3`, `client 2`): only for the report.
    pub client: String,
    /// The raw request `{"op", "args"}`, possibly malformed on purpose.
    pub request: Value,
    /// Monotonic instant of the invocation, in nanoseconds.
    pub invoke_ns: u64,
    /// Monotonic instant of the return, in nanoseconds (ignored when
    /// `answer` is `None`).
    pub return_ns: u64,
    /// The wire answer `{"ok": ..}` / `{"error": ..}`; `None` when the call
    /// never answered (timeout): it may or may not have taken effect.
    pub answer: Option<Value>,
}

impl Operation {
    fn end_ns(&self) -> u64 {
        if self.answer.is_some() {
            self.return_ns
        } else {
            u64::MAX
        }
    }
}

/// Options of a check.
#[derive(Debug, Clone, Copy)]
pub struct CheckOptions {
    /// The bound on search steps, for the check and (separately) for the
    /// minimization of a counterexample.
    pub budget_steps: u64,
    /// Whether to shrink a counterexample (costs further searches).
    pub minimize: bool,
    /// Threads checking partitions at once; 0: one per available core.
    /// The verdict is the same whatever the number (see the module docs).
    pub threads: usize,
}

impl Default for CheckOptions {
    fn default() -> Self {
        Self {
            budget_steps: DEFAULT_BUDGET_STEPS,
            minimize: true,
            threads: 0,
        }
    }
}

/// The outcome of a check.
#[derive(Debug, Clone)]
pub enum Verdict {
    Linearizable,
    NotLinearizable(Box<Counterexample>),
    /// The budget ran out before a verdict.
    Unknown {
        reason: String,
    },
}

impl Verdict {
    pub fn is_linearizable(&self) -> bool {
        matches!(self, Verdict::Linearizable)
    }
}

/// What a check found, with its cost.
#[derive(Debug, Clone)]
pub struct CheckReport {
    pub verdict: Verdict,
    /// Search steps spent deciding (minimization excluded).
    pub steps: u64,
    /// Sessions the history was split into.
    pub partitions: usize,
    /// Configurations in the largest partition's cache (16 bytes each plus
    /// the hash table's overhead): the search's memory.
    pub largest_cache: usize,
    /// Threads that checked partitions (1 when the check was sequential).
    pub threads: usize,
}

/// Why a history is not linearizable, readably.
#[derive(Debug, Clone)]
pub struct Counterexample {
    /// The session whose sub-history fails (`None` for a lone bad op).
    pub session: Option<String>,
    /// What is wrong, in one sentence.
    pub reason: String,
    /// Indices (into the checked history) of the failing partition.
    pub partition: Vec<usize>,
    /// Indices of the smallest non-linearizable subset found.
    pub minimal: Vec<usize>,
    /// Indices in `minimal` counted as unanswered (in flight at the cut).
    pub minimal_in_flight: Vec<usize>,
    /// The failing partition as a timeline.
    pub timeline: String,
    /// The minimal subset as a timeline.
    pub minimal_timeline: String,
    /// Search steps spent shrinking (bounded by the check's budget).
    pub minimize_steps: u64,
}

impl fmt::Display for Counterexample {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "not linearizable: {}", self.reason)?;
        if let Some(s) = &self.session {
            writeln!(f, "session {s}, {} operations:", self.partition.len())?;
        }
        f.write_str(&self.timeline)?;
        writeln!(
            f,
            "smallest non-linearizable subset found ({} of {} operations):",
            self.minimal.len(),
            self.partition.len()
        )?;
        f.write_str(&self.minimal_timeline)
    }
}

/// Checks a history with the default options.
pub fn check(history: &[Operation]) -> CheckReport {
    check_with(history, CheckOptions::default())
}

/// A history parsed once for checking: each operation's request and
/// answer in the model's types, its instants, and the raw history (read
/// again only to render a counterexample).
///
/// The raw history is either borrowed ([`PreparedHistory::new`], for a
/// history already held as [`Operation`]s) or owned compactly
/// ([`PreparedHistoryBuilder`], for one read from a file): one
/// [`CompactOperation`] per operation, its request and answer kept as
/// JSON text, so no `serde_json::Value` lives as long as the history.
#[derive(Debug)]
pub struct PreparedHistory<'a> {
    source: Source<'a>,
    prepared: Vec<Prepared>,
}

/// Where a prepared history's raw operations are.
#[derive(Debug)]
enum Source<'a> {
    Borrowed(&'a [Operation]),
    Compact(Vec<CompactOperation>),
}

/// One operation kept for reporting only: its client and instants, its
/// request and answer as compact JSON text (what [`Operation`] holds as
/// `Value`s, a few times smaller). [`CompactOperation::to_operation`]
/// gives the operation back, equal to the one it was made from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactOperation {
    client: Box<str>,
    request: Box<str>,
    invoke_ns: u64,
    return_ns: u64,
    answer: Option<Box<str>>,
}

impl CompactOperation {
    pub fn new(o: &Operation) -> Self {
        Self {
            client: o.client.as_str().into(),
            request: o.request.to_string().into_boxed_str(),
            invoke_ns: o.invoke_ns,
            return_ns: o.return_ns,
            answer: o.answer.as_ref().map(|a| a.to_string().into_boxed_str()),
        }
    }

    /// The operation again, its request and answer parsed back.
    pub fn to_operation(&self) -> Operation {
        Operation {
            client: self.client.to_string(),
            request: reparse(&self.request),
            invoke_ns: self.invoke_ns,
            return_ns: self.return_ns,
            answer: self.answer.as_deref().map(reparse),
        }
    }

    pub fn client(&self) -> &str {
        &self.client
    }

    pub fn invoke_ns(&self) -> u64 {
        self.invoke_ns
    }

    pub fn return_ns(&self) -> u64 {
        self.return_ns
    }

    pub fn is_answered(&self) -> bool {
        self.answer.is_some()
    }
}

/// JSON text written by `Value`'s own `Display` (so it always parses, to
/// an equal value: numbers are kept as written, `arbitrary_precision`).
fn reparse(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or(Value::Null)
}

/// Builds a [`PreparedHistory`] one operation at a time, each prepared
/// (typed for the check, kept as compact text for a report) as it comes,
/// so that a reader never holds the whole history as [`Operation`]s.
#[derive(Debug, Default)]
pub struct PreparedHistoryBuilder {
    compact: Vec<CompactOperation>,
    prepared: Vec<Prepared>,
}

impl PreparedHistoryBuilder {
    /// Operations given so far.
    pub fn len(&self) -> usize {
        self.prepared.len()
    }

    pub fn is_empty(&self) -> bool {
        self.prepared.is_empty()
    }

    /// Sets operation `index` (0-based, the index a report names) to `o`:
    /// replaces it when it was given before (an operation that completes
    /// after others were read), else appends it.
    pub fn set(&mut self, index: usize, o: &Operation) {
        let compact = CompactOperation::new(o);
        let prepared = prepare(o);
        match (self.compact.get_mut(index), self.prepared.get_mut(index)) {
            (Some(c), Some(p)) => {
                *c = compact;
                *p = prepared;
            }
            _ => {
                self.compact.push(compact);
                self.prepared.push(prepared);
            }
        }
    }

    pub fn finish(self) -> PreparedHistory<'static> {
        PreparedHistory {
            source: Source::Compact(self.compact),
            prepared: self.prepared,
        }
    }
}

impl<'a> PreparedHistory<'a> {
    /// Parses every operation of `history` (the cost [`check_prepared`]
    /// does not pay again).
    pub fn new(history: &'a [Operation]) -> Self {
        Self {
            source: Source::Borrowed(history),
            prepared: history.iter().map(prepare).collect(),
        }
    }

    pub fn len(&self) -> usize {
        self.prepared.len()
    }

    pub fn is_empty(&self) -> bool {
        self.prepared.is_empty()
    }

    /// Operation `i` as recorded (rebuilt from its text when the history
    /// is held compactly).
    pub fn operation(&self, i: usize) -> Option<Cow<'_, Operation>> {
        match &self.source {
            Source::Borrowed(h) => h.get(i).map(Cow::Borrowed),
            Source::Compact(h) => h.get(i).map(|c| Cow::Owned(c.to_operation())),
        }
    }

    /// [`render_timeline`] of these operations (only the lines shown are
    /// rebuilt from their text).
    pub fn render_timeline(&self, indices: &[usize], in_flight: &[usize]) -> String {
        match &self.source {
            Source::Borrowed(h) => render_timeline(h, indices, in_flight),
            Source::Compact(h) => render_with(
                indices,
                in_flight,
                |i| TimelineOp {
                    client: &h[i].client,
                    invoke_ns: h[i].invoke_ns,
                    return_ns: h[i].return_ns,
                    answered: h[i].answer.is_some(),
                },
                |i| {
                    let o = h[i].to_operation();
                    (
                        summarize_request(&o.request),
                        o.answer.as_ref().map(summarize_answer),
                    )
                },
            ),
        }
    }
}

/// Checks a history (against a store that starts empty).
pub fn check_with(history: &[Operation], opts: CheckOptions) -> CheckReport {
    check_prepared(&PreparedHistory::new(history), opts)
}

/// Checks a history parsed beforehand.
pub fn check_prepared(parsed: &PreparedHistory<'_>, opts: CheckOptions) -> CheckReport {
    let prepared = &parsed.prepared;

    // Lone operations: the spec's answer to them does not depend on state.
    for (i, p) in prepared.iter().enumerate() {
        let reason = match (&p.op, &p.observed) {
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
        };
        if let Some(reason) = reason {
            let timeline = parsed.render_timeline(&[i], &[]);
            return CheckReport {
                verdict: Verdict::NotLinearizable(Box::new(Counterexample {
                    session: p.op.as_ref().map(|o| o.session_id().to_owned()),
                    reason,
                    partition: vec![i],
                    minimal: vec![i],
                    minimal_in_flight: vec![],
                    timeline: timeline.clone(),
                    minimal_timeline: timeline,
                    minimize_steps: 0,
                })),
                steps: 0,
                partitions: 0,
                largest_cache: 0,
                threads: 1,
            };
        }
    }

    let mut by_session: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, p) in prepared.iter().enumerate() {
        if let Some(op) = &p.op {
            by_session.entry(op.session_id()).or_default().push(i);
        }
    }
    let partitions: Vec<(&str, Vec<usize>)> = by_session.into_iter().collect();
    let n_partitions = partitions.len();
    let (outcomes, threads) = search_partitions(prepared, &partitions, &opts);

    let mut steps = 0u64;
    let mut largest_cache = 0usize;
    for o in outcomes.iter().flatten() {
        steps += o.used;
        largest_cache = largest_cache.max(o.cached);
    }
    // The first decisive partition in session order: every partition
    // before it was checked (see `search_partitions`).
    let decisive = partitions
        .iter()
        .zip(&outcomes)
        .find_map(|((session, indices), o)| match o {
            Some(o) if !matches!(o.search, Search::Linearizable) => Some((session, indices, o)),
            _ => None,
        });
    let Some((session, indices, outcome)) = decisive else {
        return CheckReport {
            verdict: Verdict::Linearizable,
            steps,
            partitions: n_partitions,
            largest_cache,
            threads,
        };
    };
    if matches!(outcome.search, Search::OutOfBudget) {
        return CheckReport {
            verdict: Verdict::Unknown {
                reason: format!(
                    "gave up after {} search steps (session {session}, {} operations)",
                    opts.budget_steps,
                    indices.len()
                ),
            },
            steps,
            partitions: n_partitions,
            largest_cache,
            threads,
        };
    }
    let mut minimize_steps = 0;
    let (minimal, in_flight) = if opts.minimize {
        // Each trial search may cost a few times what deciding did; one
        // that runs out counts as "not shown to fail".
        let per_check = outcome.used.saturating_mul(4).max(MIN_CHECK_STEPS);
        minimize(
            prepared,
            indices,
            opts.budget_steps,
            per_check,
            &mut minimize_steps,
        )
    } else {
        (indices.clone(), vec![])
    };
    CheckReport {
        verdict: Verdict::NotLinearizable(Box::new(Counterexample {
            session: Some((*session).to_owned()),
            reason:
                "no order of the operations consistent with real time gives every answer the spec's"
                    .to_owned(),
            timeline: parsed.render_timeline(indices, &[]),
            minimal_timeline: parsed.render_timeline(&minimal, &in_flight),
            partition: indices.clone(),
            minimal,
            minimal_in_flight: in_flight,
            minimize_steps,
        })),
        steps,
        partitions: n_partitions,
        largest_cache,
        threads,
    }
}

/// What the search of one partition found.
#[derive(Debug)]
struct PartitionOutcome {
    search: Search,
    used: u64,
    cached: usize,
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
fn search_partitions(
    prepared: &[Prepared],
    partitions: &[(&str, Vec<usize>)],
    opts: &CheckOptions,
) -> (Vec<Option<PartitionOutcome>>, usize) {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let wanted = if opts.threads == 0 {
        cores
    } else {
        opts.threads
    };
    let threads = wanted.min(partitions.len()).clamp(1, MAX_THREADS);
    let mut order: Vec<usize> = (0..partitions.len()).collect();
    order.sort_by_key(|&k| (std::cmp::Reverse(partitions[k].1.len()), k));
    let results: Vec<OnceLock<PartitionOutcome>> =
        (0..partitions.len()).map(|_| OnceLock::new()).collect();
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
            let items: Vec<Item<'_>> = partitions[k]
                .1
                .iter()
                .map(|&i| Item::of(prepared, i, false))
                .collect();
            let remaining = opts
                .budget_steps
                .saturating_sub(spent.load(Ordering::Relaxed));
            let (search, used, cached) = search(&items, remaining);
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

/// An operation parsed once, into what every evaluation needs: the op, its
/// commit validated and digested, the recorded answer typed, and a
/// recorded input log in canonical form.
///
/// No `serde_json::Value` stays in it: a commit's input is kept canonical
/// in `commit` (the op's own copy is dropped), and a `listInputs` answer
/// only as `inputs` (its `Observed` entries are emptied).
#[derive(Debug)]
struct Prepared {
    op: Option<StoreOp>,
    commit: Option<PreparedCommit>,
    observed: Observed,
    inputs: Option<Vec<(String, String)>>,
    invoke_ns: u64,
    /// The return instant, `u64::MAX` for an unanswered op.
    end_ns: u64,
}

#[derive(Debug)]
enum Observed {
    Answer(Result<StoreReply, StoreError>),
    Malformed(String),
    Pending,
}

fn prepare(o: &Operation) -> Prepared {
    let mut op = StoreOp::from_wire(&o.request).ok();
    let mut observed = match &o.answer {
        None => Observed::Pending,
        Some(answer) => parse_answer(op.as_ref().map(StoreOp::name), answer),
    };
    let commit = match &mut op {
        Some(StoreOp::CommitRunStart(a)) => {
            let prepared = PreparedCommit::new(&a.start_run).ok();
            // Kept canonical in `prepared`; the search never reads it here.
            a.start_run.input = Value::Null;
            prepared
        }
        _ => None,
    };
    let inputs = match &mut observed {
        Observed::Answer(Ok(StoreReply::Inputs(v))) => {
            let canonical = v
                .iter()
                .map(|e| (e.run_id.clone(), canonical_json(&e.input)))
                .collect();
            *v = Vec::new();
            Some(canonical)
        }
        _ => None,
    };
    Prepared {
        op,
        commit,
        observed,
        inputs,
        invoke_ns: o.invoke_ns,
        end_ns: o.end_ns(),
    }
}

fn parse_answer(op_name: Option<&str>, answer: &Value) -> Observed {
    let Some(obj) = answer.as_object() else {
        return Observed::Malformed("not a JSON object".into());
    };
    if obj.len() != 1 {
        return Observed::Malformed("needs exactly one of `ok` or `error`".into());
    }
    if let Some(err) = obj.get("error") {
        return match StoreError::from_wire(err) {
            Some(e) => Observed::Answer(Err(e)),
            None => Observed::Malformed(format!("not a reqkey-store/1 error: {err}")),
        };
    }
    let Some(ok) = obj.get("ok") else {
        return Observed::Malformed("needs exactly one of `ok` or `error`".into());
    };
    let Some(name) = op_name else {
        // The request was malformed; the lone-op check reports it.
        return Observed::Answer(Ok(StoreReply::Run(None)));
    };
    match StoreReply::from_wire(name, ok.clone()) {
        Ok(r) => Observed::Answer(Ok(r)),
        Err(e) => Observed::Malformed(format!("`ok` is not a {name} result: {e}")),
    }
}

/// Does `observed` (the wire answer to `request`) conform to `spec`, the
/// spec's answer? Typed comparison, as in the linearizability check.
pub fn answer_conforms(
    request: &Value,
    spec: &Result<StoreReply, StoreError>,
    observed: &Value,
) -> bool {
    let name = StoreOp::from_wire(request).ok().map(|o| o.name());
    answers_match(spec, &parse_answer(name, observed))
}

/// Does the spec's answer match the observed one?
fn answers_match(spec: &Result<StoreReply, StoreError>, observed: &Observed) -> bool {
    match (spec, observed) {
        (_, Observed::Pending) => true,
        (_, Observed::Malformed(_)) => false,
        (Ok(a), Observed::Answer(Ok(b))) => a == b,
        (
            Err(StoreError::RunStartRejected(a)),
            Observed::Answer(Err(StoreError::RunStartRejected(b))),
        ) => a == b,
        (Err(a), Observed::Answer(Err(b))) => a.kind() == b.kind(),
        _ => false,
    }
}

/// Does this observed answer claim that the op wrote nothing? (A matched
/// answer of that shape means the spec wrote nothing either.)
fn claims_no_write(observed: &Observed) -> bool {
    match observed {
        Observed::Answer(Err(_)) => true,
        Observed::Answer(Ok(StoreReply::Commit(c))) => c.outcome == CommitOutcome::Replayed,
        Observed::Answer(Ok(StoreReply::Deleted(d))) => !d.deleted,
        // setRunStatus answers a Run too, but it writes: only reads of
        // those shapes are free, and a read is known by its op.
        Observed::Answer(Ok(StoreReply::Run(_))) => false,
        Observed::Answer(Ok(StoreReply::Runs(_) | StoreReply::Inputs(_))) => true,
        Observed::Malformed(_) | Observed::Pending => false,
    }
}

/// Can dropping this op from a failing history only keep it failing? Yes
/// for reads and for answers that claim no write: in any linearization of
/// the whole history the op left the spec state as it was.
fn writes_nothing(p: &Prepared) -> bool {
    p.op.as_ref().is_some_and(is_read) || claims_no_write(&p.observed)
}

fn is_read(op: &StoreOp) -> bool {
    !matches!(
        op,
        StoreOp::CommitRunStart(_) | StoreOp::SetRunStatus(_) | StoreOp::DeleteSession(_)
    )
}

/// One operation as the search sees it.
#[derive(Debug, Clone, Copy)]
struct Item<'a> {
    prepared: &'a Prepared,
    /// Counted as unanswered (in flight at a cut): matches any answer.
    in_flight: bool,
    invoke_ns: u64,
    end_ns: u64,
}

const PENDING: Observed = Observed::Pending;

impl<'a> Item<'a> {
    /// `in_flight` forces the op to count as unanswered.
    fn of(prepared: &'a [Prepared], i: usize, in_flight: bool) -> Self {
        let p = &prepared[i];
        Item {
            prepared: p,
            in_flight,
            invoke_ns: p.invoke_ns,
            end_ns: if in_flight { u64::MAX } else { p.end_ns },
        }
    }

    fn observed(&self) -> &'a Observed {
        if self.in_flight {
            &PENDING
        } else {
            &self.prepared.observed
        }
    }

    /// Does the recorded answer claim the op wrote nothing? Such an op,
    /// when its answer matches, leaves the spec state as it was.
    fn quiet(&self) -> bool {
        !matches!(self.observed(), Observed::Pending) && writes_nothing(self.prepared)
    }
}

#[derive(Debug)]
enum Search {
    Linearizable,
    NotLinearizable,
    OutOfBudget,
}

const NONE: usize = usize::MAX;

/// How to take back one linearized operation.
#[derive(Debug)]
enum Undo {
    /// The op left the state as it was.
    Nothing,
    /// It started a run (the last one).
    Start,
    /// It changed the status of the run at this index from this one.
    Status(usize, RunStatus),
    /// It deleted the session, which was this.
    Session(Box<SessionState>),
}

fn undo(state: &mut SessionState, undo: Undo) {
    match undo {
        Undo::Nothing => {}
        Undo::Start => state.undo_last_start(),
        Undo::Status(index, status) => state.undo_status_change(index, status),
        Undo::Session(old) => *state = *old,
    }
}

/// Applies `item`'s operation to `state` (one session) if the spec's answer
/// there matches the recorded one; updates `fp`, the state's fingerprint.
/// `None`: no match, and `state` and `fp` are as they were. Every answer
/// comes from the model's [`SessionState`], the same methods [`SeqStore`]
/// calls (`the_session_evaluation_agrees_with_seq_store` checks it); reads
/// are compared in place instead of cloned.
fn evaluate(state: &mut SessionState, fp: &mut u128, item: &Item<'_>) -> Option<Undo> {
    let observed = item.observed();
    let p = item.prepared;
    let op = p.op.as_ref()?;
    let pending = matches!(observed, Observed::Pending);
    let read_ok = |spec: Option<&RunMetadata>| match observed {
        Observed::Pending => true,
        Observed::Answer(Ok(StoreReply::Run(o))) => o.as_ref() == spec,
        _ => false,
    };
    let matched = match op {
        StoreOp::CommitRunStart(_) => {
            let prepared = p.commit.as_ref()?;
            let spec = state.commit_prepared(prepared);
            let started = matches!(&spec, Ok(c) if c.outcome == CommitOutcome::Started);
            let ok = pending || answers_match(&spec.map(StoreReply::Commit), observed);
            if !started {
                return ok.then_some(Undo::Nothing);
            }
            if !ok {
                state.undo_last_start();
                return None;
            }
            let index = state.run_count() - 1;
            *fp = fp.wrapping_add(entry_term(state, index));
            return Some(Undo::Start);
        }
        StoreOp::GetRun(a) => read_ok(state.run(&a.run_id)),
        StoreOp::GetCurrentRun(_) => read_ok(state.current_run()),
        StoreOp::GetRunByRequestKey(a) => read_ok(state.run_by_request_key(&a.request_key)),
        StoreOp::ListRuns(_) => match observed {
            Observed::Pending => true,
            Observed::Answer(Ok(StoreReply::Runs(v))) => v.iter().eq(state.runs()),
            _ => false,
        },
        StoreOp::ListInputs(_) => match (observed, &p.inputs) {
            (Observed::Pending, _) => true,
            (Observed::Answer(Ok(StoreReply::Inputs(_))), Some(inputs)) => inputs
                .iter()
                .map(|(r, i)| (r.as_str(), i.as_str()))
                .eq(state.inputs_canonical()),
            _ => false,
        },
        StoreOp::SetRunStatus(a) => {
            let Some(index) = state.run_index(&a.run_id) else {
                let spec = Err(StoreError::NotFound(String::new()));
                return (pending || answers_match(&spec, observed)).then_some(Undo::Nothing);
            };
            let before_term = entry_term(state, index);
            let before = state.entry(index).map(|(m, _, _)| m.status)?;
            let spec = state.set_run_status(&a.run_id, a.status);
            let changed = spec.is_ok() && before != a.status;
            let ok = pending || answers_match(&spec.map(|r| StoreReply::Run(Some(r))), observed);
            if !changed {
                if !ok {
                    // A same-status change writes nothing; nothing to undo.
                    return None;
                }
                return Some(Undo::Nothing);
            }
            if !ok {
                state.undo_status_change(index, before);
                return None;
            }
            *fp = fp
                .wrapping_sub(before_term)
                .wrapping_add(entry_term(state, index));
            return Some(Undo::Status(index, before));
        }
        StoreOp::DeleteSession(_) => {
            let deleted = !state.is_empty();
            let spec = Ok(StoreReply::Deleted(DeleteResult { deleted }));
            if !(pending || answers_match(&spec, observed)) {
                return None;
            }
            if !deleted {
                return Some(Undo::Nothing);
            }
            *fp = 0;
            return Some(Undo::Session(Box::new(std::mem::take(state))));
        }
    };
    matched.then_some(Undo::Nothing)
}

/// One linearized operation on the search's stack.
#[derive(Debug)]
struct Frame {
    /// Its call entry.
    entry: usize,
    /// Linearized because it was callable, matched and wrote nothing: then
    /// it may come first among what is left, so if the configuration after
    /// it fails, so does the one before it (see [`search`]).
    forced: bool,
    undo: Undo,
    fp_before: u128,
}

/// Wing & Gong search with Lowe's memoization over one partition.
/// Returns the outcome and the steps spent.
///
/// On top of the plain search, **quiet operations go first**: at a
/// configuration reached for the first time, a callable operation that
/// matches and leaves the state as it is (a read, a refusal, a replay)
/// is linearized at once, and if what follows fails, the configuration
/// fails too without trying anything else. That is complete: in any
/// linearization extending the configuration, that op can be moved to
/// the front (it is callable, so nothing left precedes it in real time;
/// it answers the same on the same state; and it changes nothing, so
/// every later answer stays). The same argument lets the ordinary
/// iteration skip quiet ops: at a configuration where none matched, none
/// will.
fn search(items: &[Item<'_>], budget_steps: u64) -> (Search, u64, usize) {
    let n = items.len();
    if n == 0 {
        return (Search::Linearizable, 0, 0);
    }
    // Entries: 2 per op. Entry 2i is the call of op i, 2i+1 its return.
    // Time order; at equal instants calls come first (ties overlap).
    let mut order: Vec<usize> = (0..2 * n).collect();
    order.sort_by_key(|&e| {
        let it = &items[e / 2];
        if e % 2 == 0 {
            (it.invoke_ns, 0u8, e)
        } else {
            (it.end_ns, 1u8, e)
        }
    });
    // A doubly linked list over the entries, with a head sentinel at 2n.
    let head = 2 * n;
    let mut next = vec![NONE; 2 * n + 1];
    let mut prev = vec![NONE; 2 * n + 1];
    let mut last = head;
    for &e in &order {
        next[last] = e;
        prev[e] = last;
        last = e;
    }
    let quiet: Vec<bool> = items.iter().map(Item::quiet).collect();

    // The configuration: the linearized set as a Zobrist hash (the XOR of
    // one random 128-bit word per linearized op, updated in O(1)) and the
    // state with its fingerprint (a sum of one term per run, also
    // updated in O(1)); the cache holds 16 bytes per configuration.
    let mut linearized: u128 = 0;
    let mut state = SessionState::default();
    let mut fp: u128 = 0;
    let mut stack: Vec<Frame> = Vec::new();
    let mut cache: HashSet<u128, BuildHasherDefault<FoldHasher>> = HashSet::default();
    let key = |linearized: u128, fp: u128| linearized ^ mix128(fp);
    let mut steps = 0u64;
    let mut entry = next[head];
    // A configuration reached for the first time: look for a quiet op.
    let mut fresh = true;

    macro_rules! lift {
        ($e:expr) => {
            for e in [$e, $e + 1] {
                next[prev[e]] = next[e];
                if next[e] != NONE {
                    prev[next[e]] = prev[e];
                }
            }
        };
    }
    // Backtracks to the last configuration not known to fail; `false`
    // when there is none (the history is not linearizable).
    macro_rules! backtrack {
        () => {{
            let mut resumed = false;
            while let Some(frame) = stack.pop() {
                let call = frame.entry;
                linearized ^= zobrist(call / 2);
                undo(&mut state, frame.undo);
                fp = frame.fp_before;
                // Put the return back, then the call (reverse of lifting).
                for e in [call + 1, call] {
                    if next[e] != NONE {
                        prev[next[e]] = e;
                    }
                    next[prev[e]] = e;
                }
                if !frame.forced {
                    entry = next[call];
                    resumed = true;
                    break;
                }
            }
            resumed
        }};
    }

    while next[head] != NONE {
        steps += 1;
        if steps > budget_steps {
            return (Search::OutOfBudget, steps - 1, cache.len());
        }
        if fresh {
            fresh = false;
            let mut e = next[head];
            let mut forced = None;
            while e != NONE && e % 2 == 0 {
                if quiet[e / 2] {
                    let fp_before = fp;
                    match evaluate(&mut state, &mut fp, &items[e / 2]) {
                        Some(Undo::Nothing) => {
                            forced = Some(e);
                            break;
                        }
                        Some(other) => {
                            // Not quiet after all (cannot happen for a
                            // matched answer that claims no write).
                            undo(&mut state, other);
                            fp = fp_before;
                        }
                        None => {}
                    }
                }
                e = next[e];
            }
            if let Some(e) = forced {
                let bits = linearized ^ zobrist(e / 2);
                if cache.insert(key(bits, fp)) {
                    stack.push(Frame {
                        entry: e,
                        forced: true,
                        undo: Undo::Nothing,
                        fp_before: fp,
                    });
                    linearized = bits;
                    lift!(e);
                    fresh = true;
                } else if !backtrack!() {
                    // Explored before and failed: so does this one.
                    return (Search::NotLinearizable, steps, cache.len());
                }
                continue;
            }
            entry = next[head];
            continue;
        }
        if entry == NONE {
            // Cannot happen: a list that is not empty ends with a return.
            return (Search::NotLinearizable, steps, cache.len());
        }
        if entry % 2 == 0 {
            let i = entry / 2;
            if !quiet[i] {
                let fp_before = fp;
                if let Some(u) = evaluate(&mut state, &mut fp, &items[i]) {
                    let bits = linearized ^ zobrist(i);
                    if cache.insert(key(bits, fp)) {
                        stack.push(Frame {
                            entry,
                            forced: false,
                            undo: u,
                            fp_before,
                        });
                        linearized = bits;
                        lift!(entry);
                        fresh = true;
                        continue;
                    }
                    undo(&mut state, u);
                    fp = fp_before;
                }
            }
            entry = next[entry];
        } else if !backtrack!() {
            // A return whose call is still in the list, and nothing to
            // take back.
            return (Search::NotLinearizable, steps, cache.len());
        }
    }
    (Search::Linearizable, steps, cache.len())
}

/// The fingerprint term of the run at `index`: a 128-bit hash of everything
/// the state's equality looks at for it, and of its position.
fn entry_term(state: &SessionState, index: usize) -> u128 {
    let mut h = Hash128::new(0x243f_6a88_85a3_08d3, 0x1319_8a2e_0370_7344);
    index.hash(&mut h);
    if let Some((meta, digest, input)) = state.entry(index) {
        meta.hash(&mut h);
        digest.hash(&mut h);
        input.hash(&mut h);
    }
    h.finish128()
}

/// The Zobrist word of op `i`: two rounds of splitmix64 per half.
fn zobrist(i: usize) -> u128 {
    let i = i as u64;
    (u128::from(splitmix(i ^ 0x9e37_79b9_7f4a_7c15)) << 64)
        | u128::from(splitmix(i.rotate_left(32) ^ 0xd1b5_4a32_d192_ed03))
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Mixes a state fingerprint before it meets the Zobrist word, so that the
/// two additive/XOR structures do not line up.
fn mix128(x: u128) -> u128 {
    let (hi, lo) = ((x >> 64) as u64, x as u64);
    (u128::from(splitmix(hi ^ lo.rotate_left(17))) << 64)
        | u128::from(splitmix(lo ^ 0x5851_f42d_4c95_7f2d ^ hi))
}

/// A fast 128-bit hasher for fingerprint terms (two multiply-rotate lanes,
/// finished with splitmix); the data is the checker's own, not an
/// adversary's, so it needs spread, not resistance.
#[derive(Debug, Clone, Copy)]
struct Hash128 {
    a: u64,
    b: u64,
}

impl Hash128 {
    fn new(a: u64, b: u64) -> Self {
        Self { a, b }
    }

    fn word(&mut self, w: u64) {
        self.a = (self.a ^ w)
            .wrapping_mul(0x9fb2_1c65_1e98_df25)
            .rotate_left(29);
        self.b = (self.b ^ w.rotate_left(32))
            .wrapping_mul(0xc2b2_ae3d_27d4_eb4f)
            .rotate_left(31);
    }

    fn finish128(&self) -> u128 {
        (u128::from(splitmix(self.a ^ self.b.rotate_left(7))) << 64)
            | u128::from(splitmix(self.b ^ 0x2545_f491_4f6c_dd1d ^ self.a))
    }
}

impl Hasher for Hash128 {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.word(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        let mut w = [0u8; 8];
        w[..rest.len()].copy_from_slice(rest);
        self.word(u64::from_le_bytes(w) ^ ((rest.len() as u64) << 59));
    }

    fn write_u8(&mut self, i: u8) {
        self.word(u64::from(i) | 0x100);
    }

    fn write_u64(&mut self, i: u64) {
        self.word(i);
    }

    fn write_usize(&mut self, i: usize) {
        self.word(i as u64);
    }

    fn finish(&self) -> u64 {
        self.finish128() as u64
    }
}

/// The cache's hasher: its keys are already uniform 128-bit words, so it
/// folds them instead of hashing them again.
#[derive(Debug, Default, Clone, Copy)]
struct FoldHasher(u64);

impl Hasher for FoldHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u128(&mut self, i: u128) {
        self.0 ^= (i as u64) ^ ((i >> 64) as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// Shrinks a failing partition; returns (subset, the subset's in-flight ops).
fn minimize(
    prepared: &[Prepared],
    partition: &[usize],
    budget_steps: u64,
    per_check_steps: u64,
    spent: &mut u64,
) -> (Vec<usize>, Vec<usize>) {
    // Is `subset` (with `in_flight` counted unanswered) provably failing?
    // `None`: the budget ran out (not shown to fail).
    let mut fails = |subset: &[usize], in_flight: &[usize], spent: &mut u64| -> Option<bool> {
        let remaining = budget_steps.saturating_sub(*spent).min(per_check_steps);
        if remaining == 0 {
            return None;
        }
        let items: Vec<Item<'_>> = subset
            .iter()
            .map(|&i| Item::of(prepared, i, in_flight.contains(&i)))
            .collect();
        let (outcome, used, _) = search(&items, remaining);
        *spent += used;
        match outcome {
            Search::NotLinearizable => Some(true),
            Search::Linearizable => Some(false),
            Search::OutOfBudget => None,
        }
    };

    // 1. The shortest failing prefix, cut at the k-th return: ops that
    //    returned by then as recorded, ops invoked by then as in flight,
    //    except those whose recorded answer claims no write: they are
    //    dropped (as in step 2) rather than left to match anything, which
    //    would let the search wander through every order of them.
    let mut ends: Vec<u64> = partition.iter().map(|&i| prepared[i].end_ns).collect();
    ends.sort_unstable();
    let cut = |k: usize| -> (Vec<usize>, Vec<usize>) {
        let t = ends[k];
        let subset: Vec<usize> = partition
            .iter()
            .copied()
            .filter(|&i| prepared[i].invoke_ns <= t)
            .filter(|&i| prepared[i].end_ns <= t || !writes_nothing(&prepared[i]))
            .collect();
        let in_flight: Vec<usize> = subset
            .iter()
            .copied()
            .filter(|&i| prepared[i].end_ns > t)
            .collect();
        (subset, in_flight)
    };
    let (mut lo, mut hi) = (0usize, ends.len().saturating_sub(1));
    // Invariant: the cut at `hi` fails (the whole partition does).
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let (s, f) = cut(mid);
        match fails(&s, &f, spent) {
            Some(true) => hi = mid,
            Some(false) | None => lo = mid + 1,
        }
        if *spent >= budget_steps {
            break;
        }
    }
    let (mut subset, in_flight) = cut(hi);
    if hi == ends.len().saturating_sub(1) {
        // The full partition, as recorded (no op forced in flight).
        subset = partition.to_vec();
        return greedy(subset, vec![], prepared, &mut fails, spent, budget_steps);
    }
    greedy(subset, in_flight, prepared, &mut fails, spent, budget_steps)
}

type FailsFn<'a> = dyn FnMut(&[usize], &[usize], &mut u64) -> Option<bool> + 'a;

/// 2. Drops operations that claim no write while the rest still fails.
fn greedy(
    mut subset: Vec<usize>,
    in_flight: Vec<usize>,
    prepared: &[Prepared],
    fails: &mut FailsFn<'_>,
    spent: &mut u64,
    budget_steps: u64,
) -> (Vec<usize>, Vec<usize>) {
    // An op counted in flight may go too: in the whole history it has its
    // recorded answer, which claims no write.
    let mut in_flight = in_flight;
    let candidates: Vec<usize> = subset
        .iter()
        .rev()
        .copied()
        .filter(|&i| writes_nothing(&prepared[i]))
        .collect();
    // Drop chunks first (halving, as delta debugging does): most
    // candidates are irrelevant and go in a few checks; the last round
    // (chunks of one) is the plain greedy pass.
    let mut candidates = candidates;
    let mut chunk = candidates.len().div_ceil(2).max(1);
    'rounds: loop {
        let mut kept: Vec<usize> = Vec::with_capacity(candidates.len());
        for group in candidates.chunks(chunk) {
            let trial: Vec<usize> = subset
                .iter()
                .copied()
                .filter(|i| !group.contains(i))
                .collect();
            match fails(&trial, &in_flight, spent) {
                Some(true) => {
                    subset = trial;
                    in_flight.retain(|i| !group.contains(i));
                }
                Some(false) => kept.extend_from_slice(group),
                None if *spent >= budget_steps => break 'rounds,
                None => kept.extend_from_slice(group),
            }
        }
        candidates = kept;
        if chunk == 1 || candidates.is_empty() {
            break;
        }
        chunk = chunk.div_ceil(2);
    }
    (subset, in_flight)
}

/// A readable timeline: one line per op, ordered by invocation, times in
/// µs from the first invocation, and a bar showing the overlap.
pub fn render_timeline(history: &[Operation], indices: &[usize], in_flight: &[usize]) -> String {
    render_with(
        indices,
        in_flight,
        |i| TimelineOp {
            client: &history[i].client,
            invoke_ns: history[i].invoke_ns,
            return_ns: history[i].return_ns,
            answered: history[i].answer.is_some(),
        },
        |i| {
            (
                summarize_request(&history[i].request),
                history[i].answer.as_ref().map(summarize_answer),
            )
        },
    )
}

/// What a timeline reads of every operation it places.
struct TimelineOp<'h> {
    client: &'h str,
    invoke_ns: u64,
    return_ns: u64,
    answered: bool,
}

/// [`render_timeline`] over `meta` (every op placed) and `texts` (the
/// summaries of its request and answer, read for the lines shown only).
fn render_with<'h>(
    indices: &[usize],
    in_flight: &[usize],
    meta: impl Fn(usize) -> TimelineOp<'h>,
    texts: impl Fn(usize) -> (String, Option<String>),
) -> String {
    const BAR_COLS: usize = 24;
    const MAX_LINES: usize = 200;
    let mut idx: Vec<(usize, TimelineOp<'h>)> = indices.iter().map(|&i| (i, meta(i))).collect();
    idx.sort_by_key(|(i, o)| (o.invoke_ns, *i));
    let t0 = idx.iter().map(|(_, o)| o.invoke_ns).min().unwrap_or(0);
    let t1 = idx
        .iter()
        .map(|(_, o)| if o.answered { o.return_ns } else { o.invoke_ns })
        .max()
        .unwrap_or(t0)
        .max(t0 + 1);
    let span = (t1 - t0) as f64;
    let col = |t: u64| (((t.saturating_sub(t0)) as f64 / span) * (BAR_COLS - 1) as f64) as usize;
    let client_w = idx
        .iter()
        .map(|(_, o)| o.client.len())
        .max()
        .unwrap_or(0)
        .min(16);
    let mut out = String::new();
    for (line, (i, o)) in idx.iter().enumerate() {
        let i = *i;
        if line == MAX_LINES {
            let _ = writeln!(out, "  ... {} more", idx.len() - MAX_LINES);
            break;
        }
        let pending = !o.answered || in_flight.contains(&i);
        let a = col(o.invoke_ns);
        let b = if pending {
            BAR_COLS - 1
        } else {
            col(o.return_ns).max(a)
        };
        let mut bar = vec![' '; BAR_COLS];
        for c in bar.iter_mut().take(b + 1).skip(a) {
            *c = '-';
        }
        bar[a] = '|';
        bar[b] = if pending { '>' } else { '|' };
        let bar: String = bar.into_iter().collect();
        let us = |t: u64| t.saturating_sub(t0) as f64 / 1000.0;
        let when = if !o.answered {
            format!("{:>9.1} .. (no answer)", us(o.invoke_ns))
        } else {
            format!("{:>9.1} .. {:>9.1}", us(o.invoke_ns), us(o.return_ns))
        };
        let (request, answer) = texts(i);
        let answer = match answer {
            None => "(no answer)".to_owned(),
            Some(a) if in_flight.contains(&i) => format!("(counted in flight) {a}"),
            Some(a) => a,
        };
        let _ = writeln!(
            out,
            "  #{i:<4} {:<client_w$} [{bar}] {when} µs  {}  =>  {}",
            truncate(o.client, 16),
            truncate(&request, 90),
            truncate(&answer, 110),
        );
    }
    out
}

fn truncate(s: &str, max_chars: usize) -> String {
    if s.chars().count() <= max_chars {
        s.to_owned()
    } else {
        let mut t: String = s.chars().take(max_chars.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

fn s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "null".into(),
        other => other.to_string(),
    }
}

/// `commitRunStart r1 exp=null key=k1 input={"text":"a"}` and the like.
pub fn summarize_request(request: &Value) -> String {
    let op = request.get("op").and_then(Value::as_str).unwrap_or("?");
    let args = request.get("args").unwrap_or(&Value::Null);
    let field = |name: &str| args.get(name).map(s);
    match (op, StoreOp::from_wire(request).is_ok()) {
        ("commitRunStart", true) => {
            let sr = &args["startRun"];
            let mut out = format!(
                "commitRunStart {} exp={}",
                s(&sr["runId"]),
                sr.get("expectedCurrentRunId").map_or("null".into(), s)
            );
            if let Some(k) = sr.get("requestKey").filter(|k| !k.is_null()) {
                let _ = write!(out, " key={}", s(k));
            }
            let _ = write!(
                out,
                " input={}",
                sr.get("input").map_or("null".into(), |v| v.to_string())
            );
            out
        }
        ("getRun", true) => format!("getRun {}", field("runId").unwrap_or_default()),
        ("getRunByRequestKey", true) => {
            format!(
                "getRunByRequestKey {}",
                field("requestKey").unwrap_or_default()
            )
        }
        ("setRunStatus", true) => format!(
            "setRunStatus {} -> {}",
            field("runId").unwrap_or_default(),
            field("status").unwrap_or_default()
        ),
        (name, true) => name.to_owned(),
        (_, false) => format!("(malformed request) {request}"),
    }
}

fn summarize_run(r: &Value) -> String {
    if r.is_null() {
        return "null".into();
    }
    let mut out = format!(
        "{}#{} {}",
        s(&r["runId"]),
        r.get("startSequence").map_or("?".into(), s),
        r.get("status").map_or("?".into(), s)
    );
    if let Some(k) = r.get("requestKey") {
        let _ = write!(out, " key={}", s(k));
    }
    out
}

/// `ok started r1#1 running key=k1`, `error request_key_taken {existingRunId: r1}`...
pub fn summarize_answer(answer: &Value) -> String {
    if let Some(e) = answer.get("error") {
        let kind = e.get("kind").map_or("?".into(), s);
        return match e.get("cause") {
            Some(c) => format!(
                "error {} {}",
                s(c),
                e.get("details").map_or(String::new(), Value::to_string)
            ),
            None => format!("error {kind}"),
        };
    }
    let Some(ok) = answer.get("ok") else {
        return format!("(malformed answer) {answer}");
    };
    if let (Some(outcome), Some(run)) = (ok.get("outcome"), ok.get("run")) {
        return format!("ok {} {}", s(outcome), summarize_run(run));
    }
    if let Some(d) = ok.get("deleted") {
        return format!("ok deleted={}", s(d));
    }
    if let Some(items) = ok.as_array() {
        let parts: Vec<String> = items
            .iter()
            .map(|it| {
                if it.get("startSequence").is_some() {
                    summarize_run(it)
                } else {
                    format!(
                        "{}:{}",
                        it.get("runId").map_or("?".into(), s),
                        it.get("input").map_or("?".into(), |v| v.to_string())
                    )
                }
            })
            .collect();
        return format!("ok [{}]", parts.join(", "));
    }
    if ok.get("runId").is_some() || ok.is_null() {
        return format!("ok {}", summarize_run(ok));
    }
    format!("ok {ok}")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use proptest::prelude::*;
    use reqkey_model::seq::SeqStore;
    use serde_json::json;

    fn commit_req(session: &str, run: &str, expected: Option<&str>, key: Option<&str>) -> Value {
        let mut sr = json!({"sessionId": session, "runId": run, "expectedCurrentRunId": expected, "input": {"text": "a"}});
        if let Some(k) = key {
            sr["requestKey"] = json!(k);
            sr["requestDigest"] = json!("d1");
        }
        json!({"op": "commitRunStart", "args": {"startRun": sr}})
    }

    fn run(session: &str, run: &str, seq: u64, key: Option<&str>) -> Value {
        let mut r =
            json!({"sessionId": session, "runId": run, "status": "running", "startSequence": seq});
        if let Some(k) = key {
            r["requestKey"] = json!(k);
            r["requestDigest"] = json!("d1");
        }
        r
    }

    fn started(session: &str, r: &str, seq: u64, key: Option<&str>) -> Value {
        json!({"ok": {"outcome": "started", "run": run(session, r, seq, key)}})
    }

    fn taken(holder: &str) -> Value {
        json!({"error": {"kind": "run_start_rejected", "cause": "request_key_taken", "details": {"existingRunId": holder}}})
    }

    fn op(
        client: &str,
        request: Value,
        invoke_ns: u64,
        return_ns: u64,
        answer: Value,
    ) -> Operation {
        Operation {
            client: client.into(),
            request,
            invoke_ns,
            return_ns,
            answer: Some(answer),
        }
    }

    fn get_run(session: &str, r: &str) -> Value {
        json!({"op": "getRun", "args": {"sessionId": session, "runId": r}})
    }

    fn counterexample(report: CheckReport) -> Counterexample {
        match report.verdict {
            Verdict::NotLinearizable(c) => *c,
            other => panic!("expected a counterexample, got {other:?}"),
        }
    }

    #[test]
    fn a_race_with_one_winner_and_refusals_naming_it_is_linearizable() {
        let h = vec![
            op(
                "a",
                commit_req("s", "r1", None, Some("k")),
                0,
                100,
                started("s", "r1", 1, Some("k")),
            ),
            op(
                "b",
                commit_req("s", "r2", None, Some("k")),
                1,
                90,
                taken("r1"),
            ),
            op(
                "c",
                commit_req("s", "r3", None, Some("k")),
                2,
                95,
                taken("r1"),
            ),
        ];
        let report = check(&h);
        assert!(report.verdict.is_linearizable(), "{:?}", report.verdict);
        assert_eq!(report.partitions, 1);
    }

    #[test]
    fn two_started_answers_for_one_key_in_one_session_are_not_linearizable() {
        // Both expected the session empty: no order lets both start.
        let h = vec![
            op(
                "a",
                commit_req("s", "r1", None, Some("k")),
                0,
                100,
                started("s", "r1", 1, Some("k")),
            ),
            op(
                "b",
                commit_req("s", "r2", None, Some("k")),
                1,
                100,
                started("s", "r2", 1, Some("k")),
            ),
            op("c", get_run("s", "r1"), 0, 50, json!({"ok": null})),
        ];
        let c = counterexample(check(&h));
        assert_eq!(c.session.as_deref(), Some("s"));
        // The read is irrelevant to the failure and is dropped.
        assert_eq!(c.minimal, vec![0, 1]);
        assert!(
            c.to_string().contains("commitRunStart r2 exp=null key=k"),
            "{c}"
        );
    }

    #[test]
    fn a_read_that_sees_a_run_before_its_commit_was_invoked_is_not_linearizable() {
        let h = vec![
            op(
                "reader",
                get_run("s", "r1"),
                0,
                10,
                json!({"ok": run("s", "r1", 1, None)}),
            ),
            op(
                "writer",
                commit_req("s", "r1", None, None),
                20,
                30,
                started("s", "r1", 1, None),
            ),
        ];
        let c = counterexample(check(&h));
        // Cut before the commit was even invoked, the read fails alone.
        assert_eq!(c.minimal, vec![0]);
    }

    #[test]
    fn a_read_overlapping_the_commit_may_see_it() {
        let h = vec![
            op(
                "reader",
                get_run("s", "r1"),
                0,
                25,
                json!({"ok": run("s", "r1", 1, None)}),
            ),
            op(
                "writer",
                commit_req("s", "r1", None, None),
                20,
                30,
                started("s", "r1", 1, None),
            ),
        ];
        assert!(check(&h).verdict.is_linearizable());
    }

    #[test]
    fn a_refusal_naming_a_run_that_never_held_the_key_is_not_linearizable() {
        let h = vec![
            op(
                "a",
                commit_req("s", "r1", None, Some("k")),
                0,
                10,
                started("s", "r1", 1, Some("k")),
            ),
            op(
                "b",
                commit_req("s", "r2", None, Some("k")),
                20,
                30,
                taken("r9"),
            ),
        ];
        assert!(!check(&h).verdict.is_linearizable());
    }

    #[test]
    fn a_cas_refusal_instead_of_the_key_rule_is_caught_after_the_winner_returned() {
        // What a store with the holder read outside the commit answers.
        let cas = json!({"error": {"kind": "run_start_rejected", "cause": "cas_mismatch", "details": {"currentRunId": "r1"}}});
        let h = vec![
            op(
                "a",
                commit_req("s", "r1", None, Some("k")),
                0,
                10,
                started("s", "r1", 1, Some("k")),
            ),
            op("b", commit_req("s", "r2", None, Some("k")), 5, 30, cas),
        ];
        let c = counterexample(check(&h));
        assert_eq!(c.minimal, vec![0, 1]);
    }

    #[test]
    fn sessions_are_checked_independently() {
        // One key in two sessions, each started once: fine.
        let h = vec![
            op(
                "a",
                commit_req("s1", "r1", None, Some("k")),
                0,
                10,
                started("s1", "r1", 1, Some("k")),
            ),
            op(
                "b",
                commit_req("s2", "r2", None, Some("k")),
                0,
                10,
                started("s2", "r2", 1, Some("k")),
            ),
        ];
        let report = check(&h);
        assert!(report.verdict.is_linearizable());
        assert_eq!(report.partitions, 2);
    }

    #[test]
    fn the_verdict_and_the_session_reported_do_not_depend_on_the_threads() {
        // Twelve sessions; sessions 3 and 8 each have two started answers
        // for one key. Whatever the threads, the report names s03, the
        // first failing session in order, as the sequential check does.
        let mut h = Vec::new();
        for j in 0..12u64 {
            let s = format!("s{j:02}");
            h.push(op(
                "a",
                commit_req(&s, "r1", None, Some("k")),
                j,
                100 + j,
                started(&s, "r1", 1, Some("k")),
            ));
            let second = if j == 3 || j == 8 {
                started(&s, "r2", 1, Some("k"))
            } else {
                taken("r1")
            };
            h.push(op(
                "b",
                commit_req(&s, "r2", None, Some("k")),
                j + 1,
                100 + j,
                second,
            ));
        }
        let parsed = PreparedHistory::new(&h);
        assert_eq!(parsed.len(), 24);
        for threads in [1, 2, 4, 16] {
            let opts = CheckOptions {
                threads,
                ..CheckOptions::default()
            };
            let report = check_prepared(&parsed, opts);
            assert_eq!(report.partitions, 12);
            assert_eq!(report.threads, threads.min(12));
            let c = counterexample(report);
            assert_eq!(c.session.as_deref(), Some("s03"), "{threads} threads");
            assert_eq!(c.minimal, vec![6, 7]);
        }
        // Without the failures every partition is checked, on every thread.
        let fine: Vec<Operation> = h
            .iter()
            .filter(|o| {
                o.answer.as_ref().is_some_and(|a| a.get("error").is_some()) || o.client == "a"
            })
            .cloned()
            .collect();
        for threads in [1, 3] {
            let report = check_prepared(
                &PreparedHistory::new(&fine),
                CheckOptions {
                    threads,
                    ..CheckOptions::default()
                },
            );
            assert!(report.verdict.is_linearizable(), "{:?}", report.verdict);
            assert_eq!(report.partitions, 12);
            assert!(report.steps >= 12);
        }
    }

    #[test]
    fn a_malformed_request_must_be_answered_invalid_argument() {
        let bad = json!({"op": "getRun", "args": {"sessionId": "s"}});
        let ok = vec![op(
            "a",
            bad.clone(),
            0,
            1,
            json!({"error": {"kind": "invalid_argument", "message": "x"}}),
        )];
        assert!(check(&ok).verdict.is_linearizable());
        let wrong = vec![op("a", bad, 0, 1, json!({"ok": null}))];
        assert!(!check(&wrong).verdict.is_linearizable());
    }

    #[test]
    fn a_malformed_answer_is_not_linearizable() {
        for answer in [
            json!({"ok": null, "error": null}),
            json!("ok"),
            json!({"error": {"kind": "nope"}}),
            json!({"ok": {"outcome": "started"}}),
        ] {
            let h = vec![op(
                "a",
                commit_req("s", "r1", None, None),
                0,
                1,
                answer.clone(),
            )];
            let c = counterexample(check(&h));
            assert!(
                c.reason.starts_with("malformed answer"),
                "{answer}: {}",
                c.reason
            );
        }
    }

    #[test]
    fn error_messages_do_not_matter_but_kinds_do() {
        let set = |status: &str| json!({"op": "setRunStatus", "args": {"sessionId": "s", "runId": "r1", "status": status}});
        let h = vec![op(
            "a",
            set("completed"),
            0,
            1,
            json!({"error": {"kind": "not_found", "message": "whatever"}}),
        )];
        assert!(check(&h).verdict.is_linearizable());
        let h = vec![op(
            "a",
            set("completed"),
            0,
            1,
            json!({"error": {"kind": "invalid_transition", "message": "x"}}),
        )];
        assert!(!check(&h).verdict.is_linearizable());
    }

    #[test]
    fn an_unanswered_commit_may_or_may_not_have_happened() {
        let mut pending = op(
            "a",
            commit_req("s", "r1", None, Some("k")),
            0,
            0,
            json!(null),
        );
        pending.answer = None;
        let saw = op(
            "b",
            get_run("s", "r1"),
            10,
            20,
            json!({"ok": run("s", "r1", 1, Some("k"))}),
        );
        let missed = op("c", get_run("s", "r1"), 30, 40, json!({"ok": null}));
        assert!(check(&[pending.clone(), saw.clone()])
            .verdict
            .is_linearizable());
        assert!(check(&[pending.clone(), missed.clone()])
            .verdict
            .is_linearizable());
        // But not both, in that order: a run once seen does not vanish.
        assert!(!check(&[pending, saw, missed]).verdict.is_linearizable());
    }

    #[test]
    fn an_exhausted_budget_is_unknown_not_a_verdict() {
        let h: Vec<Operation> = (0..12)
            .map(|i| {
                op(
                    &format!("c{i}"),
                    commit_req("s", &format!("r{i}"), None, None),
                    0,
                    100,
                    started("s", &format!("r{i}"), 1, None),
                )
            })
            .collect();
        let report = check_with(
            &h,
            CheckOptions {
                budget_steps: 5,
                minimize: true,
                ..CheckOptions::default()
            },
        );
        assert!(
            matches!(report.verdict, Verdict::Unknown { .. }),
            "{:?}",
            report.verdict
        );
        assert!(report.steps <= 5);
    }

    #[test]
    fn the_minimal_subset_cuts_the_history_after_the_failure() {
        // A long linearizable tail after the failure is cut away.
        let mut h = vec![
            op(
                "a",
                commit_req("s", "r1", None, Some("k")),
                0,
                10,
                started("s", "r1", 1, Some("k")),
            ),
            op(
                "b",
                commit_req("s", "r2", None, Some("k")),
                5,
                20,
                started("s", "r2", 1, Some("k")),
            ),
        ];
        for i in 0..20u64 {
            h.push(op(
                "c",
                get_run("s", "r1"),
                100 + 10 * i,
                105 + 10 * i,
                json!({"ok": run("s", "r1", 1, Some("k"))}),
            ));
        }
        let c = counterexample(check(&h));
        assert_eq!(c.minimal, vec![0, 1]);
        assert_eq!(c.partition.len(), 22);
    }

    #[test]
    fn refusals_still_in_flight_at_the_cut_are_dropped_from_the_minimal_subset() {
        // The racy store: the winner returns first, one refusal returns,
        // the other refusals (all the wrong cause) are still in flight.
        let cas = json!({"error": {"kind": "run_start_rejected", "cause": "cas_mismatch", "details": {"currentRunId": "r1"}}});
        let mut h = vec![
            op(
                "w",
                commit_req("s", "r1", None, Some("k")),
                3,
                100,
                started("s", "r1", 1, Some("k")),
            ),
            op(
                "a",
                commit_req("s", "r2", None, Some("k")),
                0,
                110,
                cas.clone(),
            ),
        ];
        for i in 0..6u64 {
            h.push(op(
                "b",
                commit_req("s", &format!("r{}", i + 3), None, Some("k")),
                1 + i,
                150 + i,
                cas.clone(),
            ));
        }
        let c = counterexample(check(&h));
        assert_eq!(c.minimal, vec![0, 1]);
        assert!(c.minimal_in_flight.is_empty());
    }

    #[test]
    fn shrinking_a_wide_race_stays_cheap() {
        // 1 winner and 31 refusals with the wrong cause, all overlapping:
        // in-flight refusals must not be left to match anything, or the
        // search would try every order of them.
        let cas = json!({"error": {"kind": "run_start_rejected", "cause": "cas_mismatch", "details": {"currentRunId": "r0"}}});
        let mut h = vec![op(
            "w",
            commit_req("s", "r0", None, Some("k")),
            5,
            100,
            started("s", "r0", 1, Some("k")),
        )];
        for i in 1..32u64 {
            h.push(op(
                "c",
                commit_req("s", &format!("r{i}"), None, Some("k")),
                i,
                200 + i,
                cas.clone(),
            ));
        }
        let c = counterexample(check(&h));
        assert_eq!(c.minimal.len(), 2, "{c}");
        assert!(c.minimize_steps < 5_000, "{} steps", c.minimize_steps);
    }

    #[test]
    fn the_timeline_shows_client_interval_request_and_answer() {
        let h = vec![op(
            "c.0",
            commit_req("s", "r1", None, Some("k")),
            1_000,
            5_000,
            started("s", "r1", 1, Some("k")),
        )];
        let t = render_timeline(&h, &[0], &[]);
        assert!(t.contains("c.0"), "{t}");
        assert!(t.contains("0.0 ..       4.0 µs"), "{t}");
        assert!(t.contains("commitRunStart r1 exp=null key=k"), "{t}");
        assert!(t.contains("ok started r1#1 running key=k"), "{t}");
    }

    // The partitioning claim: ops on different sessions commute, from any
    // reachable state, with the same answers, for every kind of op.
    fn arb_op(session: &'static str) -> impl Strategy<Value = StoreOp> {
        let runs = prop::sample::select(vec!["r1", "r2", "r3"]);
        let keys = prop::option::of(prop::sample::select(vec!["k1", "k2"]));
        let expected = prop::option::of(prop::sample::select(vec!["r1", "r2", "r3"]));
        let status =
            prop::sample::select(vec!["running", "suspended_input", "completed", "failed"]);
        (0..8u8, runs, keys, expected, status).prop_map(move |(kind, r, k, e, st)| {
            let req = match kind {
                0 => commit_req(session, r, e, k),
                1 => get_run(session, r),
                2 => json!({"op": "getCurrentRun", "args": {"sessionId": session}}),
                3 => json!({"op": "listRuns", "args": {"sessionId": session}}),
                4 => json!({"op": "getRunByRequestKey", "args": {"sessionId": session, "requestKey": k.unwrap_or("k1")}}),
                5 => json!({"op": "listInputs", "args": {"sessionId": session}}),
                6 => json!({"op": "setRunStatus", "args": {"sessionId": session, "runId": r, "status": st}}),
                _ => json!({"op": "deleteSession", "args": {"sessionId": session}}),
            };
            StoreOp::from_wire(&req).unwrap()
        })
    }

    fn fingerprint_from_scratch(state: &SessionState) -> u128 {
        (0..state.run_count()).fold(0u128, |fp, i| fp.wrapping_add(entry_term(state, i)))
    }

    proptest! {
        // The search's evaluation of an op on one session (in place, with
        // undo and an incremental fingerprint) is SeqStore's: the spec's
        // own answer matches, the state after is SeqStore's, a wrong
        // answer does not match and leaves the state as it was, undo
        // restores it, and the fingerprint is the one computed afresh.
        #[test]
        fn the_session_evaluation_agrees_with_seq_store(
            ops in prop::collection::vec(arb_op("s1"), 1..40),
        ) {
            let mut seq = SeqStore::new();
            let mut state = SessionState::default();
            let mut fp = 0u128;
            for (n, o) in ops.iter().enumerate() {
                let request = serde_json::to_value(o).unwrap();
                let spec = seq.apply(o);
                let history = [Operation {
                    client: "c".into(),
                    request: request.clone(),
                    invoke_ns: 0,
                    return_ns: 1,
                    answer: Some(reqkey_model::seq::answer_to_wire(&spec)),
                }];
                let prepared: Vec<Prepared> = history.iter().map(prepare).collect();
                let item = Item::of(&prepared, 0, false);
                // A wrong answer: another op's kind of reply or error.
                let wrong_answer = match &spec {
                    Ok(_) => json!({"error": {"kind": "not_found", "message": "x"}}),
                    Err(_) => json!({"ok": {"deleted": true, "extra": n}}),
                };
                let wrong_history = [Operation { answer: Some(wrong_answer), ..history[0].clone() }];
                let wrong_prepared: Vec<Prepared> = wrong_history.iter().map(prepare).collect();
                let wrong = Item::of(&wrong_prepared, 0, false);
                let (before, fp_before) = (state.clone(), fp);
                prop_assert!(evaluate(&mut state, &mut fp, &wrong).is_none(), "{request}");
                prop_assert!(state == before && fp == fp_before);
                let undo_it = evaluate(&mut state, &mut fp, &item);
                prop_assert!(undo_it.is_some(), "{request} answered {spec:?}");
                let expected = seq.session("s1").cloned().unwrap_or_default();
                prop_assert!(state == expected, "{request}");
                prop_assert_eq!(fp, fingerprint_from_scratch(&state));
                let after = state.clone();
                undo(&mut state, undo_it.unwrap());
                prop_assert!(state == before, "undo of {request}");
                state = after;
            }
        }

        #[test]
        fn operations_on_different_sessions_commute(
            prefix in prop::collection::vec(prop_oneof![arb_op("s1"), arb_op("s2")], 0..12),
            a in arb_op("s1"),
            b in arb_op("s2"),
        ) {
            let mut base = SeqStore::new();
            for o in &prefix {
                let _ = base.apply(o);
            }
            let (mut ab, mut ba) = (base.clone(), base.clone());
            let ab_a = ab.apply(&a);
            let ab_b = ab.apply(&b);
            let ba_b = ba.apply(&b);
            let ba_a = ba.apply(&a);
            prop_assert_eq!(ab_a, ba_a);
            prop_assert_eq!(ab_b, ba_b);
            prop_assert_eq!(ab, ba);
        }
    }
}
