//! reqkey-idem/1 app around axum-idempotent (crates.io): its `IdempotentLayer`
//! in front of our five routes, in the README's direct-key mode
//! (`use_idempotency_key_header(Some("Idempotency-Key"), true)`), over the
//! README's session layer (`ruts`'s `SessionLayer` and tower-cookies'
//! `CookieManagerLayer`), with a `MokaStore` (memory, the README's store) or
//! a `RedisStore`.
//!
//! The library keeps each answer in the caller's session ("A response is
//! cached only for a request that already carries a session. The middleware
//! never creates one"). The caller is the app's authentication: our front
//! logs each `X-Reqkey-Caller` in once (a session made by our own login
//! route, inside the session layer and outside the library) and sends the
//! caller's session cookie with each of its requests, as a browser would.
//!
//! Everything here is ours and sits outside the library: the effects oracle
//! is recorded by our handler (it counts what really ran), and
//! `/.reqkey/health` and `/.reqkey/effects` never pass through it.

use std::collections::HashMap;
use std::io::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{to_bytes, Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use axum_idempotent::{IdempotentLayer, IdempotentOptions};
use ruts::store::SessionStore;
use ruts::{CookieOptions, Session, SessionLayer};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tower::ServiceExt as _;
use tower_cookies::CookieManagerLayer;

const NAME: &str = "axum-idempotent";
/// The library's version, pinned in Cargo.toml.
const VERSION: &str = "0.6.0";
const PROTOCOL: &str = "reqkey-idem/1";
/// `IdempotentOptions::default()`: "5 mins default".
const DEFAULT_EXPIRY_S: i64 = 300;
const SESSION_COOKIE: &str = "session";
/// The session cookie's lifetime (the library caches for the shorter of it
/// and its own expiry): a day, longer than any expiry a run declares.
const SESSION_MAX_AGE_S: u64 = 86_400;
const SLOW_DEFAULT_MS: u64 = 1000;
const SLEEP_MAX_MS: u64 = 120_000;
const MAX_BODY_BYTES: usize = 8 << 20;

struct Options {
    port: u16,
    storage: String,
    redis_url: String,
    expiry_ms: Option<u64>,
    effects_file: Option<String>,
}

/// `--port P --storage memory|redis --redis-url URL --expiry-ms MS
/// --effects-file F --key-prefix S` (the prefix is taken and unused: the
/// session store's keys are random session ids); exit 2 on a bad one.
fn options() -> Options {
    let fail = |why: &str| -> ! {
        eprintln!("{NAME}: {why}");
        std::process::exit(2)
    };
    let mut o = Options {
        port: 0,
        storage: "memory".into(),
        redis_url: "redis://127.0.0.1:6379/0".into(),
        expiry_ms: None,
        effects_file: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().unwrap_or_else(|| fail(&format!("{flag} needs a value")));
        match flag.as_str() {
            "--port" => o.port = value.parse().unwrap_or_else(|_| fail("--port must be 1-65535")),
            "--storage" if value == "memory" || value == "redis" => o.storage = value,
            "--storage" => fail("--storage is memory or redis"),
            "--redis-url" => o.redis_url = value,
            "--expiry-ms" => match value.parse::<u64>() {
                Ok(ms) if ms >= 1 => o.expiry_ms = Some(ms),
                _ => fail("--expiry-ms must be a positive integer"),
            },
            "--effects-file" => o.effects_file = Some(value),
            "--key-prefix" => {}
            other => fail(&format!("unknown option {other}")),
        }
    }
    if o.port == 0 {
        fail("--port must be 1-65535");
    }
    o
}

/// The effects oracle and the global order counter.
struct Effects {
    file: Option<String>,
    entries: Vec<Value>,
    order: u64,
}

impl Effects {
    fn load(file: Option<String>) -> Self {
        let mut e = Effects {
            file,
            entries: Vec::new(),
            order: 0,
        };
        if let Some(text) = e.file.as_ref().and_then(|f| std::fs::read_to_string(f).ok()) {
            for line in text.lines() {
                // A line cut by a crash is skipped.
                if let Ok(v) = serde_json::from_str::<Value>(line) {
                    e.add(v, false);
                }
            }
        }
        e
    }

    fn add(&mut self, effect: Value, persist: bool) -> u64 {
        let same = |v: &Value| {
            ["method", "path", "caller", "key", "bodySha256"]
                .iter()
                .all(|k| v[k] == effect[k])
        };
        match self.entries.iter_mut().find(|v| same(v)) {
            Some(v) => v["count"] = json!(v["count"].as_u64().unwrap_or(0) + 1),
            None => {
                let mut v = effect.clone();
                v["count"] = json!(1);
                self.entries.push(v);
            }
        }
        self.order += 1;
        if persist {
            if let Some(f) = &self.file {
                if let Ok(mut out) = std::fs::OpenOptions::new().create(true).append(true).open(f) {
                    let _ = writeln!(out, "{effect}");
                    let _ = out.flush();
                }
            }
        }
        self.order
    }
}

#[derive(Clone)]
struct App {
    effects: Arc<Mutex<Effects>>,
}

fn header(h: &HeaderMap, name: &str) -> Option<String> {
    h.get(name)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
}

/// How long a handler sleeps before its effect: `sleepMs` of the body on
/// `/orders/slow` (default 1000) and `/orders/fail` (default 0), capped.
fn sleep_ms(kind: &str, body: &Value) -> u64 {
    let default = match kind {
        "slow" => SLOW_DEFAULT_MS,
        "fail" => 0,
        _ => return 0,
    };
    match body.get("sleepMs").and_then(Value::as_f64) {
        Some(v) if v.is_finite() && v >= 0.0 => (v as u64).min(SLEEP_MAX_MS),
        _ => default,
    }
}

async fn run(app: &App, kind: &str, method: Method, path: &str, headers: &HeaderMap, raw: Bytes) -> Response {
    let body: Value = serde_json::from_slice(&raw).unwrap_or(Value::Null);
    // A body that is not a JSON object: the handler's own 4xx (reqkey-idem/1),
    // which counts its run like any other and answers 422 with its order.
    let kind = if body.is_object() { kind } else { "refused" };
    let caller = header(headers, "x-reqkey-caller");
    tokio::time::sleep(Duration::from_millis(sleep_ms(kind, &body))).await;
    let effect = json!({
        "method": method.as_str(),
        "path": path,
        "caller": caller,
        "key": header(headers, "idempotency-key"),
        "bodySha256": format!("{:x}", Sha256::digest(&raw)),
    });
    let order = match app.effects.lock() {
        Ok(mut e) => e.add(effect, true),
        Err(_) => return StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    };
    let (status, doc) = if kind == "refused" {
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            json!({"error": "the body must be a JSON object", "order": order, "caller": caller}),
        )
    } else if kind == "fail" {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            json!({"error": "failed after effect", "order": order, "caller": caller}),
        )
    } else {
        (StatusCode::CREATED, json!({"order": order, "caller": caller, "echo": body}))
    };
    let mut response = (status, Json(doc)).into_response();
    if let Ok(v) = HeaderValue::from_str(&order.to_string()) {
        response.headers_mut().insert("x-reqkey-order", v);
    }
    response
}

macro_rules! route {
    ($name:ident, $kind:expr) => {
        async fn $name(State(app): State<App>, method: Method, headers: HeaderMap, req: Request) -> Response {
            let path = req.uri().path().to_owned();
            match to_bytes(req.into_body(), MAX_BODY_BYTES).await {
                Ok(raw) => run(&app, $kind, method, &path, &headers, raw).await,
                Err(_) => StatusCode::PAYLOAD_TOO_LARGE.into_response(),
            }
        }
    };
}
route!(ok_route, "ok");
route!(fail_route, "fail");
route!(slow_route, "slow");

/// Our login: makes the caller's session (the library needs one).
async fn login<S: SessionStore>(session: Session<S>, headers: HeaderMap) -> StatusCode {
    let caller = header(&headers, "x-reqkey-caller").unwrap_or_else(|| "anonymous".into());
    let ttl = ruts::store::Ttl::new(SESSION_MAX_AGE_S as i64).ok();
    match ttl {
        Some(ttl) => match session.set("caller", &caller, ttl, None).await {
            Ok(_) => StatusCode::NO_CONTENT,
            Err(_) => StatusCode::SERVICE_UNAVAILABLE,
        },
        None => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// Each caller's session cookie, made once (under the lock, so two first
/// requests of one caller share one session).
#[derive(Clone)]
struct Front {
    inner: Router,
    cookies: Arc<tokio::sync::Mutex<HashMap<String, String>>>,
}

async fn with_session(State(front): State<Front>, mut req: Request, next: Next) -> Response {
    let caller = header(req.headers(), "x-reqkey-caller").unwrap_or_else(|| "anonymous".into());
    let cookie = {
        let mut cookies = front.cookies.lock().await;
        match cookies.get(&caller) {
            Some(c) => c.clone(),
            None => {
                let mut login_req = Request::new(Body::empty());
                *login_req.uri_mut() = "/.reqkey-login".parse().unwrap_or_default();
                if let Ok(v) = HeaderValue::from_str(&caller) {
                    login_req.headers_mut().insert("x-reqkey-caller", v);
                }
                let answer = match front.inner.clone().oneshot(login_req).await {
                    Ok(a) => a,
                    Err(e) => match e {},
                };
                let made = answer
                    .headers()
                    .get_all("set-cookie")
                    .iter()
                    .filter_map(|v| v.to_str().ok())
                    .find(|v| v.starts_with(&format!("{SESSION_COOKIE}=")))
                    .map(|v| v.split(';').next().unwrap_or(v).to_owned());
                let Some(made) = made else {
                    return (StatusCode::SERVICE_UNAVAILABLE, "the session store made no session").into_response();
                };
                cookies.insert(caller, made.clone());
                made
            }
        }
    };
    req.headers_mut().remove("cookie");
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        req.headers_mut().insert("cookie", v);
    }
    next.run(req).await
}

fn orders<S: SessionStore + 'static>(app: App, store: Arc<S>, expiry_s: i64) -> Router {
    let options = IdempotentOptions::default()
        .use_idempotency_key_header(Some("Idempotency-Key"), true)
        .expire_after(expiry_s);
    let behind = Router::new()
        .route("/orders", post(ok_route).put(ok_route))
        .route("/orders/fail", post(fail_route))
        .route("/orders/slow", post(slow_route))
        .route("/payments", post(ok_route))
        .with_state(app)
        .layer(IdempotentLayer::<S>::new(options));
    let cookie = CookieOptions::build()
        .name(SESSION_COOKIE)
        .http_only(true)
        .max_age(SESSION_MAX_AGE_S)
        .path("/");
    behind
        .route("/.reqkey-login", get(login::<S>))
        .layer(SessionLayer::new(store).with_cookie_options(cookie))
        .layer(CookieManagerLayer::new())
}

#[tokio::main]
async fn main() {
    let o = options();
    let expiry_s = o
        .expiry_ms
        .map_or(DEFAULT_EXPIRY_S, |ms| ms.div_ceil(1000).max(1) as i64);
    let redis = o.storage == "redis";
    let profile = json!({
        "keyRequired": true,
        "keySyntax": "any",
        "invalidKeyStatus": 400,
        "fingerprint": "none",
        "mismatchStatus": null,
        "concurrent": "conflict",
        "concurrentStatus": 409,
        "errors": "released",
        "scope": ["caller"],
        "expiryMs": expiry_s * 1000,
        "lockMs": null,
        "replayHeader": "idempotency-replayed",
        "durable": redis,
    });
    let health = json!({
        "protocol": PROTOCOL,
        "implementation": {"name": NAME, "version": VERSION, "storage": o.storage},
        "profile": profile,
    });
    let app = App {
        effects: Arc::new(Mutex::new(Effects::load(o.effects_file.clone()))),
    };
    let inner = if redis {
        use fred::interfaces::ClientLike as _;
        let config = fred::types::config::Config::from_url(&o.redis_url).unwrap_or_else(|e| {
            eprintln!("{NAME}: --redis-url: {e}");
            std::process::exit(2)
        });
        let pool = fred::clients::Pool::new(config, None, None, None, 4).unwrap_or_else(|e| {
            eprintln!("{NAME}: redis: {e}");
            std::process::exit(2)
        });
        pool.init().await.unwrap_or_else(|e| {
            eprintln!("{NAME}: redis: {e}");
            std::process::exit(2)
        });
        let store = ruts::store::redis::RedisStore::new(Arc::new(pool))
            .await
            .unwrap_or_else(|e| {
                eprintln!("{NAME}: redis session store: {e}");
                std::process::exit(2)
            });
        orders(app.clone(), Arc::new(store), expiry_s)
    } else {
        let store = ruts::store::moka::MokaStore::builder().build();
        orders(app.clone(), Arc::new(store), expiry_s)
    };
    let front = Front {
        inner: inner.clone(),
        cookies: Arc::default(),
    };
    let effects = app.effects.clone();
    let served = inner
        .layer(middleware::from_fn_with_state(front, with_session))
        .route(
            "/.reqkey/health",
            get(move || {
                let health = health.clone();
                async move { Json(health) }
            }),
        )
        .route(
            "/.reqkey/effects",
            get(move || {
                let effects = effects.clone();
                async move {
                    let listing = effects.lock().map(|e| e.entries.clone()).unwrap_or_default();
                    Json(json!({ "effects": listing }))
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", o.port))
        .await
        .unwrap_or_else(|e| {
            eprintln!("{NAME}: cannot listen on 127.0.0.1:{}: {e}", o.port);
            std::process::exit(2)
        });
    if let Err(e) = axum::serve(listener, served).await {
        eprintln!("{NAME}: {e}");
        std::process::exit(1);
    }
}
