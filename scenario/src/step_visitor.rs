//! The map visitor that reads a step: every mistake (an unknown key, two
//! actions, none) is a serde error raised while the parser still knows
//! the position, so it reaches the user as `file:line:col`.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use crate::scenario::{
    MixedHistoriesSpec, MAX_COPIES, MAX_MIXED_IN_FLIGHT, MAX_MIXED_PROGRAMS, MAX_SLEEP_MS,
};
use crate::step::{all_step_keys, Action, Step, OTHER_ACTIONS, STORE_ACTIONS};

std::thread_local! {
    /// How many `parallel` groups the step being read is inside: an item
    /// of a group may be judged by its group; a top-level step must judge
    /// its own answer. (The loader reads one file on one thread.)
    static GROUP_DEPTH: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Marks the items of a group being read; unmarks them even on an error.
struct InGroup;

impl InGroup {
    fn enter() -> Self {
        GROUP_DEPTH.with(|d| d.set(d.get() + 1));
        InGroup
    }
}

impl Drop for InGroup {
    fn drop(&mut self) {
        GROUP_DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
    }
}

impl<'de> Deserialize<'de> for Step {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(StepVisitor)
    }
}

struct StepVisitor;

/// A step's key, checked while the parser still stands on it, so an
/// unknown key is reported at its own line and column (not at the step's).
struct StepKey;

impl<'de> de::DeserializeSeed<'de> for StepKey {
    type Value = String;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        // The check runs inside the parser's visit of the key (not after
        // it), which is what lets the error carry the key's position.
        d.deserialize_str(self)
    }
}

impl Visitor<'_> for StepKey {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a step key")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<String, E> {
        if all_step_keys().contains(&key) {
            Ok(key.to_owned())
        } else {
            Err(E::unknown_field(key, all_step_keys()))
        }
    }
}

impl<'de> Visitor<'de> for StepVisitor {
    type Value = Step;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a step: a map with one action (commitRunStart, getRun, ..., parallel)")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Step, A::Error> {
        let mut action: Option<(String, Action)> = None;
        let mut step = Step {
            action: Action::SleepMs(0),
            name: None,
            copies: None,
            expect: None,
            bind: BTreeMap::new(),
            linearizable: false,
            expect_group: Vec::new(),
            expect_not_echoed: Vec::new(),
            expect_any: false,
            expect_raw: None,
            may_be_cut: false,
            judges: Vec::new(),
            always: false,
        };
        while let Some(key) = map.next_key_seed(StepKey)? {
            let new_action = match key.as_str() {
                "as" => {
                    step.name = Some(map.next_value()?);
                    None
                }
                "copies" => {
                    let n: u32 = map.next_value()?;
                    if n == 0 || n > MAX_COPIES {
                        return Err(de::Error::custom(format!(
                            "copies must be 1 to {MAX_COPIES}"
                        )));
                    }
                    step.copies = Some(n);
                    None
                }
                "expect" => {
                    match map.next_value::<Value>()? {
                        Value::String(s) if s == "any" => step.expect_any = true,
                        pattern => step.expect = Some(pattern),
                    }
                    None
                }
                "expect_raw" => {
                    let text: String = map.next_value()?;
                    step.expect_raw = Some(text);
                    None
                }
                "raw" => {
                    let text: String = map.next_value()?;
                    Some(Action::Raw(text))
                }
                "bind" => {
                    step.bind = map.next_value()?;
                    None
                }
                "linearizable" => {
                    step.linearizable = map.next_value()?;
                    None
                }
                "expect_group" => {
                    step.expect_group = map.next_value()?;
                    None
                }
                "expect_not_echoed" => {
                    step.expect_not_echoed = match map.next_value::<Value>()? {
                        Value::Array(items) => items,
                        one => vec![one],
                    };
                    if !step.expect_not_echoed.iter().all(Value::is_string) {
                        return Err(de::Error::custom(
                            "expect_not_echoed takes a string or a list of strings",
                        ));
                    }
                    None
                }
                "may_be_cut" => {
                    step.may_be_cut = map.next_value()?;
                    None
                }
                "judges" => {
                    step.judges = map.next_value()?;
                    None
                }
                "always" => {
                    step.always = map.next_value()?;
                    None
                }
                "fault" => {
                    let spec: Value = map.next_value()?;
                    Some(Action::Fault(
                        crate::fault::FaultStep::parse(&spec).map_err(de::Error::custom)?,
                    ))
                }
                "link" => {
                    let spec: Value = map.next_value()?;
                    Some(Action::Link(
                        crate::link::LinkStep::parse(&spec).map_err(de::Error::custom)?,
                    ))
                }
                "http" => {
                    let spec: Value = map.next_value()?;
                    Some(Action::Http(
                        crate::agent_step::HttpStep::parse(spec).map_err(de::Error::custom)?,
                    ))
                }
                "wait_run" => {
                    let spec: Value = map.next_value()?;
                    Some(Action::WaitRun(
                        crate::agent_step::WaitRunStep::parse(spec).map_err(de::Error::custom)?,
                    ))
                }
                "rpc" => Some(Action::Rpc(map.next_value()?)),
                "parallel" => {
                    let items: Vec<Step> = {
                        let _in_group = InGroup::enter();
                        map.next_value()?
                    };
                    if items.is_empty() {
                        return Err(de::Error::custom("parallel needs at least one step"));
                    }
                    if let Some(bad) = items.iter().find(|s| {
                        matches!(
                            s.action,
                            Action::Parallel(_)
                                | Action::ExpectOneOf(_)
                                | Action::SleepMs(_)
                                | Action::Link(_)
                                | Action::MixedHistories { .. }
                        )
                    }) {
                        return Err(de::Error::custom(format!(
                            "a parallel group holds operations only, not `{}`",
                            bad.action.label()
                        )));
                    }
                    Some(Action::Parallel(items))
                }
                "expect_one_of" => Some(Action::ExpectOneOf(map.next_value()?)),
                "mixed_histories" => {
                    let spec: MixedHistoriesSpec = map.next_value()?;
                    if spec.programs == 0 || spec.programs > MAX_MIXED_PROGRAMS {
                        return Err(de::Error::custom(format!(
                            "mixed_histories.programs must be 1 to {MAX_MIXED_PROGRAMS}"
                        )));
                    }
                    if spec.in_flight == 0 || spec.in_flight > MAX_MIXED_IN_FLIGHT {
                        return Err(de::Error::custom(format!(
                            "mixed_histories.in_flight must be 1 to {MAX_MIXED_IN_FLIGHT}"
                        )));
                    }
                    Some(Action::MixedHistories {
                        programs: spec.programs,
                        in_flight: spec.in_flight,
                    })
                }
                "sleep_ms" => {
                    let ms: u64 = map.next_value()?;
                    if ms > MAX_SLEEP_MS {
                        return Err(de::Error::custom(format!(
                            "sleep_ms is at most {MAX_SLEEP_MS}"
                        )));
                    }
                    Some(Action::SleepMs(ms))
                }
                op if STORE_ACTIONS.contains(&op) => {
                    let args: Value = map.next_value()?;
                    if !args.is_object() {
                        return Err(de::Error::custom(format!(
                            "`{op}` takes a map of arguments"
                        )));
                    }
                    Some(Action::Store {
                        op: op.to_owned(),
                        args,
                    })
                }
                other => return Err(de::Error::unknown_field(other, all_step_keys())),
            };
            if let Some(a) = new_action {
                if let Some((first, _)) = &action {
                    return Err(de::Error::custom(format!(
                        "a step has exactly one action, found `{first}` and `{key}`"
                    )));
                }
                action = Some((key, a));
            }
        }
        let Some((_, action)) = action else {
            return Err(de::Error::custom(format!(
                "a step needs an action: one of {}, {}",
                STORE_ACTIONS.join(", "),
                OTHER_ACTIONS.join(", ")
            )));
        };
        let is_group = matches!(action, Action::Parallel(_));
        if !is_group && (step.linearizable || !step.expect_group.is_empty()) {
            return Err(de::Error::custom(
                "`linearizable` and `expect_group` belong on a parallel step",
            ));
        }
        if let (Action::Parallel(items), true) = (&action, step.linearizable) {
            if items
                .iter()
                .any(|i| matches!(i.action, Action::Http(_) | Action::WaitRun(_)))
            {
                return Err(de::Error::custom(
                    "`linearizable` checks store operations; an agent group cannot take it",
                ));
            }
        }
        if is_group
            && (step.expect.is_some()
                || step.expect_any
                || step.expect_raw.is_some()
                || step.name.is_some()
                || !step.bind.is_empty())
        {
            return Err(de::Error::custom(
                "a parallel step takes expect_group, not expect/as/bind (put those on its items)",
            ));
        }
        let top_level = GROUP_DEPTH.with(|d| d.get()) == 0;
        let is_operation = matches!(
            action,
            Action::Store { .. } | Action::Rpc(_) | Action::Raw(_) | Action::Http(_)
        );
        if top_level && is_operation {
            let mut probe = step.clone();
            probe.action = action.clone();
            if !probe.has_expectation() {
                return Err(de::Error::custom(format!(
                    "the `{}` step has no expectation: add `expect:` (or `expect_raw:`, \
                     `expect_not_echoed:`), or `expect: any` to say it is not checked on purpose",
                    action.label()
                )));
            }
        }
        if let Action::Parallel(items) = &action {
            let judged = step.linearizable || !step.expect_group.is_empty();
            if let Some(k) = items.iter().position(|i| !judged && !i.has_expectation()) {
                return Err(de::Error::custom(format!(
                    "parallel[{k}] has no expectation and the group has neither expect_group \
                     nor linearizable: say what the answers must be (or `expect: any` on purpose)"
                )));
            }
        }
        if step.expect_any && (step.expect_raw.is_some() || !step.expect_not_echoed.is_empty()) {
            return Err(de::Error::custom(
                "`expect: any` says the answer is not checked; it cannot go with expect_raw or expect_not_echoed",
            ));
        }
        if let Some(text) = &step.expect_raw {
            if !matches!(
                action,
                Action::Store { .. } | Action::Rpc(_) | Action::Raw(_) | Action::Http(_)
            ) {
                return Err(de::Error::custom(
                    "`expect_raw` belongs on a store, rpc, raw or http step",
                ));
            }
            crate::raw::check_expectation(text).map_err(de::Error::custom)?;
        }
        if let Action::Raw(text) = &action {
            crate::raw::check_request(text).map_err(de::Error::custom)?;
        }
        if step.may_be_cut
            && !matches!(
                action,
                Action::Store { .. } | Action::Rpc(_) | Action::Raw(_) | Action::Http(_)
            )
        {
            return Err(de::Error::custom(
                "`may_be_cut` belongs on a store, rpc, raw or http step (an exchange a fault may cut)",
            ));
        }
        step.action = action;
        Ok(step)
    }
}
