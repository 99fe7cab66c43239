//! The conformance corpus as the only oracle of a mutation run
//! (`scripts/mutants.sh`, docs/mutation.md).
//!
//! cargo-mutants mutates the model's rules and planning code and the
//! reference stores and executor, then runs exactly this test binary: the
//! store corpus on every reference store, the agent corpus on the
//! reference agent server, and the crash scenarios on reference servers
//! the harness starts, kills and restarts (tests/common/crash.rs), and
//! beside each corpus the bounded fuzz pass certification runs (the same
//! budget, this file's seed). No unit test takes part, so a mutant survives
//! exactly when the published suite would certify the mutated reference.
//! The tests are `#[ignore]`d in the suite (`cargo nextest run`): the
//! corpora they run are run there by `store_corpus`, `backend_targets`,
//! `agent_corpus` and `crash`, and running them twice cost CI six minutes
//! of test time. `scripts/mutants.sh` runs them with `--include-ignored`,
//! first on the unmutated tree (its baseline: green, or no mutant is judged).
//!
//! PostgreSQL and Redis are needed as for the other corpus tests
//! (`REQKEY_POSTGRES_URL`, `REQKEY_REDIS_URL`, defaults on 127.0.0.1); a
//! service that does not answer fails, never skips.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;

use common::{failing, redis_cluster_url, run_corpus};

/// A fixed seed: a mutant is caught or missed reproducibly.
const SEED: u64 = 20_261_203;

async fn green(level: &str, spec: &str) {
    // What is certified is what was asked for: the identity a certificate
    // records (`/health`) names the backend of the spec.
    if level == "store" {
        use reqkey_harness::targets::spec::open_target;
        use reqkey_harness::targets::TargetOptions;
        let target = open_target(spec, TargetOptions::default())
            .await
            .expect("target opens");
        let health = target.health().await.expect("health answers");
        let backend = match spec.split(':').next().unwrap_or(spec) {
            "redis+cluster" => "redis-cluster",
            other => other,
        };
        let name = health["name"].as_str().unwrap_or_default();
        assert!(
            name.ends_with(&format!("/{backend}")),
            "{spec}: /health names {name}"
        );
    }
    // An agent server is judged on the scenarios of the profile its
    // `/health` declares, as `reqkey certify` judges it.
    let summary = if level == "agent" {
        common::run_agent_profile(spec, None, SEED).await.summary
    } else {
        run_corpus(level, spec, SEED).await
    };
    assert!(summary.passed > 0, "{spec}: nothing ran");
    assert_eq!(
        failing(&summary),
        BTreeSet::new(),
        "{spec} (seed {SEED}): {summary:#?}"
    );
    fuzz_pass_green(spec).await;
}

/// The bounded fuzz pass `reqkey certify` runs beside the corpus (its
/// default budget, the seed of the corpus run here), on a target opened
/// as certification opens it: a program it finds failing fails the
/// certification, so a mutant it catches is caught.
async fn fuzz_pass_green(spec: &str) {
    use reqkey_harness::run::fuzz::pass::{fuzz_pass, DEFAULT_CERTIFY_FUZZ_CASES};
    use reqkey_harness::targets::profile::resolve_profile;
    use reqkey_harness::targets::spec::open_target;
    use reqkey_harness::targets::TargetOptions;
    let target = open_target(spec, TargetOptions::default())
        .await
        .expect("target opens");
    let info = resolve_profile(target.as_ref(), None, 10_000)
        .await
        .expect("the profile is read");
    let pass = fuzz_pass(
        target,
        info.profile,
        info.idem,
        DEFAULT_CERTIFY_FUZZ_CASES,
        SEED,
        10_000,
    )
    .await;
    assert_eq!(pass.verdict, "passed", "{spec}: the fuzz pass {pass:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "the mutation oracle: scripts/mutants.sh runs it (--include-ignored); store_corpus, backend_targets, agent_corpus and crash run the same corpora in the suite"]
async fn store_corpus_on_memory() {
    green("store", "memory").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "the mutation oracle: scripts/mutants.sh runs it (--include-ignored); store_corpus, backend_targets, agent_corpus and crash run the same corpora in the suite"]
async fn store_corpus_on_sqlite() {
    let db = std::env::temp_dir().join(format!(
        "reqkey-mutation-oracle-{}.sqlite",
        std::process::id()
    ));
    green("store", &format!("sqlite:{}", db.display())).await;
    for suffix in ["", "-wal", "-shm"] {
        let mut p = db.clone().into_os_string();
        p.push(suffix);
        let _ = std::fs::remove_file(p);
    }
}

/// On a database of its own, created for this run and dropped after: the
/// store's migrations run from nothing, as on a first deployment (a
/// mutant that skips them would pass on a database that has the schema).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "the mutation oracle: scripts/mutants.sh runs it (--include-ignored); store_corpus, backend_targets, agent_corpus and crash run the same corpora in the suite"]
async fn store_corpus_on_postgres() {
    let admin = std::env::var("REQKEY_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let (client, connection) = tokio_postgres::connect(&admin, tokio_postgres::NoTls)
        .await
        .expect("PostgreSQL answers (REQKEY_POSTGRES_URL)");
    tokio::spawn(connection);
    let name = format!(
        "reqkey_oracle_{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    );
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .expect("a database of the oracle's own");
    // The admin URL with its database replaced (any query string kept).
    let (head, query) = admin
        .split_once('?')
        .map_or((admin.as_str(), ""), |(h, q)| (h, q));
    let base = head.rsplit_once('/').map_or(head, |(b, _)| b);
    let url = if query.is_empty() {
        format!("{base}/{name}")
    } else {
        format!("{base}/{name}?{query}")
    };
    let result = tokio::spawn(async move { green("store", &url).await }).await;
    let _ = client
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .await;
    if let Err(e) = result {
        std::panic::resume_unwind(e.into_panic());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "the mutation oracle: scripts/mutants.sh runs it (--include-ignored); store_corpus, backend_targets, agent_corpus and crash run the same corpora in the suite"]
async fn store_corpus_on_redis() {
    let url = std::env::var("REQKEY_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    green("store", &url).await;
}

/// The Redis store on a Redis Cluster (`REQKEY_REDIS_CLUSTER_URL`, as
/// `scripts/redis-cluster.sh start` serves it): its cluster code is
/// reference code too. A cluster that does not answer fails, never skips.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "the mutation oracle: scripts/mutants.sh runs it (--include-ignored); store_corpus, backend_targets, agent_corpus and crash run the same corpora in the suite"]
async fn store_corpus_on_redis_cluster() {
    green("store", &redis_cluster_url()).await;
}

/// The crash scenarios (kill, pause, restart of servers the harness
/// started) on the reference agent over every persistent backend, one and
/// three replicas: leases, orphans and durability are judged here.
#[test]
#[ignore = "the mutation oracle: scripts/mutants.sh runs it (--include-ignored); store_corpus, backend_targets, agent_corpus and crash run the same corpora in the suite"]
fn crash_scenarios_on_the_reference_agent() {
    common::crash::assert_green_on_every_persistent_backend();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "the mutation oracle: scripts/mutants.sh runs it (--include-ignored); store_corpus, backend_targets, agent_corpus and crash run the same corpora in the suite"]
async fn agent_corpus_on_the_reference_agent() {
    green("agent", "reference-agent").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "the mutation oracle: scripts/mutants.sh runs it (--include-ignored); store_corpus, backend_targets, agent_corpus and crash run the same corpora in the suite"]
async fn agent_corpus_on_the_reference_agent_of_the_other_profiles() {
    green("agent", "reference-agent:no-request-keys").await;
    green("agent", "reference-agent:interrupt-previous").await;
}

/// The ids of the scenarios of `level` that fail on `spec` (run on the
/// given scenario files only, to stay quick).
async fn failing_on(level: &str, spec: &str, files: &[&str]) -> BTreeSet<String> {
    use reqkey_harness::run::runner::{self, RunConfig};
    use reqkey_harness::scenario::load_paths;
    use reqkey_harness::targets::spec::open_target;
    use reqkey_harness::targets::TargetOptions;
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scenarios");
    let paths: Vec<_> = files.iter().map(|f| root.join(level).join(f)).collect();
    let scenarios = load_paths(&paths).expect("the scenarios load");
    let target = open_target(spec, TargetOptions::default())
        .await
        .expect("target opens");
    let summary = runner::run(target, &scenarios, &RunConfig::new(SEED), &mut []).await;
    failing(&summary).into_iter().map(str::to_owned).collect()
}

/// The deliberately broken stores are part of the reference: each must
/// still fail the scenario named after the rule it breaks (the code that
/// breaks them is mutated too).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "the mutation oracle: scripts/mutants.sh runs it (--include-ignored); store_corpus, backend_targets, agent_corpus and crash run the same corpora in the suite"]
async fn each_broken_store_fails_the_scenario_named_after_its_rule() {
    let cases = [
        (
            "no-key-rule",
            "taken-names-holder.yaml",
            "request-key.taken-names-holder",
        ),
        (
            "key-rule-after-cas",
            "key-rule-before-cas.yaml",
            "request-key.key-rule-before-cas",
        ),
        (
            "no-replay-first",
            "replay-before-key-rule.yaml",
            "request-key.replay-before-key-rule",
        ),
        (
            "delete-keeps-keys",
            "delete-frees-keys.yaml",
            "request-key.delete-frees-keys",
        ),
        (
            "holder-read-outside-commit",
            "race.yaml",
            "request-key.race",
        ),
    ];
    for (defect, file, id) in cases {
        let failed = failing_on("store", &format!("broken-memory:{defect}"), &[file]).await;
        assert!(failed.contains(id), "broken-memory:{defect} passed {id}");
    }
}

/// Likewise the broken executors and the keyless server.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "the mutation oracle: scripts/mutants.sh runs it (--include-ignored); store_corpus, backend_targets, agent_corpus and crash run the same corpora in the suite"]
async fn each_broken_executor_fails_the_scenario_named_after_its_bug() {
    // (no-replan-after-key-taken is left out: it fails only the races, and
    // only when a race goes its way, which an oracle cannot wait for.)
    let cases: [(&str, &[&str]); 4] = [
        ("policy-before-key", &["attach-running.yaml"]),
        ("ignore-digest", &["key-conflict.yaml"]),
        (
            "attach-streams-from-now",
            &["chat-retried-send-attaches.yaml"],
        ),
        ("no-request-keys", &["attach-running.yaml"]),
    ];
    for (variant, files) in cases {
        let failed = failing_on("agent", &format!("reference-agent:{variant}"), files).await;
        assert!(
            !failed.is_empty(),
            "reference-agent:{variant} passed {files:?}"
        );
    }
}

/// The seed of the falsification record (`scenarios/falsification.json`,
/// written by the corpus tests).
const RECORD_SEED: u64 = 11;

/// Every broken variant the falsification record names still fails one of
/// the scenarios the record says it fails. The defects are reference code
/// too: a mutant that switches one off (a `match` arm of its config
/// deleted, its guard made `false`) turns a broken variant into a correct
/// one, which the record no longer describes. (Entries with `--profile`
/// are correct servers judged against a profile they do not keep: no
/// defect code of theirs to mutate.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "the mutation oracle: scripts/mutants.sh runs it (--include-ignored); store_corpus, backend_targets, agent_corpus and crash run the same corpora in the suite"]
async fn each_recorded_broken_store_still_fails_a_recorded_scenario() {
    recorded_variants_fail("store").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "the mutation oracle: scripts/mutants.sh runs it (--include-ignored); store_corpus, backend_targets, agent_corpus and crash run the same corpora in the suite"]
async fn each_recorded_broken_executor_still_fails_a_recorded_scenario() {
    recorded_variants_fail("agent").await;
}

async fn recorded_variants_fail(level: &str) {
    use reqkey_harness::run::runner::{self, RunConfig};
    use reqkey_harness::targets::spec::open_target;
    use reqkey_harness::targets::TargetOptions;
    let root = common::corpus(level).parent().unwrap().to_owned();
    let record = reqkey_harness::check::coverage::read_record(&root)
        .expect("the falsification record reads");
    let variants = if level == "store" {
        &record.store
    } else {
        &record.agent
    };
    let corpus = common::load_corpus(level);
    let mut checked = 0;
    for (variant, ids) in variants {
        if variant.contains(' ') {
            continue;
        }
        // The scenarios that need a target the harness started (kill,
        // restart) are judged by tests/crash.rs; a variant only they catch
        // is left to it.
        let ids: BTreeSet<String> = ids
            .iter()
            .filter(|id| corpus.iter().any(|s| &&s.id == id && common::in_process(s)))
            .cloned()
            .collect();
        if ids.is_empty() {
            continue;
        }
        let ids = &ids;
        let summary = if level == "agent" {
            // A server whose `/health` lacks `supportsRequestKey` declares
            // no profile: it is judged against the default one.
            let stated = variant
                .ends_with("health-without-key-flag")
                .then_some("default");
            common::run_agent_scenarios(variant, stated, ids, RECORD_SEED).await
        } else {
            let chosen: Vec<_> = corpus
                .iter()
                .filter(|s| ids.contains(&s.id))
                .cloned()
                .collect();
            let target = open_target(variant, TargetOptions::default())
                .await
                .expect("target opens");
            runner::run(target, &chosen, &RunConfig::new(RECORD_SEED), &mut []).await
        };
        assert!(
            summary.passed + summary.failed > 0,
            "{variant}: nothing ran"
        );
        let failed = failing(&summary);
        assert!(
            !failed.is_empty(),
            "{variant} passed every scenario the record says it fails ({ids:?})"
        );
        // Every recorded scenario that does not race still fails, as the
        // corpus tests hold the record to (a race meets a bug on some runs
        // only, so one failure among the races is all a run can ask). A
        // mutant that switches off one way a variant is caught - a
        // universal answer check that the other recorded scenarios back up
        // by their own expectations - is caught here.
        for id in ids {
            let races = corpus
                .iter()
                .any(|s| &s.id == id && s.tags.iter().any(|t| t == "race"));
            assert!(
                races || failed.contains(id.as_str()),
                "{variant} passed {id}, a scenario the record says it fails"
            );
        }
        checked += 1;
    }
    assert!(
        checked > 10,
        "the record names only {checked} {level} variants"
    );
}
