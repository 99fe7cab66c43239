//! `reference-idem`: a reference `Idempotency-Key` middleware and the
//! `reqkey-idem/1` app it guards (SPEC 10).
//!
//! It exists so the idem level has something correct to certify under each
//! profile it declares (the draft's defaults, `wait` for concurrent
//! duplicates, `released` for error answers), over memory and over Redis,
//! and so that each [`IdemDefect`] — one bug a middleware author really
//! ships — shows the suite catching it. The pieces:
//! [`storage`] (the trait and the memory backend), `redis_storage`,
//! [`middleware`] (the layer), [`app`] (the routes and the effects oracle).

pub mod app;
pub mod middleware;
#[cfg(feature = "redis")]
pub mod redis_storage;
pub mod storage;

use std::net::SocketAddr;
use std::sync::Arc;

use reqkey_model::idem_profile::{
    Concurrent, Errors, Fingerprint, IdemProfile, KeySyntax, ScopeBy,
};
use serde_json::json;
use tokio::sync::oneshot;

use crate::http_serve::{self, ServerLimits};
use storage::{IdemStorage, MemoryStorage};

/// The default `expiryMs` the reference declares (short, so expiry
/// scenarios stay fast); `--expiry-ms` sets another.
pub const DEFAULT_EXPIRY_MS: u64 = 2000;

/// A correct profile the reference serves: together they take every
/// value of every field of SPEC 10's profile table (`durable` by storage).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdemVariant {
    /// The draft's defaults: 409 while in flight, errors replayed.
    Default,
    /// A duplicate in flight waits and gets the replay.
    Wait,
    /// A 4xx/5xx answer frees the key; a retry runs again.
    Released,
    /// A request without a key passes through and runs (`keyRequired: false`).
    Optional,
    /// Duplicates in flight wait and an error answer frees the key: a
    /// waiter gets the error replayed, a later retry runs again.
    WaitReleased,
    /// The profile that used to dodge every burst: `concurrentStatus` 429,
    /// errors released, `lockMs` 60000 (renewed while the handler runs).
    LongLock,
    /// A lock of 500 ms, renewed while the handler runs.
    ShortLock,
    /// `expiryMs: null`: a completed key is never forgotten.
    NoExpiry,
    /// What many libraries do: no key required, the raw value is the key
    /// and none is refused, payloads not compared, keys scoped by nothing
    /// (another caller is refused), no replay header.
    Loose,
    /// Payloads compared byte for byte (`fingerprint: "bytes"`), keys
    /// scoped by caller and path, duplicates wait, replays marked
    /// `x-idempotent-replay`.
    Bytes,
    /// Keys are bare RFC 9110 tokens (`keySyntax: "token"`).
    Token,
    /// The raw field value is the key (`keySyntax: "any"`), malformed
    /// (empty) keys refused 400.
    Any,
    /// The other value of every field that has one: keys optional, `any`,
    /// nothing refused for its form, payloads not compared, keys scoped by
    /// nothing (another caller refused, never replayed to), a lock of
    /// `LENIENT_LOCK_MS`, no replay header.
    Lenient,
}

/// The `lockMs` the lenient variant declares.
pub const LENIENT_LOCK_MS: u64 = 3000;

impl IdemVariant {
    pub const ALL: [IdemVariant; 13] = [
        Self::Default,
        Self::Wait,
        Self::Released,
        Self::Optional,
        Self::WaitReleased,
        Self::LongLock,
        Self::ShortLock,
        Self::NoExpiry,
        Self::Loose,
        Self::Bytes,
        Self::Token,
        Self::Any,
        Self::Lenient,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::Default => "default",
            Self::Wait => "wait",
            Self::Released => "released",
            Self::Optional => "optional",
            Self::WaitReleased => "wait-released",
            Self::LongLock => "long-lock",
            Self::ShortLock => "short-lock",
            Self::NoExpiry => "no-expiry",
            Self::Loose => "loose",
            Self::Bytes => "bytes",
            Self::Token => "token",
            Self::Any => "any",
            Self::Lenient => "lenient",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.name() == name)
    }

    /// The profile this variant declares.
    pub fn profile(self, expiry_ms: Option<u64>, durable: bool) -> IdemProfile {
        let mut p = IdemProfile::draft_default();
        p.expiry_ms = expiry_ms;
        p.durable = durable;
        let wait = |p: &mut IdemProfile| {
            p.concurrent = Concurrent::Wait;
            p.concurrent_status = None;
        };
        // No key required, any key, nothing fingerprinted, scoped or marked.
        let loose = |p: &mut IdemProfile| {
            p.key_required = false;
            p.key_syntax = KeySyntax::Any;
            p.invalid_key_status = None;
            p.fingerprint = Fingerprint::None;
            p.mismatch_status = None;
            p.scope = Vec::new();
            p.replay_header = None;
        };
        match self {
            Self::Default => {}
            Self::Wait => wait(&mut p),
            Self::Released => p.errors = Errors::Released,
            Self::Optional => p.key_required = false,
            Self::WaitReleased => {
                wait(&mut p);
                p.errors = Errors::Released;
            }
            Self::LongLock => {
                p.concurrent_status = Some(429);
                p.errors = Errors::Released;
                p.lock_ms = Some(60_000);
            }
            Self::ShortLock => p.lock_ms = Some(500),
            Self::NoExpiry => p.expiry_ms = None,
            Self::Token => p.key_syntax = KeySyntax::Token,
            Self::Any => p.key_syntax = KeySyntax::Any,
            Self::Loose => loose(&mut p),
            Self::Lenient => {
                loose(&mut p);
                p.lock_ms = Some(LENIENT_LOCK_MS);
            }
            Self::Bytes => {
                wait(&mut p);
                p.fingerprint = Fingerprint::Bytes;
                p.scope = vec![ScopeBy::Caller, ScopeBy::Path];
                p.replay_header = Some("x-idempotent-replay".into());
            }
        }
        p
    }
}

/// One deliberate bug of an idempotency middleware (`broken-idem:NAME`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IdemDefect {
    /// Looks the key up, then takes it a round trip later (no atomic NX):
    /// concurrent duplicates both run.
    CheckThenSet,
    /// Declares `scope: caller` but keys by key alone: another caller gets
    /// the first caller's answer.
    UnscopedCaller,
    /// Never compares payloads: another payload gets the first answer, no 422.
    NoFingerprint,
    /// Declares `fingerprint: json` but hashes the raw bytes: the same JSON
    /// with its members reordered is refused 422.
    FingerprintRawBytes,
    /// A replay answers 200 whatever the first status was.
    ReplayDropsStatus,
    /// A replay drops the handler's headers (`X-Reqkey-Order`).
    ReplayDropsHeaders,
    /// Keeps an answer's status and headers but not its body: a replay
    /// answers `{"replayed": true}`, without the first `order` (nothing
    /// runs again). What a replay check inside a scenario about something
    /// else must charge to `idem.replay.completed` alone (issue 54).
    ReplayDropsBody,
    /// Declares `errors: released` but keeps (and replays) 5xx answers.
    StoresReleasedErrors,
    /// Declares `errors: released` but keeps (and replays) the handler's own
    /// 4xx answers, freeing the key after a 5xx only: a retry after the
    /// handler refused a body gets that refusal again, never its own run.
    Handler4xxKept,
    /// Declares `lockMs: null` but its lock lapses after 300 ms while the
    /// handler still runs: a slow handler's duplicate runs too.
    LockTimeout,
    /// Declares `expiryMs` but never forgets a key.
    ExpiryIgnored,
    /// Folds keys to lower case: `Ab` replays `ab`'s answer.
    CaseInsensitiveKey,
    /// Trims blanks inside the quotes: `"k "` replays `"k"`'s answer.
    TrimmedKey,
    /// Declares `errors: released` but never frees the lock after an error
    /// answer: every retry is 409 forever.
    LockKeptAfterError,
    /// Takes an empty key (`""`) as a key instead of refusing it.
    EmptyKeyAccepted,
    /// Declares `keyRequired: true` but lets a keyless request through.
    MissingKeyPasses,
    /// Declares `scope: method, path` but keys by caller and key alone:
    /// the same key on another route replays the first route's answer.
    UnscopedRoute,
    /// Declares `keyRequired: false` but treats a keyless request as the
    /// empty key: the second keyless order is a replay of the first.
    KeylessDeduplicated,
    /// Keys its records by key and payload together: another payload with
    /// the key is another record, so it runs (in flight or after), never 409/422.
    FingerprintInKey,
    /// Declares `durable: true` over memory storage: a restart forgets
    /// every key (seen only when the harness restarts it, `--start`).
    MemoryClaimsDurable,
    /// Takes one key in ten without an atomic step (look, then take): a
    /// burst of duplicates runs twice about once in ten bursts.
    RareRace,
    /// Declares `concurrent: wait` and `errors: released`, and lets the
    /// duplicates that waited on a failing run take the freed key and run
    /// (fastapi-idempotency's behaviour).
    WaitersRunAfterRelease,
    /// Declares `expiryMs: null` and forgets a key after 1 s.
    ForgetsAfterOneSecond,
    /// Declares `lockMs` 500 and never renews it: a handler slower than
    /// that has its duplicate run beside it.
    LockLapses,
    /// Declares `keySyntax: "token"` but takes any raw value as the key: a
    /// quoted key runs instead of being refused.
    TokenAcceptsQuoted,
    /// Declares `keySyntax: "any"` and `invalidKeyStatus: 400` but runs a
    /// request whose key is empty (the dodge of issue 45).
    EmptyKeyRunsUnderAny,
    /// Declares `keySyntax: "any"` but unquotes sf-strings: `"k"` and `k`
    /// are one key.
    AnyUnquotes,
    /// Declares `fingerprint: "bytes"` but compares parsed JSON: a body
    /// with its members reordered is replayed instead of refused.
    BytesComparedAsJson,
    /// Declares `invalidKeyStatus: null` (lenient) but refuses an empty key 400.
    RefusesEmptyKey,
    /// Declares `fingerprint: "none"` (lenient) but refuses another
    /// payload 422.
    FingerprintDespiteNone,
    /// Declares `scope: []` (lenient) but scopes keys by caller, method
    /// and path: another caller's request with the key runs.
    ScopedDespiteUnscoped,
    /// Declares `lockMs` (lenient's 3000) but its lock lapses after 300 ms.
    LockShorterThanDeclared,
    /// Declares `replayHeader` but a replay does not carry it: a client
    /// cannot tell a replay from a first execution.
    ReplayUnmarked,
    /// Refuses a key longer than [`middleware::LONG_KEY_REFUSED_AT`]
    /// bytes (a column too narrow): a 200-character key is answered 400.
    LongKeyRefused,
    /// Declares `keySyntax: "any"` but refuses 400 a key that starts with a
    /// double quote (taken for a malformed sf-string): a key the declared
    /// syntax admits refused (issue 54: blamed on `idem.key.syntax`).
    AnyRefusesQuoted,
    /// Answers 500 instead of `concurrentStatus` to a duplicate in flight
    /// (nothing runs twice; issue 54: blamed on `idem.concurrent.declared`
    /// alone, never on `idem.lock.held`).
    InFlightAnswers500,
    // The three below pass the suite; the fuzz pass's programs and battery
    // find them, with the keys and bodies clients send (issue 56).
    /// Keeps only the first [`middleware::TRUNCATED_KEY_BYTES`] bytes of a
    /// key (a column too narrow, silently cut): two long keys that differ
    /// only past them are one key, the second replayed the first's answer.
    KeyTruncatedAt64,
    /// Collapses every run of blanks inside a key to one: `"a  b"` and
    /// `"a   b"` are one key.
    KeyBlanksCollapsed,
    /// Declares `keySyntax: "any"` and takes a bare key without an atomic
    /// step (look, then take): only a burst of unquoted keys (a client's
    /// bare UUID) runs twice.
    RaceOnBareKeys,
    // The defects below pass the suite and the fuzz pass's programs and
    // battery: each breaks a promise only at its own scale, seconds or
    // thousands of keys away (issue 55); the probes at scale find them.
    /// Declares `expiryMs` 86400000 (a day) and forgets a key
    /// [`middleware::SHORT_EXPIRY_MS`] after it completed (a TTL set in
    /// seconds where milliseconds were meant).
    ExpiryShorterThanDeclared,
    /// Declares `expiryMs: null` and forgets a key after
    /// [`middleware::FORGETS_LATER_MS`] (past the battery's 3 s retry).
    ForgetsAfterFourSeconds,
    /// Declares `lockMs: null` and its lock lapses after
    /// [`middleware::LAPSES_AFTER_MS`] while the handler runs (past the
    /// battery's 700 ms handler): a duplicate sent later runs too.
    LockLapsesAfter750ms,
    /// Declares `expiryMs: null` and keeps only the
    /// [`middleware::KEPT_KEYS`] most recent completed keys (a bounded
    /// cache as its store): an older key runs again.
    EvictsBeyond1000Keys,
    /// Declares `errors: stored` and `expiryMs: null`, and a clean-up job
    /// drops stored error answers [`middleware::ERRORS_SWEPT_AFTER_MS`]
    /// after they completed: a retry of a failed request runs again.
    ErrorsSweptAfter5s,
    /// `race-window-<N>us` (issue 56): looks the key up, then takes it
    /// after a set window of [`RaceWindow`] (a few microseconds to
    /// milliseconds): duplicates that reach the check within the window of
    /// each other both run. The calibrated race the `reqkey bench
    /// race-window` curve is measured on.
    RaceWindow(RaceWindow),
    // Two defects in one app (issue 54): the fuzz pass must report both.
    /// Declares `lockMs` 500 (`short-lock`), marks no replay
    /// (`replay-unmarked`) and never renews its lock (`lock-lapses`): two
    /// independent defects, each a violation of its own.
    TwoDefectsReplayUnmarkedLockLapses,
}

/// The windows `race-window-<N>us` is calibrated at, in µs, and their names.
const RACE_WINDOWS: [(u32, &str); 14] = [
    (0, "race-window-0us"),
    (1, "race-window-1us"),
    (2, "race-window-2us"),
    (5, "race-window-5us"),
    (10, "race-window-10us"),
    (20, "race-window-20us"),
    (50, "race-window-50us"),
    (100, "race-window-100us"),
    (200, "race-window-200us"),
    (500, "race-window-500us"),
    (1_000, "race-window-1000us"),
    (2_000, "race-window-2000us"),
    (5_000, "race-window-5000us"),
    (10_000, "race-window-10000us"),
];

/// The window between check and set of a `race-window-<N>us` variant: one
/// of the calibrated windows (0 to 10 ms, `RaceWindow::all_us`); 0 is no
/// time, across one await.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RaceWindow(u8);

impl RaceWindow {
    /// No time at all, across one await: a race only duplicates ready at
    /// the same instant meet (a scheduler's round, microseconds).
    pub const ONE_AWAIT: RaceWindow = RaceWindow(0);

    /// Every calibrated window, in µs, shortest first.
    pub fn all_us() -> Vec<u32> {
        RACE_WINDOWS.iter().map(|w| w.0).collect()
    }

    /// The calibrated window of `us` microseconds, if it is one.
    pub fn of_us(us: u32) -> Option<Self> {
        RACE_WINDOWS
            .iter()
            .position(|w| w.0 == us)
            .and_then(|i| u8::try_from(i).ok())
            .map(RaceWindow)
    }

    pub fn us(self) -> u32 {
        RACE_WINDOWS[usize::from(self.0) % RACE_WINDOWS.len()].0
    }

    fn name(self) -> &'static str {
        RACE_WINDOWS[usize::from(self.0) % RACE_WINDOWS.len()].1
    }
}

impl IdemDefect {
    /// Every built-in variant (of the race windows, the one across an
    /// await, which every battery finds; `parse` takes every calibrated
    /// `race-window-<N>us`, measured by `reqkey bench race-window`).
    pub const ALL: [IdemDefect; 46] = [
        Self::CheckThenSet,
        Self::UnscopedCaller,
        Self::NoFingerprint,
        Self::FingerprintRawBytes,
        Self::ReplayDropsStatus,
        Self::ReplayDropsHeaders,
        Self::ReplayDropsBody,
        Self::StoresReleasedErrors,
        Self::Handler4xxKept,
        Self::LockTimeout,
        Self::ExpiryIgnored,
        Self::CaseInsensitiveKey,
        Self::TrimmedKey,
        Self::LockKeptAfterError,
        Self::EmptyKeyAccepted,
        Self::MissingKeyPasses,
        Self::UnscopedRoute,
        Self::KeylessDeduplicated,
        Self::FingerprintInKey,
        Self::MemoryClaimsDurable,
        Self::RareRace,
        Self::WaitersRunAfterRelease,
        Self::ForgetsAfterOneSecond,
        Self::LockLapses,
        Self::TokenAcceptsQuoted,
        Self::EmptyKeyRunsUnderAny,
        Self::AnyUnquotes,
        Self::BytesComparedAsJson,
        Self::RefusesEmptyKey,
        Self::FingerprintDespiteNone,
        Self::ScopedDespiteUnscoped,
        Self::LockShorterThanDeclared,
        Self::ReplayUnmarked,
        Self::LongKeyRefused,
        Self::AnyRefusesQuoted,
        Self::InFlightAnswers500,
        Self::KeyTruncatedAt64,
        Self::KeyBlanksCollapsed,
        Self::RaceOnBareKeys,
        Self::ExpiryShorterThanDeclared,
        Self::ForgetsAfterFourSeconds,
        Self::LockLapsesAfter750ms,
        Self::EvictsBeyond1000Keys,
        Self::ErrorsSweptAfter5s,
        Self::RaceWindow(RaceWindow::ONE_AWAIT),
        Self::TwoDefectsReplayUnmarkedLockLapses,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::CheckThenSet => "check-then-set",
            Self::UnscopedCaller => "unscoped-caller",
            Self::NoFingerprint => "no-fingerprint",
            Self::FingerprintRawBytes => "fingerprint-raw-bytes",
            Self::ReplayDropsStatus => "replay-drops-status",
            Self::ReplayDropsHeaders => "replay-drops-headers",
            Self::ReplayDropsBody => "replay-drops-body",
            Self::StoresReleasedErrors => "stores-released-errors",
            Self::Handler4xxKept => "handler-4xx-kept",
            Self::LockTimeout => "lock-timeout",
            Self::ExpiryIgnored => "expiry-ignored",
            Self::CaseInsensitiveKey => "case-insensitive-key",
            Self::TrimmedKey => "trimmed-key",
            Self::LockKeptAfterError => "lock-kept-after-error",
            Self::EmptyKeyAccepted => "empty-key-accepted",
            Self::MissingKeyPasses => "missing-key-passes",
            Self::UnscopedRoute => "unscoped-route",
            Self::KeylessDeduplicated => "keyless-deduplicated",
            Self::FingerprintInKey => "fingerprint-in-key",
            Self::MemoryClaimsDurable => "memory-claims-durable",
            Self::RareRace => "rare-race",
            Self::WaitersRunAfterRelease => "waiters-run-after-release",
            Self::ForgetsAfterOneSecond => "forgets-after-1s",
            Self::LockLapses => "lock-lapses",
            Self::TokenAcceptsQuoted => "token-accepts-quoted",
            Self::EmptyKeyRunsUnderAny => "empty-key-runs-under-any",
            Self::AnyUnquotes => "any-unquotes",
            Self::BytesComparedAsJson => "bytes-compared-as-json",
            Self::RefusesEmptyKey => "refuses-empty-key",
            Self::FingerprintDespiteNone => "fingerprint-despite-none",
            Self::ScopedDespiteUnscoped => "scoped-despite-unscoped",
            Self::LockShorterThanDeclared => "lock-shorter-than-declared",
            Self::ReplayUnmarked => "replay-unmarked",
            Self::LongKeyRefused => "long-key-refused",
            Self::AnyRefusesQuoted => "any-refuses-quoted",
            Self::InFlightAnswers500 => "in-flight-answers-500",
            Self::KeyTruncatedAt64 => "key-truncated-at-64",
            Self::KeyBlanksCollapsed => "key-blanks-collapsed",
            Self::RaceOnBareKeys => "race-on-bare-keys",
            Self::ExpiryShorterThanDeclared => "expiry-shorter-than-declared",
            Self::ForgetsAfterFourSeconds => "forgets-after-4s",
            Self::LockLapsesAfter750ms => "lock-lapses-after-750ms",
            Self::EvictsBeyond1000Keys => "evicts-beyond-1000-keys",
            Self::ErrorsSweptAfter5s => "errors-swept-after-5s",
            Self::RaceWindow(w) => w.name(),
            Self::TwoDefectsReplayUnmarkedLockLapses => "two-defects-replay-unmarked-lock-lapses",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        let window = || {
            let us = name.strip_prefix("race-window-")?.strip_suffix("us")?;
            RaceWindow::of_us(us.parse().ok()?).map(Self::RaceWindow)
        };
        Self::ALL
            .into_iter()
            .find(|d| d.name() == name)
            .or_else(window)
    }

    /// Whether it behaves as `d`: it is `d`, or a combination holding it.
    pub fn includes(self, d: IdemDefect) -> bool {
        match self {
            Self::TwoDefectsReplayUnmarkedLockLapses => {
                matches!(d, Self::ReplayUnmarked | Self::LockLapses) || d == self
            }
            own => own == d,
        }
    }

    /// Whether only the fuzz pass's probes at scale find it (issue 55).
    pub fn at_scale(self) -> bool {
        matches!(
            self,
            Self::ExpiryShorterThanDeclared
                | Self::ForgetsAfterFourSeconds
                | Self::LockLapsesAfter750ms
                | Self::EvictsBeyond1000Keys
                | Self::ErrorsSweptAfter5s
        )
    }

    /// The `expiryMs` the broken variant declares instead of the
    /// configured one (`None`: the configured one).
    pub fn declared_expiry_ms(self) -> Option<u64> {
        (self == Self::ExpiryShorterThanDeclared).then_some(middleware::DECLARED_DAY_MS)
    }

    /// The correct profile the broken variant declares (and breaks).
    pub fn declares(self) -> IdemVariant {
        match self {
            Self::StoresReleasedErrors | Self::Handler4xxKept | Self::LockKeptAfterError => {
                IdemVariant::Released
            }
            Self::KeylessDeduplicated => IdemVariant::Optional,
            Self::WaitersRunAfterRelease => IdemVariant::WaitReleased,
            Self::ForgetsAfterOneSecond
            | Self::ForgetsAfterFourSeconds
            | Self::EvictsBeyond1000Keys
            | Self::ErrorsSweptAfter5s => IdemVariant::NoExpiry,
            Self::LockLapses | Self::TwoDefectsReplayUnmarkedLockLapses => IdemVariant::ShortLock,
            Self::TokenAcceptsQuoted => IdemVariant::Token,
            Self::EmptyKeyRunsUnderAny
            | Self::AnyUnquotes
            | Self::AnyRefusesQuoted
            | Self::RaceOnBareKeys => IdemVariant::Any,
            Self::BytesComparedAsJson => IdemVariant::Bytes,
            Self::RefusesEmptyKey
            | Self::FingerprintDespiteNone
            | Self::ScopedDespiteUnscoped
            | Self::LockShorterThanDeclared => IdemVariant::Lenient,
            _ => IdemVariant::Default,
        }
    }
}

/// Reads a reference app's name: `VARIANT` (a correct profile), or
/// `broken-idem:DEFECT[:VARIANT]` (a bug under the profile it declares by
/// default, or under another, so that each bug can be certified under every
/// profile). `None`: not such a name.
pub fn parse_name(name: &str) -> Option<(IdemVariant, Option<IdemDefect>)> {
    match name.strip_prefix("broken-idem:") {
        Some(rest) => {
            let (defect, variant) = match rest.split_once(':') {
                Some((d, v)) => {
                    let d = IdemDefect::parse(d)?;
                    (d, IdemVariant::parse(v)?)
                }
                None => {
                    let d = IdemDefect::parse(rest)?;
                    (d, d.declares())
                }
            };
            Some((variant, Some(defect)))
        }
        None => IdemVariant::parse(name).map(|v| (v, None)),
    }
}

/// What to serve: a profile, a storage, at most one bug.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdemConfig {
    pub variant: IdemVariant,
    pub defect: Option<IdemDefect>,
    /// `None`: memory; `Some(url)`: Redis.
    pub redis_url: Option<String>,
    pub expiry_ms: Option<u64>,
}

impl Default for IdemConfig {
    fn default() -> Self {
        Self {
            variant: IdemVariant::Default,
            defect: None,
            redis_url: None,
            expiry_ms: Some(DEFAULT_EXPIRY_MS),
        }
    }
}

/// Opens the storage `config` names.
pub async fn open_storage(config: &IdemConfig) -> Result<Arc<dyn IdemStorage>, String> {
    match &config.redis_url {
        None => Ok(Arc::new(MemoryStorage::new())),
        #[cfg(feature = "redis")]
        Some(url) => redis_storage::RedisStorage::connect(url)
            .await
            .map(|s| Arc::new(s) as Arc<dyn IdemStorage>)
            .map_err(|e| e.to_string()),
        #[cfg(not(feature = "redis"))]
        Some(_) => Err("this build has no Redis backend".into()),
    }
}

/// The app's router for `config` over `storage`.
pub fn router_for(config: &IdemConfig, storage: Arc<dyn IdemStorage>) -> axum::Router {
    let durable = storage.durable() || config.defect == Some(IdemDefect::MemoryClaimsDurable);
    let expiry_ms = match config.defect.and_then(IdemDefect::declared_expiry_ms) {
        Some(declared) => Some(declared),
        None => config.expiry_ms,
    };
    let profile = config.variant.profile(expiry_ms, durable);
    let name = match config.defect {
        Some(d) if d.declares() == config.variant => format!("broken-idem:{}", d.name()),
        Some(d) => format!("broken-idem:{}:{}", d.name(), config.variant.name()),
        None => format!("reference-idem:{}", config.variant.name()),
    };
    let implementation = json!({"name": name, "version": env!("CARGO_PKG_VERSION"),
                                "storage": storage.name()});
    let layer = Arc::new(middleware::IdemLayer {
        profile,
        storage,
        defect: config.defect,
        recent: std::sync::Mutex::default(),
    });
    app::router(layer, implementation)
}

/// Serves `config` on `listener` until `shutdown` resolves.
pub async fn serve(
    config: &IdemConfig,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), String> {
    let storage = open_storage(config).await?;
    http_serve::serve(
        listener,
        router_for(config, storage),
        ServerLimits::default(),
        shutdown,
    )
    .await
    .map_err(|e| e.to_string())
}

/// An app running as a task; dropping the handle shuts it down.
#[derive(Debug)]
pub struct IdemHandle {
    pub addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
}

impl Drop for IdemHandle {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// Starts the app on `addr` (port 0: ephemeral) as a task.
pub async fn spawn(config: IdemConfig, addr: SocketAddr) -> Result<IdemHandle, String> {
    let storage = open_storage(&config).await?;
    let listener = http_serve::bind(addr).await.map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let (tx, rx) = oneshot::channel::<()>();
    let router = router_for(&config, storage);
    tokio::spawn(http_serve::serve(
        listener,
        router,
        ServerLimits::default(),
        async move {
            let _ = rx.await;
        },
    ));
    Ok(IdemHandle {
        addr,
        shutdown: Some(tx),
    })
}
