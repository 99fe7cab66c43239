//! The scenario loader, fuzzed: random bytes, bytes from YAML's own
//! alphabet, and structure-aware scenarios (real keys and step kinds,
//! nested values, then mutated). Whatever the input, the loader returns —
//! a scenario, or an error that carries a real `file:line:col` inside the
//! text — and never panics. Every case runs on a thread with a generous
//! deadline, so a hang fails the test (naming the seed) instead of hanging
//! CI. The seed is fixed; `REQKEY_FUZZ_SEED` replays another one.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use reqkey_harness::scenario::parse_scenario;
use serde_yaml::{Mapping, Value};

/// A hang guard, not a speed goal: far above what any input takes.
const DEADLINE: Duration = Duration::from_secs(20);

fn seed() -> u64 {
    std::env::var("REQKEY_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_10ad)
}

fn runner(cases: u32) -> TestRunner {
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed().to_le_bytes());
    TestRunner::new_with_rng(
        Config {
            cases,
            failure_persistence: None,
            max_shrink_iters: 256,
            ..Config::default()
        },
        TestRng::from_seed(RngAlgorithm::ChaCha, &bytes),
    )
}

/// Loads `text` on a thread under [`DEADLINE`]; an error must name
/// `fuzz.yaml:LINE:COL:` with a position inside the text.
fn check(text: String) -> Result<(), TestCaseError> {
    let lines = text.split('\n').count();
    let (tx, rx) = mpsc::channel();
    let input = text.clone();
    std::thread::spawn(move || {
        let result = std::panic::catch_unwind(|| {
            parse_scenario(Path::new("fuzz.yaml"), &input).map_err(|e| e.to_string())
        });
        let _ = tx.send(result);
    });
    let result = match rx.recv_timeout(DEADLINE) {
        Ok(Ok(r)) => r,
        Ok(Err(_)) => {
            return Err(TestCaseError::fail(format!(
                "the loader panicked on {text:?}"
            )))
        }
        Err(_) => {
            return Err(TestCaseError::fail(format!(
                "the loader did not return within {DEADLINE:?} on {text:?}"
            )))
        }
    };
    if let Err(message) = result {
        let rest = message
            .strip_prefix("fuzz.yaml:")
            .ok_or_else(|| TestCaseError::fail(format!("no file in {message:?}")))?;
        let mut parts = rest.splitn(3, ':');
        let line: usize = parts.next().and_then(|l| l.parse().ok()).unwrap_or(0);
        let column: usize = parts.next().and_then(|c| c.parse().ok()).unwrap_or(0);
        prop_assert!(
            line >= 1 && column >= 1 && line <= lines + 1,
            "no real position in {message:?} ({lines} lines) for {text:?}"
        );
    }
    Ok(())
}

fn run(name: &str, cases: u32, strategy: impl Strategy<Value = String>) {
    let mut runner = runner(cases);
    if let Err(e) = runner.run(&strategy, check) {
        panic!("{name} (seed {}): {e}", seed());
    }
}

#[test]
fn random_bytes_never_panic_and_errors_have_positions() {
    run(
        "random bytes",
        1_000,
        prop::collection::vec(any::<u8>(), 0..1_024)
            .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
    );
}

#[test]
fn bytes_from_yamls_alphabet_never_panic_and_errors_have_positions() {
    let alphabet: Vec<char> = "[]{}:-,#'\"|>&*!%?@` \n\n\n  \tabcs019.$e+\\"
        .chars()
        .collect();
    run(
        "YAML alphabet",
        1_500,
        prop::collection::vec(prop::sample::select(alphabet), 0..512)
            .prop_map(|c| c.into_iter().collect::<String>()),
    );
}

/// Keys a scenario and its steps really use, and some that are wrong.
const KEYS: &[&str] = &[
    "id",
    "level",
    "summary",
    "tags",
    "repeat",
    "steps",
    "commitRunStart",
    "getRun",
    "listRuns",
    "deleteSession",
    "rpc",
    "parallel",
    "expect_one_of",
    "sleep_ms",
    "http",
    "wait_run",
    "as",
    "copies",
    "expect",
    "bind",
    "linearizable",
    "expect_group",
    "expect_not_echoed",
    "sessionId",
    "runId",
    "count",
    "match",
    "path",
    "json",
    "headers",
    "status",
    "frobnicate",
];

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| Value::Number(n.into())),
        any::<f64>().prop_map(|f| Value::Number(f.into())),
        prop::sample::select(KEYS).prop_map(|k| Value::String(k.to_owned())),
        prop::sample::select(vec![
            "store",
            "agent",
            "rest",
            "$s",
            "${i}",
            "/sessions/$s/start",
            ""
        ])
        .prop_map(|s| Value::String(s.to_owned())),
        "[ -~]{0,12}".prop_map(Value::String),
    ]
}

fn tree() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(6, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Sequence),
            prop::collection::vec((prop::sample::select(KEYS), inner), 0..6).prop_map(|kv| {
                let mut m = Mapping::new();
                for (k, v) in kv {
                    m.insert(Value::String(k.to_owned()), v);
                }
                Value::Mapping(m)
            }),
        ]
    })
}

/// A scenario-shaped document: the real top-level keys, steps of random
/// trees, sometimes missing or extra keys.
fn scenario_doc() -> impl Strategy<Value = Value> {
    (
        prop::sample::select(vec!["t", "a.b-c", "", "bad id!"]),
        prop::sample::select(vec!["store", "agent", "neither"]),
        prop::collection::vec(tree(), 0..5),
        prop::option::of((prop::sample::select(KEYS), tree())),
        0u32..3,
    )
        .prop_map(|(id, level, steps, extra, repeat)| {
            let mut m = Mapping::new();
            m.insert("id".into(), id.into());
            m.insert("level".into(), level.into());
            m.insert("summary".into(), "s".into());
            m.insert("repeat".into(), repeat.into());
            m.insert("steps".into(), Value::Sequence(steps));
            if let Some((k, v)) = extra {
                m.insert(k.into(), v);
            }
            Value::Mapping(m)
        })
}

/// A mutation of a serialized document.
#[derive(Debug, Clone)]
enum Mutation {
    None,
    Truncate(usize),
    Insert(usize, char),
    DuplicateLine(usize),
    Flow,
}

fn mutate(text: String, m: Mutation) -> String {
    let at = |i: usize| {
        let mut i = i % (text.len() + 1);
        while !text.is_char_boundary(i) {
            i -= 1;
        }
        i
    };
    match m {
        Mutation::None => text,
        Mutation::Truncate(i) => text[..at(i)].to_owned(),
        Mutation::Insert(i, c) => {
            let i = at(i);
            format!("{}{c}{}", &text[..i], &text[i..])
        }
        Mutation::DuplicateLine(i) => {
            let lines: Vec<&str> = text.lines().collect();
            if lines.is_empty() {
                return text;
            }
            let k = i % lines.len();
            let mut out: Vec<&str> = lines.clone();
            out.insert(k, lines[k]);
            out.join("\n")
        }
        // The same document in flow style (JSON is YAML).
        Mutation::Flow => match serde_yaml::from_str::<serde_json::Value>(&text) {
            Ok(v) => v.to_string(),
            Err(_) => text,
        },
    }
}

#[test]
fn structured_scenarios_never_panic_and_errors_have_positions() {
    let mutation = prop_oneof![
        Just(Mutation::None),
        any::<usize>().prop_map(Mutation::Truncate),
        (
            any::<usize>(),
            prop::sample::select("[]{}:-,#'\"\n \t|>&*".chars().collect::<Vec<_>>())
        )
            .prop_map(|(i, c)| Mutation::Insert(i, c)),
        any::<usize>().prop_map(Mutation::DuplicateLine),
        Just(Mutation::Flow),
    ];
    run(
        "structured",
        1_000,
        (scenario_doc(), mutation).prop_map(|(doc, m)| {
            let text = serde_yaml::to_string(&doc).unwrap_or_default();
            mutate(text, m)
        }),
    );
}

#[test]
fn pathological_nesting_is_refused_with_a_position() {
    for text in [
        format!("id: t\nsteps: {}", "[".repeat(1_000_000)),
        format!("id: t\nsteps: {}{}", "[".repeat(40_000), "]".repeat(40_000)),
        format!("id: t\nsteps: {}", "{a: ".repeat(100_000)),
        (0..1_000)
            .map(|i| format!("{}k{i}:\n", " ".repeat(i)))
            .collect(),
        format!("steps:\n{}x\n", "- ".repeat(100_000)),
    ] {
        let e = parse_scenario(Path::new("deep.yaml"), &text)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("deep.yaml:") && e.contains("nested deeper than 64 levels"),
            "{}",
            &e[..e.len().min(200)]
        );
    }
}
