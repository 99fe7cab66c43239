//! Running the crash scenarios (`scenarios/agent/crash.*.yaml`) with
//! `reqkey run --start`: the harness starts reference servers, kills,
//! pauses and restarts them. Shared by tests/crash.rs and the mutation
//! oracle.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub fn crash_files() -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(root().join("scenarios/agent"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| (n.starts_with("crash.") || n.starts_with("replicas.")) && n.ends_with(".yaml"))
        .map(|n| format!("scenarios/agent/{n}"))
        .collect();
    files.sort();
    assert!(files.len() >= 8, "the crash scenarios: {files:?}");
    files
}

/// `reqkey run --start ...` over `replicas` reference servers on `store`;
/// the output and the verdict of every scenario (from results.json).
pub fn run_crash(
    store: &str,
    replicas: usize,
    variant: Option<&str>,
    tag: &str,
) -> (Output, BTreeMap<String, String>) {
    let bin = env!("CARGO_BIN_EXE_reqkey");
    let variant = variant.map_or_else(String::new, |v| format!(" --variant {v}"));
    let json = std::env::temp_dir().join(format!("reqkey-crash-{}-{tag}.json", std::process::id()));
    // The tests run several of these at once, each choosing free ports:
    // two may choose the same one, and a server that could not listen
    // leaves its port to another run's. That collision is the test
    // machine's, not the target's: run again (a bounded number of times).
    for attempt in 1..=3 {
        let mut cmd = Command::new(bin);
        cmd.arg("run");
        let mut targets = Vec::new();
        for i in 0..replicas {
            cmd.arg("--start").arg(format!(
                "{bin} serve agent --store {store} --lease-ms 2000{variant} --listen 127.0.0.1:{{port}}"
            ));
            targets.push(format!("http://127.0.0.1:{{port{i}}}"));
        }
        cmd.args(["--target", &targets.join(","), "--seed", "26", "--json"])
            .arg(&json)
            .args(crash_files())
            .current_dir(root());
        let out = cmd.output().expect("reqkey run runs");
        let verdicts = verdicts(&json);
        let collided = String::from_utf8_lossy(&out.stderr).contains("Address already in use");
        if !collided || attempt == 3 {
            return (out, verdicts);
        }
    }
    unreachable!("the last attempt returns")
}

/// Each scenario's verdict in a `reqkey-results/1` file (`pass`, `fail`,
/// ...; `not_applicable` for one the run set aside), which is then
/// removed; empty when the run wrote none.
pub fn verdicts(json: &Path) -> BTreeMap<String, String> {
    let doc: serde_json::Value = std::fs::read_to_string(json)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    let _ = std::fs::remove_file(json);
    let mut verdicts = BTreeMap::new();
    for s in doc["scenarios"].as_array().into_iter().flatten() {
        let id = s["id"].as_str().unwrap_or("?").to_owned();
        verdicts.insert(id, s["verdict"].as_str().unwrap_or("?").to_owned());
    }
    for n in doc["not_applicable"].as_array().into_iter().flatten() {
        let id = n["id"].as_str().unwrap_or("?").to_owned();
        verdicts.insert(id, "not_applicable".to_owned());
    }
    verdicts
}

pub fn sqlite(tag: &str) -> String {
    let db = std::env::temp_dir().join(format!("reqkey-crash-{}-{tag}.sqlite", std::process::id()));
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
    format!("sqlite:{}", db.display())
}

pub fn postgres() -> String {
    std::env::var("REQKEY_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

pub fn redis() -> String {
    std::env::var("REQKEY_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// The crash scenarios pass on the reference agent over SQLite, PostgreSQL
/// and Redis, with one and with three replicas the harness started.
pub fn assert_green_on_every_persistent_backend() {
    let combos: Vec<(String, String, usize)> = [1usize, 3]
        .into_iter()
        .flat_map(|n| {
            [
                ("sqlite".to_owned(), sqlite(&format!("green{n}")), n),
                ("postgres".to_owned(), postgres(), n),
                ("redis".to_owned(), redis(), n),
            ]
        })
        .collect();
    // Concurrently: the scenarios mostly wait for leases to run out.
    let handles: Vec<_> = combos
        .into_iter()
        .map(|(name, store, n)| {
            std::thread::spawn(move || {
                let (out, verdicts) = run_crash(&store, n, None, &format!("green-{name}-{n}"));
                (name, n, out, verdicts)
            })
        })
        .collect();
    for h in handles {
        let (name, n, out, verdicts) = h.join().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{name} x{n}: {verdicts:?}\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let passed = verdicts.values().filter(|v| *v == "pass").count();
        // One replica: the scenarios that need a second live one do not apply.
        let want = if n == 1 { 5 } else { 8 };
        assert!(passed >= want, "{name} x{n}: {verdicts:?}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains("crash behaviour (kill, pause, restart) is certified"),
            "{stdout}"
        );
    }
}
