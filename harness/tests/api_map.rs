//! `--api` (issues 48 and 57): an app at its own routes, with Bearer
//! authentication and its own Idempotency-Key layer
//! (`docs/examples/orders_api.py`), certified unchanged through its map
//! (`docs/examples/orders_api.map.yaml`): green over HTTPS with the whole
//! fuzz pass (the battery and generated programs), sending exactly what its
//! dry run planned; a variant with an unscoped key and racy declined charges
//! red on the leak and on the race (the failing route answers at once: its
//! bursts go out together); a map aimed off the origin refused before
//! anything is sent; its callers' tokens in no output; its effects not
//! judged (never passed) where the oracle cannot count them; and every
//! request paced by `--max-rps`, no second holding more.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::tls::{front, pki};
use common::{read_http_request, text};

const TOKENS: [(&str, &str, &str); 2] = [
    ("alice", "ORDERS_ALICE_TOKEN", "tok-alice-31f9c2"),
    ("bob", "ORDERS_BOB_TOKEN", "tok-bob-8d04e7"),
];
const MAP: &str = "docs/examples/orders_api.map.yaml";
/// The fuzz budget of these certifications: the battery and a few
/// programs (the budget's own teeth are `fuzz_teeth.rs`'s).
const FUZZ_CASES: &str = "6";

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

/// The plan's lines (`reqkey:   ROUTE: ...`) a run or a dry run printed.
fn plan_lines(said: &str) -> Vec<&str> {
    said.lines()
        .filter(|l| l.starts_with("reqkey:   ") || l.starts_with("reqkey: in all"))
        .collect()
}

/// Per route, what a dry run planned (least, most) or said at most.
fn planned(said: &str) -> std::collections::BTreeMap<String, (u64, u64)> {
    let mut out = std::collections::BTreeMap::new();
    for line in plan_lines(said) {
        let Some(rest) = line.strip_prefix("reqkey:   ") else {
            continue;
        };
        let (route, count) = rest.split_once(": ").unwrap();
        let numbers: Vec<u64> = count.split(' ').filter_map(|w| w.parse().ok()).collect();
        let range = if count.starts_with("at most") {
            (0, numbers[0])
        } else {
            (numbers[0], *numbers.get(1).unwrap_or(&numbers[0]))
        };
        out.insert(route.to_owned(), range);
    }
    out
}

/// Per route, what a run said it sent.
fn sent(said: &str) -> std::collections::BTreeMap<String, u64> {
    said.lines()
        .filter_map(|l| l.strip_prefix("reqkey: sent "))
        .map(|rest| {
            let (route, count) = rest.split_once(": ").unwrap();
            let n = count.split(' ').next().unwrap().parse().unwrap();
            (route.to_owned(), n)
        })
        .collect()
}

#[test]
fn the_example_certifies_over_https_with_the_whole_fuzz_pass_sending_what_its_dry_run_planned() {
    let app = App::start(&[]);
    let ca = pki("reqkey test CA", &["localhost"]);
    let tls = front(
        ca.server.clone(),
        format!("127.0.0.1:{}", app.port).parse().unwrap(),
    );
    let target = format!("idem+https://localhost:{}", tls.port);
    let common = [
        "--target",
        &target,
        "--api",
        MAP,
        "--cacert",
        ca.ca_pem.to_str().unwrap(),
        "--seed",
        "57",
        "--fuzz-cases",
        FUZZ_CASES,
    ];
    let dry = reqkey(&[&["certify"][..], &common, &["--dry-run"]].concat());
    let planned_text = text(&dry);
    assert_eq!(dry.status.code(), Some(0), "{planned_text}");
    let out = out_dir("green");
    let o = reqkey(&[&["certify"][..], &common, &["--out", out.to_str().unwrap()]].concat());
    let said = text(&o);
    assert_eq!(o.status.code(), Some(0), "{said}");
    // The whole fuzz pass ran: the battery with its failing bursts, and
    // the generated programs.
    let fuzz = said.lines().find(|l| l.starts_with("fuzz: ")).unwrap();
    assert!(
        fuzz.starts_with(&format!("fuzz: {FUZZ_CASES} idem programs and 66 bursts")),
        "{fuzz}"
    );
    assert!(
        fuzz.contains("4 on a failing one that answers at once"),
        "{fuzz}"
    );
    assert!(fuzz.ends_with(": passed "), "{fuzz}");
    // Stated before anything was sent, as the dry run stated it; what was
    // sent is what was planned for the trials that ran, route by route,
    // and within the dry run's range.
    assert_eq!(plan_lines(&said), plan_lines(&planned_text), "{said}");
    let (planned, sent) = (planned(&planned_text), sent(&said));
    assert!(sent.len() >= 7, "{said}");
    for (route, n) in &sent {
        let (least, most) = planned[route];
        assert!(
            least <= *n && *n <= most,
            "{route}: {n} not in {least}..{most}"
        );
    }
    for line in said.lines().filter(|l| l.starts_with("reqkey: sent ")) {
        assert!(
            line.ends_with(", as planned") || line.contains("(the clean-up, planned at most"),
            "{line}\n{said}"
        );
    }
    assert!(said.contains("clean-up: deleted"), "{said}");
    let certificate = std::fs::read_to_string(out.join("certificate.md")).unwrap();
    assert!(
        certificate
            .contains("effect oracle: the app's read routes (GET /v1/orders, GET /v1/charges)"),
        "{certificate}"
    );
    for scenario in [
        "idem.concurrent-burst-conflict",
        "idem.another-caller-never-sees-the-answer",
        "idem.another-caller-same-key",
    ] {
        assert!(
            certificate.contains(&format!("`{scenario}` | pass")),
            "{scenario}"
        );
    }
    // The replay line says how the app was reached, never a token.
    let replay = certificate
        .lines()
        .find(|l| l.starts_with("| replay |"))
        .unwrap();
    for flag in [
        "--api docs/examples/orders_api.map.yaml",
        "--cacert ",
        "--fuzz-cases 6",
        "--seed 57",
    ] {
        assert!(replay.contains(flag), "{flag}: {replay}");
    }
    let everything = format!("{said}{planned_text}{}", artifacts(&out));
    for (_, _, token) in TOKENS {
        assert!(!everything.contains(token), "{token} is in an output");
    }
}

#[test]
fn a_variant_with_an_unscoped_key_and_racy_declines_is_red_on_the_leak_and_the_race() {
    // The app shares one record per key among its customers, and its
    // declined charges look for the key, then take it after the charge.
    let app = App::start(&["--broken", "unscoped-key,racy-declines"]);
    let map = std::fs::read_to_string(root().join(MAP))
        .unwrap()
        .replace("scope: [caller, method, path]", "scope: [method, path]");
    assert!(map.contains("scope: [method, path]"));
    let file = out_dir("unscoped").with_extension("yaml");
    std::fs::write(&file, map).unwrap();
    // Plain HTTP: TLS is the green test's (its 528 handshakes a battery
    // would cost CI here again).
    let out = out_dir("red");
    let o = reqkey(&[
        "certify",
        "--target",
        &format!("idem+http://127.0.0.1:{}", app.port),
        "--api",
        file.to_str().unwrap(),
        "--fuzz-cases",
        "2",
        "--out",
        out.to_str().unwrap(),
        "--quiet",
    ]);
    let said = text(&o);
    assert_eq!(o.status.code(), Some(1), "{said}");
    // The leak: the second caller gets the first one's order.
    assert!(
        said.contains("FAIL  idem.another-caller-is-refused-when-unscoped"),
        "{said}"
    );
    assert!(said.contains("idem.scope.no-leak"), "{said}");
    // The race: the battery's failing bursts, sent together to a route
    // that answers at once, ran the declined charge more than once.
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    let fuzz = &results["fuzz"];
    assert_eq!(fuzz["verdict"], "failed", "{fuzz}");
    let reason = fuzz["reason"].as_str().unwrap();
    assert!(reason.contains("FailingBurst"), "{reason}");
    assert!(reason.contains("[idem.effect.at-most-once]"), "{reason}");
}

#[test]
fn a_map_aimed_off_the_origin_is_refused_before_anything_is_sent() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let elsewhere = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    elsewhere.set_nonblocking(true).unwrap();
    let target = format!(
        "idem+http://127.0.0.1:{}",
        listener.local_addr().unwrap().port()
    );
    let map = std::fs::read_to_string(root().join(MAP)).unwrap();
    for (from, to) in [
        (
            "- {path: /v1/orders, count: /data}",
            format!(
                "- {{path: '@127.0.0.1:{}/v1/orders', count: /data}}",
                elsewhere.local_addr().unwrap().port()
            ),
        ),
        (
            "cleanup: {method: DELETE, path: \"{path}/{id}\"}",
            "cleanup: {method: DELETE, path: \"{path}/../{id}\"}".to_owned(),
        ),
        (
            "health: {method: GET, path: /v1/health}",
            "health: {method: GET, path: /v1/%2e%2e/admin}".to_owned(),
        ),
    ] {
        assert!(map.contains(from), "{from}");
        let bad = map.replacen(from, &to, 1);
        let line = bad.lines().position(|l| l.contains(&to)).unwrap() + 1;
        let file = out_dir("off-origin").with_extension("yaml");
        std::fs::write(&file, &bad).unwrap();
        let o = reqkey(&[
            "certify",
            "--target",
            &target,
            "--api",
            file.to_str().unwrap(),
            "--out",
            out_dir("off-origin-out").to_str().unwrap(),
        ]);
        let said = text(&o);
        assert_eq!(o.status.code(), Some(2), "{said}");
        assert!(
            said.contains(&format!("{}:{line}:", file.display())),
            "line {line}: {said}"
        );
        assert!(
            said.contains("is refused") && said.contains("nothing was sent"),
            "{said}"
        );
    }
    for l in [&listener, &elsewhere] {
        assert!(l.accept().is_err(), "a connection was made");
    }
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
        "--fuzz-cases",
        "0",
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
        "--seed",
        "3",
    ]);
    let said = text(&o);
    assert_eq!(o.status.code(), Some(0), "{said}");
    for line in [
        "plays 18 scenarios and the fuzz pass (seed 3: the battery and 256 programs",
        "POST /v1/charges:",
        "GET /v1/orders:",
        "DELETE /v1/orders/{id}: at most",
        "DELETE /v1/charges/{id}: at most",
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

/// When each request's head arrived, and the head.
type Arrivals = Arc<Mutex<Vec<(Instant, String)>>>;

/// A small idem app that answers every route at once, echoes every
/// request header in its JSON answers, and notes when each request's head
/// arrived.
fn echo_app() -> (u16, Arrivals) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen: Arrivals = Arc::default();
    let log = Arc::clone(&seen);
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
                let mut conn = conn;
                while let Some((head, _body)) = read_http_request(&mut conn) {
                    log.lock().unwrap().push((Instant::now(), head.clone()));
                    let path = head.split(' ').nth(1).unwrap_or_default().to_owned();
                    let headers: serde_json::Map<String, serde_json::Value> = head
                        .lines()
                        .skip(1)
                        .filter_map(|l| l.split_once(':'))
                        .map(|(k, v)| (k.to_owned(), v.trim().into()))
                        .collect();
                    let (status, body) = match path.as_str() {
                        "/.reqkey/health" => (
                            200,
                            serde_json::json!({
                                "protocol": "reqkey-idem/1",
                                "implementation": {"name": "echo", "version": "1", "storage": "memory"},
                                "profile": {"keyRequired": true, "keySyntax": "any",
                                    "invalidKeyStatus": 400, "fingerprint": "json",
                                    "mismatchStatus": 422, "concurrent": "conflict",
                                    "concurrentStatus": 409, "errors": "stored",
                                    "scope": ["caller", "method", "path"], "expiryMs": null,
                                    "lockMs": null, "replayHeader": null, "durable": false}
                            }),
                        ),
                        "/.reqkey/effects" => {
                            (200, serde_json::json!({"effects": [], "headers": headers}))
                        }
                        _ => (201, serde_json::json!({"order": 1, "headers": headers})),
                    };
                    let body = body.to_string();
                    let answer = format!(
                        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if conn.write_all(answer.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (port, seen)
}

/// Issue 57: `--max-rps 20` let 40 requests into one second, and a
/// `--header` token the app echoed came back JSON-escaped in every report.
#[test]
fn max_rps_holds_over_any_second_and_an_echoed_credential_is_in_no_output_in_any_form() {
    const TOKEN: &str = "Zq7\"k\\w<&>'Secret57";
    let (port, seen) = echo_app();
    let out = out_dir("echo");
    let o = reqkey(&[
        "certify",
        "--target",
        &format!("idem+http://127.0.0.1:{port}"),
        "-H",
        &format!("X-Api-Key: {TOKEN}"),
        "--max-rps",
        "20",
        "--fuzz-cases",
        "0",
        "--out",
        out.to_str().unwrap(),
    ]);
    let said = text(&o);
    assert_eq!(o.status.code(), Some(1), "{said}");
    let seen = seen.lock().unwrap().clone();
    assert!(
        seen.iter().all(|(_, head)| head.contains(TOKEN)),
        "the credential was not sent"
    );
    // Every form the token can take contains this, escaped or not.
    for (name, shown) in [
        ("the terminal", said.clone()),
        (
            "certificate.md",
            std::fs::read_to_string(out.join("certificate.md")).unwrap(),
        ),
        (
            "report.html",
            std::fs::read_to_string(out.join("report.html")).unwrap(),
        ),
        (
            "junit.xml",
            std::fs::read_to_string(out.join("junit.xml")).unwrap(),
        ),
        (
            "results.json",
            std::fs::read_to_string(out.join("results.json")).unwrap(),
        ),
    ] {
        if let Some(at) = shown.find("Secret57") {
            let from = shown[..at]
                .char_indices()
                .rev()
                .nth(60)
                .map_or(0, |(i, _)| i);
            panic!(
                "the token is in {name}: …{}…",
                &shown[from..(at + 8).min(shown.len())]
            );
        }
    }
    let everything = format!("{said}{}", artifacts(&out));
    assert!(
        everything.contains("-H 'X-Api-Key: ***' --max-rps 20"),
        "{said}"
    );
    // No window of a second, wherever it starts, holds more than 20 as
    // the harness sends them; seen here, after the jitter of a loaded
    // machine between the harness's send and this server's read, in any
    // half second (the bucket that refilled while it drained let 30 into
    // the first half second, 40 into the first second).
    let times: Vec<Instant> = seen.iter().map(|(t, _)| *t).collect();
    assert!(times.len() > 40, "{} requests", times.len());
    let busiest = times
        .iter()
        .map(|t| {
            times
                .iter()
                .filter(|u| **u >= *t && u.duration_since(*t) < Duration::from_millis(500))
                .count()
        })
        .max()
        .unwrap();
    assert!((8..=20).contains(&busiest), "{busiest} requests in 900 ms");
    // A header given with `=` for `:` is refused without its value.
    let o = reqkey(&[
        "run",
        "--target",
        "idem+http://127.0.0.1:1",
        "-H",
        "Authorization=Bearer Zq7Secret57:more",
    ]);
    let said = text(&o);
    assert_eq!(o.status.code(), Some(2), "{said}");
    assert!(
        !said.contains("Secret57") && !said.contains("Zq7"),
        "{said}"
    );
}

/// The docs' table of roles: under every profile the suite needs two
/// callers and never a third; with one, exactly the scenarios of another
/// caller are not played, each saying why.
#[test]
fn the_suite_needs_two_callers_under_every_profile_and_never_a_third() {
    use reqkey_harness::targets::api_map::{ApiMap, CallerRoles};
    let map = std::fs::read_to_string(root().join(MAP)).unwrap();
    let two = ApiMap::parse("two.yaml", &map.replace("env:", "")).unwrap();
    let one = ApiMap::parse(
        "one.yaml",
        &map.replace("env:", "")
            .replace("  bob: {Authorization: \"ORDERS_BOB_TOKEN\"}\n", ""),
    )
    .unwrap();
    assert_eq!((two.roles.len(), one.roles.len()), (2, 1));
    let (_, suite) =
        reqkey_harness::run::suite::embedded_suite(reqkey_harness::targets::Level::Idem).unwrap();
    let mut need_another = std::collections::BTreeSet::new();
    let (mut roles_two, mut roles_one) = (CallerRoles::default(), CallerRoles::default());
    for s in &suite {
        if let Err(why) = two.plays(s, &mut roles_two) {
            assert!(!why.contains("caller"), "{}: {why}", s.id);
        }
        match one.plays(s, &mut roles_one) {
            Err(why) if why.contains("is another caller") => {
                need_another.insert(s.id.as_str());
            }
            Err(why) => assert!(!why.contains("caller"), "{}: {why}", s.id),
            Ok(()) => {}
        }
    }
    assert_eq!(
        need_another.into_iter().collect::<Vec<_>>(),
        [
            "idem.another-caller-is-refused-when-unscoped",
            "idem.another-caller-never-sees-the-answer",
            "idem.another-caller-same-key",
            "idem.token-keys-are-bare",
        ]
    );
}
