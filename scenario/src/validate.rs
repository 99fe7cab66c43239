//! The checks made on a scenario once it is loaded (answers named before
//! they are used, clauses of its level, groups that judge something): each
//! names the node it is about.

use std::collections::{BTreeMap, BTreeSet};

use crate::locate::Seg;
use crate::scenario::{Scenario, MAX_REPEAT};
use crate::step::{Action, Step};
use reqkey_model::vocab::Level;

/// A failed check: where (a path into the document) and why.
pub type Invalid = (Vec<Seg>, String);

/// The checks made once a scenario is parsed.
pub fn validate(s: &Scenario) -> Result<(), Invalid> {
    let top = |key: &'static str, message: String| (vec![Seg::Key(key)], message);
    if s.id.is_empty()
        || !s
            .id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
    {
        return Err(top(
            "id",
            format!("id `{}` must be non-empty [A-Za-z0-9._-]", s.id),
        ));
    }
    if s.summary.trim().is_empty() || s.summary.contains('\n') {
        return Err(top("summary", "summary must be one non-empty line".into()));
    }
    if s.repeat == 0 || s.repeat > MAX_REPEAT {
        return Err(top("repeat", format!("repeat must be 1 to {MAX_REPEAT}")));
    }
    if s.steps.is_empty() {
        return Err(top("steps", "a scenario needs at least one step".into()));
    }
    let profile_fields = s.requires.supports_request_key.is_some()
        || s.requires.concurrent_entry.is_some()
        || s.requires.entry_wait_ms.is_some()
        || s.requires.lease_ms.is_some();
    if s.level == Level::Store && profile_fields {
        return Err(top(
            "requires",
            "a store scenario requires only faults, replicas, durable or link: a store's profile is fixed (every store records keys)"
                .into(),
        ));
    }
    let idem = s.level == Level::Idem;
    if (!idem && s.requires.idem.is_some()) || (idem && profile_fields) {
        return Err(top(
            "requires",
            "`requires: {idem: ...}` is for idem scenarios, which take no agent profile fields"
                .into(),
        ));
    }
    let mut declared = BTreeSet::new();
    for clause in &s.checks {
        if !declared.insert(clause) {
            return Err(top(
                "checks",
                format!("checks: `{}` is listed twice", clause.0),
            ));
        }
        let level = Some(s.level);
        let applies = reqkey_model::clauses::find(&clause.0)
            .zip(level)
            .is_some_and(|(c, l)| c.applies_to(l));
        if !applies {
            return Err(top(
                "checks",
                format!(
                    "checks: `{}` is not certified at the {} level (see the clause table in spec/SPEC.md)",
                    clause.0, s.level
                ),
            ));
        }
    }
    let step_at = |i: usize| vec![Seg::Key("steps"), Seg::Index(i)];
    for (i, step) in s.steps.iter().enumerate() {
        if let Some(message) = unknown_profile_name(s.level, &step.names_used()) {
            return Err((step_at(i), format!("steps[{i}]: {message}")));
        }
    }
    let mut names = BTreeSet::new();
    // Named answers that nothing else judges must be named by an
    // expect_one_of, or the step checked nothing.
    let mut judged_names: BTreeSet<String> = BTreeSet::new();
    let mut unjudged: Vec<(Vec<Seg>, usize, String)> = Vec::new();
    for (i, step) in s.steps.iter().enumerate() {
        if step.copies.is_some() {
            return Err((
                step_at(i),
                format!("steps[{i}]: `copies` belongs on an item of a parallel group"),
            ));
        }
        let items: Vec<(Vec<Seg>, &Step)> = match &step.action {
            Action::Parallel(items) => items
                .iter()
                .enumerate()
                .map(|(k, item)| {
                    let mut at = step_at(i);
                    at.extend([Seg::Key("parallel"), Seg::Index(k)]);
                    (at, item)
                })
                .collect(),
            _ => vec![(step_at(i), step)],
        };
        let group_judged = matches!(step.action, Action::Parallel(_))
            && (step.linearizable || !step.expect_group.is_empty());
        for (at, item) in items {
            if matches!(item.action, Action::Fault(_)) {
                if s.requires.faults != Some(true) {
                    return Err((
                        at,
                        format!("steps[{i}]: a scenario with a `fault` step declares `requires: {{faults: true}}` (it applies only to a target the harness started)"),
                    ));
                }
                if step.linearizable {
                    return Err((
                        at,
                        format!(
                            "steps[{i}]: a `linearizable` group checks operations; a fault is none"
                        ),
                    ));
                }
            }
            if let Action::Link(link) = &item.action {
                let Some(need) = s.requires.link else {
                    return Err((
                        at,
                        format!("steps[{i}]: a scenario with a `link` step declares `requires: {{link: true}}` (or `link: postgres`, `link: redis`): it applies only where the harness owns the store's database link"),
                    ));
                };
                if let crate::link::LinkStep::Fault(f) = link {
                    if f.kind.postgres_only()
                        && need
                            != crate::link::LinkNeed::Protocol(crate::link::LinkProtocol::Postgres)
                    {
                        return Err((
                            at,
                            format!("steps[{i}]: `link: {{action: error}}` answers a PostgreSQL error: the scenario declares `requires: {{link: postgres}}`"),
                        ));
                    }
                }
            }
            if let (Some(n), false) = (&item.name, group_judged) {
                let judged_otherwise = item.expect.is_some()
                    || item.expect_any
                    || item.expect_raw.is_some()
                    || !item.expect_not_echoed.is_empty()
                    || matches!(item.action, Action::WaitRun(_));
                if !judged_otherwise {
                    unjudged.push((at.clone(), i, n.clone()));
                }
            }
            if let Some(n) = &item.name {
                let expanded: Vec<String> = match item.copies {
                    Some(c) => (0..c).map(|k| format!("{n}.{k}")).collect(),
                    None => vec![n.clone()],
                };
                for name in expanded {
                    if !names.insert(name.clone()) {
                        return Err((
                            at,
                            format!("steps[{i}]: the answer name `{name}` is used twice"),
                        ));
                    }
                }
            }
        }
        if let Action::ExpectOneOf(alternatives) = &step.action {
            judged_names.extend(alternatives.iter().flat_map(BTreeMap::keys).cloned());
            if alternatives.is_empty() {
                return Err((
                    step_at(i),
                    format!("steps[{i}]: expect_one_of needs at least one alternative"),
                ));
            }
            for name in alternatives.iter().flat_map(BTreeMap::keys) {
                if !names.contains(name) {
                    return Err((step_at(i), format!("steps[{i}]: expect_one_of names `{name}`, which no earlier step answers as")));
                }
            }
        }
    }
    crate::judges::validate_judges(s)?;
    for (at, i, name) in unjudged {
        // A copied item `as: c` answers as c.0, c.1, ...: any of them judged counts.
        let judged = judged_names.iter().any(|j| {
            j == &name
                || j.strip_prefix(name.as_str())
                    .is_some_and(|r| r.starts_with('.'))
        });
        if !judged {
            return Err((
                at,
                format!(
                    "steps[{i}]: the answer `{name}` has no expectation and no expect_one_of names it: \
                     add `expect:` (or `expect: any` on purpose)"
                ),
            ));
        }
    }
    Ok(())
}

/// The fields `$profile.FIELD` may name at `level`: those its targets
/// declare (a store's profile is fixed: none).
pub fn profile_fields(level: Level) -> &'static [&'static str] {
    match level {
        Level::Store => &[],
        Level::Agent => &reqkey_model::vocab::Profile::FIELDS,
        Level::Idem => &reqkey_model::idem_profile::IdemProfile::FIELDS,
    }
}

/// A `profile.FIELD` the level does not declare, or a `key.NAME` outside
/// the idem level (where no `keySyntax` is declared).
fn unknown_profile_name(level: Level, names: &BTreeSet<String>) -> Option<String> {
    use crate::vars::{KEY_PREFIX, PROFILE_PREFIX};
    for name in names {
        if let Some(field) = name.strip_prefix(PROFILE_PREFIX) {
            let fields = profile_fields(level);
            if !fields.contains(&field) {
                return Some(format!(
                    "`$profile.{field}` names no field of the {level} profile ({})",
                    if fields.is_empty() {
                        "a store declares none".to_owned()
                    } else {
                        fields.join(", ")
                    }
                ));
            }
        }
        if name.starts_with(KEY_PREFIX) && level != Level::Idem {
            return Some(format!(
                "`${{{name}}}` writes a key as a declared keySyntax admits it: idem scenarios only"
            ));
        }
    }
    None
}
