//! The committed certificates under `reports/` are current: each was made
//! against the suite the repository holds now (same digest, same version),
//! is green, and its certificate agrees with its results.json. A scenario
//! edit without `reports/regenerate.sh` fails here.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use reqkey_harness::run::suite;
use reqkey_harness::targets::Level;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn certificates() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(repo().join("reports"))
        .expect("reports/ exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("certificate.md").is_file())
        .collect();
    dirs.sort();
    dirs
}

#[test]
fn every_reference_backend_has_a_committed_certificate() {
    let names: Vec<String> = certificates()
        .iter()
        .map(|d| d.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for backend in [
        "memory",
        "sqlite",
        "postgres",
        "redis",
        "memory-http",
        "reference-agent",
        "reference-agent-no-request-keys",
        "reference-agent-interrupt-previous",
        "reference-agent-crash",
        "reference-idem",
        "reference-idem-redis-crash",
    ] {
        assert!(names.contains(&backend.to_owned()), "{backend}: {names:?}");
    }
}

#[test]
fn the_profile_certificates_name_their_profiles() {
    for (dir, key, want) in [
        (
            "reference-agent",
            "supportsRequestKey",
            serde_json::json!(true),
        ),
        (
            "reference-agent",
            "concurrentEntry",
            serde_json::json!("reject"),
        ),
        (
            "reference-agent-no-request-keys",
            "supportsRequestKey",
            serde_json::json!(false),
        ),
        (
            "reference-agent-interrupt-previous",
            "concurrentEntry",
            serde_json::json!("interrupt_previous"),
        ),
    ] {
        let path = repo().join("reports").join(dir).join("results.json");
        let results: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(results["profile"][key], want, "{dir}: profile.{key}");
        assert_eq!(results["profile"]["source"], "declared", "{dir}");
        let cert = std::fs::read_to_string(repo().join("reports").join(dir).join("certificate.md"))
            .unwrap();
        assert!(
            cert.contains("| profile | "),
            "{dir}: the certificate names no profile"
        );
    }
}

#[test]
fn every_committed_certificate_matches_the_current_suite() {
    let regenerate = "run reports/regenerate.sh and commit reports/";
    for dir in certificates() {
        let name = dir.display();
        let results: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("results.json")).unwrap())
                .unwrap();
        assert_eq!(results["schema"], "reqkey-results/1", "{name}");
        assert_eq!(
            results["certification"], true,
            "{name}: not made by certify"
        );
        let source = results["suite"]["source"].as_str().unwrap();
        let folder = Path::new(source).file_name().and_then(|f| f.to_str());
        let level = Level::ALL
            .into_iter()
            .find(|l| Some(l.info().suite_dir) == folder)
            .unwrap_or_else(|| panic!("{name}: suite source {source} ({folder:?})"));
        let (current, _) = suite::whole_suite(&repo().join("scenarios"), level).unwrap();
        let digest = results["suite"]["digest"].as_str().unwrap();
        assert_eq!(
            digest, current.digest,
            "{name} is stale: it certifies another {level} suite; {regenerate}"
        );
        assert_eq!(
            results["suite"]["version"].as_str(),
            current.version.as_deref(),
            "{name}: suite version; {regenerate}"
        );
        let cert = std::fs::read_to_string(dir.join("certificate.md")).unwrap();
        assert!(
            cert.contains(&format!("| suite digest | `{digest}` |")),
            "{name}: certificate.md and results.json disagree; {regenerate}"
        );
        let last = cert.lines().last().unwrap_or("");
        assert_eq!(
            last,
            results["closing_line"].as_str().unwrap(),
            "{name}: certificate.md's last line"
        );
        assert_eq!(
            results["exit_code"], 0,
            "{name}: a reference backend's certificate must be green"
        );
        let source = results["profile"]["source"].as_str();
        assert!(
            matches!(source, Some("declared" | "fixed")),
            "{name}: a reference certificate certifies the profile its target declares ({source:?})"
        );
        let junit = std::fs::read_to_string(dir.join("junit.xml")).unwrap();
        let report = quick_junit::Report::deserialize_from_str(&junit).unwrap();
        // The fuzz pass, when it ran, is a test case of its own (issue 51).
        let fuzz_case = u64::from(matches!(
            results["fuzz"]["verdict"].as_str(),
            Some("passed" | "failed" | "error")
        ));
        assert_eq!(
            report.tests as u64,
            results["counts"]["total"].as_u64().unwrap() + fuzz_case,
            "{name}: junit.xml"
        );
    }
}
