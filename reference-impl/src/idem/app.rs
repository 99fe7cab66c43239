//! The `reqkey-idem/1` app (SPEC 10): the routes behind the idempotency
//! layer, each doing a counted side effect, and the two control routes
//! outside it (`/.reqkey/health`, `/.reqkey/effects`).
//!
//! The effects are recorded by the handlers, not by the layer: they are
//! the oracle of what really ran, whatever the layer answered.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use reqkey_model::idem_profile::IDEM_PROTOCOL;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::middleware::{idempotency, IdemLayer, CALLER_HEADER, KEY_HEADER};

pub use reqkey_model::idem_model::{SLEEP_CAP_MS, SLOW_DEFAULT_MS};
/// The most distinct effect entries kept (a bound on memory; past it new
/// entries are counted in one overflow entry with a null path).
pub const MAX_EFFECT_ENTRIES: usize = 100_000;

type EffectKey = (String, String, String, Option<String>, String);

/// The app's own state: the global order counter and the effects.
#[derive(Debug, Default)]
pub struct AppState {
    order: AtomicU64,
    effects: Mutex<BTreeMap<EffectKey, u64>>,
}

impl AppState {
    /// Records one side effect and answers its order number.
    fn effect(&self, method: &Method, uri: &Uri, headers: &HeaderMap, body: &[u8]) -> u64 {
        let n = self.order.fetch_add(1, Ordering::SeqCst) + 1;
        let key = (
            method.as_str().to_owned(),
            uri.path().to_owned(),
            caller(headers),
            headers
                .get(KEY_HEADER)
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned()),
            Sha256::digest(body)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect(),
        );
        if let Ok(mut map) = self.effects.lock() {
            let full = map.len() >= MAX_EFFECT_ENTRIES && !map.contains_key(&key);
            let key = if full {
                (key.0, String::new(), String::new(), None, String::new())
            } else {
                key
            };
            *map.entry(key).or_default() += 1;
        }
        n
    }

    fn effects_json(&self) -> Value {
        let list: Vec<Value> = self
            .effects
            .lock()
            .map(|map| {
                map.iter()
                    .map(|((method, path, caller, key, sha), count)| {
                        json!({"method": method, "path": path, "caller": caller,
                               "key": key, "bodySha256": sha, "count": count})
                    })
                    .collect()
            })
            .unwrap_or_default();
        json!({ "effects": list })
    }
}

fn caller(headers: &HeaderMap) -> String {
    headers
        .get(CALLER_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned()
}

#[derive(Clone)]
struct Ctx {
    app: Arc<AppState>,
    health: Arc<Value>,
}

/// The handler's own refusal of a body that is not a JSON object (SPEC 10,
/// the routes): it counts its run like any other, then answers 422 with
/// its `order`, so that a retry shows whether the layer kept the refusal
/// (`errors: stored`) or freed the key (`errors: released`).
fn refused_body(
    ctx: &Ctx,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &[u8],
) -> Response {
    let n = ctx.app.effect(method, uri, headers, body);
    let status = StatusCode::from_u16(reqkey_model::idem_model::REFUSED_BODY_STATUS)
        .unwrap_or(StatusCode::UNPROCESSABLE_ENTITY);
    let mut r = (
        status,
        axum::Json(json!({"error": "the body must be a JSON object", "order": n, "caller": caller(headers)})),
    )
        .into_response();
    r.headers_mut().insert("x-reqkey-order", n.into());
    r
}

fn object(body: &[u8]) -> Option<Value> {
    serde_json::from_slice::<Value>(body)
        .ok()
        .filter(Value::is_object)
}

async fn create(
    State(ctx): State<Ctx>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Some(echo) = object(&body) else {
        return refused_body(&ctx, &method, &uri, &headers, &body);
    };
    let n = ctx.app.effect(&method, &uri, &headers, &body);
    let mut r = (
        StatusCode::CREATED,
        axum::Json(json!({"order": n, "caller": caller(&headers), "echo": echo})),
    )
        .into_response();
    r.headers_mut().insert("x-reqkey-order", n.into());
    r
}

/// How long the handler of `method uri` sleeps before its side effect
/// (`sleepMs` of the body on the slow and the failing routes, as the
/// contract says: `reqkey_model::idem_model::handler_of`).
async fn sleep_as_asked(method: &Method, uri: &Uri, body: &[u8]) {
    let ms = reqkey_model::idem_model::handler_of(method.as_str(), uri.path(), body)
        .map_or(0, |h| h.sleep_ms);
    if ms > 0 {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
}

async fn fail(
    State(ctx): State<Ctx>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if object(&body).is_none() {
        return refused_body(&ctx, &method, &uri, &headers, &body);
    }
    sleep_as_asked(&method, &uri, &body).await;
    let n = ctx.app.effect(&method, &uri, &headers, &body);
    let mut r = (
        StatusCode::INTERNAL_SERVER_ERROR,
        axum::Json(json!({"error": "failed after effect", "order": n, "caller": caller(&headers)})),
    )
        .into_response();
    r.headers_mut().insert("x-reqkey-order", n.into());
    r
}

async fn slow(
    State(ctx): State<Ctx>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if object(&body).is_none() {
        return refused_body(&ctx, &method, &uri, &headers, &body);
    }
    sleep_as_asked(&method, &uri, &body).await;
    create(State(ctx), method, uri, headers, body).await
}

/// The whole app: the routes behind `layer`, the control routes beside it.
pub fn router(layer: Arc<IdemLayer>, implementation: Value) -> Router {
    // A durable app keeps its completed keys across a restart, so its
    // counter must not give a number again after one (SPEC 10,
    // `[[idem.profile.declared]]`: a replay is told from a re-execution by
    // its `order`): it starts from the clock (microseconds since the
    // epoch), above every number an earlier life of the app gave unless
    // that life ran a million effects a second. A volatile app forgets its
    // keys with its counter and starts from 0.
    let app = Arc::new(AppState::default());
    if layer.profile.durable {
        let now_us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX / 2));
        app.order.store(now_us, Ordering::SeqCst);
    }
    let health = json!({
        "protocol": IDEM_PROTOCOL,
        "implementation": implementation,
        "profile": layer.profile.to_json(),
    });
    let ctx = Ctx {
        app,
        health: Arc::new(health),
    };
    let guarded = Router::new()
        .route("/orders", post(create).put(create))
        .route("/orders/fail", post(fail))
        .route("/orders/slow", post(slow))
        .route("/payments", post(create))
        .layer(axum::middleware::from_fn_with_state(layer, idempotency))
        .with_state(ctx.clone());
    let control = Router::new()
        .route(
            "/.reqkey/health",
            get(|State(c): State<Ctx>| async move { axum::Json((*c.health).clone()) }),
        )
        .route(
            "/.reqkey/effects",
            get(|State(c): State<Ctx>| async move { axum::Json(c.app.effects_json()) }),
        )
        .with_state(ctx);
    guarded.merge(control)
}
