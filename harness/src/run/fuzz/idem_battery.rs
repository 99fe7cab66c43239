//! The fixed programs every idem fuzz run sends under every profile (the
//! battery), before its generated ones.
//!
//! Generated programs draw a burst now and then; whether a race shows then
//! depends on the draw, and a profile that makes the hand-written scenarios
//! inapplicable (`concurrentStatus` 429, `errors: released`, `lockMs`
//! 60000 made every burst scenario skip) must not leave at-most-once
//! (SPEC 10 `[[idem.effect.at-most-once]]`, the one requirement of every
//! profile) unjudged. So each run also sends, whatever the profile:
//!
//! - [`succeeding_bursts`] bursts of [`BURST_COPIES`] identical requests on
//!   the succeeding handler, each with a fresh key: enough that a race
//!   showing in one burst in [`RACE_RATE_ONE_IN`] is caught with
//!   [`CONFIDENCE_PERMILLE`]‰ confidence (the count is derived from those
//!   two, and every report states it);
//! - [`FAILING_BURSTS`] bursts on the failing handler slowed to
//!   `SLOW_FAIL_MS` (longer than the arrival bound, so every duplicate
//!   arrived before the first answer and none may run, `errors: released`
//!   included);
//! - a duplicate sent while a handler outlives the declared `lockMs` (or,
//!   under `lockMs: null`, a few hundred ms);
//! - the two keys of a case in every form (`key_forms.rs`), the first's
//!   case twin and its twin with one blank more, one after the other:
//!   each must run (the long ones differ only in their last byte, so a
//!   store that truncates them replays the second; one that folds case
//!   or collapses blanks replays a twin);
//! - one key retried with the same JSON in other bytes, then with another
//!   value, and a second key with the same text as a number and as a
//!   string ([`fingerprint_program`]): each answered as `fingerprint` and
//!   `mismatchStatus` say (a layer that compares bytes where it declares
//!   JSON, or JSON where it declares bytes, or nothing, is caught by every
//!   run, whatever the generated programs draw);
//! - one key with a body the handler refuses with its own 4xx (JSON of
//!   another type than an object), retried, retried with the same JSON in
//!   other bytes, then sent with an object and retried; a second key with
//!   a number, then a string of the same text ([`refusal_program`]): under
//!   `errors: stored` the refusal is replayed and the key stays taken,
//!   under `released` every retry runs again and the object runs (a layer
//!   that frees the key after a 5xx but keeps a 4xx is caught by every
//!   run, not only by the failing route's 500);
//! - under a numeric `expiryMs` the harness can wait out, a retry just
//!   before it and a burst well after it; under `expiryMs: null`, a retry
//!   after [`NEVER_EXPIRES_SPAN_MS`].
//!
//! Each is judged like any program (`run/fuzz/idem.rs`, the idem model).
//! A failing one becomes a scenario that repeats as many times as the
//! battery sent its kind, so that replaying it has the same power.

use crate::run::fuzz::idem_program::{
    key_header, outlived_lock, Pause, Req, Step, MAX_EXPIRY_WAIT_MS,
};
use reqkey_model::idem_profile::{key_of, IdemProfile};

/// Copies in one burst.
pub const BURST_COPIES: usize = 8;
/// The race rate the battery is sized to catch: one burst in this many.
pub const RACE_RATE_ONE_IN: u32 = 10;
/// The confidence it catches such a race with, per mille.
pub const CONFIDENCE_PERMILLE: u32 = 999;
/// Bursts on the slow failing handler.
pub const FAILING_BURSTS: u32 = 4;
/// Under `expiryMs: null`, how long after a key completed it is retried.
pub const NEVER_EXPIRES_SPAN_MS: u64 = 3_000;
/// How long before `expiryMs` the "just before" retry leaves: the arrival
/// bound and a margin (its arrival must fall before expiry).
const BEFORE_EXPIRY_MS: u64 = crate::run::fuzz::idem_program::ARRIVAL_SLACK_MS + 200;

/// The bursts that catch a race of rate `1/one_in` with `permille`‰
/// confidence: the least `n` with `(1 - 1/one_in)^n <= 1 - permille/1000`.
pub fn bursts_for(one_in: u32, permille: u32) -> u32 {
    let miss = 1.0 - f64::from(one_in.max(2)).recip();
    let allowed = 1.0 - f64::from(permille.min(999)) / 1000.0;
    let n = (allowed.ln() / miss.ln()).ceil();
    if n.is_finite() && n >= 1.0 {
        n as u32
    } else {
        1
    }
}

/// The battery's bursts on the succeeding handler.
pub fn succeeding_bursts() -> u32 {
    bursts_for(RACE_RATE_ONE_IN, CONFIDENCE_PERMILLE)
}

/// What kind of probe a program of the battery is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeKind {
    SucceedingBurst,
    FailingBurst,
    PastLock,
    Expiry,
    KeyForms,
    Fingerprint,
    HandlerRefusal,
}

impl ProbeKind {
    pub fn name(self) -> &'static str {
        match self {
            Self::SucceedingBurst => "bursts",
            Self::FailingBurst => "failing bursts",
            Self::PastLock => "past the lock",
            Self::Expiry => "around expiry",
            Self::KeyForms => "keys in every form",
            Self::Fingerprint => "payloads compared",
            Self::HandlerRefusal => "a handler's own 4xx",
        }
    }
}

/// One program of the battery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    pub kind: ProbeKind,
    pub program: Vec<Step>,
    /// How many programs of its kind the battery sends (a scenario written
    /// from it repeats that often).
    pub repeat: u32,
}

const ORDER: Req = Req {
    route: 0,
    caller: 0,
    key: 1,
    payload: 0,
    style: 0,
    spelling: 0,
};
const SLOW_FAIL: Req = Req {
    route: 5,
    caller: 0,
    key: 1,
    payload: 0,
    style: 0,
    spelling: 0,
};

/// The `i`th burst's request: `req` with its key in the `i`th style and
/// its name in the `i`th spelling, and every other burst's key in the
/// other spelling where the declared syntax takes that as a key too (bare
/// under `any`): an app racy only for one spelling of a key meets bursts
/// of both (issue 56).
fn varied(req: Req, i: usize, profile: &IdemProfile) -> Req {
    let style = crate::run::fuzz::key_forms::KeyStyle::of(i);
    let other = key_header(3, style, "t", profile.key_syntax)
        .is_some_and(|k| key_of(k.as_bytes(), profile.key_syntax).is_some());
    Req {
        style: i,
        spelling: i,
        key: if other && i % 2 == 1 { 3 } else { req.key },
        ..req
    }
}

/// The battery under `profile`, in the order it is sent.
pub fn battery(profile: &IdemProfile) -> Vec<Probe> {
    let mut out = Vec::new();
    let n = succeeding_bursts();
    for i in 0..n {
        out.push(Probe {
            kind: ProbeKind::SucceedingBurst,
            program: vec![Step::Burst {
                req: varied(ORDER, i as usize, profile),
                copies: BURST_COPIES,
            }],
            repeat: n,
        });
    }
    for i in 0..FAILING_BURSTS {
        out.push(Probe {
            kind: ProbeKind::FailingBurst,
            program: vec![Step::Burst {
                req: varied(SLOW_FAIL, i as usize, profile),
                copies: BURST_COPIES,
            }],
            repeat: FAILING_BURSTS,
        });
    }
    if profile.lock_ms.is_none() || outlived_lock(profile).is_some() {
        out.push(Probe {
            kind: ProbeKind::PastLock,
            program: vec![Step::PastLock(ORDER)],
            repeat: 1,
        });
    }
    let expiry = match profile.expiry_ms {
        None => Some(vec![
            Step::Send(ORDER),
            Step::Pause(Pause::Short(NEVER_EXPIRES_SPAN_MS)),
            Step::Again { back: 0 },
        ]),
        Some(e) if e <= MAX_EXPIRY_WAIT_MS => Some(vec![
            Step::Send(ORDER),
            Step::Pause(Pause::Short(e.saturating_sub(BEFORE_EXPIRY_MS))),
            Step::Again { back: 0 },
            Step::Pause(Pause::PastExpiry),
            Step::Burst {
                req: ORDER,
                copies: BURST_COPIES / 2,
            },
        ]),
        Some(_) => None,
    };
    let forms = crate::run::fuzz::key_forms::KeyStyle::ALL.len();
    out.push(Probe {
        kind: ProbeKind::KeyForms,
        program: (0..forms)
            .flat_map(|style| {
                [1, 2, 4, 6].map(|key| {
                    Step::Send(Req {
                        key,
                        style,
                        spelling: style + key,
                        ..ORDER
                    })
                })
            })
            .collect(),
        repeat: 1,
    });
    out.push(Probe {
        kind: ProbeKind::Fingerprint,
        program: fingerprint_program(),
        repeat: 1,
    });
    out.push(Probe {
        kind: ProbeKind::HandlerRefusal,
        program: refusal_program(),
        repeat: 1,
    });
    if let Some(program) = expiry {
        out.push(Probe {
            kind: ProbeKind::Expiry,
            program,
            repeat: 1,
        });
    }
    out
}

/// The payload probe: the first key with payload `a`, again with `a`
/// reordered and re-spaced (equal as JSON, not as bytes), again with `b`
/// (another value); the second key with `{"item":1}`, again with
/// `{"item":"1"}` (the same text as a number and as a string: another
/// value under every fingerprint). One after the other, each after the
/// previous answer, so every answer the model allows is fixed by the
/// profile alone.
pub fn fingerprint_program() -> Vec<Step> {
    use crate::run::fuzz::idem_program::PAYLOADS;
    [(1, 0), (1, 1), (1, 2), (2, PAYLOADS), (2, PAYLOADS + 1)]
        .map(|(key, payload)| {
            Step::Send(Req {
                key,
                payload,
                ..ORDER
            })
        })
        .to_vec()
}

/// The handler-refusal probe: the first key with a top-level array (the
/// handler counts its run and refuses it, its own 4xx), again, again with
/// the array in other bytes, then with an object, and again; the second
/// key with `1`, then `"1"` (both refused by the handler; two payloads
/// under every fingerprint). One after the other, each after the previous
/// answer: what `errors` says of a 4xx decides every answer after the
/// first.
pub fn refusal_program() -> Vec<Step> {
    use crate::run::fuzz::idem_program::FIRST_TOP_LEVEL as TOP;
    let send = |key: usize, payload: usize| {
        Step::Send(Req {
            key,
            payload,
            ..ORDER
        })
    };
    vec![
        send(1, TOP),
        Step::Again { back: 0 },
        send(1, TOP + 1),
        send(1, 0),
        Step::Again { back: 0 },
        send(2, TOP + 3),
        send(2, TOP + 4),
    ]
}

/// What the battery sends and the race rate it catches, one line for every
/// report.
pub fn power_line() -> String {
    let permille = CONFIDENCE_PERMILLE;
    format!(
        "{} bursts of {BURST_COPIES} on a succeeding handler (a race in 1 of {RACE_RATE_ONE_IN} bursts caught with {}.{}% confidence), {FAILING_BURSTS} on a slow failing one",
        succeeding_bursts(),
        permille / 10,
        permille % 10
    )
}

/// A declared profile field a fuzz pass judged (issue 54): its programs
/// sent requests whose allowed answers the model reads from that field,
/// and got a verdict on them (pass or fail). `up_to_ms` where the field
/// promises something without end (`lockMs` or `expiryMs` null) and the
/// pass judged it only that far; absent where it judged the declared value
/// itself. Every report's "declared fields nothing judged" reads this
/// beside the scenarios (`report/record.rs`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JudgedField {
    pub field: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub up_to_ms: Option<u64>,
}

impl JudgedField {
    fn at_value(field: &str) -> Self {
        Self {
            field: field.to_owned(),
            up_to_ms: None,
        }
    }

    fn up_to(field: &str, ms: u64) -> Self {
        Self {
            field: field.to_owned(),
            up_to_ms: Some(ms),
        }
    }
}

/// Adds `more` to `into`, each field once at the furthest reach seen (its
/// declared value outranks any "up to").
pub fn add_judged(into: &mut Vec<JudgedField>, more: Vec<JudgedField>) {
    for f in more {
        match into.iter_mut().find(|g| g.field == f.field) {
            Some(g) => {
                g.up_to_ms = match (g.up_to_ms, f.up_to_ms) {
                    (None, _) | (_, None) => None,
                    (Some(a), Some(b)) => Some(a.max(b)),
                }
            }
            None => into.push(f),
        }
    }
}

/// What a `PastLock` step judges of `lockMs` under `profile`: a numeric
/// lock it outlives, at its value; `null` (held until completion), up to
/// the moment the duplicate leaves; a lock too long to outlive, nothing.
fn lock_judged(profile: &IdemProfile) -> Option<JudgedField> {
    use crate::run::fuzz::idem_program::UNDECLARED_LOCK_DUP_MS;
    match (profile.lock_ms, outlived_lock(profile)) {
        (None, _) => Some(JudgedField::up_to("lockMs", UNDECLARED_LOCK_DUP_MS)),
        (Some(_), Some(_)) => Some(JudgedField::at_value("lockMs")),
        (Some(_), None) => None,
    }
}

impl ProbeKind {
    /// The declared fields a probe of this kind judges under `profile`
    /// (its keys are written as `keySyntax` admits them; a burst is
    /// answered as `concurrent` and `concurrentStatus` say; a failing one
    /// as `errors` says; see the module doc for the timing probes).
    pub fn judges(self, profile: &IdemProfile) -> Vec<JudgedField> {
        let mut out = vec![JudgedField::at_value("keySyntax")];
        match self {
            Self::SucceedingBurst => {
                out.push(JudgedField::at_value("concurrent"));
                out.push(JudgedField::at_value("concurrentStatus"));
            }
            Self::FailingBurst => {
                out.push(JudgedField::at_value("concurrent"));
                out.push(JudgedField::at_value("concurrentStatus"));
                out.push(JudgedField::at_value("errors"));
            }
            Self::PastLock => out.extend(lock_judged(profile)),
            Self::KeyForms => {}
            Self::Fingerprint => {
                out.push(JudgedField::at_value("fingerprint"));
                out.push(JudgedField::at_value("mismatchStatus"));
            }
            Self::HandlerRefusal => {
                out.push(JudgedField::at_value("errors"));
                out.push(JudgedField::at_value("fingerprint"));
                out.push(JudgedField::at_value("mismatchStatus"));
            }
            Self::Expiry => out.push(match profile.expiry_ms {
                None => JudgedField::up_to("expiryMs", NEVER_EXPIRES_SPAN_MS),
                Some(_) => JudgedField::at_value("expiryMs"),
            }),
        }
        out
    }
}

/// The declared fields the idem fuzzer's generated programs judge under
/// `profile` (the domain of `run/fuzz/idem_program.rs`): requests without
/// a key, keys in every spelling (bare, quoted, upper-case, empty, with a
/// blank), payloads equal as JSON and not as bytes and different ones, two
/// callers and three routes, replays, bursts and batches on succeeding and
/// failing handlers, duplicates past the lock; pauses past `expiryMs` only
/// with `long_pauses` (a certification's pass has none). Never `durable`
/// (nothing restarts the app).
pub fn generated_judges(profile: &IdemProfile, long_pauses: u32) -> Vec<JudgedField> {
    use crate::run::fuzz::idem_program::NEVER_EXPIRES_SPAN_MS as PROGRAM_NEVER_EXPIRES_MS;
    let mut out: Vec<JudgedField> = [
        "keyRequired",
        "keySyntax",
        "invalidKeyStatus",
        "fingerprint",
        "mismatchStatus",
        "concurrent",
        "concurrentStatus",
        "errors",
        "scope",
        "replayHeader",
    ]
    .into_iter()
    .map(JudgedField::at_value)
    .collect();
    out.extend(lock_judged(profile));
    if long_pauses > 0 {
        match profile.expiry_ms {
            None => out.push(JudgedField::up_to("expiryMs", PROGRAM_NEVER_EXPIRES_MS)),
            Some(e) if e <= MAX_EXPIRY_WAIT_MS => out.push(JudgedField::at_value("expiryMs")),
            Some(_) => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_burst_count_reaches_the_stated_confidence_and_no_further() {
        let n = succeeding_bursts();
        let miss = |k: u32| 0.9f64.powi(k as i32);
        assert!(miss(n) <= 0.001, "{n}: {}", miss(n));
        assert!(miss(n - 1) > 0.001, "{n} is more than needed");
        assert_eq!(bursts_for(10, 950), 29);
        assert_eq!(bursts_for(2, 500), 1);
    }

    #[test]
    fn each_probe_says_which_declared_fields_it_judged_and_how_far() {
        let mut p = IdemProfile::draft_default();
        p.lock_ms = None;
        p.expiry_ms = None;
        let lock = ProbeKind::PastLock.judges(&p);
        assert!(lock.contains(&JudgedField::up_to(
            "lockMs",
            crate::run::fuzz::idem_program::UNDECLARED_LOCK_DUP_MS
        )));
        let expiry = ProbeKind::Expiry.judges(&p);
        assert!(expiry.contains(&JudgedField::up_to("expiryMs", NEVER_EXPIRES_SPAN_MS)));
        p.lock_ms = Some(500);
        p.expiry_ms = Some(2_000);
        assert!(ProbeKind::PastLock
            .judges(&p)
            .contains(&JudgedField::at_value("lockMs")));
        assert!(ProbeKind::Expiry
            .judges(&p)
            .contains(&JudgedField::at_value("expiryMs")));
        // A lock too long to outlive is judged by no probe.
        p.lock_ms = Some(60_000);
        assert!(!ProbeKind::PastLock
            .judges(&p)
            .iter()
            .any(|f| f.field == "lockMs"));
        assert!(!generated_judges(&p, 0)
            .iter()
            .any(|f| f.field == "expiryMs"));
        assert!(!generated_judges(&p, 1).iter().any(|f| f.field == "durable"));
        // The furthest reach wins, a declared value over any "up to".
        let mut all = vec![JudgedField::up_to("lockMs", 300)];
        add_judged(&mut all, vec![JudgedField::up_to("lockMs", 450)]);
        assert_eq!(all, [JudgedField::up_to("lockMs", 450)]);
        add_judged(&mut all, vec![JudgedField::at_value("lockMs")]);
        assert_eq!(all, [JudgedField::at_value("lockMs")]);
    }

    #[test]
    fn every_profile_meets_payloads_equal_only_as_json_and_equal_only_as_text() {
        use crate::run::fuzz::idem_program::body;
        let json =
            |payload: usize| serde_json::from_slice::<serde_json::Value>(&body(payload, None)).ok();
        for p in [IdemProfile::draft_default(), {
            let mut p = IdemProfile::draft_default();
            p.fingerprint = reqkey_model::idem_profile::Fingerprint::None;
            p.mismatch_status = None;
            p
        }] {
            let b = battery(&p);
            let probe = b
                .iter()
                .find(|x| x.kind == ProbeKind::Fingerprint)
                .expect("a fingerprint probe under every profile");
            let sent: Vec<(usize, usize)> = probe
                .program
                .iter()
                .map(|s| match s {
                    Step::Send(r) => (r.key, r.payload),
                    other => panic!("a probe of sends only: {other:?}"),
                })
                .collect();
            // One key: equal as JSON in other bytes, then another value.
            let (k, a) = sent[0];
            let (_, a2) = sent[1];
            let (_, b2) = sent[2];
            assert!(sent[..3].iter().all(|s| s.0 == k));
            assert_eq!(json(a), json(a2));
            assert_ne!(body(a, None), body(a2, None));
            assert_ne!(json(a), json(b2));
            // The other key: the same text as a number and as a string.
            let (k2, n) = sent[3];
            let (_, t) = sent[4];
            assert!(k2 != k && sent[4].0 == k2);
            assert_ne!(json(n), json(t));
            let text = |v: Option<serde_json::Value>| {
                v.and_then(|v| {
                    v.get("item").map(|i| match i {
                        serde_json::Value::String(s) => s.clone(),
                        other => other.to_string(),
                    })
                })
            };
            assert_eq!(text(json(n)), text(json(t)));
            assert!(ProbeKind::Fingerprint
                .judges(&p)
                .contains(&JudgedField::at_value("fingerprint")));
        }
    }

    #[test]
    fn every_profile_meets_bursts_on_both_handlers() {
        let mut p = IdemProfile::draft_default();
        p.concurrent_status = Some(429);
        p.errors = reqkey_model::idem_profile::Errors::Released;
        p.lock_ms = Some(60_000);
        let b = battery(&p);
        let count = |k| b.iter().filter(|x| x.kind == k).count() as u32;
        assert_eq!(count(ProbeKind::SucceedingBurst), succeeding_bursts());
        assert_eq!(count(ProbeKind::FailingBurst), FAILING_BURSTS);
        // 60 s is too long a lock to outlive here: left to the scenarios.
        assert_eq!(count(ProbeKind::PastLock), 0);
        p.lock_ms = None;
        p.expiry_ms = None;
        let b = battery(&p);
        assert!(b.iter().any(|x| x.kind == ProbeKind::PastLock));
        assert!(b.iter().any(|x| x
            .program
            .contains(&Step::Pause(Pause::Short(NEVER_EXPIRES_SPAN_MS)))));
    }
}
