//! Setup the harness tests share: the `reqkey` binary, where a corpus
//! lives, running it on a target, and which scenarios did not pass.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod crash;
pub mod link;
pub mod processes;
pub mod tls;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;

use reqkey_harness::run::event::{RunSummary, Verdict};
use reqkey_harness::run::runner::{self, RunConfig};
use reqkey_harness::run::select::{by_profile, NotApplicable};
use reqkey_harness::scenario::{load_paths, Scenario};
use reqkey_harness::targets::profile::{parse_profile_flag, resolve_profile, Profile, ProfileInfo};
use reqkey_harness::targets::spec::open_target;
use reqkey_harness::targets::{Target, TargetOptions};

/// Reads one HTTP/1.1 request from `conn`: its head and a
/// `Content-Length` body (at most 1 MiB); `None` at EOF or on a head over
/// 64 KiB. For the small servers the tests stand up as targets.
pub fn read_http_request(conn: &mut std::net::TcpStream) -> Option<(String, Vec<u8>)> {
    use std::io::Read;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if conn.read(&mut byte).ok()? == 0 || head.len() > 64 * 1024 {
            return None;
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let len = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    let mut body = vec![0u8; len.min(1 << 20)];
    conn.read_exact(&mut body).ok()?;
    Some((head, body))
}

/// A `reqkey serve ...` process on an ephemeral port (read from its first
/// line, `listening on http://ADDR`); killed (SIGKILL) when dropped.
pub struct Served {
    child: Option<Child>,
    /// `http://127.0.0.1:PORT`
    pub base: String,
}

impl Served {
    /// `reqkey ARGS --listen 127.0.0.1:0`, its stderr discarded.
    pub fn start(args: &[&str]) -> Served {
        Served::spawn(args, None, false)
    }

    /// Likewise, its stderr kept for [`Served::terminate`].
    pub fn start_keeping_stderr(args: &[&str]) -> Served {
        Served::spawn(args, None, true)
    }

    /// Likewise, with at most `nofile` open file descriptors.
    pub fn start_limited(args: &[&str], nofile: u32) -> Served {
        Served::spawn(args, Some(nofile), false)
    }

    fn spawn(args: &[&str], nofile: Option<u32>, keep_stderr: bool) -> Served {
        let bin = env!("CARGO_BIN_EXE_reqkey");
        let mut command = match nofile {
            Some(n) => {
                let mut c = Command::new("sh");
                c.args(["-c", &format!("ulimit -n {n} && exec \"$@\""), "sh", bin]);
                c
            }
            None => Command::new(bin),
        };
        let mut child = command
            .args(args)
            .args(["--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(if keep_stderr {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .spawn()
            .expect("reqkey serve starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let Some(addr) = line.trim().strip_prefix("listening on ") else {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "`reqkey {}` did not start: {line:?} {}. Tests over PostgreSQL and Redis need \
                 the real services (pg_isready -h 127.0.0.1; redis-cli ping); they never skip.",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
        };
        Served {
            base: addr.to_owned(),
            child: Some(child),
        }
    }

    /// `HOST:PORT`, without the scheme.
    pub fn addr(&self) -> &str {
        self.base.strip_prefix("http://").unwrap_or(&self.base)
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// SIGTERM, then wait: how it exited, and its stderr when kept.
    pub fn terminate(mut self) -> Output {
        let child = self.child.take().unwrap();
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        child.wait_with_output().unwrap()
    }

    /// `kill -9`, and wait for the process to be gone.
    pub fn kill9(mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The `reqkey` binary with `args`, run from the repository root.
pub fn reqkey(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_reqkey"))
        .args(args)
        .args(test_fuzz_budget(args))
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
        .env("NO_COLOR", "1")
        .output()
        .expect("reqkey runs")
}

/// The fuzz budget of a test's `certify` that names none: 32 programs,
/// not certify's default 256 (chosen in docs/fuzz.md for catching every
/// variant only the fuzzer finds, which `tests/fuzz_teeth.rs` judges at
/// that default). The other tests judge reports, wiring and the suite:
/// the pass runs, at a size that keeps the suite in minutes. Likewise the
/// probes at scale of a `certify` or `fuzz` that names none:
/// [`TEST_PATIENCE`] and [`TEST_CAPACITY_KEYS`], not the default 10 s and
/// 2,000 keys (`tests/scale.rs` judges the defaults' teeth).
pub fn test_fuzz_budget(args: &[&str]) -> Vec<&'static str> {
    let certifies = args.first() == Some(&"certify") && args.get(1) != Some(&"merge");
    let fuzzes = args.first() == Some(&"fuzz");
    let mut out = Vec::new();
    if certifies && !args.iter().any(|a| a.starts_with("--fuzz-cases")) {
        out.extend(["--fuzz-cases", "32"]);
    }
    if (certifies || fuzzes) && !args.iter().any(|a| a.starts_with("--patience")) {
        out.extend(["--patience", TEST_PATIENCE]);
    }
    if (certifies || fuzzes) && !args.iter().any(|a| a.starts_with("--capacity-keys")) {
        out.extend(["--capacity-keys", TEST_CAPACITY_KEYS]);
    }
    out
}

/// The patience tests run with unless they name one: the probes at scale
/// still run (capacity, the final reads) and wait this long at most.
pub const TEST_PATIENCE: &str = "1s";
/// The keys the probes at scale write in a test unless it names a count
/// (certify's 2,000 are judged by `tests/scale.rs`).
pub const TEST_CAPACITY_KEYS: &str = "100";

/// Its stdout then stderr.
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A `reqkey certify` run into a folder of its own: the process's output
/// and the results.json and certificate.md it wrote (the folder is removed
/// after reading them).
pub struct Certified {
    pub output: Output,
    pub results: serde_json::Value,
    pub certificate: String,
}

/// `reqkey certify --target TARGET -q ARGS --out <a fresh folder>`, with the
/// tests' fuzz budget unless ARGS name one ([`test_fuzz_budget`]; a test
/// that judges certify's default budget passes it:
/// `reqkey_harness::run::fuzz::pass::DEFAULT_CERTIFY_FUZZ_CASES`).
/// Panics, with what reqkey printed, when no results.json was written.
pub fn certify(target: &str, args: &[&str]) -> Certified {
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let out = std::env::temp_dir().join(format!(
        "reqkey-test-certify-{}-{n}-{}",
        std::process::id(),
        target.replace(|c: char| !c.is_ascii_alphanumeric(), "_")
    ));
    let mut all = vec!["certify", "--target", target, "-q"];
    all.extend_from_slice(args);
    let output = Command::new(env!("CARGO_BIN_EXE_reqkey"))
        .args(&all)
        .args(test_fuzz_budget(&all))
        .arg("--out")
        .arg(&out)
        .env("NO_COLOR", "1")
        .output()
        .expect("reqkey runs");
    let read = |file: &str| {
        std::fs::read_to_string(out.join(file)).unwrap_or_else(|e| {
            panic!(
                "{target}: no {file} ({e}): {}",
                String::from_utf8_lossy(&output.stderr)
            )
        })
    };
    let results = serde_json::from_str(&read("results.json")).expect("results.json is JSON");
    let certificate = read("certificate.md");
    let _ = std::fs::remove_dir_all(&out);
    Certified {
        output,
        results,
        certificate,
    }
}

/// A runtime for the tests that drive a target in process (the fuzzers).
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
}

/// The target `spec`, opened on `rt`.
pub fn open_on(rt: &tokio::runtime::Runtime, spec: &str) -> Arc<dyn Target> {
    rt.block_on(open_target(spec, TargetOptions::default()))
        .unwrap_or_else(|e| panic!("{spec} does not open: {e}"))
}

/// The verdict of the one scenario in `yaml` (a fuzzer's printed failure)
/// on a fresh target `spec`, seed 1.
pub fn replay(rt: &tokio::runtime::Runtime, yaml: &str, spec: &str) -> Verdict {
    let scenario = reqkey_scenario::parse_scenario(Path::new("fuzz.yaml"), yaml)
        .unwrap_or_else(|e| panic!("{e}\n{yaml}"));
    let summary = rt.block_on(runner::run(
        open_on(rt, spec),
        &[scenario],
        &RunConfig::new(1),
        &mut [],
    ));
    summary.results[0].verdict
}

/// `scenarios/<level>` of this checkout.
pub fn corpus(level: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../scenarios")
        .join(level)
}

pub fn load_corpus(level: &str) -> Vec<Scenario> {
    load_paths(&[corpus(level)]).expect("the corpus loads")
}

/// Does `scenario` apply to a target the harness did not start? The fault
/// scenarios (`requires: {faults: true}`, ...) do not: tests/crash.rs runs
/// them with `--start`.
pub fn in_process(scenario: &Scenario) -> bool {
    scenario
        .requires
        .unmet_faults(&Default::default())
        .is_none()
}

/// The `level` corpus without the fault scenarios (see [`in_process`]).
pub fn in_process_corpus(level: &str) -> Vec<Scenario> {
    load_corpus(level).into_iter().filter(in_process).collect()
}

/// The `level` corpus on an open target, with `seed`: every scenario that
/// applies to a target the harness did not start.
pub async fn run_on(target: Arc<dyn Target>, level: &str, seed: u64) -> RunSummary {
    runner::run(
        target,
        &in_process_corpus(level),
        &RunConfig::new(seed),
        &mut [],
    )
    .await
}

/// The `level` corpus on the target `spec`, with `seed`.
pub async fn run_corpus(level: &str, spec: &str, seed: u64) -> RunSummary {
    let target = open_target(spec, TargetOptions::default())
        .await
        .expect("target opens");
    run_on(target, level, seed).await
}

/// What a run against a profile did: the profile, the summary of the
/// scenarios it admits, and the ones it did not.
pub struct ProfileRun {
    pub profile: ProfileInfo,
    pub summary: RunSummary,
    pub not_applicable: Vec<NotApplicable>,
}

/// The agent corpus on `spec` as `reqkey run` selects it: against the
/// profile `/health` declares, or `stated` (a `--profile` value).
pub async fn run_agent_profile(spec: &str, stated: Option<&str>, seed: u64) -> ProfileRun {
    run_agent_on_profile(spec, stated, load_corpus("agent"), seed).await
}

/// `scenarios` on the agent target `spec`, those its profile admits.
async fn run_agent_on_profile(
    spec: &str,
    stated: Option<&str>,
    scenarios: Vec<Scenario>,
    seed: u64,
) -> ProfileRun {
    let target = open_target(spec, TargetOptions::default())
        .await
        .expect("target opens");
    let stated = stated.map(|s| parse_profile_flag(s).expect("a profile"));
    let profile = resolve_profile(target.as_ref(), stated, 10_000)
        .await
        .expect("the profile is read");
    let (apply, not_applicable) = by_profile(scenarios, &profile.profile, &Default::default());
    // One scenario at a time, as callers already run several servers at
    // once: a broken variant's verdict on a scenario with a timing window
    // (a run still running 300 ms later) must not flip under the load of
    // dozens of scenarios at once.
    let mut cfg = RunConfig::new(seed);
    cfg.concurrency = 1;
    let summary = runner::run(target, &apply, &cfg, &mut []).await;
    ProfileRun {
        profile,
        summary,
        not_applicable,
    }
}

/// The scenarios `ids` of the agent corpus on `spec`, as
/// [`run_agent_profile`] runs the whole corpus.
pub async fn run_agent_scenarios(
    spec: &str,
    stated: Option<&str>,
    ids: &BTreeSet<String>,
    seed: u64,
) -> RunSummary {
    let chosen = load_corpus("agent")
        .into_iter()
        .filter(|s| ids.contains(&s.id))
        .collect();
    run_agent_on_profile(spec, stated, chosen, seed)
        .await
        .summary
}

/// The scenarios of `level` that a profile admits.
pub fn corpus_for(level: &str, profile: &Profile) -> Vec<Scenario> {
    by_profile(load_corpus(level), profile, &Default::default()).0
}

/// The ids that ran.
pub fn ran(summary: &RunSummary) -> BTreeSet<&str> {
    summary.results.iter().map(|r| r.id.as_str()).collect()
}

/// The ids of the scenarios that did not pass.
pub fn failing(summary: &RunSummary) -> BTreeSet<&str> {
    summary
        .results
        .iter()
        .filter(|r| r.verdict != Verdict::Pass)
        .map(|r| r.id.as_str())
        .collect()
}

/// A red run on `target` is a verdict: exit 1, and every scenario that did
/// not pass failed (with its failure), none errored.
pub fn assert_failures_are_verdicts(target: &str, summary: &RunSummary) {
    assert_eq!(summary.exit_code(), 1, "{target}");
    for r in summary
        .results
        .iter()
        .filter(|r| r.verdict != Verdict::Pass)
    {
        assert_eq!(
            r.verdict,
            Verdict::Fail,
            "{target}: {} must fail, not error: {:?}",
            r.id,
            r.failure
        );
        assert!(r.failure.is_some(), "{target}: {} has no failure", r.id);
    }
}

/// The Redis Cluster the tests use: `REQKEY_REDIS_CLUSTER_URL`, or, when
/// none is given, the three-master cluster of `scripts/redis-cluster.sh`
/// on 127.0.0.1:7101-7103, started here once per test process (the
/// script leaves a healthy cluster alone), so that `cargo test
/// --workspace` is the one command. A cluster that cannot be started
/// fails the tests; they never skip.
pub fn redis_cluster_url() -> String {
    if let Ok(url) = std::env::var("REQKEY_REDIS_CLUSTER_URL") {
        return url;
    }
    static STARTED: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    start_once(&STARTED, "redis-cluster.sh", "Redis Cluster");
    "redis+cluster://127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103".into()
}

/// Runs `scripts/SCRIPT start` once per test process (`cell` remembers how
/// it went; the scripts leave a healthy service alone); panics, naming
/// `what`, when it cannot: the tests that need it never skip.
pub fn start_once(
    cell: &'static std::sync::OnceLock<Result<(), String>>,
    script: &str,
    what: &str,
) {
    let started = cell.get_or_init(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../scripts")
            .join(script);
        match Command::new("bash").arg(&script).arg("start").output() {
            Ok(o) if o.status.success() => Ok(()),
            Ok(o) => Err(format!(
                "{} start failed: {}",
                script.display(),
                String::from_utf8_lossy(&o.stderr)
            )),
            Err(e) => Err(format!("cannot run {}: {e}", script.display())),
        }
    });
    if let Err(e) = started {
        panic!("no {what} for the tests: {e}");
    }
}
