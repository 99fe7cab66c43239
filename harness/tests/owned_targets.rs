//! `--start CMD`: the harness starts the target, waits a bounded time for
//! it to answer, judges it, and stops what it started on every way out —
//! a verdict, a target that never answers, a command that exits, and
//! Ctrl-C (issue 26). Each started process carries a marker in its
//! environment; after `reqkey` exits, no live process may carry it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::processes::{self, assert_none_left, carrying};
use common::{reqkey, text};

fn marker(what: &str) -> String {
    processes::marker(&format!("owned-{what}"))
}

fn serve_store(marker: &str) -> String {
    format!(
        "REQKEY_MARKER={marker} exec {} serve store --store memory --listen 127.0.0.1:{{port}}",
        env!("CARGO_BIN_EXE_reqkey")
    )
}

#[test]
fn a_started_store_is_judged_and_stopped() {
    let m = marker("green");
    let o = reqkey(&[
        "run",
        "--start",
        &serve_store(&m),
        "--target",
        "store+http://127.0.0.1:{port}",
        "--quiet",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_none_left(&m);
}

#[test]
fn replicas_are_started_each_on_its_own_port_and_all_stopped() {
    let m = marker("replicas");
    let cmd = format!(
        "REQKEY_MARKER={m} exec {} serve agent --store memory --listen 127.0.0.1:{{port}}",
        env!("CARGO_BIN_EXE_reqkey")
    );
    // Two independent agents over separate memory stores are not one
    // deployment: the cross-replica scenarios fail them (exit 1). What is
    // checked here is that both were started, judged and stopped.
    let o = reqkey(&[
        "run",
        "--start",
        &cmd,
        "--start",
        &cmd,
        "--target",
        "http://127.0.0.1:{port0},http://127.0.0.1:{port1}",
        "--quiet",
    ]);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
    assert_none_left(&m);
}

#[test]
fn a_target_that_never_answers_is_no_verdict_and_is_stopped() {
    let m = marker("silent");
    let dir = std::env::temp_dir().join(&m);
    let o = reqkey(&[
        "certify",
        "--start",
        &format!(": {{port}}; REQKEY_MARKER={m} sleep 300 & REQKEY_MARKER={m} sleep 300; wait"),
        "--target",
        "store+http://127.0.0.1:{port}",
        "--start-timeout-ms",
        "1500",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("did not answer within --start-timeout-ms"),
        "{}",
        text(&o)
    );
    assert!(std::fs::read_to_string(dir.join("certificate.md"))
        .unwrap()
        .contains("NOT JUDGED"));
    assert_none_left(&m);
}

/// Issue 50: a command without `{port}` listened elsewhere, and the run
/// waited `--start-timeout-ms` (30 s by default) to say the target was
/// unreachable. It is refused before anything starts, naming it.
#[test]
fn a_command_that_names_no_port_is_refused_at_once_naming_it() {
    let m = marker("no-port");
    let started = Instant::now();
    let o = reqkey(&[
        "run",
        "--start",
        &format!("REQKEY_MARKER={m} sleep 300 --token HUNTER2-no-port"),
        "--target",
        "store+http://127.0.0.1:{port}",
        "--start-timeout-ms",
        "60000",
        "--quiet",
    ]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(2), "{out}");
    assert!(out.contains("--start command 1"), "{out}");
    assert!(out.contains("names no port"), "{out}");
    assert!(out.contains("write `{port}` where it listens"), "{out}");
    assert!(
        !out.contains("HUNTER2"),
        "the command is named redacted: {out}"
    );
    assert!(
        !out.contains("did not answer"),
        "refused before waiting: {out}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "not waited out"
    );
    // Nothing was started.
    assert!(carrying(&m).is_empty());
}

#[test]
fn a_command_that_exits_is_named_at_once() {
    let started = Instant::now();
    let o = reqkey(&[
        "run",
        "--start",
        "echo no adapter for {port} here >&2; exit 3",
        "--target",
        "store+http://127.0.0.1:{port}",
        "--start-timeout-ms",
        "60000",
        "--quiet",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("exited"), "{}", text(&o));
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "not waited out"
    );
}

#[test]
fn ctrl_c_stops_what_was_started() {
    let m = marker("interrupted");
    let mut child = Command::new(env!("CARGO_BIN_EXE_reqkey"))
        .args([
            "run",
            "--start",
            &format!(": {{port}}; REQKEY_MARKER={m} sleep 300"),
            "--target",
            "store+http://127.0.0.1:{port}",
            "--start-timeout-ms",
            "120000",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while carrying(&m).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!carrying(&m).is_empty(), "the command was started");
    Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "reqkey did not stop on SIGINT");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(130));
    assert_none_left(&m);
}
