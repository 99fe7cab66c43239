//! Each recorded operation parsed once into the model's types, and how its answer is compared.

use reqkey_model::seq::{PreparedCommit, StoreOp, StoreReply};
use reqkey_model::{canonical_json, CommitOutcome, StoreError};
use reqkey_scenario::pattern::same_value;
use serde_json::Value;

use super::types::Operation;

/// An operation parsed once, into what every evaluation needs: the op, its
/// commit validated and digested, the recorded answer typed, and a
/// recorded input log in canonical form.
///
/// No `serde_json::Value` stays in it: a commit's input is kept canonical
/// in `commit` (the op's own copy is dropped), and a `listInputs` answer
/// only as `inputs` (its `Observed` entries are emptied).
#[derive(Debug)]
pub(super) struct Prepared {
    pub(super) op: Option<StoreOp>,
    pub(super) commit: Option<Box<PreparedCommit>>,
    pub(super) observed: Observed,
    pub(super) inputs: Option<Vec<(String, String)>>,
    pub(super) invoke_ns: u64,
    /// The return instant, `u64::MAX` for an unanswered op.
    pub(super) end_ns: u64,
}

#[derive(Debug)]
pub(super) enum Observed {
    Answer(Result<StoreReply, StoreError>),
    Malformed(String),
    Pending,
}

pub(super) fn prepare(o: &Operation) -> Prepared {
    let mut op = StoreOp::from_wire(&o.request).ok();
    let mut observed = match &o.answer {
        None => Observed::Pending,
        Some(answer) => parse_answer(op.as_ref().map(StoreOp::name), answer),
    };
    let commit = match &mut op {
        Some(StoreOp::CommitRunStart(a)) => {
            let prepared = PreparedCommit::new(&a.start_run).ok().map(Box::new);
            // Kept canonical in `prepared`; the search never reads it here.
            a.start_run.input = Value::Null;
            prepared
        }
        _ => None,
    };
    let inputs = match &mut observed {
        Observed::Answer(Ok(StoreReply::Inputs(v))) => {
            let canonical = v
                .iter()
                .map(|e| (e.run_id.clone(), canonical_json(&e.input)))
                .collect();
            *v = Vec::new();
            Some(canonical)
        }
        _ => None,
    };
    Prepared {
        op,
        commit,
        observed,
        inputs,
        invoke_ns: o.invoke_ns,
        end_ns: o.end_ns(),
    }
}

pub(super) fn parse_answer(op_name: Option<&str>, answer: &Value) -> Observed {
    let Some(obj) = answer.as_object() else {
        return Observed::Malformed("not a JSON object".into());
    };
    if obj.len() != 1 {
        return Observed::Malformed("needs exactly one of `ok` or `error`".into());
    }
    if let Some(err) = obj.get("error") {
        return match StoreError::from_wire(err) {
            Some(e) => Observed::Answer(Err(e)),
            None => Observed::Malformed(format!("not a reqkey-store/1 error: {err}")),
        };
    }
    let Some(ok) = obj.get("ok") else {
        return Observed::Malformed("needs exactly one of `ok` or `error`".into());
    };
    let Some(name) = op_name else {
        // The request was malformed; the lone-op check reports it.
        return Observed::Answer(Ok(StoreReply::Run(None)));
    };
    match StoreReply::from_wire(name, ok.clone()) {
        Ok(r) => Observed::Answer(Ok(r)),
        Err(e) => Observed::Malformed(format!("`ok` is not a {name} result: {e}")),
    }
}

/// Does `observed` (the wire answer to `request`) conform to `spec`, the
/// spec's answer? Typed comparison, as in the linearizability check.
pub fn answer_conforms(
    request: &Value,
    spec: &Result<StoreReply, StoreError>,
    observed: &Value,
) -> bool {
    let name = StoreOp::from_wire(request).ok().map(|o| o.name());
    answers_match(spec, &parse_answer(name, observed))
}

/// Does the spec's answer match the observed one?
pub(super) fn answers_match(spec: &Result<StoreReply, StoreError>, observed: &Observed) -> bool {
    match (spec, observed) {
        (_, Observed::Pending) => true,
        (_, Observed::Malformed(_)) => false,
        (Ok(a), Observed::Answer(Ok(b))) => same_reply(a, b),
        (
            Err(StoreError::RunStartRejected(a)),
            Observed::Answer(Err(StoreError::RunStartRejected(b))),
        ) => a == b,
        (Err(a), Observed::Answer(Err(b))) => a.kind() == b.kind(),
        _ => false,
    }
}

/// Are two answers the same? Inputs compare by value: a store may change
/// a number's spelling (`1.50` as `1.5`, `-0` as `0`), not its value
/// (SPEC 4 `[[store.input.numbers-exact]]`); everything else exactly.
fn same_reply(a: &StoreReply, b: &StoreReply) -> bool {
    match (a, b) {
        (StoreReply::Inputs(x), StoreReply::Inputs(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|(x, y)| x.run_id == y.run_id && same_value(&x.input, &y.input))
        }
        (a, b) => a == b,
    }
}

/// Does this observed answer claim that the op wrote nothing? (A matched
/// answer of that shape means the spec wrote nothing either.)
pub(super) fn claims_no_write(observed: &Observed) -> bool {
    match observed {
        Observed::Answer(Err(_)) => true,
        Observed::Answer(Ok(StoreReply::Commit(c))) => c.outcome == CommitOutcome::Replayed,
        Observed::Answer(Ok(StoreReply::Deleted(d))) => !d.deleted,
        // setRunStatus answers a Run too, but it writes: only reads of
        // those shapes are free, and a read is known by its op.
        Observed::Answer(Ok(StoreReply::Run(_))) => false,
        Observed::Answer(Ok(StoreReply::Runs(_) | StoreReply::Inputs(_))) => true,
        Observed::Malformed(_) | Observed::Pending => false,
    }
}

/// Can dropping this op from a failing history only keep it failing? Yes
/// for reads and for answers that claim no write: in any linearization of
/// the whole history the op left the spec state as it was.
pub(super) fn writes_nothing(p: &Prepared) -> bool {
    p.op.as_ref().is_some_and(is_read) || claims_no_write(&p.observed)
}

pub(super) fn is_read(op: &StoreOp) -> bool {
    !matches!(
        op,
        StoreOp::CommitRunStart(_) | StoreOp::SetRunStatus(_) | StoreOp::DeleteSession(_)
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use reqkey_model::seq::SeqStore;

    /// The spec's listInputs answer after one commit of `input` (JSON text).
    fn spec_inputs(input: &str) -> (Value, Result<StoreReply, StoreError>) {
        let mut spec = SeqStore::new();
        let commit: Value = serde_json::from_str(&format!(
            r#"{{"op":"commitRunStart","args":{{"startRun":{{"sessionId":"s","runId":"r","expectedCurrentRunId":null,"input":{input}}}}}}}"#
        ))
        .unwrap();
        spec.apply(&StoreOp::from_wire(&commit).unwrap()).unwrap();
        let read: Value =
            serde_json::from_str(r#"{"op":"listInputs","args":{"sessionId":"s"}}"#).unwrap();
        let answer = spec.apply(&StoreOp::from_wire(&read).unwrap());
        (read, answer)
    }

    fn conforms(sent: &str, read_back: &str) -> bool {
        let (request, spec) = spec_inputs(sent);
        let observed: Value = serde_json::from_str(&format!(
            r#"{{"ok":[{{"runId":"r","input":{read_back}}}]}}"#
        ))
        .unwrap();
        answer_conforms(&request, &spec, &observed)
    }

    /// SPEC 4 `[[store.input.numbers-exact]]`: a number's spelling may
    /// change, not its value; a string not at all.
    #[test]
    fn inputs_compare_by_value_not_by_spelling() {
        assert!(conforms(r#"{"n":1.50,"z":-0}"#, r#"{"z":0,"n":1.5}"#));
        assert!(conforms(r#"{"big":1e400}"#, r#"{"big":10e399}"#));
        assert!(!conforms(
            r#"{"big":18446744073709551616}"#,
            r#"{"big":18446744073709552000}"#
        ));
        assert!(!conforms(r#"{"big":1e400}"#, r#"{"big":null}"#));
        assert!(!conforms(r#"{"t":"crab 🦀"}"#, r#"{"t":"crab ?"}"#));
        assert!(!conforms(r#"{"t":"a"}"#, r#"{"t":"a","extra":1}"#));
    }
}
