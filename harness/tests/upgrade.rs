//! Upgrades (SPEC 4, `[S4-upgrade]`): the reference SQLite and PostgreSQL
//! stores certified after a migration with runs already in them
//! (`reqkey certify --seed-legacy N`: keyless runs written through the
//! store's first schema version, migrated by opening the store, the whole
//! store suite, then the legacy runs read back and used), and the check
//! failing on stores whose migration broke the old rows. Like the backend
//! tests, this needs PostgreSQL (`REQKEY_POSTGRES_URL`, default on
//! 127.0.0.1) and fails, never skips, when it does not answer.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use reqkey_reference::store::legacy::{check_legacy, seed_legacy, LEGACY_SESSION_PREFIX};
use reqkey_reference::store::SqliteStore;
use reqkey_reference::store::StoreSpec;

/// A scratch SQLite path, removed (with its WAL files) on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let path = std::env::temp_dir().join(format!(
            "reqkey-upgrade-{name}-{}-{}.sqlite",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        ));
        let s = Self(path);
        s.remove();
        s
    }

    fn spec(&self) -> String {
        format!("sqlite:{}", self.0.display())
    }

    fn remove(&self) {
        for suffix in ["", "-wal", "-shm"] {
            let mut p = self.0.clone().into_os_string();
            p.push(suffix);
            let _ = std::fs::remove_file(p);
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        self.remove();
    }
}

/// `reqkey certify --seed-legacy 4` on `target`: (exit code, stderr).
fn certify_upgraded(target: &str, out: &Path) -> (Option<i32>, String) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let run = Command::new(env!("CARGO_BIN_EXE_reqkey"))
        .args([
            "certify",
            "--target",
            target,
            "--seed-legacy",
            "4",
            "--quiet",
            "--seed",
            "5",
            "--patience",
            "1s",
            "--capacity-keys",
            "100",
        ])
        .arg("--out")
        .arg(out)
        .current_dir(&root)
        .output()
        .expect("reqkey runs");
    (
        run.status.code(),
        String::from_utf8_lossy(&run.stderr).into_owned(),
    )
}

#[test]
fn the_sqlite_store_certifies_upgraded_from_its_first_schema_version() {
    let db = Scratch::new("certify");
    let out = std::env::temp_dir().join(format!("reqkey-upgrade-out-{}", std::process::id()));
    let (code, stderr) = certify_upgraded(&db.spec(), &out);
    let _ = std::fs::remove_dir_all(&out);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("the 4 legacy sessions read and behave as before"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_store_certifies_upgraded_from_its_first_schema_version() {
    let admin = std::env::var("REQKEY_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let (client, connection) = tokio_postgres::connect(&admin, tokio_postgres::NoTls)
        .await
        .expect("PostgreSQL answers (REQKEY_POSTGRES_URL; this test never skips)");
    tokio::spawn(connection);
    // A database of its own: the first schema version is written into one
    // that has no reqkey_* tables, as on the day before the release.
    let name = format!("reqkey_upgrade_{}", std::process::id());
    let _ = client
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .await;
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .expect("a database for the upgrade (the user may create databases)");
    let (before_query, query) = admin.split_once('?').unwrap_or((admin.as_str(), ""));
    let server = before_query
        .rsplit_once('/')
        .map_or(before_query, |(s, _)| s);
    let url = match query {
        "" => format!("{server}/{name}"),
        q => format!("{server}/{name}?{q}"),
    };
    let out = std::env::temp_dir().join(format!("reqkey-upgrade-pg-out-{}", std::process::id()));
    let result = tokio::task::spawn_blocking({
        let (url, out) = (url.clone(), out.clone());
        move || certify_upgraded(&url, &out)
    })
    .await;
    let _ = std::fs::remove_dir_all(&out);
    let _ = client
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .await;
    let (code, stderr) = result.expect("the certify task");
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("the 4 legacy sessions read and behave as before"),
        "{stderr}"
    );
}

/// The check has teeth: a migration that backfilled the new key columns
/// with `''` (instead of leaving them NULL), or one that rewrote the old
/// rows' start digests, is caught, and so is a store whose old rows are
/// gone. Each broken migration is simulated on a freshly upgraded file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upgrade_check_fails_stores_whose_migration_broke_the_old_rows() {
    let broken_migrations = [
        (
            "keys-backfilled-empty",
            "UPDATE runs SET request_key = '', request_digest = '' WHERE run_id = 'legacy-run-1'",
            "listRuns",
        ),
        (
            "start-digests-rewritten",
            "UPDATE runs SET start_digest = 'v2'",
            "replayed",
        ),
        (
            "old-rows-dropped",
            "DELETE FROM runs; DELETE FROM inputs",
            "listRuns",
        ),
    ];
    for (name, sql, symptom) in broken_migrations {
        let db = Scratch::new(name);
        let seed = seed_legacy(&StoreSpec::parse(&db.spec()).unwrap(), 2)
            .await
            .expect("legacy runs written");
        let store = SqliteStore::open(&db.0)
            .await
            .expect("the store migrates them");
        {
            let conn = rusqlite::Connection::open(&db.0).unwrap();
            conn.execute_batch(sql).unwrap();
        }
        let problems = check_legacy(&store, &seed).await;
        assert_eq!(problems.len(), 2, "{name}: {problems:?}");
        assert!(
            problems
                .iter()
                .all(|p| p.starts_with(LEGACY_SESSION_PREFIX) && p.contains(symptom)),
            "{name}: {problems:?}"
        );
    }
    // And a correct upgrade passes the same check.
    let db = Scratch::new("correct");
    let seed = seed_legacy(&StoreSpec::parse(&db.spec()).unwrap(), 2)
        .await
        .unwrap();
    let store = SqliteStore::open(&db.0).await.unwrap();
    assert_eq!(check_legacy(&store, &seed).await, Vec::<String>::new());
}

/// Legacy runs go into an empty database only, and only into a SQL store.
#[tokio::test]
async fn legacy_runs_need_an_empty_sql_store() {
    let db = Scratch::new("twice");
    seed_legacy(&StoreSpec::parse(&db.spec()).unwrap(), 1)
        .await
        .unwrap();
    let again = seed_legacy(&StoreSpec::parse(&db.spec()).unwrap(), 1)
        .await
        .unwrap_err()
        .to_string();
    assert!(again.contains("already has tables"), "{again}");
    let out = std::env::temp_dir().join(format!("reqkey-upgrade-mem-{}", std::process::id()));
    let (code, stderr) = certify_upgraded("memory", &out);
    let _ = std::fs::remove_dir_all(&out);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("reference SQL store"), "{stderr}");
}
