//! What a certificate of a `--db` run says (issue 49 item 5): in every
//! format it writes (certificate.md, results.json, junit.xml,
//! report.html), that the database link was faulted, by which faults (those
//! the link scenarios that ran struck, not a fixed list), through which
//! database (its password never shown), and a replay line that owns the
//! link again (`--db`).
//!
//! Apart from tests/link_faults.rs because that file is part of the
//! mutation oracle (.cargo/mutants.toml), which judges the stores: this
//! test judges the reports, and costs a whole certification.
//!
//! PostgreSQL must answer: this test never skips.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;

use common::crash::root;
use common::link::{link_files, FreshDb};

/// Issue 49 item 5: a certification through a faulted link says so in
/// every report it writes, names the faults that struck (from the
/// scenarios that ran, not a fixed list) and the database (redacted), and
/// its replay line gives `--db` again: without it a replay would judge
/// the store past no proxy, and could not fill `{db}`.
#[test]
fn a_certificate_of_a_db_run_says_in_every_format_that_the_link_was_faulted_and_by_what() {
    let db = FreshDb::create("certificate");
    // Trust authentication: the password is never asked, only carried.
    let url = db.url.replacen("://postgres@", "://postgres:hunter2@", 1);
    assert!(url.contains("hunter2"), "{url}");
    let dir = std::env::temp_dir().join(format!("reqkey-link-cert-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let bin = env!("CARGO_BIN_EXE_reqkey");
    let out = std::process::Command::new(bin)
        .arg("certify")
        .args(["--target", "store+http://127.0.0.1:{port}"])
        .arg("--start")
        .arg(format!(
            "{bin} serve store --store {{db}} --listen 127.0.0.1:{{port}}"
        ))
        .args(["--db", &url, "--seed", "49", "--fuzz-cases", "0", "--quiet"])
        .arg("--out")
        .arg(&dir)
        .current_dir(root())
        .output()
        .unwrap();
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap_or_default();
    let (cert, json, junit, html) = (
        read("certificate.md"),
        read("results.json"),
        read("junit.xml"),
        read("report.html"),
    );
    let _ = std::fs::remove_dir_all(&dir);
    let text = common::text(&out);
    assert_eq!(out.status.code(), Some(0), "{text}\n{cert}");
    for (name, body) in [
        ("stdout/stderr", &text),
        ("certificate.md", &cert),
        ("results.json", &json),
        ("junit.xml", &junit),
        ("report.html", &html),
    ] {
        assert!(
            !body.is_empty() || name == "stdout/stderr",
            "{name} was not written"
        );
        assert!(
            !body.contains("hunter2"),
            "{name} shows the database's password"
        );
    }
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    let link = &doc["profile"]["linkScenarios"];
    let applied: Vec<&str> = link["applied"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    assert_eq!(applied.len(), link_files().len(), "{link}");
    let faults: Vec<&str> = link["faults"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    // What the link scenarios arm (scenarios/store/link.*.yaml), each once.
    for fault in [
        "reset before-commit",
        "reset after-commit",
        "reset in-transaction",
        "delay before-commit 7000 ms",
        "delay after-commit 7000 ms",
        "drop after-commit 8000 ms",
    ] {
        assert!(faults.contains(&fault), "{fault} not among {faults:?}");
    }
    assert!(
        faults.iter().any(|f| f.starts_with("error 40P01")),
        "{faults:?}"
    );
    assert!(
        faults.iter().any(|f| f.starts_with("error 40003")),
        "{faults:?}"
    );
    let unique: BTreeSet<&&str> = faults.iter().collect();
    assert_eq!(
        unique.len(),
        faults.len(),
        "a fault named twice: {faults:?}"
    );
    // The one claim, the same in every format.
    let claim = doc["profile"]["link"].as_str().unwrap();
    let named = format!(
        "the database link was faulted ({}) and the store conforms",
        faults.join(", ")
    );
    assert!(
        claim.starts_with("the harness owns the database link of the started store")
            && claim.contains("db 0 postgres://postgres:***@127.0.0.1:5432/")
            && claim.contains(&format!(
                "{} link scenarios applied and passed",
                applied.len()
            ))
            && claim.ends_with(&named),
        "{claim}"
    );
    let row = cert
        .lines()
        .find(|l| l.starts_with("| database link |"))
        .unwrap_or_default();
    assert!(
        row.contains(&named) && row.contains("db 0 postgres://"),
        "{row}"
    );
    assert!(
        junit.contains("name=\"database_link\"") && junit.contains(&named),
        "junit.xml has no database_link property naming the faults"
    );
    assert!(
        html.contains("<span id=\"link\">the harness owns the database link")
            && html.contains(&named),
        "report.html has no database link row naming the faults"
    );
    // Every link scenario's verdict says what struck its link.
    for id in &applied {
        let line = cert
            .lines()
            .find(|l| l.starts_with(&format!("| `{id}` |")))
            .unwrap_or_default();
        assert!(
            line.contains("| pass |") && line.contains("database link: db 0 ("),
            "{id}: {line}"
        );
    }
    // The replay owns the link again, redacted.
    let redacted = url.replacen(":hunter2@", ":***@", 1);
    assert_eq!(doc["target"]["db"], serde_json::json!([redacted]));
    let replay = cert
        .lines()
        .find(|l| l.starts_with("| replay |"))
        .unwrap_or_default();
    assert!(
        replay.contains(&format!("--db '{redacted}'"))
            || replay.contains(&format!("--db {redacted}")),
        "{replay}"
    );
}
