//! Which scenario judges each value of each field of the idem profile
//! (issue 45): `reqkey coverage` prints the field x value matrix, and a
//! certificate names the declared fields no applicable scenario judges.
//!
//! Why: a profile field that no scenario can fail on is a promise nobody
//! checks. A copy of a green app that declared `invalidKeyStatus: 400` but
//! ran an empty key as a key certified green under `keySyntax: any`,
//! because the scenario that judged the status applied only under
//! `sf-string`. So each (field, value) cell lists the scenarios that apply
//! under a profile with that value and judge the field: they require it
//! (`requires: {idem: ...}`, `durable`) or read it (`$profile.FIELD`), and
//! every keyed scenario judges `keySyntax` (its keys are written as the
//! declared syntax admits, and its first keyed request judges
//! `idem.key.syntax`). The profiles tried are those of the reference
//! variants (each value of each field is declared by one of them), with
//! and without an expiry, durable or not.
//!
//! A value that promises nothing (`durable: false`: nothing has to survive
//! a restart; `replayHeader: null`: no header has to mark a replay) has
//! nothing to judge and is shown so, never as a gap.

use std::collections::BTreeSet;

use reqkey_model::idem_profile::{IdemProfile, ScopeBy};
use reqkey_reference::idem::IdemVariant;
use reqkey_scenario::Scenario;

/// One cell of the matrix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldCell {
    pub field: &'static str,
    /// The value class (`sf-string`, `a status`, `null`, `with caller`).
    pub value: String,
    /// Scenario ids that judge the field under that value.
    pub scenarios: Vec<String>,
    /// The value promises nothing a scenario could fail on.
    pub promises_nothing: bool,
}

/// The value classes of `field` in `p` (`scope` has one per member:
/// `with caller` or `without caller`, ...).
pub fn classes(field: &str, p: &IdemProfile) -> Vec<String> {
    let spelled = |v: serde_json::Value| match v {
        serde_json::Value::String(s) => s,
        other => other.to_string(),
    };
    let status = |s: Option<u16>| if s.is_some() { "a status" } else { "null" }.to_owned();
    match field {
        "keyRequired" => vec![p.key_required.to_string()],
        "keySyntax" => vec![p.field("keySyntax").map_or_else(String::new, spelled)],
        "invalidKeyStatus" => vec![status(p.invalid_key_status)],
        "fingerprint" => vec![p.field("fingerprint").map_or_else(String::new, spelled)],
        "mismatchStatus" => vec![status(p.mismatch_status)],
        "concurrent" => vec![p.field("concurrent").map_or_else(String::new, spelled)],
        "concurrentStatus" => vec![status(p.concurrent_status)],
        "errors" => vec![p.field("errors").map_or_else(String::new, spelled)],
        "scope" => [
            (ScopeBy::Caller, "caller"),
            (ScopeBy::Method, "method"),
            (ScopeBy::Path, "path"),
        ]
        .into_iter()
        .map(|(by, name)| {
            if p.scoped_by(by) {
                format!("with {name}")
            } else {
                format!("without {name}")
            }
        })
        .collect(),
        "expiryMs" => vec![if p.expiry_ms.is_some() {
            "a duration"
        } else {
            "null"
        }
        .to_owned()],
        "lockMs" => vec![if p.lock_ms.is_some() {
            "a duration"
        } else {
            "null"
        }
        .to_owned()],
        "replayHeader" => vec![if p.replay_header.is_some() {
            "a name"
        } else {
            "null"
        }
        .to_owned()],
        "durable" => vec![p.durable.to_string()],
        _ => Vec::new(),
    }
}

/// Does `(field, value)` promise nothing a scenario could fail on?
/// `durable: false` (nothing need survive a restart) and `replayHeader:
/// null` (no header need mark a replay) promise nothing.
fn promises_nothing(field: &str, value: &str) -> bool {
    matches!(
        (field, value),
        ("durable", "false") | ("replayHeader", "null")
    )
}

/// The profile fields `s` judges (see the module doc); `text` is its file.
pub fn judged_fields(s: &Scenario, text: &str) -> BTreeSet<&'static str> {
    let mut out = BTreeSet::new();
    if let Some(r) = &s.requires.idem {
        let named: [(bool, &'static str); 13] = [
            (r.key_required.is_some(), "keyRequired"),
            (r.key_syntax.is_some(), "keySyntax"),
            (
                r.invalid_key_refused.is_some() || r.invalid_key_status.is_some(),
                "invalidKeyStatus",
            ),
            (r.fingerprint.is_some(), "fingerprint"),
            (
                r.mismatch_refused.is_some() || r.mismatch_status.is_some(),
                "mismatchStatus",
            ),
            (r.concurrent.is_some(), "concurrent"),
            (r.concurrent_status.is_some(), "concurrentStatus"),
            (r.errors.is_some(), "errors"),
            (
                r.scoped_by_caller.is_some()
                    || r.scoped_by_method.is_some()
                    || r.scoped_by_path.is_some(),
                "scope",
            ),
            (
                r.expiry_ms_at_most.is_some() || r.expiry_ms_at_least.is_some(),
                "expiryMs",
            ),
            (
                r.lock_until_completion.is_some() || r.lock_ms_at_least.is_some(),
                "lockMs",
            ),
            (r.replay_header.is_some(), "replayHeader"),
            (false, "durable"),
        ];
        out.extend(named.into_iter().filter(|(on, _)| *on).map(|(_, f)| f));
    }
    if s.requires.durable == Some(true) {
        out.insert("durable");
    }
    for field in IdemProfile::FIELDS {
        if text.contains(&format!("profile.{field}")) {
            out.insert(field);
        }
    }
    if text.contains("key.") && text.contains("idem.key.syntax") {
        out.insert("keySyntax");
    }
    out
}

/// Does `s` apply under `p` (its idem needs, and `durable`)? Faults are
/// taken as available: the matrix is about the profile.
fn applies(s: &Scenario, p: &IdemProfile) -> bool {
    let idem_ok = s
        .requires
        .idem
        .as_ref()
        .is_none_or(|r| r.unmet(p).is_none());
    let durable_ok = s.requires.durable != Some(true) || p.durable;
    idem_ok && durable_ok
}

/// The profiles the matrix tries: each reference variant's, with and
/// without an expiry, durable or not.
fn reference_profiles() -> Vec<IdemProfile> {
    let mut out = Vec::new();
    for v in IdemVariant::ALL {
        for expiry in [None, Some(reqkey_reference::idem::DEFAULT_EXPIRY_MS)] {
            for durable in [false, true] {
                out.push(v.profile(expiry, durable));
            }
        }
    }
    out
}

/// The field x value matrix of `scenarios` (each with its file's text).
pub fn idem_field_matrix(scenarios: &[(&Scenario, &str)]) -> Vec<FieldCell> {
    let profiles = reference_profiles();
    let judged: Vec<BTreeSet<&'static str>> = scenarios
        .iter()
        .map(|(s, text)| judged_fields(s, text))
        .collect();
    let mut cells: Vec<FieldCell> = Vec::new();
    for field in IdemProfile::FIELDS {
        for p in &profiles {
            for value in classes(field, p) {
                let at = match cells
                    .iter()
                    .position(|c| c.field == field && c.value == value)
                {
                    Some(i) => i,
                    None => {
                        cells.push(FieldCell {
                            field,
                            promises_nothing: promises_nothing(field, &value),
                            value,
                            scenarios: Vec::new(),
                        });
                        cells.len() - 1
                    }
                };
                for ((s, _), fields) in scenarios.iter().zip(&judged) {
                    if fields.contains(field)
                        && applies(s, p)
                        && !cells[at].scenarios.contains(&s.id)
                    {
                        cells[at].scenarios.push(s.id.clone());
                    }
                }
            }
        }
    }
    cells
}

/// Every field of `declared` by value class, with the scenarios of
/// `scenarios` that apply under it and judge the field: what a run's
/// record (`report/record.rs`) adds the fuzz pass's judged fields to.
pub fn declared_fields(
    declared: &IdemProfile,
    scenarios: &[(&Scenario, &str)],
) -> Vec<crate::report::DeclaredField> {
    let judged: Vec<BTreeSet<&'static str>> = scenarios
        .iter()
        .map(|(s, text)| judged_fields(s, text))
        .collect();
    let mut out = Vec::new();
    for field in IdemProfile::FIELDS {
        for value in classes(field, declared) {
            out.push(crate::report::DeclaredField {
                field: field.to_owned(),
                promises_nothing: promises_nothing(field, &value),
                value,
                scenarios: scenarios
                    .iter()
                    .zip(&judged)
                    .filter(|((s, _), fields)| applies(s, declared) && fields.contains(field))
                    .map(|((s, _), _)| s.id.clone())
                    .collect(),
            });
        }
    }
    out
}

/// The fields of `declared` that no scenario of `scenarios` judges under
/// the declared value, each as `field = value` (values that promise
/// nothing left out).
pub fn unjudged_declared(declared: &IdemProfile, scenarios: &[(&Scenario, &str)]) -> Vec<String> {
    declared_fields(declared, scenarios)
        .into_iter()
        .filter(|f| !f.promises_nothing && f.scenarios.is_empty())
        .map(|f| f.name())
        .collect()
}

/// The idem suite (under `root`, or the embedded one) with each
/// scenario's text.
pub fn idem_suite_texts(root: Option<&std::path::Path>) -> Result<Vec<(Scenario, String)>, String> {
    let level = reqkey_model::vocab::Level::Idem;
    let (_, scenarios) = match root {
        Some(root) => crate::run::suite::disk_suite(root, level),
        None => crate::run::suite::embedded_suite(level),
    }
    .map_err(|e| format!("the idem suite: {e}"))?;
    scenarios
        .into_iter()
        .map(|s| {
            let text = match crate::run::suite::embedded_text(&s.file) {
                Some(t) => t.to_owned(),
                None => std::fs::read_to_string(&s.file)
                    .map_err(|e| format!("{}: {e}", s.file.display()))?,
            };
            Ok((s, text))
        })
        .collect()
}

/// The matrix as `reqkey coverage` prints it; the number of gaps.
pub fn render_matrix(cells: &[FieldCell]) -> (String, usize) {
    use std::fmt::Write as _;
    let mut out = String::from(
        "profile field x value, idem level (scenarios that apply under the value and judge the field)\n",
    );
    let width = cells
        .iter()
        .map(|c| c.field.len() + c.value.len() + 3)
        .max()
        .unwrap_or(0);
    let mut gaps = 0;
    for c in cells {
        let name = format!("{} = {}", c.field, c.value);
        let (mark, what) = if c.promises_nothing {
            ("--", "promises nothing a scenario could fail on".to_owned())
        } else if c.scenarios.is_empty() {
            gaps += 1;
            ("GAP", "no scenario judges it".to_owned())
        } else {
            ("ok", c.scenarios.join(", "))
        };
        let _ = writeln!(out, "  {mark:<3} {name:<width$}  {what}");
    }
    let judged = cells
        .iter()
        .filter(|c| !c.promises_nothing && !c.scenarios.is_empty())
        .count();
    let total = cells.iter().filter(|c| !c.promises_nothing).count();
    let _ = writeln!(out, "{judged} of {total} field values judged");
    (out, gaps)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn suite() -> Vec<(Scenario, String)> {
        let (_, scenarios) =
            crate::run::suite::embedded_suite(reqkey_model::vocab::Level::Idem).unwrap();
        scenarios
            .into_iter()
            .map(|s| {
                let text = crate::run::suite::embedded_text(&s.file)
                    .unwrap()
                    .to_owned();
                (s, text)
            })
            .collect()
    }

    #[test]
    fn every_value_of_every_idem_field_has_a_scenario_or_promises_nothing() {
        let owned = suite();
        let pairs: Vec<(&Scenario, &str)> = owned.iter().map(|(s, t)| (s, t.as_str())).collect();
        let cells = idem_field_matrix(&pairs);
        let gaps: Vec<String> = cells
            .iter()
            .filter(|c| c.scenarios.is_empty() && !c.promises_nothing)
            .map(|c| format!("{} = {}", c.field, c.value))
            .collect();
        assert!(gaps.is_empty(), "unjudged: {gaps:?}");
        let token = cells
            .iter()
            .find(|c| c.field == "keySyntax" && c.value == "token")
            .unwrap();
        assert!(token
            .scenarios
            .contains(&"idem.token-keys-are-bare".to_owned()));
        let status_429 = cells
            .iter()
            .find(|c| c.field == "concurrentStatus" && c.value == "a status")
            .unwrap();
        assert!(!status_429.scenarios.is_empty());
    }

    #[test]
    fn a_field_no_applicable_scenario_reads_is_named() {
        let owned = suite();
        let pairs: Vec<(&Scenario, &str)> = owned.iter().map(|(s, t)| (s, t.as_str())).collect();
        let declared = IdemVariant::Default.profile(Some(2000), false);
        assert_eq!(unjudged_declared(&declared, &pairs), Vec::<String>::new());
        // With only the scenarios that never read invalidKeyStatus, an
        // `any` app's declared status is judged by nothing: named.
        let mut any = IdemVariant::Any.profile(Some(2000), false);
        any.invalid_key_status = Some(400);
        let blind: Vec<(&Scenario, &str)> = pairs
            .iter()
            .copied()
            .filter(|(s, t)| !judged_fields(s, t).contains("invalidKeyStatus"))
            .collect();
        assert!(unjudged_declared(&any, &blind).contains(&"invalidKeyStatus = a status".to_owned()));
        assert!(
            !unjudged_declared(&any, &pairs).contains(&"invalidKeyStatus = a status".to_owned())
        );
    }
}
