//! Reports bounded (issue 38): a store whose `/health` identity and every
//! error answer are 1 MB each made certificate.md 137 MB, junit.xml 218 MB
//! and stdout 136 MB. Every target-controlled text is now cut to
//! `report::bound::MAX_TEXT_BYTES` with its size shown, so each report
//! stays within a bound set by the suite, not by the target.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Write;
use std::net::TcpListener;
use std::process::Command;
use std::thread;

/// What the target says in each identity field and error message.
const ANSWER_BYTES: usize = 1 << 20;
/// The bound this test holds every output to (the suite has about a
/// hundred scenarios, each quoting a few texts of at most 4 KiB).
const MAX_FILE_BYTES: u64 = 2 << 20;

/// A store adapter whose `/health` names itself in 1 MB and whose every
/// call answers a well-formed error with a 1 MB message.
fn serve_loud_store() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let big = "N".repeat(ANSWER_BYTES);
    let health = serde_json::json!({
        "name": big, "version": big, "protocol": "reqkey-store/1", "durable": true
    })
    .to_string();
    let error = serde_json::json!({"error": {"code": "internal", "message": big}}).to_string();
    thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let (health, error) = (health.clone(), error.clone());
            thread::spawn(move || {
                while let Some((head, _)) = common::read_http_request(&mut conn) {
                    let body = if head.starts_with("GET /health ") {
                        &health
                    } else {
                        &error
                    };
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                        body.len()
                    );
                    if conn.write_all(answer.as_bytes()).is_err()
                        || conn.write_all(body.as_bytes()).is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    port
}

#[test]
fn a_target_answering_megabytes_gets_reports_of_bounded_size_that_say_what_was_cut() {
    let port = serve_loud_store();
    let dir = std::env::temp_dir().join(format!("reqkey-bounded-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let o = Command::new(env!("CARGO_BIN_EXE_reqkey"))
        .args(["certify", "--quiet", "--timeout-ms", "5000", "--target"])
        .arg(format!("store+http://127.0.0.1:{port}"))
        .arg("--out")
        .arg(&dir)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    // Failing every call is a failure of the contract (exit 1), judged.
    assert_eq!(o.status.code(), Some(1), "{}", common::text(&o));
    assert!(
        (o.stdout.len() as u64) < MAX_FILE_BYTES,
        "stdout holds {} bytes",
        o.stdout.len()
    );
    for file in ["certificate.md", "junit.xml", "results.json", "report.html"] {
        let size = std::fs::metadata(dir.join(file)).unwrap().len();
        assert!(size < MAX_FILE_BYTES, "{file} holds {size} bytes");
    }
    // What was cut says so, with its size.
    let certificate = std::fs::read_to_string(dir.join("certificate.md")).unwrap();
    assert!(
        certificate.contains("bytes, first 4096 shown)"),
        "no cut is announced in the certificate"
    );
    let results: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("results.json")).unwrap()).unwrap();
    let identity = results["target"]["health"].to_string();
    assert!(
        identity.len() < 8 * 1024 && identity.contains("bytes, first 4096 shown)"),
        "the identity is cut: {:.200}",
        identity
    );
}
