//! Every process a `--start` command spawns is stopped when the judge
//! ends, even one that shed the marker (issue 51): a helper started with
//! `setsid env -i ...` (no environment, a session of its own) and one that
//! rewrites its environment in place (perl's `$0`, as PostgreSQL and
//! setproctitle do) are the judge's descendants, or its orphans as child
//! subreaper, and it stops them on every way out: a verdict (pass or
//! fail), no verdict, a signal; and the watchdog stops them when the judge
//! is SIGKILLed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Two helpers that shed the marker, each writing its pid to a file once
/// running, then `then` (the server, or something that never answers).
struct Helpers {
    dir: PathBuf,
}

impl Helpers {
    fn new(what: &str) -> Helpers {
        let dir = std::env::temp_dir().join(common::processes::marker(&format!("reaper-{what}")));
        std::fs::create_dir_all(&dir).unwrap();
        Helpers { dir }
    }

    fn command(&self, then: &str) -> String {
        let (a, b) = (self.dir.join("setsid.pid"), self.dir.join("perl.pid"));
        format!(
            "setsid env -i sh -c 'echo $$ > {a}; exec sleep 100000' & \
             perl -e 'open(my $f, \">\", \"{b}\"); print $f $$; close $f; $0 = \"reqkey-orphan \" . (\"x\" x 4000); sleep 100000' & \
             {then}",
            a = a.display(),
            b = b.display()
        )
    }

    /// The helpers' pids, once both are running (bounded wait).
    fn pids(&self) -> Vec<i32> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let read = |f: &str| -> Option<i32> {
                std::fs::read_to_string(self.dir.join(f))
                    .ok()?
                    .trim()
                    .parse()
                    .ok()
            };
            if let (Some(a), Some(b)) = (read("setsid.pid"), read("perl.pid")) {
                return vec![a, b];
            }
            assert!(Instant::now() < deadline, "the helpers started");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits (bounded) until none of the helpers is alive; kills any left
    /// and fails.
    fn assert_stopped(&self) {
        let pids = self.pids();
        // Both shed the marker: the old stop, by marker, could not see them.
        for pid in &pids {
            let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            assert!(
                !env.windows(15).any(|w| w == b"REQKEY_OWNED_BY"),
                "pid {pid} sheds the marker"
            );
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while pids.iter().any(|p| alive(*p)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let left: Vec<i32> = pids.iter().copied().filter(|p| alive(*p)).collect();
        for pid in &left {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
        assert_eq!(left, Vec::<i32>::new(), "helpers left running");
    }
}

impl Drop for Helpers {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Is `pid` a live process (not a zombie)?
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rfind(')').map(|i| !s[i + 2..].starts_with('Z')))
        .unwrap_or(false)
}

fn serve_store(store: &str) -> String {
    format!(
        "exec {} serve store --store {store} --listen 127.0.0.1:{{port}}",
        env!("CARGO_BIN_EXE_reqkey")
    )
}

fn scenario(name: &str) -> String {
    common::corpus("store").join(name).display().to_string()
}

fn run_with(helpers: &Helpers, then: &str, extra: &[&str]) -> std::process::Output {
    let start = helpers.command(then);
    let mut args = vec![
        "run",
        "--start",
        &start,
        "--target",
        "store+http://127.0.0.1:{port}",
        "--quiet",
    ];
    args.extend_from_slice(extra);
    common::reqkey(&args)
}

#[test]
fn orphans_that_shed_the_marker_are_stopped_after_a_pass_a_failure_and_no_verdict() {
    let case = scenario("keys-are-case-sensitive.yaml");
    let boundaries = scenario("boundaries.yaml");
    for (what, then, extra, code) in [
        ("pass", serve_store("memory"), vec![case.as_str()], 0),
        (
            "fail",
            serve_store("broken-memory:no-key-rule"),
            vec![boundaries.as_str()],
            1,
        ),
        (
            "no-verdict",
            ": {port}; exec sleep 300".to_owned(),
            vec![case.as_str(), "--start-timeout-ms", "2000"],
            2,
        ),
    ] {
        let helpers = Helpers::new(what);
        let o = run_with(&helpers, &then, &extra);
        assert_eq!(o.status.code(), Some(code), "{what}: {}", common::text(&o));
        helpers.assert_stopped();
    }
}

fn spawn_waiting(helpers: &Helpers) -> Child {
    Command::new(env!("CARGO_BIN_EXE_reqkey"))
        .args([
            "run",
            "--start",
            &helpers.command(": {port}; exec sleep 300"),
            "--target",
            "store+http://127.0.0.1:{port}",
            "--start-timeout-ms",
            "120000",
            &scenario("keys-are-case-sensitive.yaml"),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn wait_exit(child: &mut Child, what: &str) -> Option<i32> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s.code();
        }
        assert!(Instant::now() < deadline, "reqkey did not stop on {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn orphans_that_shed_the_marker_are_stopped_on_sigterm() {
    let helpers = Helpers::new("sigterm");
    let mut child = spawn_waiting(&helpers);
    helpers.pids();
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert_eq!(wait_exit(&mut child, "SIGTERM"), Some(130));
    helpers.assert_stopped();
}

#[test]
fn the_watchdog_stops_them_when_the_judge_is_sigkilled() {
    let helpers = Helpers::new("sigkill");
    let mut child = spawn_waiting(&helpers);
    helpers.pids();
    // The watchdog lists the judge's descendants every 100 ms: give it
    // a few looks at the helpers before the judge dies.
    std::thread::sleep(Duration::from_millis(600));
    child.kill().unwrap();
    let _ = child.wait();
    helpers.assert_stopped();
}
