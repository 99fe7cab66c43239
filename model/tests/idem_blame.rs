//! Blame by counterfactual (`idem_blame.rs`, SPEC
//! `[[certify.blame.counterfactual]]`): for each fault the fuzz pass used to
//! pin on a clause that held (issue 54), a hand-written history of the
//! answers the faulty app gives, alone and in bursts; the model must blame
//! exactly the clause broken, never `idem.concurrent.declared` by default,
//! and name the request, its answer and what the clause allows.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use reqkey_model::idem_batch::{judge, judge_one, judge_relaxed};
use reqkey_model::idem_blame::{ClauseSet, Relax};
use reqkey_model::idem_model::{clause, IdemAnswer, IdemModel, IdemRequest, Judged, Window};
use reqkey_model::idem_profile::{IdemProfile, KeySyntax};
use serde_json::{json, Value};

fn req(method: &str, path: &str, caller: &str, key: &str, body: Value) -> IdemRequest {
    IdemRequest {
        method: method.into(),
        path: path.into(),
        caller: caller.into(),
        key: Some(key.as_bytes().to_vec()),
        body: serde_json::to_vec(&body).unwrap(),
    }
}

fn w(sent: u64, arrived: u64, answered: u64) -> Window {
    Window {
        sent_ms: sent,
        arrived_by_ms: arrived,
        answered_ms: answered,
    }
}

fn run(order: u64, caller: &str, echo: Value) -> IdemAnswer {
    IdemAnswer {
        status: 201,
        json: Some(json!({"order": order, "caller": caller, "echo": echo})),
        order_header: Some(order.to_string()),
        replayed: false,
    }
}

/// A handler's error answer (its 500, or its own 422) of run `order`,
/// with its `X-Reqkey-Order`, as every handler answer carries it.
fn error_run(status: u16, order: u64) -> IdemAnswer {
    IdemAnswer {
        status,
        json: Some(json!({"order": order, "caller": "alice"})),
        order_header: Some(order.to_string()),
        replayed: false,
    }
}

fn replayed(mut a: IdemAnswer) -> IdemAnswer {
    a.replayed = true;
    a
}

fn refusal(status: u16) -> IdemAnswer {
    IdemAnswer {
        status,
        json: Some(json!({"title": "refused"})),
        order_header: None,
        replayed: false,
    }
}

/// The clauses blamed, and the message.
fn blamed(r: Result<Vec<IdemModel>, Judged>) -> (Vec<&'static str>, String) {
    match r {
        Err(Judged::Violation(v)) => {
            assert_eq!(v.clause, v.clauses[0]);
            (v.clauses, v.message)
        }
        other => panic!("expected a violation, got {other:?}"),
    }
}

/// The state after `r` ran alone (answered `a` in 0..10 ms).
fn after(m: &IdemModel, r: &IdemRequest, a: &IdemAnswer) -> Vec<IdemModel> {
    judge_one(m, r, a, w(0, 2, 10)).unwrap()
}

#[test]
fn a_key_the_syntax_admits_refused_400_is_a_syntax_fault() {
    let mut p = IdemProfile::draft_default();
    p.key_syntax = KeySyntax::Any;
    let m = IdemModel::new(&p);
    let quoted = req("POST", "/orders", "alice", "\"k\"", json!({"a": 1}));
    let (clauses, msg) = blamed(judge_one(&m, &quoted, &refusal(400), w(0, 2, 10)));
    assert_eq!(clauses, vec![clause::SYNTAX], "{msg}");
    assert!(msg.contains("answered 400"), "{msg}");
    assert!(
        msg.contains("idem.key.syntax allows only taking the key"),
        "{msg}"
    );
    // Beside a conforming run of another key in the same burst.
    let bare = req("POST", "/orders", "alice", "k", json!({"a": 1}));
    let items = vec![
        (bare, run(1, "alice", json!({"a": 1})), w(0, 2, 10)),
        (quoted.clone(), refusal(400), w(0, 2, 8)),
        (quoted, refusal(400), w(0, 2, 9)),
    ];
    let (clauses, msg) = blamed(judge(std::slice::from_ref(&m), &items));
    assert_eq!(clauses, vec![clause::SYNTAX], "{msg}");
}

/// SPEC `[[idem.key.long-and-escaped]]`: a key over 255 octets may be
/// refused for its length (any 4xx, nothing runs); one of 255 octets must
/// be taken, and its refusal is a syntax fault.
#[test]
fn a_key_over_255_octets_may_be_refused_and_one_of_255_may_not() {
    let mut p = IdemProfile::draft_default();
    p.key_syntax = KeySyntax::Any;
    let m = IdemModel::new(&p);
    let long = req(
        "POST",
        "/orders",
        "alice",
        &"k".repeat(256),
        json!({"a": 1}),
    );
    for status in [400, 413, 422, 431] {
        let after = judge_one(&m, &long, &refusal(status), w(0, 2, 10)).unwrap();
        assert_eq!(
            after,
            vec![m.clone()],
            "a refusal for length changes nothing"
        );
    }
    // Refused, yet it ran: the refusal does not excuse a run.
    let ran = IdemAnswer {
        status: 400,
        ..run(1, "alice", json!({"a": 1}))
    };
    assert!(judge_one(&m, &long, &ran, w(0, 2, 10)).is_err());
    let longest = req(
        "POST",
        "/orders",
        "alice",
        &"k".repeat(255),
        json!({"a": 1}),
    );
    let (clauses, msg) = blamed(judge_one(&m, &longest, &refusal(400), w(0, 2, 10)));
    assert_eq!(clauses, vec![clause::SYNTAX], "{msg}");
}

/// A key the app took once is no malformed value to it: a later refusal
/// of the same bytes with the invalid-key status is never blamed on the
/// syntax (where that status is also the mismatch status, the refusal is
/// a mismatch).
#[test]
fn a_key_taken_before_then_refused_is_not_a_syntax_fault() {
    let mut p = IdemProfile::draft_default();
    p.key_syntax = KeySyntax::Any;
    p.invalid_key_status = Some(422);
    p.mismatch_status = Some(422);
    let m = IdemModel::new(&p);
    let first = req("POST", "/orders", "alice", "\"k\"", json!({"a": 1}));
    let states = after(&m, &first, &run(1, "alice", json!({"a": 1})));
    let again = req("POST", "/orders", "alice", "\"k\"", json!({"a": 1}));
    let (clauses, msg) = blamed(judge(&states, &[(again, refusal(422), w(20, 22, 30))]));
    assert!(!clauses.contains(&clause::SYNTAX), "{clauses:?}: {msg}");
}

#[test]
fn a_stored_answer_replayed_on_another_route_is_a_scope_fault() {
    let m = IdemModel::new(&IdemProfile::draft_default());
    let orders = req("POST", "/orders", "alice", "\"k\"", json!({"a": 1}));
    let first = run(7, "alice", json!({"a": 1}));
    let s = after(&m, &orders, &first);
    let pay = req("POST", "/payments", "alice", "\"k\"", json!({"a": 1}));
    let (clauses, msg) = blamed(judge(
        &s,
        &[(pay.clone(), replayed(first.clone()), w(20, 22, 30))],
    ));
    assert_eq!(clauses, vec![clause::SCOPE], "{msg}");
    assert!(msg.contains("POST /payments"), "{msg}");
    // In a burst with both routes: the run on one, its answer on the other.
    let items = vec![
        (orders, run(1, "alice", json!({"a": 1})), w(0, 2, 10)),
        (pay, replayed(run(1, "alice", json!({"a": 1}))), w(0, 2, 12)),
    ];
    let (clauses, msg) = blamed(judge(std::slice::from_ref(&m), &items));
    assert_eq!(clauses, vec![clause::SCOPE], "{msg}");
}

#[test]
fn a_payload_differing_only_in_blanks_refused_is_an_equivalence_fault() {
    let m = IdemModel::new(&IdemProfile::draft_default());
    let r = req("POST", "/orders", "alice", "\"k\"", json!({"a": 1}));
    let first = run(7, "alice", json!({"a": 1}));
    let s = after(&m, &r, &first);
    let mut spaced = r.clone();
    spaced.body = br#"{ "a" : 1 }"#.to_vec();
    let (clauses, msg) = blamed(judge(&s, &[(spaced.clone(), refusal(422), w(20, 22, 30))]));
    assert_eq!(clauses, vec![clause::EQUIVALENCE], "{msg}");
    // In a burst: the spaced copy refused 422 after the first completed,
    // a plain copy replayed (what fingerprint-raw-bytes answers).
    let items = vec![
        (r.clone(), run(1, "alice", json!({"a": 1})), w(0, 2, 10)),
        (spaced, refusal(422), w(0, 12, 14)),
        (r, replayed(run(1, "alice", json!({"a": 1}))), w(0, 12, 15)),
    ];
    let (clauses, msg) = blamed(judge(std::slice::from_ref(&m), &items));
    assert_eq!(clauses, vec![clause::EQUIVALENCE], "{msg}");
}

#[test]
fn an_expired_key_still_replayed_is_an_expiry_fault() {
    let mut p = IdemProfile::draft_default();
    p.expiry_ms = Some(1000);
    let m = IdemModel::new(&p);
    let r = req("POST", "/orders", "alice", "\"k\"", json!({"a": 1}));
    let first = run(7, "alice", json!({"a": 1}));
    let s = after(&m, &r, &first);
    let late = w(3000, 3002, 3010);
    let (clauses, msg) = blamed(judge(&s, &[(r.clone(), replayed(first.clone()), late)]));
    assert_eq!(clauses, vec![clause::EXPIRY], "{msg}");
    // A burst after expiry, every copy replayed (nothing ran once more).
    let items: Vec<_> = (0..4)
        .map(|i| (r.clone(), replayed(first.clone()), w(3000, 3005, 3010 + i)))
        .collect();
    let (clauses, msg) = blamed(judge(&s, &items));
    assert_eq!(clauses, vec![clause::EXPIRY], "{msg}");
}

#[test]
fn a_500_to_a_duplicate_in_flight_is_a_concurrency_fault_alone() {
    let m = IdemModel::new(&IdemProfile::draft_default());
    let body = json!({"sleepMs": 600});
    let r = req("POST", "/orders/slow", "alice", "\"k\"", body.clone());
    let mut five = refusal(500);
    five.json = Some(json!({"error": "in flight"}));
    let items = vec![
        (r.clone(), run(1, "alice", body), w(0, 5, 610)),
        (r.clone(), five.clone(), w(0, 5, 8)),
        (r, refusal(409), w(0, 5, 9)),
    ];
    let (clauses, msg) = blamed(judge(std::slice::from_ref(&m), &items));
    assert_eq!(clauses, vec![clause::CONCURRENT], "{msg}");
    assert!(msg.contains("answered 500"), "{msg}");
    assert!(!msg.contains("idem.lock.held"), "{msg}");
}

#[test]
fn a_replay_with_another_body_is_a_replay_fault() {
    let m = IdemModel::new(&IdemProfile::draft_default());
    let r = req("POST", "/orders", "alice", "\"k\"", json!({"a": 1}));
    let first = run(7, "alice", json!({"a": 1}));
    let s = after(&m, &r, &first);
    // replay-drops-body: status and headers kept, the body not.
    let mut wrong = replayed(first.clone());
    wrong.json = Some(json!({"replayed": true}));
    let (clauses, msg) = blamed(judge(&s, &[(r.clone(), wrong.clone(), w(20, 22, 30))]));
    assert_eq!(clauses, vec![clause::REPLAY], "{msg}");
    assert!(
        msg.contains("only the first answer replayed (201 order 7"),
        "{msg}"
    );
    // In a burst: one run, the late copies replayed wrongly.
    let mut wrong1 = replayed(run(1, "alice", json!({"a": 1})));
    wrong1.json = Some(json!({"replayed": true}));
    let items = vec![
        (r.clone(), run(1, "alice", json!({"a": 1})), w(0, 2, 10)),
        (r.clone(), refusal(409), w(0, 2, 4)),
        (r.clone(), wrong1.clone(), w(0, 12, 15)),
        (r, wrong1, w(0, 12, 16)),
    ];
    let (clauses, msg) = blamed(judge(std::slice::from_ref(&m), &items));
    assert_eq!(clauses, vec![clause::REPLAY], "{msg}");
}

#[test]
fn a_replay_without_the_order_header_is_a_replay_fault_not_a_mark_fault() {
    // replay-drops-headers: replays marked, X-Reqkey-Order lost. Taking a
    // marked replay for the run (a run marked, a replay unmarked) waives
    // two rules of idem.replay.header; the wrong replays waive one.
    let m = IdemModel::new(&IdemProfile::draft_default());
    let r = req("POST", "/orders", "alice", "\"k\"", json!({"a": 1}));
    let ok = run(1, "alice", json!({"a": 1}));
    let mut dropped = replayed(ok.clone());
    dropped.order_header = None;
    let items = vec![
        (r.clone(), dropped.clone(), w(0, 12, 14)),
        (r.clone(), ok, w(0, 2, 10)),
        (r.clone(), dropped.clone(), w(0, 12, 15)),
        (r.clone(), dropped.clone(), w(0, 12, 16)),
        (r, dropped, w(0, 12, 17)),
    ];
    let (clauses, msg) = blamed(judge(std::slice::from_ref(&m), &items));
    assert_eq!(clauses, vec![clause::REPLAY], "{msg}");
    assert!(msg.contains("X-Reqkey-Order"), "{msg}");
}

#[test]
fn a_replay_without_its_mark_is_a_mark_fault() {
    let m = IdemModel::new(&IdemProfile::draft_default());
    let r = req("POST", "/orders", "alice", "\"k\"", json!({"a": 1}));
    let ok = run(1, "alice", json!({"a": 1}));
    let items = vec![
        (r.clone(), ok.clone(), w(0, 2, 10)),
        (r.clone(), ok.clone(), w(0, 12, 15)),
        (r, ok, w(0, 12, 16)),
    ];
    let (clauses, msg) = blamed(judge(std::slice::from_ref(&m), &items));
    assert_eq!(clauses, vec![clause::REPLAY_HEADER], "{msg}");
}

#[test]
fn two_overlapping_runs_are_an_at_most_once_fault() {
    let m = IdemModel::new(&IdemProfile::draft_default());
    let body = json!({"sleepMs": 600});
    let r = req("POST", "/orders/slow", "alice", "\"k\"", body.clone());
    let items = vec![
        (r.clone(), run(1, "alice", body.clone()), w(0, 5, 610)),
        (r.clone(), run(2, "alice", body), w(0, 5, 612)),
        (r, refusal(409), w(0, 5, 7)),
    ];
    let (clauses, msg) = blamed(judge(std::slice::from_ref(&m), &items));
    assert_eq!(clauses, vec![clause::AT_MOST_ONCE], "{msg}");
}

#[test]
fn two_faults_in_one_answer_blame_the_pair() {
    // A key replayed past its expiry, and another key refused 400 in the
    // same batch: neither waiver alone explains both, the pair does.
    let mut p = IdemProfile::draft_default();
    p.expiry_ms = Some(1000);
    let m = IdemModel::new(&p);
    let r = req("POST", "/orders", "alice", "\"k\"", json!({"a": 1}));
    let first = run(7, "alice", json!({"a": 1}));
    let s = after(&m, &r, &first);
    let pay = req("POST", "/payments", "alice", "\"k\"", json!({"a": 1}));
    let late = w(3000, 3002, 3010);
    let (clauses, msg) = blamed(judge(
        &s,
        &[(r, replayed(first), late), (pay, refusal(400), late)],
    ));
    assert_eq!(clauses, vec![clause::SYNTAX, clause::EXPIRY], "{msg}");
}

#[test]
fn a_conforming_history_waives_nothing() {
    let m = IdemModel::new(&IdemProfile::draft_default());
    let r = req("POST", "/orders", "alice", "\"k\"", json!({"a": 1}));
    let ok = run(1, "alice", json!({"a": 1}));
    let items = vec![
        (r.clone(), ok.clone(), w(0, 2, 10)),
        (r, replayed(ok), w(0, 12, 15)),
    ];
    let relaxed = judge_relaxed(
        std::slice::from_ref(&m),
        &items,
        Relax {
            clauses: ClauseSet::of(&[clause::REPLAY]),
            max_rules: 1,
        },
    )
    .unwrap();
    assert!(relaxed[0].1.is_empty(), "{:?}", relaxed[0].1);
}

#[test]
fn an_error_answer_kept_under_released_is_an_errors_fault() {
    let mut p = IdemProfile::draft_default();
    p.errors = reqkey_model::idem_profile::Errors::Released;
    let m = IdemModel::new(&p);
    let r = req("POST", "/orders/fail", "alice", "\"k\"", json!({}));
    let failed = IdemAnswer {
        status: 500,
        json: Some(json!({"order": 4, "caller": "alice"})),
        order_header: None,
        replayed: false,
    };
    let s = after(&m, &r, &failed);
    // stores-released-errors: the retries get the 500 replayed.
    let items: Vec<_> = (0..3)
        .map(|i| (r.clone(), replayed(failed.clone()), w(20, 22, 30 + i)))
        .collect();
    let (clauses, msg) = blamed(judge(&s, &items));
    assert_eq!(clauses, vec![clause::REPLAY_ERRORS], "{msg}");
    // lock-kept-after-error: the retries are refused 409 forever.
    let items: Vec<_> = (0..3)
        .map(|i| (r.clone(), refusal(409), w(20, 22, 30 + i)))
        .collect();
    let (clauses, msg) = blamed(judge(&s, &items));
    assert_eq!(clauses, vec![clause::REPLAY_ERRORS], "{msg}");
}

/// fastapi-idempotency (errors released, invalidKeyStatus and
/// mismatchStatus both 422) keeps the handler's own 422: its retry is that
/// refusal replayed, order and all. That is the errors rule broken, never
/// a malformed key (a refusal of one runs nothing and shows no order).
#[test]
fn a_handler_422_replayed_under_released_is_an_errors_fault_not_a_syntax_one() {
    let mut p = IdemProfile::draft_default();
    p.errors = reqkey_model::idem_profile::Errors::Released;
    p.key_syntax = KeySyntax::Any;
    p.invalid_key_status = Some(422);
    p.replay_header = None;
    let m = IdemModel::new(&p);
    let r = req("POST", "/orders", "alice", "\"k\"", json!(["doomed"]));
    let refused = error_run(422, 4);
    let s = after(&m, &r, &refused);
    let (clauses, msg) = blamed(judge(&s, &[(r.clone(), refused, w(20, 22, 30))]));
    assert_eq!(clauses, vec![clause::REPLAY_ERRORS], "{msg}");
}

/// powertools-idempotency: a duplicate of a slow run answered 500 while
/// the run holds its key, beside a request with the same key on another
/// route. The refusal is explained within its own scope (the duplicate in
/// flight): the declared concurrency is broken, not the scope.
#[test]
fn a_500_beside_a_run_of_its_own_scope_is_a_concurrency_fault_not_a_scope_one() {
    let m = IdemModel::new(&IdemProfile::draft_default());
    let body = json!({"sleepMs": 150});
    let slow = req("POST", "/orders/slow", "alice", "\"k\"", body.clone());
    let orders = req("POST", "/orders", "alice", "\"k\"", json!({"a": 1}));
    let mut five = refusal(500);
    five.json = Some(json!({"error": "in flight"}));
    let items = vec![
        (slow.clone(), run(1, "alice", body), w(0, 5, 160)),
        (slow, five, w(0, 5, 8)),
        (orders, run(2, "alice", json!({"a": 1})), w(0, 5, 9)),
    ];
    let (clauses, msg) = blamed(judge(std::slice::from_ref(&m), &items));
    assert_eq!(clauses, vec![clause::CONCURRENT], "{msg}");
}

/// @node-idempotency/nestjs (errors stored, mismatchStatus 422): the
/// handler's 422 to a refused body, replayed without its X-Reqkey-Order,
/// after another route ran the key. The answer shows a run already seen:
/// a replay that lost its header, never a mismatch refusal another
/// route's record caused (the scope).
#[test]
fn a_replayed_422_that_lost_its_header_is_never_a_scope_fault() {
    let mut p = IdemProfile::draft_default();
    p.replay_header = None;
    let m = IdemModel::new(&p);
    let fail = req("POST", "/orders/fail", "alice", "\"k\"", json!({"a": 1}));
    let failed = error_run(500, 3);
    let s = after(&m, &fail, &failed);
    let orders = req("POST", "/orders", "alice", "\"k\"", json!(["doomed"]));
    let refused = error_run(422, 4);
    let s = judge(&s, &[(orders.clone(), refused.clone(), w(20, 22, 30))]).unwrap();
    let mut lost = refused;
    lost.order_header = None;
    let (clauses, msg) = blamed(judge(&s, &[(orders, lost, w(40, 42, 50))]));
    assert_eq!(clauses, vec![clause::REPLAY_ERRORS], "{msg}");
}

#[test]
fn another_payload_refused_on_another_route_is_a_scope_fault() {
    // unscoped-route: the other route's record, another payload: 422.
    let m = IdemModel::new(&IdemProfile::draft_default());
    let orders = req("POST", "/orders", "alice", "\"k\"", json!({"a": 1}));
    let s = after(&m, &orders, &run(7, "alice", json!({"a": 1})));
    let slow = req(
        "POST",
        "/orders/slow",
        "alice",
        "\"k\"",
        json!({"sleepMs": 5}),
    );
    let items = vec![
        (slow.clone(), refusal(422), w(20, 22, 30)),
        (slow, refusal(422), w(40, 42, 50)),
    ];
    let (clauses, msg) = blamed(judge(&s, &items));
    assert_eq!(clauses, vec![clause::SCOPE], "{msg}");
}

#[test]
fn a_quoted_key_run_under_token_is_a_token_fault() {
    // token-accepts-quoted: a quoted key runs instead of being refused.
    let mut p = IdemProfile::draft_default();
    p.key_syntax = KeySyntax::Token;
    let m = IdemModel::new(&p);
    let quoted = req("POST", "/orders", "alice", "\"k\"", json!({"a": 1}));
    let (clauses, msg) = blamed(judge_one(
        &m,
        &quoted,
        &run(1, "alice", json!({"a": 1})),
        w(0, 2, 10),
    ));
    assert_eq!(clauses, vec![clause::TOKEN], "{msg}");
}

#[test]
fn another_payload_refused_under_fingerprint_none_is_an_equivalence_fault() {
    // fingerprint-despite-none: every payload is one, yet another is refused 422.
    let mut p = IdemProfile::draft_default();
    p.fingerprint = reqkey_model::idem_profile::Fingerprint::None;
    p.mismatch_status = None;
    let m = IdemModel::new(&p);
    let r = req("POST", "/orders", "alice", "\"k\"", json!({"a": 1}));
    let s = after(&m, &r, &run(7, "alice", json!({"a": 1})));
    let other = req("POST", "/orders", "alice", "\"k\"", json!({"a": 2}));
    let (clauses, msg) = blamed(judge(&s, &[(other, refusal(422), w(20, 22, 30))]));
    assert_eq!(clauses, vec![clause::EQUIVALENCE], "{msg}");
}

#[test]
fn another_payload_run_on_a_taken_key_is_a_mismatch_fault() {
    // fingerprint-in-key: another payload is another record, so it runs.
    let m = IdemModel::new(&IdemProfile::draft_default());
    let r = req("POST", "/orders", "alice", "\"k\"", json!({"a": 1}));
    let s = after(&m, &r, &run(7, "alice", json!({"a": 1})));
    let other = req("POST", "/orders", "alice", "\"k\"", json!({"a": 2}));
    let (clauses, msg) = blamed(judge(
        &s,
        &[(
            other.clone(),
            run(8, "alice", json!({"a": 2})),
            w(20, 22, 30),
        )],
    ));
    assert_eq!(clauses, vec![clause::MISMATCH], "{msg}");
    // In flight: a slow run, another payload runs beside it.
    let body = json!({"sleepMs": 600});
    let slow = req("POST", "/orders/slow", "alice", "\"k\"", body.clone());
    let mut other = slow.clone();
    other.body = serde_json::to_vec(&json!({"sleepMs": 600, "b": 1})).unwrap();
    let items = vec![
        (slow, run(1, "alice", body), w(0, 5, 610)),
        (
            other,
            run(2, "alice", json!({"sleepMs": 600, "b": 1})),
            w(0, 5, 612),
        ),
    ];
    let (clauses, msg) = blamed(judge(std::slice::from_ref(&m), &items));
    assert_eq!(clauses, vec![clause::OTHER_PAYLOAD], "{msg}");
}

#[test]
fn another_caller_run_on_an_unscoped_key_is_a_leak_fault() {
    // scoped-despite-unscoped: scope [] declared, another caller runs.
    let mut p = IdemProfile::draft_default();
    p.scope = Vec::new();
    let m = IdemModel::new(&p);
    let r = req("POST", "/orders", "alice", "\"k\"", json!({"a": 1}));
    let s = after(&m, &r, &run(7, "alice", json!({"a": 1})));
    let bob = req("POST", "/orders", "bob", "\"k\"", json!({"a": 1}));
    let (clauses, msg) = blamed(judge(
        &s,
        &[(bob, run(8, "bob", json!({"a": 1})), w(20, 22, 30))],
    ));
    assert_eq!(clauses, vec![clause::NO_LEAK], "{msg}");
}

#[test]
fn another_caller_refused_while_a_run_is_in_flight_is_conforming() {
    // scope [] (lenient): another caller's request with the key, answered
    // 403 before the first completes.
    let mut p = IdemProfile::draft_default();
    p.scope = Vec::new();
    let m = IdemModel::new(&p);
    let body = json!({"sleepMs": 150});
    let slow = req("POST", "/orders/slow", "alice", "\"k\"", body.clone());
    let bob = req("POST", "/orders", "bob", "\"k\"", json!({"a": 1}));
    let items = vec![
        (slow, run(1, "alice", body), w(147, 150, 333)),
        (bob, refusal(403), w(147, 150, 173)),
    ];
    judge(std::slice::from_ref(&m), &items).unwrap();
}

#[test]
fn a_refusal_because_another_caller_holds_the_key_is_a_leak_fault() {
    // unscoped-caller: scope has caller, yet bob is refused 409 while
    // alice's request with the key is in flight.
    let m = IdemModel::new(&IdemProfile::draft_default());
    let body = json!({"sleepMs": 150});
    let slow = req("POST", "/orders/slow", "alice", "\"k\"", body.clone());
    let bob = req("POST", "/orders/slow", "bob", "\"k\"", body.clone());
    let items = vec![
        (slow, run(1, "alice", body), w(0, 3, 160)),
        (bob, refusal(409), w(0, 3, 10)),
    ];
    let (clauses, msg) = blamed(judge(std::slice::from_ref(&m), &items));
    assert_eq!(clauses, vec![clause::NO_LEAK], "{msg}");
}

#[test]
fn another_payload_given_a_stored_error_sooner_than_its_sleep_is_a_mismatch() {
    // no-fingerprint on the failing route: the second request (another
    // payload) leaves just before the first's answer comes back and gets
    // that answer replayed 7 ms later. The two overlap, so the model tries
    // each as the run: the second as the run is too quick for its sleepMs
    // (that choice alone is no verdict); the first as the run makes the
    // second a replay of another payload: the violation, whatever choice
    // is tried first.
    let m = IdemModel::new(&IdemProfile::draft_default());
    let fail = |item: &str| {
        let body = json!({"sleepMs": 450, "item": item});
        req("POST", "/orders/fail", "alice", "\"k\"", body)
    };
    let (a, b) = (fail("a"), fail("b"));
    let mut failed = run(1, "alice", json!({"sleepMs": 450, "item": "a"}));
    failed.status = 500;
    for first in [0, 1] {
        let mut items = vec![
            (a.clone(), failed.clone(), w(0, 2, 460)),
            (b.clone(), replayed(failed.clone()), w(455, 457, 462)),
        ];
        items.swap(0, first);
        let (clauses, msg) = blamed(judge(std::slice::from_ref(&m), &items));
        assert_eq!(clauses, vec![clause::MISMATCH], "{msg}");
    }
}
