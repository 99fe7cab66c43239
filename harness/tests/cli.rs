//! The `reqkey` binary's contract: exit codes, errors that name
//! file:line:col, and help texts that explain targets and exit codes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{reqkey, text};
use std::path::PathBuf;

fn scratch(name: &str, body: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("reqkey-cli-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(format!("{name}.yaml"));
    std::fs::write(&file, body).unwrap();
    file
}

#[test]
fn the_store_corpus_exits_0_on_memory_and_lists_the_contract_ids() {
    let o = reqkey(&[
        "run",
        "scenarios/store",
        "--target",
        "memory",
        "--seed",
        "1",
    ]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    for id in [
        "request-key.race",
        "request-key.delete-frees-keys",
        "request-key.per-session",
    ] {
        assert!(out.contains(&format!("PASS  {id}")), "{out}");
    }
    assert!(
        out.lines().any(|l| l.ends_with(" passed, 0 failed")),
        "{out}"
    );
}

#[test]
fn a_nonconforming_store_exits_1_and_prints_the_seed() {
    let o = reqkey(&[
        "run",
        "scenarios/store",
        "--target",
        "broken-memory:delete-keeps-keys",
        "--seed",
        "42",
    ]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("FAIL  request-key.delete-frees-keys"), "{out}");
    assert!(out.contains("--seed 42"), "{out}");
    assert!(
        out.contains("expected:") && out.contains("actual:"),
        "{out}"
    );
}

#[test]
fn malformed_yaml_exits_2_naming_file_and_line() {
    let file = scratch(
        "broken",
        "id: x\nlevel: store\nsummary: s\nsteps:\n  - getRun: {sessionId: a\n",
    );
    let o = reqkey(&["run", file.to_str().unwrap()]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(2), "{out}");
    assert!(out.contains(&format!("{}:", file.display())), "{out}");
    assert!(
        out.contains("broken.yaml:5:") || out.contains("broken.yaml:6:"),
        "{out}"
    );
}

#[test]
fn an_unknown_step_kind_exits_2_naming_file_and_line() {
    let file = scratch(
        "unknown",
        "id: x\nlevel: store\nsummary: s\nsteps:\n  - listRuns: {sessionId: $s}\n    expect: any\n  - teleport: {sessionId: $s}\n",
    );
    let o = reqkey(&["run", file.to_str().unwrap()]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(2), "{out}");
    assert!(
        out.contains("unknown.yaml:7:5: steps[1]: unknown field `teleport`"),
        "{out}"
    );
}

#[test]
fn bad_arguments_and_targets_exit_2() {
    assert_eq!(
        reqkey(&["run", "--target", "nonsense"]).status.code(),
        Some(2)
    );
    assert_eq!(reqkey(&["run", "--repeat", "0"]).status.code(), Some(2));
    assert_eq!(reqkey(&["frobnicate"]).status.code(), Some(2));
    assert_eq!(reqkey(&["run", "no/such/dir"]).status.code(), Some(2));
}

#[test]
fn help_explains_targets_and_exit_codes() {
    let top = text(&reqkey(&["--help"]));
    assert!(
        top.contains("Exit codes") && top.contains("2  the harness could not judge"),
        "{top}"
    );
    let run = text(&reqkey(&["run", "--help"]));
    for needle in [
        "Targets (--target)",
        "memory",
        "Exit codes",
        "--seed",
        "--repeat",
    ] {
        assert!(run.contains(needle), "missing {needle}: {run}");
    }
}

/// Issue 50: `reqkey --help` never named the Idempotency-Key level, and
/// `certify --help` described `--scenarios` for store and agent suites only.
#[test]
fn help_names_all_three_levels() {
    let top = text(&reqkey(&["--help"]));
    for needle in [
        "reqkey-store/1",
        "reqkey-agent/1",
        "Idempotency-Key",
        "reqkey-idem/1",
    ] {
        assert!(top.contains(needle), "missing {needle}: {top}");
    }
    let certify = text(&reqkey(&["certify", "--help"]));
    for needle in ["ROOT/idempotency-key", "idem+http://", "reference-idem"] {
        assert!(certify.contains(needle), "missing {needle}: {certify}");
    }
}

/// A database that is not there is a harness error (exit 2) naming the
/// target, with its password redacted.
#[test]
fn a_database_target_that_is_down_exits_2_naming_it() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    for target in [
        format!("redis://:hunter2@127.0.0.1:{port}/"),
        format!("postgres://postgres:hunter2@127.0.0.1:{port}/test"),
    ] {
        let o = reqkey(&["run", "scenarios/store", "--target", &target]);
        let out = text(&o);
        assert_eq!(o.status.code(), Some(2), "{target}: {out}");
        assert!(out.contains(&format!("127.0.0.1:{port}")), "{out}");
        assert!(!out.contains("hunter2"), "{out}");
    }
}

/// `reqkey bench lookup` without `--target` measures the reference
/// backends beside their primitives (here the in-process two, quick
/// sizes), prints the ratio of ratios, and gates only when asked to.
#[test]
fn bench_lookup_on_backends_prints_the_ratio_of_ratios_and_gates() {
    let args = [
        "bench",
        "lookup",
        "--quick",
        "--backend",
        "memory",
        "--backend",
        "sqlite",
    ];
    let o = reqkey(&args);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    for line in ["memory   getRunByRequestKey", "sqlite   getRunByRequestKey"] {
        assert!(out.contains(line), "{out}");
    }
    assert!(
        out.contains("hash-map get") && out.contains("primary-key read"),
        "{out}"
    );
    assert!(
        out.contains("ratio of ratios") && out.contains("100 → 10000 runs"),
        "{out}"
    );

    let mut gated = args.to_vec();
    gated.extend(["--max-ratio", "0.0001"]);
    let o = reqkey(&gated);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("is above --max-ratio"), "{}", text(&o));
}

/// `reqkey bench race-window` prints its table (one trial: a window the
/// battery's first burst meets); a window it was not calibrated at is
/// refused.
#[test]
fn bench_race_window_prints_the_catch_rate_side_by_side() {
    let o = reqkey(&[
        "bench",
        "race-window",
        "--quick",
        "--window-us",
        "10000",
        "--seeds",
        "1",
        "--fuzz-cases",
        "0",
    ]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(
        out.contains("plain") && out.contains("synchronised"),
        "{out}"
    );
    assert!(out.contains("10 ms"), "{out}");
    let o = reqkey(&["bench", "race-window", "--window-us", "7", "--seeds", "1"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("not a calibrated window"), "{}", text(&o));
}

/// `reqkey bench lookup` seeds through the protocol, prints its figures,
/// deletes everything it seeded, and gates only when asked to.
#[test]
fn bench_lookup_prints_figures_cleans_up_and_gates_on_max_ratio() {
    let db = std::env::temp_dir().join(format!("reqkey-cli-{}-lookup.sqlite", std::process::id()));
    let target = format!("sqlite:{}", db.display());
    let args = |extra: &[&str]| {
        let mut a = vec![
            "bench",
            "lookup",
            "--target",
            &target,
            "--small",
            "30",
            "--large",
            "120",
            "--runs-per-session",
            "25",
            "--samples",
            "40",
            "--seed",
            "3",
        ];
        a.extend_from_slice(extra);
        a.into_iter().map(str::to_owned).collect::<Vec<_>>()
    };
    let run = |a: Vec<String>| reqkey(&a.iter().map(String::as_str).collect::<Vec<_>>());

    let o = run(args(&[]));
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("getRunByRequestKey on sqlite:"), "{out}");
    assert!(
        out.contains(" 30 runs ") && out.contains(" 120 runs "),
        "{out}"
    );
    assert!(out.contains("ratio ") && out.contains("seed 3"), "{out}");
    let conn = rusqlite::Connection::open(&db).unwrap();
    let left: i64 = conn
        .query_row("SELECT COUNT(*) FROM runs", [], |r| r.get(0))
        .unwrap();
    assert_eq!(left, 0, "the benchmark left runs behind");

    // No store can answer faster than a ratio of 0.0001: exit 1, and why.
    let o = run(args(&["--max-ratio", "0.0001"]));
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("the lookup grows with the store"), "{out}");

    let o = reqkey(&["bench", "lookup", "--target", "reference-agent"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("needs a store target"), "{}", text(&o));
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
}

/// A scratch scenarios root with one scenario per level and `record`.
fn coverage_root(name: &str, record: &str) -> PathBuf {
    let root = std::env::temp_dir().join(format!("reqkey-cov-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    for level in ["store", "agent"] {
        std::fs::create_dir_all(root.join(level)).unwrap();
    }
    std::fs::write(root.join("VERSION"), "1\n").unwrap();
    std::fs::write(
        root.join("store/a.yaml"),
        "id: a\nlevel: store\nchecks: [store.commit.cas]\nsummary: s\nsteps:\n  - getRun: {sessionId: $s, runId: r}\n    expect: {ok: null}\n    judges: [store.commit.cas]\n",
    )
    .unwrap();
    std::fs::write(
        root.join("agent/b.yaml"),
        "id: b\nlevel: agent\nchecks: [agent.route.health]\nsummary: s\nsteps:\n  - http: {path: /health}\n    expect: {status: 200}\n    judges: [agent.route.health]\n",
    )
    .unwrap();
    std::fs::write(root.join("falsification.json"), record).unwrap();
    root
}

#[test]
fn coverage_exits_0_on_this_suite_with_every_clause_covered() {
    let o = reqkey(&["coverage"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(!out.contains("GAP"), "{out}");
    for level in ["store", "agent"] {
        let line = out
            .lines()
            .find(|l| l.contains(&format!(" {level} clauses covered")))
            .unwrap_or_else(|| panic!("no {level} count: {out}"));
        let (covered, rest) = line.split_once(" of ").unwrap();
        let total = rest.split_whitespace().next().unwrap();
        assert_eq!(covered, total, "{line}");
        assert!(covered.parse::<usize>().unwrap() > 40, "{line}");
    }
}

#[test]
fn coverage_of_the_idem_level_shows_every_profile_field_and_value() {
    let o = reqkey(&["coverage", "--level", "idem"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("66 bursts of 8"), "{out}");
    let line = |field: &str, value: &str| {
        out.lines()
            .find(|l| l.trim_start().starts_with(field) && l.contains(value))
            .unwrap_or_else(|| panic!("no line for {field} {value}: {out}"))
            .to_owned()
    };
    for field in reqkey_model::idem_profile::IdemProfile::FIELDS {
        assert!(line(field, " apply; aimed at it: ").contains("battery: bursts, failing bursts"));
    }
    assert!(line("keyRequired", "false").contains("idem.missing-key-optional"));
    assert!(line("expiryMs", "null").contains("around expiry"));
    assert!(!line("lockMs", "long (60000)").contains("past the lock"));
    assert!(line("lockMs", "short (500)").contains("past the lock"));
}

#[test]
fn coverage_exits_1_on_a_gap_and_marks_it() {
    let root = coverage_root(
        "gap",
        r#"{"store": {"broken-memory:no-cas": ["a"]}, "agent": {}}"#,
    );
    let o = reqkey(&[
        "coverage",
        "--level",
        "store",
        "--grid",
        "--scenarios",
        root.to_str().unwrap(),
    ]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("ok  store.commit.cas"), "{out}");
    assert!(out.contains("GAP store.commit.key-holder"), "{out}");
    assert!(out.contains("1 of "), "{out}");
    let o = reqkey(&[
        "coverage",
        "--level",
        "agent",
        "--scenarios",
        root.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("b (fails on no broken variant)"),
        "{}",
        text(&o)
    );
}

#[test]
fn coverage_exits_2_on_a_record_that_names_an_unknown_scenario_or_a_bad_clause() {
    let root = coverage_root(
        "bad",
        r#"{"store": {"broken-memory:no-cas": ["nope"]}, "agent": {}}"#,
    );
    let o = reqkey(&["coverage", "--scenarios", root.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("`nope`"), "{}", text(&o));
    let root = coverage_root("clause", r#"{"store": {}, "agent": {}}"#);
    std::fs::write(
        root.join("store/a.yaml"),
        "id: a\nlevel: store\nchecks: [store.commit.nope]\nsummary: s\nsteps:\n  - getRun: {sessionId: $s, runId: r}\n    expect: any\n",
    )
    .unwrap();
    let o = reqkey(&["coverage", "--scenarios", root.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("a.yaml:3:"), "{}", text(&o));
}

#[test]
fn targets_lists_every_form_and_broken_variant_without_repository_paths() {
    let o = reqkey(&["targets"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = text(&o);
    for form in [
        "store+http://",
        "reference-agents:N",
        "redis+cluster://",
        "sqlite:PATH",
    ] {
        assert!(out.contains(form), "{form}");
    }
    for d in reqkey_reference::store::MemoryDefect::ALL {
        assert!(
            out.contains(&format!("broken-memory:{}", d.name())),
            "{}",
            d.name()
        );
    }
    for d in reqkey_reference::agent::ExecutorDefect::ALL {
        assert!(
            out.contains(&format!("reference-agent:{}", d.name())),
            "{}",
            d.name()
        );
    }
    // Nothing points an installed binary at files it does not have.
    for args in [&["targets"][..], &["run", "--help"], &["certify", "--help"]] {
        let o = reqkey(args);
        assert!(!text(&o).contains("falsification.json"), "{args:?}");
    }
    // An unknown target or variant says where the forms are listed.
    let o = reqkey(&["run", "--target", "reference-agent:nope"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("reqkey targets"), "{}", text(&o));
}

#[test]
fn explain_prints_a_clause_and_the_scenarios_that_check_it() {
    let o = reqkey(&["explain", "store.commit.cas"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = text(&o);
    assert!(
        out.contains("**CAS.**") && out.contains("certified at: store"),
        "{out}"
    );
    assert!(
        out.contains("store.cas-mismatch-names-current") && out.contains("broken-memory:no-cas"),
        "{out}"
    );
    let o = reqkey(&["explain", "store.no-such-rule"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o).contains("store.commit.cas"),
        "near ids suggested: {}",
        text(&o)
    );
}

#[test]
fn explain_prints_the_list_a_clause_introduces() {
    let o = reqkey(&["explain", "store.commit.order"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = text(&o);
    assert!(out.contains("in the order listed:"), "{out}");
    for step in [
        "1. **Same-runId replay.**",
        "2. **Key holder.**",
        "3. **CAS.**",
        "4. **Write.**",
    ] {
        assert!(out.contains(step), "{step} missing: {out}");
    }
    assert!(!out.contains("[["), "{out}");
}

/// Issue 41: `reqkey targets | head -1` panicked (exit 101). Every command
/// that prints, with its reader gone before it writes a byte: no panic,
/// and its own exit code.
#[test]
fn a_closed_stdout_is_neither_a_panic_nor_an_error() {
    use std::process::{Command, Stdio};
    let cases: [(&[&str], i32); 5] = [
        (&["targets"], 0),
        (&["coverage"], 0),
        (&["explain", "store.commit.order"], 0),
        (&["suite", "info"], 0),
        (
            &[
                "run",
                "--target",
                "broken-memory:no-key-rule",
                "--scenario",
                "store.key-holder-matrix",
            ],
            1,
        ),
    ];
    for (args, code) in cases {
        let mut child = Command::new(env!("CARGO_BIN_EXE_reqkey"))
            .args(args)
            .current_dir(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
            .env("NO_COLOR", "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Close the read end before the child can write: every write fails.
        drop(child.stdout.take());
        let o = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(o.status.code(), Some(code), "{args:?}: {err}");
    }
}

/// Issue 41: the store guide's first command failed for an installed
/// binary (it named `scenarios/store`, a directory of the checkout). Run
/// from a directory that is no checkout, with the reference store in
/// place of the adapter, it certifies; the old form says where the suite is.
#[test]
fn the_store_guides_first_command_works_outside_a_checkout() {
    use std::process::Command;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let guide = std::fs::read_to_string(root.join("docs/store-adapter.md")).unwrap();
    let first = guide
        .lines()
        .find(|l| l.starts_with("reqkey "))
        .expect("the guide shows a command");
    let command = first.split('#').next().unwrap().trim();
    let args: Vec<&str> = command
        .split_whitespace()
        .skip(1)
        .map(|a| {
            if a.starts_with("store+http://") {
                "memory"
            } else {
                a
            }
        })
        .collect();
    let elsewhere =
        std::env::temp_dir().join(format!("reqkey-cli-{}-nocheckout", std::process::id()));
    std::fs::create_dir_all(&elsewhere).unwrap();
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_reqkey"))
            .args(args)
            .current_dir(&elsewhere)
            .env("NO_COLOR", "1")
            .output()
            .unwrap()
    };
    let o = run(&args);
    assert_eq!(o.status.code(), Some(0), "`{command}`: {}", text(&o));
    let o = run(&["run", "scenarios/store", "--target", "memory"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("built into reqkey"), "{}", text(&o));
}

/// Issue 41: a misspelt target form gets the form it resembles; since
/// issue 48 the TLS forms are forms like the others.
#[test]
fn a_misspelt_target_gets_a_suggestion_and_tls_is_a_form() {
    for (target, wanted) in [
        ("memroy", "did you mean `memory`?"),
        (
            "store+http//127.0.0.1:7001",
            "did you mean `store+http://127.0.0.1:7001`?",
        ),
        // TLS is a form (issue 48): nothing listens there, so exit 2 as for
        // any target that is down, and no "not supported".
        ("store+https://127.0.0.1:1", "https://127.0.0.1:1"),
        (
            "store+htps://127.0.0.1:7001",
            "did you mean `store+https://127.0.0.1:7001`?",
        ),
    ] {
        let o = reqkey(&["run", "--target", target]);
        assert_eq!(o.status.code(), Some(2), "{target}: {}", text(&o));
        assert!(text(&o).contains(wanted), "{target}: {}", text(&o));
        assert!(
            !text(&o).contains("not supported"),
            "{target}: {}",
            text(&o)
        );
    }
}

/// Issue 41: a failing `model.*` scenario named no clause; the generated
/// scenarios declare the clauses of their steps.
#[test]
fn a_failing_model_scenario_names_its_clauses() {
    let o = reqkey(&[
        "run",
        "--target",
        "broken-memory:no-key-rule",
        "--scenario",
        "model.counterexample.no-key-rule",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let breaks = text(&o)
        .lines()
        .find(|l| l.trim_start().starts_with("breaks:"))
        .map(str::to_owned)
        .unwrap_or_default();
    assert!(breaks.contains("store.commit.key-holder"), "{}", text(&o));
}
