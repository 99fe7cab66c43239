//! The numbers of a scenario's bodies reach the target exactly as the
//! file spells them (issue 15, F8: 2^64 went out as 1.8e19 and `1e400` was
//! refused at load). A recording server stands in for the target at both
//! levels; `reqkey run` sends the scenario; the bytes it received are
//! compared with the file.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

/// The numbers under test, as YAML flow and as the JSON they must become.
const NUMBERS_YAML: &str = "{big: 18446744073709551616, huge: 1e400, dec: 1.50, exp: 2E+3, neg: -0, tiny: 5e-324, list: [1.0, 100000000000000000000000000001]}";
const NUMBERS_JSON: &str = r#"{"big":18446744073709551616,"dec":1.50,"exp":2E+3,"huge":1e400,"list":[1.0,100000000000000000000000000001],"neg":-0,"tiny":5e-324}"#;

/// A server that answers `/health` with `health` and every other request
/// with `answer`, and keeps the bodies it received.
fn record(
    health: &'static str,
    answer: (&'static str, &'static str),
) -> (u16, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&bodies);
    thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            let kept = Arc::clone(&kept);
            thread::spawn(move || serve(conn, health, answer, &kept));
        }
    });
    (port, bodies)
}

fn serve(
    mut conn: TcpStream,
    health: &str,
    (status, answer): (&str, &str),
    kept: &Mutex<Vec<String>>,
) {
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    while let Some((head, body)) = common::read_http_request(&mut conn) {
        let (status, answer) = if head.starts_with("GET /health ") {
            ("200 OK", health)
        } else {
            kept.lock()
                .unwrap()
                .push(String::from_utf8_lossy(&body).into_owned());
            (status, answer)
        };
        let reply = format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{answer}",
            answer.len()
        );
        if conn.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}

fn run(name: &str, scenario: &str, target: &str) -> String {
    let dir = std::env::temp_dir().join(format!("reqkey-numbers-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file: PathBuf = dir.join("numbers.yaml");
    std::fs::write(&file, scenario).unwrap();
    // REQKEY_BIN runs another build (an older one, to see this fail).
    let bin = std::env::var_os("REQKEY_BIN").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_reqkey")),
        PathBuf::from,
    );
    let out = Command::new(bin)
        .args([
            "run",
            file.to_str().unwrap(),
            "--target",
            target,
            "--quiet",
            "--timeout-ms",
            "5000",
        ])
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let output = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{name}: {output}");
    output
}

#[test]
fn store_args_go_on_the_wire_as_written() {
    let (port, bodies) = record(
        r#"{"name":"recorder","version":"0","protocol":"reqkey-store/1"}"#,
        ("200 OK", r#"{"ok":null}"#),
    );
    let scenario = format!(
        "id: numbers.store\nlevel: store\nsummary: numbers as written\nsteps:\n  - commitRunStart: {{sessionId: s, runId: r, expectedCurrentRunId: null, input: {NUMBERS_YAML}}}\n    expect: any\n  - rpc: {{op: getRun, args: {{sessionId: s, runId: r, n: 1.50}}}}\n    expect: any\n"
    );
    run(
        "store",
        &scenario,
        &format!("store+http://127.0.0.1:{port}"),
    );
    let bodies = bodies.lock().unwrap();
    assert_eq!(bodies.len(), 2, "{bodies:?}");
    assert!(
        bodies[0].contains(&format!(r#""input":{NUMBERS_JSON}"#)),
        "{}",
        bodies[0]
    );
    assert!(bodies[1].contains(r#""n":1.50"#), "{}", bodies[1]);
}

#[test]
fn agent_json_bodies_go_on_the_wire_as_written() {
    let (port, bodies) = record(
        r#"{"name":"recorder","version":"0","protocol":"reqkey-agent/1","supportsRequestKey":true,"concurrentEntry":"reject"}"#,
        ("201 Created", r#"{"runId":"r","status":"running"}"#),
    );
    let scenario = format!(
        "id: numbers.agent\nlevel: agent\nsummary: numbers as written\nsteps:\n  - http: {{method: POST, path: /sessions/s/start, json: {{input: {NUMBERS_YAML}}}}}\n    expect: any\n"
    );
    run("agent", &scenario, &format!("http://127.0.0.1:{port}"));
    let bodies = bodies.lock().unwrap();
    assert_eq!(*bodies, vec![format!(r#"{{"input":{NUMBERS_JSON}}}"#)]);
}
