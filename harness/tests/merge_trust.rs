//! `certify merge` cannot be fooled (issue 38): a shard edited after its
//! run fails its seal (keyed by REQKEY_SEAL_KEY when set); a shard whose
//! scenarios are not its share of the suite it claims (an invented id,
//! deleted scenarios with the file count lowered) or that judged another
//! server is refused with the reason; and shards of one `--start` target
//! merge although each chose its own port.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::text;
use reqkey_harness::report::seal;

fn scratch(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("reqkey-merge-trust-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn reqkey(args: &[&str], key: Option<&str>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_reqkey"));
    cmd.args(args);
    if args.first() == Some(&"certify") && args.get(1) != Some(&"merge") {
        // The probes at scale wait the tests' patience, not the default.
        cmd.args(["--patience", common::TEST_PATIENCE]);
        cmd.args(["--capacity-keys", common::TEST_CAPACITY_KEYS]);
    }
    cmd.env("NO_COLOR", "1").env_remove(seal::SEAL_KEY_ENV);
    if let Some(k) = key {
        cmd.env(seal::SEAL_KEY_ENV, k);
    }
    cmd.output().unwrap()
}

/// Two shards of one certification (`--seed 5`, `--partition K/2`) into
/// `root/PREFIX1`, `root/PREFIX2`, with `extra` (the target at least).
fn shard_dirs(root: &Path, prefix: &str, extra: &[&str], key: Option<&str>) -> Vec<PathBuf> {
    (1..=2)
        .map(|k| {
            let dir = root.join(format!("{prefix}{k}"));
            let partition = format!("{k}/2");
            let mut args = vec!["certify", "--quiet", "--seed", "5", "--partition"];
            args.extend([partition.as_str(), "--out", dir.to_str().unwrap()]);
            args.extend_from_slice(extra);
            let o = reqkey(&args, key);
            assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
            assert!(dir.join(seal::SEAL_FILE).is_file(), "a shard is sealed");
            dir
        })
        .collect()
}

/// Two shards of `target` into `root/shard1`, `root/shard2`, without a
/// fuzz pass: these tests judge merging, seals and identities, not the
/// fuzzer (`fuzz_teeth.rs` does; each shard's 256 programs cost about
/// 8 s of CPU and judged nothing here, issue 58).
fn shards(root: &Path, target: &str, key: Option<&str>) -> Vec<PathBuf> {
    shard_dirs(
        root,
        "shard",
        &["--target", target, "--fuzz-cases", "0"],
        key,
    )
}

fn merge(root: &Path, dirs: &[PathBuf], key: Option<&str>) -> Output {
    let out = root.join("merged");
    let mut args = vec![
        "certify",
        "merge",
        "--quiet",
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend(dirs.iter().map(|d| d.to_str().unwrap()));
    reqkey(&args, key)
}

fn doc(dir: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(dir.join("results.json")).unwrap()).unwrap()
}

/// Writes `doc` as the shard's results; re-sealed (as a forger who knows
/// how would) with `key`, or left with its old seal.
fn forge(dir: &Path, doc: &serde_json::Value, reseal: Option<Option<&str>>) {
    std::fs::write(dir.join("results.json"), doc.to_string()).unwrap();
    if let Some(key) = reseal {
        seal::write_seal(dir, key.map(str::as_bytes)).unwrap();
    }
}

fn refused(o: &Output, why: &str) {
    assert_eq!(o.status.code(), Some(2), "{}", text(o));
    assert!(text(o).contains(why), "want `{why}`: {}", text(o));
}

/// Every failure of a shard flipped to a pass.
fn flipped(mut d: serde_json::Value) -> serde_json::Value {
    for s in d["scenarios"].as_array_mut().unwrap() {
        if s["verdict"] == "fail" {
            s["verdict"] = "pass".into();
            s.as_object_mut().unwrap().remove("failure");
        }
    }
    d
}

#[test]
fn flipped_verdicts_fail_the_seal_and_a_key_holds_against_a_resealer() {
    let root = scratch("flipped");
    let dirs = shards(&root, "broken-memory:no-key-rule", None);
    assert_eq!(merge(&root, &dirs, None).status.code(), Some(1));
    let honest = doc(&dirs[0]);
    forge(&dirs[0], &flipped(honest.clone()), None);
    refused(&merge(&root, &dirs, None), "does not match its seal");
    forge(&dirs[0], &honest, None);

    // Keyed: the shards were sealed with the CI secret.
    let root = scratch("flipped-keyed");
    let dirs = shards(&root, "broken-memory:no-key-rule", Some("ci-secret"));
    assert_eq!(
        merge(&root, &dirs, Some("ci-secret")).status.code(),
        Some(1)
    );
    refused(&merge(&root, &dirs, None), "is sealed with a key");
    refused(
        &merge(&root, &dirs, Some("another")),
        "does not match its seal",
    );
    let forged = flipped(doc(&dirs[0]));
    forge(&dirs[0], &forged, Some(None));
    refused(
        &merge(&root, &dirs, Some("ci-secret")),
        "sealed without a key",
    );
    forge(&dirs[0], &forged, Some(Some("guessed")));
    refused(
        &merge(&root, &dirs, Some("ci-secret")),
        "does not match its seal",
    );
}

#[test]
fn a_shard_without_its_share_of_the_claimed_suite_is_refused() {
    let root = scratch("share");
    let dirs = shards(&root, "broken-memory:no-key-rule", None);
    let honest = doc(&dirs[1]);

    // A real scenario renamed to an invented id.
    let mut renamed = honest.clone();
    renamed["scenarios"][0]["id"] = "store.invented-and-passing".into();
    renamed["scenarios"][0]["verdict"] = "pass".into();
    forge(&dirs[1], &renamed, Some(None));
    refused(
        &merge(&root, &dirs, None),
        "reports scenarios its share of the suite does not hold: store.invented-and-passing",
    );

    // The failing scenarios deleted and the file count lowered to match.
    let mut deleted = honest.clone();
    let before = deleted["scenarios"].as_array().unwrap().len();
    deleted["scenarios"]
        .as_array_mut()
        .unwrap()
        .retain(|s| s["verdict"] != "fail");
    let gone = before - deleted["scenarios"].as_array().unwrap().len();
    assert!(gone > 0, "the broken store fails some scenario of shard 2");
    let files = deleted["suite"]["files"].as_u64().unwrap();
    deleted["suite"]["files"] = (files - gone as u64).into();
    forge(&dirs[1], &deleted, Some(None));
    refused(&merge(&root, &dirs, None), "lacks");

    forge(&dirs[1], &honest, Some(None));
    assert_eq!(merge(&root, &dirs, None).status.code(), Some(1));
}

#[test]
fn shards_of_two_different_servers_are_refused() {
    let root = scratch("servers");
    let dirs = shards(&root, "memory", None);
    let mut other = doc(&dirs[1]);
    other["target"]["health"]["name"] = "another-store".into();
    forge(&dirs[1], &other, Some(None));
    refused(
        &merge(&root, &dirs, None),
        "the shards judged different servers",
    );
}

#[test]
fn shards_of_one_started_target_merge_although_their_ports_differ() {
    let root = scratch("started");
    let start = format!(
        "exec {} serve store --store memory --listen 127.0.0.1:{{port}}",
        env!("CARGO_BIN_EXE_reqkey")
    );
    let dirs: Vec<PathBuf> = (1..=2)
        .map(|k| {
            let dir = root.join(format!("shard{k}"));
            let o = reqkey(
                &[
                    "certify",
                    "--quiet",
                    "--seed",
                    "5",
                    // Merging of port templates is judged, not the fuzzer.
                    "--fuzz-cases",
                    "0",
                    "--start",
                    &start,
                    "--target",
                    "store+http://127.0.0.1:{port}",
                    "--partition",
                    &format!("{k}/2"),
                    "--out",
                    dir.to_str().unwrap(),
                ],
                None,
            );
            assert_eq!(o.status.code(), Some(0), "{}", text(&o));
            dir
        })
        .collect();
    assert_ne!(
        doc(&dirs[0])["target"]["spec"],
        doc(&dirs[1])["target"]["spec"],
        "each shard chose its own port"
    );
    let o = merge(&root, &dirs, None);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let merged = doc(&root.join("merged"));
    assert_eq!(merged["target"]["spec"], "store+http://127.0.0.1:{port}");
}

/// Two shards of a started store (`--start`, so one target as written on
/// any port, as one deployment judged on two days) with `--run-id`.
fn shards_of_run(root: &Path, store: &str, run: &str, key: Option<&str>) -> Vec<PathBuf> {
    let start = format!(
        "exec {} serve store --store {store} --listen 127.0.0.1:{{port}}",
        env!("CARGO_BIN_EXE_reqkey")
    );
    let extra = [
        "--fuzz-cases",
        "0",
        "--run-id",
        run,
        "--start",
        &start,
        "--target",
        "store+http://127.0.0.1:{port}",
    ];
    shard_dirs(root, &format!("{run}-"), &extra, key)
}

#[test]
fn yesterdays_green_shards_do_not_complete_todays_red_run() {
    // Issue 51: yesterday's sealed green shard with today's red one once
    // merged into CONFORMS. Each shard names its run in results.json (so a
    // keyed seal covers it) and in its seal.
    let root = scratch("runs");
    let key = Some("k-51");
    let yesterday = shards_of_run(&root, "memory", "ci-100.1", key);
    let today = shards_of_run(&root, "broken-memory:no-key-rule", "ci-101.1", key);
    assert_eq!(doc(&today[0])["run_id"], "ci-101.1");
    let seal_text = std::fs::read_to_string(today[0].join(seal::SEAL_FILE)).unwrap();
    assert!(seal_text.contains("ci-101.1"), "{seal_text}");
    // Today's shard 1 (red) swapped for yesterday's (green).
    let mixed = [yesterday[0].clone(), today[1].clone()];
    let o = merge(&root, &mixed, key);
    refused(&o, "run id");
    // One run merges.
    let o = merge(&root, &today, key);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    // Yesterday's shards, all of one run, are refused when the merge job
    // names today's run.
    let mut args = vec!["certify", "merge", "--run-id", "ci-101.1", "--out"];
    let out = root.join("merged-named");
    args.push(out.to_str().unwrap());
    args.extend(yesterday.iter().map(|d| d.to_str().unwrap()));
    refused(&reqkey(&args, key), "not of --run-id `ci-101.1`");
    // An edited run id breaks a keyed seal.
    let mut d = doc(&yesterday[1]);
    d["run_id"] = "ci-101.1".into();
    forge(&yesterday[1], &d, None);
    refused(
        &merge(&root, &[today[0].clone(), yesterday[1].clone()], key),
        "does not match its seal",
    );
}

#[test]
fn a_shard_at_or_over_its_bounds_is_refused_before_it_is_read_or_held() {
    // One pair of shards (no fuzz pass: these judge the reader's bounds)
    // for both bounds of a shard.
    let root = scratch("bounds");
    let dirs = shard_dirs(
        &root,
        "shard",
        &["--target", "memory", "--fuzz-cases", "0"],
        None,
    );
    // Issue 58: each results.json is bounded (16 MiB, below), but its
    // parsed form is several times its text when it is made of small
    // values, and merge takes up to 1024 shards: the process's memory is
    // checked at each shard (--max-memory-bytes). The shards as certified
    // merge under a 64 MiB ceiling; one padded to its size bound with
    // four million one-letter tags (about 130 MB parsed) is refused under
    // it, naming the shard and the bound.
    let small = (64u64 << 20).to_string();
    let merged = |ceiling: &str| {
        let out = root.join("merged");
        reqkey(
            &[
                "certify",
                "merge",
                "--quiet",
                "--max-memory-bytes",
                ceiling,
                "--out",
                out.to_str().unwrap(),
                dirs[0].to_str().unwrap(),
                dirs[1].to_str().unwrap(),
            ],
            None,
        )
    };
    let o = merged(&small);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let mut d = doc(&dirs[1]);
    let size = d.to_string().len() as u64;
    let room = seal::MAX_RESULTS_BYTES - size - 64;
    let tags = vec![serde_json::Value::from("t"); usize::try_from(room / 4).unwrap()];
    d["scenarios"][0]["tags"] = tags.into();
    forge(&dirs[1], &d, Some(None));
    let padded = std::fs::metadata(dirs[1].join("results.json"))
        .unwrap()
        .len();
    assert!(
        padded <= seal::MAX_RESULTS_BYTES && padded > seal::MAX_RESULTS_BYTES - 1024,
        "at the bound: {padded}"
    );
    let o = merged(&small);
    refused(
        &o,
        "over its memory ceiling of 64 MiB (--max-memory-bytes 67108864)",
    );
    assert!(
        text(&o).contains(dirs[1].to_str().unwrap()),
        "names the shard: {}",
        text(&o)
    );
    // Issue 51: a 3 GiB results.json was read whole (3.15 GB peak) before
    // its seal was checked. A sparse file costs no disk here.
    let huge = dirs[1].join("results.json");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&huge)
        .unwrap()
        .set_len(3 << 30)
        .unwrap();
    // Under GNU time when the machine has it (for the peak), else bare.
    let timed = Path::new("/usr/bin/time").is_file();
    let mut cmd = if timed {
        let mut c = Command::new("/usr/bin/time");
        c.args(["-f", "peak-rss-kb=%M", env!("CARGO_BIN_EXE_reqkey")]);
        c
    } else {
        Command::new(env!("CARGO_BIN_EXE_reqkey"))
    };
    let started = std::time::Instant::now();
    let o = cmd
        .args(["certify", "merge", "--quiet", "--out"])
        .arg(root.join("merged"))
        .args(&dirs)
        .env_remove(seal::SEAL_KEY_ENV)
        .output()
        .unwrap();
    refused(&o, "MAX_RESULTS_BYTES");
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    if timed {
        let peak_kb: u64 = text(&o)
            .split("peak-rss-kb=")
            .nth(1)
            .and_then(|t| t.trim().lines().next()?.parse().ok())
            .expect("a peak RSS figure");
        assert!(peak_kb < 200 * 1024, "peak RSS {peak_kb} KB");
    }
    let _ = std::fs::remove_dir_all(&root);
}
