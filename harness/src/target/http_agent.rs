//! Agent targets: any `reqkey-agent/1` server over HTTP, and the reference
//! server started in process.
//!
//! `http://HOST:PORT` reaches a server someone else runs (in any language).
//! `reference-agent` starts the reference server of `reqkey-reference` on
//! an ephemeral port over a fresh memory store, and talks to it over real
//! HTTP — the same path as a remote server, so the reference is certified
//! exactly the way an independent implementation is. Variants of it
//! (`reference-agent:no-request-keys`, `reference-agent:DEFECT`) exist to
//! prove that the agent corpus fails servers that get keys wrong.
//!
//! A refused connection or a call over the timeout is a [`TargetError`]
//! (the harness cannot judge, exit 2), never a verdict.

use std::sync::Arc;

use async_trait::async_trait;
use reqkey_reference::agent::{
    spawn, ConcurrencyPolicy, Executor, ExecutorConfig, ExecutorDefect, ServerHandle,
};
use reqkey_reference::store::{self, MemoryStore, SessionStateStore};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;

use crate::target::{HttpRequest, HttpResponse, Level, Target, TargetError, TargetOptions};

/// A `reqkey-agent/1` server reached over HTTP/1.1.
#[derive(Debug)]
pub struct HttpAgentTarget {
    base: String,
    name: String,
    client: reqwest::Client,
    timeout_ms: u64,
    /// Keeps an in-process server alive as long as the target.
    _server: Option<ServerHandle>,
}

impl HttpAgentTarget {
    /// A target for the server at `base` (`http://HOST:PORT`, no path).
    pub fn new(base: &str, opts: TargetOptions) -> Result<Self, TargetError> {
        let base = base.trim_end_matches('/').to_owned();
        let rest = base
            .strip_prefix("http://")
            .ok_or_else(|| TargetError::BadSpec(format!("`{base}` is not http://HOST:PORT")))?;
        if rest.is_empty() || rest.contains('/') {
            return Err(TargetError::BadSpec(format!(
                "`{base}` must be http://HOST:PORT, without a path"
            )));
        }
        let client = reqwest::Client::builder()
            .no_proxy()
            .timeout(opts.call_timeout())
            .build()
            .map_err(|e| TargetError::BadSpec(format!("cannot build an HTTP client: {e}")))?;
        Ok(Self {
            name: base.clone(),
            base,
            client,
            timeout_ms: opts.call_timeout_ms,
            _server: None,
        })
    }

    fn error(&self, e: &reqwest::Error) -> TargetError {
        if e.is_timeout() {
            TargetError::Timeout {
                timeout_ms: self.timeout_ms,
            }
        } else if e.is_connect() {
            TargetError::Unreachable(format!("{}: cannot connect", self.base))
        } else {
            // A reset mid-exchange, a malformed answer: the server broke the
            // protocol (a conformance failure of the step, not a harness error).
            TargetError::Protocol(format!("{}: {e}", self.base))
        }
    }
}

fn header_map(headers: &[(String, Vec<u8>)]) -> Result<HeaderMap, TargetError> {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| TargetError::BadSpec(format!("`{name}` is not a header name")))?;
        // Control characters other than a tab cannot be sent in HTTP/1.1.
        let value = HeaderValue::from_bytes(value).map_err(|_| {
            TargetError::BadSpec(format!("a value of `{name}` cannot be sent over HTTP/1.1"))
        })?;
        map.append(name, value);
    }
    Ok(map)
}

#[async_trait]
impl Target for HttpAgentTarget {
    fn level(&self) -> Level {
        Level::Agent
    }

    fn describe(&self) -> String {
        self.name.clone()
    }

    async fn health(&self) -> Result<Value, TargetError> {
        let response = self
            .http(HttpRequest {
                method: "GET".into(),
                path: "/health".into(),
                ..HttpRequest::default()
            })
            .await?;
        if response.status != 200 {
            return Err(TargetError::Protocol(format!(
                "GET /health answered {}",
                response.status
            )));
        }
        serde_json::from_slice(&response.body)
            .map_err(|_| TargetError::Protocol("GET /health is not JSON".into()))
    }

    async fn http(&self, request: HttpRequest) -> Result<HttpResponse, TargetError> {
        let method = reqwest::Method::from_bytes(request.method.as_bytes())
            .map_err(|_| TargetError::BadSpec(format!("`{}` is not a method", request.method)))?;
        let mut builder = self
            .client
            .request(method, format!("{}{}", self.base, request.path))
            .headers(header_map(&request.headers)?);
        if let Some(body) = request.body {
            builder = builder.body(body);
        }
        let response = builder.send().await.map_err(|e| self.error(&e))?;
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .map(|(n, v)| {
                (
                    n.as_str().to_owned(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect();
        let body = response.bytes().await.map_err(|e| self.error(&e))?.to_vec();
        Ok(HttpResponse {
            status,
            headers,
            body,
        })
    }
}

/// The executor configuration a `reference-agent[:VARIANT]` spec names.
pub fn reference_config(variant: Option<&str>) -> Result<ExecutorConfig, TargetError> {
    let mut config = ExecutorConfig::default();
    match variant {
        None => {}
        Some("no-request-keys") => config.supports_request_key = false,
        Some("interrupt-previous") => config.policy = ConcurrencyPolicy::InterruptPrevious,
        Some(name) => {
            let defect = ExecutorDefect::parse(name).ok_or_else(|| {
                TargetError::BadSpec(format!(
                    "unknown reference-agent variant `{name}`; see `reqkey run --help`"
                ))
            })?;
            config.defect = Some(defect);
            // Widen the decide-to-commit window so races really happen.
            config.commit_delay_ms = 2;
        }
    }
    Ok(config)
}

/// Opens `http://HOST:PORT` or `reference-agent[:VARIANT][@STORE]`.
///
/// An `http://` server that does not answer `/health` at all fails here,
/// with one message (exit 2), instead of once per scenario.
pub async fn open_agent_target(
    spec: &str,
    opts: TargetOptions,
) -> Result<Arc<dyn Target>, TargetError> {
    if spec.starts_with("http://") {
        let target = HttpAgentTarget::new(spec, opts)?;
        return match target.health().await {
            Err(e @ (TargetError::Unreachable(_) | TargetError::Timeout { .. })) => Err(e),
            _ => Ok(Arc::new(target)),
        };
    }
    let rest = spec
        .strip_prefix("reference-agent")
        .ok_or_else(|| TargetError::BadSpec(format!("unknown target `{spec}`")))?;
    // The variant never holds an `@`; a store URL may (`postgres://u@h/db`).
    let (variant, store) = match rest.split_once('@') {
        Some((v, store)) => (v, Some(store)),
        None => (rest, None),
    };
    let variant = match variant {
        "" => None,
        v => Some(v.strip_prefix(':').ok_or_else(|| {
            TargetError::BadSpec(format!("`{spec}` is not reference-agent[:VARIANT][@STORE]"))
        })?),
    };
    Ok(Arc::new(reference_agent(variant, store, opts).await?))
}

/// Starts the reference server in process on an ephemeral port, over a
/// fresh memory store or the reference store `store` names.
pub async fn reference_agent(
    variant: Option<&str>,
    store: Option<&str>,
    opts: TargetOptions,
) -> Result<HttpAgentTarget, TargetError> {
    let config = reference_config(variant)?;
    let sessions: Arc<dyn SessionStateStore> = match store {
        None => Arc::new(MemoryStore::new()),
        Some(spec) => tokio::time::timeout(opts.call_timeout(), store::open(spec))
            .await
            .map_err(|_| TargetError::Timeout {
                timeout_ms: opts.call_timeout_ms,
            })?
            .map_err(crate::target::open_error)?,
    };
    let executor = Executor::new(sessions, config);
    let server = spawn(executor, ([127, 0, 0, 1], 0).into())
        .await
        .map_err(|e| TargetError::Unreachable(format!("cannot start the reference agent: {e}")))?;
    let mut target = HttpAgentTarget::new(&format!("http://{}", server.addr), opts)?;
    let mut name = String::from("reference-agent");
    if let Some(v) = variant {
        name = format!("{name}:{v}");
    }
    if let Some(s) = store {
        name = format!("{name}@{}", store::redact_url(s));
    }
    target.name = name;
    target._server = Some(server);
    Ok(target)
}
