//! The idem profile model (`idem_model.rs`, `idem_batch.rs`) against an app
//! written here from SPEC 10 alone: a discrete-event simulation of a
//! conforming layer (decides when a request arrives, runs the handler for
//! its `sleepMs`, keeps or frees the key, forgets it after `expiryMs`). Every
//! answer such an app gives, alone or overlapping, under any profile, must
//! be explained; the answers of the bugs SPEC 10 forbids must not, each
//! blamed on the clause it breaks.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use proptest::prelude::*;
use reqkey_model::idem_batch::{judge, judge_one};
use reqkey_model::idem_model::{
    clause, handler_of, EffectKey, IdemAnswer, IdemModel, IdemRequest, Judged, Window,
};
use reqkey_model::idem_profile::{
    key_of, Concurrent, Errors, Fingerprint, IdemProfile, KeySyntax, ScopeBy,
};
use serde_json::{json, Value};

// ---------------------------------------------------------------- the app

#[derive(Debug, Clone)]
struct Stored {
    print: Vec<u8>,
    status: u16,
    order: u64,
    caller: String,
    echo: Option<Value>,
    done_at: u64,
}

#[derive(Debug, Clone)]
enum Slot {
    InFlight {
        print: Vec<u8>,
        caller: String,
        waiters: Vec<usize>,
    },
    Done(Stored),
}

/// A conforming app, simulated: requests arrive at given times.
struct App {
    p: IdemProfile,
    slots: BTreeMap<Vec<u8>, Slot>,
    order: u64,
    effects: BTreeMap<EffectKey, u64>,
}

fn scoped(p: &IdemProfile, r: &IdemRequest, key: &[u8]) -> Vec<u8> {
    let part = |on: bool, s: &str| if on { s.to_owned() } else { String::new() };
    serde_json::to_vec(&json!([
        key,
        part(p.scoped_by(ScopeBy::Caller), &r.caller),
        part(p.scoped_by(ScopeBy::Method), &r.method),
        part(p.scoped_by(ScopeBy::Path), &r.path)
    ]))
    .unwrap()
}

fn print(p: &IdemProfile, body: &[u8]) -> Vec<u8> {
    match p.fingerprint {
        Fingerprint::None => Vec::new(),
        Fingerprint::Bytes => body.to_vec(),
        Fingerprint::Json => {
            let v: Value = serde_json::from_slice(body).unwrap();
            reqkey_model::canonical_json(&v).into_bytes()
        }
    }
}

fn refusal(status: u16) -> IdemAnswer {
    IdemAnswer {
        status,
        json: Some(json!({"title": "refused"})),
        order_header: None,
        replayed: false,
    }
}

impl App {
    fn new(p: &IdemProfile) -> Self {
        Self {
            p: p.clone(),
            slots: BTreeMap::new(),
            order: 1000,
            effects: BTreeMap::new(),
        }
    }

    fn replay(&self, s: &Stored) -> IdemAnswer {
        let mut j = json!({"order": s.order, "caller": s.caller});
        if let Some(e) = &s.echo {
            j["echo"] = e.clone();
        }
        IdemAnswer {
            status: s.status,
            json: Some(j),
            order_header: (s.status == 201).then(|| s.order.to_string()),
            replayed: self.p.replay_header.is_some(),
        }
    }

    fn forget_expired(&mut self, now: u64) {
        if let Some(e) = self.p.expiry_ms {
            self.slots
                .retain(|_, s| !matches!(s, Slot::Done(d) if now >= d.done_at + e));
        }
    }

    /// Serves `reqs` arriving at `arrive[i]`; answers with their times.
    fn serve(&mut self, reqs: &[IdemRequest], arrive: &[u64]) -> Vec<(IdemAnswer, u64)> {
        let mut out: Vec<Option<(IdemAnswer, u64)>> = vec![None; reqs.len()];
        // Events: (time, 0 = completion of i | 1 = arrival of i, i).
        let mut events: Vec<(u64, u8, usize)> =
            arrive.iter().enumerate().map(|(i, &t)| (t, 1, i)).collect();
        while !events.is_empty() {
            events.sort();
            let (now, kind, i) = events.remove(0);
            self.forget_expired(now);
            let r = &reqs[i];
            let h = handler_of(&r.method, &r.path, &r.body).unwrap();
            if kind == 0 {
                // Completion of run i.
                self.order += 1;
                let order = self.order;
                *self.effects.entry(r.effect_key()).or_default() += 1;
                let echo = (!h.fails()).then(|| serde_json::from_slice::<Value>(&r.body).unwrap());
                let stored = Stored {
                    print: print(&self.p, &r.body),
                    status: h.status(),
                    order,
                    caller: r.caller.clone(),
                    echo,
                    done_at: now,
                };
                let key = scoped(
                    &self.p,
                    r,
                    &key_of(r.key.as_ref().unwrap(), self.p.key_syntax).unwrap(),
                );
                let waiters = match self.slots.remove(&key) {
                    Some(Slot::InFlight { waiters, .. }) => waiters,
                    _ => Vec::new(),
                };
                let mut first = self.replay(&stored);
                first.replayed = false;
                out[i] = Some((first, now));
                for w in waiters {
                    out[w] = Some((self.replay(&stored), now));
                }
                if !(h.status() >= 400 && self.p.errors == Errors::Released) {
                    self.slots.insert(key, Slot::Done(stored));
                }
                continue;
            }
            let run = |events: &mut Vec<(u64, u8, usize)>| events.push((now + h.sleep_ms, 0, i));
            let Some(raw) = &r.key else {
                if self.p.key_required {
                    out[i] = Some((refusal(400), now));
                } else {
                    // A keyless run: no record.
                    self.order += 1;
                    *self.effects.entry(r.effect_key()).or_default() += 1;
                    out[i] = Some((
                        IdemAnswer {
                            status: h.status(),
                            json: Some(if h.fails() {
                                json!({"order": self.order, "caller": r.caller})
                            } else {
                                json!({"order": self.order, "caller": r.caller,
                                       "echo": serde_json::from_slice::<Value>(&r.body).unwrap()})
                            }),
                            order_header: (!h.fails()).then(|| self.order.to_string()),
                            replayed: false,
                        },
                        now + h.sleep_ms,
                    ));
                }
                continue;
            };
            let Some(k) = key_of(raw, self.p.key_syntax) else {
                out[i] = Some((refusal(self.p.invalid_key_status.unwrap()), now));
                continue;
            };
            let key = scoped(&self.p, r, &k);
            let pr = print(&self.p, &r.body);
            let compares = self.p.fingerprint != Fingerprint::None;
            match self.slots.get_mut(&key) {
                None => {
                    self.slots.insert(
                        key,
                        Slot::InFlight {
                            print: pr,
                            caller: r.caller.clone(),
                            waiters: Vec::new(),
                        },
                    );
                    run(&mut events);
                }
                Some(Slot::InFlight { caller, .. }) if *caller != r.caller => {
                    out[i] = Some((refusal(403), now));
                }
                Some(Slot::InFlight { print, waiters, .. }) => {
                    if compares && *print != pr {
                        out[i] = Some((refusal(self.p.mismatch_status.unwrap()), now));
                    } else if self.p.concurrent == Concurrent::Conflict {
                        out[i] = Some((refusal(self.p.concurrent_status.unwrap()), now));
                    } else {
                        waiters.push(i);
                    }
                }
                Some(Slot::Done(d)) if d.caller != r.caller => out[i] = Some((refusal(403), now)),
                Some(Slot::Done(d)) if compares && d.print != pr => {
                    out[i] = Some((refusal(self.p.mismatch_status.unwrap()), now))
                }
                Some(Slot::Done(d)) => {
                    let d = d.clone();
                    out[i] = Some((self.replay(&d), now));
                }
            }
        }
        out.into_iter().map(|o| o.unwrap()).collect()
    }
}

// ---------------------------------------------------------------- inputs

fn req(method: &str, path: &str, caller: &str, key: Option<&str>, body: Value) -> IdemRequest {
    IdemRequest {
        method: method.into(),
        path: path.into(),
        caller: caller.into(),
        key: key.map(|k| k.as_bytes().to_vec()),
        body: body.to_string().into_bytes(),
    }
}

fn arb_profile() -> impl Strategy<Value = IdemProfile> {
    (
        any::<bool>(),
        prop_oneof![
            Just(Fingerprint::None),
            Just(Fingerprint::Bytes),
            Just(Fingerprint::Json)
        ],
        any::<bool>(),
        any::<bool>(),
        prop::collection::vec(
            prop_oneof![
                Just(ScopeBy::Caller),
                Just(ScopeBy::Method),
                Just(ScopeBy::Path)
            ],
            0..3,
        ),
        prop_oneof![Just(None), (200u64..3000).prop_map(Some)],
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(req, fp, wait, released, mut scope, expiry, header, any_syntax)| {
                scope.sort();
                scope.dedup();
                let mut p = IdemProfile::draft_default();
                p.key_required = req;
                if any_syntax {
                    p.key_syntax = KeySyntax::Any;
                }
                p.fingerprint = fp;
                p.mismatch_status = (fp != Fingerprint::None).then_some(422);
                p.concurrent = if wait {
                    Concurrent::Wait
                } else {
                    Concurrent::Conflict
                };
                p.concurrent_status = (!wait).then_some(409);
                p.errors = if released {
                    Errors::Released
                } else {
                    Errors::Stored
                };
                p.scope = scope;
                p.expiry_ms = expiry;
                p.replay_header = header.then(|| "idempotent-replayed".to_owned());
                p
            },
        )
}

const KEYS: [Option<&str>; 4] = [None, Some("\"k0\""), Some("\"k1\""), Some("k0")];
const ROUTES: [(&str, &str); 5] = [
    ("POST", "/orders"),
    ("PUT", "/orders"),
    ("POST", "/payments"),
    ("POST", "/orders/fail"),
    ("POST", "/orders/slow"),
];

fn arb_request() -> impl Strategy<Value = IdemRequest> {
    (0..ROUTES.len(), 0..2usize, 0..KEYS.len(), 0..6usize).prop_map(|(r, c, k, b)| {
        let (m, path) = ROUTES[r];
        let body = match b {
            0 => json!({"item": "a", "n": 1, "sleepMs": 40}),
            1 => json!({"n": 1, "sleepMs": 40, "item": "a"}),
            2 => json!({"item": "b", "sleepMs": 40}),
            3 => json!({"item": "é 🦀", "sleepMs": 40}),
            // Not objects: the handler's own 4xx on every route.
            4 => json!(["a", {"sleepMs": 40}]),
            _ => json!("1"),
        };
        let mut rq = req(m, path, ["alice", "bob"][c], KEYS[k], body);
        if b == 1 {
            // The same JSON re-spaced: another byte string.
            rq.body = br#"{ "n": 1, "sleepMs": 40, "item": "a" }"#.to_vec();
        }
        rq
    })
}

/// A step of a program: a request alone, then a pause; or a burst of
/// copies arriving within a few ms of each other.
#[derive(Debug, Clone)]
enum Step {
    Alone(IdemRequest, u64),
    Burst(IdemRequest, usize, Vec<u64>),
}

fn arb_step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (arb_request(), prop_oneof![Just(5u64), 0..4000u64]).prop_map(|(r, pause)| Step::Alone(r, pause)),
        1 => (arb_request(), 2..6usize, prop::collection::vec(0..6u64, 6)).prop_map(|(r, n, d)| Step::Burst(r, n, d)),
    ]
}

fn effects_of(app: &App) -> Vec<(EffectKey, u64)> {
    app.effects.iter().map(|(k, v)| (k.clone(), *v)).collect()
}

/// Runs a program on the simulated app and judges every step.
fn judge_program(p: &IdemProfile, program: &[Step]) -> Result<(), String> {
    let mut app = App::new(p);
    let mut states = vec![IdemModel::new(p)];
    let mut now = 0u64;
    for step in program {
        let (reqs, arrive): (Vec<IdemRequest>, Vec<u64>) = match step {
            Step::Alone(r, _) => (vec![r.clone()], vec![now + 1]),
            Step::Burst(r, n, d) => (
                vec![r.clone(); *n],
                d.iter().take(*n).map(|d| now + 1 + d).collect(),
            ),
        };
        // Skip what the model does not judge (a malformed key when invalidKeyStatus is null).
        if reqs[0]
            .key
            .as_ref()
            .is_some_and(|k| key_of(k, p.key_syntax).is_none())
            && p.invalid_key_status.is_none()
        {
            continue;
        }
        let answers = app.serve(&reqs, &arrive);
        let items: Vec<_> = reqs
            .iter()
            .zip(&answers)
            .zip(&arrive)
            .map(|((r, (a, at)), arr)| {
                (
                    r.clone(),
                    a.clone(),
                    Window {
                        sent_ms: now,
                        arrived_by_ms: *arr,
                        answered_ms: *at + 1,
                    },
                )
            })
            .collect();
        states = judge(&states, &items).map_err(|e| format!("{e:?}\n  items {items:?}"))?;
        now = answers.iter().map(|(_, t)| t + 2).max().unwrap_or(now);
        if let Step::Alone(_, pause) = step {
            now += pause;
        }
    }
    let listed = effects_of(&app);
    if !states
        .iter()
        .any(|s| s.check_effects(&listed, |_| true).is_ok())
    {
        return Err(format!("effects {listed:?} explained by no state"));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn every_answer_of_a_conforming_app_is_explained(p in arb_profile(), program in prop::collection::vec(arb_step(), 1..10)) {
        if let Err(e) = judge_program(&p, &program) {
            prop_assert!(false, "{}", e);
        }
    }

    #[test]
    fn a_replay_turned_into_a_run_is_at_most_once_broken(p in arb_profile(), r in arb_request()) {
        prop_assume!(r.key.as_ref().is_some_and(|k| key_of(k, p.key_syntax).is_some()));
        let mut app = App::new(&p);
        let model = IdemModel::new(&p);
        let (a, t) = app.serve(std::slice::from_ref(&r), &[1]).remove(0);
        let w = Window { sent_ms: 0, arrived_by_ms: 1, answered_ms: t + 1 };
        let next = judge_one(&model, &r, &a, w).unwrap();
        let (b, t2) = app.serve(std::slice::from_ref(&r), &[t + 5]).remove(0);
        let w2 = Window { sent_ms: t + 3, arrived_by_ms: t + 5, answered_ms: t2 + 1 };
        prop_assert!(judge(&next, &[(r.clone(), b.clone(), w2)]).is_ok());
        // The same retry, run again: a new order.
        let handler = handler_of(&r.method, &r.path, &r.body).unwrap();
        prop_assume!(!(handler.fails() && p.errors == Errors::Released));
        let mut ran = b.clone();
        ran.status = a.status;
        ran.json = Some(json!({"order": 99_999, "caller": r.caller}));
        ran.replayed = false;
        // A run takes its handler's sleepMs (a quicker one has no verdict).
        let w3 = Window { answered_ms: w2.answered_ms.max(t + 5 + handler.sleep_ms + 1), ..w2 };
        match judge(&next, &[(r.clone(), ran, w3)]) {
            Err(Judged::Violation(v)) => prop_assert_eq!(v.clause, clause::AT_MOST_ONCE),
            other => prop_assert!(false, "{:?}", other),
        }
    }
}

// ---------------------------------------------------------------- cases

fn w(sent: u64, arrived: u64, answered: u64) -> Window {
    Window {
        sent_ms: sent,
        arrived_by_ms: arrived,
        answered_ms: answered,
    }
}

fn run(status: u16, order: u64, caller: &str, echo: Option<Value>) -> IdemAnswer {
    let mut j = json!({"order": order, "caller": caller});
    if let Some(e) = echo {
        j["echo"] = e;
    }
    IdemAnswer {
        status,
        json: Some(j),
        order_header: (status == 201).then(|| order.to_string()),
        replayed: false,
    }
}

fn replayed(mut a: IdemAnswer) -> IdemAnswer {
    a.replayed = true;
    a
}

fn clause_of(r: Result<Vec<IdemModel>, Judged>) -> &'static str {
    match r {
        Err(Judged::Violation(v)) => v.clause,
        other => panic!("expected a violation, got {other:?}"),
    }
}

#[test]
fn expiry_is_judged_before_inside_and_past_its_margin() {
    let mut p = IdemProfile::draft_default();
    p.expiry_ms = Some(1000);
    let m = IdemModel::new(&p);
    let r = req("POST", "/orders", "alice", Some("\"k\""), json!({"a": 1}));
    let first = run(201, 7, "alice", Some(json!({"a": 1})));
    let s = judge_one(&m, &r, &first, w(0, 2, 10)).unwrap();
    // Before expiry: replayed; a run is a double effect.
    assert!(judge(
        &s,
        &[(r.clone(), replayed(first.clone()), w(500, 502, 510))]
    )
    .is_ok());
    assert_eq!(
        clause_of(judge(
            &s,
            &[(
                r.clone(),
                run(201, 8, "alice", Some(json!({"a": 1}))),
                w(500, 502, 510)
            )]
        )),
        clause::AT_MOST_ONCE
    );
    // Inside the margin: either.
    assert!(judge(
        &s,
        &[(r.clone(), replayed(first.clone()), w(1200, 1202, 1210))]
    )
    .is_ok());
    assert!(judge(
        &s,
        &[(
            r.clone(),
            run(201, 8, "alice", Some(json!({"a": 1}))),
            w(1200, 1202, 1210)
        )]
    )
    .is_ok());
    // Past it: forgotten; a replay breaks expiry.
    assert_eq!(
        clause_of(judge(
            &s,
            &[(r.clone(), replayed(first.clone()), w(1600, 1602, 1610))]
        )),
        clause::EXPIRY
    );
    // Never, under expiryMs null, even a long time after.
    p.expiry_ms = None;
    let m = IdemModel::new(&p);
    let s = judge_one(&m, &r, &first, w(0, 2, 10)).unwrap();
    assert!(judge(
        &s,
        &[(
            r.clone(),
            replayed(first.clone()),
            w(900_000, 900_002, 900_010)
        )]
    )
    .is_ok());
    assert_eq!(
        clause_of(judge(
            &s,
            &[(
                r.clone(),
                run(201, 8, "alice", Some(json!({"a": 1}))),
                w(900_000, 900_002, 900_010)
            )]
        )),
        clause::AT_MOST_ONCE
    );
}

#[test]
fn each_replay_fault_names_its_clause() {
    let p = IdemProfile::draft_default();
    let m = IdemModel::new(&p);
    let r = req("POST", "/orders", "alice", Some("\"k\""), json!({"a": 1}));
    let first = run(201, 7, "alice", Some(json!({"a": 1})));
    let s = judge_one(&m, &r, &first, w(0, 2, 10)).unwrap();
    let later = w(20, 22, 30);
    let mut a = replayed(first.clone());
    a.status = 200;
    assert_eq!(
        clause_of(judge(&s, &[(r.clone(), a, later)])),
        clause::REPLAY
    );
    let mut a = replayed(first.clone());
    a.order_header = None;
    assert_eq!(
        clause_of(judge(&s, &[(r.clone(), a, later)])),
        clause::REPLAY
    );
    assert_eq!(
        clause_of(judge(&s, &[(r.clone(), first.clone(), later)])),
        clause::REPLAY_HEADER
    );
    // Another payload: mismatchStatus, with a JSON body.
    let other = req("POST", "/orders", "alice", Some("\"k\""), json!({"a": 2}));
    assert!(judge(&s, &[(other.clone(), refusal(422), later)]).is_ok());
    assert_eq!(
        clause_of(judge(
            &s,
            &[(other.clone(), replayed(first.clone()), later)]
        )),
        clause::MISMATCH
    );
    let mut bare = refusal(422);
    bare.json = None;
    assert_eq!(
        clause_of(judge(&s, &[(other, bare, later)])),
        clause::ERROR_BODY
    );
    // Reordered members: the same JSON payload, replayed.
    let mut same = r.clone();
    same.body = br#"{ "a" : 1 }"#.to_vec();
    assert!(judge(&s, &[(same.clone(), replayed(first.clone()), later)]).is_ok());
    assert_eq!(
        clause_of(judge(&s, &[(same, refusal(422), later)])),
        clause::EQUIVALENCE
    );
    // Another caller (scoped by caller): runs on its own; a replay leaks.
    let bob = req("POST", "/orders", "bob", Some("\"k\""), json!({"a": 1}));
    assert!(judge(
        &s,
        &[(
            bob.clone(),
            run(201, 8, "bob", Some(json!({"a": 1}))),
            later
        )]
    )
    .is_ok());
    assert_eq!(
        clause_of(judge(&s, &[(bob, replayed(first.clone()), later)])),
        clause::NO_LEAK
    );
    // Another path (scoped by path): runs; a replay is a scope fault.
    let pay = req("POST", "/payments", "alice", Some("\"k\""), json!({"a": 1}));
    assert_eq!(
        clause_of(judge(&s, &[(pay, replayed(first), later)])),
        clause::SCOPE
    );
}

#[test]
fn keys_missing_and_malformed_follow_the_profile() {
    let mut p = IdemProfile::draft_default();
    let m = IdemModel::new(&p);
    let none = req("POST", "/orders", "alice", None, json!({"a": 1}));
    assert!(judge_one(&m, &none, &refusal(400), w(0, 1, 2)).is_ok());
    assert_eq!(
        clause_of(judge_one(
            &m,
            &none,
            &run(201, 1, "alice", None),
            w(0, 1, 2)
        )),
        clause::MISSING_REQUIRED
    );
    let bare = req("POST", "/orders", "alice", Some("k"), json!({"a": 1}));
    assert!(judge_one(&m, &bare, &refusal(400), w(0, 1, 2)).is_ok());
    assert_eq!(
        clause_of(judge_one(
            &m,
            &bare,
            &run(201, 1, "alice", None),
            w(0, 1, 2)
        )),
        clause::INVALID
    );
    p.key_required = false;
    let m = IdemModel::new(&p);
    let s = judge_one(
        &m,
        &none,
        &run(201, 1, "alice", Some(json!({"a": 1}))),
        w(0, 1, 2),
    )
    .unwrap();
    // A second keyless request runs again; a replay of the first is a fault.
    assert!(judge(
        &s,
        &[(
            none.clone(),
            run(201, 2, "alice", Some(json!({"a": 1}))),
            w(3, 4, 5)
        )]
    )
    .is_ok());
    assert_eq!(
        clause_of(judge(
            &s,
            &[(
                none,
                replayed(run(201, 1, "alice", Some(json!({"a": 1})))),
                w(3, 4, 5)
            )]
        )),
        clause::MISSING_OPTIONAL
    );
    p.key_syntax = KeySyntax::Any;
    let m = IdemModel::new(&p);
    assert!(judge_one(
        &m,
        &bare,
        &run(201, 1, "alice", Some(json!({"a": 1}))),
        w(0, 1, 2)
    )
    .is_ok());
}

/// A burst of `n` copies sent at 0, arriving by 5 ms.
fn burst(r: &IdemRequest, answers: &[(IdemAnswer, u64)]) -> Vec<(IdemRequest, IdemAnswer, Window)> {
    answers
        .iter()
        .map(|(a, t)| (r.clone(), a.clone(), w(0, 5, *t)))
        .collect()
}

#[test]
fn bursts_are_judged_by_every_order_real_time_allows() {
    let p = IdemProfile::draft_default();
    let m = IdemModel::new(&p);
    let r = req(
        "POST",
        "/orders/slow",
        "alice",
        Some("\"k\""),
        json!({"sleepMs": 600}),
    );
    let ok = run(201, 1, "alice", Some(json!({"sleepMs": 600})));
    // One run, the rest refused 409 while it ran: conforming.
    let good = burst(
        &r,
        &[(ok.clone(), 610), (refusal(409), 6), (refusal(409), 7)],
    );
    assert!(judge(std::slice::from_ref(&m), &good).is_ok());
    // Two runs that overlapped (check-then-set): at most once is broken.
    let racy = burst(
        &r,
        &[
            (ok.clone(), 610),
            (run(201, 2, "alice", Some(json!({"sleepMs": 600}))), 612),
            (refusal(409), 7),
        ],
    );
    assert_eq!(
        clause_of(judge(std::slice::from_ref(&m), &racy)),
        clause::AT_MOST_ONCE
    );
    // A replay under conflict while the first was still in flight cannot be.
    let early = burst(&r, &[(ok.clone(), 610), (replayed(ok.clone()), 8)]);
    assert!(judge(std::slice::from_ref(&m), &early).is_err());
    // Declared 429, refused 409: the declared status is what counts.
    let mut p429 = p.clone();
    p429.concurrent_status = Some(429);
    let m429 = IdemModel::new(&p429);
    assert_eq!(
        clause_of(judge(std::slice::from_ref(&m429), &good)),
        clause::CONCURRENT
    );
}

#[test]
fn a_slow_failing_handler_frees_its_key_only_for_later_arrivals() {
    let mut p = IdemProfile::draft_default();
    p.concurrent = Concurrent::Wait;
    p.concurrent_status = None;
    p.errors = Errors::Released;
    let m = IdemModel::new(&p);
    let r = req(
        "POST",
        "/orders/fail",
        "alice",
        Some("\"k\""),
        json!({"sleepMs": 600}),
    );
    let e1 = run(500, 1, "alice", None);
    // Waiters that arrived while it ran get its 500 replayed.
    let good = burst(
        &r,
        &[
            (e1.clone(), 610),
            (replayed(e1.clone()), 611),
            (replayed(e1.clone()), 611),
        ],
    );
    let s = judge(std::slice::from_ref(&m), &good).unwrap();
    // Waiters that ran once it failed (fastapi-idempotency): they arrived before the release.
    let e2 = run(500, 2, "alice", None);
    let e3 = run(500, 3, "alice", None);
    let bad = burst(
        &r,
        &[(e1.clone(), 610), (e2.clone(), 1215), (e3.clone(), 1820)],
    );
    assert_eq!(
        clause_of(judge(std::slice::from_ref(&m), &bad)),
        clause::AT_MOST_ONCE
    );
    // The same answers from requests that could have arrived after each release: conforming.
    let spread: Vec<_> = [(e1, 0, 610), (e2, 611, 1215), (e3, 1216, 1820)]
        .into_iter()
        .map(|(a, sent, t)| (r.clone(), a, w(sent, sent + 2, t)))
        .collect();
    assert!(judge(std::slice::from_ref(&m), &spread).is_ok());
    // After the burst the key is free: a retry runs again.
    let retry = req(
        "POST",
        "/orders/fail",
        "alice",
        Some("\"k\""),
        json!({"sleepMs": 600}),
    );
    assert!(judge(
        &s,
        &[(retry, run(500, 9, "alice", None), w(700, 702, 1310))]
    )
    .is_ok());
}

#[test]
fn a_body_that_is_not_an_object_is_the_handlers_own_4xx_and_follows_errors() {
    // Every contract route refuses it at once, counting its run: 422.
    for body in [
        &b"[1]"[..],
        b"\"a\"",
        b"1",
        b"true",
        b"null",
        b"not json",
        b"",
    ] {
        for (m, path) in ROUTES {
            let h = handler_of(m, path, body).unwrap();
            assert_eq!(
                (h.status(), h.sleep_ms, h.fails()),
                (422, 0, true),
                "{m} {path}"
            );
        }
        assert!(handler_of("POST", "/elsewhere", body).is_none());
    }
    let r = req("POST", "/orders", "alice", Some("\"k\""), json!(["doomed"]));
    let first = run(422, 7, "alice", None);
    let later = w(20, 22, 30);
    // Stored: the refusal is replayed (same order); a second run is a
    // double effect; the key stays taken against another payload.
    let p = IdemProfile::draft_default();
    assert_eq!(p.errors, Errors::Stored);
    let s = judge_one(&IdemModel::new(&p), &r, &first, w(0, 2, 10)).unwrap();
    assert!(judge(&s, &[(r.clone(), replayed(first.clone()), later)]).is_ok());
    assert_eq!(
        clause_of(judge(&s, &[(r.clone(), run(422, 8, "alice", None), later)])),
        clause::AT_MOST_ONCE
    );
    let object = req(
        "POST",
        "/orders",
        "alice",
        Some("\"k\""),
        json!({"item": "fixed"}),
    );
    assert!(judge(&s, &[(object.clone(), refusal(422), later)]).is_ok());
    assert_eq!(
        clause_of(judge(
            &s,
            &[(
                object.clone(),
                run(201, 8, "alice", Some(json!({"item": "fixed"}))),
                later
            )]
        )),
        clause::MISMATCH
    );
    // Released: a retry runs again (its own 422); the refusal replayed
    // (a layer that keeps a handler's 4xx) breaks the errors rule; the
    // key then takes an object as a first request.
    let mut p = IdemProfile::draft_default();
    p.errors = Errors::Released;
    let s = judge_one(&IdemModel::new(&p), &r, &first, w(0, 2, 10)).unwrap();
    let s2 = judge(&s, &[(r.clone(), run(422, 8, "alice", None), later)]).unwrap();
    assert_eq!(
        clause_of(judge(&s, &[(r.clone(), replayed(first.clone()), later)])),
        clause::REPLAY_ERRORS
    );
    assert!(judge(
        &s2,
        &[(
            object.clone(),
            run(201, 9, "alice", Some(json!({"item": "fixed"}))),
            w(40, 42, 50)
        )]
    )
    .is_ok());
    assert_eq!(
        clause_of(judge(&s2, &[(object, refusal(422), w(40, 42, 50))])),
        clause::REPLAY_ERRORS
    );
}

#[test]
fn effect_counts_must_match_the_runs_answered() {
    let p = IdemProfile::draft_default();
    let m = IdemModel::new(&p);
    let r = req("POST", "/orders", "alice", Some("\"k\""), json!({"a": 1}));
    let s = judge_one(
        &m,
        &r,
        &run(201, 1, "alice", Some(json!({"a": 1}))),
        w(0, 1, 2),
    )
    .unwrap()
    .remove(0);
    let k = r.effect_key();
    assert!(s.check_effects(&[(k.clone(), 1)], |_| true).is_ok());
    assert_eq!(
        s.check_effects(&[(k.clone(), 2)], |_| true)
            .unwrap_err()
            .clause,
        clause::AT_MOST_ONCE
    );
    assert_eq!(
        s.check_effects(&[], |_| true).unwrap_err().clause,
        clause::RECORDED
    );
    let mut other = k.clone();
    other.caller = "zed".into();
    assert!(s
        .check_effects(&[(k.clone(), 1), (other.clone(), 3)], |c| c != "zed")
        .is_ok());
    assert_eq!(
        s.check_effects(&[(k, 1), (other, 3)], |_| true)
            .unwrap_err()
            .clause,
        clause::AT_MOST_ONCE
    );
}
