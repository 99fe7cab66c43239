//! The suite is built into the binary: `reqkey run` and `reqkey certify`
//! work from a directory that holds no scenarios, the certificate says the
//! suite was the embedded one, and its digest is the `scenarios/`
//! directory's (so the embedded suite is the whole corpus, byte for byte).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use reqkey_harness::run::suite;
use reqkey_harness::targets::Level;

fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("reqkey-embedded-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The binary run from `dir`, which holds no scenarios.
fn reqkey_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_reqkey"))
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .output()
        .expect("reqkey runs")
}

fn repo_scenarios() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios")
}

#[test]
fn the_embedded_suite_is_the_scenarios_directory_byte_for_byte() {
    for level in [Level::Store, Level::Agent] {
        let (embedded, scenarios) = suite::embedded_suite(level).unwrap();
        let (disk, files) = suite::whole_suite(&repo_scenarios(), level).unwrap();
        assert_eq!(
            embedded.digest, disk.digest,
            "{level}: rebuild to embed the edited suite"
        );
        assert_eq!(embedded.files, files.len(), "{level}");
        assert_eq!(embedded.version, disk.version, "{level}");
        assert_eq!(scenarios.len(), files.len(), "{level}");
        assert!(embedded.embedded && !disk.embedded);
    }
}

#[test]
fn run_and_certify_work_from_a_directory_without_scenarios() {
    let dir = scratch_dir("anywhere");
    let run = reqkey_in(&dir, &["run", "--target", "memory", "--quiet"]);
    let out = String::from_utf8_lossy(&run.stdout);
    assert_eq!(
        run.status.code(),
        Some(0),
        "{out}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(out.trim_end().ends_with("0 failed"), "{out}");

    let cert = reqkey_in(
        &dir,
        &["certify", "--target", "memory", "--out", "cert", "--quiet"],
    );
    assert_eq!(
        cert.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&cert.stderr)
    );
    let md = std::fs::read_to_string(dir.join("cert/certificate.md")).unwrap();
    assert!(
        md.contains("`embedded/store` (built into this reqkey)"),
        "{md}"
    );
    let (info, _) = suite::embedded_suite(Level::Store).unwrap();
    assert!(md.contains(&info.digest), "{md}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("cert/results.json")).unwrap())
            .unwrap();
    assert_eq!(json["suite"]["embedded"], true);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_exported_suite_certifies_with_the_same_digest_and_says_it_came_from_disk() {
    let dir = scratch_dir("export");
    let export = reqkey_in(&dir, &["suite", "export", "copy"]);
    assert_eq!(
        export.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&export.stderr)
    );
    let cert = reqkey_in(
        &dir,
        &[
            "certify",
            "--target",
            "memory",
            "--scenarios",
            "copy",
            "--out",
            "cert",
            "--quiet",
        ],
    );
    assert_eq!(
        cert.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&cert.stderr)
    );
    let md = std::fs::read_to_string(dir.join("cert/certificate.md")).unwrap();
    let (info, _) = suite::embedded_suite(Level::Store).unwrap();
    assert!(md.contains(&info.digest), "{md}");
    assert!(
        md.contains("`copy/store`") && !md.contains("built into"),
        "{md}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_missing_suite_directory_is_exit_2_naming_it() {
    let dir = scratch_dir("missing");
    let cert = reqkey_in(
        &dir,
        &["certify", "--target", "memory", "--scenarios", "nope"],
    );
    assert_eq!(cert.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&cert.stderr).contains("nope"));
    std::fs::remove_dir_all(&dir).unwrap();
}
