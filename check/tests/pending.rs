//! Unanswered operations in the linearizability check: linearized where needed, cheap by the hundred thousand.

use reqkey_check::lin::{check_with, CheckOptions, Operation, Verdict};
use serde_json::{json, Value};

fn commit(run: &str, key: Option<&str>) -> Value {
    let mut sr = json!({"sessionId": "s", "runId": run, "expectedCurrentRunId": null, "input": {"text": "a"}});
    if let Some(k) = key {
        sr["requestKey"] = json!(k);
        sr["requestDigest"] = json!("d1");
    }
    json!({"op": "commitRunStart", "args": {"startRun": sr}})
}

fn run(run: &str, seq: u64, key: Option<&str>) -> Value {
    let mut r = json!({"sessionId": "s", "runId": run, "status": "running", "startSequence": seq});
    if let Some(k) = key {
        r["requestKey"] = json!(k);
        r["requestDigest"] = json!("d1");
    }
    r
}

fn op(
    client: &str,
    request: Value,
    invoke_ns: u64,
    return_ns: u64,
    answer: Option<Value>,
) -> Operation {
    Operation {
        client: client.into(),
        request,
        invoke_ns,
        return_ns,
        answer,
    }
}

fn sequential() -> CheckOptions {
    CheckOptions {
        threads: 1,
        minimize: false,
        ..CheckOptions::default()
    }
}

/// 2,000 unanswered commits, then a read that sees one of them: only
/// linearizing that one (and before the read) explains it.
#[test]
fn an_unanswered_write_is_linearized_where_a_later_read_needs_it() {
    let mut h: Vec<Operation> = (0..2_000u64)
        .map(|i| op("w", commit(&format!("r{i}"), None), i, i, None))
        .collect();
    let read = json!({"op": "getRun", "args": {"sessionId": "s", "runId": "r1500"}});
    h.push(op(
        "c",
        read.clone(),
        5_000,
        5_010,
        Some(json!({"ok": run("r1500", 1, None)})),
    ));
    let report = check_with(&h, sequential());
    assert!(report.verdict.is_linearizable(), "{:?}", report.verdict);
    assert!(report.steps < 20_000, "{} steps", report.steps);

    // The same read before the commit was called cannot see it.
    let early = op("c", read, 0, 1, Some(json!({"ok": run("r1500", 1, None)})));
    let mut h2 = vec![early];
    h2.extend(h.into_iter().take(2_000).map(|mut o| {
        o.invoke_ns += 10;
        o
    }));
    let report = check_with(&h2, sequential());
    assert!(!report.verdict.is_linearizable(), "{:?}", report.verdict);
}

/// 300 unanswered commits of one key: none of them is the run a later
/// read of the key shows, so no choice of them helps; decided, not given
/// up on, in a few steps per commit each way.
#[test]
fn no_unanswered_write_can_help_and_the_search_says_so_quickly() {
    let mut h: Vec<Operation> = (0..300u64)
        .map(|i| op("w", commit(&format!("r{i}"), Some("k")), i, i, None))
        .collect();
    let by_key = json!({"op": "getRunByRequestKey", "args": {"sessionId": "s", "requestKey": "k"}});
    h.push(op(
        "c",
        by_key.clone(),
        1_000,
        1_010,
        Some(json!({"ok": run("elsewhere", 1, Some("k"))})),
    ));
    let report = check_with(&h, sequential());
    assert!(
        matches!(report.verdict, Verdict::NotLinearizable(_)),
        "{:?}",
        report.verdict
    );
    assert!(report.steps < 200_000, "{} steps", report.steps);

    // One of them shown: linearizable, the others refused after it.
    h.pop();
    h.push(op(
        "c",
        by_key,
        1_000,
        1_010,
        Some(json!({"ok": run("r299", 1, Some("k"))})),
    ));
    let report = check_with(&h, sequential());
    assert!(report.verdict.is_linearizable(), "{:?}", report.verdict);
}

/// 200,000 unanswered reads around a failing pair and a passing pair:
/// they change nothing, so they cost next to nothing.
#[test]
fn two_hundred_thousand_unanswered_reads_cost_next_to_nothing() {
    let current = json!({"op": "getCurrentRun", "args": {"sessionId": "s"}});
    let mut h: Vec<Operation> = (0..200_000u64)
        .map(|i| op(&format!("p{}", i % 64), current.clone(), i, i, None))
        .collect();
    h.push(op(
        "a",
        commit("r1", None),
        10,
        20,
        Some(json!({"ok": {"outcome": "started", "run": run("r1", 1, None)}})),
    ));
    let seen = json!({"op": "getRun", "args": {"sessionId": "s", "runId": "r1"}});
    h.push(op(
        "b",
        seen.clone(),
        30,
        40,
        Some(json!({"ok": run("r1", 1, None)})),
    ));
    let report = check_with(&h, sequential());
    assert!(report.verdict.is_linearizable(), "{:?}", report.verdict);
    assert!(report.steps < 100, "{} steps", report.steps);

    // A run once seen does not vanish, whatever is unanswered around it.
    h.push(op("b", seen, 50, 60, Some(json!({"ok": null}))));
    let report = check_with(&h, sequential());
    assert!(!report.verdict.is_linearizable(), "{:?}", report.verdict);
    assert!(report.steps < 100, "{} steps", report.steps);
}

/// Equal unanswered writes are one class: 50,000 copies of one commit
/// are tried as one, and what they may do is still found.
#[test]
fn equal_unanswered_writes_are_tried_as_one() {
    let mut h: Vec<Operation> = (0..50_000u64)
        .map(|i| op("w", commit("r1", None), i, i, None))
        .collect();
    let list = json!({"op": "listRuns", "args": {"sessionId": "s"}});
    h.push(op(
        "c",
        list.clone(),
        60_000,
        60_010,
        Some(json!({"ok": [run("r1", 1, None)]})),
    ));
    let report = check_with(&h, sequential());
    assert!(report.verdict.is_linearizable(), "{:?}", report.verdict);
    assert!(report.steps < 1_000, "{} steps", report.steps);
    // Two runs cannot come of one run id.
    h.pop();
    h.push(op(
        "c",
        list,
        60_000,
        60_010,
        Some(json!({"ok": [run("r1", 1, None), run("r2", 2, None)]})),
    ));
    let report = check_with(&h, sequential());
    assert!(!report.verdict.is_linearizable(), "{:?}", report.verdict);
}

/// Whatever the history, the budget bounds the search: a hard one (many
/// overlapping unanswered writes no read can be explained by) ends as
/// "unknown" within the budget, its cache no larger than the budget.
#[test]
fn the_budget_bounds_steps_and_cache() {
    let mut h: Vec<Operation> = (0..2_000u64)
        .map(|i| op("w", commit(&format!("r{i}"), None), i, i, None))
        .collect();
    let current = json!({"op": "getCurrentRun", "args": {"sessionId": "s"}});
    h.push(op(
        "c",
        current,
        5_000,
        5_010,
        Some(json!({"ok": run("nowhere", 3, None)})),
    ));
    let opts = CheckOptions {
        budget_steps: 50_000,
        ..sequential()
    };
    let report = check_with(&h, opts);
    let Verdict::Unknown { reason } = &report.verdict else {
        panic!("{:?}", report.verdict);
    };
    // The message names what makes it hard and what would help.
    assert!(
        reason.contains(
            "2001 operations, up to 2000 writes in flight at once, 2000 writes unanswered"
        ),
        "{reason}"
    );
    assert!(reason.contains("fewer of them per session"), "{reason}");
    assert!(report.steps <= 50_000, "{} steps", report.steps);
    assert!(
        report.largest_cache <= 50_000,
        "{} cached",
        report.largest_cache
    );
}
