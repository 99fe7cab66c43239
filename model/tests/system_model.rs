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

/// The same world without the model's reductions (`reduction.rs`).
fn unreduced(cfg: Config) -> Config {
    Config {
        reduction: false,
        ..cfg
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
    let full = check(unreduced(small()), sequential());
    assert_eq!(
        (full.unique_states, full.total_states, full.max_depth),
        (SMALL_FULL_UNIQUE, SMALL_FULL_TOTAL, SMALL_FULL_DEPTH)
    );
    assert!(full.violations.is_empty(), "{:?}", full.violations);
}

/// What a check concluded, for comparing a reduced with an unreduced one:
/// the violated properties and the `sometimes` properties reached.
fn verdicts(s: &CheckSummary) -> (Vec<&'static str>, Vec<&'static str>) {
    let mut violated: Vec<_> = s.violations.iter().map(|v| v.0).collect();
    let mut reached: Vec<_> = s.examples.iter().map(|e| e.0).collect();
    violated.sort_unstable();
    reached.sort_unstable();
    (violated, reached)
}

/// The reductions are sound where it can be seen whole: on small worlds
/// (with twins, with lease expiry, without finishing runs, with two
/// resends) and under every mutant, the reduced check violates exactly the
/// properties the unreduced one violates and reaches exactly the same
/// `sometimes` properties, with fewer states.
#[test]
fn the_reductions_keep_every_counterexample_and_every_witness() {
    let worlds = [
        small(),
        Config {
            twins: 1,
            ..small()
        },
        Config {
            expiries: 1,
            ..small()
        },
        Config {
            finishes: false,
            ..small()
        },
        Config {
            retries: 2,
            ..small()
        },
        Config {
            requests: 3,
            ..small()
        },
    ];
    let mut cases: Vec<Config> = worlds.to_vec();
    for m in reqkey_model::mutants::Mutant::ALL {
        cases.push(Config {
            mutant: Some(m),
            ..small()
        });
        cases.push(Config {
            mutant: Some(m),
            clients: 3,
            requests: 3,
            ..small()
        });
    }
    for cfg in cases {
        let reduced = check(cfg.clone(), sequential());
        let full = check(unreduced(cfg.clone()), sequential());
        assert_eq!(verdicts(&reduced), verdicts(&full), "{cfg:?}");
        assert!(reduced.unique_states < full.unique_states, "{cfg:?}");
        if let Some(m) = cfg.mutant {
            assert!(reduced.violated(m.violates()), "{cfg:?}");
        }
    }
}

/// Reduction 3 checked state by state: over every state of the unreduced
/// small worlds (and under every mutant), two states that the reduced hash
/// does not tell apart give every property the same value and lead to the
/// same classes of states (a bisimulation), so exploring one of them is
/// exploring both.
#[test]
fn states_the_reduced_hash_merges_agree_on_every_property_and_every_successor() {
    use stateright::{Expectation, Model};
    use std::collections::hash_map::DefaultHasher;
    use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
    use std::hash::{Hash, Hasher};

    let class = |st: &SystemState| {
        let mut st = st.clone();
        st.reduced = true;
        let mut h = DefaultHasher::new();
        st.hash(&mut h);
        h.finish()
    };
    let mut worlds = vec![
        small(),
        Config {
            twins: 1,
            ..small()
        },
        Config {
            expiries: 1,
            ..small()
        },
    ];
    for m in reqkey_model::mutants::Mutant::ALL {
        worlds.push(Config {
            mutant: Some(m),
            ..small()
        });
    }
    for cfg in worlds {
        let model = KeyedEntryModel::new(unreduced(cfg.clone()));
        let properties = model.properties();
        let mut seen: HashMap<u64, (Vec<bool>, BTreeSet<u64>)> = HashMap::new();
        let mut visited = HashSet::new();
        let mut queue: VecDeque<SystemState> = model.init_states().into();
        let mut merged = 0usize;
        while let Some(st) = queue.pop_front() {
            let values: Vec<bool> = properties
                .iter()
                .map(|p| match p.expectation {
                    Expectation::Eventually => true,
                    _ => (p.condition)(&model, &st),
                })
                .collect();
            let mut successors = BTreeSet::new();
            for (_, next) in model.next_steps(&st) {
                successors.insert(class(&next));
                let mut h = DefaultHasher::new();
                next.hash(&mut h);
                if visited.insert(h.finish()) {
                    queue.push_back(next);
                }
            }
            match seen.get(&class(&st)) {
                Some(known) => {
                    merged += 1;
                    assert_eq!(known, &(values, successors), "{cfg:?}: {st:?}");
                }
                None => {
                    seen.insert(class(&st), (values, successors));
                }
            }
        }
        assert!(merged > 0, "{cfg:?}: the reduced hash merged nothing");
    }
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

/// The default configuration (3 clients, 2 sessions, 2 keys, 2 inputs, 4
/// requests, 1 resend, 1 delete, runs finish, 1 CAS retry): its counts, the
/// same with symmetry on and off (no two clients share a script, so there
/// is nothing to reduce), and progress reports along the way that never
/// run ahead of the final figures. One thread: with more, the depth at
/// which a state is first met depends on the threads' race.
#[test]
fn the_default_configuration_has_pinned_state_counts_with_and_without_symmetry() {
    let mut reports = Vec::new();
    let with = check_with_progress(
        Config::default(),
        CheckOptions::default(),
        Some(std::time::Duration::from_millis(5)),
        &mut |p| reports.push(p),
    );
    let without = check(Config::default(), sequential());
    for s in [&with, &without] {
        assert_eq!(
            (s.unique_states, s.total_states, s.max_depth),
            (DEFAULT_UNIQUE, DEFAULT_TOTAL, DEFAULT_DEPTH)
        );
        assert!(s.passed(), "{:?} {:?}", s.violations, s.unreached);
    }
    let full = check(unreduced(Config::default()), CheckOptions::default());
    assert_eq!(
        (full.unique_states, full.total_states, full.max_depth),
        (DEFAULT_FULL_UNIQUE, DEFAULT_FULL_TOTAL, DEFAULT_FULL_DEPTH)
    );
    assert!(full.passed(), "{:?} {:?}", full.violations, full.unreached);
    assert_eq!(verdicts(&full), verdicts(&with));
    eprintln!(
        "default: {} unique with symmetry, {} without: reduction {:.2}x",
        with.unique_states,
        without.unique_states,
        without.unique_states as f64 / with.unique_states as f64
    );
    assert!(
        !reports.is_empty(),
        "no progress report in {:?}",
        with.elapsed
    );
    for w in reports.windows(2) {
        assert!(w[0].unique_states <= w[1].unique_states && w[0].elapsed < w[1].elapsed);
    }
    let last = reports[reports.len() - 1];
    assert!(last.unique_states <= with.unique_states && last.total_states <= with.total_states);
    assert!(last.line().contains("unique states/s"), "{}", last.line());
}

/// Client 0 and a twin with the same script: symmetry halves (nearly) the
/// states and keeps the verdict; both counts are pinned.
#[test]
fn two_twins_have_pinned_counts_with_and_without_symmetry() {
    let cfg = Config {
        clients: 2,
        requests: 2,
        twins: 1,
        ..Config::default()
    };
    let reduced = check(cfg.clone(), CheckOptions::default());
    let full = check(cfg, sequential());
    assert_eq!(
        (reduced.unique_states, full.unique_states),
        (TWINS2_REDUCED_UNIQUE, TWINS2_FULL_UNIQUE)
    );
    eprintln!(
        "clients 2 requests 2 twins 1: {} unique with symmetry, {} without: reduction {:.2}x",
        reduced.unique_states,
        full.unique_states,
        full.unique_states as f64 / reduced.unique_states as f64
    );
    assert!(full.violations.is_empty() && reduced.violations.is_empty());
}

/// With twins, symmetry and the reductions, the states counted do not
/// depend on which member of a symmetry class a thread met first: the
/// reductions choose the same move from every member (a done client is
/// moved on by the least of the done clients, not the first by index), so
/// two threads count what one does.
#[test]
fn with_twins_two_threads_count_what_one_thread_counts() {
    let cfg = Config {
        clients: 2,
        requests: 2,
        twins: 1,
        ..Config::default()
    };
    for _ in 0..3 {
        let s = check(
            cfg.clone(),
            CheckOptions {
                threads: 2,
                ..CheckOptions::default()
            },
        );
        assert_eq!(s.unique_states, TWINS2_REDUCED_UNIQUE);
    }
}

// With the reductions (the default).
const DEFAULT_UNIQUE: usize = 56_695;
const DEFAULT_TOTAL: usize = 126_412;
const DEFAULT_DEPTH: usize = 26;
const TWINS2_REDUCED_UNIQUE: usize = 14_639;
const TWINS2_FULL_UNIQUE: usize = 28_545;
const SMALL_UNIQUE: usize = 748;
const SMALL_TOTAL: usize = 1356;
const SMALL_DEPTH: usize = 15;
const TWINS_FULL_UNIQUE: usize = 1879;
const TWINS_REDUCED_UNIQUE: usize = 951;
// Without them (`--no-reduction`): the counts before the reductions.
const DEFAULT_FULL_UNIQUE: usize = 457_719;
const DEFAULT_FULL_TOTAL: usize = 1_710_129;
const DEFAULT_FULL_DEPTH: usize = 29;
const SMALL_FULL_UNIQUE: usize = 2163;
const SMALL_FULL_TOTAL: usize = 4955;
const SMALL_FULL_DEPTH: usize = 15;

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

#[test]
fn worlds_beyond_the_state_layout_are_refused_up_front() {
    assert_eq!(Config::default().validate(), Ok(()));
    let crowded = Config {
        clients: 1,
        requests: 16,
        twins: 7,
        ..Config::default()
    };
    let err = crowded.validate().unwrap_err();
    assert!(
        err.contains("at most 24 attempts") && err.contains("has 129"),
        "{err}"
    );
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
    let s = check(cfg, sequential());
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
