//! Scenarios from the model: the store operations of a witness path, with
//! the answers the sequential spec gives, as scenario data.
//!
//! A `sometimes` witness is a short interleaving that reaches an
//! interesting answer (attach, replay, a lost race...). Its store
//! operations, replayed one after another against a real store, must get
//! exactly the answers [`SeqStore`] gives: that turns the model's
//! exploration into regression scenarios for every target. A mutant's
//! counterexample is exported the same way, with the *correct* answers: a
//! store with that bug fails the scenario.
//!
//! The value returned is the scenario as JSON (the harness writes it as
//! YAML; this crate knows no YAML). Session and run ids become `$variables`
//! so every trial runs on fresh sessions; keys, digests and inputs stay
//! literal.

use std::collections::BTreeSet;

use serde_json::{json, Map, Value};
use stateright::Path;

use crate::checker::check::shortest_path;

use crate::checker::mutants::Mutant;
use crate::checker::props;
use crate::checker::system::{Action, Config, KeyedEntryModel, SystemState};
use crate::contract::error::StoreError;
use crate::contract::seq::{KeyArgs, SeqStore, SessionArgs, StoreOp};

/// One exported scenario.
#[derive(Debug, Clone, PartialEq)]
pub struct ExportedScenario {
    /// File name without `.yaml`.
    pub file_stem: String,
    /// Where it came from, for a header comment.
    pub origin: String,
    /// The model path it replays, as a numbered action list.
    pub path_listing: String,
    /// The scenario document (`id`, `level`, `tags`, `summary`, `steps`).
    pub scenario: Value,
}

/// The witnesses of every `sometimes` property and one counterexample per
/// mutant, as store-level scenarios.
pub fn export_scenarios(config: &Config) -> Vec<ExportedScenario> {
    let mut out = Vec::new();
    let correct = Config {
        mutant: None,
        ..config.clone()
    };
    let model = KeyedEntryModel::new(correct.clone());
    for (name, suffix) in props::SOMETIMES_IDS {
        if let Some(path) = shortest_path(&correct, name) {
            out.push(scenario_from_path(
                &model,
                &path,
                &format!("model.witness.{suffix}"),
                &format!("witness.{suffix}"),
                format!(
                    "The store operations of the model's shortest path to `{name}`. A pass means the store answered every one as the sequential spec does."
                ),
                format!("witness of the sometimes property `{name}`"),
            ));
        }
    }
    for mutant in Mutant::ALL {
        let broken = Config {
            mutant: Some(mutant),
            ..correct.clone()
        };
        let model = KeyedEntryModel::new(broken.clone());
        if let Some(path) = shortest_path(&broken, mutant.violates()) {
            out.push(scenario_from_path(
                &model,
                &path,
                &format!("model.counterexample.{}", mutant.name()),
                &format!("counterexample.{}", mutant.name()),
                format!(
                    "The store operations of the model's counterexample to `{}` when {}. A pass means the store answered every one as the spec says: it does not have this bug.",
                    mutant.violates(),
                    mutant.description()
                ),
                format!("counterexample of mutant `{}`", mutant.name()),
            ));
        }
    }
    out
}

/// The store operations a path performs, in order.
pub fn path_ops(model: &KeyedEntryModel, path: &Path<SystemState, Action>) -> Vec<StoreOp> {
    let mut ops = Vec::new();
    for (state, action) in path.clone().into_vec() {
        if let Some(action) = action {
            ops.extend(model.store_ops(&state, &action));
        }
    }
    ops
}

fn scenario_from_path(
    model: &KeyedEntryModel,
    path: &Path<SystemState, Action>,
    id: &str,
    file_stem: &str,
    summary: String,
    origin: String,
) -> ExportedScenario {
    let mut ops = path_ops(model, path);
    // Close with the reads that show what the path left behind: each key's
    // holder and each session's input log.
    let mut keys = BTreeSet::new();
    let mut sessions = BTreeSet::new();
    for op in &ops {
        sessions.insert(op.session_id().to_owned());
        if let StoreOp::CommitRunStart(a) = op {
            if let Some(k) = &a.start_run.request_key {
                keys.insert((a.start_run.session_id.clone(), k.clone()));
            }
        }
    }
    for (session_id, request_key) in keys {
        ops.push(StoreOp::GetRunByRequestKey(KeyArgs {
            session_id,
            request_key,
        }));
    }
    for session_id in sessions {
        ops.push(StoreOp::ListInputs(SessionArgs { session_id }));
    }
    let mut oracle = SeqStore::new();
    let mut checks: BTreeSet<&'static str> = BTreeSet::new();
    let steps: Vec<Value> = ops
        .iter()
        .map(|op| {
            let answer = oracle.apply(op);
            let clause = step_clause(op, &answer);
            checks.insert(clause);
            let mut step = Map::new();
            step.insert(op.name().to_owned(), variables(op_args(op)));
            step.insert("expect".to_owned(), variables(expectation(op, &answer)));
            // The step judges its expected answer's clause, and no other
            // (issue 45): checks: is the union of these.
            step.insert("judges".to_owned(), json!([clause]));
            Value::Object(step)
        })
        .collect();
    ExportedScenario {
        file_stem: file_stem.to_owned(),
        origin,
        path_listing: crate::checker::check::format_path(model, path),
        scenario: json!({
            "id": id,
            "level": "store",
            "tags": ["model"],
            "summary": summary,
            "checks": checks.into_iter().collect::<Vec<_>>(),
            "steps": steps,
        }),
    }
}

/// The clause of spec/SPEC.md a step's expected answer is the rule of:
/// what the step judges (`judges:`), so that a failure names a clause like
/// any other scenario's (issues 41 and 45). The store fuzzer's shrunk
/// programs name theirs the same way.
pub fn step_clause(
    op: &StoreOp,
    answer: &Result<crate::contract::seq::StoreReply, StoreError>,
) -> &'static str {
    use crate::contract::error::RunStartRejection as R;
    use crate::contract::seq::StoreReply;
    use crate::contract::types::CommitOutcome;
    match (op, answer) {
        (StoreOp::CommitRunStart(_), Ok(StoreReply::Commit(c))) => match c.outcome {
            CommitOutcome::Started => "store.commit.write-run",
            CommitOutcome::Replayed => "store.commit.replay",
        },
        (StoreOp::CommitRunStart(_), Err(StoreError::RunStartRejected(r))) => match r {
            R::RequestKeyTaken { .. } => "store.commit.key-holder",
            R::CasMismatch { .. } => "store.commit.cas",
            R::RunIdConflict { .. } => "store.commit.run-id-conflict",
        },
        (StoreOp::CommitRunStart(_), _) => "store.commit.order",
        (StoreOp::GetRun(_), _) => "store.reads.get-run",
        (StoreOp::GetCurrentRun(_), _) => "store.reads.current-run",
        (StoreOp::ListRuns(_), _) => "store.reads.list-runs-order",
        (StoreOp::GetRunByRequestKey(_), _) => "store.reads.by-key",
        (StoreOp::ListInputs(_), _) => "store.reads.list-inputs",
        (StoreOp::SetRunStatus(_), _) => "store.write.status-live-changes",
        (StoreOp::DeleteSession(_), _) => "store.delete.removes-all",
    }
}

/// The step's value: the op's args (a commit's StartRun fields directly).
fn op_args(op: &StoreOp) -> Value {
    let wire = serde_json::to_value(op).unwrap_or(Value::Null);
    let args = wire.get("args").cloned().unwrap_or(Value::Null);
    match op {
        StoreOp::CommitRunStart(_) => args.get("startRun").cloned().unwrap_or(Value::Null),
        _ => args,
    }
}

/// The expectation: the oracle's wire answer, with absent key fields spelt
/// `$absent` and error messages left out (they are free text).
fn expectation(
    op: &StoreOp,
    answer: &Result<crate::contract::seq::StoreReply, StoreError>,
) -> Value {
    match answer {
        Ok(reply) => {
            let mut ok = serde_json::to_value(reply).unwrap_or(Value::Null);
            mark_absent_keys(&mut ok);
            if matches!(op, StoreOp::ListInputs(_)) {
                let n = ok.as_array().map_or(0, Vec::len);
                ok = json!({ "$length": n });
            }
            json!({ "ok": ok })
        }
        Err(StoreError::RunStartRejected(r)) => json!({
            "error": {"kind": "run_start_rejected", "cause": r.cause(), "details": r.details()}
        }),
        Err(e) => json!({ "error": {"kind": e.kind()} }),
    }
}

/// A run object without `requestKey` gets `requestKey: $absent` (and the
/// same for the digest), so the scenario checks that keyless runs carry no
/// key fields.
fn mark_absent_keys(v: &mut Value) {
    match v {
        Value::Object(map) => {
            if map.contains_key("runId") && map.contains_key("startSequence") {
                for field in ["requestKey", "requestDigest"] {
                    map.entry(field)
                        .or_insert_with(|| Value::String("$absent".into()));
                }
            }
            for child in map.values_mut() {
                mark_absent_keys(child);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(mark_absent_keys),
        _ => {}
    }
}

/// Whether a string is one of the model's session ids (`s0`) or run ids
/// (`c0r1`).
fn is_model_id(s: &str) -> bool {
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    if let Some(rest) = s.strip_prefix('s') {
        return digits(rest);
    }
    if let Some(rest) = s.strip_prefix('c') {
        if let Some((a, b)) = rest.split_once('r') {
            return digits(a) && digits(b);
        }
    }
    false
}

/// Replaces model ids by `$variables`.
fn variables(v: Value) -> Value {
    match v {
        Value::String(s) if is_model_id(&s) => Value::String(format!("${s}")),
        Value::Array(items) => Value::Array(items.into_iter().map(variables).collect()),
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (k, variables(v)))
                .collect::<Map<String, Value>>(),
        ),
        other => other,
    }
}

/// Exported scenario ids, sorted (for tests and listings).
pub fn ids(scenarios: &[ExportedScenario]) -> Vec<String> {
    let mut ids: Vec<String> = scenarios
        .iter()
        .filter_map(|s| {
            s.scenario
                .get("id")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .collect();
    ids.sort();
    ids
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::contract::seq::StoreReply;

    #[test]
    fn every_exported_scenario_declares_the_store_clauses_of_its_steps() {
        let all = crate::contract::clauses::clauses().unwrap();
        for s in export_scenarios(&Config::default()) {
            let checks = s.scenario["checks"].as_array().unwrap();
            assert!(!checks.is_empty(), "{}", s.file_stem);
            for c in checks {
                let id = c.as_str().unwrap();
                let clause = all.iter().find(|k| k.id == id).unwrap();
                assert!(
                    clause.applies_to(crate::contract::vocab::Level::Store),
                    "{id} is not a store clause"
                );
            }
        }
        let no_key_rule = export_scenarios(&Config::default())
            .into_iter()
            .find(|s| s.file_stem == "counterexample.no-key-rule")
            .unwrap();
        assert!(no_key_rule.scenario["checks"]
            .as_array()
            .unwrap()
            .contains(&json!("store.commit.key-holder")));
    }

    #[test]
    fn every_sometimes_property_and_every_mutant_gets_a_scenario() {
        let scenarios = export_scenarios(&Config::default());
        let got = ids(&scenarios);
        let mut want: Vec<String> = props::SOMETIMES_IDS
            .iter()
            .map(|(_, id)| format!("model.witness.{id}"))
            .chain(
                Mutant::ALL
                    .iter()
                    .map(|m| format!("model.counterexample.{}", m.name())),
            )
            .collect();
        want.sort();
        assert_eq!(got, want);
    }

    #[test]
    fn model_ids_become_variables_and_other_strings_stay() {
        assert_eq!(
            variables(json!({"a": "s0", "b": "c1r2", "c": "k0", "d": "sx", "e": "c1r"})),
            json!({"a": "$s0", "b": "$c1r2", "c": "k0", "d": "sx", "e": "c1r"})
        );
    }

    #[test]
    fn keyless_runs_are_expected_without_key_fields() {
        let mut v =
            serde_json::to_value(StoreReply::Run(Some(crate::contract::types::RunMetadata {
                session_id: "s0".into(),
                run_id: "c2r1".into(),
                status: crate::contract::types::RunStatus::Running,
                start_sequence: 1,
                request_key: None,
                request_digest: None,
            })))
            .unwrap();
        mark_absent_keys(&mut v);
        assert_eq!(v["requestKey"], "$absent");
        assert_eq!(v["requestDigest"], "$absent");
    }
}
