//! The `reqkey-store/1` server (SPEC 6): any [`SessionStateStore`] over
//! HTTP/1.1 with JSON bodies, so the harness certifies a store through the
//! same wire a store written in another language would speak.
//!
//! - `GET /health` answers `{"name", "version", "protocol": "reqkey-store/1"}`.
//! - `POST /rpc` takes `{"op", "args"}` and ALWAYS answers `200` with
//!   exactly one of `{"ok": ...}` or `{"error": ...}`; SPEC 6 calls any
//!   other status a broken adapter.
//!
//! Why the body is read by hand instead of with axum's `Json` extractor:
//! the extractor answers a bad body with its own 400/413/415, which would
//! break the "always 200" rule. Here a body that is not JSON, too large
//! (over [`MAX_BODY_BYTES`]) or unreadable becomes `invalid_argument`, and
//! an unknown op, a missing field or a wrong type becomes `invalid_argument`
//! in `reqkey_model::seq::StoreOp::from_wire` before the store is touched,
//! so a malformed request never changes the store.
//!
//! The connection handling (header and body read timeouts, a cap on open
//! connections that closes the oldest idle one) is [`crate::http_serve`]'s;
//! a body that is not received within the body read timeout is
//! `invalid_argument` like any unreadable body.
//!
//! Each request's store call runs in its own task: requests are served
//! concurrently (hyper gives every connection its own task), and a store
//! that panics answers `internal` instead of taking the connection down.

use std::future::Future;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use reqkey_model::seq::{answer_to_wire, StoreOp};
use reqkey_model::StoreError;
use serde_json::{json, Value};
use tokio::net::TcpListener;

use crate::http_serve::{self, ServerLimits};
use crate::store::{dispatch, SessionStateStore};

/// The protocol name `/health` reports.
pub const PROTOCOL: &str = "reqkey-store/1";
/// The largest `/rpc` body accepted (1 MiB); larger is `invalid_argument`.
pub const MAX_BODY_BYTES: usize = 1 << 20;
/// Bodies from this size on are parsed on the blocking pool.
pub const BLOCKING_PARSE_BYTES: usize = 64 * 1024;

type Shared = Arc<dyn SessionStateStore>;

/// The server's routes over `store`.
pub fn router(store: Shared) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/rpc", post(rpc))
        .with_state(store)
}

/// Serves `store` on `listener` under the default [`ServerLimits`] until
/// `shutdown` completes, then finishes the requests in flight and returns.
pub async fn serve<F>(store: Shared, listener: TcpListener, shutdown: F) -> std::io::Result<()>
where
    F: Future<Output = ()> + Send + 'static,
{
    serve_with_limits(store, listener, ServerLimits::default(), shutdown).await
}

/// [`serve`] under explicit limits (connection cap, read timeouts).
pub async fn serve_with_limits<F>(
    store: Shared,
    listener: TcpListener,
    limits: ServerLimits,
    shutdown: F,
) -> std::io::Result<()>
where
    F: Future<Output = ()> + Send + 'static,
{
    http_serve::serve(listener, router(store), limits, shutdown).await
}

async fn health(State(store): State<Shared>) -> Json<Value> {
    Json(json!({
        "name": format!("reqkey-reference/{}", store.backend()),
        "version": env!("CARGO_PKG_VERSION"),
        "protocol": PROTOCOL,
        "durable": store.durable(),
    }))
}

fn refuse(message: String) -> Json<Value> {
    Json(answer_to_wire(&Err(StoreError::InvalidArgument(message))))
}

async fn rpc(State(store): State<Shared>, body: Body) -> Json<Value> {
    let bytes = match axum::body::to_bytes(body, MAX_BODY_BYTES).await {
        Ok(bytes) => bytes,
        Err(e) => {
            return refuse(format!(
                "the request body could not be read or exceeds {MAX_BODY_BYTES} bytes: {e}"
            ))
        }
    };
    // Parsed once, from the bytes, into the op's own arguments: a 1 MiB
    // input is held once, not as a request value and then a copy. A large
    // body is parsed off the async workers, so that a few of them never
    // keep every worker busy while a fresh client waits.
    let op = if bytes.len() >= BLOCKING_PARSE_BYTES {
        tokio::task::spawn_blocking(move || StoreOp::parse_wire_bytes(&bytes))
            .await
            .unwrap_or_else(|e| {
                Err(StoreError::internal(format!(
                    "parsing the request failed: {e}"
                )))
            })
    } else {
        StoreOp::parse_wire_bytes(&bytes)
    };
    let answer = match op {
        Ok(op) => tokio::spawn(async move { dispatch(store.as_ref(), op).await })
            .await
            .unwrap_or_else(|e| Err(StoreError::internal(format!("the store call failed: {e}")))),
        Err(e) => Err(e),
    };
    Json(answer_to_wire(&answer))
}
