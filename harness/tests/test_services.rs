//! The services the test command starts itself and leaves up are the ones
//! `scripts/stop-test-services.sh` stops and the README names (issue 41).
//! Checked from the files (a dry run), never by stopping them: tests running
//! beside this one use them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

fn repo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap()
}

#[test]
fn the_stop_script_names_every_service_the_tests_start() {
    let o = Command::new("bash")
        .arg(repo().join("scripts/stop-test-services.sh"))
        .arg("--dry-run")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    let listed = String::from_utf8_lossy(&o.stdout).into_owned();
    // The defaults of the scripts the tests call, and the failover
    // drill's own pair (harness/tests/pg_replica.rs DRILL_ENV).
    let cluster = read("scripts/redis-cluster.sh");
    assert!(cluster.contains(r#"${REQKEY_CLUSTER_PORTS:-7101 7102 7103}"#));
    assert!(cluster.contains(r#"${REQKEY_CLUSTER_DIR:-/tmp/reqkey-redis-cluster}"#));
    let pair = read("scripts/pg-replica.sh");
    assert!(pair.contains(r#"${REQKEY_PG_PRIMARY_PORT:-5442}"#));
    assert!(pair.contains(r#"${REQKEY_PG_REPLICA_DIR:-/tmp/reqkey-pg-replica}"#));
    let drill = read("harness/tests/pg_replica.rs");
    assert!(drill.contains(r#"("REQKEY_PG_PRIMARY_PORT", "5444")"#));
    assert!(drill.contains(r#"("REQKEY_PG_REPLICA_DIR", "/tmp/reqkey-pg-failover")"#));
    for service in [
        "127.0.0.1:7101-7103 (/tmp/reqkey-redis-cluster)",
        "127.0.0.1:5442-5443 (/tmp/reqkey-pg-replica)",
        "127.0.0.1:5444-5445 (/tmp/reqkey-pg-failover)",
    ] {
        assert!(listed.contains(service), "{service} missing: {listed}");
    }
    let readme = read("README.md");
    assert!(
        readme.contains("scripts/stop-test-services.sh"),
        "the README says how to stop them"
    );
    assert!(readme.contains("stay up"), "the README says they stay up");
}
