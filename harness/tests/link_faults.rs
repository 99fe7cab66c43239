//! The database link faulted (issue 49, SPEC 4 "The database link",
//! docs/link-faults.md), through the binary as a user runs it: `reqkey
//! run --start 'reqkey serve store --store {db} ...' --db URL` puts the
//! harness's proxy between the store it started and the database, and the
//! `link` scenarios reset, stall, silence and refuse that link.
//!
//! - the reference store passes every link scenario on PostgreSQL (a
//!   database of its own), Redis and a Redis Cluster (every node reached
//!   through a proxy: the nodes the cluster announces are rewritten), and
//!   the report says the link was faulted;
//! - each broken PostgreSQL store only a link fault shows fails every
//!   scenario `scenarios/falsification.json` records for it
//!   (`REQKEY_BLESS=1` rewrites those entries);
//! - without `--db` the link scenarios do not apply, and the report says
//!   the link was not faulted; a `--db` no command names is a wiring error;
//!   a fault that never strikes leaves its scenario not judged.
//!
//! The services must answer: this test never skips.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;

use common::crash::root;
use common::link::{link_files, run_link, FreshDb, LinkRun};
use reqkey_reference::store::PgLinkDefect;

fn stdout(run: &LinkRun) -> String {
    String::from_utf8_lossy(&run.out.stdout).into_owned()
}

fn assert_green(what: &str, run: &LinkRun, expected: usize) {
    assert_eq!(
        run.out.status.code(),
        Some(0),
        "{what}: {:?}\n{}\n{}",
        run.verdicts,
        stdout(run),
        String::from_utf8_lossy(&run.out.stderr)
    );
    let passed = run.verdicts.values().filter(|v| *v == "pass").count();
    assert_eq!(passed, expected, "{what}: {:?}", run.verdicts);
    let claim = run.doc["profile"]["link"].as_str().unwrap_or_default();
    assert!(
        claim.contains("the harness owns the database link")
            && claim.contains(&format!("{expected} link scenarios applied and passed"))
            && claim.ends_with("the store conforms"),
        "{what}: the claim is {claim:?}"
    );
    // Every link scenario says what struck its link.
    for s in run.doc["scenarios"].as_array().unwrap() {
        let note = s["note"].as_str().unwrap_or_default();
        assert!(note.starts_with("database link: db 0 ("), "{what}: {s}");
    }
}

#[test]
fn the_reference_store_conforms_through_a_faulted_postgres_link() {
    let db = FreshDb::create("pg");
    let run = run_link(&db.url, "pg");
    assert_green("postgres", &run, link_files().len());
}

#[test]
fn the_reference_store_conforms_through_a_faulted_redis_link() {
    let url = std::env::var("REQKEY_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let run = run_link(&url, "redis");
    // The PostgreSQL-only scenarios (the database's own refusals) do not apply.
    assert_green("redis", &run, link_files().len() - 2);
    assert_eq!(
        run.verdicts
            .values()
            .filter(|v| *v == "not_applicable")
            .count(),
        2
    );
}

/// On a Redis Cluster the `--db` names one node; the store learns the
/// others from `CLUSTER SLOTS` and `MOVED`, which the proxy rewrites, so
/// the faults strike commits on every node.
#[test]
fn the_reference_store_conforms_through_a_faulted_cluster_link_on_every_node() {
    let cluster = common::redis_cluster_url();
    let seed = cluster.split(',').next().unwrap();
    let run = run_link(seed, "cluster");
    assert_green("redis cluster", &run, link_files().len() - 2);
    let nodes: BTreeSet<String> = run.doc["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["note"].as_str())
        .flat_map(|note| note.split("db 0 (").skip(1))
        .filter_map(|rest| rest.split(')').next())
        .map(str::to_owned)
        .collect();
    assert!(
        nodes.len() >= 2,
        "the faults struck through {nodes:?}: the nodes the cluster announced were not proxied"
    );
}

/// Each broken PostgreSQL store fails every link scenario the record lists
/// for it (and passes the rest of the suite: tests/store_corpus.rs never
/// names them).
#[test]
fn each_broken_link_store_fails_the_scenarios_the_record_lists() {
    let bless = std::env::var_os("REQKEY_BLESS").is_some();
    let record_path = root().join("scenarios/falsification.json");
    let db = FreshDb::create("variants");
    let mut record: reqkey_check::coverage::FalsificationRecord =
        serde_json::from_str(&std::fs::read_to_string(&record_path).unwrap()).unwrap();
    for defect in PgLinkDefect::ALL {
        let key = defect.scheme();
        let run = run_link(&db.with_scheme(&key), defect.name());
        assert_eq!(
            run.out.status.code(),
            Some(1),
            "{key} must not conform: {:?}\n{}",
            run.verdicts,
            stdout(&run)
        );
        for (id, verdict) in &run.verdicts {
            assert!(
                ["pass", "fail"].contains(&verdict.as_str()),
                "{key}: {id} is {verdict}, not a verdict\n{}",
                stdout(&run)
            );
        }
        let failed: BTreeSet<String> = run
            .verdicts
            .iter()
            .filter(|(_, v)| *v == "fail")
            .map(|(id, _)| id.clone())
            .collect();
        let claim = run.doc["profile"]["link"].as_str().unwrap_or_default();
        assert!(
            claim.ends_with("the store does NOT conform under database link faults"),
            "{key}: {claim}"
        );
        if bless {
            record.store.insert(key, failed);
            continue;
        }
        let recorded = record.store.get(&key).cloned().unwrap_or_default();
        assert!(
            !recorded.is_empty() && recorded == failed,
            "{key}: failed {failed:?}, recorded {recorded:?} \
             (scenarios/falsification.json; REQKEY_BLESS=1 rewrites it)"
        );
    }
    if bless {
        let text = serde_json::to_string_pretty(&record).unwrap();
        std::fs::write(&record_path, format!("{text}\n")).unwrap();
    }
}

/// Without `--db` nothing is faulted: the link scenarios do not apply,
/// with the reason, and the report says the link was not faulted.
#[test]
fn without_db_the_link_scenarios_do_not_apply_and_the_report_says_so() {
    let json = std::env::temp_dir().join(format!("reqkey-link-none-{}.json", std::process::id()));
    let out = common::reqkey(&[
        "run",
        "--target",
        "memory",
        "--json",
        json.to_str().unwrap(),
        "scenarios/store/link.reset-after-commit.yaml",
        "scenarios/store/link.rolled-back-writes-run-again.yaml",
        "scenarios/store/same-run-id-replay.yaml",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", common::text(&out));
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(&json);
    let not: Vec<&str> = doc["not_applicable"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["requires"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(not.len(), 2, "{doc}");
    assert!(not.iter().all(|r| r.contains("owns no")), "{not:?}");
    assert!(
        doc["profile"]["link"]
            .as_str()
            .unwrap_or_default()
            .contains("the database link was NOT faulted"),
        "{}",
        doc["profile"]
    );
}

/// A `--db` that no started command names would leave the store talking
/// to the database past the proxy: a wiring error (exit 2), before any
/// scenario.
#[test]
fn a_db_no_command_names_is_a_wiring_error() {
    let out = common::reqkey(&[
        "run",
        "--target",
        "store+http://127.0.0.1:{port}",
        "--start",
        // A port, so that the check before it (issue 50: a command names
        // `{port}`) passes and this one is reached; nothing starts.
        "sleep 30 --listen 127.0.0.1:{port}",
        "--db",
        "postgres://postgres:hunter2@127.0.0.1:5432/test",
        "scenarios/store/link.reset-after-commit.yaml",
    ]);
    let text = common::text(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("no --start command names `{db}`"), "{text}");
    assert!(!text.contains("hunter2"), "{text}");
    let out = common::reqkey(&[
        "run",
        "--target",
        "memory",
        "--db",
        "postgres://postgres@127.0.0.1:5432/test",
    ]);
    assert_eq!(out.status.code(), Some(2), "--db without --start");
}

/// A fault armed and never struck (the scenario's write never came) is no
/// pass: the scenario is not judged, with the reason.
#[test]
fn a_link_fault_that_never_strikes_leaves_its_scenario_not_judged() {
    let dir = std::env::temp_dir().join(format!("reqkey-link-unstruck-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("unstruck.yaml");
    std::fs::write(
        &file,
        "id: t.link.unstruck\nlevel: store\nrequires: {link: true}\nsummary: reads only\n\
         checks: [store.reads.unknown-session]\n\
         steps:\n  - link: {action: reset, at: after-commit}\n  - listRuns: {sessionId: $s}\n    \
         expect: {ok: []}\n    judges: [store.reads.unknown-session]\n  - link: {action: heal}\n",
    )
    .unwrap();
    let db = FreshDb::create("unstruck");
    let bin = env!("CARGO_BIN_EXE_reqkey");
    let out = std::process::Command::new(bin)
        .arg("run")
        .args(["--target", "store+http://127.0.0.1:{port}"])
        .arg("--start")
        .arg(format!(
            "{bin} serve store --store {{db}} --listen 127.0.0.1:{{port}}"
        ))
        .args(["--db", &db.url])
        .arg(&file)
        .current_dir(root())
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let text = common::text(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("never struck"), "{text}");
}
