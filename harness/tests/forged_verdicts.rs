//! A verdict that cannot be forged, leaks no secret and is never hidden
//! behind "no verdict" (issue 25). Each case runs the real `reqkey` binary
//! against a small adapter of this file's own over loopback:
//!
//! - a hostile adapter puts newlines, backticks, pipes, HTML, ANSI escapes
//!   and bidi controls in every field it controls (its `/health`, its
//!   answers); every report and the terminal must keep the harness's own
//!   verdict lines and show the target's text inert;
//! - a planted secret in the `--target` URL must reach no output;
//! - an adapter that answers `{"ok": A, "ok": B}` over a correct store is a
//!   protocol violation (it used to be read last-wins and certified green);
//! - a target that fails scenarios and leaves others unjudged exits 1, not 2;
//! - the replay line printed for the embedded suite works as pasted.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Write;
use std::net::TcpListener;
use std::path::Path;
use std::sync::Arc;
use std::thread;

use common::{read_http_request, reqkey, text};
use reqkey_model::seq::answer_to_wire;
use reqkey_reference::store::{dispatch_wire, MemoryStore, SessionStateStore};
use serde_json::{json, Value};

/// Everything a hostile target might try, in one string.
const HOSTILE: &str = "evil\n**CONFORMS**: every scenario passed\n\n| verdict | CONFORMS |\n\
    ```\n</code><script>alert(1)</script><!-- `` | \u{1b}[2J\u{1b}[32mPASS\u{202e}fdp.exe\u{2066}";

/// How the adapter answers.
#[derive(Clone, Copy)]
enum Mode {
    /// `/health` and every answer carry [`HOSTILE`]; answers are errors.
    Hostile,
    /// A correct memory store behind it, every `ok` member written twice.
    RepeatedMember,
    /// A correct memory store behind it, answers as they should be.
    Correct,
    /// An agent server whose `/health` declares no profile.
    AgentWithoutProfile,
}

/// Serves a `reqkey-store/1` adapter on 127.0.0.1:0; its threads die with
/// the test process. Returns the port.
fn adapter(mode: Mode) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let store: Arc<dyn SessionStateStore> = Arc::new(MemoryStore::new());
    let rt = Arc::new(
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap(),
    );
    thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let store = Arc::clone(&store);
            let rt = Arc::clone(&rt);
            thread::spawn(move || {
                while let Some((head, body)) = read_http_request(&mut conn) {
                    let body = if head.starts_with("GET /health") {
                        let name = match mode {
                            Mode::Hostile => HOSTILE,
                            _ => "forged-verdicts-adapter",
                        };
                        let protocol = match mode {
                            Mode::AgentWithoutProfile => "reqkey-agent/1",
                            _ => "reqkey-store/1",
                        };
                        json!({"name": name, "version": "1", "protocol": protocol}).to_string()
                    } else {
                        let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                        match mode {
                            Mode::Hostile => {
                                json!({"error": {"kind": "internal", "message": HOSTILE}})
                                    .to_string()
                            }
                            Mode::AgentWithoutProfile => "{}".to_owned(),
                            Mode::RepeatedMember | Mode::Correct => {
                                let answer = answer_to_wire(
                                    &rt.block_on(dispatch_wire(store.as_ref(), &request)),
                                );
                                match (mode, answer.get("ok")) {
                                    (Mode::RepeatedMember, Some(ok)) => {
                                        format!("{{\"ok\":{ok},\"ok\":{ok}}}")
                                    }
                                    _ => answer.to_string(),
                                }
                            }
                        }
                    };
                    let response = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if conn.write_all(response.as_bytes()).is_err() {
                        break;
                    }
                }
            });
        }
    });
    port
}

/// Every file `certify` wrote, by name.
fn outputs(dir: &Path) -> Vec<(String, String)> {
    ["certificate.md", "report.html", "junit.xml", "results.json"]
        .iter()
        .map(|f| {
            let text = std::fs::read_to_string(dir.join(f))
                .unwrap_or_else(|e| panic!("{f} was not written: {e}"));
            ((*f).to_owned(), text)
        })
        .collect()
}

fn active_characters(text: &str) -> Vec<char> {
    text.chars()
        .filter(|c| {
            (c.is_control() && !matches!(c, '\n' | '\r' | '\t'))
                || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
        })
        .collect()
}

#[test]
fn a_hostile_target_cannot_write_its_own_verdict_into_any_report() {
    let port = adapter(Mode::Hostile);
    let dir = tempfile_dir("hostile");
    let target = format!("store+http://127.0.0.1:{port}");
    let o = reqkey(&[
        "certify",
        "--target",
        &target,
        "--out",
        dir.to_str().unwrap(),
        "--quiet",
        "--timeout-ms",
        "5000",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    for (name, body) in outputs(&dir)
        .into_iter()
        .chain([("terminal".to_owned(), text(&o))])
    {
        assert!(
            active_characters(&body).is_empty(),
            "{name}: control or bidi characters reached it: {:?}",
            active_characters(&body)
        );
        // JSON is data (its strings may say anything, escaped as JSON) and
        // a terminal renders no markup: only control characters act there.
        let outside = if name.ends_with(".md") {
            outside_code(&body)
        } else if name.ends_with(".json") || name == "terminal" {
            String::new()
        } else {
            body.clone()
        };
        assert!(
            !outside.contains("<script>"),
            "{name}: raw markup from the target"
        );
    }
    let md = std::fs::read_to_string(dir.join("certificate.md")).unwrap();
    // The verdict lines are the harness's own: one bold verdict line, and no
    // line a target wrote.
    let bold: Vec<&str> = md.lines().filter(|l| l.starts_with("**")).collect();
    assert_eq!(bold.len(), 1, "{bold:#?}");
    assert!(bold[0].starts_with("**DOES NOT CONFORM**"), "{}", bold[0]);
    assert!(
        !md.lines()
            .any(|l| l.starts_with("| verdict") || l.starts_with("</code>")),
        "a forged line in the certificate"
    );
    // Every line of the target's text stays on the line that quotes it: the
    // identity row is one table row.
    let identity: Vec<&str> = md.lines().filter(|l| l.contains("identity")).collect();
    assert_eq!(identity.len(), 1, "{identity:#?}");
    assert!(identity[0].starts_with("| identity") && identity[0].ends_with('|'));
    assert!(
        identity[0].contains("\\n**CONFORMS**"),
        "shown, not acted on"
    );
    // Fenced blocks are closed only by the harness's fences.
    let fences = md.lines().filter(|l| l.starts_with("```")).count();
    assert_eq!(fences % 2, 0, "an unbalanced fence");
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(
        html.contains("&lt;script&gt;"),
        "the target's markup shown escaped"
    );
    let junit = std::fs::read_to_string(dir.join("junit.xml")).unwrap();
    assert!(junit.contains("&lt;script&gt;") || junit.contains("&lt;/code&gt;"));
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("results.json")).unwrap()).unwrap();
    assert_eq!(json["exit_code"], 1, "{json:#}");
}

#[test]
fn a_secret_in_the_target_reaches_no_output() {
    const SECRET: &str = "s3cr3tPLANTED";
    let port = adapter(Mode::Correct);
    for target in [
        format!("store+http://user:{SECRET}@127.0.0.1:{port}"),
        format!("store+http://{SECRET}@127.0.0.1:{port}"),
    ] {
        let dir = tempfile_dir("secret");
        let o = reqkey(&[
            "certify",
            "--target",
            &target,
            "--out",
            dir.to_str().unwrap(),
            "--quiet",
        ]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        for (name, body) in outputs(&dir)
            .into_iter()
            .chain([("terminal".to_owned(), text(&o))])
        {
            assert!(!body.contains(SECRET), "{name} carries the secret");
            if name != "terminal" {
                assert!(
                    body.contains("***@127.0.0.1"),
                    "{name} names the target redacted"
                );
            }
        }
    }
    // A target that cannot be parsed or opened names itself redacted too.
    for target in [
        format!("mongodb://u:{SECRET}@127.0.0.1/x"),
        format!("postgres://u:{SECRET}@127.0.0.1:1/x"),
    ] {
        let dir = tempfile_dir("secret-down");
        let o = reqkey(&[
            "run",
            "--target",
            &target,
            "--json",
            dir.join("r.json").to_str().unwrap(),
            "--quiet",
        ]);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        assert!(!text(&o).contains(SECRET), "{}", text(&o));
        if let Ok(json) = std::fs::read_to_string(dir.join("r.json")) {
            assert!(!json.contains(SECRET), "{json}");
        }
    }
}

#[test]
fn a_repeated_member_is_a_protocol_violation_not_a_pass() {
    let port = adapter(Mode::RepeatedMember);
    let dir = tempfile_dir("repeated");
    let o = reqkey(&[
        "run",
        "--target",
        &format!("store+http://127.0.0.1:{port}"),
        "--json",
        dir.join("r.json").to_str().unwrap(),
        "--quiet",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("is repeated in one object"),
        "named as what it is: {}",
        text(&o)
    );
    // The same store, answered once per member, is green.
    let port = adapter(Mode::Correct);
    let o = reqkey(&[
        "run",
        "--target",
        &format!("store+http://127.0.0.1:{port}"),
        "--quiet",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

#[test]
fn the_replay_line_of_the_embedded_suite_works_as_pasted() {
    let dir = tempfile_dir("replay");
    let o = reqkey(&[
        "certify",
        "--target",
        "broken-memory:no-key-rule",
        "--out",
        dir.to_str().unwrap(),
        "--quiet",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let md = std::fs::read_to_string(dir.join("certificate.md")).unwrap();
    let line = md
        .lines()
        .find(|l| l.starts_with("Replay: `reqkey run "))
        .expect("a replay line");
    let command = line.trim_start_matches("Replay: `").trim_end_matches('`');
    assert!(command.contains("--scenario "), "{command}");
    let args: Vec<&str> = command.split_whitespace().skip(1).collect();
    let o = reqkey(&args);
    assert_eq!(
        o.status.code(),
        Some(1),
        "the replay fails as the certificate did: {}",
        text(&o)
    );
    assert!(text(&o).contains("1 failed"), "{}", text(&o));
}

#[test]
fn every_exit_path_writes_its_reports_with_the_reason() {
    let port = adapter(Mode::AgentWithoutProfile);
    let target = format!("http://127.0.0.1:{port}");
    let dir = tempfile_dir("no-profile");
    let o = reqkey(&[
        "certify",
        "--target",
        &target,
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    for (name, body) in outputs(&dir) {
        assert!(body.contains("no_profile"), "{name} says why: {body}");
    }
    let md = std::fs::read_to_string(dir.join("certificate.md")).unwrap();
    assert!(md.contains("**NOT JUDGED**"), "{md}");
    let json = dir.join("run.json");
    let o = reqkey(&["run", "--target", &target, "--json", json.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(std::fs::read_to_string(&json)
        .unwrap()
        .contains("no_profile"));
    // A report that cannot be written is exit 2, and nothing claims it was.
    let o = reqkey(&[
        "certify",
        "--target",
        "memory",
        "--out",
        "/proc/reqkey-cannot-write",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(!text(&o).contains("wrote"), "{}", text(&o));
}

/// A Markdown text without its fenced blocks and code spans (CommonMark: a
/// span opened by N backticks ends at the next run of exactly N): what a
/// renderer would read as markup.
fn outside_code(md: &str) -> String {
    let mut out = String::new();
    let mut fence: Option<usize> = None;
    for line in md.lines() {
        let ticks = line.chars().take_while(|c| *c == '`').count();
        match fence {
            Some(n) if ticks >= n && line.trim_start_matches('`').trim().is_empty() => fence = None,
            Some(_) => {}
            None if ticks >= 3 => fence = Some(ticks),
            None => {
                let chars: Vec<char> = line.chars().collect();
                let mut i = 0;
                while i < chars.len() {
                    if chars[i] != '`' {
                        out.push(chars[i]);
                        i += 1;
                        continue;
                    }
                    let run = chars[i..].iter().take_while(|c| **c == '`').count();
                    let mut j = i + run;
                    let mut closed = None;
                    while j < chars.len() {
                        let r = chars[j..].iter().take_while(|c| **c == '`').count();
                        if r == run {
                            closed = Some(j + r);
                            break;
                        }
                        j += r.max(1);
                    }
                    match closed {
                        Some(end) => i = end,
                        None => {
                            out.extend(&chars[i..i + run]);
                            i += run;
                        }
                    }
                }
                out.push('\n');
            }
        }
    }
    out
}

fn tempfile_dir(what: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "reqkey-forged-{what}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
