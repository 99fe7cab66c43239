//! Clause coverage: which clause of spec/SPEC.md has a scenario that can
//! fail on it.
//!
//! The rule (docs/scenario-format.md, "Clause coverage"): a clause is
//! covered at a level when at least one scenario of that level declares it
//! in `checks:` AND that scenario is falsifiable — it fails against at least
//! one built-in broken variant of that level (`broken-memory:*` stores,
//! `reference-agent:*` servers), as recorded in the falsification record
//! `scenarios/falsification.json`. The record is not taken on trust: the
//! corpus tests (`harness/tests/store_corpus.rs`, `agent_corpus.rs`) run
//! every variant and fail when a recorded scenario passes on it. Clauses
//! the spec's clause table certifies at no scenario level are listed apart
//! and never count as gaps.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use reqkey_model::clauses::{Certified, Clause, ClauseError};
use reqkey_model::vocab::Level;
use serde::{Deserialize, Serialize};

use reqkey_scenario::Scenario;

/// The file, beside the level directories, that records which scenarios
/// each built-in broken variant fails.
pub const RECORD_FILE: &str = "falsification.json";

/// `scenarios/falsification.json`: per level, per broken variant (a
/// `--target` string), the scenarios it is known to fail every time.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FalsificationRecord {
    /// What the file is (free text).
    #[serde(default)]
    pub about: String,
    pub store: BTreeMap<String, BTreeSet<String>>,
    pub agent: BTreeMap<String, BTreeSet<String>>,
    /// The `reqkey-idem/1` level's variants (SPEC 10); absent in older records.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub idem: BTreeMap<String, BTreeSet<String>>,
}

impl FalsificationRecord {
    /// The variants of `level` and the scenarios each fails.
    pub fn level(&self, level: Level) -> &BTreeMap<String, BTreeSet<String>> {
        match level {
            Level::Store => &self.store,
            Level::Agent => &self.agent,
            Level::Idem => &self.idem,
        }
    }

    /// The variants of `level` that fail scenario `id`.
    pub fn variants_failing(&self, level: Level, id: &str) -> Vec<&str> {
        self.level(level)
            .iter()
            .filter(|(_, ids)| ids.contains(id))
            .map(|(v, _)| v.as_str())
            .collect()
    }
}

/// Why coverage could not be judged. Exit code 2.
#[derive(Debug, thiserror::Error)]
pub enum CoverageError {
    #[error("{path}: {message}")]
    Record { path: PathBuf, message: String },
    #[error("spec/SPEC.md: {0}")]
    Spec(#[from] ClauseError),
    #[error("{RECORD_FILE}: {level} variant `{variant}` names `{scenario}`, which is not a scenario of the {level} suite")]
    UnknownScenario {
        level: &'static str,
        variant: String,
        scenario: String,
    },
    #[error("{RECORD_FILE}: `{variant}` is not a built-in broken {level} variant")]
    BadVariant {
        level: &'static str,
        variant: String,
    },
}

/// Reads the record at `root/falsification.json`.
pub fn read_record(root: &Path) -> Result<FalsificationRecord, CoverageError> {
    let path = root.join(RECORD_FILE);
    let text = std::fs::read_to_string(&path).map_err(|e| CoverageError::Record {
        path: path.clone(),
        message: e.to_string(),
    })?;
    parse_record(&path, &text)
}

/// Parses a record's text (`path` names it in errors): the embedded
/// suite's, or one read from disk.
pub fn parse_record(path: &Path, text: &str) -> Result<FalsificationRecord, CoverageError> {
    serde_json::from_str(text).map_err(|e| CoverageError::Record {
        path: path.to_owned(),
        message: e.to_string(),
    })
}

/// One scenario that declares a clause, and whether it can fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checker {
    pub scenario: String,
    /// The broken variants it fails (empty: it is not shown falsifiable).
    pub falsified_by: Vec<String>,
}

/// One clause of a level and the scenarios that declare it.
#[derive(Debug, Clone)]
pub struct ClauseRow {
    pub clause: Clause,
    pub checkers: Vec<Checker>,
}

impl ClauseRow {
    pub fn covered(&self) -> bool {
        self.checkers.iter().any(|c| !c.falsified_by.is_empty())
    }
}

/// The clause x scenario matrix of one level.
#[derive(Debug, Clone)]
pub struct Coverage {
    pub level: Level,
    /// Every clause certified at this level, in spec order.
    pub rows: Vec<ClauseRow>,
    /// Clauses certified by no scenario (any level), with the reason.
    pub elsewhere: Vec<(Clause, String)>,
    /// Scenarios of the level that declare no clause.
    pub undeclared: Vec<String>,
    /// Scenarios of the level, in load order.
    pub scenarios: Vec<String>,
}

impl Coverage {
    pub fn covered(&self) -> usize {
        self.rows.iter().filter(|r| r.covered()).count()
    }

    pub fn total(&self) -> usize {
        self.rows.len()
    }

    pub fn gaps(&self) -> impl Iterator<Item = &ClauseRow> {
        self.rows.iter().filter(|r| !r.covered())
    }

    /// `N/M`, as certificates state it.
    pub fn ratio(&self) -> String {
        format!("{}/{}", self.covered(), self.total())
    }
}

/// The coverage of `level` by `scenarios` (that level's suite) under the
/// record and the given clauses.
pub fn coverage(
    level: Level,
    clauses: &[Clause],
    scenarios: &[Scenario],
    record: &FalsificationRecord,
    is_builtin_variant: &dyn Fn(Level, &str) -> bool,
) -> Result<Coverage, CoverageError> {
    let ids: BTreeSet<&str> = scenarios.iter().map(|s| s.id.as_str()).collect();
    for (variant, failing) in record.level(level) {
        // What a variant name may be is the targets' business (the one
        // parser of target forms); the caller says.
        if !is_builtin_variant(level, variant) {
            return Err(CoverageError::BadVariant {
                level: level.name(),
                variant: variant.clone(),
            });
        }
        if let Some(unknown) = failing.iter().find(|id| !ids.contains(id.as_str())) {
            return Err(CoverageError::UnknownScenario {
                level: level.name(),
                variant: variant.clone(),
                scenario: unknown.clone(),
            });
        }
    }
    let rows = clauses
        .iter()
        .filter(|c| c.applies_to(level))
        .map(|clause| ClauseRow {
            clause: clause.clone(),
            checkers: scenarios
                .iter()
                .filter(|s| s.checks.iter().any(|c| c.0 == clause.id))
                .map(|s| Checker {
                    scenario: s.id.clone(),
                    falsified_by: record
                        .variants_failing(level, &s.id)
                        .into_iter()
                        .map(str::to_owned)
                        .collect(),
                })
                .collect(),
        })
        .collect();
    let elsewhere = clauses
        .iter()
        .filter_map(|c| match &c.certified {
            Certified::Elsewhere(why) => Some((c.clone(), why.clone())),
            Certified::At(_) => None,
        })
        .collect();
    Ok(Coverage {
        level,
        rows,
        elsewhere,
        undeclared: scenarios
            .iter()
            .filter(|s| s.checks.is_empty())
            .map(|s| s.id.clone())
            .collect(),
        scenarios: scenarios.iter().map(|s| s.id.clone()).collect(),
    })
}

/// The matrix as text: one line per clause with the scenarios that check
/// it (`*` after a scenario that fails on a broken variant), gaps marked,
/// then the count.
pub fn render(cov: &Coverage) -> String {
    let mut out = String::new();
    let level = cov.level.name();
    let _ = writeln!(out, "clause coverage, {level} level");
    let width = cov
        .rows
        .iter()
        .map(|r| r.clause.id.len())
        .max()
        .unwrap_or(0);
    for row in &cov.rows {
        let mark = if row.covered() { "ok " } else { "GAP" };
        let who = if row.checkers.is_empty() {
            "no scenario checks it".to_owned()
        } else {
            row.checkers
                .iter()
                .map(|c| {
                    if c.falsified_by.is_empty() {
                        format!("{} (fails on no broken variant)", c.scenario)
                    } else {
                        format!("{}*", c.scenario)
                    }
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = writeln!(
            out,
            "  {mark} {:width$}  {who}",
            row.clause.id,
            width = width
        );
    }
    if !cov.undeclared.is_empty() {
        let _ = writeln!(
            out,
            "scenarios that declare no clause: {}",
            cov.undeclared.join(", ")
        );
    }
    let _ = writeln!(
        out,
        "{} of {} {level} clauses covered (`*` = fails on a built-in broken variant)",
        cov.covered(),
        cov.total(),
    );
    // Not part of the count above: clauses no scenario of any level can
    // certify, by design, each with the spec's reason (issue 41: "66 of 66
    // covered (52 certified by no scenario)" read as a contradiction).
    let _ = writeln!(
        out,
        "(not counted: {} further clauses of the spec are certified by no scenario at any level, by design; `reqkey coverage --list` names them and `reqkey explain ID` says what checks each instead)",
        cov.elsewhere.len()
    );
    out
}

/// One check of a scenario: where it is (`steps[2] http POST /orders`),
/// what it checks (`expect`, `expect_group[1]`), and the clauses it judges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckOf<'a> {
    pub place: String,
    pub what: String,
    pub judges: Vec<&'a str>,
    pub always: bool,
}

/// Clause ids as text.
fn names(list: &[reqkey_scenario::ClauseRef]) -> Vec<&str> {
    list.iter().map(|c| c.0.as_str()).collect()
}

/// Every check of `s`, in order: a step's own checks, each item of its
/// group that checks its own answer, each group rule (`reqkey explain
/// SCENARIO_ID` and `reqkey coverage --level LEVEL` list them).
pub fn checks_of(s: &Scenario) -> Vec<CheckOf<'_>> {
    use reqkey_scenario::Action;
    let mut out = Vec::new();
    for (i, step) in s.steps.iter().enumerate() {
        let place = format!("steps[{i}] {}", step.action.label());
        let mut what: Vec<&str> = Vec::new();
        if step.expect.is_some() {
            what.push("expect");
        }
        if step.expect_raw.is_some() {
            what.push("expect_raw");
        }
        if !step.expect_not_echoed.is_empty() {
            what.push("expect_not_echoed");
        }
        if !step.bind.is_empty() {
            what.push("bind");
        }
        if step.linearizable {
            what.push("linearizable");
        }
        match &step.action {
            Action::WaitRun(_) => what.push("wait_run"),
            Action::ExpectOneOf(_) => what.push("expect_one_of"),
            Action::MixedHistories { .. } => what.push("mixed_histories"),
            _ => {}
        }
        if !what.is_empty() && !step.judges.is_empty() {
            out.push(CheckOf {
                place: place.clone(),
                what: what.join(", "),
                judges: names(&step.judges),
                always: step.always,
            });
        }
        if let Action::Parallel(items) = &step.action {
            for (k, item) in items.iter().enumerate() {
                if item.checks_own_answer() {
                    out.push(CheckOf {
                        place: format!("{place} parallel[{k}] {}", item.action.label()),
                        what: "expect".into(),
                        judges: names(step.item_judges(item)),
                        always: step.always,
                    });
                }
            }
        }
        for (r, rule) in step.expect_group.iter().enumerate() {
            out.push(CheckOf {
                place: place.clone(),
                what: format!("expect_group[{r}]"),
                judges: names(step.rule_judges(rule)),
                always: step.always,
            });
        }
    }
    out
}

/// Every check of `scenarios` with the clauses it judges (issue 54: a
/// check judges the clause it is about, so that a wrong replay body in a
/// scenario about long keys fails `idem.replay.completed`, not the key's
/// clause), scenario by scenario ([`checks_of`]). `reqkey coverage --level
/// LEVEL` prints it.
pub fn render_checks(level: Level, scenarios: &[Scenario]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "checks, {} level: each check and the clauses it judges",
        level.name()
    );
    let mut count = 0;
    for s in scenarios {
        let _ = writeln!(out, "  {}", s.id);
        for c in checks_of(s) {
            count += 1;
            let _ = writeln!(
                out,
                "    {}: {}{} -> {}",
                c.place,
                c.what,
                if c.always { " (always runs)" } else { "" },
                c.judges.join(", ")
            );
        }
    }
    let _ = writeln!(
        out,
        "{count} checks in {} {} scenarios",
        scenarios.len(),
        level.name()
    );
    out
}

/// The matrix as a grid: clause rows, scenario columns (numbered, with a
/// legend), `X` where a falsifiable scenario checks the clause, `o` where
/// one that fails on no variant does.
pub fn render_grid(cov: &Coverage) -> String {
    let mut out = String::new();
    let width = cov
        .rows
        .iter()
        .map(|r| r.clause.id.len())
        .max()
        .unwrap_or(0);
    for (i, s) in cov.scenarios.iter().enumerate() {
        let _ = writeln!(out, "  {:>3} {s}", i + 1);
    }
    let _ = write!(out, "  {:width$} ", "", width = width);
    for i in 0..cov.scenarios.len() {
        let _ = write!(out, "{}", (i + 1) % 10);
    }
    out.push('\n');
    for row in &cov.rows {
        let _ = write!(out, "  {:width$} ", row.clause.id, width = width);
        for s in &cov.scenarios {
            let cell = match row.checkers.iter().find(|c| &c.scenario == s) {
                Some(c) if !c.falsified_by.is_empty() => 'X',
                Some(_) => 'o',
                None => '.',
            };
            out.push(cell);
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::path::Path;

    use super::*;
    use reqkey_scenario::parse_scenario;

    fn scenario(id: &str, checks: &str) -> Scenario {
        parse_scenario(
            Path::new("x.yaml"),
            &format!("id: {id}\nlevel: store\nchecks: [{checks}]\nsummary: s\nsteps:\n  - getRun: {{sessionId: s, runId: r}}\n    expect: {{ok: null}}\n    judges: [{checks}]\n"),
        )
        .unwrap()
    }

    fn record(store: &[(&str, &[&str])]) -> FalsificationRecord {
        FalsificationRecord {
            store: store
                .iter()
                .map(|(v, ids)| {
                    (
                        (*v).to_owned(),
                        ids.iter().map(|s| (*s).to_owned()).collect(),
                    )
                })
                .collect(),
            ..FalsificationRecord::default()
        }
    }

    #[test]
    fn a_clause_is_covered_only_by_a_declaring_scenario_that_fails_on_a_variant() {
        let clauses = reqkey_model::clauses::clauses().unwrap();
        let scenarios = vec![
            scenario("a", "store.commit.cas"),
            scenario("b", "store.commit.key-holder"),
        ];
        let rec = record(&[("broken-memory:x", &["a"])]);
        let cov = coverage(Level::Store, clauses, &scenarios, &rec, &|_, _| true).unwrap();
        let row = |id: &str| cov.rows.iter().find(|r| r.clause.id == id).unwrap();
        assert!(row("store.commit.cas").covered());
        assert!(
            !row("store.commit.key-holder").covered(),
            "b fails on nothing"
        );
        assert!(!row("store.commit.atomic").covered(), "nobody checks it");
        assert_eq!(cov.covered(), 1);
        assert!(cov.total() > 30);
        assert!(cov.rows.iter().all(|r| r.clause.applies_to(Level::Store)));
        let text = render(&cov);
        assert!(text.contains("GAP"), "{text}");
        assert!(text.contains("a*"), "{text}");
        assert!(text.contains("b (fails on no broken variant)"), "{text}");
        assert!(render_grid(&cov).contains('X'));
        // The count and the clauses no scenario certifies are two lines,
        // never "N of N covered (M certified by no scenario)".
        let count = text
            .lines()
            .find(|l| l.contains("clauses covered"))
            .unwrap();
        assert!(!count.contains("no scenario"), "{count}");
        let elsewhere = text.lines().last().unwrap();
        assert!(elsewhere.starts_with("(not counted: "), "{text}");
    }

    #[test]
    fn a_record_naming_an_unknown_scenario_or_variant_is_an_error() {
        let clauses = reqkey_model::clauses::clauses().unwrap();
        let scenarios = vec![scenario("a", "store.commit.cas")];
        let rec = record(&[("broken-memory:x", &["nope"])]);
        assert!(matches!(
            coverage(Level::Store, clauses, &scenarios, &rec, &|_, _| true),
            Err(CoverageError::UnknownScenario { .. })
        ));
        let rec = record(&[("memory", &["a"])]);
        assert!(matches!(
            coverage(Level::Store, clauses, &scenarios, &rec, &|_, v| v
                != "memory"),
            Err(CoverageError::BadVariant { .. })
        ));
    }
}
