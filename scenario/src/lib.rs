//! Scenarios: loading and validating the YAML corpus.
//!
//! The format is documented in `docs/scenario-format.md`. A step is a map
//! with exactly one action key plus modifiers; it is read by a hand-written
//! map visitor rather than a derived enum so that every mistake — an unknown
//! key, two actions, none — is a serde error raised while the YAML parser
//! still knows where it is, and so reaches the user as `file:line:col`.

pub mod agent_step;
pub mod fault;
pub mod idem;
pub mod limits;
pub mod locate;
pub mod pattern;
pub mod raw;
pub mod schema;
pub mod spelling;
pub mod vars;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use crate::limits::{
    check_depth, end_position, position_at, second_document, MAX_DEPTH, MAX_SCENARIO_BYTES,
};
use crate::locate::{locate, Seg};
use reqkey_model::vocab::{ConcurrentEntry, Level, Profile};

/// Store operations a step may name directly.
pub const STORE_ACTIONS: [&str; 8] = reqkey_model::seq::STORE_OPS;

/// Upper bounds that keep a scenario's cost bounded.
pub const MAX_REPEAT: u32 = 10_000;
pub const MAX_COPIES: u32 = 256;
pub const MAX_SLEEP_MS: u64 = 10_000;
/// Bounds of a `mixed_histories` step.
pub const MAX_MIXED_PROGRAMS: u32 = 10_000;
pub const MAX_MIXED_IN_FLIGHT: u32 = 64;

/// The value of a `mixed_histories` step.
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MixedHistoriesSpec {
    /// How many random programs to run (1 to 10 000).
    pub programs: u32,
    /// How many run at once, each on sessions of its own (1 to 64).
    #[serde(default = "default_in_flight")]
    pub in_flight: u32,
}

fn default_in_flight() -> u32 {
    8
}

/// A reqkey scenario: one file under scenarios/store or scenarios/agent (docs/scenario-format.md).
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "reqkey scenario")]
pub struct Scenario {
    /// Unique, dotted; reports and --expected-failures use it.
    #[schemars(regex(pattern = r"^[A-Za-z0-9._-]+$"))]
    pub id: String,
    pub level: Level,
    /// Free labels; `reqkey run --tag X` filters on them.
    #[serde(default)]
    pub tags: Vec<String>,
    /// The clauses of spec/SPEC.md this scenario checks (`[[...]]` ids,
    /// each certified at the scenario's level); `reqkey coverage` reads them.
    #[serde(default)]
    pub checks: Vec<ClauseRef>,
    /// One line saying what the scenario proves.
    #[schemars(length(min = 1))]
    pub summary: String,
    /// The profile an agent server must have for this scenario to apply
    /// (SPEC 8); absent: it applies to every profile. Store scenarios take
    /// none (a store's profile is fixed).
    #[serde(default)]
    pub requires: Requires,
    /// Trials; each gets fresh variables.
    #[serde(default = "one")]
    #[schemars(range(min = 1, max = 10_000))]
    pub repeat: u32,
    /// The steps, run in order.
    #[schemars(length(min = 1))]
    pub steps: Vec<Step>,
    /// Where it was loaded from (set by the loader).
    #[serde(skip)]
    pub file: PathBuf,
}

fn one() -> u32 {
    1
}

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

/// What a scenario needs of an agent server's profile; an absent field
/// admits either value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Requires {
    /// `true`: the server records keys; `false`: it ignores them.
    pub supports_request_key: Option<bool>,
    /// The server's `concurrentEntry`.
    pub concurrent_entry: Option<ConcurrentEntry>,
    /// The least `entryWaitMs` the server must declare (SPEC 7): the
    /// scenario's admissions are shorter than this.
    pub entry_wait_ms: Option<u64>,
    /// `true`: the scenario has `fault` steps; it applies only to a target
    /// the harness started (`--start`).
    pub faults: Option<bool>,
    /// The least number of processes the harness must have started (a
    /// fault scenario that needs a live replica beside a dead one).
    pub replicas: Option<u32>,
    /// `true`: the target must declare `durable: true` in `/health` (its
    /// state survives a restart of its process).
    pub durable: Option<bool>,
    /// The most `leaseMs` the server may declare (SPEC 5): the scenario
    /// waits longer than this for a lease to run out.
    pub lease_ms: Option<u64>,
    /// An idem scenario's needs of the declared `Idempotency-Key`
    /// profile (SPEC 10; `idem.rs`).
    pub idem: Option<idem::IdemRequires>,
}

impl Requires {
    /// Does it require anything at all?
    pub fn is_empty(&self) -> bool {
        self.supports_request_key.is_none()
            && self.concurrent_entry.is_none()
            && self.entry_wait_ms.is_none()
            && self.faults.is_none()
            && self.replicas.is_none()
            && self.durable.is_none()
            && self.lease_ms.is_none()
            && self.idem.is_none()
    }

    /// What a run without the right [`fault::FaultSupport`] lacks, or
    /// `None` when the scenario applies.
    pub fn unmet_faults(&self, support: &fault::FaultSupport) -> Option<String> {
        let needs_start = self.faults == Some(true)
            || self.replicas.is_some()
            || self.durable.is_some()
            || self.lease_ms.is_some();
        if needs_start && !support.started {
            return Some(
                "faults: the harness did not start the target (`--start CMD` lets it kill, pause and restart it)".into(),
            );
        }
        let mut unmet = Vec::new();
        if let Some(least) = self.replicas {
            if support.processes < least as usize {
                unmet.push(format!("replicas: at least {least} started processes"));
            }
        }
        if let Some(want) = self.durable {
            if support.durable != Some(want) {
                unmet.push(format!("durable: {want} declared in /health"));
            }
        }
        if let Some(most) = self.lease_ms {
            if support.lease_ms.is_none_or(|ms| ms > most) {
                unmet.push(format!("leaseMs: at most {most} declared in /health"));
            }
        }
        (!unmet.is_empty()).then(|| unmet.join(", "))
    }

    /// What `profile` lacks, as the requirement it fails
    /// (`supportsRequestKey: true`), or `None` when the scenario applies.
    pub fn unmet(&self, profile: &Profile) -> Option<String> {
        let mut unmet = Vec::new();
        if let Some(want) = self.supports_request_key {
            if want != profile.supports_request_key {
                unmet.push(format!("supportsRequestKey: {want}"));
            }
        }
        if let Some(want) = self.concurrent_entry {
            if want != profile.concurrent_entry {
                unmet.push(format!("concurrentEntry: {}", want.name()));
            }
        }
        if let Some(least) = self.entry_wait_ms {
            if profile.entry_wait_ms < least {
                unmet.push(format!("entryWaitMs: at least {least}"));
            }
        }
        (!unmet.is_empty()).then(|| unmet.join(", "))
    }
}

/// A clause id of spec/SPEC.md, checked against the embedded spec while the
/// YAML parser stands on it (so an unknown id is reported at its
/// `file:line:col`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClauseRef(pub String);

impl<'de> Deserialize<'de> for ClauseRef {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_str(ClauseVisitor)
    }
}

struct ClauseVisitor;

impl Visitor<'_> for ClauseVisitor {
    type Value = ClauseRef;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a clause id of spec/SPEC.md")
    }

    fn visit_str<E: de::Error>(self, id: &str) -> Result<ClauseRef, E> {
        let clauses = reqkey_model::clauses::clauses()
            .map_err(|e| E::custom(format!("the embedded spec's clauses: {e}")))?;
        if clauses.iter().any(|c| c.id == id) {
            Ok(ClauseRef(id.to_owned()))
        } else {
            Err(E::custom(format!(
                "`{id}` is not a clause id of spec/SPEC.md (`reqkey coverage --list` prints them)"
            )))
        }
    }
}

/// What a step does.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// A `reqkey-store/1` operation; `args` is the op's args template.
    Store { op: String, args: Value },
    /// A raw `{op, args}` request, sent verbatim (malformed-request cases).
    Rpc(Value),
    /// A store request as text, sent byte for byte (`scenario::raw`).
    Raw(String),
    /// Steps started together behind a barrier.
    Parallel(Vec<Step>),
    /// Alternatives over named answers.
    ExpectOneOf(Vec<BTreeMap<String, Value>>),
    /// A pause.
    SleepMs(u64),
    /// A fault the harness does to a process it started.
    Fault(fault::FaultStep),
    /// An HTTP exchange with an agent server, typed at load.
    Http(agent_step::HttpStep),
    /// Wait until a run of an agent server reaches a status, typed at load.
    WaitRun(agent_step::WaitRunStep),
    /// Random concurrent programs over every store operation, each
    /// history checked for linearizability (`crate::check::mixed`).
    MixedHistories { programs: u32, in_flight: u32 },
}

impl Action {
    pub fn label(&self) -> String {
        match self {
            Action::Store { op, .. } => op.clone(),
            Action::Rpc(v) => format!("rpc {}", v.get("op").and_then(Value::as_str).unwrap_or("?")),
            Action::Raw(_) => "raw".into(),
            Action::Parallel(items) => format!("parallel ({} items)", items.len()),
            Action::ExpectOneOf(_) => "expect_one_of".into(),
            Action::SleepMs(ms) => format!("sleep_ms {ms}"),
            Action::Fault(f) => f.label(),
            Action::Http(step) => step.label(),
            Action::WaitRun(_) => "wait_run".into(),
            Action::MixedHistories { programs, .. } => {
                format!("mixed_histories ({programs} programs)")
            }
        }
    }
}

/// One rule of an `expect_group`.
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GroupRule {
    pub count: GroupCount,
    /// The pattern each consumed answer matches.
    #[serde(rename = "match")]
    pub pattern: Value,
    /// Binds variables from the first answer the rule consumed.
    #[serde(default)]
    pub bind: BTreeMap<String, String>,
}

/// How many answers a group rule consumes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupCount {
    Exactly(u32),
    Rest,
}

impl<'de> Deserialize<'de> for GroupCount {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Value::deserialize(d)? {
            Value::Number(n) => n
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .map(GroupCount::Exactly)
                .ok_or_else(|| de::Error::custom("count must be a whole number or `rest`")),
            Value::String(s) if s == "rest" => Ok(GroupCount::Rest),
            _ => Err(de::Error::custom("count must be a whole number or `rest`")),
        }
    }
}

/// One step.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub action: Action,
    /// `as`: the name of this step's answer.
    pub name: Option<String>,
    /// Inside `parallel`: expand into this many items, `${i}` = 0..N-1.
    pub copies: Option<u32>,
    pub expect: Option<Value>,
    pub bind: BTreeMap<String, String>,
    /// On `parallel`: check the recorded history for linearizability.
    pub linearizable: bool,
    /// On `parallel`: rules over all the group's answers.
    pub expect_group: Vec<GroupRule>,
    /// Values that must appear nowhere in the answer's body or headers.
    pub expect_not_echoed: Vec<Value>,
    /// `expect: any`: the step's answer is deliberately not checked (a
    /// setup step). Without it, an operation with no expectation is a load
    /// error, so that a scenario cannot pass by checking nothing.
    pub expect_any: bool,
    /// `expect_raw: TEXT`: the answer (a store step's wire answer, an
    /// `http` step's body) must be exactly this JSON: the same keys (an
    /// absent key is not a `null` one), key order irrelevant, numbers
    /// compared by value.
    pub expect_raw: Option<String>,
    /// `may_be_cut: true`: the exchange may end with its connection closed
    /// or refused, because a `fault` killed or restarted the process
    /// answering it; that end is then accepted (nothing was answered to
    /// judge). An answer that arrives whole is judged as usual.
    pub may_be_cut: bool,
}

impl Step {
    /// Does this step say what its answer must be (or that it need not)?
    /// `as` counts: a named answer is judged by a later `expect_one_of`
    /// (the loader checks that one names it).
    fn has_expectation(&self) -> bool {
        self.expect.is_some()
            || self.expect_any
            || self.expect_raw.is_some()
            || !self.expect_not_echoed.is_empty()
            || self.name.is_some()
            || matches!(self.action, Action::WaitRun(_) | Action::Fault(_))
    }
}

/// Actions besides the store operations (the schema reads this too).
pub const OTHER_ACTIONS: [&str; 9] = [
    "fault",
    "rpc",
    "raw",
    "parallel",
    "expect_one_of",
    "sleep_ms",
    "http",
    "wait_run",
    "mixed_histories",
];

/// Modifiers: the keys a step may carry besides its one action.
pub const MODIFIERS: [&str; 9] = [
    "as",
    "may_be_cut",
    "copies",
    "expect",
    "expect_raw",
    "bind",
    "linearizable",
    "expect_group",
    "expect_not_echoed",
];

/// Every key a step may have: actions and modifiers (the schema is built from this).
pub fn all_step_keys() -> &'static [&'static str] {
    static KEYS: std::sync::LazyLock<Vec<&'static str>> = std::sync::LazyLock::new(|| {
        STORE_ACTIONS
            .iter()
            .chain(&OTHER_ACTIONS)
            .chain(&MODIFIERS)
            .copied()
            .collect()
    });
    &KEYS
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
                "fault" => {
                    let spec: Value = map.next_value()?;
                    Some(Action::Fault(
                        crate::fault::FaultStep::parse(&spec).map_err(de::Error::custom)?,
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

/// Why a scenario could not be loaded. Exit code 2. Every error about a
/// file's content carries the position it is about.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}:{line}:{column}: {message}")]
    Syntax {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{path}:{line}:{column}: {message}")]
    Invalid {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{0}: no scenario files (*.yaml) found")]
    Empty(PathBuf),
}

fn syntax(path: &Path, (line, column): (usize, usize), message: String) -> LoadError {
    LoadError::Syntax {
        path: path.to_owned(),
        line,
        column,
        message,
    }
}

/// A check on the loaded scenario failed: the error points at the node
/// `at` names (the document's start if the parser cannot place it).
fn invalid(path: &Path, text: &str, at: &[Seg], message: String) -> LoadError {
    let (line, column) = locate(text, at).unwrap_or((1, 1));
    LoadError::Invalid {
        path: path.to_owned(),
        line,
        column,
        message,
    }
}

/// Parses one scenario from text; `path` only names it in errors.
///
/// Bounded before the parser runs: a text over [`MAX_SCENARIO_BYTES`] or
/// nesting deeper than [`MAX_DEPTH`] is refused after one linear scan,
/// with the position where it crossed the limit.
pub fn parse_scenario(path: &Path, text: &str) -> Result<Scenario, LoadError> {
    if text.len() > MAX_SCENARIO_BYTES {
        return Err(syntax(
            path,
            position_at(text, MAX_SCENARIO_BYTES),
            format!("a scenario file is at most {MAX_SCENARIO_BYTES} bytes; this one goes on"),
        ));
    }
    check_depth(text, MAX_DEPTH).map_err(|e| {
        syntax(
            path,
            (e.line, e.column),
            format!("nested deeper than {MAX_DEPTH} levels (the limit of a scenario)"),
        )
    })?;
    let mut scenario: Scenario = serde_yaml::from_str(text).map_err(|e| {
        let message = e.to_string();
        let at = match e.location() {
            Some(l) => (l.line(), l.column()),
            // The one error serde_yaml does not place: a second document.
            None => second_document(text).unwrap_or_else(|| end_position(text)),
        };
        // serde_yaml appends " at line L column C"; the prefix says it already.
        let message = match message.rfind(" at line ") {
            Some(cut) if e.location().is_some() => message[..cut].to_owned(),
            _ => message,
        };
        syntax(path, at, message)
    })?;
    scenario.file = path.to_owned();
    if let Some(written) = spelling::Written::parse(text) {
        if let Some(steps) = written.root().get("steps") {
            restore_numbers(steps, &mut scenario.steps).map_err(|e| LoadError::Invalid {
                path: path.to_owned(),
                line: e.line,
                column: e.column,
                message: e.message,
            })?;
        }
    }
    validate(&scenario).map_err(|(at, message)| invalid(path, text, &at, message))?;
    Ok(scenario)
}

/// Puts the numbers of the bodies the steps send (store args, `rpc`,
/// `http.json`) back as the file spells them (see [`spelling`]).
fn restore_numbers(
    nodes: spelling::At<'_>,
    steps: &mut [Step],
) -> Result<(), spelling::SpellingError> {
    for (node, step) in nodes.items().into_iter().zip(steps.iter_mut()) {
        match &mut step.action {
            Action::Store { op, args } => {
                if let Some(n) = node.get(op) {
                    n.restore(args)?;
                }
            }
            Action::Rpc(value) => {
                if let Some(n) = node.get("rpc") {
                    n.restore(value)?;
                }
            }
            Action::Http(step) => {
                let body = node.get("http").and_then(|h| h.get("json"));
                if let Some(n) = body {
                    if let Some(agent_step::BodyTemplate::Json(v)) = &mut step.body {
                        n.restore(v)?;
                    }
                    if let Some(v) = step.source.get_mut("json") {
                        n.restore(v)?;
                    }
                }
            }
            Action::Parallel(items) => {
                if let Some(n) = node.get("parallel") {
                    restore_numbers(n, items)?;
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// A failed check: where (a path into the document) and why.
type Invalid = (Vec<Seg>, String);

fn validate(s: &Scenario) -> Result<(), Invalid> {
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
            "a store scenario requires only faults, replicas or durable: a store's profile is fixed (every store records keys)"
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

/// Reads a scenario file's bytes, never more than [`MAX_SCENARIO_BYTES`]
/// (plus one, to know it goes on): a larger file is a load error at the
/// position where it crosses the limit, and is never held whole.
pub fn read_bounded(path: &Path) -> Result<Vec<u8>, LoadError> {
    use std::io::Read;
    let io = |source| LoadError::Io {
        path: path.to_owned(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let mut bytes = Vec::new();
    file.take(MAX_SCENARIO_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() > MAX_SCENARIO_BYTES {
        let text = String::from_utf8_lossy(&bytes[..MAX_SCENARIO_BYTES]);
        return Err(syntax(
            path,
            end_position(&text),
            format!("a scenario file is at most {MAX_SCENARIO_BYTES} bytes; this one goes on"),
        ));
    }
    Ok(bytes)
}

/// Reads a scenario file ([`read_bounded`]); bytes that are not UTF-8 are
/// a load error at their position.
pub fn read_scenario_file(path: &Path) -> Result<String, LoadError> {
    String::from_utf8(read_bounded(path)?).map_err(|e| {
        let valid = e.utf8_error().valid_up_to();
        let text = String::from_utf8_lossy(&e.as_bytes()[..valid]);
        syntax(
            path,
            end_position(&text),
            "the file is not UTF-8 from here".into(),
        )
    })
}

/// Loads scenarios from files and directories (recursively, `*.yaml` and
/// `*.yml`, in path order). Ids must be unique across everything loaded.
pub fn load_paths(paths: &[PathBuf]) -> Result<Vec<Scenario>, LoadError> {
    let files = scenario_files(paths)?;
    let mut texts = Vec::with_capacity(files.len());
    for file in files {
        let text = read_scenario_file(&file)?;
        texts.push((file, text));
    }
    parse_all(&texts)
}

/// Parses scenario texts, each named by its path; ids must be unique.
pub fn parse_all<P: AsRef<Path>, T: AsRef<str>>(
    texts: &[(P, T)],
) -> Result<Vec<Scenario>, LoadError> {
    let mut scenarios = Vec::with_capacity(texts.len());
    let mut seen: BTreeMap<String, PathBuf> = BTreeMap::new();
    for (file, text) in texts {
        let (file, text) = (file.as_ref(), text.as_ref());
        let scenario = parse_scenario(file, text)?;
        if let Some(first) = seen.insert(scenario.id.clone(), file.to_owned()) {
            let message = format!(
                "id `{}` is already used by {}",
                scenario.id,
                first.display()
            );
            return Err(invalid(file, text, &[Seg::Key("id")], message));
        }
        scenarios.push(scenario);
    }
    Ok(scenarios)
}

/// The scenario files `load_paths` would load, in the order it loads them.
pub fn scenario_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, LoadError> {
    let mut files = Vec::new();
    for path in paths {
        let before = files.len();
        collect(path, &mut files)?;
        if files.len() == before {
            return Err(LoadError::Empty(path.clone()));
        }
    }
    Ok(files)
}

fn collect(path: &Path, out: &mut Vec<PathBuf>) -> Result<(), LoadError> {
    let meta = std::fs::metadata(path).map_err(|source| LoadError::Io {
        path: path.to_owned(),
        source,
    })?;
    if meta.is_file() {
        out.push(path.to_owned());
        return Ok(());
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(|source| LoadError::Io {
            path: path.to_owned(),
            source,
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for entry in entries {
        if entry.is_dir() {
            collect(&entry, out)?;
        } else if matches!(
            entry.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml")
        ) {
            out.push(entry);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn err(text: &str) -> String {
        parse_scenario(Path::new("x.yaml"), text)
            .unwrap_err()
            .to_string()
    }

    const HEAD: &str = "id: t\nlevel: store\nsummary: s\nsteps:\n";

    #[test]
    fn an_unknown_step_kind_names_file_line_and_column() {
        let e = err(&format!(
            "{HEAD}  - getRun: {{sessionId: $s, runId: r}}\n    expect: any\n  - frobnicate: {{}}\n"
        ));
        assert!(
            e.starts_with("x.yaml:7:5: steps[1]: unknown field `frobnicate`"),
            "{e}"
        );
    }

    #[test]
    fn two_actions_in_one_step_are_refused() {
        let e = err(&format!(
            "{HEAD}  - getRun: {{sessionId: s, runId: r}}\n    listRuns: {{sessionId: s}}\n"
        ));
        assert!(e.contains("exactly one action"), "{e}");
        assert!(e.starts_with("x.yaml:"), "{e}");
    }

    #[test]
    fn an_unknown_clause_names_file_line_and_column() {
        let e = err("id: t\nlevel: store\nchecks: [store.commit.key-holder, store.nope]\nsummary: s\nsteps: []\n");
        assert!(e.starts_with("x.yaml:3:"), "{e}");
        assert!(e.contains("`store.nope` is not a clause id"), "{e}");
    }

    #[test]
    fn a_clause_of_another_level_or_listed_twice_is_refused() {
        let e = err(
            "id: t\nlevel: store\nchecks: [agent.route.start]\nsummary: s\nsteps:\n  - getRun: {sessionId: s, runId: r}\n    expect: any\n",
        );
        assert!(e.contains("not certified at the store level"), "{e}");
        let e = err(
            "id: t\nlevel: store\nchecks: [store.commit.cas, store.commit.cas]\nsummary: s\nsteps:\n  - getRun: {sessionId: s, runId: r}\n    expect: any\n",
        );
        assert!(e.contains("listed twice"), "{e}");
        let ok = parse_scenario(
            Path::new("x.yaml"),
            "id: t\nlevel: store\nchecks: [store.commit.cas]\nsummary: s\nsteps:\n  - getRun: {sessionId: s, runId: r}\n    expect: any\n",
        )
        .unwrap();
        assert_eq!(ok.checks, vec![ClauseRef("store.commit.cas".into())]);
    }

    #[test]
    fn malformed_yaml_names_the_line() {
        let e = err("id: t\nlevel: store\nsummary: [unclosed\n");
        assert!(e.starts_with("x.yaml:"), "{e}");
    }

    #[test]
    fn unknown_top_level_fields_are_refused() {
        let e = err("id: t\nlevel: store\nsummary: s\nstepz: []\n");
        assert!(e.contains("unknown field `stepz`"), "{e}");
    }

    #[test]
    fn an_unknown_top_level_field_names_file_line_and_column() {
        let e = err("id: t\nlevel: store\nsummary: s\nrepeats: 3\nsteps: []\n");
        assert!(e.starts_with("x.yaml:4:1: unknown field `repeats`"), "{e}");
    }

    #[test]
    fn an_unknown_field_in_an_expect_group_rule_names_file_line_and_column() {
        let e = err(&format!(
            "{HEAD}  - parallel:\n      - getRun: {{sessionId: s, runId: r}}\n    expect_group:\n      - count: 1\n        matches: {{ok: null}}\n"
        ));
        assert!(e.starts_with("x.yaml:9:9:"), "{e}");
        assert!(e.contains("unknown field `matches`"), "{e}");
    }

    #[test]
    fn an_unknown_modifier_inside_a_parallel_item_names_file_line_and_column() {
        let e = err(&format!(
            "{HEAD}  - parallel:\n      - getRun: {{sessionId: s, runId: r}}\n        expext: {{ok: null}}\n"
        ));
        assert!(
            e.starts_with("x.yaml:7:9: steps[0].parallel[0]: unknown field `expext`"),
            "{e}"
        );
    }

    #[test]
    fn a_step_without_an_expectation_is_refused_at_its_line() {
        let e = err(&format!(
            "{HEAD}  - getRun: {{sessionId: s, runId: r}}\n    expect: {{ok: null}}\n  - listRuns: {{sessionId: s}}\n"
        ));
        assert!(e.starts_with("x.yaml:7:"), "{e}");
        assert!(e.contains("has no expectation"), "{e}");
        assert!(e.contains("`expect: any`"), "{e}");
        // A bind alone checks nothing either.
        let e = err(&format!(
            "{HEAD}  - commitRunStart: {{sessionId: s, runId: r, expectedCurrentRunId: null, input: 1}}\n    bind: {{x: ok.run.runId}}\n"
        ));
        assert!(e.contains("has no expectation"), "{e}");
        let e = err(&format!("{AGENT}  - http: {{path: /health}}\n"));
        assert!(e.contains("has no expectation"), "{e}");
    }

    #[test]
    fn expect_any_says_on_purpose_that_nothing_is_checked() {
        let s = parse_scenario(
            Path::new("x.yaml"),
            &format!("{HEAD}  - listRuns: {{sessionId: s}}\n    expect: any\n"),
        )
        .unwrap();
        assert!(s.steps[0].expect_any);
        assert_eq!(s.steps[0].expect, None);
        let e = err(&format!(
            "{HEAD}  - listRuns: {{sessionId: s}}\n    expect: any\n    expect_raw: '{{}}'\n"
        ));
        assert!(e.contains("cannot go with"), "{e}");
    }

    #[test]
    fn a_named_answer_nothing_judges_is_refused() {
        let e = err(&format!(
            "{HEAD}  - listRuns: {{sessionId: s}}\n    as: a\n"
        ));
        assert!(e.contains("the answer `a` has no expectation"), "{e}");
        parse_scenario(
            Path::new("x.yaml"),
            &format!(
                "{HEAD}  - parallel:\n      - copies: 2\n        as: c\n        listRuns: {{sessionId: s}}\n  - expect_one_of: [{{c.0: {{ok: []}}}}]\n"
            ),
        )
        .unwrap();
    }

    #[test]
    fn a_parallel_group_that_judges_nothing_is_refused() {
        let e = err(&format!(
            "{HEAD}  - parallel:\n      - copies: 2\n        listRuns: {{sessionId: s}}\n"
        ));
        assert!(e.contains("parallel[0] has no expectation"), "{e}");
        assert!(e.starts_with("x.yaml:"), "{e}");
        for judged in [
            "    linearizable: true\n",
            "    expect_group: [{count: rest, match: {ok: []}}]\n",
        ] {
            parse_scenario(
                Path::new("x.yaml"),
                &format!(
                    "{HEAD}  - parallel:\n      - copies: 2\n        listRuns: {{sessionId: s}}\n{judged}"
                ),
            )
            .unwrap();
        }
    }

    #[test]
    fn raw_steps_parse_and_their_expectations_must_be_json() {
        let s = parse_scenario(
            Path::new("x.yaml"),
            &format!(
                "{HEAD}  - raw: '{{\"op\":\"listRuns\",\"args\":{{\"sessionId\":\"${{s}}\"}}}}'\n    expect_raw: '{{\"ok\":[]}}'\n"
            ),
        )
        .unwrap();
        assert!(matches!(&s.steps[0].action, Action::Raw(t) if t.contains("${s}")));
        assert_eq!(s.steps[0].expect_raw.as_deref(), Some("{\"ok\":[]}"));
        let e = err(&format!(
            "{HEAD}  - listRuns: {{sessionId: s}}\n    expect_raw: '{{\"ok\": ['\n"
        ));
        assert!(e.contains("expect_raw is not JSON"), "{e}");
        assert!(e.starts_with("x.yaml:"), "{e}");
    }

    #[test]
    fn a_second_document_names_where_it_starts() {
        let e = err(&format!(
            "{HEAD}  - getRun: {{sessionId: s, runId: r}}\n    expect: any\n---\nid: u\n"
        ));
        assert!(
            e.starts_with("x.yaml:7:1: ") && e.contains("more than one document"),
            "{e}"
        );
    }

    #[test]
    fn checks_on_the_loaded_scenario_name_the_node_they_are_about() {
        let e = err(&format!(
            "{HEAD}  - getRun: {{sessionId: s, runId: r}}\n    as: a\n    expect: any\n  - parallel:\n      - getRun: {{sessionId: s, runId: r}}\n        expect: any\n      - getRun: {{sessionId: s, runId: r}}\n        as: a\n        expect: any\n"
        ));
        assert!(
            e.starts_with("x.yaml:11:9: steps[1]: the answer name `a`"),
            "{e}"
        );
        let e = err(
            "id: t\nlevel: store\nsummary: s\nrepeat: 0\nsteps:\n  - getRun: {}\n    expect: any\n",
        );
        assert!(e.starts_with("x.yaml:4:9: repeat must be"), "{e}");
        let e = err("id: t\nlevel: store\nsummary: s\nsteps: []\n");
        assert!(e.starts_with("x.yaml:4:8: a scenario needs"), "{e}");
    }

    #[test]
    fn oversized_or_too_deep_texts_are_refused_before_parsing() {
        let e = err(&format!(
            "{HEAD}  - getRun: {{x: {}}}\n",
            "[".repeat(1_000_000)
        ));
        assert!(
            e.starts_with("x.yaml:5:") && e.contains("nested deeper than 64"),
            "{e}"
        );
        let e = err(&format!(
            "{HEAD}{}",
            "  - getRun: {sessionId: s, runId: r}\n".repeat(40_000)
        ));
        assert!(e.contains("at most 1048576 bytes"), "{e}");
        assert!(!e.starts_with("x.yaml:0:0"), "{e}");
    }

    #[test]
    fn a_file_over_the_limit_is_not_read_whole_and_bad_utf8_has_a_position() {
        let dir = std::env::temp_dir().join(format!("reqkey-load-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let big = dir.join("big.yaml");
        let file = std::fs::File::create(&big).unwrap();
        // Sparse: 2 GiB on paper, nothing on disk.
        file.set_len(2 << 30).unwrap();
        let e = read_scenario_file(&big).unwrap_err().to_string();
        assert!(e.contains("at most 1048576 bytes"), "{e}");
        let bad = dir.join("bad.yaml");
        std::fs::write(&bad, b"id: t\nsummary: \xff\n").unwrap();
        let e = read_scenario_file(&bad).unwrap_err().to_string();
        assert!(
            e.ends_with("bad.yaml:2:10: the file is not UTF-8 from here"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn expect_one_of_must_name_earlier_answers() {
        let e = err(&format!("{HEAD}  - expect_one_of: [{{a: {{ok: null}}}}]\n"));
        assert!(e.contains("no earlier step answers as"), "{e}");
    }

    #[test]
    fn requires_parses_and_says_what_a_profile_lacks() {
        let s = parse_scenario(
            Path::new("x.yaml"),
            "id: t\nlevel: agent\nsummary: s\nrequires: {supportsRequestKey: true, concurrentEntry: interrupt_previous}\nsteps:\n  - sleep_ms: 1\n",
        )
        .unwrap();
        let ignored = Profile {
            supports_request_key: false,
            ..Profile::default()
        };
        assert_eq!(
            s.requires.unmet(&ignored).as_deref(),
            Some("supportsRequestKey: true, concurrentEntry: interrupt_previous")
        );
        let ip = Profile {
            concurrent_entry: ConcurrentEntry::InterruptPrevious,
            ..Profile::default()
        };
        assert_eq!(s.requires.unmet(&ip), None);
        let waits = parse_scenario(
            Path::new("x.yaml"),
            "id: t\nlevel: agent\nsummary: s\nrequires: {entryWaitMs: 1000}\nsteps:\n  - sleep_ms: 1\n",
        )
        .unwrap();
        assert_eq!(
            waits.requires.unmet(&Profile::default()).as_deref(),
            Some("entryWaitMs: at least 1000")
        );
        let declared = Profile {
            entry_wait_ms: 2000,
            ..Profile::default()
        };
        assert_eq!(waits.requires.unmet(&declared), None);
        let e = err("id: t\nlevel: agent\nsummary: s\nrequires: {concurrentEntry: queue}\nsteps:\n  - sleep_ms: 1\n");
        assert!(e.starts_with("x.yaml:4:"), "{e}");
        let e = err("id: t\nlevel: agent\nsummary: s\nrequires: {supportsRequestKeys: true}\nsteps:\n  - sleep_ms: 1\n");
        assert!(e.contains("unknown field"), "{e}");
        let e = err("id: t\nlevel: store\nsummary: s\nrequires: {supportsRequestKey: true}\nsteps:\n  - sleep_ms: 1\n");
        assert!(e.contains("a store's profile is fixed"), "{e}");
    }

    #[test]
    fn a_full_step_parses() {
        let s = parse_scenario(
            Path::new("x.yaml"),
            &format!(
                "{HEAD}  - parallel:\n      - copies: 3\n        as: c\n        getRun: {{sessionId: $s, runId: r}}\n    linearizable: true\n    expect_group:\n      - count: rest\n        match: {{ok: null}}\n"
            ),
        )
        .unwrap();
        let Action::Parallel(items) = &s.steps[0].action else {
            panic!()
        };
        assert_eq!(items[0].copies, Some(3));
        assert!(s.steps[0].linearizable);
        assert_eq!(s.steps[0].expect_group[0].count, GroupCount::Rest);
    }

    const AGENT: &str = "id: t\nlevel: agent\nsummary: s\nsteps:\n";

    #[test]
    fn agent_steps_parse_with_their_modifiers() {
        let s = parse_scenario(
            Path::new("x.yaml"),
            &format!(
                "{AGENT}  - http: {{method: POST, path: \"/sessions/${{s}}/start\", headers: [[K, v], [K, {{hex: ff}}]], json: {{input: 1}}}}\n    expect: {{status: 201}}\n    expect_not_echoed: [v]\n  - wait_run: {{sessionId: $s, runId: $r, status: [completed, failed]}}\n"
            ),
        )
        .unwrap();
        assert!(matches!(s.steps[0].action, Action::Http(_)));
        assert_eq!(s.steps[0].expect_not_echoed, vec![Value::from("v")]);
        assert!(matches!(s.steps[1].action, Action::WaitRun(_)));
    }

    /// The numbers a body carries go on the wire as the file spells them
    /// (issue 15 F8: 2^64 went out as 1.8e19, `1e400` was refused).
    #[test]
    fn body_numbers_keep_their_spelling() {
        const NUMS: &str = "{big: 18446744073709551616, huge: 1e400, dec: 1.50, exp: 2E+3, neg: -0, list: [1.0, 10000000000000000000000001], str: '1.50'}";
        const WIRE: &str = r#"{"big":18446744073709551616,"dec":1.50,"exp":2E+3,"huge":1e400,"list":[1.0,10000000000000000000000001],"neg":-0,"str":"1.50"}"#;
        let text = format!(
            "{AGENT}  - http: {{method: POST, path: /sessions/s/start, json: {{input: {NUMS}}}}}\n    expect: any\n"
        );
        let s = parse_scenario(Path::new("x.yaml"), &text).unwrap();
        let Action::Http(step) = &s.steps[0].action else {
            panic!()
        };
        let request = step.instantiate(&mut |v: &Value| v.clone()).unwrap();
        let body = String::from_utf8(request.body.unwrap()).unwrap();
        assert_eq!(body, format!(r#"{{"input":{WIRE}}}"#));
        // Store args, `rpc` and the steps of a `parallel` group likewise.
        let text = format!(
            "{HEAD}  - commitRunStart: {{sessionId: s, runId: r, expectedCurrentRunId: null, input: {NUMS}}}\n    expect: any\n  - rpc: {{op: getRun, args: {{n: 1.50}}}}\n    expect: any\n  - parallel:\n      - listRuns: {{sessionId: s, n: 1e400}}\n    expect_group:\n      - count: rest\n        match: {{ok: []}}\n"
        );
        let s = parse_scenario(Path::new("x.yaml"), &text).unwrap();
        let Action::Store { args, .. } = &s.steps[0].action else {
            panic!()
        };
        assert_eq!(args["input"].to_string(), WIRE);
        let Action::Rpc(rpc) = &s.steps[1].action else {
            panic!()
        };
        assert_eq!(rpc.to_string(), r#"{"args":{"n":1.50},"op":"getRun"}"#);
        let Action::Parallel(items) = &s.steps[2].action else {
            panic!()
        };
        let Action::Store { args, .. } = &items[0].action else {
            panic!()
        };
        assert_eq!(args.to_string(), r#"{"n":1e400,"sessionId":"s"}"#);
    }

    /// An anchor and its aliases carry the spelling too.
    #[test]
    fn aliased_body_numbers_keep_their_spelling() {
        let text = format!(
            "{HEAD}  - commitRunStart: {{sessionId: s, runId: r, expectedCurrentRunId: null, input: &n {{x: 1.50}}}}\n    expect: any\n  - commitRunStart: {{sessionId: s, runId: r2, expectedCurrentRunId: r, input: *n}}\n    expect: any\n"
        );
        let s = parse_scenario(Path::new("x.yaml"), &text).unwrap();
        for step in &s.steps {
            let Action::Store { args, .. } = &step.action else {
                panic!()
            };
            assert_eq!(args["input"].to_string(), r#"{"x":1.50}"#);
        }
    }

    /// A YAML number JSON cannot spell is refused where it stands.
    #[test]
    fn yaml_only_numbers_in_bodies_are_load_errors() {
        for (n, col) in [("0x1F", 32), ("+1", 32), (".5", 32), (".inf", 32)] {
            let e = err(&format!(
                "{AGENT}  - http: {{path: /x, json: {{n: {n}}}}}\n    expect: any\n"
            ));
            assert!(
                e.starts_with(&format!("x.yaml:5:{col}:")) && e.contains("no JSON spelling"),
                "{n}: {e}"
            );
        }
        // Quoted, it is a string, sent as one.
        let s = parse_scenario(
            Path::new("x.yaml"),
            &format!("{AGENT}  - http: {{path: /x, json: {{n: '0x1F'}}}}\n    expect: any\n"),
        )
        .unwrap();
        let Action::Http(step) = &s.steps[0].action else {
            panic!()
        };
        assert_eq!(step.source["json"].to_string(), r#"{"n":"0x1F"}"#);
    }

    #[test]
    fn malformed_agent_steps_name_file_and_line() {
        let e = err(&format!("{AGENT}  - http: {{path: /x, jsn: {{}}}}\n"));
        assert!(
            e.starts_with("x.yaml:5:") && e.contains("no field `jsn`"),
            "{e}"
        );
        let e = err(&format!(
            "{AGENT}  - wait_run: {{sessionId: s, runId: r}}\n"
        ));
        assert!(e.contains("wait_run.status"), "{e}");
        let e = err(&format!(
            "{AGENT}  - parallel:\n      - http: {{path: /x}}\n    linearizable: true\n"
        ));
        assert!(e.contains("cannot take it"), "{e}");
    }
}
