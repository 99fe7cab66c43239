//! Running the link scenarios (`scenarios/store/link.*.yaml`) with
//! `reqkey run --start 'reqkey serve store --store {db} ...' --db URL`:
//! the harness starts a reference store and owns its database link.
//! Shared by tests/link_faults.rs and the mutation oracle.

use std::collections::BTreeMap;
use std::process::{Command, Output};

use super::crash::{root, verdicts};

/// The link scenario files.
pub fn link_files() -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(root().join("scenarios/store"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("link.") && n.ends_with(".yaml"))
        .map(|n| format!("scenarios/store/{n}"))
        .collect();
    files.sort();
    assert!(files.len() >= 9, "the link scenarios: {files:?}");
    files
}

/// A PostgreSQL database of its own, created for a test and dropped after
/// (`REQKEY_POSTGRES_URL` names the server; never another test's data).
#[derive(Debug)]
pub struct FreshDb {
    pub url: String,
    admin: String,
    name: String,
}

fn admin_url() -> String {
    std::env::var("REQKEY_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

fn on_admin(admin: &str, sql: String) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (client, connection) = tokio_postgres::connect(admin, tokio_postgres::NoTls)
            .await
            .expect("PostgreSQL answers (REQKEY_POSTGRES_URL)");
        tokio::spawn(connection);
        client.batch_execute(&sql).await.expect(&sql);
    });
}

impl FreshDb {
    pub fn create(tag: &str) -> FreshDb {
        let admin = admin_url();
        let name = format!(
            "reqkey_link_{tag}_{}_{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos())
        )
        .replace('-', "_");
        on_admin(&admin, format!("CREATE DATABASE {name}"));
        let (head, query) = admin
            .split_once('?')
            .map_or((admin.as_str(), ""), |(h, q)| (h, q));
        let base = head.rsplit_once('/').map_or(head, |(b, _)| b);
        let url = if query.is_empty() {
            format!("{base}/{name}")
        } else {
            format!("{base}/{name}?{query}")
        };
        FreshDb { url, admin, name }
    }

    /// The URL with another scheme (a broken variant's).
    pub fn with_scheme(&self, scheme: &str) -> String {
        let rest = self.url.split_once("://").map_or("", |(_, r)| r);
        format!("{scheme}://{rest}")
    }
}

impl Drop for FreshDb {
    fn drop(&mut self) {
        on_admin(
            &self.admin,
            format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
        );
    }
}

/// What a link run gave: its output, each scenario's verdict and its
/// `reqkey-results/1` document.
pub struct LinkRun {
    pub out: Output,
    pub verdicts: BTreeMap<String, String>,
    pub doc: serde_json::Value,
}

/// `reqkey run --start 'reqkey serve store --store {db}' --db DB` over the
/// link scenarios.
pub fn run_link(db: &str, tag: &str) -> LinkRun {
    let bin = env!("CARGO_BIN_EXE_reqkey");
    let json = std::env::temp_dir().join(format!("reqkey-link-{}-{tag}.json", std::process::id()));
    // Several runs at once each choose a free port; two may choose the
    // same one: run again (bounded), as tests/common/crash.rs does.
    for attempt in 1..=3 {
        let out = Command::new(bin)
            .arg("run")
            .args(["--target", "store+http://127.0.0.1:{port}"])
            .arg("--start")
            .arg(format!(
                "{bin} serve store --store {{db}} --listen 127.0.0.1:{{port}}"
            ))
            .args(["--db", db, "--seed", "49", "--json"])
            .arg(&json)
            .args(link_files())
            .current_dir(root())
            .output()
            .expect("reqkey run runs");
        let doc = std::fs::read_to_string(&json)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default();
        let verdicts = verdicts(&json);
        let collided = String::from_utf8_lossy(&out.stderr).contains("Address already in use");
        if !collided || attempt == 3 {
            return LinkRun { out, verdicts, doc };
        }
    }
    unreachable!("the last attempt returns")
}
