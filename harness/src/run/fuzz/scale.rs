//! Every declared promise tested at its own scale (issue 55), beside the
//! fuzz pass's programs, at every level: the probes of
//! `run/fuzz/scale_store.rs`, `scale_agent.rs` and `scale_idem.rs`, run in
//! two halves around the programs.
//!
//! [`seed`] (before the programs) writes state the probes know: sessions,
//! runs and keys of every end, deleted and re-created sessions, and
//! thousands of keys (per session, across sessions, per caller and
//! route), asking the first ones again at once. [`finish`] (after the
//! programs) waits, within the patience, for what a timer, a sweep or a
//! TTL would do, times the declared `expiryMs` and `lockMs` up to the
//! patience, then reads everything again, as Jepsen's final generator
//! does: a key still names its holder, a finished run's status never
//! changed, a deleted session is still gone and its key free.
//!
//! What the probes reached (the patience, each timing field, the capacity,
//! the final reads) is a [`ScaleRecord`] on the pass's record; what they
//! proved becomes `FuzzViolation`s beside the programs' ([`apply`]). A
//! probe that could not judge (the target did not answer) is no verdict.

use std::sync::Arc;

use reqkey_model::idem_profile::IdemProfile;
use reqkey_model::vocab::{Level, Profile};

use crate::run::fuzz::idem_battery::{add_judged, JudgedField};
use crate::run::fuzz::pass::{FuzzPass, FuzzViolation};
use crate::run::fuzz::patience::{Finding, Patience, ScaleRecord};
use crate::run::fuzz::{scale_agent, scale_idem, scale_store};
use crate::targets::Target;

/// What the probes need of the judging.
#[derive(Debug, Clone)]
pub struct ScaleProbes {
    pub target: Arc<dyn Target>,
    pub profile: Profile,
    /// The declared idem profile (an idem target).
    pub idem: Option<IdemProfile>,
    pub patience: Patience,
    pub call_timeout_ms: u64,
    /// Fresh per run: every session, key and caller the probes write.
    pub namespace: String,
    /// Keys written before the first are asked again (`--capacity-keys`).
    pub keys: usize,
}

/// The keys the probes write by default before asking the first ones
/// again (`--capacity-keys`; docs/fuzz.md "At scale": measured).
pub const DEFAULT_CAPACITY_KEYS: usize = 2_000;
/// The most `--capacity-keys` takes.
pub const MAX_CAPACITY_KEYS: usize = 100_000;

/// What [`seed`] wrote, by level.
#[derive(Debug)]
pub enum Seeded {
    Store(scale_store::Seeded),
    Agent(scale_agent::Seeded),
    Idem(scale_idem::Seeded),
}

/// What the probes reached and proved.
#[derive(Debug, Clone, Default)]
pub struct ScaleOutcome {
    pub record: ScaleRecord,
    pub findings: Vec<Finding>,
    /// Why the probes could not judge (no verdict).
    pub error: Option<String>,
    /// What a second run of the probes showed, after a first that proved
    /// violations ([`confirm`]): (clause, kind of probe) of each.
    pub replayed: Option<Vec<(String, String)>>,
}

/// The first half, before the programs.
pub async fn seed(p: &ScaleProbes) -> Result<Seeded, String> {
    let target = Arc::clone(&p.target);
    match target.level() {
        Level::Store => scale_store::seed(target, &p.namespace, p.call_timeout_ms, p.keys)
            .await
            .map(Seeded::Store),
        Level::Agent => {
            scale_agent::seed(target, p.profile, &p.namespace, p.call_timeout_ms, p.keys)
                .await
                .map(Seeded::Agent)
        }
        Level::Idem => {
            let profile = p
                .idem
                .as_ref()
                .ok_or("the idem target declared no profile")?;
            let mapped = target.api_map().is_some();
            scale_idem::seed(
                target,
                profile,
                &p.namespace,
                p.call_timeout_ms,
                mapped,
                p.keys,
            )
            .await
            .map(Seeded::Idem)
        }
    }
}

/// The second half, after the programs: the waits and the final reads.
pub async fn finish(seeded: Result<Seeded, String>, patience: Patience) -> ScaleOutcome {
    let mut out = ScaleOutcome {
        record: ScaleRecord {
            patience_ms: patience.ms(),
            ..ScaleRecord::default()
        },
        ..ScaleOutcome::default()
    };
    let seeded = match seeded {
        Ok(s) => s,
        Err(e) => {
            out.error = Some(format!("the probes at scale: {e}"));
            return out;
        }
    };
    let r = &mut out.record;
    let finished = match seeded {
        Seeded::Store(s) => {
            r.capacity = s.capacity.clone();
            out.findings.extend(s.findings.clone());
            scale_store::finish(s, patience.ms())
                .await
                .map(|(lines, found)| {
                    r.final_reads = lines;
                    found
                })
        }
        Seeded::Agent(s) => {
            r.capacity = s.capacity.clone();
            r.not_judged = s.not_judged.clone();
            out.findings.extend(s.findings.clone());
            scale_agent::finish(s, patience.ms())
                .await
                .map(|(lines, found)| {
                    r.final_reads = lines;
                    found
                })
        }
        Seeded::Idem(s) => {
            r.capacity = s.capacity.clone();
            out.findings.extend(s.findings.clone());
            scale_idem::finish(s, patience.ms()).await.map(|f| {
                r.reach = f.reach;
                r.final_reads = f.final_reads;
                r.not_judged = f.not_judged;
                f.findings
            })
        }
    };
    match finished {
        Ok(found) => out.findings.extend(found),
        Err(e) => out.error = Some(format!("the probes at scale: {e}")),
    }
    out
}

/// A violation's reproduction: the probes run again, on fresh keys and
/// sessions, before the violations are written. A violation the second
/// run shows again is reproduced; one it does not (timing, load) is
/// written with why, never dropped: the first run proved it.
pub async fn confirm(p: &ScaleProbes, outcome: &mut ScaleOutcome) {
    if outcome.findings.is_empty() {
        return;
    }
    let again = ScaleProbes {
        namespace: format!("{}.again", p.namespace),
        ..p.clone()
    };
    let second = probe(&again).await;
    outcome.replayed = Some(
        second
            .findings
            .iter()
            .map(|f| (f.clause.clone(), kind(&f.probe)))
            .collect(),
    );
}

/// A probe's kind: its description without numbers (`capacity key 17`
/// and `capacity key 18` are one kind).
fn kind(probe: &str) -> String {
    probe
        .chars()
        .filter(|c| !c.is_ascii_digit())
        .collect::<String>()
        .trim()
        .to_owned()
}

/// Both halves at once, for a caller with nothing to run between them.
pub async fn probe(p: &ScaleProbes) -> ScaleOutcome {
    let seeded = seed(p).await;
    finish(seeded, p.patience).await
}

/// The outcome on the pass's record: the record, and each violation
/// beside the programs'; a proven violation fails the pass whatever else
/// could not be judged, a probe that could not judge a passing one is no
/// verdict.
pub fn apply(outcome: ScaleOutcome, pass: &mut FuzzPass) {
    let ScaleOutcome {
        record,
        findings,
        error,
        replayed,
    } = outcome;
    // How far each timing field was judged, beside what the programs and
    // the battery judged: every report's declared fields read it.
    let reached = record.reach.iter().filter_map(|r| {
        r.judged_up_to_ms.map(|ms| JudgedField {
            field: r.field.clone(),
            up_to_ms: (!r.at_declared).then_some(ms),
        })
    });
    add_judged(&mut pass.judged_fields, reached.collect());
    pass.scale = Some(record);
    if let Some(first) = findings.first() {
        if pass.verdict != "failed" {
            pass.verdict = "failed";
            pass.reason = Some(first.message.clone());
            pass.scenario_yaml = first.scenario_yaml.clone();
        }
    } else if let Some(e) = error {
        if pass.verdict == "passed" {
            pass.verdict = "error";
            pass.reason = Some(e);
        }
    }
    for f in distinct(findings) {
        pass.violations.push(violation(f, replayed.as_deref()));
    }
}

/// One finding per clause and kind of probe (`capacity key 17` and
/// `capacity key 18` are one kind), the first kept with how many more it
/// stands for: a bounded key index forgets a thousand keys, one violation.
pub fn distinct(findings: Vec<Finding>) -> Vec<Finding> {
    let mut out: Vec<(Finding, String, usize)> = Vec::new();
    for f in findings {
        let k = kind(&f.probe);
        match out
            .iter_mut()
            .find(|(g, gk, _)| g.clause == f.clause && *gk == k)
        {
            Some((_, _, more)) => *more += 1,
            None => out.push((f, k, 0)),
        }
    }
    out.into_iter()
        .map(|(mut f, _, more)| {
            if more > 0 {
                f.message.push_str(&format!(
                    "\n  (and {more} more of this kind of probe, the same clause)"
                ));
            }
            f
        })
        .collect()
}

fn violation(f: Finding, replayed: Option<&[(String, String)]>) -> FuzzViolation {
    let again = (f.clause.clone(), kind(&f.probe));
    let (reproduced, not_reproduced) = match replayed {
        Some(r) if r.contains(&again) => (true, None),
        Some(_) => (
            false,
            Some("the probes, run again on fresh keys, did not show it again (a timing the machine did not meet twice, or load): the first run proved it".to_owned()),
        ),
        None => (false, Some("the probes were not run again".to_owned())),
    };
    FuzzViolation {
        clause: f.clause.clone(),
        clauses: vec![f.clause],
        program: format!(
            "the probes at scale: {} (reproduced by running the probes again, as `reqkey fuzz --patience` does)",
            f.probe
        ),
        message: f.message,
        scenario_yaml: f.scenario_yaml.unwrap_or_default(),
        reproduced,
        not_reproduced,
    }
}
