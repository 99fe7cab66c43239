//! Targets: the only way the harness reaches an implementation.
//!
//! A scenario never names a backend; it names operations. A [`Target`]
//! carries them to something real: an in-process reference store, a
//! `reqkey-store/1` adapter over HTTP, or a `reqkey-agent/1` server. Every
//! call is bounded by a timeout; a target that is down or hangs is a
//! [`TargetError`] (the harness cannot judge, exit 2), never a verdict.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use reqkey_model::seq::answer_to_wire;
use reqkey_model::StoreError;
use reqkey_reference::store::{
    self, dispatch_wire, redact_url, MemoryDefect, MemoryStore, OpenError, SessionStateStore,
};
use serde_json::Value;

/// Which contract a target speaks, and so which scenarios apply to it.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    /// `reqkey-store/1`: the SPEC 4 operations.
    Store,
    /// `reqkey-agent/1`: the SPEC 7 HTTP API.
    Agent,
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Level::Store => "store",
            Level::Agent => "agent",
        })
    }
}

/// Why a call could not be judged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    /// The target could not be reached (refused, reset, DNS, ...).
    #[error("target unreachable: {0}")]
    Unreachable(String),
    /// The target did not answer within the call timeout.
    #[error("target did not answer within {timeout_ms} ms")]
    Timeout { timeout_ms: u64 },
    /// The target answered something the protocol does not allow
    /// (a broken adapter: wrong status, not JSON, not `{ok}|{error}`).
    /// This is a conformance failure of the step, not a harness error.
    #[error("protocol violation: {0}")]
    Protocol(String),
    /// The target cannot do this (for example a store op on an agent target).
    #[error("unsupported by this target: {0}")]
    Unsupported(String),
    /// The target specification itself is wrong.
    #[error("bad target: {0}")]
    BadSpec(String),
}

impl TargetError {
    /// Does this error mean the harness could not judge (exit 2), rather
    /// than that the target does not conform?
    pub fn is_harness_error(&self) -> bool {
        !matches!(self, TargetError::Protocol(_))
    }
}

/// One HTTP request of an agent-level step, with full control of headers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HttpRequest {
    pub method: String,
    /// Path and query, starting with `/`.
    pub path: String,
    /// Raw header values; a name may repeat, values need not be UTF-8.
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Option<Vec<u8>>,
}

/// The whole answer to an [`HttpRequest`] (an SSE body read to its end).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// Something the harness can certify.
#[async_trait]
pub trait Target: Send + Sync + fmt::Debug {
    /// The contract it speaks.
    fn level(&self) -> Level;

    /// How a report names it (`memory`, `store+http://127.0.0.1:7001`, ...).
    fn describe(&self) -> String;

    /// The target's identity: `/health` for HTTP targets, a synthesized
    /// equivalent in process.
    async fn health(&self) -> Result<Value, TargetError>;

    /// One `reqkey-store/1` call: `request` is `{"op", "args"}` as the
    /// scenario wrote it (possibly malformed on purpose); the answer is the
    /// wire answer `{"ok": ...}` or `{"error": ...}`.
    async fn store_call(&self, request: &Value) -> Result<Value, TargetError> {
        let _ = request;
        Err(TargetError::Unsupported(format!(
            "{} does not take store operations",
            self.describe()
        )))
    }

    /// One HTTP exchange with an agent server.
    async fn http(&self, request: HttpRequest) -> Result<HttpResponse, TargetError> {
        let _ = request;
        Err(TargetError::Unsupported(format!(
            "{} does not take HTTP requests",
            self.describe()
        )))
    }
}

/// A reference store in this process.
#[derive(Debug)]
pub struct InProcessStore {
    store: Arc<dyn SessionStateStore>,
    name: String,
}

impl InProcessStore {
    pub fn new(name: impl Into<String>, store: Arc<dyn SessionStateStore>) -> Self {
        Self {
            store,
            name: name.into(),
        }
    }
}

#[async_trait]
impl Target for InProcessStore {
    fn level(&self) -> Level {
        Level::Store
    }

    fn describe(&self) -> String {
        self.name.clone()
    }

    async fn health(&self) -> Result<Value, TargetError> {
        Ok(serde_json::json!({
            "name": format!("reqkey-reference/{}", self.store.backend()),
            "version": env!("CARGO_PKG_VERSION"),
            "protocol": "reqkey-store/1",
        }))
    }

    async fn store_call(&self, request: &Value) -> Result<Value, TargetError> {
        Ok(answer_to_wire(
            &dispatch_wire(self.store.as_ref(), request).await,
        ))
    }
}

/// Any store behind a `reqkey-store/1` adapter (`store+http://HOST:PORT`),
/// in any language.
///
/// Every call is bounded by the call timeout. A refused connection is
/// [`TargetError::Unreachable`], no answer in time [`TargetError::Timeout`]
/// (the harness cannot judge); an answer that is not `200` with exactly
/// `{"ok": ...}` or a well-formed `{"error": ...}` is
/// [`TargetError::Protocol`] (the adapter does not conform).
#[derive(Debug)]
pub struct HttpStore {
    base: String,
    spec: String,
    client: reqwest::Client,
    timeout_ms: u64,
}

impl HttpStore {
    /// `authority` is `HOST:PORT`.
    pub fn new(spec: &str, authority: &str, opts: TargetOptions) -> Result<Self, TargetError> {
        if authority.is_empty() || authority.contains('/') {
            return Err(TargetError::BadSpec(format!(
                "`{spec}`: expected store+http://HOST:PORT"
            )));
        }
        let client = reqwest::Client::builder()
            .timeout(opts.call_timeout())
            // Drop idle connections before common servers do (Node closes
            // them after 5 s), so a step never reuses a socket the adapter
            // is closing, which would look like an unreachable target.
            .pool_idle_timeout(std::time::Duration::from_secs(2))
            .build()
            .map_err(|e| TargetError::BadSpec(format!("cannot build an HTTP client: {e}")))?;
        Ok(Self {
            base: format!("http://{authority}"),
            spec: spec.to_owned(),
            client,
            timeout_ms: opts.call_timeout_ms,
        })
    }

    fn transport_error(&self, e: reqwest::Error) -> TargetError {
        // reqwest's own message ("error sending request") hides the cause.
        let mut message = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(cause) = source {
            message = format!("{message}: {cause}");
            source = cause.source();
        }
        if e.is_timeout() {
            TargetError::Timeout {
                timeout_ms: self.timeout_ms,
            }
        } else if e.is_connect() || e.is_request() {
            TargetError::Unreachable(format!("{}: {message}", self.base))
        } else {
            TargetError::Protocol(format!("{}: {message}", self.base))
        }
    }

    /// Sends one request and reads a JSON body from a 200 answer.
    async fn exchange(
        &self,
        request: reqwest::RequestBuilder,
        what: &str,
    ) -> Result<Value, TargetError> {
        let resp = request.send().await.map_err(|e| self.transport_error(e))?;
        let status = resp.status();
        let body = resp.bytes().await.map_err(|e| self.transport_error(e))?;
        if status != reqwest::StatusCode::OK {
            return Err(TargetError::Protocol(format!(
                "{what} answered HTTP {status} (reqkey-store/1 always answers 200): {}",
                String::from_utf8_lossy(&body[..body.len().min(200)])
            )));
        }
        serde_json::from_slice(&body).map_err(|e| {
            TargetError::Protocol(format!("{what} answered a body that is not JSON: {e}"))
        })
    }
}

/// Checks that `answer` is exactly `{"ok": ...}` or a well-formed
/// `{"error": ...}` (SPEC 6).
pub fn check_store_answer(answer: &Value) -> Result<(), TargetError> {
    let obj = answer.as_object().filter(|o| o.len() == 1).ok_or_else(|| {
        TargetError::Protocol(format!(
            "the answer is not exactly one of {{ok}} or {{error}}: {answer}"
        ))
    })?;
    if obj.contains_key("ok") {
        return Ok(());
    }
    match obj.get("error") {
        Some(err) if StoreError::from_wire(err).is_some() => Ok(()),
        Some(err) => Err(TargetError::Protocol(format!(
            "the error is not a reqkey-store/1 error object: {err}"
        ))),
        None => Err(TargetError::Protocol(format!(
            "the answer is not exactly one of {{ok}} or {{error}}: {answer}"
        ))),
    }
}

#[async_trait]
impl Target for HttpStore {
    fn level(&self) -> Level {
        Level::Store
    }

    fn describe(&self) -> String {
        self.spec.clone()
    }

    async fn health(&self) -> Result<Value, TargetError> {
        let health = self
            .exchange(
                self.client.get(format!("{}/health", self.base)),
                "GET /health",
            )
            .await?;
        if health.get("protocol").and_then(Value::as_str) != Some("reqkey-store/1") {
            return Err(TargetError::Protocol(format!(
                "GET /health does not name protocol reqkey-store/1: {health}"
            )));
        }
        Ok(health)
    }

    async fn store_call(&self, request: &Value) -> Result<Value, TargetError> {
        let answer = self
            .exchange(
                self.client.post(format!("{}/rpc", self.base)).json(request),
                "POST /rpc",
            )
            .await?;
        check_store_answer(&answer)?;
        Ok(answer)
    }
}

pub(crate) fn open_error(e: OpenError) -> TargetError {
    match e {
        OpenError::UnknownSpec(_) | OpenError::NotBuilt(_) => TargetError::BadSpec(e.to_string()),
        OpenError::Backend { .. } | OpenError::Migration { .. } => {
            TargetError::Unreachable(e.to_string())
        }
    }
}

/// Options every target shares.
#[derive(Debug, Clone, Copy)]
pub struct TargetOptions {
    /// The bound on every single call.
    pub call_timeout_ms: u64,
}

impl Default for TargetOptions {
    fn default() -> Self {
        Self {
            call_timeout_ms: 10_000,
        }
    }
}

impl TargetOptions {
    pub fn call_timeout(&self) -> Duration {
        Duration::from_millis(self.call_timeout_ms)
    }
}

/// The target specifications `--target` accepts, for help texts.
pub const TARGET_HELP: &str = "\
memory                    the in-process reference memory store (the embedded default)
broken-memory:DEFECT      a deliberately broken memory store, to see the suite fail
                          (no-key-rule, key-rule-after-cas, no-replay-first,
                          delete-keeps-keys, holder-read-outside-commit)
sqlite:PATH               the reference store on a SQLite file, in process
                          (created and migrated on open)
postgres://USER@HOST/DB   the reference store on PostgreSQL, in process
                          (tables reqkey_*, migrated on open)
redis://HOST:PORT         the reference store on Redis, in process
redis+cluster://HOST:PORT[,HOST:PORT...]
                          the reference store on a Redis Cluster, in process
store+http://HOST:PORT    any store behind a reqkey-store/1 adapter, any language
                          (`reqkey serve store` serves a reference one)
http://HOST:PORT          any agent server speaking reqkey-agent/1
reference-agent           the reference agent server, in process, over a memory store
reference-agent:VARIANT   a variant of it: no-request-keys, interrupt-previous, or a
                          deliberately broken executor (policy-before-key,
                          no-replan-after-key-taken, ignore-digest, attach-streams-from-now)
reference-agent[:VARIANT]@STORE
                          the same over another reference store (sqlite:PATH,
                          postgres://..., redis://..., redis+cluster://...)";

/// Opens a target from its `--target` specification.
pub async fn open_target(spec: &str, opts: TargetOptions) -> Result<Arc<dyn Target>, TargetError> {
    if let Some(authority) = spec.strip_prefix("store+http://") {
        let target = HttpStore::new(spec, authority, opts)?;
        // Fail fast, with one message, when nothing answers; a /health that
        // answers but does not conform is left for the scenarios to judge.
        match target.health().await {
            Err(e @ (TargetError::Unreachable(_) | TargetError::Timeout { .. })) => return Err(e),
            _ => return Ok(Arc::new(target)),
        }
    }
    if spec.starts_with("sqlite:")
        || spec.starts_with("postgres://")
        || spec.starts_with("postgresql://")
        || spec.starts_with("redis://")
        || spec.starts_with("redis+cluster://")
    {
        let opened = tokio::time::timeout(opts.call_timeout(), store::open(spec))
            .await
            .map_err(|_| TargetError::Timeout {
                timeout_ms: opts.call_timeout_ms,
            })?
            .map_err(open_error)?;
        return Ok(Arc::new(InProcessStore::new(redact_url(spec), opened)));
    }
    if spec.starts_with("http://") || spec.starts_with("reference-agent") {
        return crate::agent_target::open_agent_target(spec, opts).await;
    }
    if spec == "memory" {
        return Ok(Arc::new(InProcessStore::new(
            "memory",
            Arc::new(MemoryStore::new()),
        )));
    }
    if let Some(name) = spec.strip_prefix("broken-memory:") {
        let defect = MemoryDefect::parse(name).ok_or_else(|| {
            TargetError::BadSpec(format!("unknown defect `{name}`; see `reqkey run --help`"))
        })?;
        return Ok(Arc::new(InProcessStore::new(
            spec,
            Arc::new(MemoryStore::with_defect(defect)),
        )));
    }
    Err(TargetError::BadSpec(format!(
        "unknown target `{spec}`; see `reqkey run --help` for the forms"
    )))
}
