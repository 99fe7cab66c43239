//! The sequential agent model: what it allows and what it flags.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use reqkey_model::agent::{
    next_batch, AgentModel, AgentOp, KeyHeader, Observed, StreamSeen, Timing,
};
use reqkey_model::vocab::{ConcurrentEntry, Profile};
use serde_json::{json, Value};

fn obs(status: u16, body: Value) -> Observed {
    Observed {
        status,
        body: body.to_string(),
        json: Some(body),
        ..Observed::default()
    }
}

/// A whole stream of run `run` whose test agent echoed `text`.
fn stream(run: &str, seq: u64, attached: bool, finish: &str, text: &str) -> Observed {
    Observed {
        status: 200,
        stream: Some(StreamSeen {
            run_id: Some(run.into()),
            start_sequence: Some(seq),
            attached: Some(attached),
            finish: Some(finish.into()),
            runs: 1,
            texts: vec![format!("echo: {text}")],
        }),
        ..Observed::default()
    }
}

fn start(key: Option<&str>, text: &str) -> AgentOp {
    AgentOp::Start {
        session: "s".into(),
        key: key.map_or(KeyHeader::None, |k| KeyHeader::Valid(k.into())),
        input: json!({ "text": text }),
    }
}

/// Applies `op` answered `o` sequentially to every state (settled first).
fn step(states: Vec<AgentModel>, op: &AgentOp, o: &Observed) -> Result<Vec<AgentModel>, String> {
    let mut out = Vec::new();
    let mut err = String::new();
    for s in states {
        for settled in s.settle_all() {
            match settled.next(op, o, true) {
                Ok(n) => out.extend(n),
                Err(e) => err = e,
            }
        }
    }
    if out.is_empty() {
        Err(err)
    } else {
        Ok(out)
    }
}

fn started(run: &str, seq: u64) -> Observed {
    obs(
        201,
        json!({"sessionId": "s", "runId": run, "status": "started", "startSequence": seq}),
    )
}

fn attached(run: &str, seq: u64) -> Observed {
    obs(
        200,
        json!({"sessionId": "s", "runId": run, "status": "attached", "startSequence": seq}),
    )
}

#[test]
fn a_keyed_duplicate_attaches_and_a_different_input_conflicts() {
    let m = vec![AgentModel::new(&Profile::default())];
    let m = step(m, &start(Some("k"), "a"), &started("r1", 1)).unwrap();
    let m = step(m, &start(Some("k"), "a"), &attached("r1", 1)).unwrap();
    // A second start without the key: the session exists.
    assert!(step(m.clone(), &start(None, "a"), &started("r2", 2)).is_err());
    let conflict = obs(
        409,
        json!({"code": "state_request_key_conflict", "message": "x", "runId": "r1"}),
    );
    step(m.clone(), &start(Some("k"), "b"), &conflict).unwrap();
    // Naming another run, or attaching, is flagged.
    let wrong = obs(
        409,
        json!({"code": "state_request_key_conflict", "message": "x", "runId": "r9"}),
    );
    let e = step(m.clone(), &start(Some("k"), "b"), &wrong).unwrap_err();
    assert!(
        e.contains("state_request_key_conflict naming run r1"),
        "{e}"
    );
    assert!(step(m, &start(Some("k"), "b"), &attached("r1", 1)).is_err());
}

#[test]
fn a_delete_frees_keys_and_restarts_sequences() {
    let m = vec![AgentModel::new(&Profile::default())];
    let m = step(m, &start(Some("k"), "a"), &started("r1", 1)).unwrap();
    let m = step(
        m,
        &AgentOp::Delete {
            session: "s".into(),
        },
        &obs(204, Value::Null),
    )
    .unwrap();
    // A replay of the deleted run is what a stale key index answers.
    assert!(step(m.clone(), &start(Some("k"), "a"), &attached("r1", 1)).is_err());
    let m = step(m, &start(Some("k"), "a"), &started("r2", 1)).unwrap();
    let snap = obs(
        200,
        json!({"sessionId": "s", "runs": [{"sessionId": "s", "runId": "r2", "status": "completed", "startSequence": 1, "requestKey": "k", "requestDigest": "d"}], "inputs": [{"runId": "r2", "input": {"text": "a"}}]}),
    );
    step(
        m.clone(),
        &AgentOp::Snapshot {
            session: "s".into(),
        },
        &snap,
    )
    .unwrap();
    let stale = obs(
        200,
        json!({"sessionId": "s", "runs": [{"sessionId": "s", "runId": "r2", "status": "completed", "startSequence": 1, "requestKey": "k", "requestDigest": "d"}], "inputs": [{"runId": "r1", "input": {"text": "a"}}, {"runId": "r2", "input": {"text": "a"}}]}),
    );
    assert!(step(
        m,
        &AgentOp::Snapshot {
            session: "s".into()
        },
        &stale
    )
    .is_err());
}

#[test]
fn a_chat_on_a_suspended_run_completes_it_and_a_reconnect_streams_the_current_run() {
    let chat = |text: &str| AgentOp::ChatSend {
        session: "s".into(),
        key: KeyHeader::None,
        content: text.into(),
        tool: false,
    };
    let m = vec![AgentModel::new(&Profile::default())];
    let m = step(
        m,
        &chat("[suspend] hi"),
        &stream("r1", 1, false, "suspended_input", "[suspend] hi"),
    )
    .unwrap();
    // The end the test agent scripts is the only one.
    assert!(step(
        m.clone(),
        &chat("x"),
        &stream("r2", 2, false, "failed", "x")
    )
    .is_err());
    let m = step(m, &chat("x"), &stream("r2", 2, false, "completed", "x")).unwrap();
    let read = |run: &str, status: &str, seq: u64| {
        obs(
            200,
            json!({"sessionId": "s", "runId": run, "status": status, "startSequence": seq}),
        )
    };
    let r1 = AgentOp::ReadRun {
        session: "s".into(),
        run_id: "r1".into(),
        wait_ms: 0,
    };
    step(m.clone(), &r1, &read("r1", "completed", 1)).unwrap();
    assert!(step(m.clone(), &r1, &read("r1", "suspended_input", 1)).is_err());
    let rc = AgentOp::Reconnect {
        session: "s".into(),
        key: KeyHeader::Malformed("a b".into()),
    };
    step(m.clone(), &rc, &stream("r2", 2, true, "completed", "x")).unwrap();
    assert!(step(m.clone(), &rc, &stream("r1", 1, true, "completed", "x")).is_err());
    // Every event is judged: the run's one echo, not another text.
    let e = step(m, &rc, &stream("r2", 2, true, "completed", "?")).unwrap_err();
    assert!(e.contains("current run r2"), "{e}");
}

#[test]
fn keys_ignored_never_attach_and_malformed_keys_are_refused_unechoed() {
    let profile = Profile {
        supports_request_key: false,
        ..Profile::default()
    };
    let m = vec![AgentModel::new(&profile)];
    let m = step(m, &start(Some("k"), "a"), &started("r1", 1)).unwrap();
    assert!(step(m.clone(), &start(Some("k"), "a"), &attached("r1", 1)).is_err());
    let exists = obs(409, json!({"code": "state_session_exists", "message": "x"}));
    let m = step(m, &start(Some("k"), "a"), &exists).unwrap();
    let bad = AgentOp::Retry {
        session: "s".into(),
        key: KeyHeader::Malformed("k y".into()),
    };
    step(
        m.clone(),
        &bad,
        &obs(
            400,
            json!({"code": "validation_error", "message": "bad key"}),
        ),
    )
    .unwrap();
    let e = step(
        m,
        &bad,
        &obs(
            400,
            json!({"code": "validation_error", "message": "bad key k y"}),
        ),
    )
    .unwrap_err();
    assert!(e.contains("echoes"), "{e}");
}

#[test]
fn a_batch_is_judged_by_every_order() {
    let m = vec![AgentModel::new(&Profile::default())];
    let ops = [
        start(Some("k"), "[sleep:100]"),
        start(Some("k"), "[sleep:100]"),
    ];
    // One started, the other attached, in either index order.
    let ok = next_batch(&m, &ops, &[attached("r1", 1), started("r1", 1)]);
    assert!(!ok.is_empty());
    // Two runs for one key: no order explains it.
    assert!(next_batch(&m, &ops, &[started("r1", 1), started("r2", 1)]).is_empty());
    // interrupt_previous: a keyed resume interrupts a running run.
    let profile = Profile {
        concurrent_entry: ConcurrentEntry::InterruptPrevious,
        ..Profile::default()
    };
    let m = vec![AgentModel::new(&profile)];
    let m = step(m, &start(None, "a"), &started("r1", 1)).unwrap();
    let m = step(
        m,
        &start(Some("q"), "x"),
        &obs(409, json!({"code": "state_session_exists", "message": "x"})),
    )
    .unwrap();
    assert!(!m.is_empty());
}

fn timed(mut o: Observed, invoke_ms: u64, return_ms: u64) -> Observed {
    o.timing = Some(Timing {
        invoke_ms,
        return_ms,
    });
    o
}

/// A `[sleep:N]` run cannot have ended before N ms after its entry was
/// sent: a read that returned sooner must see it `running`, one later may
/// see either; after the harness waited, it has ended.
#[test]
fn a_run_ends_no_sooner_than_its_sleep() {
    let m = vec![AgentModel::new(&Profile::default())];
    let m = step(
        m,
        &start(None, "[sleep:80] slow"),
        &timed(started("r1", 1), 0, 5),
    )
    .unwrap();
    let read = AgentOp::ReadRun {
        session: "s".into(),
        run_id: "r1".into(),
        wait_ms: 0,
    };
    let run = |status: &str| {
        obs(
            200,
            json!({"sessionId": "s", "runId": "r1", "status": status, "startSequence": 1}),
        )
    };
    let unsettled = |m: &[AgentModel], o: &Observed| -> Vec<AgentModel> {
        m.iter()
            .flat_map(|s| s.before(o, false))
            .flat_map(|s| s.next(&read, o, true).unwrap_or_default())
            .collect()
    };
    // Just before its end: only `running` conforms.
    assert!(!unsettled(&m, &timed(run("running"), 10, 20)).is_empty());
    assert!(unsettled(&m, &timed(run("completed"), 10, 20)).is_empty());
    // At or past it: either.
    assert!(!unsettled(&m, &timed(run("completed"), 70, 90)).is_empty());
    assert!(!unsettled(&m, &timed(run("running"), 70, 90)).is_empty());
    // A poll that waited 50 ms answered `running` after 10: it did not wait.
    let poll = AgentOp::ReadRun {
        session: "s".into(),
        run_id: "r1".into(),
        wait_ms: 50,
    };
    let early = timed(run("running"), 10, 20);
    let e = m[0].before(&early, false)[0]
        .next(&poll, &early, true)
        .unwrap_err();
    assert!(e.contains("waitMs=50"), "{e}");
    assert!(m[0]
        .next(&poll, &timed(run("running"), 10, 61), true)
        .is_ok());
}

#[test]
fn refusals_write_nothing_and_health_repeats_the_profile() {
    let m = vec![AgentModel::new(&Profile::default())];
    let refusal = AgentOp::Refusal {
        session: "s".into(),
        status: 405,
        code: "method_not_allowed",
    };
    let m = step(
        m,
        &refusal,
        &obs(405, json!({"code": "method_not_allowed", "message": "no"})),
    )
    .unwrap();
    assert!(step(m.clone(), &refusal, &obs(204, Value::Null)).is_err());
    let health = json!({"name": "x", "version": "1", "protocol": "reqkey-agent/1", "supportsRequestKey": true});
    step(m.clone(), &AgentOp::Health, &obs(200, health)).unwrap();
    let other = json!({"name": "x", "version": "1", "protocol": "reqkey-agent/1", "supportsRequestKey": false});
    assert!(step(m.clone(), &AgentOp::Health, &obs(200, other)).is_err());
    // A bad waitMs: 400, or the unknown session's own 404.
    let bad = AgentOp::BadWait {
        session: "s".into(),
        run_id: "r".into(),
    };
    step(
        m.clone(),
        &bad,
        &obs(400, json!({"code": "validation_error", "message": "x"})),
    )
    .unwrap();
    step(
        m,
        &bad,
        &obs(
            404,
            json!({"code": "state_session_not_found", "message": "x"}),
        ),
    )
    .unwrap();
}
