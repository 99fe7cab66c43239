//! No vacuous pass (issue 13, item 5): each guard shown refusing.
//!
//! - a step with no expectation is a load error (unless `expect: any`);
//! - a race whose trials never overlapped is indefinite (exit 2), and every
//!   report prints the overlap figure;
//! - a `--tag` / `--skip-tag` naming no tag of the loaded scenarios is an
//!   error (exit 2) naming it;
//! - `run` without `--target` says in its first line, and in every report,
//!   that it judged the built-in default target.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::PathBuf;

use common::{reqkey, text};

fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("reqkey-vacuity-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn scratch(name: &str, body: &str) -> PathBuf {
    let file = scratch_dir(name).join(format!("{name}.yaml"));
    std::fs::write(&file, body).unwrap();
    file
}

const NEVER_OVERLAPS: &str = "harness/tests/fixtures/vacuity/never-overlaps.yaml";

#[test]
fn a_step_without_an_expectation_is_a_load_error_naming_file_line_and_column() {
    let file = scratch(
        "no-expect",
        "id: x\nlevel: store\nsummary: s\nsteps:\n  - listRuns: {sessionId: $s}\n    expect: {ok: []}\n  - getCurrentRun: {sessionId: $s}\n",
    );
    let o = reqkey(&["run", file.to_str().unwrap(), "--target", "memory"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(2), "{out}");
    assert!(out.contains("no-expect.yaml:7:"), "{out}");
    assert!(
        out.contains("the `getCurrentRun` step has no expectation"),
        "{out}"
    );
    // Saying so on purpose is allowed, and the scenario then runs.
    let file = scratch(
        "expect-any",
        "id: x\nlevel: store\nsummary: s\nsteps:\n  - getCurrentRun: {sessionId: $s}\n    expect: any\n",
    );
    let o = reqkey(&["run", file.to_str().unwrap(), "--target", "memory"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

#[test]
fn a_race_that_never_overlapped_is_indefinite_in_every_report() {
    let dir = scratch_dir("reports");
    let (junit, json, report) = (
        dir.join("junit.xml"),
        dir.join("results.json"),
        dir.join("report.md"),
    );
    let o = reqkey(&[
        "run",
        NEVER_OVERLAPS,
        "--target",
        "reference-agent",
        "--junit",
        junit.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
        "--report",
        report.to_str().unwrap(),
    ]);
    let out = text(&o);
    // Every step passed, yet this is not a pass: exit 2.
    assert_eq!(o.status.code(), Some(2), "{out}");
    assert!(
        out.contains("INDEF fixture.race-that-never-races  (6 trials, 0 overlapped"),
        "{out}"
    );
    assert!(out.contains("no trial overlapped (0 of 6 trials"), "{out}");
    assert!(out.contains("1 indefinite"), "{out}");
    // Counted as what it is, not as a failure (issue 54).
    assert!(out.contains("0 passed, 0 failed, 1 indefinite"), "{out}");

    let md = std::fs::read_to_string(&report).unwrap();
    assert!(md.contains("**NOT JUDGED**"), "{md}");
    assert!(
        md.contains("| `fixture.race-that-never-races` | INDEFINITE | 6 (0 overlapped) |"),
        "{md}"
    );
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(results["exit_code"], 2);
    assert_eq!(results["counts"]["indefinite"], 1);
    assert_eq!(results["counts"]["passed"], 0);
    let scenario = &results["scenarios"][0];
    assert_eq!(scenario["verdict"], "indefinite");
    // One trial asked for, five more run looking for an overlap.
    assert_eq!(scenario["trials_run"], 6);
    assert_eq!(scenario["trials_with_groups"], 6);
    assert_eq!(scenario["trials_overlapped"], 0);
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(xml.contains("type=\"indefinite\""), "{xml}");
    assert!(xml.contains("no trial overlapped"), "{xml}");
}

#[test]
fn a_tag_filter_naming_no_tag_is_an_error() {
    for flag in ["--skip-tag", "--tag"] {
        let o = reqkey(&["run", "scenarios/store", "--target", "memory", flag, "rcae"]);
        let out = text(&o);
        assert_eq!(o.status.code(), Some(2), "{flag}: {out}");
        assert!(
            out.contains(&format!("{flag} rcae names a tag no loaded scenario has")),
            "{out}"
        );
        assert!(
            out.contains("known tags: ") && out.contains("race"),
            "{out}"
        );
    }
    // A tag that exists filters as before.
    let o = reqkey(&[
        "run",
        "scenarios/store",
        "--target",
        "memory",
        "--skip-tag",
        "race",
        "--quiet",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

#[test]
fn run_without_a_target_says_so_first_and_in_every_report() {
    let dir = scratch_dir("default-target");
    let (junit, json, report) = (
        dir.join("junit.xml"),
        dir.join("results.json"),
        dir.join("report.md"),
    );
    let o = reqkey(&[
        "run",
        "harness/tests/fixtures/reports/found.yaml",
        "--quiet",
        "--junit",
        junit.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
        "--report",
        report.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&o.stdout).to_string();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(
        stdout.lines().next(),
        Some("reqkey: judging target memory, the built-in reference store (no --target was given)"),
        "{stdout}"
    );
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(
        xml.contains("reqkey run memory (the built-in default: no --target was given)"),
        "{xml}"
    );
    assert!(
        xml.contains("name=\"target_defaulted\" value=\"true\""),
        "{xml}"
    );
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(results["target"]["spec"], "memory");
    assert_eq!(results["target"]["defaulted"], true);
    let md = std::fs::read_to_string(&report).unwrap();
    assert!(
        md.contains("| target | `memory`: the built-in default, no `--target` was given |"),
        "{md}"
    );

    // Named explicitly, the first line names it and nothing says "default".
    let o = reqkey(&[
        "run",
        "harness/tests/fixtures/reports/found.yaml",
        "--quiet",
        "--target",
        "memory",
        "--json",
        json.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&o.stdout).to_string();
    assert_eq!(stdout.lines().next(), Some("reqkey: judging target memory"));
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(results["target"]["defaulted"], false);
}
