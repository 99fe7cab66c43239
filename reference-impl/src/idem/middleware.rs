//! The reference `Idempotency-Key` middleware (SPEC 10): an axum layer in
//! front of any handlers, over an [`IdemStorage`].
//!
//! Per request: read the key as the declared `keySyntax` says (draft 2.1),
//! fingerprint the payload (2.4), scope the key by what `scope` declares,
//! then take the key atomically: a free key runs the handler and keeps its
//! answer (an error answer freed instead under `errors: released`), a key
//! in flight is refused `concurrentStatus` or waited for, a completed key
//! is replayed, or refused `mismatchStatus` for another payload (2.6, 2.7).
//! Each [`IdemDefect`] switches in one bug a middleware author makes; a
//! correct variant has none.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use reqkey_model::digest::canonical_json;
use reqkey_model::idem_profile::{
    key_of, Concurrent, Errors, Fingerprint, IdemProfile, KeySyntax, ScopeBy,
};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::storage::{IdemStorage, Slot, StoredAnswer};
use super::IdemDefect;

/// The request header carrying the key (draft 2).
pub const KEY_HEADER: &str = "idempotency-key";
/// The app's caller header (reqkey-idem/1).
pub const CALLER_HEADER: &str = "x-reqkey-caller";
/// The largest request body the layer reads (larger: 413).
pub const MAX_BODY_BYTES: usize = 1024 * 1024;
/// The largest handler answer kept for replay.
pub const MAX_ANSWER_BYTES: usize = 1024 * 1024;
/// Under `concurrent: wait`, how long a duplicate waits at most (then 503).
pub const WAIT_LIMIT_MS: u64 = 30_000;
/// How often a waiting duplicate looks again.
pub const WAIT_POLL_MS: u64 = 20;
/// The lock length the `lock-timeout` variant uses while declaring none.
pub const BROKEN_LOCK_MS: u64 = 300;
/// How long the `forgets-after-1s` variant keeps a key while declaring
/// `expiryMs: null`.
pub const FORGETS_AFTER_MS: u64 = 1_000;
/// What `expiry-shorter-than-declared` declares (a day) and keeps a key
/// (3 s).
pub const DECLARED_DAY_MS: u64 = 86_400_000;
pub const SHORT_EXPIRY_MS: u64 = 3_000;
/// How long `forgets-after-4s` keeps a key while declaring `null`.
pub const FORGETS_LATER_MS: u64 = 4_000;
/// When the lock of `lock-lapses-after-750ms` lapses while declaring `null`.
pub const LAPSES_AFTER_MS: u64 = 750;
/// The completed keys `evicts-beyond-1000-keys` keeps (the most recent).
pub const KEPT_KEYS: usize = 1_000;
/// How long `errors-swept-after-5s` keeps a stored error answer.
pub const ERRORS_SWEPT_AFTER_MS: u64 = 5_000;
/// The `rare-race` variant takes the key without an atomic step for one
/// key in this many.
pub const RARE_RACE_ONE_IN: u64 = 10;
/// Refused when a key scoped without the caller is another caller's
/// (SPEC 10 `[[idem.scope.no-leak]]`: refused, never replayed).
pub const OTHER_CALLER_STATUS: u16 = 403;
/// Where the refusals' bodies point (draft 2.7: "a link pointing to
/// relevant documentation"); the workspace's `repository` URL plus the page).
pub const DOCS_URL: &str = "https://example.invalid/reqkey/docs/idempotency-key.md";

/// The layer's state: what it declares, where it keeps keys, its one bug.
pub struct IdemLayer {
    pub profile: IdemProfile,
    pub storage: Arc<dyn IdemStorage>,
    pub defect: Option<IdemDefect>,
    /// Only with `evicts-beyond-1000-keys`: the completed keys, oldest
    /// first (at most [`KEPT_KEYS`]).
    pub recent: std::sync::Mutex<std::collections::VecDeque<String>>,
}

impl std::fmt::Debug for IdemLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdemLayer")
            .field("profile", &self.profile)
            .field("storage", &self.storage.name())
            .field("defect", &self.defect)
            .finish()
    }
}

impl IdemLayer {
    fn has(&self, d: IdemDefect) -> bool {
        self.defect.is_some_and(|own| own.includes(d))
    }
}

/// A lock's own token: unique in this process and across its restarts.
fn fresh_token() -> String {
    static START: OnceLock<u128> = OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let start = START.get_or_init(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    });
    format!("{start:x}-{:x}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Whether the `rare-race` variant races on this (hashed) key.
fn rare(skey: &str) -> bool {
    let tail = &skey[skey.len().saturating_sub(8)..];
    u64::from_str_radix(tail, 16).is_ok_and(|n| n % RARE_RACE_ONE_IN == 0)
}

/// A refusal: `application/problem+json` with a link to the docs.
fn refuse(status: u16, title: &str) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
    let body = json!({"type": DOCS_URL, "title": title, "status": code.as_u16()});
    let mut r = (code, body.to_string()).into_response();
    r.headers_mut().insert(
        "content-type",
        HeaderValue::from_static("application/problem+json"),
    );
    r
}

fn hex_sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The payload's fingerprint as `fingerprint` declares it (draft 2.4).
fn fingerprint_of(layer: &IdemLayer, body: &[u8]) -> String {
    let by_json = (layer.profile.fingerprint == Fingerprint::Json
        && !layer.has(IdemDefect::FingerprintRawBytes))
        || layer.has(IdemDefect::BytesComparedAsJson)
        || layer.has(IdemDefect::FingerprintDespiteNone);
    if by_json {
        if let Ok(v) = serde_json::from_slice::<Value>(body) {
            return format!("json:{}", hex_sha256(canonical_json(&v).as_bytes()));
        }
    }
    format!("bytes:{}", hex_sha256(body))
}

/// The storage key: the key and what `scope` declares, hashed.
fn scope_key(layer: &IdemLayer, req: &Request, caller: &str, key: &[u8]) -> String {
    let p = &layer.profile;
    let scoped_anyway = layer.has(IdemDefect::ScopedDespiteUnscoped);
    let by_caller =
        (p.scoped_by(ScopeBy::Caller) && !layer.has(IdemDefect::UnscopedCaller)) || scoped_anyway;
    let by_route = !layer.has(IdemDefect::UnscopedRoute);
    let parts = json!([
        if by_caller { caller } else { "" },
        if (p.scoped_by(ScopeBy::Method) || scoped_anyway) && by_route {
            req.method().as_str()
        } else {
            ""
        },
        if (p.scoped_by(ScopeBy::Path) || scoped_anyway) && by_route {
            req.uri().path()
        } else {
            ""
        },
        hex_sha256(key),
    ]);
    hex_sha256(parts.to_string().as_bytes())
}

/// The bytes of a key `broken-idem:key-truncated-at-64` keeps.
pub const TRUNCATED_KEY_BYTES: usize = 64;

/// The longest field value `broken-idem:long-key-refused` takes as a key.
pub const LONG_KEY_REFUSED_AT: usize = 100;

/// The key of a request: `Ok(None)` without the header, `Err` for a
/// malformed one (draft 2.1), as the profile and the defect read it.
fn read_key(layer: &IdemLayer, req: &Request) -> Result<Option<Vec<u8>>, ()> {
    let mut values = req.headers().get_all(KEY_HEADER).iter();
    let Some(first) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(());
    }
    let mut raw = first.as_bytes().to_vec();
    if layer.has(IdemDefect::LongKeyRefused) && raw.len() > LONG_KEY_REFUSED_AT {
        return Err(());
    }
    if layer.has(IdemDefect::AnyRefusesQuoted) && raw.starts_with(b"\"") {
        return Err(());
    }
    if layer.has(IdemDefect::TrimmedKey) {
        raw = raw.trim_ascii().to_vec();
        if layer.profile.key_syntax == KeySyntax::SfString {
            if let Some(inner) = raw.strip_prefix(b"\"").and_then(|r| r.strip_suffix(b"\"")) {
                raw = [b"\"", inner.trim_ascii(), b"\""].concat();
            }
        }
    }
    let syntax = match layer.profile.key_syntax {
        KeySyntax::Token if layer.has(IdemDefect::TokenAcceptsQuoted) => KeySyntax::Any,
        KeySyntax::Any if layer.has(IdemDefect::AnyUnquotes) && raw.starts_with(b"\"") => {
            KeySyntax::SfString
        }
        s => s,
    };
    let empty = raw == b"\"\"" || raw.is_empty();
    let key = match key_of(&raw, syntax) {
        Some(k) => k,
        None if empty
            && (layer.has(IdemDefect::EmptyKeyAccepted)
                || layer.has(IdemDefect::EmptyKeyRunsUnderAny)) =>
        {
            Vec::new()
        }
        None if empty && layer.has(IdemDefect::RefusesEmptyKey) => return Err(()),
        None if layer.profile.invalid_key_status.is_none() => raw,
        None => return Err(()),
    };
    if layer.has(IdemDefect::CaseInsensitiveKey) {
        return Ok(Some(key.to_ascii_lowercase()));
    }
    let mut key = key;
    if layer.has(IdemDefect::KeyTruncatedAt64) {
        key.truncate(TRUNCATED_KEY_BYTES);
    }
    if layer.has(IdemDefect::KeyBlanksCollapsed) {
        key.dedup_by(|b, a| *a == b' ' && *b == b' ');
    }
    Ok(Some(key))
}

/// The axum middleware function.
pub async fn idempotency(
    State(layer): State<Arc<IdemLayer>>,
    req: Request,
    next: axum::middleware::Next,
) -> Response {
    let p = &layer.profile;
    // Whether the key came unquoted (`race-on-bare-keys` races on those).
    let bare = req
        .headers()
        .get(KEY_HEADER)
        .is_some_and(|v| !v.as_bytes().starts_with(b"\""));
    let key = match read_key(&layer, &req) {
        Ok(Some(k)) => k,
        Ok(None) if p.key_required && !layer.has(IdemDefect::MissingKeyPasses) => {
            return refuse(400, "an Idempotency-Key header is required")
        }
        Ok(None) if layer.has(IdemDefect::KeylessDeduplicated) => Vec::new(),
        Ok(None) => return next.run(req).await,
        Err(()) => {
            let status = p.invalid_key_status.unwrap_or(400);
            return refuse(status, "the Idempotency-Key header is malformed");
        }
    };
    let caller = req
        .headers()
        .get(CALLER_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let (parts, body) = req.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_BODY_BYTES).await else {
        return refuse(413, "the request body is too large or was cut");
    };
    let req = Request::from_parts(parts, Body::from(bytes.clone()));
    // A key not scoped by caller is shared by callers, but an answer is
    // never replayed to another caller (SPEC 10 `[[idem.scope.no-leak]]`):
    // the record keeps its caller, and another caller is refused.
    let fp = fingerprint_of(&layer, &bytes);
    let mut skey = scope_key(&layer, &req, &caller, &key);
    if layer.has(IdemDefect::FingerprintInKey) {
        skey = hex_sha256(format!("{skey}:{fp}").as_bytes());
    }
    let lock_ms =
        if layer.has(IdemDefect::LockTimeout) || layer.has(IdemDefect::LockShorterThanDeclared) {
            Some(BROKEN_LOCK_MS)
        } else if layer.has(IdemDefect::LockLapsesAfter750ms) {
            Some(LAPSES_AFTER_MS)
        } else {
            p.lock_ms
        };
    let deadline = tokio::time::Instant::now() + Duration::from_millis(WAIT_LIMIT_MS);
    let ours = Slot::InFlight {
        fingerprint: fp.clone(),
        caller: caller.clone(),
        token: fresh_token(),
    };
    let compares = (p.fingerprint != Fingerprint::None
        || layer.has(IdemDefect::FingerprintDespiteNone))
        && !layer.has(IdemDefect::NoFingerprint);
    // Another caller's record (a key not scoped by caller): refused.
    let others = |owner: &str| owner != caller && !layer.has(IdemDefect::UnscopedCaller);
    // The lock this request waits on, once it met one in flight.
    let mut waiting_on: Option<String> = None;
    loop {
        let racy = layer.has(IdemDefect::CheckThenSet)
            || (layer.has(IdemDefect::RareRace) && rare(&skey))
            || (layer.has(IdemDefect::RaceOnBareKeys) && bare);
        let held = if let Some(IdemDefect::RaceWindow(w)) = layer.defect {
            window_then_set(&layer, &skey, &ours, lock_ms, w.us()).await
        } else if racy {
            check_then_set(&layer, &skey, &ours, lock_ms).await
        } else {
            layer
                .storage
                .try_lock(&skey, &ours, lock_ms, waiting_on.as_deref())
                .await
        };
        let held = match held {
            Ok(h) => h,
            Err(_) => return refuse(503, "the idempotency storage did not answer"),
        };
        match held {
            None => return run_and_keep(&layer, &skey, &ours, lock_ms, req, next).await,
            Some(Slot::Released { answer }) => return replay(&layer, &answer),
            Some(Slot::Done {
                fingerprint,
                caller: owner,
                answer,
            }) => {
                if others(&owner) {
                    return refuse(
                        OTHER_CALLER_STATUS,
                        "the Idempotency-Key is another caller's",
                    );
                }
                if compares && fingerprint != fp {
                    return refuse(
                        p.mismatch_status.unwrap_or(422),
                        "the Idempotency-Key was used with another payload",
                    );
                }
                return replay(&layer, &answer);
            }
            Some(Slot::InFlight {
                fingerprint,
                caller: owner,
                token,
            }) => {
                if others(&owner) {
                    return refuse(
                        OTHER_CALLER_STATUS,
                        "the Idempotency-Key is another caller's",
                    );
                }
                if layer.has(IdemDefect::InFlightAnswers500) {
                    return refuse(500, "a request with this Idempotency-Key is in flight");
                }
                if let Some(status) = p
                    .concurrent_status
                    .filter(|_| p.concurrent == Concurrent::Conflict)
                {
                    return refuse(status, "a request with this Idempotency-Key is in flight");
                }
                if compares && fingerprint != fp {
                    return refuse(
                        p.mismatch_status.unwrap_or(422),
                        "the Idempotency-Key is in flight with another payload",
                    );
                }
                // The first lock met is the one whose answer this request gets.
                waiting_on.get_or_insert(token);
                if tokio::time::Instant::now() >= deadline {
                    return refuse(503, "waited too long for the request in flight");
                }
                tokio::time::sleep(Duration::from_millis(WAIT_POLL_MS)).await;
            }
        }
    }
}

/// The `check-then-set` bug: look, then (a round trip later) take.
async fn check_then_set(
    layer: &IdemLayer,
    skey: &str,
    ours: &Slot,
    lock_ms: Option<u64>,
) -> Result<Option<Slot>, super::storage::StorageError> {
    if let Some(held) = layer.storage.peek(skey).await? {
        return Ok(Some(held));
    }
    tokio::time::sleep(Duration::from_millis(5)).await;
    layer.storage.put_lock(skey, ours, lock_ms).await?;
    Ok(None)
}

/// The `race-window-<N>us` bug: look, then take the key `window_us` later.
/// Under a millisecond the window is spun on the thread that looked (as a
/// blocking store client holds it; a timer would round it up to a
/// millisecond, and a yield would let every ready request in): only
/// requests on other threads can look meanwhile. From a millisecond on it
/// sleeps, and any request may look meanwhile. A window of 0 is one yield
/// to the runtime (an async store's round trip answered at once): only
/// requests ready at that instant look meanwhile, the duplicates of a
/// burst whose last bytes arrived together.
async fn window_then_set(
    layer: &IdemLayer,
    skey: &str,
    ours: &Slot,
    lock_ms: Option<u64>,
    window_us: u32,
) -> Result<Option<Slot>, super::storage::StorageError> {
    if let Some(held) = layer.storage.peek(skey).await? {
        return Ok(Some(held));
    }
    let window = Duration::from_micros(u64::from(window_us));
    if window.is_zero() {
        tokio::task::yield_now().await;
    } else if window >= Duration::from_millis(1) {
        tokio::time::sleep(window).await;
    } else {
        let until = std::time::Instant::now() + window;
        while std::time::Instant::now() < until {
            std::hint::spin_loop();
        }
    }
    layer.storage.put_lock(skey, ours, lock_ms).await?;
    Ok(None)
}

/// Runs the handler; while it runs, a lock of a declared length is renewed
/// (a third of its length apart), so that it lapses only when its holder
/// died (SPEC 10: a lapsed lock is no licence to run a duplicate).
async fn run_renewing(
    layer: &IdemLayer,
    skey: &str,
    ours: &Slot,
    lock_ms: Option<u64>,
    req: Request,
    next: axum::middleware::Next,
) -> Response {
    // The bugs of a lock that lapses while its handler runs never renew it.
    let renews = !layer.has(IdemDefect::LockLapses)
        && !layer.has(IdemDefect::LockTimeout)
        && !layer.has(IdemDefect::LockShorterThanDeclared)
        && !layer.has(IdemDefect::LockLapsesAfter750ms);
    let Some(ms) = lock_ms.filter(|_| renews) else {
        return next.run(req).await;
    };
    let period = Duration::from_millis((ms / 3).max(5));
    let handler = next.run(req);
    tokio::pin!(handler);
    loop {
        tokio::select! {
            r = &mut handler => return r,
            () = tokio::time::sleep(period) => {
                let _ = layer.storage.renew(skey, ours, ms).await;
            }
        }
    }
}

/// Runs the handler under the lock and keeps (or frees) its answer.
async fn run_and_keep(
    layer: &IdemLayer,
    skey: &str,
    ours: &Slot,
    lock_ms: Option<u64>,
    req: Request,
    next: axum::middleware::Next,
) -> Response {
    let p = &layer.profile;
    let Slot::InFlight {
        fingerprint: fp,
        caller,
        token,
    } = ours
    else {
        return refuse(500, "the middleware lost its own lock");
    };
    let response = run_renewing(layer, skey, ours, lock_ms, req, next).await;
    let (parts, body) = response.into_parts();
    let bytes: Bytes = match axum::body::to_bytes(body, MAX_ANSWER_BYTES).await {
        Ok(b) => b,
        Err(_) => {
            let _ = layer.storage.release(skey).await;
            return refuse(502, "the handler's answer could not be read");
        }
    };
    let status = parts.status.as_u16();
    let kept = |name: &str| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(|v| (name.to_owned(), v.to_owned()))
    };
    let answer = StoredAnswer {
        status,
        headers: ["content-type", "x-reqkey-order"]
            .into_iter()
            .filter_map(kept)
            .collect(),
        body: String::from_utf8_lossy(&bytes).into_owned(),
    };
    let release = status >= 400
        && p.errors == Errors::Released
        && !layer.has(IdemDefect::StoresReleasedErrors)
        && !(status < 500 && layer.has(IdemDefect::Handler4xxKept));
    // Under `concurrent: wait` the requests that waited on this lock get
    // its answer, though the key is freed for those that come after.
    let waiters =
        p.concurrent == Concurrent::Wait && !layer.has(IdemDefect::WaitersRunAfterRelease);
    let stored = if release {
        if layer.has(IdemDefect::LockKeptAfterError) {
            Ok(())
        } else if waiters {
            layer
                .storage
                .release_to_waiters(skey, token, &answer, WAIT_LIMIT_MS)
                .await
        } else {
            layer.storage.release(skey).await
        }
    } else {
        let expiry = if layer.has(IdemDefect::ExpiryIgnored) {
            None
        } else if layer.has(IdemDefect::ForgetsAfterOneSecond) {
            Some(FORGETS_AFTER_MS)
        } else if layer.has(IdemDefect::ExpiryShorterThanDeclared) {
            Some(SHORT_EXPIRY_MS)
        } else if layer.has(IdemDefect::ForgetsAfterFourSeconds) {
            Some(FORGETS_LATER_MS)
        } else if layer.has(IdemDefect::ErrorsSweptAfter5s) && status >= 400 {
            Some(ERRORS_SWEPT_AFTER_MS)
        } else {
            p.expiry_ms
        };
        let kept = layer
            .storage
            .complete(skey, fp, caller, &answer, expiry)
            .await;
        if layer.has(IdemDefect::EvictsBeyond1000Keys) {
            evict_oldest(layer, skey).await;
        }
        kept
    };
    // A storage that fails here leaves the key in flight: duplicates are
    // refused rather than run a second time (at most once before
    // availability); the first caller still gets its answer.
    drop(stored);
    Response::from_parts(parts, Body::from(bytes))
}

/// The `evicts-beyond-1000-keys` bug: a bounded cache as the store, the
/// oldest completed key dropped once [`KEPT_KEYS`] are kept.
async fn evict_oldest(layer: &IdemLayer, skey: &str) {
    let dropped = {
        let mut recent = layer.recent.lock().unwrap_or_else(|p| p.into_inner());
        recent.push_back(skey.to_owned());
        if recent.len() > KEPT_KEYS {
            recent.pop_front()
        } else {
            None
        }
    };
    if let Some(old) = dropped {
        let _ = layer.storage.release(&old).await;
    }
}

/// A kept answer, replayed.
fn replay(layer: &IdemLayer, answer: &StoredAnswer) -> Response {
    let status = if layer.has(IdemDefect::ReplayDropsStatus) {
        200
    } else {
        answer.status
    };
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    let body = if layer.has(IdemDefect::ReplayDropsBody) {
        r#"{"replayed":true}"#.to_owned()
    } else {
        answer.body.clone()
    };
    let mut r = (code, body).into_response();
    for (name, value) in &answer.headers {
        if layer.has(IdemDefect::ReplayDropsHeaders) && name != "content-type" {
            continue;
        }
        if let (Ok(n), Ok(v)) = (
            axum::http::HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            r.headers_mut().insert(n, v);
        }
    }
    if let Some(h) = layer
        .profile
        .replay_header
        .as_ref()
        .filter(|_| !layer.has(IdemDefect::ReplayUnmarked))
    {
        if let Ok(n) = axum::http::HeaderName::from_bytes(h.as_bytes()) {
            r.headers_mut().insert(n, HeaderValue::from_static("true"));
        }
    }
    r
}
