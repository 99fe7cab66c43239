//! The `reqkey-agent/1` HTTP server (SPEC 7), over an [`Executor`].
//!
//! This module is the only place that knows HTTP. Its job is the edge:
//! read the key header (a repeated or malformed one is 400
//! `validation_error` before anything is looked up), validate the body
//! (not JSON, a missing field: 400; over 1 MiB: 413), hand a typed
//! [`EntryRequest`] to the executor, and turn the answer into JSON or an
//! SSE stream. Every error body is `{code, message, runId?}`; the raw key is
//! never echoed — messages name *what* was wrong, never the value — and no
//! path answers 500 (a store failure is 503) but SPEC 7's `transport_error`
//! for a send whose run cannot be identified (only the test agent's
//! `[lose-run]` provokes it here: this server always knows its runs).
//!
//! A `GET` on the chat route is a reconnect (SPEC 7): not an entry, so it
//! reads no key and starts nothing; it streams the current run.
//!
//! Connections are served by [`crate::http_serve`]: header and body read
//! timeouts (a body not received in time is 400 `validation_error`), and a
//! cap on open connections that closes the oldest idle one.
//!
//! Bodies are buffered up to [`BODY_READ_LIMIT_BYTES`] and then judged
//! against [`MAX_BODY_BYTES`], so a client sending 1 MiB + 1 byte gets a
//! clean 413 rather than a connection reset mid-upload. They are read as
//! text, never as a `serde_json::Value` (issue 39: a `Value` of a 1 MiB
//! body of small values costs tens of MB): checked exactly as parsing a
//! `Value` checks them, the input kept as its written and canonical text
//! ([`reqkey_model::json_text`]), which is all the digest, the commit and
//! the echo need.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{DefaultBodyLimit, Path, RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use reqkey_model::json_text::JsonText;
use reqkey_model::key::parse_request_key_header;
use reqkey_model::{RequestKey, RunMetadata, StoreError, REQUEST_KEY_HEADER};
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};

use super::body::{body_bytes, chat_message, entry_input, read_body, retry_body, BodyError};
use super::executor::{
    EntryError, EntryKind, EntryOutcome, EntryRequest, Executor, ExecutorDefect,
};
use super::test_agent::RunEvent;
use crate::http_serve::{self, ServerLimits};

/// The protocol this server speaks.
pub const PROTOCOL: &str = "reqkey-agent/1";
/// The largest request body accepted (SPEC 7: over 1 MiB is 413).
pub const MAX_BODY_BYTES: usize = 1024 * 1024;
pub use super::body::BLOCKING_PARSE_BYTES;
/// How much of a body is read before the 413 is decided.
pub const BODY_READ_LIMIT_BYTES: usize = 4 * MAX_BODY_BYTES;
/// The longest `waitMs` accepted; a larger one is 400.
pub const MAX_WAIT_MS: u64 = 60_000;
/// The longest session id (SPEC 1).
pub const MAX_SESSION_ID_LEN: usize = reqkey_model::rules::SESSION_ID_MAX_LEN;

/// A typed error answer: `{code, message, runId?}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: u16,
    pub code: &'static str,
    pub message: String,
    pub run_id: Option<String>,
}

impl ApiError {
    fn new(status: u16, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            run_id: None,
        }
    }

    fn validation(message: impl Into<String>) -> Self {
        Self::new(400, "validation_error", message)
    }

    fn session_not_found() -> Self {
        Self::new(404, "state_session_not_found", "no such session")
    }
}

impl From<EntryError> for ApiError {
    fn from(e: EntryError) -> Self {
        Self {
            status: e.http_status(),
            code: e.code(),
            message: e.to_string(),
            run_id: e.run_id().map(str::to_owned),
        }
    }
}

impl From<BodyError> for ApiError {
    fn from(e: BodyError) -> Self {
        match e {
            BodyError::TooLarge => too_large(),
            BodyError::Unreadable => Self::validation("the request body could not be read"),
            BodyError::Invalid(message) => Self::validation(message),
        }
    }
}

/// Over [`MAX_BODY_BYTES`]: 413.
fn too_large() -> ApiError {
    ApiError::new(
        413,
        "payload_too_large",
        format!("the request body is over {MAX_BODY_BYTES} bytes"),
    )
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        EntryError::Store(e).into()
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = json!({"code": self.code, "message": self.message});
        if let Some(run_id) = self.run_id {
            body["runId"] = Value::String(run_id);
        }
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
        (status, axum::Json(body)).into_response()
    }
}

type AppState = Arc<Executor>;

/// The router of SPEC 7 over one executor.
pub fn router(executor: Arc<Executor>) -> Router {
    let routes = routes(executor.clone());
    if executor.has_defect(ExecutorDefect::PathIdsDecodedTwice) {
        // The bug: the path decoded once before the router decodes it.
        return Router::new().fallback(move |mut request: axum::extract::Request| {
            let routes = routes.clone();
            async move {
                decode_path_once(&mut request);
                let inner = hyper_util::service::TowerToHyperService::new(routes);
                match hyper::service::Service::call(&inner, request).await {
                    Ok(response) => response,
                    Err(never) => match never {},
                }
            }
        });
    }
    routes
}

/// [`ExecutorDefect::PathIdsDecodedTwice`]: every `%XX` of the path
/// decoded once more, by the model's own decoding (a path that would no
/// longer parse is left as it was).
fn decode_path_once(request: &mut axum::extract::Request) {
    let uri = request.uri();
    let query = uri.query().map(|q| format!("?{q}")).unwrap_or_default();
    let Some(text) = reqkey_model::rules::path_id(uri.path()) else {
        return;
    };
    if let Ok(new) = format!("{text}{query}").parse::<axum::http::Uri>() {
        *request.uri_mut() = new;
    }
}

fn routes(executor: Arc<Executor>) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/sessions/{id}", get(snapshot).delete(delete_session))
        .route("/sessions/{id}/start", post(start))
        .route("/sessions/{id}/resume", post(resume))
        .route("/sessions/{id}/retry", post(retry))
        .route("/sessions/{id}/chat", post(chat).get(chat_reconnect))
        .route("/sessions/{id}/runs/{run_id}", get(get_run))
        .fallback(|| async { ApiError::new(404, "not_found", "no such route") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                405,
                "method_not_allowed",
                "method not allowed on this route",
            )
        })
        .layer(axum::middleware::from_fn_with_state(
            executor.clone(),
            answer_defects,
        ))
        .layer(DefaultBodyLimit::max(BODY_READ_LIMIT_BYTES))
        .with_state(executor)
}

/// The largest error body [`answer_defects`] rewrites.
const DEFECT_BODY_LIMIT: usize = 64 * 1024;

/// The broken variants that spoil an answer after its handler made it
/// ([`ExecutorDefect::ErrorMessageNotString`],
/// [`ExecutorDefect::EchoKeyHeader`]) or route by the raw request target
/// ([`ExecutorDefect::AbsoluteFormNotFound`]); a correct server passes
/// every request and answer through untouched.
async fn answer_defects(
    State(ex): State<AppState>,
    mut request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if ex.has_defect(ExecutorDefect::LastEventIdSendIsNew)
        && request.method() == axum::http::Method::POST
        && request.uri().path().ends_with("/chat")
        && request.headers().contains_key("last-event-id")
    {
        // The bug: a resent send is taken for a fresh turn, its key dropped.
        request.headers_mut().remove(REQUEST_KEY_HEADER);
    }
    if ex.has_defect(ExecutorDefect::AbsoluteFormNotFound) && request.uri().scheme().is_some() {
        return ApiError::new(404, "not_found", "no such route").into_response();
    }
    let segments: Vec<&str> = request.uri().path().split('/').collect();
    if let ["", "sessions", id, ..] = segments.as_slice() {
        if ex.has_defect(ExecutorDefect::SessionIdLimit255) && id.len() > 255 {
            return ApiError::validation("sessionId must be 1 to 255 characters").into_response();
        }
        let sub_route = segments.len() > 3;
        if ex.has_defect(ExecutorDefect::DeleteMatchesSubRoutes)
            && request.method() == axum::http::Method::DELETE
            && sub_route
        {
            // The bug: `DELETE /sessions/:id*` deletes the session.
            return match ex.delete_session(id).await {
                Ok(true) => StatusCode::NO_CONTENT.into_response(),
                Ok(false) => ApiError::session_not_found().into_response(),
                Err(e) => ApiError::from(e).into_response(),
            };
        }
    }
    let conditional_entry = ex.has_defect(ExecutorDefect::ConditionalEntryNotModified)
        && request.method() == axum::http::Method::POST
        && request.headers().contains_key(header::IF_NONE_MATCH);
    let echo: Vec<HeaderValue> = if ex.has_defect(ExecutorDefect::EchoKeyHeader) {
        request
            .headers()
            .get_all(REQUEST_KEY_HEADER)
            .iter()
            .cloned()
            .collect()
    } else {
        Vec::new()
    };
    let mut response = next.run(request).await;
    if conditional_entry && response.status() == StatusCode::OK {
        // The bug: a keyed repeat is taken for a conditional read.
        return StatusCode::NOT_MODIFIED.into_response();
    }
    if response.status().as_u16() < 400 {
        for value in echo {
            response.headers_mut().append("x-request-key", value);
        }
    }
    if response.status() == StatusCode::CONFLICT
        && ex.has_defect(ExecutorDefect::ErrorMessageNotString)
    {
        let (parts, body) = response.into_parts();
        let bytes = axum::body::to_bytes(body, DEFECT_BODY_LIMIT)
            .await
            .unwrap_or_default();
        let mut json: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        if let Some(message) = json.get_mut("message") {
            *message = json!({ "text": message.take() });
        }
        let mut parts = parts;
        parts.headers.remove(header::CONTENT_LENGTH);
        return Response::from_parts(parts, Body::from(json.to_string()));
    }
    response
}

/// Serves under the default [`ServerLimits`] until `shutdown` resolves,
/// then ends open streams and waits for in-flight requests (graceful
/// shutdown).
pub async fn serve(
    executor: Arc<Executor>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with_limits(executor, listener, ServerLimits::default(), shutdown).await
}

/// [`serve`] under explicit limits (connection cap, read timeouts).
pub async fn serve_with_limits(
    executor: Arc<Executor>,
    listener: TcpListener,
    limits: ServerLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = router(executor.clone());
    let rewrite: Option<http_serve::ReadRewrite> =
        if executor.has_defect(ExecutorDefect::KeyHeaderCaseSensitive) {
            Some(hide_key_spellings)
        } else if executor.has_defect(ExecutorDefect::KeySpellingIgnoredOnResumeAndRetry) {
            Some(hide_key_spellings_on_resume_and_retry)
        } else if executor.has_defect(ExecutorDefect::KeyKeepsBlanks) {
            Some(keep_key_blanks)
        } else {
            None
        };
    http_serve::serve_rewriting(listener, app, limits, rewrite, async move {
        shutdown.await;
        executor.shutdown();
    })
    .await
}

/// Where, in a chunk of a request, a header line named (in any spelling)
/// like the key header starts.
fn key_header_lines(chunk: &[u8]) -> Vec<usize> {
    let name = REQUEST_KEY_HEADER.as_bytes();
    (0..chunk.len())
        .filter(|&i| i == 0 || chunk[i - 1] == b'\n')
        .filter(|&i| {
            chunk.len() > i + name.len()
                && chunk[i..i + name.len()].eq_ignore_ascii_case(name)
                && chunk[i + name.len()] == b':'
        })
        .collect()
}

/// [`ExecutorDefect::KeyHeaderCaseSensitive`]: a key header not spelt in
/// lower case is renamed (same length) before the parser sees it.
fn hide_key_spellings(chunk: &mut [u8]) {
    let lower = REQUEST_KEY_HEADER.to_ascii_lowercase();
    let other = b"X-Other-Header-Name";
    for i in key_header_lines(chunk) {
        let at = &mut chunk[i..i + other.len()];
        if at != lower.as_bytes() {
            at.copy_from_slice(other);
        }
    }
}

/// [`ExecutorDefect::KeySpellingIgnoredOnResumeAndRetry`]:
/// [`hide_key_spellings`] in a request head to `resume` or `retry` only.
fn hide_key_spellings_on_resume_and_retry(chunk: &mut [u8]) {
    let line_end = chunk
        .iter()
        .position(|&b| b == b'\r' || b == b'\n')
        .unwrap_or(chunk.len());
    let line = String::from_utf8_lossy(&chunk[..line_end]);
    let target = line.split(' ').nth(1).unwrap_or("");
    let path = target.split('?').next().unwrap_or("");
    if path.ends_with("/resume") || path.ends_with("/retry") {
        hide_key_spellings(chunk);
    }
}

/// [`ExecutorDefect::KeyKeepsBlanks`]: blanks around the key header's
/// value, beyond the one space after the colon, become obs-text bytes
/// (0xA0) the parser keeps, so they count as part of the value.
fn keep_key_blanks(chunk: &mut [u8]) {
    let blank = |b: u8| b == b' ' || b == b'\t';
    for i in key_header_lines(chunk) {
        let mut start = i + REQUEST_KEY_HEADER.len() + 1;
        let end = chunk[start..]
            .iter()
            .position(|&b| b == b'\r' || b == b'\n')
            .map_or(chunk.len(), |p| start + p);
        if chunk.get(start) == Some(&b' ') {
            start += 1;
        }
        let mut j = start;
        while j < end && blank(chunk[j]) {
            chunk[j] = 0xA0;
            j += 1;
        }
        let mut k = end;
        while k > j && blank(chunk[k - 1]) {
            chunk[k - 1] = 0xA0;
            k -= 1;
        }
    }
}

/// A server running as a task; dropping the handle shuts it down.
#[derive(Debug)]
pub struct ServerHandle {
    pub addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

impl ServerHandle {
    /// Shuts down gracefully and waits for the server task.
    pub async fn stop(mut self) -> std::io::Result<()> {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        match self.task.take() {
            Some(task) => task
                .await
                .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string()))),
            None => Ok(()),
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// Starts the server on `addr` (port 0: an ephemeral port) as a task.
pub async fn spawn(executor: Arc<Executor>, addr: SocketAddr) -> std::io::Result<ServerHandle> {
    let listener = http_serve::bind(addr).await?;
    let addr = listener.local_addr()?;
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(serve(executor, listener, async move {
        let _ = rx.await;
    }));
    Ok(ServerHandle {
        addr,
        shutdown: Some(tx),
        task: Some(task),
    })
}

// ---- extraction helpers -------------------------------------------------

fn session_id(path: Result<Path<String>, PathRejection>) -> Result<String, ApiError> {
    let Path(id) = path.map_err(|_| ApiError::validation("malformed path"))?;
    valid_session_id(&id)?;
    Ok(id)
}

/// The id limits of SPEC 1, from the model (one rule for every layer).
fn valid_session_id(id: &str) -> Result<(), ApiError> {
    reqkey_model::rules::validate_session_id(id).map_err(|_| {
        ApiError::validation("sessionId must be 1 to 256 characters of [A-Za-z0-9._:-]")
    })
}

fn valid_run_id(id: &str) -> Result<(), ApiError> {
    reqkey_model::rules::validate_run_id("runId", id)
        .map_err(|_| ApiError::validation("runId must be 1 to 256 characters of [A-Za-z0-9._:-]"))
}

/// The key header: absent is `None`; repeated or malformed is 400. HTTP
/// strips blanks around a value; they are stripped here too in case a
/// layer did not.
fn request_key(headers: &HeaderMap) -> Result<Option<RequestKey>, ApiError> {
    let values = headers
        .get_all(REQUEST_KEY_HEADER)
        .iter()
        .map(|v| v.as_bytes().trim_ascii());
    parse_request_key_header(values).map_err(|e| {
        // KeyError carries no part of the raw value.
        ApiError::validation(format!("malformed {REQUEST_KEY_HEADER} header: {e}"))
    })
}

/// [`request_key`] for an entry of `ex` (which, built with
/// `ExecutorDefect::EchoMalformedKey`, quotes the raw value: a deliberate
/// bug for the tests of tests).
fn entry_key(ex: &Executor, headers: &HeaderMap) -> Result<Option<RequestKey>, ApiError> {
    if ex.has_defect(ExecutorDefect::FirstKeyHeaderWins) {
        let first = headers
            .get(REQUEST_KEY_HEADER)
            .map(|v| v.as_bytes().trim_ascii());
        return parse_request_key_header(first.into_iter())
            .map_err(|e| ApiError::validation(format!("malformed {REQUEST_KEY_HEADER}: {e}")));
    }
    if ex.has_defect(ExecutorDefect::KeysFullwidthFolded) {
        let folded: Vec<String> = headers
            .get_all(REQUEST_KEY_HEADER)
            .iter()
            .map(|v| fold_fullwidth(v.as_bytes().trim_ascii()))
            .collect();
        return parse_request_key_header(folded.iter().map(String::as_bytes))
            .map_err(|e| ApiError::validation(format!("malformed {REQUEST_KEY_HEADER}: {e}")));
    }
    request_key(headers).map_err(|mut e| {
        if ex.has_defect(ExecutorDefect::EchoMalformedKey) {
            for v in headers.get_all(REQUEST_KEY_HEADER) {
                e.message
                    .push_str(&format!(" ({:?})", String::from_utf8_lossy(v.as_bytes())));
            }
        }
        e
    })
}

/// [`ExecutorDefect::KeysFullwidthFolded`]: the fullwidth forms
/// U+FF01-U+FF5E folded to ASCII, as NFKC does.
fn fold_fullwidth(raw: &[u8]) -> String {
    String::from_utf8_lossy(raw)
        .chars()
        .map(|c| match c {
            '\u{FF01}'..='\u{FF5E}' => char::from_u32(c as u32 - 0xFEE0).unwrap_or(c),
            c => c,
        })
        .collect()
}

/// The body limit of `ex` (`ExecutorDefect::NoBodyLimit` has none short
/// of the read limit).
fn body_limit(ex: &Executor) -> usize {
    if ex.has_defect(ExecutorDefect::NoBodyLimit)
        || ex.has_defect(ExecutorDefect::BodyLimitInCharacters)
    {
        BODY_READ_LIMIT_BYTES
    } else {
        MAX_BODY_BYTES
    }
}

/// [`ExecutorDefect::DigestKeepsStringEscapes`]: the escapes (`\uXXXX`,
/// `\/`) of a body as written, in order.
fn string_escapes(written: &str) -> String {
    let mut escapes = String::new();
    let mut chars = written.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('u') => {
                    escapes.push_str("\\u");
                    escapes.extend(chars.by_ref().take(4));
                }
                Some('/') => escapes.push_str("\\/"),
                _ => {}
            }
        }
    }
    escapes
}

/// An entry's body as `ex` reads it: the bytes within its limit, or the
/// broken readings of the body defects (a correct server reads bytes).
fn entry_body(
    ex: &Executor,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Bytes, ApiError> {
    let bytes = body_bytes(body, body_limit(ex))?;
    let header = |name: header::HeaderName| {
        headers
            .get(name)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
    };
    if ex.has_defect(ExecutorDefect::ContentTypeComparedExactly) {
        if let Some(ct) = header(header::CONTENT_TYPE) {
            if ct != "application/json" {
                return Err(ApiError::validation(
                    "Content-Type must be application/json",
                ));
            }
        }
    }
    if ex.has_defect(ExecutorDefect::ChunkedBodyUnread)
        && header(header::TRANSFER_ENCODING).is_some_and(|te| te.contains("chunked"))
    {
        // The bug: only a Content-Length body is read.
        return Ok(Bytes::new());
    }
    if ex.has_defect(ExecutorDefect::BodyLimitInCharacters)
        && String::from_utf8_lossy(&bytes).chars().count() > MAX_BODY_BYTES
    {
        return Err(BodyError::TooLarge.into());
    }
    Ok(bytes)
}

fn run_answer(outcome: &EntryOutcome) -> Response {
    let run = outcome.run();
    let (status, word) = if outcome.attached() {
        (StatusCode::OK, "attached")
    } else {
        (StatusCode::CREATED, "started")
    };
    (
        status,
        axum::Json(json!({
            "sessionId": run.session_id,
            "runId": run.run_id,
            "status": word,
            "startSequence": run.start_sequence,
        })),
    )
        .into_response()
}

// ---- handlers -----------------------------------------------------------

async fn health(State(ex): State<AppState>) -> Response {
    let mut health = json!({
        "name": "reqkey-reference-agent",
        "version": env!("CARGO_PKG_VERSION"),
        "protocol": PROTOCOL,
        "supportsRequestKey": ex.supports_request_key(),
        "concurrentEntry": ex.concurrent_entry(),
        "durable": ex.durable(),
        "leaseMs": ex.lease_ms(),
    });
    if let (Some(ms), Some(map)) = (ex.entry_wait_ms(), health.as_object_mut()) {
        map.insert("entryWaitMs".into(), json!(ms));
    }
    if ex.has_defect(ExecutorDefect::HealthWithoutKeyFlag) {
        if let Some(map) = health.as_object_mut() {
            map.remove("supportsRequestKey");
        }
    }
    axum::Json(health).into_response()
}

async fn keyed_entry(
    ex: &Executor,
    kind: EntryKind,
    path: Result<Path<String>, PathRejection>,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let session_id = session_id(path)?;
    let request_key = entry_key(ex, headers)?;
    let bytes = entry_body(ex, headers, body)?;
    let written_escapes = if ex.has_defect(ExecutorDefect::DigestKeepsStringEscapes) {
        string_escapes(&String::from_utf8_lossy(&bytes))
    } else {
        String::new()
    };
    let input = match kind {
        EntryKind::Retry => {
            read_body(bytes, retry_body).await?;
            JsonText::from_value(&Value::Null)
        }
        _ => read_body(bytes, entry_input).await?,
    };
    let outcome = ex
        .enter(EntryRequest {
            session_id,
            kind,
            input,
            request_key,
            written_escapes,
        })
        .await?;
    Ok(run_answer(&outcome))
}

async fn start(
    State(ex): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    keyed_entry(&ex, EntryKind::Start, path, &headers, body).await
}

async fn resume(
    State(ex): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    keyed_entry(&ex, EntryKind::Resume, path, &headers, body).await
}

async fn retry(
    State(ex): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    keyed_entry(&ex, EntryKind::Retry, path, &headers, body).await
}

async fn chat(
    State(ex): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let session_id = session_id(path)?;
    // Parsed even when it will be ignored: a malformed key is 400 everywhere.
    let request_key = entry_key(&ex, &headers)?;
    let bytes = entry_body(&ex, &headers, body)?;
    let (role, content) = read_body(bytes, chat_message).await?;
    // A tool-result send is keyless in this release.
    let keyless = role == "tool" && !ex.has_defect(ExecutorDefect::ToolSendKeyed);
    let request_key = if keyless { None } else { request_key };
    let lose_run = content.contains(LOSE_RUN_MARKER);
    // The content moves into the input (not a copy: issue 29).
    let mut input = serde_json::Map::new();
    input.insert("text".to_owned(), Value::String(content));
    let outcome = ex
        .enter(EntryRequest {
            session_id: session_id.clone(),
            kind: EntryKind::Chat,
            input: JsonText::from_value(&Value::Object(input)),
            request_key,
            written_escapes: String::new(),
        })
        .await?;
    let attached = outcome.attached();
    if !attached && lose_run {
        return lost_run(&ex, &session_id).await;
    }
    let run = outcome.run();
    let events = ex.follow_run(run, attached);
    let after_finish = ex
        .has_defect(ExecutorDefect::EventAfterFinish)
        .then(|| sse_frame("text", &json!({ "delta": "" })));
    Ok(sse_response_with(run, attached, events, after_finish))
}

/// The test agent's marker for a send whose run cannot be identified
/// (SPEC 7, `[[agent.test-agent.lose-run]]`).
pub const LOSE_RUN_MARKER: &str = "[lose-run]";

/// The answer to a send whose run was committed but cannot be identified
/// (SPEC 7, `[[agent.chat.transport-error.when]]`): `transport_error`,
/// never a stream. The framework's chat route lands here when its handle
/// carries no run id and the current run read after it does not name the
/// send's run; in this server every entry knows its run, so only the test
/// agent's `[lose-run]` leads here, to let the suite provoke it.
async fn lost_run(ex: &Executor, session_id: &str) -> Result<Response, ApiError> {
    if ex.has_defect(ExecutorDefect::LostRunStreamsFromHead) {
        // The bug the release notes rule out: whatever run is current now.
        if let Some(run) = ex.store().get_current_run(session_id).await? {
            let events = ex.follow_run(&run, false);
            return Ok(sse_response(&run, false, events));
        }
    }
    Err(ApiError::new(
        500,
        "transport_error",
        "the send's input is committed but its run could not be identified; \
         re-read the session's snapshot instead of sending again",
    ))
}

/// A chat reconnect (SPEC 7): the session's current run from its start,
/// `attached: true`. Not an entry: it reads no key (a malformed one is not
/// refused) and starts nothing.
async fn chat_reconnect(
    State(ex): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let session_id = session_id(path)?;
    if ex.has_defect(ExecutorDefect::ReconnectRefusesMalformedKey) {
        entry_key(&ex, &headers)?;
    }
    if ex.has_defect(ExecutorDefect::ReconnectIsASend) {
        return reconnect_as_send(&ex, session_id, &headers).await;
    }
    let Some(mut run) = ex.store().get_current_run(&session_id).await? else {
        return Err(ApiError::session_not_found());
    };
    if ex.has_defect(ExecutorDefect::ReconnectStreamsFirstRun) {
        // The bug: the session's first run, not its current one.
        if let Some(first) = ex.store().list_runs(&session_id).await?.into_iter().next() {
            run = first;
        }
    }
    let run = ex.reclaim(run).await?;
    let from_now = ex.has_defect(ExecutorDefect::LastEventIdResumesLive)
        && headers.contains_key("last-event-id");
    let events = ex.follow_run_from(&run, true, from_now);
    Ok(sse_response(&run, true, events))
}

/// [`ExecutorDefect::ReconnectIsASend`]: the reconnect re-sends the
/// session's last input with the request's key.
async fn reconnect_as_send(
    ex: &Executor,
    session_id: String,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let request_key = entry_key(ex, headers)?;
    let input = ex
        .store()
        .list_inputs(&session_id)
        .await?
        .pop()
        .map(|e| e.input)
        .ok_or_else(ApiError::session_not_found)?;
    let outcome = ex
        .enter(EntryRequest {
            session_id,
            kind: EntryKind::Chat,
            input: JsonText::from_value(&input),
            request_key,
            written_escapes: String::new(),
        })
        .await?;
    let attached = outcome.attached();
    let run = outcome.run();
    let events = ex.follow_run(run, attached);
    Ok(sse_response(run, attached, events))
}

async fn snapshot(
    State(ex): State<AppState>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let session_id = session_id(path)?;
    let mut runs = ex.list_runs(&session_id).await?;
    if runs.is_empty() {
        return Err(ApiError::session_not_found());
    }
    let mut inputs = ex.store().list_inputs(&session_id).await?;
    if ex.has_defect(ExecutorDefect::SnapshotCapped) {
        // The bug: `ORDER BY start_sequence DESC LIMIT 256`, put back in order.
        const CAP: usize = 256;
        runs.drain(..runs.len().saturating_sub(CAP));
        inputs.drain(..inputs.len().saturating_sub(CAP));
    }
    Ok(
        axum::Json(json!({"sessionId": session_id, "runs": runs, "inputs": inputs}))
            .into_response(),
    )
}

async fn delete_session(
    State(ex): State<AppState>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let session_id = session_id(path)?;
    if ex.delete_session(&session_id).await? {
        Ok(StatusCode::NO_CONTENT.into_response())
    } else {
        Err(ApiError::session_not_found())
    }
}

/// `waitMs` from the query: absent is 0; anything but 0..=MAX_WAIT_MS
/// digits, or a repeated one, is 400.
fn wait_ms(query: Option<&str>) -> Result<u64, ApiError> {
    let mut found = None;
    for pair in query.unwrap_or("").split('&') {
        let Some(value) = pair.strip_prefix("waitMs=") else {
            if pair == "waitMs" {
                return Err(ApiError::validation("waitMs needs a value"));
            }
            continue;
        };
        if found.is_some() {
            return Err(ApiError::validation("waitMs is repeated"));
        }
        let ok = !value.is_empty() && value.len() <= 6 && value.bytes().all(|b| b.is_ascii_digit());
        let ms = value
            .parse::<u64>()
            .ok()
            .filter(|ms| ok && *ms <= MAX_WAIT_MS);
        found = Some(ms.ok_or_else(|| {
            ApiError::validation(format!("waitMs must be an integer from 0 to {MAX_WAIT_MS}"))
        })?);
    }
    Ok(found.unwrap_or(0))
}

async fn get_run(
    State(ex): State<AppState>,
    path: Result<Path<(String, String)>, PathRejection>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let Path((session_id, run_id)) = path.map_err(|_| ApiError::validation("malformed path"))?;
    valid_session_id(&session_id)?;
    valid_run_id(&run_id)?;
    let wait_ms = wait_ms(query.as_deref())?;
    match ex.wait_run(&session_id, &run_id, wait_ms).await? {
        Some(mut run) => {
            if wait_ms > 0 && ex.has_defect(ExecutorDefect::WaitDropsKeyFields) {
                // The bug: the waiting path's query has no key columns.
                run.request_key = None;
                run.request_digest = None;
            }
            Ok(axum::Json(run).into_response())
        }
        None if ex.store().get_current_run(&session_id).await?.is_some()
            && !ex.has_defect(ExecutorDefect::UnknownRunIsUnknownSession) =>
        {
            Err(ApiError::new(
                404,
                "state_run_not_found",
                "no such run in this session",
            ))
        }
        None => Err(ApiError::session_not_found()),
    }
}

// ---- the SSE stream -----------------------------------------------------

fn sse_frame(event: &str, data: &Value) -> Bytes {
    Bytes::from(format!("event: {event}\ndata: {data}\n\n"))
}

fn sse_response(run: &RunMetadata, attached: bool, events: mpsc::Receiver<RunEvent>) -> Response {
    sse_response_with(run, attached, events, None)
}

/// [`sse_response`], with a frame after `finish` (only
/// [`ExecutorDefect::EventAfterFinish`] asks for one).
fn sse_response_with(
    run: &RunMetadata,
    attached: bool,
    events: mpsc::Receiver<RunEvent>,
    after_finish: Option<Bytes>,
) -> Response {
    let first = sse_frame(
        "run-start",
        &json!({"runId": run.run_id, "startSequence": run.start_sequence, "attached": attached}),
    );
    let body = Body::from_stream(SseBody {
        first: Some(first),
        events,
        done: false,
        after_finish,
    });
    let mut response = Response::new(body);
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// `run-start`, then the run's events; ends after `finish` (or when the
/// follower ends, at shutdown).
#[derive(Debug)]
struct SseBody {
    first: Option<Bytes>,
    events: mpsc::Receiver<RunEvent>,
    done: bool,
    after_finish: Option<Bytes>,
}

impl futures_core::Stream for SseBody {
    type Item = Result<Bytes, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if let Some(first) = self.first.take() {
            return Poll::Ready(Some(Ok(first)));
        }
        if self.done {
            return Poll::Ready(self.after_finish.take().map(Ok));
        }
        match self.events.poll_recv(cx) {
            Poll::Ready(Some(RunEvent::Text(delta))) => {
                Poll::Ready(Some(Ok(sse_frame("text", &json!({ "delta": delta })))))
            }
            Poll::Ready(Some(RunEvent::Finish(status))) => {
                self.done = true;
                Poll::Ready(Some(Ok(sse_frame("finish", &json!({ "status": status })))))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn the_read_rewrites_of_the_wire_variants_touch_only_the_key_header() {
        let mut head =
            b"POST / HTTP/1.1\r\nX-HELIX-REQUEST-KEY: a\r\nx-helix-request-key: b\r\n\r\n".to_vec();
        hide_key_spellings(&mut head);
        assert_eq!(
            head,
            b"POST / HTTP/1.1\r\nX-Other-Header-Name: a\r\nx-helix-request-key: b\r\n\r\n"
        );
        let mut head =
            b"X-Helix-Request-Key: \t k \r\nX-B:  c \r\nX-Helix-Request-Key: k\r\n".to_vec();
        keep_key_blanks(&mut head);
        assert_eq!(
            head,
            b"X-Helix-Request-Key: \xA0\xA0k\xA0\r\nX-B:  c \r\nX-Helix-Request-Key: k\r\n"
        );
    }

    #[test]
    fn wait_ms_accepts_only_bounded_integers() {
        assert_eq!(wait_ms(None), Ok(0));
        assert_eq!(wait_ms(Some("waitMs=250&x=1")), Ok(250));
        for bad in [
            "waitMs=",
            "waitMs=-1",
            "waitMs=abc",
            "waitMs=1.5",
            "waitMs=60001",
            "waitMs=1&waitMs=2",
            "waitMs",
        ] {
            assert_eq!(
                wait_ms(Some(bad)).map_err(|e| e.code),
                Err("validation_error"),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_malformed_key_message_never_contains_the_value() {
        let mut headers = HeaderMap::new();
        headers.insert(REQUEST_KEY_HEADER, HeaderValue::from_static("secret value"));
        let err = request_key(&headers).unwrap_err();
        assert_eq!(err.status, 400);
        assert!(!err.message.contains("secret"), "{}", err.message);
    }

    #[test]
    fn a_repeated_key_header_is_refused_even_when_both_are_valid() {
        let mut headers = HeaderMap::new();
        headers.append(REQUEST_KEY_HEADER, HeaderValue::from_static("k1"));
        headers.append(REQUEST_KEY_HEADER, HeaderValue::from_static("k1"));
        assert_eq!(
            request_key(&headers).map_err(|e| e.code),
            Err("validation_error")
        );
    }
}
