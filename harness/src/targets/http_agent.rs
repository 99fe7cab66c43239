//! `http://HOST:PORT`: any `reqkey-agent/1` server over HTTP/1.1, in any
//! language. The in-process reference server (`reference_agent.rs`)
//! is reached through this same type, so the reference is certified exactly
//! the way an independent implementation is.
//!
//! A refused connection, a call over the timeout, a connection closed
//! mid-answer or an answer over the response cap is a [`TargetError`] (the
//! harness cannot judge, exit 2), never a verdict. Redirects are not
//! followed: a 3xx is the server's answer, judged like any other, its
//! `Location` among the answer's headers. A step whose `wire` is not the
//! library's is written byte for byte by `targets/wire.rs`.

use async_trait::async_trait;
use reqkey_reference::agent::ServerHandle;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;

use std::sync::Arc;

use crate::targets::access::Access;
use crate::targets::connect_log::ConnectLog;
use crate::targets::latency::{LatencyLog, TargetWarning};
use crate::targets::transport::HttpBase;
use crate::targets::{
    transport, HttpRequest, HttpResponse, Level, Target, TargetError, TargetOptions,
};

/// A `reqkey-agent/1` server reached over HTTP/1.1.
#[derive(Debug)]
pub struct HttpAgentTarget {
    base: String,
    name: String,
    client: reqwest::Client,
    timeout_ms: u64,
    max_response_bytes: u64,
    /// TLS trust, credentials and pace (`--cacert`, `--header`, `--max-rps`).
    link: Access,
    /// Keeps an in-process server alive as long as the target.
    _server: Option<ServerHandle>,
    /// Every answer's timing (streams left out), for the Nagle warning.
    latency: LatencyLog,
    /// Every connection's opening time, for the listen-queue warning.
    connects: Arc<ConnectLog>,
}

impl HttpAgentTarget {
    /// A target for the server at `base`; reports name it redacted.
    pub fn new(base: &HttpBase, opts: &TargetOptions) -> Result<Self, TargetError> {
        let connects = Arc::new(ConnectLog::default());
        Ok(Self {
            name: base.to_string(),
            base: base.url().to_owned(),
            client: transport::client(opts, &connects)?,
            connects,
            timeout_ms: opts.call_timeout_ms,
            max_response_bytes: opts.max_response_bytes,
            link: opts.link.clone(),
            _server: None,
            latency: LatencyLog::default(),
        })
    }

    /// Sends `requests` so that they arrive together (`together.rs`), each
    /// with the run's credentials and `--max-rps` turn, each path checked
    /// to stay at the target's origin first (one off it refuses the burst
    /// whole: each request is answered that error, none is sent).
    pub async fn send_together(
        &self,
        requests: Vec<HttpRequest>,
    ) -> Vec<Result<crate::targets::Timed, TargetError>> {
        let n = requests.len();
        let mut ready = Vec::with_capacity(n);
        for mut request in requests {
            if let Err(e) = transport::at_origin(&self.base, &request.path) {
                return (0..n).map(|_| Err(e.clone())).collect();
            }
            request.headers = self.link.with_credentials(&request.headers);
            request.wire = reqkey_scenario::agent_step::Wire::Library;
            self.link.log_request(
                &request.method,
                &request.path,
                &request.headers,
                request.body.as_ref().map_or(0, Vec::len),
                "together",
            );
            ready.push(request);
        }
        crate::targets::together::send_together(
            &self.base,
            ready,
            self.max_response_bytes,
            self.timeout_ms,
            &self.link,
        )
        .await
    }

    /// A target for a server started in this process: `server` is kept
    /// alive as long as the target, and reports name the target `name`.
    pub fn serving(
        server: ServerHandle,
        name: String,
        opts: &TargetOptions,
    ) -> Result<Self, TargetError> {
        let base = HttpBase::parse(&format!("http://{}", server.addr))
            .map_err(TargetError::Unreachable)?;
        let mut target = Self::new(&base, opts)?;
        target.name = name;
        target._server = Some(server);
        Ok(target)
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

    fn warnings(&self) -> Vec<TargetWarning> {
        let mut warnings = self.latency.warnings();
        warnings.extend(self.connects.warning());
        warnings
    }

    fn slow_connects(&self) -> u64 {
        self.connects.slow_connects()
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
        self.exchange(request, None).await
    }

    async fn http_within(
        &self,
        request: HttpRequest,
        timeout_ms: u64,
    ) -> Result<HttpResponse, TargetError> {
        self.exchange(request, Some(timeout_ms)).await
    }

    fn long_calls(&self) -> bool {
        true
    }

    /// The agent fuzzer's concurrent sends (keyed and keyless) go out with
    /// their last bytes released at once (`targets/together.rs`, issue 56).
    fn sends_together(&self) -> bool {
        true
    }

    async fn http_together(
        &self,
        requests: Vec<HttpRequest>,
    ) -> Vec<Result<crate::targets::Timed, TargetError>> {
        self.send_together(requests).await
    }
}

impl HttpAgentTarget {
    /// One exchange, bounded by the call timeout or (a probe's long
    /// handler, library wire only) by `longer_ms`.
    async fn exchange(
        &self,
        mut request: HttpRequest,
        longer_ms: Option<u64>,
    ) -> Result<HttpResponse, TargetError> {
        // The credentials go under the request a report shows.
        request.headers = self.link.with_credentials(&request.headers);
        self.link.pace().await;
        let library = request.wire == reqkey_scenario::agent_step::Wire::Library;
        // The names as they leave: the library writes them in lower case.
        let sent_headers: Vec<(String, Vec<u8>)> = request
            .headers
            .iter()
            .map(|(n, v)| {
                let n = if library {
                    n.to_ascii_lowercase()
                } else {
                    n.clone()
                };
                (n, v.clone())
            })
            .collect();
        self.link.log_request(
            &request.method,
            &request.path,
            &sent_headers,
            request.body.as_ref().map_or(0, Vec::len),
            if library { "library" } else { "exact" },
        );
        if !library {
            return crate::targets::wire::exchange(
                &self.base,
                &request,
                self.max_response_bytes,
                self.timeout_ms,
                &self.link,
            )
            .await;
        }
        let method = reqwest::Method::from_bytes(request.method.as_bytes())
            .map_err(|_| TargetError::BadSpec(format!("`{}` is not a method", request.method)))?;
        let url = transport::at_origin(&self.base, &request.path)?;
        let mut builder = self
            .client
            .request(method, url)
            .headers(header_map(&request.headers)?);
        if let Some(body) = request.body {
            builder = builder.body(body);
        }
        let timeout_ms = match longer_ms {
            Some(ms) => {
                builder = builder.timeout(std::time::Duration::from_millis(ms));
                ms
            }
            None => self.timeout_ms,
        };
        let sent = std::time::Instant::now();
        let response = builder
            .send()
            .await
            .map_err(|e| transport::classify(&e, &self.base, timeout_ms))?;
        let head = sent.elapsed();
        let status = response.status().as_u16();
        let headers = transport::headers_of(&response);
        let body =
            transport::read_body(response, self.max_response_bytes, &self.base, timeout_ms).await?;
        // A stream's body takes the run's time by design, and so does a
        // probe's long handler.
        let streamed = longer_ms.is_some()
            || headers.iter().any(|(name, value)| {
                name.eq_ignore_ascii_case("content-type") && value.contains("text/event-stream")
            });
        if !streamed {
            self.latency
                .record(head, sent.elapsed().saturating_sub(head), body.len());
        }
        Ok(HttpResponse {
            status,
            headers,
            body,
        })
    }
}
