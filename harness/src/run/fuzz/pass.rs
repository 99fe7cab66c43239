//! The bounded fuzz pass of a certification: a fixed budget of generated programs, its seed and verdict for every report.
//!
//! A certificate covers the scenarios of the suite; the fuzz pass makes it
//! cover programs nobody wrote as well: `reqkey certify` runs
//! `--fuzz-cases` programs (store level: `run::fuzz::store`; agent level:
//! `run::fuzz::agent`; idem level: `run::fuzz::idem`, after the fixed
//! bursts of `run::fuzz::idem_battery` whatever the profile, whose count
//! and power every report states) with the certification's seed after choosing the
//! profile, and the result is a line of the terminal output, the
//! certificate and `results.json`. A failing program turns the
//! certification red (exit 1); a fuzz pass that could not judge the
//! target is exit 2. `--fuzz-cases 0` skips it (and every report says so).

use std::sync::Arc;

use reqkey_model::idem_profile::IdemProfile;
use reqkey_model::vocab::{Level, Profile};
use serde::Serialize;

use crate::run::fuzz::agent::{fuzz_agent, AgentFuzzOptions, AgentFuzzOutcome};
use crate::run::fuzz::idem::{fuzz_idem, IdemFuzzOptions, IdemFuzzOutcome};
use crate::run::fuzz::idem_battery::JudgedField;
use crate::run::fuzz::store::{fuzz, FuzzOptions, FuzzOutcome};
pub use crate::run::fuzz::violation::FuzzViolation;
use crate::targets::Target;

/// The programs a certification fuzzes by default, chosen by measurement
/// (`reqkey bench fuzz`, docs/fuzz.md "The budget"): the smallest count of
/// the curve within which every built-in variant only the fuzzer finds is
/// found on seeds 1, 2 and 3, at both levels (the store's within 192,
/// the agent's within 256). A count, not a time box: the same programs,
/// so the same verdict, on a loaded machine. About 35 s on an in-process
/// reference agent (136 ms a program), well under a minute with its suite.
pub const DEFAULT_CERTIFY_FUZZ_CASES: u32 = 256;

/// What a certification's fuzz pass did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FuzzPass {
    pub level: String,
    pub cases: u32,
    pub seed: u64,
    /// `passed`, `failed`, `error` (no verdict), `skipped` or `none` (the
    /// level has no fuzzer; every level has one now, but a results file of
    /// an earlier version may say so).
    pub verdict: &'static str,
    /// Why it failed (the shrunk program's first line) or could not judge.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The shrunk failing program as a scenario.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scenario_yaml: Option<String>,
    /// At the idem level: the fixed bursts sent beside the programs and the
    /// race rate they catch (`run/fuzz/idem_battery.rs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub power: Option<String>,
    /// Every distinct violation the pass proved (issue 54), one per clause
    /// blamed, each with its replayed reproduction; empty when it passed.
    pub violations: Vec<FuzzViolation>,
    /// The probes at scale (issue 55, `run/fuzz/scale.rs`): the patience,
    /// how far each timing field was judged, the capacity written and the
    /// final reads. Absent when they did not run (`--fuzz-cases 0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale: Option<crate::run::fuzz::patience::ScaleRecord>,
    /// At the idem level: the declared profile fields its programs judged
    /// (and how far), which no report may then call unjudged.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub judged_fields: Vec<JudgedField>,
}

impl FuzzPass {
    /// The pass `--fuzz-cases 0` asks for.
    pub fn skipped(level: Level, seed: u64) -> Self {
        Self {
            level: level.name().to_owned(),
            cases: 0,
            seed,
            verdict: "skipped",
            reason: None,
            scenario_yaml: None,
            power: None,
            violations: Vec::new(),
            scale: None,
            judged_fields: Vec::new(),
        }
    }

    /// The exit code it adds to a run's (0: none).
    pub fn exit_code(&self) -> u8 {
        match self.verdict {
            "failed" => 1,
            "error" => 2,
            _ => 0,
        }
    }

    /// One line, the same in every report (raw: each format makes the
    /// reason, which quotes the target, inert its own way).
    pub fn line(&self) -> (String, Option<&str>) {
        let head = match self.verdict {
            "skipped" => return ("fuzz: skipped (--fuzz-cases 0)".to_owned(), None),
            "none" => {
                return (
                    format!(
                        "fuzz: none at the {} level (judged by its scenarios)",
                        self.level
                    ),
                    None,
                )
            }
            v => match &self.power {
                Some(p) => format!(
                    "fuzz: {} {} programs and {p} (seed {}): {v}",
                    self.cases, self.level, self.seed
                ),
                None => format!(
                    "fuzz: {} {} programs (seed {}): {v}",
                    self.cases, self.level, self.seed
                ),
            },
        };
        (head, self.reason.as_deref())
    }
}

/// A failed pass's reason, with why it stopped before its budget (the
/// violations stand).
fn stopped_reason(reason: String, stopped: Option<&str>) -> String {
    match stopped {
        Some(why) => format!(
            "{reason} (the pass then stopped before its budget; the violations stand: {why})"
        ),
        None => reason,
    }
}

/// Programs of the idem pass never wait out `expiryMs` (each such pause
/// lasts seconds; `reqkey fuzz` and the expiry scenarios do).
pub const CERTIFY_IDEM_LONG_PAUSES: u32 = 0;
/// How far the idem pass shrinks a failing program.
pub const CERTIFY_IDEM_SHRINK_ITERS: u32 = 128;

/// Runs the pass on `target` (blocking work on a thread of its own, so the
/// caller's runtime keeps serving an in-process target meanwhile). `idem`
/// is the declared profile of an idem target.
pub async fn fuzz_pass(
    target: Arc<dyn Target>,
    profile: Profile,
    idem: Option<IdemProfile>,
    cases: u32,
    seed: u64,
    call_timeout_ms: u64,
) -> FuzzPass {
    let level = target.level();
    if cases == 0 {
        return FuzzPass::skipped(level, seed);
    }
    let name = target.describe();
    // Fresh sessions on every pass (the seed picks the programs, the
    // namespace only the ids): a second certification of a persistent
    // store with the same seed must not meet the first one's sessions.
    let namespace = format!(
        "{}.certify-fuzz",
        crate::run::config::RunConfig::new(seed).namespace
    );
    let joined = tokio::task::spawn_blocking(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the fuzz runtime: {e}"))?;
        Ok::<_, String>(match level {
            Level::Store => match fuzz(
                &runtime,
                target,
                &FuzzOptions {
                    cases,
                    seed,
                    namespace,
                    target_name: name,
                    lin_budget_steps: reqkey_check::lin::DEFAULT_BUDGET_STEPS,
                    call_timeout_ms,
                    max_shrink_iters: 1_024,
                    batches: true,
                    every: true,
                },
            ) {
                FuzzOutcome::Passed { .. } => (None, None, None, Vec::new(), Vec::new()),
                FuzzOutcome::Failed(f) => {
                    let f = *f;
                    (
                        Some(stopped_reason(f.reason, f.stopped.as_deref())),
                        Some(f.scenario_yaml),
                        None,
                        Vec::new(),
                        f.violations,
                    )
                }
                FuzzOutcome::Error(e) => return Err(e),
            },
            Level::Agent => match fuzz_agent(
                &runtime,
                target,
                &AgentFuzzOptions {
                    cases,
                    seed,
                    namespace,
                    target_name: name,
                    profile,
                    call_timeout_ms,
                    max_shrink_iters: 256,
                    every: true,
                },
            ) {
                AgentFuzzOutcome::Passed { .. } => (None, None, None, Vec::new(), Vec::new()),
                AgentFuzzOutcome::Failed(f) => {
                    let f = *f;
                    (
                        Some(stopped_reason(f.reason, f.stopped.as_deref())),
                        Some(f.scenario_yaml),
                        None,
                        Vec::new(),
                        f.violations,
                    )
                }
                AgentFuzzOutcome::Error(e) => return Err(e),
            },
            Level::Idem => {
                let profile = idem.ok_or("the idem target declared no profile")?;
                match fuzz_idem(
                    &runtime,
                    target,
                    &IdemFuzzOptions {
                        cases,
                        seed,
                        namespace,
                        target_name: name,
                        profile,
                        call_timeout_ms,
                        max_shrink_iters: CERTIFY_IDEM_SHRINK_ITERS,
                        long_pauses: CERTIFY_IDEM_LONG_PAUSES,
                        battery: true,
                    },
                ) {
                    IdemFuzzOutcome::Passed {
                        battery, judged, ..
                    } => (None, None, battery, judged, Vec::new()),
                    IdemFuzzOutcome::Failed(f) => {
                        let f = *f;
                        let reason = stopped_reason(f.reason, f.stopped.as_deref());
                        (
                            Some(reason),
                            Some(f.scenario_yaml),
                            f.power,
                            f.judged,
                            f.violations,
                        )
                    }
                    IdemFuzzOutcome::Error(e) => return Err(e),
                }
            }
        })
    })
    .await;
    let outcome = match joined {
        Ok(o) => o,
        Err(e) => Err(format!("the fuzz pass stopped: {e}")),
    };
    let (verdict, reason, scenario_yaml, power, judged_fields, violations) = match outcome {
        Ok((None, _, power, judged, _)) => ("passed", None, None, power, judged, Vec::new()),
        Ok((Some(reason), yaml, power, judged, violations)) => {
            ("failed", Some(reason), yaml, power, judged, violations)
        }
        Err(e) => ("error", Some(e), None, None, Vec::new(), Vec::new()),
    };
    FuzzPass {
        level: level.name().to_owned(),
        cases,
        seed,
        verdict,
        reason,
        scenario_yaml,
        power,
        violations,
        scale: None,
        judged_fields,
    }
}
