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
//! - **Streamed by session** (issue 39): a file of any size is read by
//!   [`crate::stream::read_partitioned`] into a [`PartitionedHistory`]:
//!   the typed operations only, grouped by session as they are read;
//!   [`check_partitioned`] lets each session go once it is decided and
//!   asks the caller for the operations a report shows (read again from
//!   the file).
//! - **Unanswered operations as a class** (`lin/pending.rs`): an unanswered
//!   read is left out, unanswered writes wait in a pool tried only where
//!   the answered operations cannot go on, equal ones as one; 200,000
//!   unanswered reads are no longer 200,000 entries every step walks.
//! - **Search with memoization** (Wing & Gong, with Lowe's cache, the way
//!   Porcupine does it): walk the calls and returns in time order; at a call,
//!   try to linearize the operation now (apply it to the spec; its answer
//!   must match); at a return whose call was not linearized yet, backtrack.
//!   The cache of (linearized set, spec state) — kept as a 128-bit
//!   fingerprint, 16 bytes an entry — prunes every configuration
//!   already explored, which keeps ordinary histories linear in practice.
//! - **Bounded.** Every step counts against `budget_steps` (every
//!   configuration, every pool position looked at, every 32 entries a
//!   scan walks), so the budget bounds the time; the cache holds at most
//!   the budget's and 2^24 configurations. An exhausted budget is the
//!   verdict [`Verdict::Unknown`], never a hang, with a reason that names
//!   the overlapping writes that made the session hard.
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
use std::collections::BTreeMap;

#[cfg(doc)]
use reqkey_model::seq::SeqStore;
use serde_json::Value;

mod each;
mod explain;
mod item;
mod minimize;
mod partitioned;
mod pending;
mod prepare;
mod search;
mod timeline;
mod types;

use each::{lone_failure, search_partitions};
use explain::{atomicity_clauses, explain};
pub use explain::{clause_list, Anomaly, MAX_EXPLAIN_STEPS};
use minimize::minimize;
pub use partitioned::{check_partitioned, Fetch, PartitionedHistory, PartitionedHistoryBuilder};
pub use prepare::answer_conforms;
use prepare::{prepare, Prepared};
use search::Search;
pub use search::MEMORY_CHECK_STEPS;
pub use timeline::{listed, render_timeline, summarize_answer, summarize_request};
use timeline::{render_with, Line, Span};
use types::MIN_CHECK_STEPS;
pub use types::{
    CheckOptions, CheckReport, Counterexample, Operation, Verdict, DEFAULT_BUDGET_STEPS,
    MAX_THREADS,
};

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
                |i| Span {
                    invoke_ns: h[i].invoke_ns,
                    return_ns: h[i].return_ns,
                    answered: h[i].answer.is_some(),
                },
                |i| {
                    let o = h[i].to_operation();
                    Some(Line {
                        client: o.client,
                        request: summarize_request(&o.request),
                        answer: o.answer.as_ref().map(summarize_answer),
                    })
                },
            ),
        }
    }

    /// The anomaly of `minimal` (shrunk, `in_flight` counted unanswered),
    /// its operation's text read back for the summaries.
    fn anomaly(
        &self,
        minimal: &[usize],
        in_flight: &[usize],
        over_memory: Option<fn() -> bool>,
    ) -> Option<Anomaly> {
        let dead = explain(&self.prepared, minimal, in_flight, over_memory)?;
        let o = self.operation(dead.at)?;
        let (request, answer) = summaries(&o);
        Some(dead.anomaly(|i| i, &request, &answer))
    }
}

/// An operation's request and answer as an anomaly quotes them.
fn summaries(o: &Operation) -> (String, String) {
    (
        summarize_request(&o.request),
        o.answer
            .as_ref()
            .map_or_else(|| "(no answer)".to_owned(), summarize_answer),
    )
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
        if let Some(reason) = lone_failure(p) {
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
                    anomaly: None,
                    atomicity: atomicity_clauses(prepared, &[i]),
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
    if matches!(outcome.search, Search::OutOfBudget | Search::OverMemory) {
        let reason = if matches!(outcome.search, Search::OverMemory) {
            pending::over_memory_reason(session)
        } else {
            pending::out_of_budget_reason(prepared, session, indices, opts.budget_steps)
        };
        return CheckReport {
            verdict: Verdict::Unknown { reason },
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
        minimize(prepared, indices, &opts, per_check, &mut minimize_steps)
    } else {
        (indices.clone(), vec![])
    };
    let anomaly = if opts.minimize {
        parsed.anomaly(&minimal, &in_flight, opts.over_memory)
    } else {
        None
    };
    CheckReport {
        verdict: Verdict::NotLinearizable(Box::new(Counterexample {
            session: Some((*session).to_owned()),
            anomaly,
            atomicity: atomicity_clauses(prepared, &minimal),
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::item::Item;
    use super::search::{entry_term, evaluate, undo};
    use super::*;
    use proptest::prelude::*;
    use reqkey_model::seq::SeqStore;
    use reqkey_model::seq::{SessionState, StoreOp};
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
