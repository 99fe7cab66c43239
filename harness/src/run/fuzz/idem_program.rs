//! The idem fuzzer's domain and programs (`run/fuzz/idem.rs` runs them,
//! `run/fuzz/idem_scenario.rs` writes them as scenarios): the requests of
//! `reqkey-idem/1` over a tiny domain, resolved against the declared
//! profile and a case's tag, and the proptest strategies that draw them.
//!
//! The domain is small so that collisions are the rule: six routes (the
//! succeeding ones on two methods and two paths, the failing one, the slow
//! one, the failing one slow), two callers, two keys (in one of the forms
//! clients make them, drawn per program: `run/fuzz/key_forms.rs`) with
//! their other spelling, their case twin, one blank more and the empty
//! value, or none, the key header's name in the spellings clients send,
//! and payloads equal as JSON but
//! not as bytes beside texts of every kind (`run/fuzz/inputs.rs`). Every
//! key and caller carries the case's tag, so no case meets another's.

use proptest::prelude::*;
use reqkey_model::idem_model::{IdemRequest, EXPIRY_MARGIN_MS};
use reqkey_model::idem_profile::{key_of, IdemProfile, KeySyntax};
use serde_json::Value;

use crate::run::fuzz::inputs;
use crate::run::fuzz::key_forms::{
    key_header_name, key_text, sf_quote, KeyStyle, KEY_HEADER_SPELLINGS,
};

/// The default budget of `reqkey fuzz` on an idem target.
pub const DEFAULT_CASES: u32 = 128;
/// The most steps in one program, and copies in one burst.
pub const MAX_STEPS: usize = 8;
pub const MAX_BURST: usize = 4;
/// `sleepMs` of the slow route and of the slow failing route.
pub const SLOW_MS: u64 = 150;
pub const SLOW_FAIL_MS: u64 = 450;
/// The longest declared `expiryMs` a program waits out, and `lockMs` it
/// outlives (longer ones are left to the scenarios).
pub const MAX_EXPIRY_WAIT_MS: u64 = 3_000;
pub const MAX_LOCK_WAIT_MS: u64 = 2_000;
/// Under `lockMs: null`, the handler of a [`Step::PastLock`] and when its
/// duplicate leaves.
pub const UNDECLARED_LOCK_SLEEP_MS: u64 = 700;
pub const UNDECLARED_LOCK_DUP_MS: u64 = 450;
/// Under `expiryMs: null`, how long a pause "past expiry" lasts.
pub const NEVER_EXPIRES_SPAN_MS: u64 = 1_500;
/// How long after it was sent a request is taken to have reached the app
/// at the latest (or its answer, if sooner). A conforming app that frees a
/// key after an error may run a duplicate that arrived after the release;
/// one that arrived before must not run (SPEC `[[idem.effect.at-most-once]]`):
/// the slow failing handler sleeps longer than this, so a duplicate sent
/// with it cannot have arrived after its release.
pub const ARRIVAL_SLACK_MS: u64 = 300;
/// How long past `expiryMs` and its margin a pause lasts.
const PAST_EXPIRY_EXTRA_MS: u64 = 150;

/// The routes: (method, path, sleepMs in the body).
pub const ROUTES: [(&str, &str, Option<u64>); 6] = [
    ("POST", "/orders", None),
    ("PUT", "/orders", None),
    ("POST", "/payments", None),
    ("POST", "/orders/fail", None),
    ("POST", "/orders/slow", Some(SLOW_MS)),
    ("POST", "/orders/fail", Some(SLOW_FAIL_MS)),
];
/// Callers (a case's tag is appended).
pub const CALLERS: [&str; 2] = ["alice", "bob"];
/// Key spellings ([`key_header`]): none, two keys, the first in the other
/// spelling, its upper-case twin, empty, the first with a trailing blank.
pub const KEY_FORMS: usize = 7;
/// Payloads: `a`, `a` with its members reordered and re-spaced, `b`, then
/// `{"item": TEXT}` with every other kind of text.
pub const PAYLOADS: usize = 3 + inputs::TEXT_KINDS - 2;
/// Payloads of other shapes (issue 56), after the [`PAYLOADS`] objects:
/// the item a number and a string of the same text (two payloads under
/// every fingerprint), and a nested order.
pub const SHAPED_PAYLOADS: [&str; 3] = [
    r#"{"item":1}"#,
    r#"{"item":"1"}"#,
    r#"{"item":"a","lines":[{"sku":"A-1","qty":2,"opts":{"gift":true,"note":null}},{"sku":"B-7","qty":1,"opts":{}}],"total":{"value":12.5,"currency":"EUR"}}"#,
];
/// Payloads that are not JSON objects (issue 56), after the shaped ones:
/// JSON of every other type at the top level, which every route of the
/// app refuses with its own 4xx after counting its run (SPEC 10, the
/// routes), so that `errors` is met on a handler's 4xx too: an array, the
/// same array in other bytes (one payload as JSON, two as bytes), a
/// string, a number and a string of the same text, a boolean and null.
pub const TOP_LEVEL_PAYLOADS: [&str; 7] = [
    r#"["a",{"qty":2,"opts":[]}]"#,
    r#"[ "a", { "opts" : [ ], "qty" : 2 } ]"#,
    r#""a""#,
    "1",
    r#""1""#,
    "true",
    "null",
];
/// The first payload of [`TOP_LEVEL_PAYLOADS`].
pub const FIRST_TOP_LEVEL: usize = PAYLOADS + SHAPED_PAYLOADS.len();
/// Payloads of the domain: the objects, the shaped ones, then those that
/// are not objects.
pub const ALL_PAYLOADS: usize = FIRST_TOP_LEVEL + TOP_LEVEL_PAYLOADS.len();

/// One request over the domain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Req {
    pub route: usize,
    pub caller: usize,
    pub key: usize,
    pub payload: usize,
    /// The program's [`KeyStyle`] (one for all its requests).
    pub style: usize,
    /// How the `Idempotency-Key` name is spelt
    /// (`key_forms::KEY_HEADER_SPELLINGS`).
    pub spelling: usize,
}

/// A pause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pause {
    Short(u64),
    /// Past the declared `expiryMs` and its margin (short when the profile
    /// has none, or one too long to wait out).
    PastExpiry,
}

/// One step of a program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Send(Req),
    /// The same request as one sent before (`back` back, modulo how many).
    Again {
        back: usize,
    },
    /// `copies` identical requests released together.
    Burst {
        req: Req,
        copies: usize,
    },
    /// Different requests released together.
    Batch(Vec<Req>),
    /// A slow request outliving the declared `lockMs` (or, under `lockMs:
    /// null`, a few hundred ms), and its duplicate sent once such a lock
    /// would have lapsed (a burst of two where `lockMs` is too long).
    PastLock(Req),
    Pause(Pause),
    /// A read of `/.reqkey/effects`, judged.
    Effects,
}

/// A request of a program, resolved against the profile and the case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    pub req: Req,
    pub request: IdemRequest,
    /// Sent this long after its group was released.
    pub delay_ms: u64,
}

/// The raw key header of `form` for `tag` under `syntax` in `style`
/// (`run/fuzz/key_forms.rs`; `None`: no header): the first key in the
/// spelling the syntax admits (quoted when it admits that), the second
/// key likewise, the first key in the other spelling (bare where quotes
/// are admitted: under `any`, another key), its case twin (the letters
/// outside the tag in the other case), the empty value, the first key
/// with one blank more (another key: keys compare octet for octet; under
/// `token`, a blank inside the key, malformed).
pub fn key_header(form: usize, style: KeyStyle, tag: &str, syntax: KeySyntax) -> Option<String> {
    let admitted = |k: &str| {
        let q = sf_quote(k);
        if key_of(q.as_bytes(), syntax).is_some() {
            q
        } else {
            k.to_owned()
        }
    };
    let other = |k: &str| {
        let q = sf_quote(k);
        if key_of(q.as_bytes(), syntax).is_some() {
            k.to_owned()
        } else {
            q
        }
    };
    let first = key_text(style, 0, tag, syntax);
    match form % KEY_FORMS {
        0 => None,
        1 => Some(admitted(&first.text())),
        2 => Some(admitted(&key_text(style, 1, tag, syntax).text())),
        3 => Some(other(&first.text())),
        4 => Some(admitted(&first.case_twin())),
        // The empty key: `""` where the syntax reads it as empty, else the
        // empty field value (never a key, so never shared between cases).
        5 if key_of(b"\"\"", syntax).is_none() => Some("\"\"".to_owned()),
        5 => Some(String::new()),
        // A trailing blank crosses the wire only inside quotes (RFC 9110
        // 5.5 strips it from a bare field value): where quotes are refused
        // (`token`), the blank goes inside the key, which must be refused.
        _ => {
            let blank = sf_quote(&first.blank_twin());
            if key_of(blank.as_bytes(), syntax).is_some() {
                Some(blank)
            } else {
                // Inside, never at an end (a bare value loses those).
                Some(match (first.head.is_empty(), first.tail.is_empty()) {
                    (_, false) => format!("{}{} {}", first.head, first.tag, first.tail),
                    (false, true) => format!("{} {}", first.head, first.tag),
                    (true, true) => format!("{} {}", &first.tag[..1], &first.tag[1..]),
                })
            }
        }
    }
}

/// The raw body of `payload` for a route sleeping `sleep`.
pub fn body(payload: usize, sleep: Option<u64>) -> Vec<u8> {
    let payload = payload % ALL_PAYLOADS;
    if let Some(top) = payload.checked_sub(FIRST_TOP_LEVEL) {
        // Not an object: no member to carry `sleepMs` (the handler refuses
        // it at once).
        return TOP_LEVEL_PAYLOADS[top].as_bytes().to_vec();
    }
    if let Some(shaped) = payload.checked_sub(PAYLOADS).map(|i| SHAPED_PAYLOADS[i]) {
        // The route's `sleepMs` goes in as the first member.
        return match (shaped.strip_prefix('{'), sleep) {
            (Some(rest), Some(ms)) => format!("{{\"sleepMs\":{ms},{rest}").into_bytes(),
            _ => shaped.as_bytes().to_vec(),
        };
    }
    let text = |t: &str| Value::String(t.to_owned()).to_string();
    let item = match payload % PAYLOADS {
        0 | 1 => text("a"),
        2 => text("b"),
        i => text(&inputs::text(i - 3 + 2)),
    };
    let s = match (payload % PAYLOADS, sleep) {
        (1, Some(ms)) => format!("{{ \"sleepMs\" : {ms},  \"item\" : {item} }}"),
        (1, None) => format!("{{ \"item\" : {item} }}"),
        (_, Some(ms)) => format!("{{\"item\":{item},\"sleepMs\":{ms}}}"),
        (_, None) => format!("{{\"item\":{item}}}"),
    };
    s.into_bytes()
}

impl Req {
    /// The name its `Idempotency-Key` header goes out under.
    pub fn key_header_name(&self) -> &'static str {
        key_header_name(self.spelling)
    }

    /// The request under `profile` for the case tagged `tag`. A key form
    /// the declared syntax does not admit is sent only where the profile
    /// refuses it (`invalidKeyStatus`); otherwise the first key stands in.
    pub fn resolve(
        &self,
        profile: &IdemProfile,
        tag: &str,
        sleep_override: Option<u64>,
    ) -> IdemRequest {
        let (method, path, sleep) = ROUTES[self.route % ROUTES.len()];
        let style = KeyStyle::of(self.style);
        let mut key = key_header(self.key, style, tag, profile.key_syntax);
        if let Some(k) = &key {
            if key_of(k.as_bytes(), profile.key_syntax).is_none()
                && profile.invalid_key_status.is_none()
            {
                key = key_header(1, style, tag, profile.key_syntax);
            }
        }
        IdemRequest {
            method: method.to_owned(),
            path: path.to_owned(),
            caller: format!("{}-{tag}", CALLERS[self.caller % CALLERS.len()]),
            key: key.map(String::into_bytes),
            body: body(self.payload, sleep_override.or(sleep)),
        }
    }
}

/// The declared `lockMs` a program outlives, if any.
pub fn outlived_lock(profile: &IdemProfile) -> Option<u64> {
    profile.lock_ms.filter(|l| *l <= MAX_LOCK_WAIT_MS)
}

/// How long a pause lasts under `profile`.
pub fn pause_ms(p: Pause, profile: &IdemProfile) -> u64 {
    match p {
        Pause::Short(ms) => ms,
        Pause::PastExpiry => match profile.expiry_ms.filter(|e| *e <= MAX_EXPIRY_WAIT_MS) {
            Some(e) => e + EXPIRY_MARGIN_MS + PAST_EXPIRY_EXTRA_MS,
            // Never forgotten: a key is still replayed after a longer span.
            None if profile.expiry_ms.is_none() => NEVER_EXPIRES_SPAN_MS,
            None => 50,
        },
    }
}

/// Resolves a step into the requests it sends together (empty for a pause
/// or an effects read), given the requests sent so far.
pub fn requests_of(step: &Step, sent: &[Req], profile: &IdemProfile, tag: &str) -> Vec<Sent> {
    let one = |req: &Req, delay_ms: u64, sleep: Option<u64>| Sent {
        req: req.clone(),
        request: req.resolve(profile, tag, sleep),
        delay_ms,
    };
    match step {
        Step::Send(r) => vec![one(r, 0, None)],
        Step::Again { back } => match sent.len() {
            0 => vec![one(
                &Req {
                    route: 0,
                    caller: 0,
                    key: 1,
                    payload: 0,
                    style: 0,
                    spelling: 0,
                },
                0,
                None,
            )],
            n => vec![one(&sent[n - 1 - back % n], 0, None)],
        },
        Step::Burst { req, copies } => (0..*copies).map(|_| one(req, 0, None)).collect(),
        Step::Batch(reqs) => reqs.iter().map(|r| one(r, 0, None)).collect(),
        Step::PastLock(req) => {
            let slow = Req {
                route: 4,
                ..req.clone()
            };
            // A numeric lock is outlived; a lock held until completion is
            // outlived by a handler slower than common timeouts of a few
            // hundred ms (the implementation's own, not declared).
            let (sleep, dup_at) = match outlived_lock(profile) {
                Some(lock) => (lock + 400, lock + 150),
                None if profile.lock_ms.is_none() => {
                    (UNDECLARED_LOCK_SLEEP_MS, UNDECLARED_LOCK_DUP_MS)
                }
                None => (SLOW_MS, 0),
            };
            vec![one(&slow, 0, Some(sleep)), one(&slow, dup_at, Some(sleep))]
        }
        Step::Pause(_) | Step::Effects => Vec::new(),
    }
}

fn arb_req() -> impl Strategy<Value = Req> {
    (
        prop_oneof![4 => Just(0usize), 1 => Just(1usize), 1 => Just(2usize), 2 => Just(3usize), 2 => Just(4usize), 1 => Just(5usize)],
        prop_oneof![3 => Just(0usize), 1 => Just(1usize)],
        prop_oneof![1 => Just(0usize), 5 => Just(1usize), 3 => Just(2usize), 1 => Just(3usize), 1 => Just(4usize), 1 => Just(5usize), 1 => Just(6usize)],
        prop_oneof![5 => Just(0usize), 2 => Just(1usize), 2 => Just(2usize), 2 => 3..PAYLOADS, 2 => PAYLOADS..FIRST_TOP_LEVEL, 2 => FIRST_TOP_LEVEL..ALL_PAYLOADS],
        prop_oneof![2 => Just(0usize), 1 => 1..KEY_HEADER_SPELLINGS.len()],
    )
        .prop_map(|(route, caller, key, payload, spelling)| Req {
            route,
            caller,
            key,
            payload,
            style: 0,
            spelling,
        })
}

/// One step; `long_pauses` weighs the pauses past expiry (a certification's
/// pass keeps them rare: each lasts seconds).
pub fn arb_step(long_pauses: u32) -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => arb_req().prop_map(Step::Send),
        4 => (0..3usize).prop_map(|back| Step::Again { back }),
        3 => (arb_req(), 2..=MAX_BURST).prop_map(|(req, copies)| Step::Burst { req, copies }),
        2 => prop::collection::vec(arb_req(), 2..=3).prop_map(Step::Batch),
        1 => arb_req().prop_map(Step::PastLock),
        1 => (20..200u64).prop_map(|ms| Step::Pause(Pause::Short(ms))),
        long_pauses => Just(Step::Pause(Pause::PastExpiry)),
        1 => Just(Step::Effects),
    ]
}

/// A program: its steps, every request of it in one [`KeyStyle`] drawn
/// with it (keys meet only within a style).
pub fn arb_program(long_pauses: u32) -> impl Strategy<Value = Vec<Step>> {
    (
        0..KeyStyle::ALL.len(),
        prop::collection::vec(arb_step(long_pauses), 1..=MAX_STEPS),
    )
        .prop_map(|(style, steps)| with_style(steps, style))
}

/// `program` with every request in style `style`.
pub fn with_style(program: Vec<Step>, style: usize) -> Vec<Step> {
    let set = |r: &Req| Req { style, ..r.clone() };
    program
        .into_iter()
        .map(|step| match step {
            Step::Send(r) => Step::Send(set(&r)),
            Step::Burst { req, copies } => Step::Burst {
                req: set(&req),
                copies,
            },
            Step::Batch(reqs) => Step::Batch(reqs.iter().map(set).collect()),
            Step::PastLock(r) => Step::PastLock(set(&r)),
            other => other,
        })
        .collect()
}

/// The tag of case `case` under `namespace`: letters and digits only, so
/// every declared key syntax admits the keys it makes.
pub fn case_tag(namespace: &str, case: u64) -> String {
    let h = format!("{namespace}#{case}")
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
    format!("{h:016x}")
}
