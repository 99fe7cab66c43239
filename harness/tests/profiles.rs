//! Profiles through the binary (SPEC 7, 8): `reqkey run` and `certify`
//! name the profile they certify in their first lines and in every report,
//! say which scenarios did not apply, refuse (exit 2) a target whose
//! profile cannot be read unless `--profile` states one, and mark a stated
//! profile as stated.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::PathBuf;

use common::{reqkey, text};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("reqkey-profiles-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn run_names_the_declared_profile_and_what_did_not_apply_in_its_first_lines() {
    let o = reqkey(&[
        "run",
        "--target",
        "reference-agent:no-request-keys",
        "--tag",
        "smoke",
        "--seed",
        "1",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    let mut lines = stdout.lines();
    assert_eq!(
        lines.next(),
        Some("reqkey: judging target reference-agent:no-request-keys")
    );
    assert_eq!(
        lines.next(),
        Some("reqkey: profile: supportsRequestKey: false, concurrentEntry: reject (declared by /health)")
    );
    assert_eq!(
        lines.next(),
        Some("reqkey: crash: the harness did not start the target (no --start): crash behaviour is NOT certified")
    );
    let second = lines.next().unwrap();
    assert!(
        second.starts_with("reqkey: ")
            && second.contains("scenarios do not apply to this profile")
            && second.contains("require supportsRequestKey: true"),
        "{second}"
    );
}

/// A `reqkey-agent/1` server whose `/health` declares no profile (no
/// `supportsRequestKey`) and that answers 404 to everything else; it
/// serves until the test process ends.
fn agent_without_profile() -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut stream = stream;
                let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(5)));
                let mut buf = [0u8; 8192];
                let mut head = Vec::new();
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let (status, body) = if head.starts_with(b"GET /health ") {
                    (
                        "200 OK",
                        r#"{"name":"bare","version":"1","protocol":"reqkey-agent/1"}"#,
                    )
                } else {
                    ("404 Not Found", r#"{"code":"not_found","message":"no"}"#)
                };
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    url
}

#[test]
fn an_agent_whose_health_declares_no_profile_is_exit_2_unless_one_is_stated() {
    let url = agent_without_profile();
    let o = reqkey(&["run", "scenarios/agent/health.yaml", "--target", &url]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("declares no profile"), "{}", text(&o));
    // Stated, the run is judged: this /health is not an agent's, a verdict.
    let o = reqkey(&[
        "run",
        "scenarios/agent/health.yaml",
        "--target",
        &url,
        "--profile",
        "default",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("(stated with --profile, not declared)"),
        "{}",
        text(&o)
    );
}

#[test]
fn bad_profile_flags_and_a_profile_for_a_store_are_exit_2() {
    for args in [
        ["run", "--target", "reference-agent", "--profile", "queue"],
        ["run", "--target", "memory", "--profile", "default"],
    ] {
        let o = reqkey(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
    }
    let o = reqkey(&["run", "--target", "memory", "--profile", "default"]);
    assert!(
        text(&o).contains("a store's profile is fixed"),
        "{}",
        text(&o)
    );
}

#[test]
fn certify_carries_the_profile_in_the_certificate_junit_and_json() {
    let out = scratch("ignored");
    let o = reqkey(&[
        "certify",
        "--target",
        "reference-agent:no-request-keys",
        "--out",
        out.to_str().unwrap(),
        "--seed",
        "3",
        "--quiet",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let cert = std::fs::read_to_string(out.join("certificate.md")).unwrap();
    for needle in [
        // In code spans: the profile quotes what the target declared.
        "| profile | `supportsRequestKey: false, concurrentEntry: reject (declared by /health)` |",
        "## Not applicable to this profile",
        "| `agent.attach-running` | `supportsRequestKey: true` |",
        "`agent.keys-ignored.keyed-behaves-as-keyless` | pass",
        "CONFORMS",
    ] {
        assert!(cert.contains(needle), "missing {needle}:\n{cert}");
    }
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    assert_eq!(
        json["profile"],
        serde_json::json!({"supportsRequestKey": false, "concurrentEntry": "reject",
                           "source": "declared", "declared": null,
                           "crash": "the harness did not start the target (no --start): crash behaviour is NOT certified"})
    );
    let not = json["not_applicable"].as_array().unwrap();
    assert!(not
        .iter()
        .any(|n| n["id"] == "agent.attach-running" && n["requires"] == "supportsRequestKey: true"));
    let ran = json["scenarios"].as_array().unwrap();
    assert!(ran.iter().all(|s| not.iter().all(|n| n["id"] != s["id"])));
    let junit = std::fs::read_to_string(out.join("junit.xml")).unwrap();
    assert!(
        junit.contains(r#"name="profile" value="supportsRequestKey: false, concurrentEntry: reject (declared by /health)""#),
        "{junit}"
    );
    assert!(junit.contains(r#"name="profile_source" value="declared""#));

    // Forced to the default profile, the same server does not conform, and
    // every report says the profile was stated.
    let forced = scratch("forced");
    let o = reqkey(&[
        "certify",
        "--target",
        "reference-agent:no-request-keys",
        "--profile",
        "default",
        "--out",
        forced.to_str().unwrap(),
        "--seed",
        "3",
        "--quiet",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let cert = std::fs::read_to_string(forced.join("certificate.md")).unwrap();
    for needle in [
        "(stated with --profile; /health declares supportsRequestKey: false, concurrentEntry: reject)",
        "--profile supportsRequestKey=true,concurrentEntry=reject --seed 3",
        "DOES NOT CONFORM",
    ] {
        assert!(cert.contains(needle), "missing {needle}:\n{cert}");
    }
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(forced.join("results.json")).unwrap())
            .unwrap();
    assert_eq!(json["profile"]["source"], "stated");
    let _ = std::fs::remove_dir_all(&out);
    let _ = std::fs::remove_dir_all(&forced);
}

#[test]
fn the_reference_server_writes_the_ignored_key_warning_once_not_per_request() {
    let server = common::Served::start_keeping_stderr(&[
        "serve",
        "agent",
        "--store",
        "memory",
        "--no-request-keys",
    ]);
    let url = server.base.clone();
    // Many keyed requests: every agent scenario that applies, some twice.
    for _ in 0..2 {
        let o = reqkey(&["run", "--target", &url, "--quiet", "--seed", "2"]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    }
    let out = server.terminate();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.matches("request_key.ignored").count(),
        1,
        "one warning per executor instance:\n{stderr}"
    );
}

/// The fourth combination, served as a process: keys ignored on
/// `interrupt_previous`. Its profile admits the keys-ignored scenarios and
/// the keyless `interrupt_previous` ones, and it passes them.
#[test]
fn a_server_ignoring_keys_on_interrupt_previous_passes_its_profile() {
    let server = common::Served::start(&[
        "serve",
        "agent",
        "--store",
        "memory",
        "--no-request-keys",
        "--policy",
        "interrupt_previous",
    ]);
    let url = server.base.clone();
    let o = reqkey(&["run", "--target", &url, "--seed", "4"]);
    drop(server);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = text(&o);
    assert!(
        out.starts_with(&format!(
            "reqkey: judging target {url}\nreqkey: profile: supportsRequestKey: false, concurrentEntry: interrupt_previous (declared by /health)"
        )),
        "{out}"
    );
    for id in [
        "agent.keys-ignored.keyed-behaves-as-keyless",
        "agent.interrupt-previous.keyless-chat-send-is-refused",
    ] {
        assert!(out.contains(&format!("PASS  {id} ")), "{id}: {out}");
    }
}
