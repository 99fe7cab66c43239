//! The Nagle + delayed-ACK warning (issue 41) against a real socket.
//!
//! A tiny `reqkey-store/1` stand-in writes each answer's head and body in
//! two sends, without TCP_NODELAY, as Python's `http.server` does: every
//! report of `reqkey run` names the stall and its fix, on stderr and in
//! the JSON report. The same server writing each answer in one send
//! draws no warning (the check can fail).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::time::Duration;

/// Serves every request with `{"ok": null}` (`/health` with a store
/// identity), the head and the body in two sends when `split`.
fn store_stand_in(split: bool) -> u16 {
    stand_in(split, false)
}

/// The same for the idem level: `/.reqkey/health` declares the draft's
/// profile, every other request is answered 200 `{"ok":true}`.
fn idem_stand_in(split: bool) -> u16 {
    stand_in(split, true)
}

fn stand_in(split: bool, idem: bool) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            std::thread::spawn(move || serve(conn, split, idem));
        }
    });
    port
}

fn serve(mut conn: TcpStream, split: bool, idem: bool) {
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let idem_health = serde_json::json!({
        "protocol": "reqkey-idem/1",
        "implementation": {"name": "nagle", "version": "0", "storage": "memory"},
        "profile": reqkey_model::idem_profile::IdemProfile::draft_default().to_json(),
    })
    .to_string();
    while let Some((head, _)) = common::read_http_request(&mut conn) {
        let body = if idem && head.starts_with("GET /.reqkey/health ") {
            idem_health.as_str()
        } else if idem {
            r#"{"ok":true}"#
        } else if head.starts_with("GET /health ") {
            r#"{"name":"nagle","version":"0","protocol":"reqkey-store/1","durable":false}"#
        } else {
            r#"{"ok":null}"#
        };
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        let sent = if split {
            conn.write_all(head.as_bytes())
                .and_then(|()| conn.write_all(body.as_bytes()))
        } else {
            conn.write_all(format!("{head}{body}").as_bytes())
        };
        if sent.is_err() {
            return;
        }
    }
}

/// Twenty-four reads of a session that does not exist: answered `null`.
fn scenario() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("reqkey-nagle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut text = String::from(
        "id: nagle.reads\nlevel: store\nsummary: reads of an unknown session\nchecks: [store.reads.unknown-session]\nsteps:\n",
    );
    for _ in 0..24 {
        text.push_str("  - getCurrentRun: {sessionId: $s}\n    expect: {ok: null}\n    judges: [store.reads.unknown-session]\n");
    }
    let file = dir.join("reads.yaml");
    std::fs::write(&file, text).unwrap();
    file
}

/// Twenty-four GETs of an idem app's route, each answered 200.
fn idem_scenario() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("reqkey-nagle-idem-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut text =
        String::from("id: nagle.idem-reads\nlevel: idem\nsummary: reads of a route\nchecks: [idem.key.missing-optional]\nsteps:\n");
    for _ in 0..24 {
        text.push_str("  - http: {method: GET, path: /orders}\n    expect: {status: 200}\n    judges: [idem.key.missing-optional]\n");
    }
    let file = dir.join("reads.yaml");
    std::fs::write(&file, text).unwrap();
    file
}

/// Runs the reads against the stand-in; stderr, the JSON report, and the
/// JUnit, Markdown and HTML reports' text.
fn run(port: u16, name: &str) -> (String, serde_json::Value, String) {
    run_level(&format!("store+http://127.0.0.1:{port}"), &scenario(), name)
}

fn run_level(
    target: &str,
    scenario: &std::path::Path,
    name: &str,
) -> (String, serde_json::Value, String) {
    let file = |ext: &str| {
        std::env::temp_dir().join(format!("reqkey-nagle-{}-{name}.{ext}", std::process::id()))
    };
    let (json, junit, md, html) = (file("json"), file("xml"), file("md"), file("html"));
    let o = Command::new(env!("CARGO_BIN_EXE_reqkey"))
        .args([
            "run",
            scenario.to_str().unwrap(),
            "--target",
            target,
            "--json",
            json.to_str().unwrap(),
            "--junit",
            junit.to_str().unwrap(),
            "--report",
            md.to_str().unwrap(),
            "--html",
            html.to_str().unwrap(),
        ])
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    let report = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let mut others = String::new();
    for f in [&junit, &md, &html] {
        others.push_str(&std::fs::read_to_string(f).unwrap());
    }
    for f in [&json, &junit, &md, &html] {
        let _ = std::fs::remove_file(f);
    }
    (stderr, report, others)
}

#[test]
fn answers_written_in_two_sends_without_nodelay_are_named_with_the_fix() {
    let (stderr, report, others) = run(store_stand_in(true), "split");
    assert_eq!(
        others.matches("nagle_stall").count(),
        4,
        "JUnit (a property), Markdown (a line), HTML (code and data attribute): {others}"
    );
    assert!(stderr.contains("warning[nagle_stall]"), "{stderr}");
    assert!(stderr.contains("TCP_NODELAY"), "{stderr}");
    assert_eq!(report["warnings"][0]["code"], "nagle_stall", "{report}");
    assert!(report["warnings"][0]["fix"]
        .as_str()
        .unwrap()
        .contains("one send"));
}

#[test]
fn answers_written_in_one_send_draw_no_warning() {
    let (stderr, report, others) = run(store_stand_in(false), "whole");
    assert!(!stderr.contains("nagle_stall"), "{stderr}");
    assert!(!others.contains("nagle_stall"), "{others}");
    assert!(report.get("warnings").is_none(), "{report}");
}

#[test]
fn the_idem_level_names_the_stall_too() {
    let port = idem_stand_in(true);
    let (stderr, report, others) = run_level(
        &format!("idem+http://127.0.0.1:{port}"),
        &idem_scenario(),
        "idem-split",
    );
    assert!(stderr.contains("warning[nagle_stall]"), "{stderr}");
    assert_eq!(report["warnings"][0]["code"], "nagle_stall", "{report}");
    assert_eq!(others.matches("nagle_stall").count(), 4, "{others}");
    let port = idem_stand_in(false);
    let (stderr, report, _) = run_level(
        &format!("idem+http://127.0.0.1:{port}"),
        &idem_scenario(),
        "idem-whole",
    );
    assert!(!stderr.contains("nagle_stall"), "{stderr}");
    assert!(report.get("warnings").is_none(), "{report}");
}
