//! What a certificate claims about crash behaviour: only what ran.
//!
//! Why after the run: starting the target (`--start`) is what lets crash
//! scenarios run, not what certifies crash behaviour. A certificate once
//! said "crash behaviour (kill, pause, restart) is certified" for a store
//! whose only crash scenario did not apply (it declared `durable: false`).
//! So the claim is made from the results: certified only when at least one
//! crash scenario (one with `requires: {faults: true}`) applied and every
//! one that applied passed; otherwise the certificate says why not.

use serde::Serialize;

use crate::run::event::{ScenarioResult, Verdict};
use crate::targets::profile::ProfileInfo;

/// The crash scenarios of a run whose target the harness started.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CrashScenarios {
    /// The ids of the crash scenarios that applied (and so ran).
    pub applied: Vec<String>,
    /// Why the others did not apply (each reason once, in order).
    pub unmet: Vec<String>,
}

/// The crash scenarios of a run: which of `faulty` (the ids of the
/// suite's crash scenarios) are among `applied`, and the reasons that
/// kept the others out (`not_applied`: id and reason).
pub fn crash_scenarios<'a>(
    faulty: &std::collections::BTreeSet<String>,
    applied: impl Iterator<Item = &'a str>,
    not_applied: impl Iterator<Item = (&'a str, &'a str)>,
) -> CrashScenarios {
    let mut out = CrashScenarios {
        applied: applied
            .filter(|id| faulty.contains(*id))
            .map(str::to_owned)
            .collect(),
        unmet: Vec::new(),
    };
    for (id, why) in not_applied {
        if faulty.contains(id) && !out.unmet.iter().any(|u| u == why) {
            out.unmet.push(why.to_owned());
        }
    }
    out
}

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
