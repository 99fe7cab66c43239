//! The JSON Schema of the scenario format, generated from the Rust types.
//!
//! Editors (VS Code's YAML extension, JetBrains) validate and complete
//! scenario files against `scenarios/scenario.schema.json`; that file is
//! generated here (`reqkey schema > scenarios/scenario.schema.json`) and a
//! test fails when the checked-in copy is stale, so the schema can never
//! drift from what the loader accepts.
//!
//! `Scenario` and `GroupRule` derive their schemas. `Step` has a
//! hand-written `Deserialize` (one map visitor, so every mistake gets a
//! `file:line:col`), so its schema is hand-written here too, in the same
//! terms: exactly one action key (a `oneOf` of `required` clauses, which
//! fails on zero actions and on two), modifiers beside it, nothing else.
//! Items of a `parallel` group have a schema of their own
//! ([`ParallelItem`]): they take `copies` but not `parallel`,
//! `expect_one_of`, `sleep_ms`, `linearizable` or `expect_group`.

use std::borrow::Cow;

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde_json::{json, Map, Value};

use crate::{
    all_step_keys, ClauseRef, GroupCount, GroupRule, Scenario, Step, MAX_COPIES, MAX_SLEEP_MS,
    OTHER_ACTIONS, STORE_ACTIONS,
};

/// The schema, pretty-printed, as checked in.
pub fn scenario_schema_json() -> String {
    let schema = schemars::generate::SchemaSettings::draft2020_12()
        .into_generator()
        .into_root_schema_for::<Scenario>();
    serde_json::to_string_pretty(&schema).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

impl JsonSchema for ClauseRef {
    fn schema_name() -> Cow<'static, str> {
        "ClauseRef".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        let ids: Vec<&str> = reqkey_model::clauses::clauses()
            .map(|all| all.iter().map(|c| c.id.as_str()).collect())
            .unwrap_or_default();
        json_schema!({
            "description": "A clause id of spec/SPEC.md (the `[[...]]` written after a normative statement).",
            "type": "string",
            "enum": ids
        })
    }
}

impl JsonSchema for GroupCount {
    fn schema_name() -> Cow<'static, str> {
        "GroupCount".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "How many still-unmatched answers the rule consumes: exactly N, or `rest` (all remaining).",
            "oneOf": [
                {"type": "integer", "minimum": 0, "maximum": u32::MAX},
                {"const": "rest"}
            ]
        })
    }
}

/// Schema-only: an item of a `parallel` group.
#[derive(Debug)]
pub struct ParallelItem;

/// The description of each action, shared by steps and parallel items.
fn store_action_properties(props: &mut Map<String, Value>) {
    for op in STORE_ACTIONS {
        let description = if op == "commitRunStart" {
            "The StartRun fields (SPEC 4); the harness wraps them as {\"startRun\": ...}. `$name` and `${name}` are substituted.".to_owned()
        } else {
            format!(
                "A `{op}` call (SPEC 6); the value is the op's args, after variable substitution."
            )
        };
        props.insert(
            op.to_owned(),
            json!({"description": description, "type": "object"}),
        );
    }
    props.insert(
        "rpc".into(),
        json!({
            "description": "A raw reqkey-store/1 request {op, args}, sent verbatim (for malformed-request cases).",
        }),
    );
    props.insert(
        "raw".into(),
        json!({
            "description": "A reqkey-store/1 request as text, sent byte for byte (key order, number spelling); ${name} is interpolated. In process it is parsed as JSON, text that is not JSON answers invalid_argument.",
            "type": "string",
            "minLength": 1
        }),
    );
}

/// The agent-level actions (`http`, `wait_run`) and the `expect_not_echoed`
/// modifier, in the terms `agent_steps` validates them.
fn agent_properties(props: &mut Map<String, Value>) {
    use crate::agent_step::{MAX_BODY_BYTES, MAX_REPLICA_INDEX, MAX_WAIT_MS};
    let header_value = json!({"oneOf": [
        {"type": "string"},
        {"type": "object", "properties": {"hex": {"type": "string", "pattern": "^([0-9a-fA-F]{2})*$"}},
         "required": ["hex"], "additionalProperties": false}
    ]});
    props.insert(
        "http".into(),
        json!({
            "description": "An HTTP exchange with an agent server (reqkey-agent/1); the answer is {status, headers, body, json?, sse?}.",
            "type": "object",
            "properties": {
                "method": {"type": "string", "description": "Default GET."},
                "path": {"type": "string", "pattern": "^[/$]", "description": "Path and query; quote it in a flow map when it interpolates ${var}."},
                "headers": {
                    "description": "Ordered [name, value] pairs (repeat a name to repeat the header) or a map. A value is a string or {hex}.",
                    "oneOf": [
                        {"type": "array", "items": {"type": "array", "prefixItems": [{"type": "string"}, header_value.clone()], "minItems": 2, "maxItems": 2}},
                        {"type": "object", "additionalProperties": header_value}
                    ]
                },
                "json": {"description": "A JSON body, sent compact."},
                "body": {"type": "string", "description": "A raw text body."},
                "pad_to_bytes": {"type": "integer", "minimum": 0, "maximum": MAX_BODY_BYTES, "description": "Pad the body with blanks to this many bytes."},
                "delay_ms": {"type": "integer", "minimum": 0, "maximum": MAX_WAIT_MS, "description": "Wait before sending (in a parallel group: after the barrier)."},
                "replica": {"type": "integer", "minimum": 0, "maximum": MAX_REPLICA_INDEX, "description": "Send to this replica of a replicated target (modulo their number); absent: the next in turn. A one-endpoint target ignores it."},
                "wire": {"enum": ["library", "exact", "absolute-form", "chunked"], "description": "How the request goes on the wire: through the HTTP client (library, the default), or its head written byte for byte, header names as spelt and values with their blanks (exact), with the request target in absolute form (absolute-form), or with the body sent Transfer-Encoding: chunked (chunked)."}
            },
            "required": ["path"],
            "not": {"required": ["json", "body"]},
            "additionalProperties": false
        }),
    );
    let status = json!({"enum": ["running", "suspended_input", "suspended_tool", "completed", "failed", "interrupted"]});
    props.insert(
        "wait_run".into(),
        json!({
            "description": "Wait until a run of an agent server reaches a status (polls GET /sessions/{id}/runs/{runId}?waitMs=N).",
            "type": "object",
            "properties": {
                "sessionId": {"type": "string"},
                "runId": {"type": "string"},
                "status": {"oneOf": [status.clone(), {"type": "array", "minItems": 1, "items": status}]},
                "timeout_ms": {"type": "integer", "minimum": 0, "maximum": MAX_WAIT_MS, "description": "Default 5000."}
            },
            "required": ["sessionId", "runId", "status"],
            "additionalProperties": false
        }),
    );
    props.insert(
        "fault".into(),
        json!({
            "description": "A fault done to a process the harness started (--start): kill (SIGKILL), stop (SIGSTOP), cont (SIGCONT) or restart (SIGKILL, then the same command again, awaited until /health answers). The scenario must require `faults: true`.",
            "type": "object",
            "properties": {
                "action": {"enum": ["kill", "stop", "cont", "restart"]},
                "replica": {"type": "integer", "minimum": 0, "maximum": MAX_REPLICA_INDEX, "description": "The --start command (replica) it aims at; default 0."},
                "after_ms": {"type": "integer", "minimum": 0, "maximum": crate::fault::MAX_FAULT_DELAY_MS, "description": "Wait before striking (in a parallel group: while the other requests are in flight)."}
            },
            "required": ["action"],
            "additionalProperties": false
        }),
    );
    props.insert(
        "link".into(),
        json!({
            "description": "A fault on the database link the harness owns (--start with --db URL): reset it (before-commit, after-commit, in-transaction), delay it (the commit or its answer held `ms`), drop the commit's answer (the silent connection reset after `ms`), answer the commit with a PostgreSQL error (40001 or 40P01: the commit rolled back; 40003: applied, completion unknown), or heal every fault. It arms at once and strikes the first time its point comes on the link. The scenario must require `link`.",
            "type": "object",
            "properties": {
                "action": {"enum": ["reset", "delay", "drop", "error", "heal"]},
                "at": {"enum": ["before-commit", "after-commit", "in-transaction"]},
                "ms": {"type": "integer", "minimum": 1, "maximum": crate::link::MAX_LINK_HOLD_MS, "description": "delay: how long the link stalls; drop: how long the silenced connection stays open before it is reset."},
                "sqlstate": {"enum": ["40001", "40P01", "40003"]},
                "db": {"type": "integer", "minimum": 0, "maximum": crate::link::MAX_LINK_INDEX, "description": "The --db link it aims at; default: whichever link the commit goes through."}
            },
            "required": ["action"],
            "additionalProperties": false
        }),
    );
    props.insert(
        "may_be_cut".into(),
        json!({"description": "The exchange may end with its connection closed or refused by a fault; that end is accepted, a whole answer is judged.", "type": "boolean"}),
    );
    props.insert(
        "expect_not_echoed".into(),
        json!({
            "description": "Values that must appear nowhere in the answer's body or headers (raw or JSON-escaped).",
            "oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]
        }),
    );
}

fn modifier_properties(props: &mut Map<String, Value>, generator: &mut SchemaGenerator) {
    props.insert(
        "as".into(),
        json!({"description": "Names this step's answer (for expect_one_of; `.i` is appended for copies).", "type": "string"}),
    );
    props.insert(
        "expect".into(),
        json!({"description": "A pattern the answer must match (subset match; $absent, $any, {$exact}, {$length}, {$one_of}, {$at_most}, {$at_least}, {$contains}, {$none}), or `any`: the answer is deliberately not checked. An operation without an expectation is a load error."}),
    );
    props.insert(
        "expect_raw".into(),
        json!({
            "description": "Exact JSON text the answer must equal (an http step: its body): same keys, absent is not null, key order irrelevant, numbers by value; ${name} is interpolated.",
            "type": "string"
        }),
    );
    props.insert(
        "bind".into(),
        json!({
            "description": "Binds variables to values of the answer: VAR -> dot-separated path (numbers index arrays).",
            "type": "object",
            "additionalProperties": {"type": "string"}
        }),
    );
    let clause = generator.subschema_for::<ClauseRef>();
    props.insert(
        "judges".into(),
        json!({
            "description": "The clauses of checks: this step's checks judge (expect, expect_raw, expect_not_echoed, bind, wait_run, expect_one_of, expect_group, linearizable, mixed_histories); an item of a group without its own judges its group's. A failed check fails these clauses and no other; checks: is the union of every judges:.",
            "type": "array",
            "minItems": 1,
            "uniqueItems": true,
            "items": clause
        }),
    );
}

/// Actions that only a top-level step takes (never an item of a group).
const GROUP_ONLY: [&str; 4] = ["parallel", "expect_one_of", "sleep_ms", "mixed_histories"];

/// Modifiers of a `parallel` step only, and of a group's item only.
const TOP_ONLY_MODIFIERS: [&str; 3] = ["linearizable", "expect_group", "always"];
const ITEM_ONLY_MODIFIERS: [&str; 1] = ["copies"];

/// Every action the loader knows (`STORE_ACTIONS` and `OTHER_ACTIONS`, so
/// an action added to the loader is in the schema without touching this
/// file).
fn actions(in_group: bool) -> Vec<&'static str> {
    STORE_ACTIONS
        .iter()
        .chain(OTHER_ACTIONS.iter())
        .copied()
        .filter(|k| !(in_group && GROUP_ONLY.contains(k)))
        .collect()
}

/// Every key the loader takes at this place: its actions and modifiers.
fn keys(in_group: bool) -> Vec<&'static str> {
    let all_actions = actions(false);
    all_step_keys()
        .iter()
        .copied()
        .filter(|k| {
            if all_actions.contains(k) {
                actions(in_group).contains(k)
            } else if in_group {
                !TOP_ONLY_MODIFIERS.contains(k)
            } else {
                !ITEM_ONLY_MODIFIERS.contains(k)
            }
        })
        .collect()
}

/// Gives any key the loader knows but this file does not describe a
/// permissive property, so the schema never refuses what the loader takes.
fn fill_undescribed(props: &mut Map<String, Value>, in_group: bool) {
    for key in keys(in_group) {
        props
            .entry(key.to_owned())
            .or_insert_with(|| json!({"description": "See docs/scenario-format.md."}));
    }
}

fn one_action(actions: &[&str]) -> Value {
    Value::Array(actions.iter().map(|a| json!({"required": [a]})).collect())
}

fn object_schema(description: &str, props: Map<String, Value>, actions: &[&str]) -> Schema {
    let value = json!({
        "description": description,
        "type": "object",
        "properties": props,
        "additionalProperties": false,
        "oneOf": one_action(actions),
    });
    Schema::try_from(value).unwrap_or_else(|_| Schema::from(true))
}

impl JsonSchema for ParallelItem {
    fn schema_name() -> Cow<'static, str> {
        "ParallelItem".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let mut props = Map::new();
        store_action_properties(&mut props);
        agent_properties(&mut props);
        modifier_properties(&mut props, generator);
        props.insert(
            "copies".into(),
            json!({
                "description": "Expand into N items; `${i}` is 0..N-1 inside them.",
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_COPIES
            }),
        );
        fill_undescribed(&mut props, true);
        object_schema(
            "An operation of a parallel group: exactly one operation, with modifiers.",
            props,
            &actions(true),
        )
    }
}

impl JsonSchema for Step {
    fn schema_name() -> Cow<'static, str> {
        "Step".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let mut props = Map::new();
        store_action_properties(&mut props);
        agent_properties(&mut props);
        modifier_properties(&mut props, generator);
        let item = generator.subschema_for::<ParallelItem>();
        props.insert(
            "parallel".into(),
            json!({
                "description": "Operations started together behind a barrier.",
                "type": "array",
                "minItems": 1,
                "items": item
            }),
        );
        props.insert(
            "expect_one_of".into(),
            json!({
                "description": "Alternatives; each maps answer names (given with `as`) to patterns. One must match.",
                "type": "array",
                "minItems": 1,
                "items": {"type": "object"}
            }),
        );
        props.insert(
            "sleep_ms".into(),
            json!({"description": "A pause, in milliseconds.", "type": "integer", "minimum": 0, "maximum": MAX_SLEEP_MS}),
        );
        let mixed = generator.subschema_for::<crate::MixedHistoriesSpec>();
        props.insert(
            "mixed_histories".into(),
            json!({"description": "Store level: random concurrent programs over every store operation (seeded by the run), each history checked for linearizability.", "allOf": [mixed]}),
        );
        props.insert(
            "always".into(),
            json!({"description": "Run this step even after an earlier check of its trial failed (an observation: the effect counter, a read); without it, the steps after a failed check are skipped and the clauses only they judge are not judged.", "type": "boolean"}),
        );
        props.insert(
            "linearizable".into(),
            json!({"description": "On parallel: check the group's recorded history for linearizability.", "type": "boolean"}),
        );
        let rules = generator.subschema_for::<Vec<GroupRule>>();
        props.insert(
            "expect_group".into(),
            json!({"description": "On parallel: rules over the group's answers, consumed in order.", "allOf": [rules]}),
        );
        fill_undescribed(&mut props, false);
        object_schema(
            "A step: a map with exactly one action key and optional modifiers.",
            props,
            &actions(false),
        )
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_schema_names_every_action_and_forbids_unknown_keys() {
        let schema: Value = serde_json::from_str(&scenario_schema_json()).unwrap();
        let step = &schema["$defs"]["Step"];
        assert_eq!(step["additionalProperties"], json!(false));
        for action in STORE_ACTIONS.iter().chain(&["parallel", "sleep_ms"]) {
            assert!(step["properties"].get(*action).is_some(), "{action}");
        }
        assert_eq!(schema["additionalProperties"], json!(false));
        let required: Vec<&str> = schema["required"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(required, ["id", "level", "summary", "steps"]);
    }

    #[test]
    fn every_key_the_loader_takes_is_in_the_step_schema() {
        let schema: Value = serde_json::from_str(&scenario_schema_json()).unwrap();
        let step = &schema["$defs"]["Step"]["properties"];
        for key in all_step_keys() {
            if *key != "copies" {
                assert!(step.get(*key).is_some(), "{key} missing from Step");
            }
        }
        let item = &schema["$defs"]["ParallelItem"]["properties"];
        assert!(item.get("copies").is_some());
        assert!(item.get("parallel").is_none());
    }
}
