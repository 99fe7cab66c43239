//! `--start` does not trust what it started (issue 38): a target that
//! uses none of the started ports, or whose port is held by a process the
//! harness did not start, is a wiring error (exit 2) before any scenario;
//! a server that detaches into a new session is killed, restarted and
//! stopped all the same; SIGTERM mid-run stops the targets, writes the
//! reports with the reason and exits 130 without a panic; SIGKILL of the
//! judge leaves nothing running (the watchdog). Each started process
//! carries a marker in its environment; afterwards no live process may.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::processes::{self, assert_none_left, carrying};
use common::text;

fn marker(what: &str) -> String {
    processes::marker(&format!("wiring-{what}"))
}

/// A free loopback port (bound, then released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A correct store the test starts itself, on `port`, carrying `marker`.
fn other_store(marker: &str, port: u16) -> Child {
    let child = Command::new(env!("CARGO_BIN_EXE_reqkey"))
        .args(["serve", "store", "--store", "memory", "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .env("REQKEY_MARKER", marker)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "the other store did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    child
}

fn certify(args: &[&str], out: &std::path::Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_reqkey"))
        .arg("certify")
        .args(args)
        .args(["--patience", "1s", "--capacity-keys", "100"])
        .arg("--out")
        .arg(out)
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("reqkey-wiring-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[test]
fn a_target_that_uses_none_of_the_started_ports_is_a_wiring_error() {
    // The case: `--start 'sleep 600'` beside a server on P, and
    // `--target` naming P. The faults would reach `sleep`, not the target.
    let m = marker("unused-port");
    let port = free_port();
    let mut other = other_store(&m, port);
    let started = Instant::now();
    let o = certify(
        &[
            "--quiet",
            "--start",
            &format!(": {{port}}; REQKEY_MARKER={m} sleep 600"),
            "--target",
            &format!("store+http://127.0.0.1:{port}"),
        ],
        &scratch("unused-port"),
    );
    let _ = other.kill();
    let _ = other.wait();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("--target names none of the ports the harness chose for --start"),
        "{}",
        text(&o)
    );
    assert!(
        !text(&o).contains("passed"),
        "no scenario ran: {}",
        text(&o)
    );
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_none_left(&m);
}

#[test]
fn a_port_held_by_a_process_the_harness_did_not_start_is_a_wiring_error() {
    // The started command hands its port to a server that sheds the
    // harness's marker and detaches (as a container runtime's daemon
    // would): the listener is not one the harness started, so its faults
    // could not reach it. Exit 2 before any scenario, and the detached
    // server (found by the test's own marker) is not the harness's to stop.
    let m = marker("foreign-holder");
    let dir = scratch("foreign-holder");
    let o = certify(
        &[
            "--quiet",
            "--start",
            &format!(
                "REQKEY_MARKER={m} env -u REQKEY_OWNED_BY setsid -f {} serve store --store memory --listen 127.0.0.1:{{port}} >/dev/null 2>&1; exec env REQKEY_MARKER={m} sleep 600",
                env!("CARGO_BIN_EXE_reqkey")
            ),
            "--target",
            "store+http://127.0.0.1:{port}",
        ],
        &dir,
    );
    // The detached server is the test's to clean up.
    for pid in carrying(&m) {
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    }
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("which the harness did not start"),
        "{}",
        text(&o)
    );
    let json = std::fs::read_to_string(dir.join("results.json")).unwrap();
    assert!(json.contains("\"wiring\""), "{json}");
    assert_none_left(&m);
}

#[test]
fn a_detached_server_is_killed_restarted_and_stopped() {
    // `setsid -w`: the server runs in a new session (not the started
    // group); the crash scenario's kill and restart must reach it, and
    // nothing may be left afterwards. Before, the kill reached only the
    // `setsid` parent, the restarted copy failed to bind and the old
    // server was left running.
    let m = marker("detached");
    let db = std::env::temp_dir().join(format!("reqkey-wiring-{}.sqlite", std::process::id()));
    let _ = std::fs::remove_file(&db);
    let o = certify(
        &[
            "--quiet",
            "--seed",
            "3",
            "--start",
            &format!(
                "REQKEY_MARKER={m} setsid -w {} serve store --store sqlite:{} --listen 127.0.0.1:{{port}}",
                env!("CARGO_BIN_EXE_reqkey"),
                db.display()
            ),
            "--target",
            "store+http://127.0.0.1:{port}",
        ],
        &scratch("detached"),
    );
    let _ = std::fs::remove_file(&db);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("0 failed"), "{}", text(&o));
    assert_none_left(&m);
}

/// Starts a certify of a started store; returns it mid-run (the store
/// started and the report files created as the scenarios began).
fn long_certify(m: &str, dir: &std::path::Path) -> Child {
    let child = Command::new(env!("CARGO_BIN_EXE_reqkey"))
        .args(["certify", "--start"])
        .arg(format!(
            "REQKEY_MARKER={m} setsid -w {} serve store --store memory --listen 127.0.0.1:{{port}}",
            env!("CARGO_BIN_EXE_reqkey")
        ))
        .args(["--target", "store+http://127.0.0.1:{port}", "--out"])
        .arg(dir)
        .args(common::test_fuzz_budget(&["certify"]))
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while carrying(m).is_empty() {
        assert!(Instant::now() < deadline, "the store was not started");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Mid-run: the report files are created as the scenarios start.
    while !dir.join("results.json").exists() {
        assert!(Instant::now() < deadline, "the run did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(300));
    child
}

fn wait_bounded(child: &mut Child, secs: u64) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        assert!(Instant::now() < deadline, "reqkey did not stop");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn sigterm_mid_run_stops_the_target_writes_the_reason_and_does_not_panic() {
    let m = marker("sigterm");
    let dir = scratch("sigterm");
    let mut child = long_certify(&m, &dir);
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let status = wait_bounded(&mut child, 20);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(stderr.contains("interrupted by SIGTERM"), "{stderr}");
    let cert = std::fs::read_to_string(dir.join("certificate.md")).unwrap();
    assert!(
        cert.contains("NOT JUDGED") && cert.contains("received SIGTERM"),
        "{cert}"
    );
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("results.json")).unwrap()).unwrap();
    assert_eq!(json["indefinite"]["reason"], "interrupted", "{json}");
    assert_none_left(&m);
}

#[test]
fn sigkill_of_the_judge_leaves_nothing_running() {
    let m = marker("sigkill");
    let mut child = long_certify(&m, &scratch("sigkill"));
    child.kill().unwrap();
    let _ = child.wait();
    assert_none_left(&m);
}
