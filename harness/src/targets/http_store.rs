//! `store+http://HOST:PORT`: any store behind a `reqkey-store/1` adapter, in
//! any language.

use async_trait::async_trait;
use reqkey_model::StoreError;
use serde_json::Value;

use crate::targets::access::Access;
use crate::targets::connect_log::ConnectLog;
use crate::targets::latency::{LatencyLog, TargetWarning};
use crate::targets::transport::HttpBase;
use crate::targets::{transport, Level, Target, TargetError, TargetOptions};

/// Any store behind a `reqkey-store/1` adapter (`store+http://HOST:PORT`),
/// in any language.
///
/// Every call is bounded by the call timeout and the response cap. A
/// refused connection is [`TargetError::Unreachable`], no answer in time
/// [`TargetError::Timeout`], a connection closed mid-answer
/// [`TargetError::Closed`], an answer over the cap
/// [`TargetError::TooLarge`] (the harness cannot judge); an answer that is not `200` with exactly
/// `{"ok": ...}` or a well-formed `{"error": ...}` is
/// [`TargetError::Protocol`] (the adapter does not conform).
#[derive(Debug)]
pub struct HttpStore {
    base: String,
    spec: String,
    client: reqwest::Client,
    timeout_ms: u64,
    max_response_bytes: u64,
    /// TLS trust, credentials and pace (`--cacert`, `--header`, `--max-rps`).
    link: Access,
    /// Every answer's timing, for the Nagle warning.
    latency: LatencyLog,
    /// Every connection's opening time, for the listen-queue warning.
    connects: std::sync::Arc<ConnectLog>,
}

impl HttpStore {
    /// `authority` is `HOST:PORT`.
    pub fn new(spec: &str, base: &HttpBase, opts: &TargetOptions) -> Result<Self, TargetError> {
        let connects = std::sync::Arc::new(ConnectLog::default());
        Ok(Self {
            base: base.url().to_owned(),
            spec: spec.to_owned(),
            client: transport::client(opts, &connects)?,
            connects,
            timeout_ms: opts.call_timeout_ms,
            max_response_bytes: opts.max_response_bytes,
            link: opts.link.clone(),
            latency: LatencyLog::default(),
        })
    }

    /// Sends one request and reads a JSON body from a 200 answer. The body
    /// is read under the response cap; a redirect is not followed but
    /// judged (it is not 200), naming its `Location`.
    async fn exchange(
        &self,
        request: reqwest::RequestBuilder,
        what: &str,
    ) -> Result<Value, TargetError> {
        let classify = |e: reqwest::Error| transport::classify(&e, &self.base, self.timeout_ms);
        let mut request = request;
        for (name, value) in self.link.with_credentials(&[]) {
            request = request.header(name.as_str(), value.as_slice());
        }
        let request = request.build().map_err(classify)?;
        self.link.pace().await;
        // As the library writes it: names in lower case.
        let headers: Vec<(String, Vec<u8>)> = request
            .headers()
            .iter()
            .map(|(n, v)| (n.as_str().to_owned(), v.as_bytes().to_vec()))
            .collect();
        self.link.log_request(
            request.method().as_str(),
            request.url().path(),
            &headers,
            request
                .body()
                .and_then(reqwest::Body::as_bytes)
                .map_or(0, <[u8]>::len),
            "library",
        );
        let sent = std::time::Instant::now();
        let resp = self.client.execute(request).await.map_err(classify)?;
        let head = sent.elapsed();
        let status = resp.status();
        let location = resp
            .headers()
            .get(reqwest::header::LOCATION)
            .map(|l| String::from_utf8_lossy(l.as_bytes()).into_owned());
        let content_type = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .map(|c| String::from_utf8_lossy(c.as_bytes()).into_owned());
        let body = transport::read_body(resp, self.max_response_bytes, &self.base, self.timeout_ms)
            .await?;
        self.latency
            .record(head, sent.elapsed().saturating_sub(head), body.len());
        if status != reqwest::StatusCode::OK {
            let location = location
                .map(|l| format!(" with Location: {l} (redirects are not followed)"))
                .unwrap_or_default();
            return Err(TargetError::Protocol(format!(
                "{what} answered HTTP {status}{location} (reqkey-store/1 always answers 200): {}",
                String::from_utf8_lossy(&body[..body.len().min(200)])
            )));
        }
        // SPEC 6 [[wire.store.strict-json]]: one JSON text, served as
        // JSON, no member repeated, nothing after it.
        match content_type.as_deref() {
            Some(ct) if transport::is_json_media_type(ct) => {}
            other => {
                return Err(TargetError::Protocol(format!(
                    "{what} answered with content type {}, not application/json",
                    other.map_or_else(|| "(none)".to_owned(), |c| format!("`{c}`"))
                )))
            }
        }
        transport::no_repeated_members(&body).map_err(|e| {
            TargetError::Protocol(format!(
                "{what} answered a body that is not strict JSON: {e}"
            ))
        })?;
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

    fn warnings(&self) -> Vec<TargetWarning> {
        let mut warnings = self.latency.warnings();
        warnings.extend(self.connects.warning());
        warnings
    }

    fn slow_connects(&self) -> u64 {
        self.connects.slow_connects()
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
        transport::check_protocol(Level::Store, &health)?;
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

    /// The text goes on the wire byte for byte: its key order, spacing and
    /// number spelling are what the adapter reads.
    async fn store_call_raw(&self, text: &str) -> Result<Value, TargetError> {
        let answer = self
            .exchange(
                self.client
                    .post(format!("{}/rpc", self.base))
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(text.to_owned()),
                "POST /rpc",
            )
            .await?;
        check_store_answer(&answer)?;
        Ok(answer)
    }
}
