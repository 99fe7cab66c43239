//! `reqkey coverage --fuzz` lists every dimension of both fuzzers'
//! alphabets with the clauses it can break, and exits 1 on a row that
//! names a clause spec/SPEC.md lacks or a variant that is not built in;
//! the dimensions issue 47 asked for (timers, body limits, every stream
//! event, HTTP and SSE headers, concurrency, profiles) are generated.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use reqkey_harness::run::fuzz::alphabet::{self, Generated};
use reqkey_harness::targets::spec::builtin_variants;
use reqkey_model::vocab::Level;

fn coverage_fuzz(args: &[&str]) -> (Option<i32>, String) {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_reqkey"))
        .args(["coverage", "--fuzz"])
        .args(args)
        .output()
        .unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
    )
}

#[test]
fn coverage_fuzz_lists_every_dimension_with_its_clauses_and_exits_0() {
    let (code, out) = coverage_fuzz(&[]);
    assert_eq!(code, Some(0), "{out}");
    for f in alphabet::fuzzers() {
        for d in f.dimensions {
            assert!(
                out.contains(&format!("  {}  ", d.id)),
                "{} missing:\n{out}",
                d.id
            );
            for c in d.clauses {
                assert!(out.contains(c), "{}: clause {c} missing", d.id);
            }
            if let Generated::No(why) = d.generated {
                assert!(out.contains(why), "{}: no reason printed", d.id);
            }
        }
    }
    let (code, agent) = coverage_fuzz(&["--level", "agent"]);
    assert_eq!(code, Some(0));
    assert!(agent.starts_with("agent fuzzer (agent level)"), "{agent}");
    assert!(!agent.contains("store fuzzer"));
}

#[test]
fn every_row_names_known_clauses_and_built_in_variants() {
    let all = reqkey_model::clauses::clauses().unwrap();
    let is_clause = |id: &str| all.iter().any(|c| c.id == id);
    let is_variant = |level: Level, name: &str| builtin_variants(level).iter().any(|v| v == name);
    let fuzzers = alphabet::fuzzers();
    assert_eq!(
        alphabet::problems(&fuzzers, &is_clause, &is_variant),
        Vec::<String>::new()
    );
    // The check can fail: a clause or variant it does not know is named.
    let unknown_clause = |id: &str| id != "agent.route.start" && is_clause(id);
    let problems = alphabet::problems(&fuzzers, &unknown_clause, &is_variant);
    assert!(
        problems
            .iter()
            .any(|p| p.contains("`agent.route.start` is no clause")),
        "{problems:?}"
    );
    let no_variants = |_: Level, _: &str| false;
    let problems = alphabet::problems(&fuzzers, &is_clause, &no_variants);
    assert!(problems
        .iter()
        .any(|p| p.contains("`reference-agent:body-limit-in-characters` is no built-in")));
}

/// What docs/fuzz.md once listed as what the fuzzers cannot find (bodies
/// over the limits, timing, stream events beyond the first and last, wire
/// spellings) is generated now, each with a variant only it finds.
#[test]
fn the_dimensions_the_fuzzers_once_missed_are_generated_with_teeth() {
    let fuzzers = alphabet::fuzzers();
    let dims: Vec<&alphabet::Dimension> = fuzzers.iter().flat_map(|f| f.dimensions).collect();
    for id in [
        "agent.limits.body",
        "agent.limits.ids",
        "agent.timers.run-end",
        "agent.timers.wait-ms",
        "agent.stream.events",
        "agent.headers.http",
        "agent.headers.sse",
        "agent.body.chunked",
        "agent.wire.spellings",
        "agent.json.type-and-spelling",
        "agent.routes.other",
        "store.limits.sizes",
        "store.args.type-and-spelling",
    ] {
        let d = dims.iter().find(|d| d.id == id).unwrap();
        assert!(matches!(d.generated, Generated::Yes(_)), "{id}");
        assert!(!d.teeth.is_empty(), "{id}: no variant only it finds");
    }
    for id in ["agent.concurrency", "agent.profiles", "store.concurrency"] {
        let d = dims.iter().find(|d| d.id == id).unwrap();
        assert!(matches!(d.generated, Generated::Yes(_)), "{id}");
    }
}
