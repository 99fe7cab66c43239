//! A step, typed: its one action (`Action`) and its modifiers, and the
//! lists of keys a step may carry.

use std::collections::BTreeMap;

use serde::de::{self};
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use crate::clause::ClauseRef;
use crate::{agent_step, fault, link};

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
    /// A fault on the database link the harness owns (`--db`).
    Link(link::LinkStep),
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
            Action::Link(l) => l.label(),
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
    /// The clauses this rule judges; absent: the step's `judges:`.
    #[serde(default)]
    pub judges: Option<Vec<ClauseRef>>,
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
    /// `judges:` the clauses of spec/SPEC.md this step's checks judge
    /// (`expect`, `expect_raw`, `expect_not_echoed`, `bind`, `wait_run`,
    /// `expect_one_of`, `expect_group`, `linearizable`,
    /// `mixed_histories`). An item of a `parallel` group without its own
    /// judges its group's; a group rule without its own, its step's. A
    /// failed check fails these clauses and no other.
    pub judges: Vec<ClauseRef>,
    /// `always: true`: the step runs even after an earlier check of its
    /// trial failed (an observation: the effect counter, a read). Without
    /// it, the steps after a failed check are skipped, and the clauses
    /// only they judge are not judged.
    pub always: bool,
}

impl Step {
    /// Does this step check anything of what it is answered (its own
    /// expectations, or a group's rules and items)? Such a step names the
    /// clauses it judges.
    pub fn checks_something(&self) -> bool {
        self.checks_own_answer()
            || match &self.action {
                Action::Parallel(items) => {
                    self.linearizable
                        || !self.expect_group.is_empty()
                        || items.iter().any(Step::checks_own_answer)
                }
                Action::ExpectOneOf(_) | Action::MixedHistories { .. } => true,
                _ => false,
            }
    }

    /// Does this step (or item) judge its own answer (`expect`,
    /// `expect_raw`, `expect_not_echoed`, `bind`, `wait_run`)?
    pub fn checks_own_answer(&self) -> bool {
        self.expect.is_some()
            || self.expect_raw.is_some()
            || !self.expect_not_echoed.is_empty()
            || !self.bind.is_empty()
            || matches!(self.action, Action::WaitRun(_))
    }

    /// The variable names the step uses (its request, its expectations,
    /// its items' and rules'; `crate::vars::names_in`).
    pub fn names_used(&self) -> std::collections::BTreeSet<String> {
        use crate::vars::names_in;
        let mut out = std::collections::BTreeSet::new();
        match &self.action {
            Action::Store { args, .. } => names_in(args, &mut out),
            Action::Rpc(v) => names_in(v, &mut out),
            Action::Raw(text) => names_in(&Value::String(text.clone()), &mut out),
            Action::Http(h) => names_in(&h.source, &mut out),
            Action::WaitRun(w) => names_in(&w.source, &mut out),
            Action::Parallel(items) => {
                for item in items {
                    out.extend(item.names_used());
                }
            }
            Action::ExpectOneOf(alternatives) => {
                for a in alternatives {
                    a.values().for_each(|v| names_in(v, &mut out));
                }
            }
            Action::SleepMs(_)
            | Action::Fault(_)
            | Action::Link(_)
            | Action::MixedHistories { .. } => {}
        }
        if let Some(e) = &self.expect {
            names_in(e, &mut out);
        }
        if let Some(text) = &self.expect_raw {
            names_in(&Value::String(text.clone()), &mut out);
        }
        self.expect_not_echoed
            .iter()
            .for_each(|v| names_in(v, &mut out));
        for rule in &self.expect_group {
            names_in(&rule.pattern, &mut out);
        }
        out
    }

    /// The names this step binds (`bind:`, its rules' `bind:`).
    pub fn names_bound(&self) -> impl Iterator<Item = &String> {
        self.bind
            .keys()
            .chain(self.expect_group.iter().flat_map(|r| r.bind.keys()))
    }

    /// The clauses a group rule judges: its own, or its step's.
    pub fn rule_judges<'a>(&'a self, rule: &'a GroupRule) -> &'a [ClauseRef] {
        rule.judges.as_deref().unwrap_or(&self.judges)
    }

    /// The clauses an item of this group judges: its own, or the group's.
    pub fn item_judges<'a>(&'a self, item: &'a Step) -> &'a [ClauseRef] {
        if item.judges.is_empty() {
            &self.judges
        } else {
            &item.judges
        }
    }

    /// Every clause this step's checks judge (its own, its items', its
    /// rules'), each once, in first-named order.
    pub fn all_judges(&self) -> Vec<&ClauseRef> {
        let mut lists: Vec<&[ClauseRef]> = vec![&self.judges];
        if let Action::Parallel(items) = &self.action {
            lists.extend(items.iter().map(|i| i.judges.as_slice()));
            lists.extend(self.expect_group.iter().filter_map(|r| r.judges.as_deref()));
        }
        let mut all: Vec<&ClauseRef> = Vec::new();
        for c in lists.into_iter().flatten() {
            if !all.contains(&c) {
                all.push(c);
            }
        }
        all
    }

    /// Does this step say what its answer must be (or that it need not)?
    /// `as` counts: a named answer is judged by a later `expect_one_of`
    /// (the loader checks that one names it).
    pub(crate) fn has_expectation(&self) -> bool {
        self.expect.is_some()
            || self.expect_any
            || self.expect_raw.is_some()
            || !self.expect_not_echoed.is_empty()
            || self.name.is_some()
            || matches!(
                self.action,
                Action::WaitRun(_) | Action::Fault(_) | Action::Link(_)
            )
    }
}

/// Store operations a step may name directly.
pub const STORE_ACTIONS: [&str; 8] = reqkey_model::seq::STORE_OPS;

/// Actions besides the store operations (the schema reads this too).
pub const OTHER_ACTIONS: [&str; 10] = [
    "fault",
    "link",
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
pub const MODIFIERS: [&str; 11] = [
    "as",
    "judges",
    "always",
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
