//! The sequential model of an app under a declared `Idempotency-Key`
//! profile (SPEC 10): which answers and effect counts a conforming app may
//! give after any sequence of requests, its timing fields included.
//!
//! An app speaking `reqkey-idem/1` is a handler behind a layer; what the
//! layer may do with each request is decided by the profile
//! ([`IdemProfile`], parsed in `idem_profile.rs`, whose `key_of` reads the
//! key: nothing of it is restated here). The model holds, per scoped key,
//! the record a conforming layer keeps (a completed answer, its payload's
//! fingerprint, the caller it answered, when it completed), the effect
//! counts the app's oracle must show, and the orders already seen (a run
//! shows a fresh `order`, a replay an old one).
//!
//! Time is a logical clock in milliseconds that the caller supplies: each
//! request comes with its [`Window`] (sent, reached the app by, answered),
//! so expiry (`expiryMs`, with SPEC's 500 ms margin) is decided from the
//! windows, never from a clock read here. Where the windows leave it open
//! whether a key had expired, both answers are allowed: the model is a
//! set of states, kept to those an answer is consistent with.
//!
//! Requests that overlap (`idem_batch.rs`) are judged by every order
//! real time allows (linearizability): per scoped key, the handler runs
//! form a sequence whose in-flight spans never overlap; every other answer
//! is a refusal while one is in flight, a replay of a completed one (or,
//! under `concurrent: wait`, of the one it waited for) or a refusal of
//! another payload, placed at a time inside its own window. The timing
//! constraints are a system of difference constraints solved exactly
//! (Bellman-Ford), so no conforming interleaving is ever refused. A lock
//! never lapses while its handler runs (SPEC `[[idem.effect.at-most-once]]`:
//! a lapsed lock counts as no expiry), so `lockMs` changes no answer here.
//!
//! Pure: no IO, no clock, no HTTP client (methods and paths are data).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::digest::canonical_json;
use crate::idem_profile::{
    key_of, Concurrent, Errors, Fingerprint, IdemProfile, KeySyntax, ScopeBy,
};

/// SPEC 10 `[[idem.expiry.honoured]]`: a key must be forgotten this long
/// after `expiryMs` has passed (clocks and sweeps).
pub const EXPIRY_MARGIN_MS: u64 = 500;
/// `POST /orders/slow` sleeps `sleepMs` of its body, this by default.
pub const SLOW_DEFAULT_MS: u64 = 1000;
/// The longest `sleepMs` the contract's sleeping routes honour (long enough
/// to outlive a declared `lockMs` of a minute).
pub const SLEEP_CAP_MS: u64 = 120_000;
/// The most explanations of one scoped key's overlapping requests tried
/// before the batch has no verdict.
pub const MAX_EXPLANATIONS: usize = 50_000;

/// The clause ids this model judges (SPEC 10).
pub mod clause {
    pub const AT_MOST_ONCE: &str = "idem.effect.at-most-once";
    pub const RECORDED: &str = "idem.effects.recorded";
    pub const REPLAY: &str = "idem.replay.completed";
    pub const REPLAY_ERRORS: &str = "idem.replay.errors";
    pub const REPLAY_HEADER: &str = "idem.replay.header";
    pub const MISMATCH: &str = "idem.fingerprint.mismatch";
    pub const EQUIVALENCE: &str = "idem.fingerprint.equivalence";
    pub const CONCURRENT: &str = "idem.concurrent.declared";
    pub const OTHER_PAYLOAD: &str = "idem.concurrent.other-payload";
    pub const EXPIRY: &str = "idem.expiry.honoured";
    pub const SCOPE: &str = "idem.scope.declared";
    pub const NO_LEAK: &str = "idem.scope.no-leak";
    pub const MISSING_REQUIRED: &str = "idem.key.missing-required";
    pub const MISSING_OPTIONAL: &str = "idem.key.missing-optional";
    pub const INVALID: &str = "idem.key.invalid-refused";
    pub const ERROR_BODY: &str = "idem.error.body";
    pub const SYNTAX: &str = "idem.key.syntax";
    pub const EXACT: &str = "idem.key.exact";
    pub const TOKEN: &str = "idem.key.token";
}

/// What a contract route's handler does (reqkey-idem/1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Handler {
    /// The status it answers after its side effect: 201, 500 (`POST
    /// /orders/fail`), or [`REFUSED_BODY_STATUS`] (a body that is not a
    /// JSON object: the handler's own refusal).
    pub answers: u16,
    /// How long it sleeps before its side effect (`sleepMs`).
    pub sleep_ms: u64,
}

/// The status of the handler's own refusal of a body that is not a JSON
/// object (JSON of another type at the top level, or not JSON): it counts
/// its run, then answers this with its `order` (SPEC 10, the routes), so
/// that `errors` is met on a 4xx of the handler's as well as on its 500.
pub const REFUSED_BODY_STATUS: u16 = 422;

impl Handler {
    /// The status it answers after its side effect.
    pub fn status(self) -> u16 {
        self.answers
    }

    /// Whether it answers an error (a 4xx or 5xx of its own, no `echo`).
    pub fn fails(self) -> bool {
        self.answers >= 400
    }
}

/// The handler behind `method path` for `body`, or `None` when the route
/// is not the contract's. A body that is not a JSON object is the
/// handler's own refusal on every route: it runs at once (no `sleepMs` to
/// read), counts its run and answers [`REFUSED_BODY_STATUS`].
pub fn handler_of(method: &str, path: &str, body: &[u8]) -> Option<Handler> {
    let route = match (method, path) {
        ("POST", "/orders") | ("PUT", "/orders") | ("POST", "/payments") => (201, None),
        ("POST", "/orders/slow") => (201, Some(SLOW_DEFAULT_MS)),
        ("POST", "/orders/fail") => (500, Some(0)),
        _ => return None,
    };
    let parsed = serde_json::from_slice::<Value>(body).ok();
    let Some(obj) = parsed.as_ref().and_then(Value::as_object) else {
        return Some(Handler {
            answers: REFUSED_BODY_STATUS,
            sleep_ms: 0,
        });
    };
    let sleep_ms = route.1.map_or(0, |default: u64| {
        obj.get("sleepMs")
            .and_then(Value::as_u64)
            .unwrap_or(default)
            .min(SLEEP_CAP_MS)
    });
    Some(Handler {
        answers: route.0,
        sleep_ms,
    })
}

/// A payload's fingerprint as `fingerprint` compares it (draft 2.4): equal
/// fingerprints are one payload. `none`: every payload is one.
pub fn payload_print(fingerprint: Fingerprint, body: &[u8]) -> String {
    let hex = |b: &[u8]| -> String {
        Sha256::digest(b)
            .iter()
            .map(|x| format!("{x:02x}"))
            .collect()
    };
    match fingerprint {
        Fingerprint::None => String::new(),
        Fingerprint::Json => match serde_json::from_slice::<Value>(body) {
            Ok(v) => format!("json:{}", hex(canonical_json(&v).as_bytes())),
            Err(_) => format!("bytes:{}", hex(body)),
        },
        Fingerprint::Bytes => format!("bytes:{}", hex(body)),
    }
}

/// A payload's print under the fingerprint `fingerprint` is not (`json`
/// and `bytes` swapped; under `none`, `bytes`).
pub fn alt_payload_print(fingerprint: Fingerprint, body: &[u8]) -> String {
    match fingerprint {
        Fingerprint::None => payload_print(Fingerprint::Bytes, body),
        Fingerprint::Json => payload_print(Fingerprint::Bytes, body),
        Fingerprint::Bytes => payload_print(Fingerprint::Json, body),
    }
}

/// One request to the app.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdemRequest {
    pub method: String,
    pub path: String,
    /// `X-Reqkey-Caller` (empty: none).
    pub caller: String,
    /// The raw `Idempotency-Key` field value; `None`: no header.
    pub key: Option<Vec<u8>>,
    /// The raw body bytes.
    pub body: Vec<u8>,
}

impl IdemRequest {
    fn handler(&self) -> Option<Handler> {
        handler_of(&self.method, &self.path, &self.body)
    }

    /// The entry of `/.reqkey/effects` this request's side effect counts in.
    pub fn effect_key(&self) -> EffectKey {
        EffectKey {
            method: self.method.clone(),
            path: self.path.clone(),
            caller: self.caller.clone(),
            key: self
                .key
                .as_ref()
                .map(|k| String::from_utf8_lossy(k).into_owned()),
            body_sha256: Sha256::digest(&self.body)
                .iter()
                .map(|x| format!("{x:02x}"))
                .collect(),
        }
    }
}

/// An entry of `/.reqkey/effects` (SPEC 10 `[[idem.effects.recorded]]`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EffectKey {
    pub method: String,
    pub path: String,
    pub caller: String,
    pub key: Option<String>,
    pub body_sha256: String,
}

/// When a request was sent, by when it reached the app (the caller's bound
/// on its arrival), and when its answer came back, on the model's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Window {
    pub sent_ms: u64,
    pub arrived_by_ms: u64,
    pub answered_ms: u64,
}

impl Window {
    /// A window whose arrival the caller cannot bound more tightly than
    /// its answer.
    pub fn new(sent_ms: u64, answered_ms: u64) -> Self {
        Self {
            sent_ms,
            arrived_by_ms: answered_ms.max(sent_ms),
            answered_ms: answered_ms.max(sent_ms),
        }
    }
}

/// What the model reads of an answer.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IdemAnswer {
    pub status: u16,
    /// The body parsed as JSON (`None`: not JSON).
    pub json: Option<Value>,
    /// The `X-Reqkey-Order` header.
    pub order_header: Option<String>,
    /// Whether the declared `replayHeader` is on it.
    pub replayed: bool,
}

impl IdemAnswer {
    /// The run the answer shows: the contract's counter, or (an app played
    /// through an API map, whose `order` is the created resource's id) the
    /// id as a number of its own: equal ids, equal orders; a new id, a new
    /// order (FNV-1a, its top bit set so no counter value meets it).
    fn order(&self) -> Option<u64> {
        match self.json.as_ref()?.get("order")? {
            Value::String(id) if !id.is_empty() => Some(
                id.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                    (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
                }) | (1 << 63),
            ),
            v => v.as_u64(),
        }
    }

    fn caller(&self) -> Option<&str> {
        self.json.as_ref()?.get("caller")?.as_str()
    }
}

/// One request of a batch with its answer and window.
pub type Item = (IdemRequest, IdemAnswer, Window);

/// A proven violation, naming the clauses it breaks: blamed by
/// counterfactual (`idem_blame.rs`) where answers no order explains are
/// judged, `clause` is the first of `clauses`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub clause: &'static str,
    /// Every clause blamed: `[clause]` where one clause's waiver alone
    /// explains the answers, else the smallest set that does.
    pub clauses: Vec<&'static str>,
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] {}", self.clauses.join(", "), self.message)
    }
}

/// A violation of one clause.
pub fn violation(clause: &'static str, message: impl Into<String>) -> Violation {
    Violation {
        clause,
        clauses: vec![clause],
        message: message.into(),
    }
}

/// Why a batch got no verdict (too many explanations to try).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judged {
    /// No conforming state explains the answers.
    Violation(Violation),
    /// The model could not decide within its bounds.
    NoVerdict(String),
}

/// A completed answer a record keeps for replay.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Kept {
    pub status: u16,
    pub order: Option<u64>,
    pub order_header: Option<String>,
    pub caller: String,
    /// The handler's `echo` (201 routes).
    pub echo: Option<String>,
}

/// A completed key: its answer, payload, and when it completed (a range:
/// somewhere inside the window of the request that ran it).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Record {
    pub print: String,
    /// The payload's print under the other fingerprint (`json` and `bytes`
    /// swapped): what a waiver of `[[idem.fingerprint.equivalence]]`
    /// compares (`idem_blame.rs`).
    pub alt_print: String,
    pub kept: Kept,
    pub completed_from_ms: u64,
    pub completed_by_ms: u64,
}

/// A key as the profile scopes it: the key and what `scope` declares.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Scoped {
    pub key: Vec<u8>,
    pub caller: Option<String>,
    pub method: Option<String>,
    pub path: Option<String>,
}

/// The longest key (octets, as the syntax reads it) an app must take: a
/// longer one may be refused for its length, any 4xx, running nothing
/// (SPEC 10 `[[idem.key.long-and-escaped]]`).
pub const LONGEST_KEY_TAKEN_OCTETS: usize = 255;

/// How the layer reads a request's key under the profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyRead {
    /// No header.
    Missing,
    /// A value the declared syntax does not admit, refused with this status.
    Malformed(u16),
    /// A value the declared syntax does not admit while `invalidKeyStatus`
    /// is null: SPEC 10 says only that it is accepted, not as which key, so
    /// the model does not judge what follows.
    Unjudged,
    Key(Scoped),
}

/// The model: one state a conforming app may be in.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdemModel {
    profile: IdemProfile,
    records: BTreeMap<Scoped, Record>,
    effects: BTreeMap<EffectKey, u32>,
    orders: BTreeSet<u64>,
    /// Orders of runs whose error answer freed their key (`errors: released`).
    released: BTreeSet<u64>,
    /// Scoped keys whose last run's error answer freed them, each with
    /// the record it would keep had the error answer not freed it: what a
    /// waiver of `[[idem.replay.errors]]` may find (`idem_blame.rs`).
    freed: BTreeMap<Scoped, Record>,
}

/// The conforming outcomes of one request, before an answer is seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The handler runs: a fresh order, its status.
    Run(Handler),
    /// The record's answer replayed.
    Replay(Kept),
    /// Refused with this status (and a JSON body), nothing runs.
    Refused { status: u16, clause: &'static str },
    /// Refused with any error status, never showing `record`'s answer
    /// (another caller on a key not scoped by caller).
    RefusedNoLeak(Kept),
}

impl IdemModel {
    pub fn new(profile: &IdemProfile) -> Self {
        Self {
            profile: profile.clone(),
            records: BTreeMap::new(),
            effects: BTreeMap::new(),
            orders: BTreeSet::new(),
            released: BTreeSet::new(),
            freed: BTreeMap::new(),
        }
    }

    pub fn profile(&self) -> &IdemProfile {
        &self.profile
    }

    /// The effect counts the oracle must show for the entries this model
    /// has seen run.
    pub fn effects(&self) -> &BTreeMap<EffectKey, u32> {
        &self.effects
    }

    /// The record a scoped key holds.
    pub fn record(&self, scoped: &Scoped) -> Option<&Record> {
        self.records.get(scoped)
    }

    /// How the profile reads `req`'s key (`key_of` of the declared syntax,
    /// scoped by what `scope` declares).
    pub fn read_key(&self, req: &IdemRequest) -> KeyRead {
        let Some(raw) = &req.key else {
            return KeyRead::Missing;
        };
        let Some(key) = key_of(raw, self.profile.key_syntax) else {
            return match self.profile.invalid_key_status {
                Some(s) => KeyRead::Malformed(s),
                None => KeyRead::Unjudged,
            };
        };
        let p = &self.profile;
        KeyRead::Key(Scoped {
            key,
            caller: p.scoped_by(ScopeBy::Caller).then(|| req.caller.clone()),
            method: p.scoped_by(ScopeBy::Method).then(|| req.method.clone()),
            path: p.scoped_by(ScopeBy::Path).then(|| req.path.clone()),
        })
    }

    fn print(&self, req: &IdemRequest) -> String {
        payload_print(self.profile.fingerprint, &req.body)
    }

    /// The record of `scoped` as a request in `w` may find it: `Some`
    /// surely kept, `None` surely forgotten, both when the windows leave
    /// expiry open.
    fn lookups(&self, scoped: &Scoped, w: Window) -> Vec<Option<&Record>> {
        let Some(rec) = self.records.get(scoped) else {
            return vec![None];
        };
        let Some(expiry) = self.profile.expiry_ms else {
            return vec![Some(rec)];
        };
        // Surely kept: even the latest lookup comes before the earliest expiry.
        let kept = w.arrived_by_ms < rec.completed_from_ms.saturating_add(expiry);
        // Surely forgotten: the earliest lookup comes after the latest expiry and its margin.
        let gone = w.sent_ms
            > rec
                .completed_by_ms
                .saturating_add(expiry)
                .saturating_add(EXPIRY_MARGIN_MS);
        match (kept, gone) {
            (true, _) => vec![Some(rec)],
            (false, true) => vec![None],
            (false, false) => vec![Some(rec), None],
        }
    }

    /// The conforming outcomes of `req` sent alone in `w` (more than one
    /// where expiry is open).
    pub fn outcomes(&self, req: &IdemRequest, w: Window) -> Vec<Outcome> {
        let p = &self.profile;
        let Some(handler) = req.handler() else {
            // Not a contract request: nothing the model judges.
            return Vec::new();
        };
        let scoped = match self.read_key(req) {
            KeyRead::Missing if p.key_required => {
                return vec![Outcome::Refused {
                    status: 400,
                    clause: clause::MISSING_REQUIRED,
                }]
            }
            KeyRead::Missing => return vec![Outcome::Run(handler)],
            KeyRead::Malformed(status) => {
                // Under `token`, a value that is not a token (`""` included:
                // a double quote) breaks the token rule; an empty field
                // value the invalid-key rule.
                let empty = req.key.as_deref().is_none_or(|k| k.trim_ascii().is_empty());
                let clause = if p.key_syntax == KeySyntax::Token && !empty {
                    clause::TOKEN
                } else {
                    clause::INVALID
                };
                return vec![Outcome::Refused { status, clause }];
            }
            KeyRead::Unjudged => return Vec::new(),
            KeyRead::Key(s) => s,
        };
        let print = self.print(req);
        self.lookups(&scoped, w)
            .into_iter()
            .map(|rec| match rec {
                None => Outcome::Run(handler),
                Some(rec) if rec.kept.caller != req.caller => {
                    Outcome::RefusedNoLeak(rec.kept.clone())
                }
                Some(rec) if p.fingerprint != Fingerprint::None && rec.print != print => {
                    Outcome::Refused {
                        status: p.mismatch_status.unwrap_or(422),
                        clause: clause::MISMATCH,
                    }
                }
                Some(rec) => Outcome::Replay(rec.kept.clone()),
            })
            .collect()
    }

    /// A conforming answer to `req` sent alone (the first of
    /// [`outcomes`](Self::outcomes)), a run numbered `fresh_order`: what a
    /// shrunk program's scenario expects.
    pub fn conforming(&self, req: &IdemRequest, w: Window, fresh_order: u64) -> Option<IdemAnswer> {
        let body_json = serde_json::from_slice::<Value>(&req.body).ok();
        Some(match self.outcomes(req, w).into_iter().next()? {
            Outcome::Run(h) => IdemAnswer {
                status: h.status(),
                json: Some(if h.fails() {
                    serde_json::json!({"order": fresh_order, "caller": req.caller})
                } else {
                    serde_json::json!({"order": fresh_order, "caller": req.caller, "echo": body_json})
                }),
                // Every answer of a handler carries `X-Reqkey-Order`
                // (SPEC 10, the routes), its errors too.
                order_header: Some(fresh_order.to_string()),
                replayed: false,
            },
            Outcome::Replay(k) => IdemAnswer {
                status: k.status,
                json: Some(serde_json::json!({"order": k.order, "caller": k.caller})),
                order_header: k.order_header.clone(),
                replayed: self.profile.replay_header.is_some(),
            },
            Outcome::Refused { status, .. } => IdemAnswer {
                status,
                json: Some(serde_json::json!({})),
                order_header: None,
                replayed: false,
            },
            Outcome::RefusedNoLeak(_) => return None,
        })
    }

    /// Judges `/.reqkey/effects` against this state for the entries whose
    /// caller `mine` accepts (a program's own callers).
    pub fn check_effects(
        &self,
        listed: &[(EffectKey, u64)],
        mine: impl Fn(&str) -> bool,
    ) -> Result<(), Violation> {
        let mut seen: BTreeMap<&EffectKey, u64> = BTreeMap::new();
        for (k, n) in listed.iter().filter(|(k, _)| mine(&k.caller)) {
            *seen.entry(k).or_default() += n;
        }
        for (k, want) in &self.effects {
            let got = seen.remove(k).unwrap_or(0);
            let want = u64::from(*want);
            if got > want {
                return Err(violation(
                    clause::AT_MOST_ONCE,
                    format!(
                        "{} {} key {} (caller {}): the side effect ran {got} times, the answers show {want} runs a conforming app may make",
                        k.method, k.path, shown_key(&k.key), k.caller
                    ),
                ));
            }
            if got < want {
                return Err(violation(
                    clause::RECORDED,
                    format!(
                        "{} {} key {} (caller {}): /.reqkey/effects counts {got} runs, the answers showed {want}",
                        k.method, k.path, shown_key(&k.key), k.caller
                    ),
                ));
            }
        }
        if let Some((k, n)) = seen.into_iter().find(|(_, n)| *n > 0) {
            return Err(violation(
                clause::AT_MOST_ONCE,
                format!(
                    "{} {} key {} (caller {}): the side effect ran {n} times, no answer showed it run",
                    k.method,
                    k.path,
                    shown_key(&k.key),
                    k.caller
                ),
            ));
        }
        Ok(())
    }

    // What `idem_batch` changes: kept here so that the state's invariants
    // have one owner.

    pub(crate) fn records_mut(&mut self) -> &mut BTreeMap<Scoped, Record> {
        &mut self.records
    }

    pub(crate) fn count_run(&mut self, req: &IdemRequest, order: u64, released: bool) {
        *self.effects.entry(req.effect_key()).or_default() += 1;
        self.orders.insert(order);
        if released {
            self.released.insert(order);
        }
    }

    /// Whether `order` was a run whose error answer freed its key.
    pub fn was_released(&self, order: u64) -> bool {
        self.released.contains(&order)
    }

    /// Whether `scoped`'s last run answered an error that freed it.
    pub fn freed_by_error(&self, scoped: &Scoped) -> bool {
        self.freed.contains_key(scoped)
    }

    /// Marks `scoped` freed by its last run's error answer (`Some`: the
    /// record that run would have kept), or not.
    pub(crate) fn set_freed(&mut self, scoped: &Scoped, freed: Option<Record>) {
        match freed {
            Some(r) => {
                self.freed.insert(scoped.clone(), r);
            }
            None => {
                self.freed.remove(scoped);
            }
        }
    }

    /// The record `scoped`'s last run would have kept had its error answer
    /// not freed it.
    pub(crate) fn released_record(&self, scoped: &Scoped) -> Option<&Record> {
        self.freed.get(scoped)
    }

    /// The records, for the batch judge.
    pub(crate) fn records(&self) -> &BTreeMap<Scoped, Record> {
        &self.records
    }

    /// Whether `order` is one no earlier answer showed.
    pub fn is_fresh(&self, order: u64) -> bool {
        !self.orders.contains(&order)
    }
}

/// A key as reports show it (inert, bounded).
pub fn shown_key(k: &Option<String>) -> String {
    match k {
        None => "(none)".into(),
        Some(k) => {
            let k: String = k.chars().take(60).collect();
            format!("{k:?}")
        }
    }
}

/// What an answer shows of a run or replay, for messages.
pub fn shown_answer(a: &IdemAnswer) -> String {
    if crate::idem_why::quiet() {
        return String::new();
    }
    let mut s = format!("{}", a.status);
    match a.json.as_ref().and_then(|j| j.get("order")) {
        Some(Value::String(id)) if !id.is_empty() => {
            let id: String = id.chars().take(40).collect();
            s.push_str(&format!(" order {id:?}"));
        }
        _ => {
            if let Some(o) = a.order() {
                s.push_str(&format!(" order {o}"));
            }
        }
    }
    if let Some(c) = a.caller() {
        let c: String = c.chars().take(40).collect();
        s.push_str(&format!(" caller {c:?}"));
    }
    if a.replayed {
        s.push_str(" (marked replayed)");
    }
    if a.json.is_none() {
        s.push_str(" (body not JSON)");
    }
    s
}

/// The answer's order and caller, for `idem_batch`.
pub(crate) fn order_of(a: &IdemAnswer) -> Option<u64> {
    a.order()
}

pub(crate) fn caller_of(a: &IdemAnswer) -> Option<&str> {
    a.caller()
}

/// The `echo` of an answer as canonical JSON text.
pub(crate) fn echo_of(a: &IdemAnswer) -> Option<String> {
    a.json.as_ref()?.get("echo").map(canonical_json)
}

/// Whether the profile's `errors` frees a key after `status`.
pub(crate) fn releases(profile: &IdemProfile, status: u16) -> bool {
    status >= 400 && profile.errors == Errors::Released
}

/// Whether a duplicate in flight waits.
pub(crate) fn waits(profile: &IdemProfile) -> bool {
    profile.concurrent == Concurrent::Wait
}
