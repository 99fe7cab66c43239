//! Histories in and out: `reqkey check history FILE` judges a history from
//! a file (reqkey's JSON form or Jepsen's events), and `--export-histories
//! DIR` on `run` writes the histories a run judged, which the command then
//! judges the same way the run did.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{reqkey, text};
use std::path::{Path, PathBuf};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("reqkey-histories-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn commit(run: &str) -> String {
    format!(
        r#""op":"commitRunStart","args":{{"startRun":{{"sessionId":"s","runId":"{run}","input":{{"text":"a"}},"requestKey":"k","requestDigest":"d"}}}}"#
    )
}

fn started(run: &str) -> String {
    format!(
        r#"{{"ok":{{"outcome":"started","run":{{"sessionId":"s","runId":"{run}","status":"running","startSequence":1,"requestKey":"k","requestDigest":"d"}}}}}}"#
    )
}

/// Two commits of one key racing: the second answer given.
fn race(second: &str) -> String {
    format!(
        "[\n{{\"process\":\"a\",\"call_ns\":0,\"return_ns\":10,{},\"answer\":{}}},\n{{\"process\":\"b\",\"call_ns\":5,\"return_ns\":20,{},\"answer\":{second}}}\n]\n",
        commit("r1"),
        started("r1"),
        commit("r2"),
    )
}

fn check(file: &Path, extra: &[&str]) -> (Option<i32>, String) {
    let mut args = vec!["check", "history", file.to_str().unwrap()];
    args.extend_from_slice(extra);
    let o = reqkey(&args);
    (o.status.code(), text(&o))
}

#[test]
fn check_history_exits_0_1_and_2() {
    let dir = scratch("verdicts");
    let good = dir.join("good.json");
    let taken = r#"{"error":{"kind":"run_start_rejected","cause":"request_key_taken","message":"m","details":{"existingRunId":"r1"}}}"#;
    std::fs::write(&good, race(taken)).unwrap();
    let (code, out) = check(&good, &[]);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("linearizable (2 operations, 1 sessions"),
        "{out}"
    );
    // A search cut short by its budget is no verdict, not a pass.
    let (code, out) = check(&good, &["--budget-steps", "1"]);
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains("no verdict: gave up after 1 search steps"),
        "{out}"
    );

    // Two winners of one key: not linearizable, the subset and clause named.
    let bad = dir.join("bad.json");
    std::fs::write(&bad, race(&started("r2"))).unwrap();
    let (code, out) = check(&bad, &[]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("NOT linearizable"), "{out}");
    // The rule broken is the key holder's (issue 38: it was named
    // `store.commit.atomic`), explained by the first impossible answer.
    assert!(
        out.contains("breaks [[store.commit.key-holder]] (the key holder rule"),
        "{out}"
    );
    assert!(!out.contains("[[store.commit.atomic]]"), "{out}");
    assert!(
        out.contains("the first answer no order can give: #1 ")
            && out.contains("placed after #0")
            && out.contains("request_key_taken"),
        "{out}"
    );
    assert!(out.contains("operations #0, #1 of the file"), "{out}");
    assert!(out.contains("smallest non-linearizable subset"), "{out}");

    // The same histories in Jepsen's form, converted by the command: the
    // same verdicts, told apart by the first byte or by --format.
    for (file, want) in [(&good, 0), (&bad, 1)] {
        let o = reqkey(&[
            "check",
            "history",
            file.to_str().unwrap(),
            "--convert-to",
            "jepsen",
        ]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        let events = String::from_utf8(o.stdout).unwrap();
        assert_eq!(events.lines().count(), 4, "{events}");
        assert!(events.starts_with(r#"{"process":"a","type":"invoke","f":"commitRunStart""#));
        let jepsen = file.with_extension("jsonl");
        std::fs::write(&jepsen, &events).unwrap();
        assert_eq!(check(&jepsen, &[]).0, Some(want));
        assert_eq!(check(&jepsen, &["--format", "jepsen"]).0, Some(want));
        // Read as the other form, it is bad input, not a verdict.
        assert_eq!(check(&jepsen, &["--format", "json"]).0, Some(2));
    }
}

#[test]
fn bad_input_is_exit_2_at_file_line_col() {
    let dir = scratch("bad-input");
    let cases: &[(&str, &str, &str)] = &[
        ("syntax.json", "[\n{\"process\":\"a\",,}\n]", ":2:16: key must be a string"),
        (
            "field.json",
            "[\n  {\"process\":\"a\",\"call_ns\":1,\"op\":\"getRun\",\"anwser\":null}\n]",
            ":2:",
        ),
        (
            "order.json",
            "[\n  {\"process\":\"a\",\"call_ns\":9,\"return_ns\":1,\"op\":\"getRun\",\"answer\":null}\n]",
            ":2:3: operation 0: return_ns 1 is before call_ns 9",
        ),
        (
            "pairs.jsonl",
            "{\"process\":0,\"type\":\"invoke\",\"f\":\"getRun\"}\n{\"process\":1,\"type\":\"ok\",\"f\":\"getRun\"}\n",
            ":2:1: process 1 completes an operation it never invoked",
        ),
        ("empty.json", "[]", ":1:1: the history has no operations"),
        ("edn.edn", "{:process 0, :type :invoke}", ":1:1: this is EDN"),
    ];
    for (name, body, says) in cases {
        let file = dir.join(name);
        std::fs::write(&file, body).unwrap();
        let (code, out) = check(&file, &[]);
        assert_eq!(code, Some(2), "{name}: {out}");
        assert!(
            out.contains(&format!("{}{says}", file.display())),
            "{name}: {out}"
        );
        assert!(!out.contains("panicked"), "{name}: {out}");
    }
    let (code, out) = check(&dir.join("missing.json"), &[]);
    assert_eq!(code, Some(2), "{out}");
}

/// Runs the race scenarios on `target` with `--export-histories`; the
/// run's exit code, its results and the directory.
fn run_exporting(target: &str, name: &str) -> (Option<i32>, serde_json::Value, PathBuf) {
    let dir = scratch(name);
    let histories = dir.join("histories");
    let results = dir.join("results.json");
    let o = reqkey(&[
        "run",
        "--target",
        target,
        "--tag",
        "race",
        "--seed",
        "7",
        "--json",
        results.to_str().unwrap(),
        "--export-histories",
        histories.to_str().unwrap(),
    ]);
    assert!(text(&o).contains("histories to"), "{}", text(&o));
    let results = serde_json::from_str(&std::fs::read_to_string(results).unwrap()).unwrap();
    (o.status.code(), results, histories)
}

/// Every exported file with `reqkey check history`'s exit code.
fn judge_all(dir: &Path) -> Vec<(String, Option<i32>)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
        .iter()
        .map(|f| {
            let (code, out) = check(f, &[]);
            assert!(matches!(code, Some(0 | 1)), "{}: {out}", f.display());
            (f.file_name().unwrap().to_string_lossy().into_owned(), code)
        })
        .collect()
}

#[test]
fn histories_exported_by_a_passing_run_are_linearizable() {
    let (code, results, dir) = run_exporting("memory", "memory");
    assert_eq!(code, Some(0), "{results}");
    let judged = judge_all(&dir);
    // Every race scenario and the mixed stage left its trials' histories.
    for s in results["scenarios"].as_array().unwrap() {
        let id = s["id"].as_str().unwrap();
        let n = judged
            .iter()
            .filter(|(f, _)| f.starts_with(&format!("{id}.trial-")))
            .count();
        let trials = s["trials_run"].as_u64().unwrap() as usize;
        assert_eq!(n, trials.min(19), "{id}: {n} files of {trials} trials");
    }
    assert!(judged
        .iter()
        .any(|(f, _)| f == "store.mixed-histories.trial-1.json"));
    for (file, code) in &judged {
        assert_eq!(*code, Some(0), "{file}");
    }
}

#[test]
fn histories_exported_by_a_failing_run_get_the_runs_verdict() {
    let (code, results, dir) = run_exporting("broken-memory:holder-read-outside-commit", "racy");
    assert_eq!(code, Some(1), "{results}");
    let judged = judge_all(&dir);
    let mut failing = 0;
    for s in results["scenarios"].as_array().unwrap() {
        let id = s["id"].as_str().unwrap();
        let lin_failure = s["verdict"] == "fail"
            && (s["failure"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("not linearizable")));
        for (file, code) in judged
            .iter()
            .filter(|(f, _)| f.starts_with(&format!("{id}.trial-")))
        {
            let failing_trial = s["failure"]["trial"]
                .as_u64()
                .is_some_and(|t| file == &format!("{id}.trial-{t}.json"));
            if lin_failure && failing_trial {
                failing += 1;
                assert_eq!(*code, Some(1), "{file}: the run judged it not linearizable");
            } else if s["verdict"] == "pass" || !failing_trial {
                assert_eq!(*code, Some(0), "{file}: the run judged it linearizable");
            }
        }
    }
    assert!(
        failing >= 1,
        "no history the run judged not linearizable: {judged:?}"
    );
}

#[test]
fn certify_exports_store_histories_and_no_agent_exchanges() {
    let dir = scratch("certify");
    let histories = dir.join("h");
    let o = reqkey(&[
        "certify",
        "--target",
        "memory",
        "--seed",
        "3",
        "--out",
        dir.join("cert").to_str().unwrap(),
        "--export-histories",
        histories.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let judged = judge_all(&histories);
    assert!(
        judged
            .iter()
            .any(|(f, _)| f == "store.mixed-histories.trial-1.json"),
        "{judged:?}"
    );
    assert!(judged.len() >= 10, "{judged:?}");
    assert!(
        judged.iter().all(|(_, code)| *code == Some(0)),
        "{judged:?}"
    );
    // An agent's race is HTTP, not store operations: nothing to export.
    let agent = dir.join("agent");
    let o = reqkey(&[
        "run",
        "--target",
        "reference-agent",
        "--tag",
        "race",
        "--seed",
        "3",
        "--export-histories",
        agent.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("wrote 0 histories"), "{}", text(&o));
    assert_eq!(std::fs::read_dir(&agent).unwrap().count(), 0);
}

/// `reqkey bench lin --export-histories DIR` writes every history it checks,
/// named by its shape and store, in the form `check history` reads; each
/// file gets the verdict its store calls for, and `--verdict-only` times
/// the check alone (what the Porcupine comparison of docs/benchmarks.md
/// compares).
#[test]
fn bench_lin_exports_the_histories_it_checks() {
    let dir = scratch("bench-lin");
    let out_dir = dir.join("lin");
    let o = reqkey(&[
        "bench",
        "lin",
        "--quick",
        "--export-histories",
        out_dir.to_str().unwrap(),
    ]);
    let printed = text(&o);
    assert_eq!(o.status.code(), Some(0), "{printed}");
    let mut names: Vec<String> = std::fs::read_dir(&out_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "lin-ops1000-clients16-sessions1-seed1-correct.json",
            "lin-ops1000-clients16-sessions1-seed1-not.json",
            "lin-ops1000-clients8-sessions1-seed1-correct.json",
            "lin-ops1000-clients8-sessions1-seed1-not.json",
        ]
    );
    for name in &names {
        let file = out_dir.join(name);
        assert!(
            printed.contains(&format!("history: {}", file.display())),
            "{printed}"
        );
        let history: Vec<serde_json::Value> =
            serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        assert_eq!(history.len(), 1000, "{name}");
        let (code, out) = check(&file, &["--verdict-only"]);
        let expected = if name.ends_with("-correct.json") {
            0
        } else {
            1
        };
        assert_eq!(code, Some(expected), "{name}: {out}");
        assert!(out.contains("1000 operations"), "{out}");
        assert!(out.contains(" ms, checked in "), "{out}");
        // Verdict only: no shrunk subset is printed.
        assert!(!out.contains("smallest failing subset"), "{out}");
        // The full check agrees with the verdict-only one.
        assert_eq!(check(&file, &[]).0, Some(expected), "{name}");
    }
    let o = reqkey(&[
        "bench",
        "checker",
        "--export-histories",
        dir.join("other").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("bench lin"), "{}", text(&o));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `n` reads of session `session`, one after the other (none overlaps),
/// each answered `null`; the last answered a run that was never started
/// when `bad`.
fn sequential_reads(n: usize, session: &str, bad: bool) -> String {
    let mut text = String::from("[\n");
    for i in 0..n {
        let answer = if bad && i == n - 1 {
            format!(
                r#"{{"ok":{{"sessionId":"{session}","runId":"r9","status":"running","startSequence":1,"requestDigest":"d"}}}}"#
            )
        } else {
            r#"{"ok":null}"#.to_owned()
        };
        let sep = if i + 1 < n { ",\n" } else { "\n" };
        text.push_str(&format!(
            r#"{{"process":"c.0","call_ns":{},"return_ns":{},"op":"getCurrentRun","args":{{"sessionId":"{session}"}},"answer":{answer}}}{sep}"#,
            10 * i,
            10 * i + 5
        ));
    }
    text.push(']');
    text
}

#[test]
fn a_sequential_history_is_decided_in_one_pass_whatever_the_budget() {
    // Issue 51: a purely sequential history longer than the step budget
    // was "no verdict" (exit 2), though it has one order only. A budget of
    // 1000 steps and 20,000 operations: the violation at the end is found.
    let dir = scratch("sequential");
    let bad = dir.join("bad.json");
    std::fs::write(&bad, sequential_reads(20_000, "s", true)).unwrap();
    let (code, out) = check(&bad, &["--budget-steps", "1000", "--verdict-only"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("NOT linearizable"), "{out}");
    let (code, out) = check(&bad, &["--budget-steps", "1000"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("the smallest failing subset: operations #19999 of the file"),
        "the report shows the one failing read: {out}"
    );
    let good = dir.join("good.json");
    std::fs::write(&good, sequential_reads(20_000, "s", false)).unwrap();
    let (code, out) = check(&good, &["--budget-steps", "1000", "--verdict-only"]);
    assert_eq!(code, Some(0), "{out}");
}

#[test]
fn a_session_over_its_bound_is_refused_before_it_is_held() {
    // Issue 51: one 1 GB session took 5.6 GB. Each session's text is
    // bounded (--max-session-bytes): past it, reading stops, exit 2.
    let dir = scratch("session-bound");
    let file = dir.join("big.json");
    std::fs::write(&file, sequential_reads(5_000, "big", false)).unwrap();
    let (code, out) = check(&file, &["--max-session-bytes", "100000"]);
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains("session \"big\" holds more than 100000 bytes"),
        "{out}"
    );
    assert!(out.contains("--max-session-bytes"), "{out}");
    // Placed where reading stopped: about 100 KB into the file, not at
    // its end (line 5001).
    let line: usize = out
        .split("big.json:")
        .nth(1)
        .and_then(|t| t.split(':').next()?.parse().ok())
        .expect("a line");
    assert!((700..1_000).contains(&line), "{out}");
    // Within the bound it is judged.
    let (code, out) = check(&file, &["--max-session-bytes", "10000000"]);
    assert_eq!(code, Some(0), "{out}");
}

/// `n` commits of one session, one after the other (none overlaps),
/// each starting the next run from the last; the last answered with a
/// start sequence no order gives when `bad`.
fn sequential_commits(n: usize, bad: bool) -> String {
    let mut text = String::from("[\n");
    for i in 0..n {
        let expected = if i == 0 {
            "null".to_owned()
        } else {
            format!("\"r{}\"", i - 1)
        };
        let seq = if bad && i == n - 1 { i + 5 } else { i + 1 };
        let sep = if i + 1 < n { ",\n" } else { "\n" };
        text.push_str(&format!(
            r#"{{"process":"c.0","call_ns":{},"return_ns":{},"op":"commitRunStart","args":{{"startRun":{{"sessionId":"s","runId":"r{i}","expectedCurrentRunId":{expected},"input":{{"text":"hello {i}"}},"requestKey":"k{i}","requestDigest":"d{i}"}}}},"answer":{{"ok":{{"outcome":"started","run":{{"sessionId":"s","runId":"r{i}","status":"running","startSequence":{seq},"requestKey":"k{i}","requestDigest":"d{i}"}}}}}}}}{sep}"#,
            10 * i,
            10 * i + 5
        ));
    }
    text.push(']');
    text
}

/// The peak memory the verdict-only line reports, in MiB.
fn peak_mib(out: &str) -> u64 {
    out.split("peak memory ")
        .nth(1)
        .and_then(|t| t.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no peak memory in: {out}"))
}

#[test]
fn a_history_is_judged_within_the_memory_ceiling_or_refused_where_reading_stopped() {
    // Issue 58: a 257 MB sequential history that is not linearizable
    // peaked at 10.2 GB and was aborted by a 12 GB cap (the anomaly pass
    // cloned the spec state at each of its operations); 10,000 commits
    // took 22 GB. The same shape at a small scale, against a ceiling made
    // small: 12,000 commits (4.4 MB), judged under 96 MiB with the
    // anomaly named, and refused under 32 MiB (exit 2, naming the bound,
    // placed where reading stopped), never aborted.
    let dir = scratch("memory-ceiling");
    let file = dir.join("sequential-not.json");
    std::fs::write(&file, sequential_commits(12_000, true)).unwrap();
    let ceiling = (96u64 << 20).to_string();
    let (code, out) = check(&file, &["--max-memory-bytes", &ceiling]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("the first answer no order can give: #11999"),
        "{out}"
    );
    assert!(
        out.contains("placed after 11999 operations (#0 first; the last 6:"),
        "{out}"
    );
    assert!(out.contains("… and 11936 more of the file"), "{out}");
    assert!(out.len() < 100_000, "a bounded report: {} bytes", out.len());
    // Its peak, as the process measured it, within the ceiling.
    let (code, out) = check(&file, &["--max-memory-bytes", &ceiling, "--verdict-only"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(peak_mib(&out) <= 96, "{out}");
    // Under a ceiling it cannot fit: exit 2, where reading stopped. (The
    // same shape four times as long: with the dependencies optimised the
    // 12,000 commits fit in the smallest ceiling, 32 MiB.)
    let small = (32u64 << 20).to_string();
    let long = dir.join("sequential-not-long.json");
    std::fs::write(&long, sequential_commits(48_000, true)).unwrap();
    for extra in [&[][..], &["--convert-to", "jepsen"][..]] {
        let mut args = vec!["--max-memory-bytes", small.as_str()];
        args.extend_from_slice(extra);
        let (code, out) = check(&long, &args);
        assert_eq!(code, Some(2), "{extra:?}: {out}");
        assert!(
            out.contains("over its memory ceiling of 32 MiB (--max-memory-bytes 33554432)"),
            "{extra:?}: {out}"
        );
        let line: usize = out
            .split("sequential-not-long.json:")
            .nth(1)
            .and_then(|t| t.split(':').next()?.parse().ok())
            .unwrap_or_else(|| panic!("placed at a line: {out}"));
        assert!((2..48_000).contains(&line), "{extra:?}: {out}");
    }
    // The linearizable twin fits too.
    std::fs::write(&file, sequential_commits(12_000, false)).unwrap();
    let (code, out) = check(&file, &["--max-memory-bytes", &ceiling]);
    assert_eq!(code, Some(0), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}
