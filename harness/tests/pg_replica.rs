//! Stores on PostgreSQL streaming replication (docs/pg-replication.md):
//! the reference store on the primary, with a hot standby attached, passes
//! the store corpus; the broken `postgres+standby-reads://` store, which
//! writes to the primary and reads key holders and current runs from the
//! standby, fails it, its races judged not linearizable; and the same
//! code reading the primary passes, so what is caught is the replica's
//! stale state, not the code. And a failover drill on a second pair
//! (127.0.0.1:5444-5445): the primary killed, the standby promoted, the
//! reference store keeps every acknowledged key when replication is
//! synchronous, and loses them (a keyed retry runs twice) when it is not
//! and the standby had fallen behind.
//!
//! The pair is `REQKEY_PG_PRIMARY_URL` and `REQKEY_PG_STANDBY_URL`, or,
//! when they are not both given, the one `scripts/pg-replica.sh` starts on
//! 127.0.0.1:5442 and 5443 (started here once per test process; the
//! script leaves a healthy pair alone). The standby must replay with a
//! delay (the script's `recovery_min_apply_delay`, 200 ms), which makes a
//! stale read certain rather than a matter of timing. A pair that does not
//! answer FAILS these tests; they never skip.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{assert_failures_are_verdicts, failing, run_on};
use reqkey_harness::run::event::RunSummary;
use reqkey_harness::targets::spec::open_target;
use reqkey_harness::targets::{Target, TargetOptions};
use reqkey_model::{CommitOutcome, StartRun};
use reqkey_reference::store::{PostgresStore, SessionStateStore};
use tokio_postgres::{Client, NoTls};

const SCRIPT_PRIMARY: &str = "postgres://postgres@127.0.0.1:5442/test";
const SCRIPT_STANDBY: &str = "postgres://postgres@127.0.0.1:5443/test";
/// The least apply delay under which the variant's failure is certain.
const MIN_APPLY_DELAY_MS: f64 = 100.0;

/// The primary's and the standby's URLs (see the module docs).
fn pair() -> (String, String) {
    if let (Ok(p), Ok(s)) = (
        std::env::var("REQKEY_PG_PRIMARY_URL"),
        std::env::var("REQKEY_PG_STANDBY_URL"),
    ) {
        return (p, s);
    }
    static STARTED: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    common::start_once(&STARTED, "pg-replica.sh", "PostgreSQL primary and standby");
    (SCRIPT_PRIMARY.into(), SCRIPT_STANDBY.into())
}

/// `HOST:PORT` of a `postgres://[USERINFO@]HOST:PORT/DB` URL.
fn host_port(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?']).next().unwrap_or(rest);
    authority.rsplit_once('@').map_or(authority, |(_, h)| h)
}

/// The broken store over `primary`, reading from the server at `reads`.
fn standby_reads(primary: &str, reads: &str) -> String {
    let rest = primary
        .split_once("://")
        .map(|(_, r)| r)
        .expect("a postgres:// URL");
    let sep = if rest.contains('?') { '&' } else { '?' };
    format!(
        "postgres+standby-reads://{rest}{sep}standby={}",
        host_port(reads)
    )
}

async fn connect(url: &str) -> Client {
    let (client, connection) =
        tokio::time::timeout(Duration::from_secs(5), tokio_postgres::connect(url, NoTls))
            .await
            .unwrap_or_else(|_| panic!("{} does not answer within 5 s", host_port(url)))
            .unwrap_or_else(|e| {
                panic!(
                    "cannot connect to {}: {e}. Start the pair with scripts/pg-replica.sh start; \
             these tests never skip.",
                    host_port(url)
                )
            });
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

/// The primary is not in recovery and streams to at least one standby;
/// the standby is in recovery. Fails the test otherwise.
async fn assert_streaming(primary: &Client, standby: &Client) {
    assert!(!in_recovery(primary).await, "the primary is in recovery");
    assert!(in_recovery(standby).await, "the standby is not in recovery");
    let streaming: i64 = primary
        .query_one(
            "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(streaming >= 1, "no standby streams from the primary");
}

async fn in_recovery(c: &Client) -> bool {
    c.query_one("SELECT pg_is_in_recovery()", &[])
        .await
        .unwrap()
        .get(0)
}

/// Does the server behind `c` show the row `id` of the lag test's table?
async fn seen(c: &Client, id: &str) -> bool {
    match c
        .query_opt(
            "SELECT 1 FROM reqkey_test_replica_lag WHERE id = $1",
            &[&id],
        )
        .await
    {
        Ok(row) => row.is_some(),
        // The table's creation is not replayed yet either.
        Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_TABLE) => false,
        Err(e) => panic!("reading the standby: {e}"),
    }
}

async fn open(spec: &str) -> Arc<dyn Target> {
    open_target(spec, TargetOptions::default())
        .await
        .unwrap_or_else(|e| panic!("the target {spec} could not be opened: {e}"))
}

async fn corpus(spec: &str) -> RunSummary {
    run_on(open(spec).await, "store", 30).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_standby_streams_from_the_primary_and_replays_late() {
    let (p, s) = pair();
    let (primary, standby) = (connect(&p).await, connect(&s).await);
    assert_streaming(&primary, &standby).await;
    let delay_ms: f64 = standby
        .query_one(
            "SELECT extract(epoch FROM current_setting('recovery_min_apply_delay')::interval)::float8 * 1000",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        delay_ms >= MIN_APPLY_DELAY_MS,
        "the standby replays after {delay_ms} ms; the tests need at least {MIN_APPLY_DELAY_MS} ms \
         (scripts/pg-replica.sh sets recovery_min_apply_delay)"
    );
    // A commit on the primary is absent on the standby at first, then there.
    primary
        .batch_execute("CREATE TABLE IF NOT EXISTS reqkey_test_replica_lag (id text PRIMARY KEY)")
        .await
        .unwrap();
    let id = format!("lag-{}-{}", std::process::id(), rand_suffix());
    primary
        .execute(
            "INSERT INTO reqkey_test_replica_lag (id) VALUES ($1)",
            &[&id],
        )
        .await
        .unwrap();
    let committed = Instant::now();
    assert!(
        !seen(&standby, &id).await,
        "the standby showed a commit at once: no apply delay"
    );
    while !seen(&standby, &id).await {
        assert!(
            committed.elapsed() < Duration::from_secs(10),
            "the standby did not replay a commit within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let lag = committed.elapsed();
    assert!(
        lag >= Duration::from_millis(MIN_APPLY_DELAY_MS as u64),
        "replayed after {lag:?}"
    );
    primary
        .execute("DELETE FROM reqkey_test_replica_lag WHERE id = $1", &[&id])
        .await
        .unwrap();
}

/// A suffix that differs between runs of the same process id.
fn rand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_reference_store_on_the_primary_passes_with_the_standby_attached() {
    let (p, s) = pair();
    assert_streaming(&connect(&p).await, &connect(&s).await).await;
    let summary = corpus(&p).await;
    assert_eq!(failing(&summary), BTreeSet::new(), "{summary:#?}");
    assert!(
        summary.passed >= 40,
        "only {} scenarios ran",
        summary.passed
    );
    assert_eq!(summary.exit_code(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_store_that_reads_the_standby_fails_its_races_as_not_linearizable() {
    let (p, s) = pair();
    assert_streaming(&connect(&p).await, &connect(&s).await).await;
    let spec = standby_reads(&p, &s);
    let summary = corpus(&spec).await;
    assert_failures_are_verdicts(&spec, &summary);
    let failed = failing(&summary);
    // The races and the random concurrent histories, judged by the
    // linearizability check. Each catches the stale read with some
    // probability (how far the standby lags on this machine now): at least
    // one of them must, and any that fails, fails for the stale read.
    let mut caught = Vec::new();
    for id in [
        "request-key.race",
        "store.race-after-a-history",
        "store.mixed-histories",
    ] {
        let result = summary
            .results
            .iter()
            .find(|r| r.id == id)
            .unwrap_or_else(|| panic!("{id} did not run"));
        let Some(failure) = result.failure.as_ref() else {
            continue;
        };
        // On a loaded machine the standby lags further behind, and a
        // sequential step of the scenario may read the stale answer before
        // the race's history is judged: red either way, for the stale read.
        assert!(
            failure.message.contains("not linearizable")
                || failure.message.contains("answer does not match"),
            "{id}: {failure:#?}"
        );
        caught.push(id);
    }
    assert!(
        !caught.is_empty(),
        "no race caught the standby reads on {spec}: {summary:#?}"
    );
    // A key read right after its commit: the holder is not there yet.
    for id in [
        "store.key-holder-matrix",
        "request-key.recorded-and-found",
        "request-key.taken-names-holder",
    ] {
        assert!(failed.contains(id), "{id} passed on {spec}: {failed:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_same_store_reading_the_primary_passes() {
    // The control: the variant's code with its reads sent to the primary
    // itself. Green, so the red above is the standby's stale state.
    let (p, _) = pair();
    let summary = corpus(&standby_reads(&p, &p)).await;
    assert_eq!(failing(&summary), BTreeSet::new(), "{summary:#?}");
    assert_eq!(summary.exit_code(), 0);
}

#[test]
fn the_variant_form_is_built_from_the_pair() {
    assert_eq!(
        standby_reads(SCRIPT_PRIMARY, SCRIPT_STANDBY),
        "postgres+standby-reads://postgres@127.0.0.1:5442/test?standby=127.0.0.1:5443"
    );
    assert_eq!(
        standby_reads(
            "postgres://u:pw@h:1/db?sslmode=disable",
            "postgres://u:pw@k:2/db"
        ),
        "postgres+standby-reads://u:pw@h:1/db?sslmode=disable&standby=k:2"
    );
}

/// The failover drill's pair: its own ports and files, so that the tests
/// above keep theirs while this one kills a primary.
const DRILL_ENV: [(&str, &str); 3] = [
    ("REQKEY_PG_PRIMARY_PORT", "5444"),
    ("REQKEY_PG_STANDBY_PORT", "5445"),
    ("REQKEY_PG_REPLICA_DIR", "/tmp/reqkey-pg-failover"),
];
const DRILL_PRIMARY: &str = "postgres://postgres@127.0.0.1:5444/test";
const DRILL_STANDBY: &str = "postgres://postgres@127.0.0.1:5445/test";
/// Keyed commits acknowledged before each failover.
const DRILL_COMMITS: usize = 40;

/// `scripts/pg-replica.sh COMMAND` on the drill's pair, synchronous or
/// not; panics with the script's stderr when it fails.
fn drill_script(command: &str, sync: bool) {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/pg-replica.sh");
    let out = std::process::Command::new("bash")
        .arg(&script)
        .arg(command)
        .envs(DRILL_ENV)
        .env("REQKEY_PG_SYNC", if sync { "1" } else { "0" })
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    assert!(
        out.status.success(),
        "{} {command} failed: {}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn drill_start(session_prefix: &str, i: usize) -> StartRun {
    StartRun {
        session_id: format!("{session_prefix}-{i}"),
        run_id: format!("r{i}"),
        expected_current_run_id: None,
        input: serde_json::json!({"text": format!("request {i}")}),
        request_key: Some(format!("k{i}")),
        request_digest: Some(format!("d{i}")),
    }
}

/// [`DRILL_COMMITS`] keyed commits on `store`, eight at a time; every one
/// must be acknowledged `started`.
async fn acknowledged_commits(store: &PostgresStore, prefix: &str) -> Vec<StartRun> {
    let starts: Vec<StartRun> = (0..DRILL_COMMITS).map(|i| drill_start(prefix, i)).collect();
    for chunk in starts.chunks(8) {
        let mut set = tokio::task::JoinSet::new();
        for s in chunk {
            let (store, s) = (store.clone(), s.clone());
            set.spawn(async move { (s.session_id.clone(), store.commit_run_start(s).await) });
        }
        while let Some(joined) = set.join_next().await {
            let (session, answer) = joined.unwrap();
            let answer = answer.unwrap_or_else(|e| panic!("{session}: {e}"));
            assert_eq!(answer.outcome, CommitOutcome::Started, "{session}");
        }
    }
    starts
}

/// After the failover, on the new primary: how many acknowledged commits
/// are gone (their key unknown, and a keyed retry STARTS a second run
/// instead of replaying the first).
async fn lost_after_failover(store: &PostgresStore, starts: &[StartRun]) -> usize {
    let mut lost = 0;
    for s in starts {
        let key = s.request_key.as_deref().unwrap();
        let holder = store
            .get_run_by_request_key(&s.session_id, key)
            .await
            .unwrap();
        let retry = store.commit_run_start(s.clone()).await.unwrap();
        match (holder, retry.outcome) {
            (Some(run), CommitOutcome::Replayed) => assert_eq!(run.run_id, s.run_id),
            (None, CommitOutcome::Started) => lost += 1,
            (holder, outcome) => {
                panic!(
                    "{}: holder {holder:?} but the retry {outcome:?}",
                    s.session_id
                )
            }
        }
    }
    lost
}

async fn connect_store(url: &str) -> PostgresStore {
    PostgresStore::connect(url)
        .await
        .unwrap_or_else(|e| panic!("the store at {url} does not open: {e}"))
}

/// Waits (at most 10 s) until `primary` replicates to no standby.
async fn until_no_standby(primary: &Client) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let n: i64 = primary
            .query_one("SELECT count(*) FROM pg_stat_replication", &[])
            .await
            .unwrap()
            .get(0);
        if n == 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the standby is still attached after 10 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits (at most 10 s) until the standby has flushed all the primary's WAL.
async fn until_standby_flushed(primary: &Client) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let n: i64 = primary
            .query_one(
                "SELECT count(*) FROM pg_stat_replication WHERE flush_lsn >= pg_current_wal_lsn()",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if n >= 1 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the standby did not catch up within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The failover drill (docs/pg-replication.md): keyed commits acknowledged
/// by the primary, the primary killed (SIGKILL), the standby promoted, the
/// reference store reconnected to it. Synchronous replication: every
/// acknowledged key survives and its retry replays. Asynchronous, with the
/// standby cut off before the commits: every one is gone and its retry
/// starts a second run, the double execution that keys exist to prevent;
/// so the drill can fail, and it is the replication mode that decides.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failover_of_the_primary_keeps_every_acknowledged_key_only_when_synchronous() {
    let nonce = rand_suffix();

    drill_script("start", true);
    let store = connect_store(DRILL_PRIMARY).await;
    let starts = acknowledged_commits(&store, &format!("drill-sync-{nonce}")).await;
    drop(store);
    drill_script("failover", true);
    let promoted = connect_store(DRILL_STANDBY).await;
    assert_eq!(lost_after_failover(&promoted, &starts).await, 0);
    drop(promoted);

    // `start` makes the pair anew: the old one is failed over, and not
    // synchronous.
    drill_script("start", false);
    let store = connect_store(DRILL_PRIMARY).await;
    let primary = connect(DRILL_PRIMARY).await;
    until_standby_flushed(&primary).await;
    // The standby stops receiving: it falls behind, as one does under load.
    let standby = connect(DRILL_STANDBY).await;
    standby
        .batch_execute("ALTER SYSTEM SET primary_conninfo = ''")
        .await
        .unwrap();
    standby
        .batch_execute("SELECT pg_reload_conf()")
        .await
        .unwrap();
    until_no_standby(&primary).await;
    let starts = acknowledged_commits(&store, &format!("drill-async-{nonce}")).await;
    drop(store);
    drill_script("failover", false);
    let promoted = connect_store(DRILL_STANDBY).await;
    assert_eq!(lost_after_failover(&promoted, &starts).await, DRILL_COMMITS);
    drop(promoted);
    drill_script("stop", false);
}
