//! `reqkey certify merge`: the shards of one certification
//! (`certify --partition k/n`, each in its own CI job) put back together
//! into the certificate one run would have written.
//!
//! The shards meet only through their `results.json` (`reqkey-results/1`,
//! the stable document), so merging reads that document back
//! ([`ShardDoc`]) rather than any internal type. A merge is refused (exit
//! 2), never guessed at, when the shards cannot be one certification: a
//! shard missing or given twice, shards of different partitions, suites
//! (digest), targets, seeds, profiles or reqkey versions, a scenario
//! reported by two shards, or scenarios unaccounted for (every file of the
//! suite must be run or reported not applicable by exactly one shard).
//! Before this, the command verifies each shard's seal
//! ([`crate::report::seal`]), that each holds exactly its share of the
//! suite it claims and that all judged one server
//! ([`crate::report::merge_check`]); shards of one `--start` target are
//! compared by the target as written, not by the ports each chose.
//!
//! The shards' fuzz passes and warnings are merged too
//! ([`crate::report::merge_fuzz_warnings`]: the worst fuzz verdict, every
//! distinct warning). What the merged certificate cannot have: race timelines (not part of
//! `results.json`), so the merged HTML page draws none. Its date is the
//! earliest shard's, its duration the longest shard's (the shards ran side
//! by side), its target identity (`/health`) the first shard's.
//!
//! Pure: parsing and merging take text and give values; the command in
//! `cmd/certify.rs` reads the files and writes the reports.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;
use serde_json::Value;

use crate::report::context::{ClauseCoverage, ReportContext};
use crate::report::json::SCHEMA;
use crate::report::merge_fuzz_warnings::{merge_fuzz, merge_warnings, FuzzDoc, WarningDoc};
use crate::run::event::{
    ClauseStanding, ClauseVerdict, Failure, Indefinite, RunSummary, ScenarioResult, Verdict,
};
use crate::run::partition::Partition;
use crate::run::select::NotApplicable;
use crate::run::suite::SuiteInfo;
use crate::targets::profile::{parse_profile_flag, Profile, ProfileInfo, ProfileSource};
use crate::targets::Level;

/// A shard's `results.json`, as far as merging needs it.
#[derive(Debug, Clone, Deserialize)]
pub struct ShardDoc {
    pub schema: String,
    pub command: String,
    pub reqkey_version: String,
    pub date: String,
    pub target: TargetDoc,
    pub profile: Option<ProfileDoc>,
    #[serde(default)]
    pub not_applicable: Vec<NotApplicableDoc>,
    pub suite: Option<SuiteDoc>,
    pub clause_coverage: Option<CoverageDoc>,
    #[serde(default)]
    pub expected_failures: Vec<String>,
    pub seed: u64,
    pub duration_ms: u64,
    pub indefinite: Option<IndefiniteDoc>,
    #[serde(default)]
    pub scenarios: Vec<ScenarioDoc>,
    pub partition: Option<PartitionDoc>,
    /// The certification's fuzz pass (absent from older shards and `run`).
    #[serde(default)]
    pub fuzz: Option<FuzzDoc>,
    /// The target's warnings, as this shard measured them.
    #[serde(default)]
    pub warnings: Vec<WarningDoc>,
    /// The certification run the shard belongs to (absent from older
    /// shards, which merge refuses).
    #[serde(default)]
    pub run_id: Option<String>,
    /// An idem shard's declared fields, each with the scenarios of the
    /// shard that judge it (absent from older shards and other levels).
    #[serde(default)]
    pub declared_fields: Option<Vec<DeclaredFieldDoc>>,
}

/// A declared field as `results.json` writes it (what merging needs).
#[derive(Debug, Clone, Deserialize)]
pub struct DeclaredFieldDoc {
    pub field: String,
    pub value: String,
    #[serde(default)]
    pub scenarios: Vec<String>,
    #[serde(default)]
    pub promises_nothing: bool,
}

#[derive(Debug, Clone, Deserialize)]
pub struct TargetDoc {
    pub spec: String,
    #[serde(default)]
    pub defaulted: bool,
    pub health: Option<Value>,
    /// A `--start` shard's target before its ports were chosen.
    #[serde(default)]
    pub template: Option<String>,
    /// Its `--start` commands as written, redacted.
    #[serde(default)]
    pub start: Vec<String>,
    /// Its `--db` databases, redacted.
    #[serde(default)]
    pub db: Vec<String>,
    /// Its access flags (`--api`, `--cacert`, `-H`, `--max-rps`, ...).
    #[serde(default)]
    pub access: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProfileDoc {
    pub supports_request_key: bool,
    pub concurrent_entry: Option<String>,
    pub source: String,
    pub declared: Option<String>,
    #[serde(default)]
    pub crash: Option<String>,
    /// The setup a `--start` run's crash claim starts from.
    #[serde(default)]
    pub crash_setup: Option<String>,
    /// A `--start` shard's crash scenarios (its share of them).
    #[serde(default)]
    pub crash_scenarios: Option<CrashScenariosDoc>,
    /// The database-link claim, its setup and a `--db` shard's link
    /// scenarios (issue 49), as for crashes.
    #[serde(default)]
    pub link: Option<String>,
    #[serde(default)]
    pub link_setup: Option<String>,
    #[serde(default)]
    pub link_scenarios: Option<CrashScenariosDoc>,
    /// `--api`: the map and effect oracle.
    #[serde(default)]
    pub api_map: Option<String>,
    /// An idem target's declared profile (SPEC 10), as written.
    #[serde(default)]
    pub idem: Option<Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct CrashScenariosDoc {
    #[serde(default)]
    pub applied: Vec<String>,
    #[serde(default)]
    pub unmet: Vec<String>,
    /// The link faults the applied scenarios armed.
    #[serde(default)]
    pub faults: Vec<String>,
}

impl ProfileDoc {
    /// What must be the same in every shard: the profile and the crash
    /// setup, not the claim or the crash scenarios (each shard holds its
    /// share; merge unites them and makes the claim again).
    fn comparable(&self) -> ProfileDoc {
        ProfileDoc {
            crash: self.crash_setup.clone().or_else(|| self.crash.clone()),
            crash_scenarios: self
                .crash_scenarios
                .as_ref()
                .map(|_| CrashScenariosDoc::default()),
            link: self.link_setup.clone().or_else(|| self.link.clone()),
            link_scenarios: self
                .link_scenarios
                .as_ref()
                .map(|_| CrashScenariosDoc::default()),
            ..self.clone()
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct NotApplicableDoc {
    pub id: String,
    pub file: String,
    pub requires: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct SuiteDoc {
    pub source: String,
    pub version: Option<String>,
    pub digest: String,
    pub files: usize,
    #[serde(default)]
    pub embedded: bool,
}

#[derive(Debug, Clone, Deserialize)]
pub struct CoverageDoc {
    pub level: String,
    pub covered: usize,
    pub total: usize,
}

#[derive(Debug, Clone, Deserialize)]
pub struct IndefiniteDoc {
    pub reason: String,
    pub message: String,
}

#[derive(Debug, Clone, Copy, Deserialize)]
pub struct PartitionDoc {
    pub index: u32,
    pub count: u32,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ScenarioDoc {
    pub id: String,
    pub file: String,
    pub level: String,
    #[serde(default)]
    pub tags: Vec<String>,
    /// The clauses of spec/SPEC.md the scenario checks.
    #[serde(default)]
    pub checks: Vec<String>,
    pub summary: String,
    pub verdict: String,
    pub trials_run: u32,
    pub trials_with_groups: u32,
    pub trials_overlapped: u32,
    pub max_send_spread_us: Option<u64>,
    pub duration_ms: u64,
    pub failure: Option<FailureDoc>,
    /// Failures of `always` steps after the first (issue 45).
    #[serde(default)]
    pub later_failures: Vec<FailureDoc>,
    /// Each clause: pass, fail or not judged, and why (issue 45).
    #[serde(default)]
    pub clauses: Vec<ClauseDoc>,
    pub note: Option<String>,
}

/// A clause's standing as `results.json` writes it.
#[derive(Debug, Clone, Deserialize)]
pub struct ClauseDoc {
    pub clause: String,
    pub standing: String,
    pub why: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct FailureDoc {
    pub trial: u32,
    pub step: String,
    pub message: String,
    pub expected: Option<Value>,
    pub actual: Option<Value>,
    pub detail: Option<String>,
    pub reason: Option<String>,
    /// The clauses of the failed check.
    #[serde(default)]
    pub clauses: Vec<String>,
}

/// The typed reasons a report may carry (`docs/reports.md`): a merged
/// result keeps the harness's own `&'static str`, and a reason not in
/// this list means a `results.json` this reqkey did not write.
const KNOWN_REASONS: &[&str] = &[
    "unreachable",
    "timeout",
    "protocol",
    "unsupported",
    "bad_target",
    "closed",
    "too_large",
    "not_http",
    "certificate",
    "oracle",
    "wrong_protocol",
    "wiring",
    "interrupted",
    "stopped_early",
    "harness",
    "wrong_level",
    "no_overlap",
    "listen_queue",
];

fn known_reason(reason: &str) -> Result<&'static str, String> {
    KNOWN_REASONS
        .iter()
        .find(|r| **r == reason)
        .copied()
        .ok_or_else(|| format!("unknown reason `{reason}`"))
}

fn verdict(name: &str) -> Result<Verdict, String> {
    [
        Verdict::Pass,
        Verdict::Fail,
        Verdict::Error,
        Verdict::Indefinite,
        Verdict::ExpectedFail,
        Verdict::UnexpectedPass,
    ]
    .into_iter()
    .find(|v| v.as_str() == name)
    .ok_or_else(|| format!("unknown verdict `{name}`"))
}

/// One shard as given: where it came from (for messages) and its document.
#[derive(Debug, Clone)]
pub struct Shard {
    pub origin: String,
    pub doc: ShardDoc,
}

/// Parses one shard's `results.json`.
pub fn parse_shard(origin: &str, text: &str) -> Result<Shard, String> {
    let doc: ShardDoc = serde_json::from_str(text)
        .map_err(|e| format!("{origin}: not a {SCHEMA} document: {e}"))?;
    if doc.schema != SCHEMA {
        return Err(format!("{origin}: schema `{}`, not {SCHEMA}", doc.schema));
    }
    if doc.command != "certify" {
        return Err(format!(
            "{origin}: written by `reqkey {}`, not `reqkey certify --partition`",
            doc.command
        ));
    }
    Ok(Shard {
        origin: origin.to_owned(),
        doc,
    })
}

/// The certificate the shards make together: its context and summary.
#[derive(Debug, Clone)]
pub struct Merged {
    pub ctx: ReportContext,
    pub summary: RunSummary,
    /// The suite the shards ran (for finding its scenarios' steps).
    pub suite: SuiteInfo,
    /// The level of the suite, from the shards' clause coverage or results.
    pub level: Option<Level>,
}

/// Checks that every shard agrees with the first on `what`.
fn same<T: PartialEq + std::fmt::Debug>(
    shards: &[Shard],
    what: &str,
    get: impl Fn(&ShardDoc) -> T,
) -> Result<(), String> {
    let Some(first) = shards.first() else {
        return Ok(());
    };
    let want = get(&first.doc);
    for s in &shards[1..] {
        let got = get(&s.doc);
        if got != want {
            return Err(format!(
                "the shards differ in their {what}: {} has {want:?}, {} has {got:?}",
                first.origin, s.origin
            ));
        }
    }
    Ok(())
}

/// Merges the shards of one certification, or says why they are not one.
pub fn merge(mut shards: Vec<Shard>) -> Result<Merged, String> {
    if shards.is_empty() {
        return Err("no shard to merge".into());
    }
    let mut by_index: BTreeMap<u32, String> = BTreeMap::new();
    let mut count = None;
    for s in &shards {
        let Some(p) = s.doc.partition else {
            return Err(format!(
                "{}: not a shard (it was not run with --partition k/n)",
                s.origin
            ));
        };
        let p = Partition::new(p.index, p.count)
            .ok_or_else(|| format!("{}: partition {}/{} is not k/n", s.origin, p.index, p.count))?;
        match count {
            None => count = Some(p.count),
            Some(n) if n != p.count => {
                return Err(format!(
                    "{} is shard {p} but {} is of {n} shards: all shards must split the suite the same way",
                    s.origin, shards[0].origin
                ))
            }
            Some(_) => {}
        }
        if let Some(other) = by_index.insert(p.index, s.origin.clone()) {
            return Err(format!("shard {p} given twice: {other} and {}", s.origin));
        }
    }
    let count = count.unwrap_or(1);
    let missing: Vec<String> = (1..=count)
        .filter(|k| !by_index.contains_key(k))
        .map(|k| format!("{k}/{count}"))
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "shard {} missing: a certificate needs all {count} shards",
            missing.join(", ")
        ));
    }
    shards.sort_by_key(|s| s.doc.partition.map_or(0, |p| p.index));

    let suite_digest = |d: &ShardDoc| d.suite.as_ref().map(|s| s.digest.clone());
    if shards.iter().any(|s| s.doc.suite.is_none()) {
        return Err("a shard names no suite: cannot tell the shards ran the same one".into());
    }
    same(&shards, "suite digest", suite_digest)?;
    same(&shards, "suite", |d| d.suite.clone())?;
    // Shards of one `--start` target each chose their own ports: they
    // are compared as written, before the ports were filled in.
    same(&shards, "target", |d| {
        d.target
            .template
            .clone()
            .unwrap_or_else(|| d.target.spec.clone())
    })?;
    same(&shards, "seed (pass the same --seed to every shard)", |d| {
        d.seed
    })?;
    // One certification run: yesterday's shards do not complete today's.
    if let Some(s) = shards.iter().find(|s| s.doc.run_id.is_none()) {
        return Err(format!(
            "{} names no run id (made by an older reqkey?): shards must be bound to one run",
            s.origin
        ));
    }
    same(
        &shards,
        "run id (shards of different certification runs; pass the same --run-id to every shard)",
        |d| d.run_id.clone(),
    )?;
    same(&shards, "reqkey version", |d| d.reqkey_version.clone())?;
    same(&shards, "profile", |d| {
        d.profile.as_ref().map(ProfileDoc::comparable)
    })?;
    same(&shards, "expected failures", |d| {
        d.expected_failures.clone()
    })?;

    let first = &shards[0].doc;
    let suite_doc = first
        .suite
        .clone()
        .ok_or_else(|| "a shard names no suite".to_owned())?;

    // Every scenario exactly once, and every file of the suite accounted for.
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    for s in &shards {
        let ids = s
            .doc
            .scenarios
            .iter()
            .map(|r| &r.id)
            .chain(s.doc.not_applicable.iter().map(|n| &n.id));
        for id in ids {
            if let Some(other) = seen.insert(id.clone(), s.origin.clone()) {
                return Err(format!(
                    "scenario {id} is in two shards ({other} and {}): they were not split by the same partition",
                    s.origin
                ));
            }
        }
    }
    let stopped = shards.iter().find(|s| s.doc.indefinite.is_some());
    if stopped.is_none() && seen.len() != suite_doc.files {
        return Err(format!(
            "the shards account for {} scenarios but the suite has {} files",
            seen.len(),
            suite_doc.files
        ));
    }

    let mut results = Vec::new();
    let mut not_applicable = Vec::new();
    for s in &shards {
        for r in &s.doc.scenarios {
            results.push(scenario_result(r).map_err(|e| format!("{}: {}: {e}", s.origin, r.id))?);
        }
        not_applicable.extend(s.doc.not_applicable.iter().map(|n| NotApplicable {
            id: n.id.clone(),
            file: PathBuf::from(&n.file),
            requires: n.requires.clone(),
        }));
    }
    // One run reports in suite (file) order.
    results.sort_by(|a, b| (&a.file, &a.id).cmp(&(&b.file, &b.id)));
    not_applicable.sort_by(|a, b| (&a.file, &a.id).cmp(&(&b.file, &b.id)));

    let indefinite = match stopped {
        Some(s) => match &s.doc.indefinite {
            Some(i) => Some(
                match known_reason(&i.reason).map_err(|e| format!("{}: {e}", s.origin))? {
                    // A signal ended that shard, not the merge: its missing
                    // scenarios are no verdict (exit 2), its proven
                    // violations are kept (exit 1).
                    crate::report::verdict::INTERRUPTED => Indefinite {
                        reason: "stopped_early",
                        message: format!("shard {} was interrupted: {}", s.origin, i.message),
                    },
                    reason => Indefinite {
                        reason,
                        message: format!("shard {}: {}", s.origin, i.message),
                    },
                },
            ),
            None => None,
        },
        None => None,
    };
    let summary = RunSummary::of_results(
        first.target.spec.clone(),
        first.seed,
        shards.iter().map(|s| s.doc.duration_ms).max().unwrap_or(0),
        results,
        indefinite,
        // Each shard measured its own answers; every distinct warning is
        // kept, naming its shards.
        merge_warnings(
            &shards
                .iter()
                .map(|s| (s.origin.as_str(), s.doc.warnings.as_slice()))
                .collect::<Vec<_>>(),
        )?,
    );
    let fuzz = merge_fuzz(
        &shards
            .iter()
            .map(|s| (s.origin.as_str(), s.doc.fuzz.as_ref()))
            .collect::<Vec<_>>(),
    )?;

    let suite = SuiteInfo {
        source: suite_doc.source.clone(),
        version: suite_doc.version.clone(),
        digest: suite_doc.digest.clone(),
        files: suite_doc.files,
        embedded: suite_doc.embedded,
    };
    let mut ctx = ReportContext::new(
        "certify",
        first.target.template.as_ref().unwrap_or(&first.target.spec),
    );
    ctx.target_template = first.target.template.clone();
    ctx.start_commands = first.target.start.clone();
    ctx.db_urls = first.target.db.clone();
    ctx.access = first.target.access.clone();
    ctx.reqkey_version = first.reqkey_version.clone();
    ctx.target_defaulted = first.target.defaulted;
    ctx.health = first.target.health.clone();
    ctx.suite = Some(suite.clone());
    ctx.expected_failures = first.expected_failures.clone();
    ctx.date = shards
        .iter()
        .map(|s| s.doc.date.clone())
        .min()
        .unwrap_or_default();
    ctx.profile = first.profile.as_ref().map(profile_info).transpose()?;
    if let Some(p) = ctx.profile.as_mut() {
        p.crash_scenarios = united_crash_scenarios(&shards, |p| p.crash_scenarios.as_ref());
        p.link_scenarios = united_crash_scenarios(&shards, |p| p.link_scenarios.as_ref());
    }
    ctx.not_applicable = not_applicable;
    ctx.fuzz = fuzz;
    ctx.declared_fields = united_declared_fields(&shards)?;
    ctx.run_id = first.run_id.clone();
    ctx.clause_coverage = first.clause_coverage.as_ref().map(|c| ClauseCoverage {
        level: c.level.clone(),
        covered: c.covered,
        total: c.total,
    });
    let level = first
        .clause_coverage
        .as_ref()
        .and_then(|c| Level::parse(&c.level))
        .or_else(|| summary.results.first().map(|r| r.level));
    Ok(Merged {
        ctx,
        summary,
        suite,
        level,
    })
}

/// A failure as `results.json` wrote it, read back.
fn failure(f: &FailureDoc) -> Failure {
    Failure {
        trial: f.trial,
        step: f.step.clone(),
        message: f.message.clone(),
        expected: f.expected.clone(),
        actual: f.actual.clone(),
        detail: f.detail.clone(),
        clauses: f.clauses.clone(),
    }
}

fn scenario_result(r: &ScenarioDoc) -> Result<ScenarioResult, String> {
    let reason = r
        .failure
        .as_ref()
        .and_then(|f| f.reason.as_deref())
        .map(known_reason)
        .transpose()?;
    Ok(ScenarioResult {
        id: r.id.clone(),
        file: PathBuf::from(&r.file),
        level: Level::parse(&r.level).ok_or_else(|| format!("unknown level `{}`", r.level))?,
        tags: r.tags.clone(),
        checks: r.checks.clone(),
        summary: r.summary.clone(),
        verdict: verdict(&r.verdict)?,
        trials_run: r.trials_run,
        trials_overlapped: r.trials_overlapped,
        trials_with_groups: r.trials_with_groups,
        max_send_spread_us: r.max_send_spread_us,
        duration_ms: r.duration_ms,
        failure: r.failure.as_ref().map(failure),
        later_failures: r.later_failures.iter().map(failure).collect(),
        clauses: r
            .clauses
            .iter()
            .map(|c| {
                Ok(ClauseVerdict {
                    clause: c.clause.clone(),
                    standing: ClauseStanding::parse(&c.standing)
                        .ok_or_else(|| format!("unknown clause standing `{}`", c.standing))?,
                    why: c.why.clone(),
                })
            })
            .collect::<Result<_, String>>()?,
        timelines: Vec::new(),
        history_view: None,
        reason,
        note: r.note.clone(),
    })
}

/// A profile as `results.json` wrote it, read back. `declared` is written
/// in the profile's display form (`supportsRequestKey: B, concurrentEntry:
/// NAME`), which reads as a `--profile` value once its separators are.
fn profile_info(p: &ProfileDoc) -> Result<ProfileInfo, String> {
    let source = match p.source.as_str() {
        "fixed" => ProfileSource::Fixed,
        "declared" => ProfileSource::Declared,
        "stated" => ProfileSource::Stated,
        other => return Err(format!("unknown profile source `{other}`")),
    };
    let mut flag = format!("supportsRequestKey={}", p.supports_request_key);
    if let Some(c) = &p.concurrent_entry {
        flag.push_str(&format!(",concurrentEntry={c}"));
    }
    let profile: Profile = parse_profile_flag(&flag).map_err(|e| e.to_string())?;
    let declared = p
        .declared
        .as_deref()
        .map(|d| parse_profile_flag(&d.replace(": ", "=").replace(", ", ",")))
        .transpose()
        .map_err(|e| e.to_string())?;
    Ok(ProfileInfo {
        profile,
        source,
        declared,
        crash: p.crash_setup.clone().or_else(|| p.crash.clone()),
        crash_scenarios: None,
        link: p.link_setup.clone().or_else(|| p.link.clone()),
        link_scenarios: None,
        idem: p
            .idem
            .as_ref()
            .map(|v| {
                v.as_object()
                    .ok_or_else(|| "profile.idem is not an object".to_owned())
                    .and_then(|o| {
                        reqkey_model::idem_profile::parse_profile(o)
                            .map_err(|e| format!("profile.idem: {e}"))
                    })
            })
            .transpose()?,
        api_map: p.api_map.clone(),
    })
}

/// The declared fields of every shard together: a field is judged by the
/// scenarios of any shard that judge it (each shard names its own). `None`
/// when no shard carries them (another level, an older reqkey); refused
/// when a shard says a field is judged by a scenario it did not run.
fn united_declared_fields(
    shards: &[Shard],
) -> Result<Option<Vec<crate::report::DeclaredField>>, String> {
    let mut out: Option<Vec<crate::report::DeclaredField>> = None;
    for shard in shards {
        let Some(docs) = shard.doc.declared_fields.as_ref() else {
            continue;
        };
        let united = out.get_or_insert_with(Vec::new);
        for d in docs {
            if let Some(id) = d
                .scenarios
                .iter()
                .find(|id| !shard.doc.scenarios.iter().any(|r| &&r.id == id))
            {
                return Err(format!(
                    "{}: the declared field {} = {} is said to be judged by {id}, which the shard did not run",
                    shard.origin, d.field, d.value
                ));
            }
            let at = match united
                .iter()
                .position(|f| f.field == d.field && f.value == d.value)
            {
                Some(i) => i,
                None => {
                    united.push(crate::report::DeclaredField {
                        field: d.field.clone(),
                        value: d.value.clone(),
                        scenarios: Vec::new(),
                        promises_nothing: d.promises_nothing,
                    });
                    united.len() - 1
                }
            };
            for id in &d.scenarios {
                if !united[at].scenarios.contains(id) {
                    united[at].scenarios.push(id.clone());
                }
            }
        }
    }
    Ok(out)
}

/// The crash (or link) scenarios of every shard together, as `pick`
/// reads them (`None` when the target was not started, or owned no
/// link): the merged certificate makes its claim from them and the merged
/// results.
fn united_crash_scenarios(
    shards: &[Shard],
    pick: impl Fn(&ProfileDoc) -> Option<&CrashScenariosDoc>,
) -> Option<crate::report::crash::CrashScenarios> {
    let mut out: Option<crate::report::crash::CrashScenarios> = None;
    for doc in shards.iter().filter_map(|s| pick(s.doc.profile.as_ref()?)) {
        let united = out.get_or_insert_with(Default::default);
        united.applied.extend(doc.applied.iter().cloned());
        for why in &doc.unmet {
            if !united.unmet.contains(why) {
                united.unmet.push(why.clone());
            }
        }
        for fault in &doc.faults {
            if !united.faults.contains(fault) {
                united.faults.push(fault.clone());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn doc(index: u32, count: u32, digest: &str, ids: &[&str]) -> String {
        let scenarios: Vec<Value> = ids
            .iter()
            .map(|id| {
                serde_json::json!({
                    "id": id, "file": format!("{id}.yaml"), "level": "store", "tags": [],
                    "summary": "s", "verdict": "pass", "trials_run": 1,
                    "trials_with_groups": 0, "trials_overlapped": 0, "duration_ms": 1,
                    "failure": null, "note": null
                })
            })
            .collect();
        serde_json::json!({
            "schema": SCHEMA, "command": "certify", "reqkey_version": "0",
            "date": format!("2026-01-0{index}T00:00:00Z"),
            "target": {"spec": "memory", "defaulted": false, "health": null},
            "profile": {"supportsRequestKey": true, "concurrentEntry": null, "source": "fixed", "declared": null},
            "not_applicable": [],
            "suite": {"source": "embedded", "version": "1", "digest": digest, "files": 4, "embedded": true},
            "clause_coverage": {"level": "store", "covered": 1, "total": 2},
            "selection": [format!("--partition {index}/{count}")], "expected_failures": [],
            "seed": 7, "duration_ms": 10 * index, "indefinite": null,
            "scenarios": scenarios, "partition": {"index": index, "count": count},
            "run_id": "run-1"
        })
        .to_string()
    }

    #[test]
    fn shards_of_two_runs_or_of_no_run_are_refused() {
        let today = doc(1, 2, "sha256:a", &["a", "b"]);
        let yesterday = doc(2, 2, "sha256:a", &["c", "d"]).replace("run-1", "run-0");
        let e = merge(shards(&[today.clone(), yesterday])).unwrap_err();
        assert!(e.contains("run id"), "{e}");
        let unbound = doc(2, 2, "sha256:a", &["c", "d"]).replace(r#","run_id":"run-1""#, "");
        assert!(!unbound.contains("run_id"));
        let e = merge(shards(&[today.clone(), unbound])).unwrap_err();
        assert!(e.contains("names no run id"), "{e}");
        let m = merge(shards(&[today, doc(2, 2, "sha256:a", &["c", "d"])])).unwrap();
        assert_eq!(m.ctx.run_id.as_deref(), Some("run-1"));
    }

    fn shards(docs: &[String]) -> Vec<Shard> {
        docs.iter()
            .enumerate()
            .map(|(i, d)| parse_shard(&format!("dir{i}"), d).unwrap())
            .collect()
    }

    #[test]
    fn three_shards_make_one_certificate_in_suite_order() {
        let m = merge(shards(&[
            doc(2, 3, "sha256:a", &["b"]),
            doc(1, 3, "sha256:a", &["c", "a"]),
            doc(3, 3, "sha256:a", &["d"]),
        ]))
        .unwrap();
        let ids: Vec<&str> = m.summary.results.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["a", "b", "c", "d"]);
        assert_eq!(m.summary.passed, 4);
        assert_eq!(m.summary.duration_ms, 30);
        assert_eq!(m.ctx.date, "2026-01-01T00:00:00Z");
        assert!(m.ctx.is_certification());
        assert_eq!(m.level, Some(Level::Store));
    }

    #[test]
    fn a_missing_or_duplicated_shard_or_another_suite_is_refused() {
        let e = merge(shards(&[
            doc(1, 3, "sha256:a", &["a", "b"]),
            doc(3, 3, "sha256:a", &["c"]),
        ]))
        .unwrap_err();
        assert!(e.contains("shard 2/3 missing"), "{e}");
        let e = merge(shards(&[
            doc(1, 2, "sha256:a", &["a", "b"]),
            doc(1, 2, "sha256:a", &["c", "d"]),
        ]))
        .unwrap_err();
        assert!(e.contains("shard 1/2 given twice"), "{e}");
        let e = merge(shards(&[
            doc(1, 2, "sha256:a", &["a", "b"]),
            doc(2, 2, "sha256:b", &["c", "d"]),
        ]))
        .unwrap_err();
        assert!(e.contains("suite digest"), "{e}");
        let e = merge(shards(&[
            doc(1, 2, "sha256:a", &["a", "b"]),
            doc(2, 2, "sha256:a", &["b", "c"]),
        ]))
        .unwrap_err();
        assert!(e.contains("scenario b is in two shards"), "{e}");
        let e = merge(shards(&[
            doc(1, 2, "sha256:a", &["a"]),
            doc(2, 2, "sha256:a", &["c", "d"]),
        ]))
        .unwrap_err();
        assert!(e.contains("account for 3 scenarios"), "{e}");
    }

    #[test]
    fn a_whole_run_is_not_a_shard() {
        let mut v: Value = serde_json::from_str(&doc(1, 1, "sha256:a", &["a"])).unwrap();
        v["partition"] = Value::Null;
        let e = merge(shards(&[v.to_string()])).unwrap_err();
        assert!(e.contains("not a shard"), "{e}");
        v["command"] = "run".into();
        assert!(parse_shard("x", &v.to_string()).is_err());
    }

    #[test]
    fn a_declared_profile_reads_back() {
        let p = ProfileDoc {
            supports_request_key: true,
            concurrent_entry: Some("interrupt_previous".into()),
            source: "stated".into(),
            declared: Some("supportsRequestKey: false, concurrentEntry: reject".into()),
            crash: None,
            crash_setup: None,
            crash_scenarios: None,
            link: None,
            link_setup: None,
            link_scenarios: None,
            api_map: None,
            idem: None,
        };
        let info = profile_info(&p).unwrap();
        assert!(!info.declared.unwrap().supports_request_key);
        assert_eq!(info.source, ProfileSource::Stated);
    }

    #[test]
    fn an_idem_profile_reads_back_and_a_broken_one_is_refused() {
        let draft = reqkey_model::idem_profile::IdemProfile::draft_default();
        let mut p = ProfileDoc {
            supports_request_key: true,
            concurrent_entry: Some("reject".into()),
            source: "declared".into(),
            declared: None,
            crash: None,
            crash_setup: None,
            crash_scenarios: None,
            link: None,
            link_setup: None,
            link_scenarios: None,
            api_map: None,
            idem: Some(draft.to_json()),
        };
        assert_eq!(profile_info(&p).unwrap().idem, Some(draft));
        p.idem = Some(serde_json::json!({"keyRequired": "yes"}));
        assert!(profile_info(&p).unwrap_err().contains("profile.idem"));
    }
}
