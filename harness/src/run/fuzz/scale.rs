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
use reqkey_scenario::fault::{FaultAction, FaultStep};

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
    /// The clauses a second run of the probes blamed, after a first that
    /// proved violations ([`confirm`]).
    pub replayed: Option<Vec<String>>,
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

/// Whether the final reads are read once more after a restart: only
/// where the harness started the target (`--start`) and it declares that
/// its state survives one (`durable: true`); otherwise why not.
async fn restart_promised(p: &ScaleProbes) -> Result<(), String> {
    let target = &p.target;
    if target.started_processes() == 0 {
        return Err("the harness did not start the target (--start)".into());
    }
    let durable = match &p.idem {
        Some(idem) => idem.durable,
        None => {
            let health = tokio::time::timeout(
                std::time::Duration::from_millis(p.call_timeout_ms),
                target.health(),
            )
            .await
            .map_err(|_| "its /health did not answer".to_owned())?
            .map_err(|e| format!("its /health: {e}"))?;
            health.get("durable").and_then(serde_json::Value::as_bool) == Some(true)
        }
    };
    if durable {
        Ok(())
    } else {
        Err("it does not declare durable: true (nothing is promised across a restart)".into())
    }
}

/// Restarts every process the harness started (each awaited until its
/// `/health` answers).
async fn restart(target: &Arc<dyn Target>) -> Result<(), String> {
    for replica in 0..target.started_processes() {
        let step = FaultStep {
            action: FaultAction::Restart,
            replica,
            after_ms: 0,
        };
        target
            .fault(&step)
            .await
            .map_err(|e| format!("restarting process {replica}: {e}"))?;
    }
    Ok(())
}

/// The line the final reads end with, and whether to read again.
async fn after_restart(p: &ScaleProbes) -> Result<bool, String> {
    match restart_promised(p).await {
        Ok(()) => {
            restart(&p.target).await?;
            Ok(true)
        }
        Err(_) => Ok(false),
    }
}

/// The second half, after the programs: the waits, the final reads, and
/// (where the harness owns a target declared durable) the same reads after
/// a restart of every process it started.
pub async fn finish(seeded: Result<Seeded, String>, p: &ScaleProbes) -> ScaleOutcome {
    let patience = p.patience;
    let mut out = ScaleOutcome {
        record: ScaleRecord {
            patience_ms: patience.ms(),
            capacity_keys: p.keys as u64,
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
    let restart_line = match restart_promised(p).await {
        Ok(()) => "after a restart of every process the harness started: every key, run and session read again".to_owned(),
        Err(why) => format!("not read again after a restart: {why}"),
    };
    let r = &mut out.record;
    let finished: Result<Vec<Finding>, String> = match seeded {
        Seeded::Store(s) => {
            r.capacity = s.capacity.clone();
            out.findings.extend(s.findings.clone());
            async {
                let (mut reads, lines, mut found) = scale_store::finish(s, patience.ms()).await?;
                r.final_reads = lines;
                let again = after_restart(p).await;
                if let Ok(true) = again {
                    found.extend(scale_store::read_again(&mut reads).await?);
                }
                scale_store::clean(reads).await;
                again.map(|_| found)
            }
            .await
        }
        Seeded::Agent(s) => {
            r.capacity = s.capacity.clone();
            r.not_judged = s.not_judged.clone();
            out.findings.extend(s.findings.clone());
            async {
                let (mut reads, lines, mut found) = scale_agent::finish(s, patience.ms()).await?;
                r.final_reads = lines;
                let again = after_restart(p).await;
                if let Ok(true) = again {
                    found.extend(scale_agent::read_again(&mut reads).await?);
                }
                scale_agent::clean(reads).await;
                again.map(|_| found)
            }
            .await
        }
        Seeded::Idem(s) => {
            r.capacity = s.capacity.clone();
            out.findings.extend(s.findings.clone());
            async {
                let mut f = scale_idem::finish(s, patience.ms()).await?;
                r.reach = std::mem::take(&mut f.reach);
                r.final_reads = std::mem::take(&mut f.final_reads);
                r.not_judged = std::mem::take(&mut f.not_judged);
                let mut found = std::mem::take(&mut f.findings);
                if let Some(reads) = f.reads.as_mut() {
                    if after_restart(p).await? {
                        found.extend(scale_idem::read_again(reads).await?);
                    }
                }
                Ok(found)
            }
            .await
        }
    };
    match finished {
        Ok(found) => {
            out.findings.extend(found);
            out.record.final_reads.push(restart_line);
        }
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
    outcome.replayed = Some(second.findings.iter().map(|f| f.clause.clone()).collect());
}

/// Both halves at once, for a caller with nothing to run between them.
pub async fn probe(p: &ScaleProbes) -> ScaleOutcome {
    let seeded = seed(p).await;
    finish(seeded, p).await
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

/// One finding per clause (as the pass keeps one violation per clause
/// blamed), the first kept with how many more it stands for: a bounded
/// key index forgets a thousand keys, one violation.
pub fn distinct(findings: Vec<Finding>) -> Vec<Finding> {
    let mut out: Vec<(Finding, usize)> = Vec::new();
    for f in findings {
        match out.iter_mut().find(|(g, _)| g.clause == f.clause) {
            Some((_, more)) => *more += 1,
            None => out.push((f, 0)),
        }
    }
    out.into_iter()
        .map(|(mut f, more)| {
            if more > 0 {
                f.message.push_str(&format!(
                    "\n  (and {more} more answers of the probes, the same clause)"
                ));
            }
            f
        })
        .collect()
}

fn violation(f: Finding, replayed: Option<&[String]>) -> FuzzViolation {
    let (reproduced, not_reproduced) = match replayed {
        Some(r) if r.contains(&f.clause) => (true, None),
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
