//! What a certificate claims about crash behaviour: only what ran.
//!
//! Why after the run: starting the target (`--start`) is what lets crash
//! scenarios run, not what certifies crash behaviour. A certificate once
//! said "crash behaviour (kill, pause, restart) is certified" for a store
//! whose only crash scenario did not apply (it declared `durable: false`).
//! So the claim is made from the results: certified only when at least one
//! crash scenario (one with `requires: {faults: true}`) applied and every
//! one that applied passed; otherwise the certificate says why not. The
//! database-link claim (issue 49: `--db`, the `link` scenarios) is made
//! the same way.
//!
//! A crash scenario judges more than crashes (the key syntax of its first
//! request, a replay's body): one that failed only on clauses that also
//! fail without a crash (in another scenario of the run, or in the fuzz
//! pass) proves nothing about crashes, so the claim then says crash
//! behaviour is not certified, never that it does not conform (issue 54).

use std::collections::BTreeSet;

use crate::run::event::{ScenarioResult, Verdict};
use crate::targets::profile::ProfileInfo;
pub use crate::targets::profile::{crash_scenarios, CrashScenarios};

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The crash line of a finished run's reports: the run's setup (`crash`,
/// what [`reqkey_scenario::fault::FaultSupport::describe`] said), then,
/// when the harness started the target, what the crash scenarios showed.
/// `fuzz_failed` are the clauses the fuzz pass proved broken (no crash in
/// it). Call it through the run's record (`report/record.rs`).
pub fn claim(p: &ProfileInfo, results: &[ScenarioResult], fuzz_failed: &[&str]) -> Option<String> {
    let setup = p.crash.as_ref()?;
    let Some(crash) = &p.crash_scenarios else {
        return Some(setup.clone());
    };
    Some(from_results(
        setup,
        crash,
        results,
        fuzz_failed,
        &Words {
            one: "crash scenario",
            many: "crash scenarios",
            without: "without a crash",
            nothing: "crash behaviour is NOT certified",
            wrong: "crash behaviour does NOT conform",
            certified: "crash behaviour (kill, pause, restart) is certified".to_owned(),
        },
    ))
}

/// The database-link line of a finished run's reports (issue 49): the
/// links the harness owned (`link`, from `--db`) or that it owned none,
/// then what the link scenarios showed. Each link scenario's own note
/// says what struck its link.
pub fn link_claim(
    p: &ProfileInfo,
    results: &[ScenarioResult],
    fuzz_failed: &[&str],
) -> Option<String> {
    let setup = p.link.as_ref()?;
    let Some(link) = &p.link_scenarios else {
        return Some(setup.clone());
    };
    Some(from_results(
        setup,
        link,
        results,
        fuzz_failed,
        &Words {
            one: "link scenario",
            many: "link scenarios",
            without: "without a link fault",
            nothing: "database link faults are NOT certified",
            wrong: "the store does NOT conform under database link faults",
            certified: if link.faults.is_empty() {
                "the database link was faulted and the store conforms".to_owned()
            } else {
                format!(
                    "the database link was faulted ({}) and the store conforms",
                    link.faults.join(", ")
                )
            },
        },
    ))
}

/// How a claim names its scenarios and its outcomes.
struct Words {
    one: &'static str,
    many: &'static str,
    /// How a failure elsewhere is said to have come (`without a crash`).
    without: &'static str,
    nothing: &'static str,
    wrong: &'static str,
    certified: String,
}

fn from_results(
    setup: &str,
    scenarios: &CrashScenarios,
    results: &[ScenarioResult],
    fuzz_failed: &[&str],
    w: &Words,
) -> String {
    if scenarios.applied.is_empty() {
        let why = if scenarios.unmet.is_empty() {
            "the suite has none".to_owned()
        } else {
            scenarios.unmet.join("; ")
        };
        return format!("{setup}, but no {} applied ({why}): {}", w.one, w.nothing);
    }
    let applied = |id: &str| scenarios.applied.iter().any(|a| a == id);
    // The clauses proven broken without the fault: by the other scenarios
    // of the run and by the fuzz pass.
    let elsewhere: BTreeSet<&str> = results
        .iter()
        .filter(|r| !applied(&r.id))
        .flat_map(|r| crate::report::clauses::of_scenario(r).failed)
        .chain(fuzz_failed.iter().copied())
        .collect();
    let result = |id: &String| results.iter().find(|r| &r.id == id);
    let k = scenarios.applied.len();
    let mut related = 0;
    let mut unrelated: Vec<&str> = Vec::new();
    for r in scenarios.applied.iter().filter_map(result).filter(|r| {
        matches!(
            r.verdict,
            Verdict::Fail | Verdict::ExpectedFail | Verdict::UnexpectedPass
        )
    }) {
        let failed = crate::report::clauses::of_scenario(r).failed;
        if !failed.is_empty() && failed.iter().all(|c| elsewhere.contains(c)) {
            for c in failed {
                if !unrelated.contains(&c) {
                    unrelated.push(c);
                }
            }
        } else {
            related += 1;
        }
    }
    let passed = scenarios
        .applied
        .iter()
        .filter(|id| result(id).map(|r| r.verdict) == Some(Verdict::Pass))
        .count();
    let failed_words = format!("{} failed", w.one);
    let failed_many = format!("{} failed", w.many);
    let applied_one = format!("{} applied", w.one);
    let applied_many = format!("{} applied", w.many);
    let unjudged_one = format!("{} was not judged", w.one);
    let unjudged_many = format!("{} were not judged", w.many);
    if related > 0 {
        format!(
            "{setup}; {related} of {}: {}",
            plural(k, &failed_words, &failed_many),
            w.wrong
        )
    } else if passed == k {
        format!(
            "{setup}; {} and passed: {}",
            plural(k, &applied_one, &applied_many),
            w.certified
        )
    } else if !unrelated.is_empty() {
        format!(
            "{setup}; {} of {} only on clauses that fail {} too ({}): {}",
            k - passed,
            plural(k, &failed_words, &failed_many),
            w.without,
            unrelated.join(", "),
            w.nothing
        )
    } else {
        format!(
            "{setup}; {} of {}: {}",
            k - passed,
            plural(k, &unjudged_one, &unjudged_many),
            w.nothing
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::event::{ClauseStanding, ClauseVerdict, Failure};

    fn result(id: &str, failed: &[&str]) -> ScenarioResult {
        ScenarioResult {
            id: id.into(),
            file: "f.yaml".into(),
            level: crate::targets::Level::Idem,
            tags: Vec::new(),
            checks: failed.iter().map(|c| (*c).to_owned()).collect(),
            summary: "s".into(),
            verdict: if failed.is_empty() {
                Verdict::Pass
            } else {
                Verdict::Fail
            },
            trials_run: 1,
            trials_overlapped: 0,
            trials_with_groups: 0,
            max_send_spread_us: None,
            duration_ms: 0,
            failure: (!failed.is_empty()).then(|| Failure {
                step: "steps[2] http POST /orders".into(),
                message: "m".into(),
                clauses: failed.iter().map(|c| (*c).to_owned()).collect(),
                ..Failure::default()
            }),
            later_failures: Vec::new(),
            clauses: failed
                .iter()
                .map(|c| ClauseVerdict {
                    clause: (*c).to_owned(),
                    standing: ClauseStanding::Fail,
                    why: None,
                })
                .collect(),
            timelines: Vec::new(),
            reason: None,
            note: None,
            history_view: None,
        }
    }

    fn claim(results: &[ScenarioResult], fuzz_failed: &[&str]) -> String {
        let crash = CrashScenarios {
            applied: vec!["crash".into()],
            unmet: Vec::new(),
            faults: Vec::new(),
        };
        let words = Words {
            one: "crash scenario",
            many: "crash scenarios",
            without: "without a crash",
            nothing: "crash behaviour is NOT certified",
            wrong: "crash behaviour does NOT conform",
            certified: "crash behaviour (kill, pause, restart) is certified".to_owned(),
        };
        from_results("started", &crash, results, fuzz_failed, &words)
    }

    /// Issue 54: the crash row said "does NOT conform" for failures that
    /// had nothing to do with a crash.
    #[test]
    fn a_crash_scenario_failing_on_what_fails_without_a_crash_certifies_nothing_either_way() {
        let replay = "idem.replay.completed";
        // The replay body is wrong everywhere, the crash scenario included.
        let everywhere = [result("crash", &[replay]), result("replay", &[replay])];
        let said = claim(&everywhere, &[]);
        assert!(!said.contains("does NOT conform"), "{said}");
        assert!(
            said.contains("only on clauses that fail without a crash too (idem.replay.completed)")
                && said.ends_with("crash behaviour is NOT certified"),
            "{said}"
        );
        // The fuzz pass proving the clause broken is a failure without a
        // crash as well.
        let said = claim(&[result("crash", &[replay])], &[replay]);
        assert!(said.ends_with("crash behaviour is NOT certified"), "{said}");
        // A clause only the crash shows broken: the crash is to blame.
        let durable = [
            result("crash", &["idem.durable.restart", replay]),
            result("replay", &[replay]),
        ];
        let said = claim(&durable, &[]);
        assert!(said.ends_with("crash behaviour does NOT conform"), "{said}");
        let said = claim(&[result("crash", &[]), result("replay", &[replay])], &[]);
        assert!(said.ends_with("is certified"), "{said}");
    }
}
