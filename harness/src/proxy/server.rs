//! The proxy's listener: forwards client requests to the upstream
//! `reqkey-agent/1` server, injects the fault the plan chose for each entry
//! request, and records every exchange.
//!
//! Everything is bounded: the request head and body read times and the
//! write time (the reference servers' accept loop, `http_serve`), the body
//! size (413 past `max_body_bytes`), open connections (the oldest idle one
//! is closed to make room; a client over the cap while every connection is
//! busy waits, then is closed), every upstream call (a
//! total timeout, answers read under a size cap), the delay fault, and the
//! number of requests recorded (`max_requests`: later ones are answered 503
//! without forwarding and not recorded).
//!
//! A fault that closes the connection without an answer does it the way a
//! crashed or partitioned proxy would: the service returns an error and
//! hyper closes the socket, so the client sees a reset (after its own
//! timeout, under `delay`).

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt as _, Full, Limited};
use hyper::body::Bytes;
use hyper::{Request, Response, StatusCode};
use reqkey_reference::http_serve::{self, DeadlineBody, Handler, ServerLimits};
use tokio::net::TcpListener;
use tokio::sync::Notify;

use reqkey_check::plan::{Fault, FaultPlan};
use reqkey_check::trace::{
    body_digest, is_snapshot_path, is_tool_result, route_of, run_id_of_answer, snapshot_input_runs,
    Exchange, KeySent, SessionSnapshot,
};

/// The key header (SPEC 1).
const KEY_HEADER: &str = "x-helix-request-key";

/// How the proxy runs.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// The upstream's base URL, e.g. `http://127.0.0.1:7070`.
    pub upstream: String,
    pub plan: FaultPlan,
    pub seed: u64,
    /// How long the `delay` fault holds an answer before closing.
    pub delay_ms: u64,
    /// The largest request body forwarded (larger: 413, not forwarded).
    pub max_body_bytes: usize,
    /// The largest upstream answer read (larger: the client gets 502).
    pub max_response_bytes: usize,
    /// The total time of one upstream call.
    pub upstream_timeout_ms: u64,
    /// Open client connections at most.
    pub max_connections: usize,
    /// Client requests recorded at most.
    pub max_requests: u64,
    /// TLS trust and credentials toward the upstream (`--cacert`,
    /// `--header`): the proxy's own calls carry them, a client's never
    /// reach the upstream in their place.
    pub upstream_auth: UpstreamAuth,
}

/// How the proxy reaches an upstream over TLS, with credentials: the
/// harness's one TLS configuration (`targets/tls.rs`) and the `--header`
/// values, handed over by the command (this room imports no other).
#[derive(Clone, Default)]
pub struct UpstreamAuth {
    /// `None`: plain HTTP, or the system's roots for an `https://` upstream.
    pub tls: Option<Arc<rustls::ClientConfig>>,
    pub headers: Vec<(String, Vec<u8>)>,
}

impl std::fmt::Debug for UpstreamAuth {
    /// Names the credentials' headers, never their values.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.headers.iter().map(|(n, _)| n.as_str()).collect();
        write!(
            f,
            "UpstreamAuth(tls: {}, headers: {names:?})",
            self.tls.is_some()
        )
    }
}

impl UpstreamAuth {
    /// An upstream client: no redirects, bounded by `timeout`.
    fn client(&self, timeout: Duration) -> reqwest::Result<reqwest::Client> {
        let mut builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(timeout);
        if let Some(tls) = &self.tls {
            builder = builder.use_preconfigured_tls(tls.as_ref().clone());
        }
        builder.build()
    }

    fn sign(&self, mut req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        for (name, value) in &self.headers {
            req = req.header(name.as_str(), value.as_slice());
        }
        req
    }
}

/// Why the proxy closed a connection without an answer (a fault).
#[derive(Debug, thiserror::Error)]
#[error("connection closed by the fault {0}")]
struct Closed(Fault);

/// The exchanges recorded so far; shared by the listener and the command.
#[derive(Debug)]
pub struct Recorder {
    start: Instant,
    next_index: AtomicU64,
    next_entry: AtomicU64,
    /// Requests being handled right now (a `delay` holds one open).
    in_flight: AtomicU64,
    exchanges: Mutex<Vec<Exchange>>,
    /// Notified once `max_requests` client requests were recorded.
    pub cap_reached: Notify,
}

impl Recorder {
    pub fn new() -> Recorder {
        Recorder {
            start: Instant::now(),
            next_index: AtomicU64::new(0),
            next_entry: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            exchanges: Mutex::new(Vec::new()),
            cap_reached: Notify::new(),
        }
    }

    /// Every exchange finished so far, in arrival order.
    pub fn exchanges(&self) -> Vec<Exchange> {
        let mut all = match self.exchanges.lock() {
            Ok(g) => g.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        };
        all.sort_by_key(|e| e.index);
        all
    }

    /// Requests still being handled.
    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::SeqCst)
    }

    /// Waits until no request is being handled, at most `timeout_ms`;
    /// `false` when some still were then.
    pub async fn settle(&self, timeout_ms: u64) -> bool {
        let deadline = Instant::now() + Duration::from_millis(timeout_ms);
        while self.in_flight() > 0 {
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        true
    }

    fn push(&self, e: Exchange) {
        match self.exchanges.lock() {
            Ok(mut g) => g.push(e),
            Err(poisoned) => poisoned.into_inner().push(e),
        }
    }
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder::new()
    }
}

/// Serves the proxy on `listener` until `shutdown` completes; connections
/// still open then are closed.
///
/// Connections are handled by the reference servers' accept loop
/// ([`reqkey_reference::http_serve`]), so the proxy keeps their policy
/// (issue 29): header, body and write timeouts, and a cap of
/// `max_connections` that closes the oldest idle connection (or one whose
/// client stopped reading) to make room for a fresh client.
pub async fn serve(
    listener: TcpListener,
    config: Arc<ProxyConfig>,
    recorder: Arc<Recorder>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let client = config
        .upstream_auth
        .client(Duration::from_millis(config.upstream_timeout_ms))
        .map_err(std::io::Error::other)?;
    let limits = ServerLimits {
        max_connections: config.max_connections.max(1),
        ..ServerLimits::default()
    };
    let handler = Arc::new(ProxyHandler {
        config,
        recorder,
        client,
    });
    http_serve::serve_handler(listener, handler, limits, shutdown).await
}

/// The proxy as the accept loop's [`Handler`].
struct ProxyHandler {
    config: Arc<ProxyConfig>,
    recorder: Arc<Recorder>,
    client: reqwest::Client,
}

impl Handler for ProxyHandler {
    type Body = Full<Bytes>;
    type BodyError = std::convert::Infallible;
    type Error = Closed;

    fn call(
        self: Arc<Self>,
        req: Request<DeadlineBody>,
    ) -> impl Future<Output = Result<Response<Full<Bytes>>, Closed>> + Send + 'static {
        handle(
            req,
            self.config.clone(),
            self.recorder.clone(),
            self.client.clone(),
        )
    }
}

/// Counts a request out of `in_flight` however its handling ends.
struct InFlight(Arc<Recorder>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

fn answer(status: StatusCode, code: &str, message: &str) -> Response<Full<Bytes>> {
    let body = serde_json::json!({"code": code, "message": message}).to_string();
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

/// One upstream answer, read whole.
struct Upstream {
    status: u16,
    content_type: Option<hyper::header::HeaderValue>,
    body: Bytes,
}

async fn forward(
    client: &reqwest::Client,
    config: &ProxyConfig,
    method: &hyper::Method,
    path: &str,
    headers: &hyper::HeaderMap,
    body: &Bytes,
) -> Result<Upstream, String> {
    let url = format!("{}{}", config.upstream.trim_end_matches('/'), path);
    let method = reqwest::Method::from_bytes(method.as_str().as_bytes())
        .map_err(|e| format!("method: {e}"))?;
    let mut req = config
        .upstream_auth
        .sign(client.request(method, url).body(body.clone()));
    for name in [KEY_HEADER, "content-type", "accept"] {
        for v in headers.get_all(name) {
            req = req.header(name, v.as_bytes());
        }
    }
    let mut resp = req.send().await.map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let content_type = resp
        .headers()
        .get("content-type")
        .and_then(|v| hyper::header::HeaderValue::from_bytes(v.as_bytes()).ok());
    let mut buf = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| e.to_string())? {
        if buf.len() + chunk.len() > config.max_response_bytes {
            return Err(format!(
                "the answer is over {} bytes",
                config.max_response_bytes
            ));
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(Upstream {
        status,
        content_type,
        body: Bytes::from(buf),
    })
}

/// Reads one client request, then hands it to a task of its own, so that
/// a client that gives up (closes its connection while the proxy waits on
/// the server or holds a `delay`) does not cancel the forwarding or lose
/// the exchange's record.
async fn handle(
    req: Request<DeadlineBody>,
    config: Arc<ProxyConfig>,
    recorder: Arc<Recorder>,
    client: reqwest::Client,
) -> Result<Response<Full<Bytes>>, Closed> {
    let (parts, body) = req.into_parts();
    let limited = Limited::new(body, config.max_body_bytes);
    let body = match tokio::time::timeout(Duration::from_secs(30), limited.collect()).await {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(e)) => {
            let too_large = e
                .downcast_ref::<http_body_util::LengthLimitError>()
                .is_some();
            let (status, code) = if too_large {
                (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large")
            } else {
                (StatusCode::BAD_REQUEST, "validation_error")
            };
            return Ok(answer(
                status,
                code,
                "the proxy could not read the request body",
            ));
        }
        Err(_) => {
            return Ok(answer(
                StatusCode::BAD_REQUEST,
                "validation_error",
                "the request body did not arrive in time",
            ))
        }
    };
    let index = recorder.next_index.fetch_add(1, Ordering::SeqCst);
    if index >= config.max_requests {
        if index == config.max_requests {
            recorder.cap_reached.notify_one();
        }
        return Ok(answer(
            StatusCode::SERVICE_UNAVAILABLE,
            "proxy_request_cap",
            "the proxy's --requests cap is reached",
        ));
    }
    recorder.in_flight.fetch_add(1, Ordering::SeqCst);
    let task = tokio::spawn(async move {
        let _guard = InFlight(recorder.clone());
        process(index, parts, body, &config, &recorder, &client).await
    });
    match task.await {
        Ok(result) => result,
        Err(_) => Ok(answer(
            StatusCode::BAD_GATEWAY,
            "proxy_internal",
            "the proxy's handling of this request stopped",
        )),
    }
}

async fn process(
    index: u64,
    parts: hyper::http::request::Parts,
    body: Bytes,
    config: &ProxyConfig,
    recorder: &Recorder,
    client: &reqwest::Client,
) -> Result<Response<Full<Bytes>>, Closed> {
    let at_ms = recorder.start.elapsed().as_millis() as u64;
    let method = parts.method.clone();
    let path = parts
        .uri
        .path_and_query()
        .map_or_else(|| parts.uri.path().to_owned(), |p| p.as_str().to_owned());
    let (session, entry) = route_of(method.as_str(), &path);
    let key = KeySent::from_header_values(
        parts
            .headers
            .get_all(KEY_HEADER)
            .iter()
            .map(|v| v.as_bytes()),
    );
    let fault = if entry.is_some() {
        let n = recorder.next_entry.fetch_add(1, Ordering::SeqCst);
        config.plan.choose(config.seed, n)
    } else {
        Fault::None
    };
    let (body_digest, tool_result) = body_facts(&body, entry.is_some()).await;
    let mut ex = Exchange {
        index,
        at_ms,
        method: method.to_string(),
        path: path.clone(),
        session,
        entry,
        key,
        body_digest,
        tool_result,
        fault,
        forwarded: 0,
        upstream_statuses: Vec::new(),
        upstream_error: None,
        client_status: None,
        run_ids: Vec::new(),
        snapshot_inputs: None,
    };
    let result = respond(
        &mut ex,
        client,
        config,
        &method,
        &path,
        &parts.headers,
        &body,
    )
    .await;
    if let Ok(r) = &result {
        ex.client_status = Some(r.status().as_u16());
    }
    recorder.push(ex);
    result
}

/// Bodies from this size on are parsed for the record on the blocking
/// pool, as the reference servers parse theirs (issue 29): 1 MiB bodies
/// and 3.6 MB snapshots parsed on the async workers kept a fresh client's
/// `GET /health` waiting behind them.
pub const BLOCKING_PARSE_BYTES: usize = 64 * 1024;

/// Runs `f` over `bytes`: on the blocking pool when they are large, else
/// here (and here too should the pool's task fail).
async fn parse_off_workers<T: Send + 'static>(bytes: &Bytes, f: fn(&[u8]) -> T) -> T {
    if bytes.len() < BLOCKING_PARSE_BYTES {
        return f(bytes);
    }
    let owned = bytes.clone();
    match tokio::task::spawn_blocking(move || f(&owned)).await {
        Ok(v) => v,
        Err(_) => f(bytes),
    }
}

/// The record's digest of a request body and whether it is a tool-result
/// chat send (an entry's only).
async fn body_facts(body: &Bytes, entry: bool) -> (String, bool) {
    if entry {
        parse_off_workers(body, |b| (body_digest(b), is_tool_result(b))).await
    } else {
        (parse_off_workers(body, body_digest).await, false)
    }
}

/// Applies the fault of `ex` and returns what the client gets (an `Err`
/// closes its connection unanswered).
async fn respond(
    ex: &mut Exchange,
    client: &reqwest::Client,
    config: &ProxyConfig,
    method: &hyper::Method,
    path: &str,
    headers: &hyper::HeaderMap,
    body: &Bytes,
) -> Result<Response<Full<Bytes>>, Closed> {
    match ex.fault {
        Fault::Status502 => {
            return Ok(answer(
                StatusCode::BAD_GATEWAY,
                "proxy_fault",
                "502 injected by reqkey proxy; the request was not forwarded",
            ))
        }
        Fault::Status503 => {
            return Ok(answer(
                StatusCode::SERVICE_UNAVAILABLE,
                "proxy_fault",
                "503 injected by reqkey proxy; the request was not forwarded",
            ))
        }
        _ => {}
    }
    let first = forward(client, config, method, path, headers, body).await;
    ex.forwarded = 1;
    let first = match first {
        Ok(up) => {
            note_answer(ex, &up).await;
            up
        }
        Err(e) => {
            ex.upstream_error = Some(e);
            return Ok(answer(
                StatusCode::BAD_GATEWAY,
                "proxy_upstream_error",
                "the proxy got no whole answer from the server",
            ));
        }
    };
    match ex.fault {
        Fault::DropAfterCommit => return Err(Closed(Fault::DropAfterCommit)),
        Fault::Delay => {
            tokio::time::sleep(Duration::from_millis(config.delay_ms)).await;
            return Err(Closed(Fault::Delay));
        }
        // Forwarded twice only where the server honours the key (SPEC 9,
        // `[[client.proxy.faults]]`): a keyless request, or a tool-result
        // chat send whose key the server ignores (SPEC 7), would run twice
        // by design, which says nothing of the client.
        Fault::Duplicate if server_dedupes(ex) => {
            ex.forwarded = 2;
            match forward(client, config, method, path, headers, body).await {
                Ok(up) => note_answer(ex, &up).await,
                Err(e) => ex.upstream_error = Some(format!("the duplicate: {e}")),
            }
        }
        _ => {}
    }
    let mut r = Response::new(Full::new(first.body));
    *r.status_mut() = StatusCode::from_u16(first.status).unwrap_or(StatusCode::BAD_GATEWAY);
    if let Some(ct) = first.content_type {
        r.headers_mut().insert(hyper::header::CONTENT_TYPE, ct);
    }
    Ok(r)
}

/// The `duplicate` fault applies: a well-formed key on an entry the
/// server deduplicates (not a tool-result chat send, whose key it ignores).
fn server_dedupes(ex: &Exchange) -> bool {
    matches!(ex.key, KeySent::Valid { .. }) && ex.entry.is_some() && !ex.tool_result
}

/// Records one upstream answer: its status, the run a `2xx` entry answer
/// names, and what a `200` snapshot read showed.
async fn note_answer(ex: &mut Exchange, up: &Upstream) {
    ex.upstream_statuses.push(up.status);
    if !(200..300).contains(&up.status) {
        return;
    }
    if ex.entry.is_some() {
        if let Some(run) = run_id_of_answer(&up.body) {
            ex.run_ids.push(run);
        }
    } else if is_snapshot_path(&ex.method, &ex.path) {
        ex.snapshot_inputs = parse_off_workers(&up.body, snapshot_input_runs).await;
    }
}

/// Reads `GET /sessions/{id}` of every session in `sessions` straight from
/// the upstream (not through the proxy, so without faults), each call
/// bounded by `timeout_ms` and its answer by `max_response_bytes`.
pub async fn read_snapshots(
    upstream: &str,
    auth: &UpstreamAuth,
    sessions: &[String],
    timeout_ms: u64,
    max_response_bytes: usize,
) -> BTreeMap<String, SessionSnapshot> {
    let client = match auth.client(Duration::from_millis(timeout_ms)) {
        Ok(c) => c,
        Err(e) => {
            return sessions
                .iter()
                .map(|s| {
                    let reason = format!("no HTTP client: {e}");
                    (s.clone(), SessionSnapshot::Unreadable { reason })
                })
                .collect()
        }
    };
    let mut out = BTreeMap::new();
    for session in sessions {
        let url = format!("{}/sessions/{session}", upstream.trim_end_matches('/'));
        let snapshot = match read_whole(auth.sign(client.get(&url)), max_response_bytes).await {
            Ok((404, _)) => SessionSnapshot::Missing,
            Ok((200, body)) => match serde_json::from_slice::<serde_json::Value>(&body) {
                Ok(v) => SessionSnapshot::from_body(&v),
                Err(e) => SessionSnapshot::Unreadable {
                    reason: format!("the snapshot is not JSON: {e}"),
                },
            },
            Ok((status, _)) => SessionSnapshot::Unreadable {
                reason: format!("GET /sessions/{session} answered {status}"),
            },
            Err(reason) => SessionSnapshot::Unreadable { reason },
        };
        out.insert(session.clone(), snapshot);
    }
    out
}

async fn read_whole(
    request: reqwest::RequestBuilder,
    max_response_bytes: usize,
) -> Result<(u16, Vec<u8>), String> {
    let mut resp = request.send().await.map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let mut buf = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| e.to_string())? {
        if buf.len() + chunk.len() > max_response_bytes {
            return Err(format!("the answer is over {max_response_bytes} bytes"));
        }
        buf.extend_from_slice(&chunk);
    }
    Ok((status, buf))
}
