//! Which scenarios apply to a target's profile (SPEC 8).
//!
//! A scenario's `requires:` names the profile it needs; the others are not
//! run and not counted as passed or failed, but every report lists them
//! with the requirement they need, so a certificate says exactly what was
//! judged against which profile.

use std::path::PathBuf;

use serde::Serialize;

use crate::targets::profile::Profile;
use reqkey_scenario::fault::FaultSupport;
use reqkey_scenario::Scenario;

/// A scenario that does not apply to the certified profile, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NotApplicable {
    pub id: String,
    pub file: PathBuf,
    /// What it requires that the profile lacks (`supportsRequestKey: true`).
    pub requires: String,
}

/// Splits `scenarios` into those that apply to `profile` and to what the
/// run offers fault scenarios (in order) and those that do not.
pub fn by_profile(
    scenarios: Vec<Scenario>,
    profile: &Profile,
    faults: &FaultSupport,
) -> (Vec<Scenario>, Vec<NotApplicable>) {
    let mut apply = Vec::with_capacity(scenarios.len());
    let mut not = Vec::new();
    for s in scenarios {
        let unmet = s
            .requires
            .unmet(profile)
            .or_else(|| s.requires.unmet_faults(faults));
        match unmet {
            None => apply.push(s),
            Some(requires) => not.push(NotApplicable {
                id: s.id,
                file: s.file,
                requires,
            }),
        }
    }
    (apply, not)
}

/// Splits `scenarios` by what they require of an idem target's declared
/// profile (SPEC 10); with no idem profile (another level) all apply.
pub fn by_idem_profile(
    scenarios: Vec<Scenario>,
    idem: Option<&reqkey_model::idem_profile::IdemProfile>,
) -> (Vec<Scenario>, Vec<NotApplicable>) {
    let Some(profile) = idem else {
        return (scenarios, Vec::new());
    };
    let (mut apply, mut not) = (Vec::with_capacity(scenarios.len()), Vec::new());
    for s in scenarios {
        match s.requires.idem.as_ref().and_then(|r| r.unmet(profile)) {
            None => apply.push(s),
            Some(requires) => not.push(NotApplicable {
                id: s.id,
                file: s.file,
                requires,
            }),
        }
    }
    (apply, not)
}

/// Splits `scenarios` into those the target can play and those it cannot
/// (`plays` says why: an API map without the route a scenario needs).
pub fn by_target(
    scenarios: Vec<Scenario>,
    plays: impl Fn(&Scenario) -> Result<(), String>,
) -> (Vec<Scenario>, Vec<NotApplicable>) {
    let (mut apply, mut not) = (Vec::with_capacity(scenarios.len()), Vec::new());
    for s in scenarios {
        match plays(&s) {
            Ok(()) => apply.push(s),
            Err(requires) => not.push(NotApplicable {
                id: s.id,
                file: s.file,
                requires,
            }),
        }
    }
    (apply, not)
}

/// One line per distinct requirement: `12 require supportsRequestKey: true`.
pub fn reasons(not: &[NotApplicable]) -> Vec<String> {
    let mut counts: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
    for n in not {
        *counts.entry(n.requires.as_str()).or_default() += 1;
    }
    counts
        .into_iter()
        .map(|(why, n)| format!("{n} require {why}"))
        .collect()
}

/// Refuses a `--tag` or `--skip-tag` that no loaded scenario carries: a
/// mistyped `--skip-tag rcae` would otherwise skip nothing, silently.
pub fn check_tags_exist(
    scenarios: &[Scenario],
    tags: &[String],
    skip_tags: &[String],
) -> Result<(), String> {
    let known: std::collections::BTreeSet<&str> = scenarios
        .iter()
        .flat_map(|s| s.tags.iter().map(String::as_str))
        .collect();
    let unknown: Vec<String> = tags
        .iter()
        .map(|t| ("--tag", t))
        .chain(skip_tags.iter().map(|t| ("--skip-tag", t)))
        .filter(|(_, t)| !known.contains(t.as_str()))
        .map(|(flag, t)| format!("{flag} {t}"))
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    Err(format!(
        "{} names a tag no loaded scenario has (known tags: {})",
        unknown.join(", "),
        known.into_iter().collect::<Vec<_>>().join(", ")
    ))
}

/// Keeps the scenarios selected by `--tag` / `--skip-tag`.
pub fn filter_by_tags(
    scenarios: Vec<Scenario>,
    tags: &[String],
    skip_tags: &[String],
) -> Vec<Scenario> {
    scenarios
        .into_iter()
        .filter(|s| tags.is_empty() || s.tags.iter().any(|t| tags.contains(t)))
        .filter(|s| !s.tags.iter().any(|t| skip_tags.contains(t)))
        .collect()
}
