//! Certificates claim only what ran (issue 38): with `--start`, crash
//! behaviour is certified only when a crash scenario applied and passed.
//! A non-durable store's only crash scenario does not apply, and its
//! certificate once said "crash behaviour (kill, pause, restart) is
//! certified" all the same.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::PathBuf;

fn certify_started(name: &str, store: &str) -> (i32, String, serde_json::Value) {
    let dir: PathBuf =
        std::env::temp_dir().join(format!("reqkey-crash-claim-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let start = format!(
        "exec {} serve store --store {store} --listen 127.0.0.1:{{port}}",
        env!("CARGO_BIN_EXE_reqkey")
    );
    let o = common::reqkey(&[
        "certify",
        "--quiet",
        "--seed",
        "7",
        "--start",
        &start,
        "--target",
        "store+http://127.0.0.1:{port}",
        "--out",
        dir.to_str().unwrap(),
    ]);
    let cert = std::fs::read_to_string(dir.join("certificate.md")).unwrap();
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("results.json")).unwrap()).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    (o.status.code().unwrap_or(-1), cert, json)
}

#[test]
fn a_started_store_whose_crash_scenario_did_not_apply_is_not_certified_for_crashes() {
    let (code, cert, json) = certify_started("memory", "memory");
    assert_eq!(code, 0, "{cert}");
    let line = cert
        .lines()
        .find(|l| l.starts_with("| crash behaviour |"))
        .unwrap_or_default();
    assert!(
        line.contains("no crash scenario applied")
            && line.contains("needs durable: true, but /health declares durable: false")
            && line.contains("crash behaviour is NOT certified"),
        "{line}"
    );
    assert!(!line.contains("is certified |"), "{line}");
    let claim = json["profile"]["crash"].as_str().unwrap();
    assert!(claim.contains("NOT certified"), "{claim}");
    // Issue 50: the guides quote this claim to say what `--start`
    // certifies for a non-durable server; they quote what reqkey writes.
    let quoted = "no crash scenario applied (needs durable: true, but /health declares \
                  durable: false): crash behaviour is NOT certified";
    assert!(line.contains(quoted), "{line}");
    for guide in [
        "docs/agent-server.md",
        "docs/store-adapter.md",
        "docs/scenario-format.md",
    ] {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(guide);
        let text = std::fs::read_to_string(&path).unwrap();
        let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            flat.contains(quoted),
            "{guide} does not quote the claim reqkey writes"
        );
    }
    // Issue 50: the replay line named the run's temporary port and left
    // `--start` out; it starts the target again on fresh ports.
    let replay = cert
        .lines()
        .find(|l| l.starts_with("| replay |"))
        .unwrap_or_default();
    assert!(
        replay.contains("--target 'store+http://127.0.0.1:{port}' --start ")
            && replay.contains("serve store --store memory --listen 127.0.0.1:{port}")
            && replay.contains("--seed 7"),
        "{replay}"
    );
    assert_eq!(
        json["target"]["start"][0]
            .as_str()
            .map(|c| c.contains("{port}")),
        Some(true),
        "{}",
        json["target"]
    );
}

#[test]
fn a_durable_started_store_is_certified_for_crashes_by_the_scenario_that_ran() {
    let db = std::env::temp_dir().join(format!("reqkey-crash-claim-{}.sqlite", std::process::id()));
    let _ = std::fs::remove_file(&db);
    let (code, cert, json) = certify_started("sqlite", &format!("sqlite:{}", db.display()));
    let _ = std::fs::remove_file(&db);
    assert_eq!(code, 0, "{cert}");
    let claim = json["profile"]["crash"].as_str().unwrap();
    assert!(
        claim.contains("crash scenario applied and passed")
            && claim.ends_with("crash behaviour (kill, pause, restart) is certified"),
        "{claim}"
    );
    let applied = json["profile"]["crashScenarios"]["applied"]
        .as_array()
        .unwrap();
    assert!(!applied.is_empty(), "{json}");
    for id in applied {
        let verdict = json["scenarios"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == *id)
            .map(|s| s["verdict"].clone());
        assert_eq!(verdict, Some(serde_json::json!("pass")), "{id}");
    }
}
