//! What shards of one certification measured besides their scenarios, merged: the bounded fuzz pass and the target's warnings.
//!
//! Every shard of `certify --partition k/n` runs the same fuzz pass (the
//! certification's seed and budget) against the same server, so the merge
//! requires them to agree on level, budget and seed and keeps the worst
//! verdict any shard saw (a failure found by one shard is a proven
//! violation of the target whichever shard found it; a pass that could not
//! judge is no verdict). Warnings (`nagle_stall`) are each shard's
//! measurement of its own answers: the merge keeps every distinct one,
//! naming the shard. Nothing a shard did not report is made up.

use serde::Deserialize;

use crate::run::fuzz::pass::FuzzPass;
use crate::targets::latency::TargetWarning;

/// A shard's `fuzz` field, as `results.json` writes it.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct FuzzDoc {
    pub level: String,
    pub cases: u32,
    pub seed: u64,
    pub verdict: String,
    pub reason: Option<String>,
    pub scenario_yaml: Option<String>,
    #[serde(default)]
    pub power: Option<String>,
    #[serde(default)]
    pub violations: Vec<crate::run::fuzz::pass::FuzzViolation>,
    #[serde(default)]
    pub judged_fields: Vec<crate::run::fuzz::idem_battery::JudgedField>,
    pub scale: Option<crate::run::fuzz::patience::ScaleRecord>,
}

/// A shard's warning, as `results.json` writes it.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct WarningDoc {
    pub code: String,
    pub message: String,
    pub fix: String,
}

/// The verdicts a fuzz pass may report, worst first.
const FUZZ_VERDICTS: [&str; 5] = ["failed", "error", "passed", "none", "skipped"];

/// The merged fuzz pass of `shards` (`(origin, its fuzz field)`), or why
/// they are not one certification's.
pub fn merge_fuzz(shards: &[(&str, Option<&FuzzDoc>)]) -> Result<Option<FuzzPass>, String> {
    let Some((first_origin, first)) = shards.first() else {
        return Ok(None);
    };
    for (origin, doc) in shards {
        let key = |d: Option<&FuzzDoc>| {
            d.map(|f| {
                (
                    f.level.clone(),
                    f.cases,
                    f.seed,
                    f.scale.as_ref().map(|s| (s.patience_ms, s.capacity_keys)),
                )
            })
        };
        if key(*doc) != key(*first) {
            return Err(format!(
                "the shards differ in their fuzz pass: {first_origin} has {}, {origin} has {}",
                describe(*first),
                describe(*doc)
            ));
        }
        if let Some(d) = doc {
            if !FUZZ_VERDICTS.contains(&d.verdict.as_str()) {
                return Err(format!(
                    "{origin}: the fuzz pass's verdict {:?} is not one reqkey writes",
                    d.verdict
                ));
            }
            // A violation names clauses of the spec: anything else was not
            // written by reqkey (and would reach every report).
            let known =
                reqkey_model::clauses::clauses().map_err(|e| format!("spec/SPEC.md: {e}"))?;
            for v in &d.violations {
                if let Some(c) = std::iter::once(&v.clause)
                    .chain(&v.clauses)
                    .find(|c| !known.iter().any(|k| k.id == c.as_str()))
                {
                    return Err(format!(
                        "{origin}: the fuzz pass blames {c:?}, which is not a clause of spec/SPEC.md"
                    ));
                }
            }
            // A violation is a failed pass: a results file that says
            // otherwise was not written by reqkey.
            if !d.violations.is_empty() && d.verdict != "failed" {
                return Err(format!(
                    "{origin}: the fuzz pass lists {} violation(s) but its verdict is {:?}",
                    d.violations.len(),
                    d.verdict
                ));
            }
        }
    }
    let Some(first) = first else {
        return Ok(None);
    };
    // Worst first: the first verdict of FUZZ_VERDICTS some shard has, with
    // the reason and program of the first shard that has it.
    let Some((verdict, worst)) = FUZZ_VERDICTS.iter().find_map(|v| {
        shards
            .iter()
            .filter_map(|(origin, d)| d.map(|d| (*origin, d)))
            .find(|(_, d)| d.verdict == *v)
            .map(|found| (*v, found))
    }) else {
        return Ok(None);
    };
    let (origin, doc) = worst;
    // Every shard ran the same pass against the same server: a violation
    // any shard proved is proven (each clause once, the first shard's), and
    // what any of them judged is judged.
    let mut violations: Vec<crate::run::fuzz::pass::FuzzViolation> = Vec::new();
    for d in shards.iter().filter_map(|(_, d)| *d) {
        for v in &d.violations {
            if !violations.iter().any(|w| w.clauses == v.clauses) {
                violations.push(v.clone());
            }
        }
    }
    // Every shard ran the same pass: what any of them judged is judged.
    let mut judged_fields = Vec::new();
    for d in shards.iter().filter_map(|(_, d)| *d) {
        crate::run::fuzz::idem_battery::add_judged(&mut judged_fields, d.judged_fields.clone());
    }
    let reason = doc.reason.as_ref().map(|r| match verdict {
        "failed" | "error" => format!("shard {origin}: {r}"),
        _ => r.clone(),
    });
    Ok(Some(FuzzPass {
        level: first.level.clone(),
        cases: first.cases,
        seed: first.seed,
        verdict,
        reason,
        scenario_yaml: doc.scenario_yaml.clone(),
        power: first.power.clone(),
        violations,
        judged_fields,
        scale: doc.scale.clone(),
    }))
}

fn describe(doc: Option<&FuzzDoc>) -> String {
    match doc {
        None => "none".to_owned(),
        Some(f) => format!(
            "{} programs at the {} level, seed {}{}",
            f.cases,
            f.level,
            f.seed,
            f.scale.as_ref().map_or_else(String::new, |s| format!(
                ", patience {}",
                crate::run::fuzz::patience::duration(s.patience_ms)
            ))
        ),
    }
}

/// Every distinct warning of `shards` (`(origin, its warnings)`), each
/// naming the shards that reported it; a code reqkey does not write is
/// refused.
pub fn merge_warnings(shards: &[(&str, &[WarningDoc])]) -> Result<Vec<TargetWarning>, String> {
    let mut merged: Vec<(WarningDoc, Vec<&str>)> = Vec::new();
    for (origin, warnings) in shards {
        for w in *warnings {
            match merged.iter_mut().find(|(m, _)| m == w) {
                Some((_, origins)) => origins.push(origin),
                None => merged.push((w.clone(), vec![origin])),
            }
        }
    }
    merged
        .into_iter()
        .map(|(w, origins)| {
            let code = TargetWarning::known_code(&w.code).ok_or_else(|| {
                format!(
                    "{}: the warning code {:?} is not one reqkey writes",
                    origins.join(", "),
                    w.code
                )
            })?;
            Ok(TargetWarning {
                code,
                message: format!("shard {}: {}", origins.join(", "), w.message),
                fix: w.fix,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(verdict: &str, reason: Option<&str>) -> FuzzDoc {
        FuzzDoc {
            level: "store".into(),
            cases: 32,
            seed: 7,
            verdict: verdict.into(),
            reason: reason.map(str::to_owned),
            scenario_yaml: reason.map(|_| "id: store.fuzz.seed-7\n".to_owned()),
            power: None,
            violations: Vec::new(),
            judged_fields: Vec::new(),
            scale: None,
        }
    }

    #[test]
    fn the_worst_verdict_of_any_shard_is_the_certificate_s() {
        let (a, b) = (doc("passed", None), doc("failed", Some("step 3")));
        let m = merge_fuzz(&[("s1", Some(&a)), ("s2", Some(&b))])
            .unwrap()
            .unwrap();
        assert_eq!(m.verdict, "failed");
        assert_eq!(m.reason.as_deref(), Some("shard s2: step 3"));
        assert!(m.scenario_yaml.is_some());
        assert_eq!(m.exit_code(), 1);
        let m = merge_fuzz(&[("s1", Some(&a)), ("s2", Some(&a))])
            .unwrap()
            .unwrap();
        assert_eq!((m.verdict, m.exit_code()), ("passed", 0));
        let e = doc("error", Some("timed out"));
        let m = merge_fuzz(&[("s1", Some(&e)), ("s2", Some(&a))])
            .unwrap()
            .unwrap();
        assert_eq!((m.verdict, m.exit_code()), ("error", 2));
    }

    #[test]
    fn shards_of_other_fuzz_passes_or_unknown_verdicts_are_refused() {
        let a = doc("passed", None);
        let mut other_seed = a.clone();
        other_seed.seed = 8;
        let e = merge_fuzz(&[("s1", Some(&a)), ("s2", Some(&other_seed))]).unwrap_err();
        assert!(e.contains("differ in their fuzz pass"), "{e}");
        let e = merge_fuzz(&[("s1", Some(&a)), ("s2", None)]).unwrap_err();
        assert!(e.contains("s2 has none"), "{e}");
        let forged = doc("conforms", None);
        let e = merge_fuzz(&[("s1", Some(&forged))]).unwrap_err();
        assert!(e.contains("not one reqkey writes"), "{e}");
        assert_eq!(merge_fuzz(&[("s1", None), ("s2", None)]).unwrap(), None);
    }

    #[test]
    fn warnings_are_kept_once_naming_their_shards() {
        let w = WarningDoc {
            code: "nagle_stall".into(),
            message: "stalls".into(),
            fix: "TCP_NODELAY".into(),
        };
        let both = [w.clone()];
        let merged = merge_warnings(&[("s1", &both[..]), ("s2", &both[..]), ("s3", &[])]).unwrap();
        assert_eq!(merged.len(), 1);
        assert_eq!(merged[0].message, "shard s1, s2: stalls");
        let forged = [WarningDoc {
            code: "<b>".into(),
            ..w
        }];
        assert!(merge_warnings(&[("s1", &forged[..])]).is_err());
    }
}
