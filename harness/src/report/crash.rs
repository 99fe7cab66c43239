//! What a certificate claims about crash behaviour: only what ran.
//!
//! Why after the run: starting the target (`--start`) is what lets crash
//! scenarios run, not what certifies crash behaviour. A certificate once
//! said "crash behaviour (kill, pause, restart) is certified" for a store
//! whose only crash scenario did not apply (it declared `durable: false`).
//! So the claim is made from the results: certified only when at least one
//! crash scenario (one with `requires: {faults: true}`) applied and every
//! one that applied passed; otherwise the certificate says why not.

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
    if crash.applied.is_empty() {
        let why = if crash.unmet.is_empty() {
            "the suite has none".to_owned()
        } else {
            crash.unmet.join("; ")
        };
        return Some(format!(
            "{setup}, but no crash scenario applied ({why}): crash behaviour is NOT certified"
        ));
    }
    let verdict = |id: &String| results.iter().find(|r| &r.id == id).map(|r| r.verdict);
    let k = crash.applied.len();
    let failed = crash
        .applied
        .iter()
        .filter(|id| {
            matches!(
                verdict(id),
                Some(Verdict::Fail | Verdict::ExpectedFail | Verdict::UnexpectedPass)
            )
        })
        .count();
    let passed = crash
        .applied
        .iter()
        .filter(|id| verdict(id) == Some(Verdict::Pass))
        .count();
    Some(if failed > 0 {
        format!(
            "{setup}; {failed} of {}: crash behaviour does NOT conform",
            plural(k, "crash scenario failed", "crash scenarios failed")
        )
    } else if passed == k {
        format!(
            "{setup}; {} and passed: crash behaviour (kill, pause, restart) is certified",
            plural(k, "crash scenario applied", "crash scenarios applied")
        )
    } else {
        format!(
            "{setup}; {} of {}: crash behaviour is NOT certified",
            k - passed,
            plural(
                k,
                "crash scenario was not judged",
                "crash scenarios were not judged"
            )
        )
    })
}
