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

use crate::run::event::{ScenarioResult, Verdict};
use crate::targets::profile::ProfileInfo;
pub use crate::targets::profile::{crash_scenarios, CrashScenarios};

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The crash line of a finished run's reports: the run's setup (`crash`,
/// what [`reqkey_scenario::fault::FaultSupport::describe`] said), then,
/// when the harness started the target, what the crash scenarios showed.
pub fn claim(p: &ProfileInfo, results: &[ScenarioResult]) -> Option<String> {
    let setup = p.crash.as_ref()?;
    let Some(crash) = &p.crash_scenarios else {
        return Some(setup.clone());
    };
    Some(from_results(
        setup,
        crash,
        results,
        &Words {
            one: "crash scenario",
            many: "crash scenarios",
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
pub fn link_claim(p: &ProfileInfo, results: &[ScenarioResult]) -> Option<String> {
    let setup = p.link.as_ref()?;
    let Some(link) = &p.link_scenarios else {
        return Some(setup.clone());
    };
    Some(from_results(
        setup,
        link,
        results,
        &Words {
            one: "link scenario",
            many: "link scenarios",
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
    nothing: &'static str,
    wrong: &'static str,
    certified: String,
}

fn from_results(
    setup: &str,
    scenarios: &CrashScenarios,
    results: &[ScenarioResult],
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
    let verdict = |id: &String| results.iter().find(|r| &r.id == id).map(|r| r.verdict);
    let k = scenarios.applied.len();
    let failed = scenarios
        .applied
        .iter()
        .filter(|id| {
            matches!(
                verdict(id),
                Some(Verdict::Fail | Verdict::ExpectedFail | Verdict::UnexpectedPass)
            )
        })
        .count();
    let passed = scenarios
        .applied
        .iter()
        .filter(|id| verdict(id) == Some(Verdict::Pass))
        .count();
    let failed_words = format!("{} failed", w.one);
    let failed_many = format!("{} failed", w.many);
    let applied_one = format!("{} applied", w.one);
    let applied_many = format!("{} applied", w.many);
    let unjudged_one = format!("{} was not judged", w.one);
    let unjudged_many = format!("{} were not judged", w.many);
    if failed > 0 {
        format!(
            "{setup}; {failed} of {}: {}",
            plural(k, &failed_words, &failed_many),
            w.wrong
        )
    } else if passed == k {
        format!(
            "{setup}; {} and passed: {}",
            plural(k, &applied_one, &applied_many),
            w.certified
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
