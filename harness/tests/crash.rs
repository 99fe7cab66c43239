//! The crash scenarios (`scenarios/agent/crash.*`, SPEC 8.2) through the
//! binary, as a user runs them: `reqkey run --start 'reqkey serve agent
//! ...'` owns the reference server's processes and kills, pauses and
//! restarts them.
//!
//! - the reference agent passes them over SQLite, PostgreSQL and Redis,
//!   with one replica and with three (the services must answer: this test
//!   never skips);
//! - each crash defect of the reference executor (`--variant`) fails
//!   every scenario `scenarios/falsification.json` lists for it
//!   (`REQKEY_BLESS=1` rewrites those entries);
//! - without `--start` they are not applicable, and the reports say crash
//!   behaviour was not certified.
//!
//! Every run uses a lease of 2000 ms (renewed every 667 ms): the scenarios
//! wait 3500 ms for a lease to run out, so a late timer on a loaded
//! machine has over a second of margin either way.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, Output};

use common::crash::{
    assert_green_on_every_persistent_backend, crash_files, postgres, redis, root, run_crash,
    sqlite, verdicts,
};
use reqkey_reference::agent::executor::ExecutorDefect;

/// The executor defects only a crash, a pause or a second replica shows.
const CRASH_DEFECTS: [ExecutorDefect; 9] = [
    ExecutorDefect::NoOrphanExpiry,
    ExecutorDefect::ReaderRenewsLease,
    ExecutorDefect::ExpiryWithoutLeaseCompare,
    ExecutorDefect::NeverRenews,
    ExecutorDefect::LeaseAfterCommit,
    ExecutorDefect::OrphanRetryReexecutes,
    ExecutorDefect::KeylessRefusedByOrphan,
    ExecutorDefect::ClaimsDurable,
    ExecutorDefect::StoreStreamDoesNotWait,
];

#[test]
fn the_reference_agent_passes_the_crash_scenarios_on_every_persistent_backend() {
    assert_green_on_every_persistent_backend();
}

/// Each crash defect fails every crash scenario the record lists for it
/// (what it fails every time). Three replicas over one SQLite file (two processes share
/// it as replicas share a database); `claims-durable` over the memory
/// store, which a restart empties.
#[test]
fn each_crash_defect_fails_the_crash_scenarios_the_record_lists() {
    let bless = std::env::var_os("REQKEY_BLESS").is_some();
    let record_path = root().join("scenarios/falsification.json");
    let handles: Vec<_> = CRASH_DEFECTS
        .iter()
        .map(|d| {
            let name = d.name();
            std::thread::spawn(move || {
                let (store, n) = if name == "claims-durable" {
                    ("memory".to_owned(), 1)
                } else {
                    (sqlite(name), 3)
                };
                let (out, verdicts) = run_crash(&store, n, Some(name), name);
                (name, out, verdicts)
            })
        })
        .collect();
    let mut record: reqkey_check::coverage::FalsificationRecord =
        serde_json::from_str(&std::fs::read_to_string(&record_path).unwrap()).unwrap();
    for h in handles {
        let (name, out, verdicts) = h.join().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{name} must not conform: {verdicts:?}\n{stdout}"
        );
        for (id, verdict) in &verdicts {
            // Set aside (a replica scenario on one process) or judged:
            // never a scenario that ran and reached no verdict.
            assert!(
                ["pass", "fail", "not_applicable"].contains(&verdict.as_str()),
                "{name}: {id} is {verdict}, not a verdict\n{stdout}"
            );
        }
        let failed: BTreeSet<String> = verdicts
            .iter()
            .filter(|(_, v)| *v == "fail")
            .map(|(id, _)| id.clone())
            .collect();
        assert!(!failed.is_empty(), "{name} failed nothing");
        let key = format!("reference-agent:{name}");
        if bless {
            record.agent.insert(key, failed);
            continue;
        }
        let recorded: BTreeSet<String> = record.agent.get(&key).cloned().unwrap_or_default();
        // What the record promises is what the defect fails every time; a
        // lease defect may also fail another scenario when a replica
        // happens to read a run at the wrong moment, so more is allowed.
        assert!(
            !recorded.is_empty() && recorded.is_subset(&failed),
            "{key} passed a recorded scenario: failed {failed:?}, recorded {recorded:?} \
             (scenarios/falsification.json; REQKEY_BLESS=1 rewrites it)"
        );
    }
    if bless {
        let text = serde_json::to_string_pretty(&record).unwrap();
        std::fs::write(&record_path, format!("{text}\n")).unwrap();
    }
}

/// Without `--start` the crash scenarios are not run: not applicable, the
/// reason given, and the certificate says crash behaviour is not
/// certified.
#[test]
fn without_start_the_crash_scenarios_are_not_applicable_and_the_certificate_says_so() {
    let out_dir = std::env::temp_dir().join(format!("reqkey-crash-cert-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out_dir);
    let out = Command::new(env!("CARGO_BIN_EXE_reqkey"))
        .args([
            "certify",
            "--target",
            "reference-agent",
            "--quiet",
            "--seed",
            "1",
            "--patience",
            common::TEST_PATIENCE,
            "--capacity-keys",
            common::TEST_CAPACITY_KEYS,
        ])
        .arg("--out")
        .arg(&out_dir)
        .current_dir(root())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", common::text(&out));
    let cert = std::fs::read_to_string(out_dir.join("certificate.md")).unwrap();
    assert!(
        cert.contains("| crash behaviour | the harness did not start the target (no --start): crash behaviour is NOT certified |"),
        "{cert}"
    );
    for file in crash_files() {
        let id = file
            .trim_start_matches("scenarios/agent/")
            .trim_end_matches(".yaml");
        assert!(
            cert.contains(&format!("agent.{id}")),
            "{id} not listed:\n{cert}"
        );
    }
    assert!(
        cert.contains("faults: the harness did not start the target"),
        "{cert}"
    );
    let _ = std::fs::remove_dir_all(&out_dir);
}

/// `reqkey run --start` over one store adapter (`reqkey serve store`): the
/// exit code and each scenario's verdict.
fn run_store_crash(store: &str, tag: &str) -> (Output, BTreeMap<String, String>) {
    let bin = env!("CARGO_BIN_EXE_reqkey");
    let json = std::env::temp_dir().join(format!(
        "reqkey-store-crash-{}-{tag}.json",
        std::process::id()
    ));
    let out = Command::new(bin)
        .arg("run")
        .arg("--start")
        .arg(format!(
            "{bin} serve store --store {store} --listen 127.0.0.1:{{port}}"
        ))
        .args(["--target", "store+http://127.0.0.1:{port}", "--seed", "26"])
        .arg("--json")
        .arg(&json)
        .arg("scenarios/store/crash.durable-keys-survive-a-restart.yaml")
        // So that something runs where the crash scenario does not apply.
        .arg("scenarios/store/commit-writes.yaml")
        .current_dir(root())
        .output()
        .expect("reqkey run runs");
    let verdicts = verdicts(&json);
    (out, verdicts)
}

/// A store adapter the harness started keeps its keys across a restart on
/// every persistent backend; a memory store whose `/health` claims
/// `durable: true` loses them and fails the scenario the record lists; the
/// honest memory store declares nothing and the scenario does not apply.
#[test]
fn store_adapters_that_declare_durable_keep_their_keys_across_a_restart() {
    const ID: &str = "store.crash.durable-keys-survive-a-restart";
    for (name, store) in [
        ("sqlite", sqlite("store-green")),
        ("postgres", postgres()),
        ("redis", redis()),
    ] {
        let (out, verdicts) = run_store_crash(&store, name);
        assert_eq!(
            (out.status.code(), verdicts.get(ID).map(String::as_str)),
            (Some(0), Some("pass")),
            "{name}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let (out, verdicts) = run_store_crash("memory", "honest-memory");
    assert_eq!(
        verdicts.get(ID).map(String::as_str),
        Some("not_applicable"),
        "{verdicts:?}\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let (out, verdicts) = run_store_crash("broken-memory:claims-durable", "claims-durable");
    assert_eq!(out.status.code(), Some(1), "{verdicts:?}");
    let failed: BTreeSet<String> = verdicts
        .iter()
        .filter(|(_, v)| *v == "fail")
        .map(|(id, _)| id.clone())
        .collect();
    let record_path = root().join("scenarios/falsification.json");
    let mut record: reqkey_check::coverage::FalsificationRecord =
        serde_json::from_str(&std::fs::read_to_string(&record_path).unwrap()).unwrap();
    let key = "broken-memory:claims-durable".to_owned();
    if std::env::var_os("REQKEY_BLESS").is_some() {
        record.store.insert(key, failed);
        let text = serde_json::to_string_pretty(&record).unwrap();
        std::fs::write(&record_path, format!("{text}\n")).unwrap();
    } else {
        assert_eq!(
            Some(&failed),
            record.store.get(&key),
            "{key}: scenarios/falsification.json is wrong (REQKEY_BLESS=1 rewrites it)"
        );
    }
}
