//! `--api` (issue 48): an app at its own routes, with Bearer
//! authentication and its own Idempotency-Key layer
//! (`docs/examples/orders_api.py`), certified unchanged through its map
//! (`docs/examples/orders_api.map.yaml`): green over HTTPS, its callers'
//! tokens in no output, red with its layer broken, its effects not judged
//! (never passed) where the oracle cannot count them, nothing sent by a
//! dry run, and every request paced by `--max-rps`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use common::text;
use common::tls::{front, pki};

const TOKENS: [(&str, &str, &str); 3] = [
    ("alice", "ORDERS_ALICE_TOKEN", "tok-alice-31f9c2"),
    ("bob", "ORDERS_BOB_TOKEN", "tok-bob-8d04e7"),
    ("mallory", "ORDERS_MALLORY_TOKEN", "tok-mallory-c5a1b0"),
];
const MAP: &str = "docs/examples/orders_api.map.yaml";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The example app on an ephemeral port; killed when dropped.
struct App {
    child: Child,
    port: u16,
}

impl App {
    fn start(extra: &[&str]) -> App {
        let tokens: Vec<String> = TOKENS.iter().map(|(c, _, t)| format!("{c}={t}")).collect();
        let mut child = Command::new("python3")
            .arg(root().join("docs/examples/orders_api.py"))
            .args(["--port", "0"])
            .args(extra)
            .env("ORDERS_API_TOKENS", tokens.join(","))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 runs (CI installs it)");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .trim()
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("the example app did not start: {line:?}"));
        App { child, port }
    }
}

impl Drop for App {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `reqkey ARGS` with the callers' tokens in the environment.
fn reqkey(args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_reqkey"));
    command.current_dir(root()).args(args).env("NO_COLOR", "1");
    for (_, var, token) in TOKENS {
        command.env(var, format!("Bearer {token}"));
    }
    command.output().unwrap()
}

fn out_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("reqkey-api-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn artifacts(dir: &Path) -> String {
    ["certificate.md", "report.html", "junit.xml", "results.json"]
        .iter()
        .map(|f| std::fs::read_to_string(dir.join(f)).unwrap_or_default())
        .collect()
}

#[test]
fn the_example_api_certifies_through_its_map_over_https_and_its_broken_layer_is_red() {
    let app = App::start(&[]);
    let ca = pki("reqkey test CA", &["localhost"]);
    let tls = front(
        ca.server.clone(),
        format!("127.0.0.1:{}", app.port).parse().unwrap(),
    );
    let out = out_dir("green");
    let o = reqkey(&[
        "certify",
        "--target",
        &format!("idem+https://localhost:{}", tls.port),
        "--api",
        MAP,
        "--cacert",
        ca.ca_pem.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let said = text(&o);
    assert_eq!(o.status.code(), Some(0), "{said}");
    // Stated before it started, cleaned up after.
    assert!(said.contains("reqkey:   POST /v1/orders:"), "{said}");
    assert!(said.contains("clean-up: deleted"), "{said}");
    let certificate = std::fs::read_to_string(out.join("certificate.md")).unwrap();
    assert!(
        certificate
            .contains("effect oracle: the app's read routes (GET /v1/orders, GET /v1/charges)"),
        "{certificate}"
    );
    assert!(
        certificate.contains("idem.concurrent-burst-conflict"),
        "{certificate}"
    );
    let everything = format!("{said}{}", artifacts(&out));
    for (_, _, token) in TOKENS {
        assert!(!everything.contains(token), "{token} is in an output");
    }

    let broken = App::start(&["--broken", "check-then-set"]);
    let out = out_dir("red");
    let o = reqkey(&[
        "certify",
        "--target",
        &format!("idem+http://127.0.0.1:{}", broken.port),
        "--api",
        MAP,
        "--out",
        out.to_str().unwrap(),
        "--quiet",
    ]);
    let said = text(&o);
    assert_eq!(o.status.code(), Some(1), "{said}");
    assert!(
        said.contains("FAIL  idem.concurrent-burst-conflict"),
        "{said}"
    );
}

#[test]
fn without_a_read_route_what_the_oracle_cannot_count_is_not_judged_never_passed() {
    let map = std::fs::read_to_string(root().join(MAP)).unwrap();
    let (before, rest) = map.split_at(map.find("effects:").unwrap());
    let answer_ids_only = format!("{before}{}", &rest[rest.find("health:").unwrap()..]);
    let file = out_dir("ids").with_extension("yaml");
    std::fs::write(&file, answer_ids_only).unwrap();
    let app = App::start(&[]);
    let out = out_dir("ids-out");
    let o = reqkey(&[
        "certify",
        "--target",
        &format!("idem+http://127.0.0.1:{}", app.port),
        "--api",
        file.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--quiet",
    ]);
    let said = text(&o);
    assert_eq!(o.status.code(), Some(2), "{said}");
    assert!(
        said.contains("ERROR idem.concurrent-burst-conflict"),
        "{said}"
    );
    assert!(said.contains("not judged by the effect oracle"), "{said}");
    let results = std::fs::read_to_string(out.join("results.json")).unwrap();
    assert!(results.contains("\"oracle\""), "{results}");
    assert!(results.contains("the ids the answers carry"), "{results}");
}

#[test]
fn a_caller_whose_credentials_the_app_refuses_is_a_wiring_mistake_not_a_verdict() {
    let app = App::start(&[]);
    let o = Command::new(env!("CARGO_BIN_EXE_reqkey"))
        .current_dir(root())
        .env("ORDERS_ALICE_TOKEN", format!("Bearer {}", TOKENS[0].2))
        .env("ORDERS_BOB_TOKEN", "Bearer tok-bob-wrong-4711")
        .env("ORDERS_MALLORY_TOKEN", format!("Bearer {}", TOKENS[2].2))
        .args([
            "certify",
            "--target",
            &format!("idem+http://127.0.0.1:{}", app.port),
            "--api",
            MAP,
            "--out",
            out_dir("refused").to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let said = text(&o);
    assert_eq!(o.status.code(), Some(2), "{said}");
    assert!(
        said.contains("caller bob with 401: its credentials are refused"),
        "{said}"
    );
    assert!(!said.contains("tok-bob-wrong-4711"), "{said}");
}

#[test]
fn a_dry_run_states_the_requests_and_sends_none() {
    // Nothing listens on port 1: a request would be exit 2.
    let o = reqkey(&[
        "certify",
        "--target",
        "idem+http://127.0.0.1:1",
        "--api",
        MAP,
        "--dry-run",
    ]);
    let said = text(&o);
    assert_eq!(o.status.code(), Some(0), "{said}");
    for line in [
        "plays 18 scenarios",
        "POST /v1/charges:",
        "GET /v1/orders:",
        "DELETE {path}/{id}: at most",
        "not applicable",
        "dry run: nothing was sent",
    ] {
        assert!(said.contains(line), "{line}: {said}");
    }
    // A map mistake is located in its file.
    let bad = out_dir("bad").with_extension("yaml");
    std::fs::write(
        &bad,
        "implementation: {}\nprofile: {}\ncallers: {}\nroutes: {creat: 1}\n",
    )
    .unwrap();
    let o = reqkey(&[
        "certify",
        "--target",
        "idem+http://127.0.0.1:1",
        "--api",
        bad.to_str().unwrap(),
        "--dry-run",
    ]);
    let said = text(&o);
    assert_eq!(o.status.code(), Some(2), "{said}");
    assert!(said.contains(&format!("{}:4:", bad.display())), "{said}");
    // --api is for idem apps.
    let o = reqkey(&["certify", "--target", "memory", "--api", MAP, "--dry-run"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}

#[test]
fn max_rps_paces_every_request_to_the_app() {
    let app = App::start(&[]);
    let target = format!("idem+http://127.0.0.1:{}", app.port);
    let scenario = "scenarios/idempotency-key/replay-after-completion.yaml";
    // 1 health, 6 baseline reads, 2 creates, 6 reads, 1 delete: 16
    // requests; a burst of 4 then one every 250 ms takes 3 s at least.
    let started = std::time::Instant::now();
    let o = reqkey(&[
        "run",
        "--target",
        &target,
        "--api",
        MAP,
        "--max-rps",
        "4",
        scenario,
    ]);
    let paced = started.elapsed();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        paced >= std::time::Duration::from_millis(2_900),
        "{paced:?}"
    );
}
