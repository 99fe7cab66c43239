//! Every declared promise tested at its own scale (issue 55): the fuzz
//! pass's probes at scale are red on every broken variant at scale at the
//! default patience, green on the references, and every report names the
//! patience and how far each timing field was judged.
//!
//! The probes draw nothing from the seed (their keys and sessions are
//! fresh per run, their programs fixed), so one run of each stands for
//! seeds 1-3 here; the `#[ignore]`d test certifies each variant on seeds
//! 1, 2 and 3 end to end (minutes: `cargo test -p reqkey-harness --test
//! scale -- --ignored`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use reqkey_harness::run::fuzz::patience::{Patience, DEFAULT_PATIENCE_MS};
use reqkey_harness::run::fuzz::scale::{self, ScaleOutcome, ScaleProbes, DEFAULT_CAPACITY_KEYS};
use reqkey_harness::targets::profile::resolve_profile;

/// Each broken variant at scale, with the clause its probes must blame.
const BROKEN: [(&str, &str); 11] = [
    (
        "broken-memory:keys-evicted-beyond-1000",
        "store.keys.kept-at-scale",
    ),
    (
        "broken-memory:key-index-ttl-5s",
        "store.state.changes-only-by-operations",
    ),
    (
        "broken-memory:runs-reaped-after-5s",
        "store.state.changes-only-by-operations",
    ),
    (
        "reference-agent:keys-evicted-beyond-1000",
        "agent.keys.kept-at-scale",
    ),
    (
        "reference-agent:key-index-ttl-5s",
        "agent.state.changes-only-by-requests",
    ),
    (
        "reference-agent:suspended-resumed-by-timer",
        "agent.state.changes-only-by-requests",
    ),
    // Its keys are forgotten after 3 s whatever the count: the capacity
    // keys, asked again after that, blame the same loss on the count.
    (
        "broken-idem:expiry-shorter-than-declared",
        "idem.effect.at-most-once|idem.expiry.kept-at-scale",
    ),
    ("broken-idem:forgets-after-4s", "idem.effect.at-most-once"),
    (
        "broken-idem:lock-lapses-after-750ms",
        "idem.effect.at-most-once",
    ),
    (
        "broken-idem:evicts-beyond-1000-keys",
        "idem.expiry.kept-at-scale",
    ),
    (
        "broken-idem:errors-swept-after-5s",
        "idem.effect.at-most-once",
    ),
];

/// The probes at scale alone (both halves, nothing between) on `target`.
fn probe(target: &str, patience: Patience) -> ScaleOutcome {
    let rt = common::runtime();
    let t = common::open_on(&rt, target);
    rt.block_on(async {
        let info = resolve_profile(t.as_ref(), None, 10_000)
            .await
            .unwrap_or_else(|e| panic!("{target}: {e}"));
        let probes = ScaleProbes {
            target: t,
            profile: info.profile,
            idem: info.idem,
            patience,
            call_timeout_ms: 10_000,
            namespace: format!(
                "scale-{}-{}",
                std::process::id(),
                target.replace(|c: char| !c.is_ascii_alphanumeric(), "-")
            ),
            keys: DEFAULT_CAPACITY_KEYS,
        };
        scale::probe(&probes).await
    })
}

/// Probes run at once: they mostly wait, but each writes thousands of
/// keys first, and two cores shared with other tests must keep every
/// answer within the call timeout.
const AT_ONCE: usize = 4;

/// `f` of each target on threads of their own, [`AT_ONCE`] at a time.
fn each<T: Send>(targets: &[&'static str], f: impl Fn(&'static str) -> T + Sync) -> Vec<T> {
    let mut out = Vec::with_capacity(targets.len());
    for chunk in targets.chunks(AT_ONCE) {
        std::thread::scope(|s| {
            let handles: Vec<_> = chunk.iter().map(|t| s.spawn(|| f(t))).collect();
            out.extend(handles.into_iter().map(|h| h.join().unwrap()));
        });
    }
    out
}

#[test]
fn every_broken_variant_at_scale_is_red_at_the_default_patience() {
    let targets: Vec<&'static str> = BROKEN.iter().map(|(t, _)| *t).collect();
    let outcomes = each(&targets, |t| probe(t, Patience::default()));
    for ((target, clause), outcome) in BROKEN.iter().zip(outcomes) {
        let blamed: Vec<&str> = outcome.findings.iter().map(|f| f.clause.as_str()).collect();
        assert!(
            clause.split('|').any(|c| blamed.contains(&c)),
            "{target}: blamed {blamed:?}, not {clause}; error {:?}",
            outcome.error
        );
    }
}

#[test]
fn the_references_are_green_at_the_default_patience() {
    let targets = [
        "memory",
        "reference-agent",
        "reference-idem",
        "reference-idem:no-expiry",
        "reference-idem:long-lock",
        "reference-idem:wait",
    ];
    let outcomes = each(&targets, |t| probe(t, Patience::default()));
    for (target, o) in targets.iter().zip(&outcomes) {
        assert!(
            o.findings.is_empty() && o.error.is_none(),
            "{target}: {:#?} {:?}",
            o.findings,
            o.error
        );
        assert_eq!(o.record.patience_ms, DEFAULT_PATIENCE_MS);
        assert!(!o.record.capacity.is_empty(), "{target}");
        assert!(!o.record.final_reads.is_empty(), "{target}");
    }
    // The reference's 2 s expiry is within the default patience: judged at
    // its declared value; a lock held until completion never is (no wait
    // reaches "until completion"), nor is a minute-long lock.
    let reach = |i: usize, field: &str| {
        outcomes[i]
            .record
            .reach
            .iter()
            .find(|r| r.field == field)
            .cloned()
            .unwrap()
    };
    assert!(
        reach(2, "expiryMs").at_declared,
        "{:?}",
        reach(2, "expiryMs")
    );
    assert!(!reach(2, "lockMs").at_declared);
    assert!(reach(2, "lockMs").judged_up_to_ms.unwrap() > 8_000);
    let long = reach(4, "lockMs");
    assert_eq!(long.declared, Some(60_000));
    assert!(
        !long.at_declared && long.line().contains("judged up to"),
        "{long:?}"
    );
    assert!(!reach(3, "expiryMs").at_declared);
}

/// What the default patience catches that a short one does not: a key
/// index with a 5 s TTL, judged up to 1 s, passes.
#[test]
fn a_short_patience_misses_what_the_default_catches_and_says_how_far_it_reached() {
    let short = Patience::from_ms(1_000).unwrap();
    let o = probe("broken-memory:key-index-ttl-5s", short);
    assert!(o.findings.is_empty(), "{:#?}", o.findings);
    let o = probe("broken-idem:expiry-shorter-than-declared", short);
    let expiry = o
        .record
        .reach
        .iter()
        .find(|r| r.field == "expiryMs")
        .unwrap();
    assert_eq!(expiry.declared, Some(86_400_000));
    assert!(!expiry.at_declared);
    assert!(
        o.record
            .short_of_declared()
            .iter()
            .any(|f| f.starts_with("expiryMs 86400000 (judged up to")),
        "{:?}",
        o.record
    );
}

#[test]
fn a_certificate_names_the_patience_and_how_far_each_timing_field_was_judged() {
    let run = common::certify(
        "reference-idem",
        &["--patience", "1s", "--fuzz-cases", "2", "--seed", "3"],
    );
    assert_eq!(
        run.output.status.code(),
        Some(0),
        "{}",
        common::text(&run.output)
    );
    let scale = &run.results["fuzz"]["scale"];
    assert_eq!(scale["patienceMs"], 1000, "{scale}");
    let expiry = scale["reach"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["field"] == "expiryMs")
        .unwrap();
    assert_eq!(expiry["declared"], 2000);
    assert_eq!(expiry["atDeclared"], false);
    assert!(expiry["judgedUpToMs"].as_u64().unwrap() <= 1000, "{expiry}");
    let cert = &run.certificate;
    assert!(cert.contains("| patience | 1 s (--patience)"), "{cert}");
    assert!(
        cert.contains("| timing | expiryMs 2000: judged up to"),
        "{cert}"
    );
    assert!(cert.contains("| capacity | "), "{cert}");
    assert!(cert.contains("| final reads | "), "{cert}");
    assert!(
        !cert.contains("every declared value is judged"),
        "a field judged only up to the patience: {cert}"
    );
    // expiryMs 2000 is judged at its value by the scenarios and the
    // battery; lockMs null only as far as the probes waited.
    assert!(cert.contains("not each at its declared value"), "{cert}");
    assert!(cert.contains("`lockMs = null` (up to"), "{cert}");
    assert!(
        cert.contains("--patience 1s --capacity-keys 100 --seed 3"),
        "the replay line: {cert}"
    );
}

#[test]
fn a_variant_at_scale_fails_certify_and_fuzz_with_its_clause() {
    let target = "broken-memory:keys-evicted-beyond-1000";
    // The default count: a test's 100 keys stay within its index.
    let keys = DEFAULT_CAPACITY_KEYS.to_string();
    let run = common::certify(
        target,
        &["--fuzz-cases", "4", "--seed", "1", "--capacity-keys", &keys],
    );
    assert_eq!(
        run.output.status.code(),
        Some(1),
        "{}",
        common::text(&run.output)
    );
    let fuzz = &run.results["fuzz"];
    assert_eq!(fuzz["verdict"], "failed", "{fuzz}");
    assert!(
        fuzz["violations"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["clause"] == "store.keys.kept-at-scale"),
        "{fuzz}"
    );
    assert!(run.certificate.contains("**DOES NOT CONFORM**"));
    let out = common::reqkey(&[
        "fuzz",
        "--target",
        target,
        "--cases",
        "2",
        "--seed",
        "1",
        "--capacity-keys",
        &keys,
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", common::text(&out));
    assert!(common::text(&out).contains("[store.keys.kept-at-scale]"));
}

#[test]
fn a_patience_is_parsed_at_the_edge() {
    for bad in ["10", "2h", "1.5s", "0ms"] {
        let out = common::reqkey(&["certify", "--target", "memory", "--patience", bad]);
        assert_eq!(out.status.code(), Some(2), "{bad}: {}", common::text(&out));
        assert!(common::text(&out).contains("--patience"), "{bad}");
    }
}

#[test]
#[ignore = "minutes: every variant at scale certified on seeds 1, 2 and 3 at the default patience"]
fn every_broken_variant_at_scale_fails_its_certification_on_three_seeds() {
    let targets: Vec<&'static str> = BROKEN.iter().map(|(t, _)| *t).collect();
    each(&targets, |target| {
        for seed in 1..=3 {
            let run = common::certify(
                target,
                &[
                    "--seed",
                    &seed.to_string(),
                    "--patience",
                    reqkey_harness::run::fuzz::patience::DEFAULT_PATIENCE,
                    "--capacity-keys",
                    &DEFAULT_CAPACITY_KEYS.to_string(),
                ],
            );
            assert_eq!(run.output.status.code(), Some(1), "{target} (seed {seed})");
            assert_eq!(
                run.results["fuzz"]["verdict"], "failed",
                "{target} (seed {seed})"
            );
        }
    });
}

/// Where the harness starts the target and it declares that its state
/// survives a restart, the final reads are read again after one: a store
/// over SQLite passes, a memory store claiming durability fails on
/// `[[wire.store.durable]]`.
#[test]
fn the_final_reads_are_read_again_after_a_restart_of_a_target_declared_durable() {
    let bin = env!("CARGO_BIN_EXE_reqkey");
    let dir = std::env::temp_dir().join(format!("reqkey-scale-restart-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("s.db");
    for (store, code) in [
        (format!("sqlite:{}", db.display()), 0),
        ("broken-memory:claims-durable".to_owned(), 1),
    ] {
        let start = format!("{bin} serve store --store {store} --listen 127.0.0.1:{{port}}");
        let run = common::certify(
            "store+http://127.0.0.1:{port}",
            &[
                "--start",
                &start,
                "--fuzz-cases",
                "2",
                "--capacity-keys",
                "50",
                "--seed",
                "2",
            ],
        );
        assert_eq!(
            run.output.status.code(),
            Some(code),
            "{store}: {}",
            common::text(&run.output)
        );
        let reads = run.results["fuzz"]["scale"]["finalReads"].to_string();
        assert!(
            reads.contains("after a restart of every process"),
            "{store}: {reads}"
        );
        let durable_blamed = run.results["fuzz"]["violations"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["clause"] == "wire.store.durable");
        assert_eq!(
            durable_blamed,
            code == 1,
            "{store}: {}",
            run.results["fuzz"]
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
