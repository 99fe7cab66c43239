//! The idem fuzz pass blames by counterfactual (issue 54, SPEC
//! `[[certify.blame.counterfactual]]`): on each variant of a fault it used to
//! pin on a clause that held, the pass (its battery and its programs)
//! blames exactly the clause broken and no other; the reference under the
//! same profile passes the same pass. `model/tests/idem_blame.rs` holds the
//! same faults on hand-written histories.
//!
//! In-process, memory storage.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{open_on, runtime as rt};
use reqkey_harness::run::fuzz::idem::{fuzz_idem, IdemFuzzOptions, IdemFuzzOutcome};
use reqkey_harness::targets::profile::resolve_profile;

/// The battery and `cases` programs on `spec` (seed `seed`).
fn pass(spec: &str, cases: u32, seed: u64) -> IdemFuzzOutcome {
    let rt = rt();
    let target = open_on(&rt, spec);
    let profile = rt
        .block_on(resolve_profile(target.as_ref(), None, 5_000))
        .unwrap()
        .idem
        .unwrap();
    let opts = IdemFuzzOptions {
        cases,
        seed,
        namespace: format!("blame-{seed}-{}", std::process::id()),
        target_name: spec.to_owned(),
        profile,
        call_timeout_ms: 10_000,
        max_shrink_iters: 64,
        long_pauses: 0,
        battery: true,
    };
    fuzz_idem(&rt, target, &opts)
}

/// The clauses a failure's reason blames: the first `[...]` of its line.
fn blamed(reason: &str) -> Vec<String> {
    let at = reason
        .find("[idem.")
        .unwrap_or_else(|| panic!("no clause in {reason}"));
    let end = at + reason[at..].find(']').expect("a closed bracket");
    reason[at + 1..end].split(", ").map(str::to_owned).collect()
}

/// Each variant and the one clause it breaks. The payload variants are
/// met by the battery's fingerprint probe whatever the programs draw.
const FAULTS: [(&str, &str); 13] = [
    // A key the declared syntax (`any`) admits, refused 400.
    ("any-refuses-quoted", "idem.key.syntax"),
    // A stored answer replayed on another route.
    ("unscoped-route", "idem.scope.declared"),
    // An expired key still replayed.
    ("expiry-ignored", "idem.expiry.honoured"),
    // A 500 to a duplicate in flight (nothing ran twice).
    ("in-flight-answers-500", "idem.concurrent.declared"),
    // A replay whose body is not the stored body.
    ("replay-drops-body", "idem.replay.completed"),
    // Replays marked, `X-Reqkey-Order` lost: a wrong replay, not a mark.
    ("replay-drops-headers", "idem.replay.completed"),
    // Under `errors: released`, the 500 kept and replayed.
    ("stores-released-errors", "idem.replay.errors"),
    // Under `errors: released`, the key held after a 500: 409 forever.
    ("lock-kept-after-error", "idem.replay.errors"),
    // Under `token`, a quoted key run instead of refused.
    ("token-accepts-quoted", "idem.key.token"),
    // Under `fingerprint: none`, another payload refused 422.
    ("fingerprint-despite-none", "idem.fingerprint.equivalence"),
    // Under `fingerprint: json`, the same JSON with other blanks refused
    // as another payload.
    ("fingerprint-raw-bytes", "idem.fingerprint.equivalence"),
    // Under `fingerprint: bytes`, the same JSON in other bytes replayed.
    ("bytes-compared-as-json", "idem.fingerprint.equivalence"),
    // Under `fingerprint: json`, another payload replayed.
    ("no-fingerprint", "idem.fingerprint.mismatch"),
];

fn each_on_threads<T: Send + Sync>(items: &[T], width: usize, f: impl Fn(&T) + Sync) {
    for chunk in items.chunks(width) {
        std::thread::scope(|s| {
            for item in chunk {
                let f = &f;
                s.spawn(move || f(item));
            }
        });
    }
}

#[test]
fn each_fault_is_blamed_on_the_clause_it_breaks_and_no_other() {
    each_on_threads(&FAULTS, 3, |(defect, clause)| {
        let spec = format!("broken-idem:{defect}");
        match pass(&spec, 16, 1) {
            IdemFuzzOutcome::Failed(f) => {
                assert_eq!(
                    blamed(&f.reason),
                    vec![clause.to_string()],
                    "{spec}: {}",
                    f.reason
                );
            }
            other => panic!("{spec}: the fuzz pass did not fail: {other:?}"),
        }
    });
}

#[test]
fn the_references_of_those_profiles_pass_the_same_pass() {
    each_on_threads(
        &[
            "reference-idem",
            "reference-idem:any",
            "reference-idem:lenient",
            "reference-idem:released",
        ],
        1,
        |spec| match pass(spec, 16, 1) {
            IdemFuzzOutcome::Passed { .. } => {}
            other => panic!("{spec} flagged: {other:?}"),
        },
    );
}
