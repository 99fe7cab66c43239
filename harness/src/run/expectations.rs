//! What a step's answer must be: `expect`, `expect_raw`, `bind` and
//! `expect_one_of`, judged on the answer a trial received.

use serde_json::{json, Value};

use crate::run::event::Failure;
use crate::run::request::Request;
use crate::run::trial::{universal, Stop, Trial};
use reqkey_scenario::pattern::matches;
use reqkey_scenario::vars::lookup;
use reqkey_scenario::{Action, Step};

impl Trial<'_> {
    /// `expect` and `bind` of one answered step; records the named answer.
    pub(super) fn check_answer(
        &mut self,
        path: &str,
        step: &Step,
        sent: &Request,
        answer: Value,
    ) -> Result<(), Stop> {
        let request = &sent.shown();
        universal(self.rules, path, step, sent, request, &answer)?;
        if let Action::WaitRun(wait) = &step.action {
            if answer.get("reached") == Some(&json!(true)) {
                return self.check_expectations(path, step, sent, request, answer);
            }
            return Err(Stop::fail(Failure {
                trial: 0,
                step: path.to_owned(),
                message: format!(
                    "the run did not reach {} in time",
                    Value::from(wait.statuses.clone())
                ),
                expected: None,
                actual: Some(json!({"request": request, "answer": answer})),
                detail: None,
                clauses: Vec::new(),
            }));
        }
        self.check_expectations(path, step, sent, request, answer)
    }

    /// `expect_not_echoed`, `expect`, `expect_raw` and `bind` of one
    /// answered step; records the named answer.
    pub(super) fn check_expectations(
        &mut self,
        path: &str,
        step: &Step,
        sent: &Request,
        request: &Value,
        answer: Value,
    ) -> Result<(), Stop> {
        for needle in &step.expect_not_echoed {
            let needle = self.vars.substitute(needle);
            let Some(needle) = needle.as_str() else {
                continue;
            };
            if let Some(place) = reqkey_check::answer::echoed_in(&answer, needle) {
                return Err(Stop::fail(Failure {
                    trial: 0,
                    step: path.to_owned(),
                    message: format!("a value that must appear nowhere was echoed in {place}"),
                    expected: Some(json!({"notEchoed": needle})),
                    actual: Some(json!({"request": request, "answer": answer})),
                    detail: None,
                    clauses: Vec::new(),
                }));
            }
        }
        if let Some(pattern) = &step.expect {
            let pattern = self.vars.substitute(pattern);
            if let Err(m) = matches(&pattern, &answer) {
                return Err(Stop::fail(Failure {
                    trial: 0,
                    step: path.to_owned(),
                    message: format!("answer does not match: {m}"),
                    expected: Some(pattern),
                    actual: Some(json!({"request": request, "answer": answer})),
                    detail: None,
                    clauses: Vec::new(),
                }));
            }
        }
        if let Some(text) = &step.expect_raw {
            self.check_raw(path, text, sent, request, &answer)?;
        }
        self.bind(path, &step.bind, &answer)?;
        if let Some(name) = &step.name {
            self.answers.insert(name.clone(), answer);
        }
        Ok(())
    }

    /// `expect_raw`: the answer is exactly the JSON of `text` (after
    /// `${var}` interpolation). An `http` step's answer is its body.
    pub(super) fn check_raw(
        &mut self,
        path: &str,
        text: &str,
        sent: &Request,
        request: &Value,
        answer: &Value,
    ) -> Result<(), Stop> {
        let failure = |message: String, expected: Option<Value>| {
            Stop::fail(Failure {
                trial: 0,
                step: path.to_owned(),
                message,
                expected,
                actual: Some(json!({"request": request, "answer": answer})),
                detail: None,
                clauses: Vec::new(),
            })
        };
        let text = match self.vars.substitute(&Value::String(text.to_owned())) {
            Value::String(t) => t,
            other => other.to_string(),
        };
        let expected: Value = serde_json::from_str(&text).map_err(|e| {
            Stop::harness(Failure {
                trial: 0,
                step: path.to_owned(),
                message: format!("expect_raw is not JSON once its variables are filled in: {e}"),
                expected: None,
                actual: None,
                detail: None,
                clauses: Vec::new(),
            })
        })?;
        let actual = if sent.is_http() {
            match answer.get("json") {
                Some(body) => body,
                None => {
                    return Err(failure(
                        "expect_raw: the body is not JSON".into(),
                        Some(expected),
                    ))
                }
            }
        } else {
            answer
        };
        reqkey_scenario::raw::json_equal(&expected, actual).map_err(|m| {
            failure(
                format!("answer is not the expected JSON: {m}"),
                Some(expected),
            )
        })
    }

    pub(super) fn bind(
        &mut self,
        path: &str,
        bind: &std::collections::BTreeMap<String, String>,
        answer: &Value,
    ) -> Result<(), Stop> {
        for (var, at) in bind {
            let value = lookup(answer, at).ok_or_else(|| {
                Stop::fail(Failure {
                    trial: 0,
                    step: path.to_owned(),
                    message: format!("cannot bind ${var}: the answer has nothing at `{at}`"),
                    expected: None,
                    actual: Some(answer.clone()),
                    detail: None,
                    clauses: Vec::new(),
                })
            })?;
            self.vars.bind(var, value.clone());
        }
        Ok(())
    }

    pub(super) fn expect_one_of(
        &mut self,
        path: &str,
        alternatives: &[std::collections::BTreeMap<String, Value>],
    ) -> Result<(), Stop> {
        let mut reasons = Vec::new();
        for (k, alternative) in alternatives.iter().enumerate() {
            let mut failed = None;
            for (name, pattern) in alternative {
                let pattern = self.vars.substitute(pattern);
                let answer = self.answers.get(name).cloned().unwrap_or(Value::Null);
                if let Err(m) = matches(&pattern, &answer) {
                    failed = Some(format!("alternative {k}: {name} {m}"));
                    break;
                }
            }
            match failed {
                None => return Ok(()),
                Some(reason) => reasons.push(reason),
            }
        }
        let names: std::collections::BTreeSet<&String> =
            alternatives.iter().flat_map(|a| a.keys()).collect();
        let actual: serde_json::Map<String, Value> = names
            .into_iter()
            .map(|n| {
                (
                    n.clone(),
                    self.answers.get(n).cloned().unwrap_or(Value::Null),
                )
            })
            .collect();
        Err(Stop::fail(Failure {
            trial: 0,
            step: path.to_owned(),
            message: format!("no alternative matched ({})", reasons.join("; ")),
            expected: Some(serde_json::to_value(alternatives).unwrap_or(Value::Null)),
            actual: Some(Value::Object(actual)),
            detail: None,
            clauses: Vec::new(),
        }))
    }
}
