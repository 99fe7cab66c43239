//! The system model, checked: pinned state counts, symmetry, scripts.
#![allow(clippy::unwrap_used)]

use reqkey_model::check::*;
use reqkey_model::system::*;

fn small() -> Config {
    Config {
        clients: 2,
        requests: 2,
        ..Config::default()
    }
}

fn sequential() -> CheckOptions {
    CheckOptions {
        symmetry: false,
        ..CheckOptions::default()
    }
}

#[test]
fn the_default_scripts_use_both_sessions_both_keys_and_a_keyless_entry() {
    let scripts = Config::default().scripts();
    assert_eq!(scripts.len(), 3);
    let all: Vec<Request> = scripts.concat();
    assert!(all.iter().any(|r| r.session == 1));
    assert!(all.iter().any(|r| r.key == Some(1)));
    assert!(all.iter().any(|r| r.key.is_none()));
    assert!(all
        .iter()
        .any(|r| r.key == Some(0) && r.input == 1 && r.session == 0));
}

#[test]
fn twins_share_a_script_and_a_role() {
    let model = KeyedEntryModel::new(Config {
        twins: 1,
        ..small()
    });
    assert!(model.has_twins());
    assert_eq!(model.scripts()[0], model.scripts()[2]);
    assert!(!KeyedEntryModel::new(small()).has_twins());
}

#[test]
fn the_small_configuration_has_pinned_state_counts_and_no_violation() {
    let s = check(small(), sequential());
    assert_eq!(
        (s.unique_states, s.total_states, s.max_depth),
        (SMALL_UNIQUE, SMALL_TOTAL, SMALL_DEPTH)
    );
    assert!(s.violations.is_empty(), "{:?}", s.violations);
}

#[test]
fn symmetry_reduces_twins_and_keeps_the_verdict() {
    let cfg = Config {
        clients: 1,
        requests: 1,
        twins: 1,
        ..Config::default()
    };
    let full = check(cfg.clone(), sequential());
    let reduced = check(cfg, CheckOptions::default());
    assert_eq!(
        (full.unique_states, reduced.unique_states),
        (TWINS_FULL_UNIQUE, TWINS_REDUCED_UNIQUE)
    );
    assert!(reduced.unique_states < full.unique_states);
    assert!(full.violations.is_empty() && reduced.violations.is_empty());
    let names = |s: &CheckSummary| {
        let mut n: Vec<_> = s.examples.iter().map(|e| e.0).collect();
        n.sort_unstable();
        n
    };
    assert_eq!(names(&full), names(&reduced));
}

const SMALL_UNIQUE: usize = 2163;
const SMALL_TOTAL: usize = 4955;
const SMALL_DEPTH: usize = 15;
const TWINS_FULL_UNIQUE: usize = 5853;
const TWINS_REDUCED_UNIQUE: usize = 2938;

#[test]
#[ignore = "a benchmark: run with --release"]
fn measure() {
    let only = std::env::var("MEASURE").unwrap_or_default();
    for (label, cfg) in [
        (
            "c2r1",
            Config {
                clients: 2,
                requests: 1,
                ..Config::default()
            },
        ),
        (
            "c3r1",
            Config {
                requests: 1,
                ..Config::default()
            },
        ),
        ("default", Config::default()),
        (
            "twins",
            Config {
                twins: 1,
                ..Config::default()
            },
        ),
    ] {
        if !only.split(',').any(|o| o == label) {
            continue;
        }
        for sym in [true, false] {
            let s = check(
                cfg.clone(),
                CheckOptions {
                    symmetry: sym,
                    ..Default::default()
                },
            );
            eprintln!(
                "{label} sym={sym} unique={} total={} depth={} {:?} viol={:?} unreached={:?}",
                s.unique_states,
                s.total_states,
                s.max_depth,
                s.elapsed,
                s.violations.iter().map(|v| v.0).collect::<Vec<_>>(),
                s.unreached
            );
        }
    }
}

/// Lease expiry as an action (SPEC 5, `[[lease.expire.any-reader]]`): a
/// running run's executor dies and a reader interrupts it. Every property
/// still holds (one run per key, the input at most once: a retry of the
/// expired run replays it), and that replay is reached.
#[test]
fn with_lease_expiry_every_property_holds_and_an_expired_run_is_replayed() {
    let cfg = Config {
        expiries: 1,
        ..small()
    };
    let s = check(cfg.clone(), sequential());
    assert!(s.violations.is_empty(), "{:?}", s.violations);
    assert!(
        !s.unreached
            .contains(&reqkey_model::props::SOMETIMES_EXPIRED_REPLAY),
        "{:?}",
        s.unreached
    );
    let without = check(small(), sequential());
    assert!(s.unique_states > without.unique_states);
}
