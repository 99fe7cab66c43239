//! Every mutant of the system model is caught by the property it names.
#![allow(clippy::unwrap_used)]

use reqkey_model::check::{check, format_path, CheckOptions};
use reqkey_model::mutants::Mutant;
use reqkey_model::props;
use reqkey_model::system::{Config, KeyedEntryModel};

/// Two clients, two requests, one resend, one delete: small enough for
/// a debug-build test, large enough for every mutant's counterexample.
fn small(mutant: Option<Mutant>) -> Config {
    Config {
        clients: 2,
        requests: 2,
        mutant,
        ..Config::default()
    }
}

#[test]
fn every_mutant_violates_its_property() {
    for m in Mutant::ALL {
        let opts = CheckOptions {
            symmetry: false,
            until: Some(m.violates()),
            ..CheckOptions::default()
        };
        let s = check(small(Some(m)), opts);
        assert!(
            s.violated(m.violates()),
            "{}: {:?}",
            m.name(),
            s.violations.iter().map(|v| v.0).collect::<Vec<_>>()
        );
        let (_, path) = s
            .violations
            .iter()
            .find(|(n, _)| *n == m.violates())
            .unwrap();
        let listing = format_path(&KeyedEntryModel::new(small(Some(m))), path);
        assert!(listing.starts_with("  1. "), "{listing}");
    }
}

#[test]
fn the_correct_model_violates_nothing_and_reaches_every_answer_but_one() {
    let s = check(small(None), CheckOptions::default());
    assert!(s.violations.is_empty());
    // Two clients have no keyless entry: no later run, so a finished
    // holder is always current.
    assert_eq!(s.unreached, vec![props::SOMETIMES_ALREADY_COMPLETED]);
}

#[test]
fn names_round_trip_and_are_unique() {
    let mut names: Vec<_> = Mutant::ALL.iter().map(|m| m.name()).collect();
    for m in Mutant::ALL {
        assert_eq!(Mutant::parse(m.name()), Some(m));
    }
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), Mutant::ALL.len());
    assert_eq!(Mutant::parse("nope"), None);
}
