//! The idem level's targets (SPEC 10): `idem+http://HOST:PORT` (any app
//! speaking `reqkey-idem/1`, a wrapped library), `reference-idem[:VARIANT]
//! [@redis://...]` and `broken-idem:DEFECT[:VARIANT][@redis://...]` (the reference
//! middleware, in process on an ephemeral port).
//!
//! The HTTP exchanges go through [`HttpAgentTarget`]'s client (bounded
//! reads, the `wire:` forms), so an app is judged the same way whatever
//! serves it; this type only changes the level, the health route
//! (`/.reqkey/health`) and the profile, which is read and typed here.

use reqkey_reference::scheme::{self, Scheme};
use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;

use async_trait::async_trait;
use reqkey_reference::idem::{self, IdemConfig, IdemDefect, IdemHandle, IdemVariant};
use reqkey_reference::store::redact_url;
use serde_json::Value;

use crate::targets::http_agent::HttpAgentTarget;
use crate::targets::transport::{check_protocol, HttpBase};
use crate::targets::{HttpRequest, HttpResponse, Level, Target, TargetError, TargetOptions};

/// The path an idem app answers its identity and profile on.
pub use crate::targets::profile::IDEM_HEALTH_PATH as HEALTH_PATH;

/// Where the reference middleware keeps its keys: `memory` or
/// `redis://HOST:PORT` (`rediss://` over TLS). The one parse of it, for
/// `--target reference-idem@...` and `reqkey serve idem --storage`. Its
/// `Debug` and `Display` redact the URL's secrets.
#[derive(Clone, PartialEq, Eq)]
pub enum IdemStorageSpec {
    Memory,
    Redis(String),
}

impl IdemStorageSpec {
    /// `memory` or a Redis URL; anything else is the reason it is not one.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "memory" => Ok(IdemStorageSpec::Memory),
            s if scheme::of_scheme(s, Scheme::Redis).is_some() => {
                crate::secrets::register_target(s);
                Ok(IdemStorageSpec::Redis(s.to_owned()))
            }
            _ => Err("the idem storage is `memory` or `redis://HOST:PORT`".to_owned()),
        }
    }

    /// The Redis URL the reference opens (`None`: memory).
    pub fn redis_url(&self) -> Option<String> {
        match self {
            IdemStorageSpec::Memory => None,
            IdemStorageSpec::Redis(url) => Some(url.clone()),
        }
    }
}

impl fmt::Display for IdemStorageSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IdemStorageSpec::Memory => f.write_str("memory"),
            IdemStorageSpec::Redis(url) => f.write_str(&redact_url(url)),
        }
    }
}

impl fmt::Debug for IdemStorageSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IdemStorageSpec({self})")
    }
}

/// An idem `--target`. Its `Debug` is its redacted display name (a Redis
/// URL may carry a password).
#[derive(Clone, PartialEq, Eq)]
pub enum IdemSpec {
    /// `idem+http://HOST:PORT` or `idem+https://HOST:PORT`.
    Http { base: HttpBase },
    /// The reference middleware in process.
    Reference {
        variant: IdemVariant,
        defect: Option<IdemDefect>,
        storage: IdemStorageSpec,
    },
}

impl IdemSpec {
    /// `Ok(None)` when `spec` is not an idem form; a malformed one is
    /// [`TargetError::BadSpec`].
    pub fn parse(spec: &str) -> Result<Option<Self>, TargetError> {
        let bad = |what: &str| TargetError::BadSpec(format!("`{}`: {what}", redact_url(spec)));
        let http = scheme::of_scheme(spec, Scheme::IdemHttp).map(|(tls, a)| (a, tls));
        if let Some((authority, tls)) = http {
            if authority.is_empty() || authority.contains('/') {
                return Err(bad("expected idem+http[s]://HOST:PORT"));
            }
            let base = HttpBase::of_authority(authority, tls)
                .map_err(|_| bad("expected idem+http[s]://HOST:PORT"))?;
            return Ok(Some(IdemSpec::Http { base }));
        }
        if !(spec.starts_with("reference-idem") || spec.starts_with("broken-idem:")) {
            return Ok(None);
        }
        let (head, storage) = match spec.split_once('@') {
            Some((h, url)) => (
                h,
                IdemStorageSpec::parse(url)
                    .ok()
                    .filter(|s| *s != IdemStorageSpec::Memory)
                    .ok_or_else(|| bad("the storage after @ is redis://HOST:PORT"))?,
            ),
            None => (spec, IdemStorageSpec::Memory),
        };
        let named = match head.strip_prefix("reference-idem") {
            Some("") => Some((IdemVariant::Default, None)),
            Some(rest) => rest
                .strip_prefix(':')
                .and_then(idem::parse_name)
                .filter(|(_, d)| d.is_none()),
            None => idem::parse_name(head),
        };
        let Some((variant, defect)) = named else {
            return Err(bad(if head.starts_with("broken-idem:") {
                "expected broken-idem:DEFECT[:VARIANT]; `reqkey targets` lists them"
            } else {
                "expected reference-idem[:VARIANT][@redis://...]; `reqkey targets` lists the variants"
            }));
        };
        Ok(Some(IdemSpec::Reference {
            variant,
            defect,
            storage,
        }))
    }

    /// The endpoint of an app over HTTP (none for the reference in process).
    pub fn http_base(&self) -> Option<HttpBase> {
        match self {
            IdemSpec::Http { base } => Some(base.clone()),
            IdemSpec::Reference { .. } => None,
        }
    }

    /// Opens it (starting the reference app when it is one).
    pub async fn open(
        &self,
        name: String,
        opts: TargetOptions,
    ) -> Result<Arc<dyn Target>, TargetError> {
        match self {
            IdemSpec::Http { base } => {
                let inner = HttpAgentTarget::new(base, &opts)?;
                if let Some(map) = &opts.api {
                    let mapped = crate::targets::mapped::MappedTarget::open(
                        format!("{name} (API map {})", map.file),
                        map.as_ref().clone(),
                        inner,
                    )
                    .await?;
                    return Ok(Arc::new(mapped));
                }
                let target = IdemTarget {
                    name,
                    inner,
                    _app: None,
                };
                match target.health().await {
                    Ok(h) => check_protocol(Level::Idem, &h)?,
                    Err(e) if e.is_harness_error() => return Err(e),
                    Err(_) => {}
                }
                Ok(Arc::new(target))
            }
            IdemSpec::Reference {
                variant,
                defect,
                storage,
            } => {
                let config = IdemConfig {
                    variant: *variant,
                    defect: *defect,
                    redis_url: storage.redis_url(),
                    ..IdemConfig::default()
                };
                let addr = SocketAddr::from(([127, 0, 0, 1], 0));
                let app = idem::spawn(config, addr)
                    .await
                    .map_err(|e| TargetError::Unreachable(format!("reference-idem: {e}")))?;
                let base = HttpBase::parse(&format!("http://{}", app.addr))
                    .map_err(TargetError::Unreachable)?;
                Ok(Arc::new(IdemTarget {
                    name,
                    inner: HttpAgentTarget::new(&base, &opts)?,
                    _app: Some(app),
                }))
            }
        }
    }
}

impl fmt::Debug for IdemSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IdemSpec({self})")
    }
}

impl fmt::Display for IdemSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IdemSpec::Http { base } => {
                write!(f, "idem+{}://{}", base.scheme(), base.shown_authority())
            }
            IdemSpec::Reference {
                variant,
                defect,
                storage,
            } => {
                match defect {
                    Some(d) if d.declares() == *variant => write!(f, "broken-idem:{}", d.name())?,
                    Some(d) => write!(f, "broken-idem:{}:{}", d.name(), variant.name())?,
                    None if *variant == IdemVariant::Default => f.write_str("reference-idem")?,
                    None => write!(f, "reference-idem:{}", variant.name())?,
                }
                if *storage != IdemStorageSpec::Memory {
                    write!(f, "@{storage}")?;
                }
                Ok(())
            }
        }
    }
}

/// Every built-in broken variant's `--target`.
pub fn builtin_variants() -> Vec<String> {
    IdemDefect::ALL
        .iter()
        .map(|d| format!("broken-idem:{}", d.name()))
        .collect()
}

/// `request` as a client sends it (issue 56): a JSON body that names no
/// media type goes out with `Content-Type: application/json`, as every
/// HTTP client library and `curl --json` send one (a scenario's `json:`
/// step names none). A request that names its own keeps it, and a body
/// that is not JSON is left as it is.
fn as_a_client_sends(mut request: HttpRequest) -> HttpRequest {
    let json_body = request
        .body
        .as_deref()
        .is_some_and(|b| !b.is_empty() && serde_json::from_slice::<Value>(b).is_ok());
    let named = request
        .headers
        .iter()
        .any(|(n, _)| n.eq_ignore_ascii_case("content-type"));
    if json_body && !named {
        request
            .headers
            .push(("Content-Type".to_owned(), b"application/json".to_vec()));
    }
    request
}

/// An app speaking `reqkey-idem/1`.
#[derive(Debug)]
pub struct IdemTarget {
    name: String,
    inner: HttpAgentTarget,
    /// Keeps an in-process reference app alive as long as the target.
    _app: Option<IdemHandle>,
}

#[async_trait]
impl Target for IdemTarget {
    fn level(&self) -> Level {
        Level::Idem
    }

    fn describe(&self) -> String {
        self.name.clone()
    }

    fn slow_connects(&self) -> u64 {
        self.inner.slow_connects()
    }

    async fn health(&self) -> Result<Value, TargetError> {
        let response = self
            .inner
            .http(HttpRequest {
                method: "GET".into(),
                path: HEALTH_PATH.into(),
                ..HttpRequest::default()
            })
            .await?;
        if response.status != 200 {
            return Err(TargetError::Protocol(format!(
                "GET {HEALTH_PATH} answered {}",
                response.status
            )));
        }
        serde_json::from_slice(&response.body)
            .map_err(|_| TargetError::Protocol(format!("GET {HEALTH_PATH} is not JSON")))
    }

    async fn http(&self, request: HttpRequest) -> Result<HttpResponse, TargetError> {
        self.inner.http(as_a_client_sends(request)).await
    }

    async fn http_within(
        &self,
        request: HttpRequest,
        timeout_ms: u64,
    ) -> Result<HttpResponse, TargetError> {
        self.inner
            .http_within(as_a_client_sends(request), timeout_ms)
            .await
    }

    fn long_calls(&self) -> bool {
        self.inner.long_calls()
    }

    /// Every burst goes out with its last bytes released at once
    /// (`targets/together.rs`, issue 56): a race that shows only when
    /// duplicates reach the app within microseconds is met.
    fn sends_together(&self) -> bool {
        true
    }

    async fn http_together(
        &self,
        requests: Vec<HttpRequest>,
    ) -> Vec<Result<crate::targets::Timed, TargetError>> {
        self.inner
            .send_together(requests.into_iter().map(as_a_client_sends).collect())
            .await
    }

    /// The answers' timings, as at every HTTP level (the Nagle stall).
    fn warnings(&self) -> Vec<crate::targets::latency::TargetWarning> {
        self.inner.warnings()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_json_body_goes_out_with_the_media_type_a_client_names() {
        let req = |body: &[u8], headers: Vec<(String, Vec<u8>)>| HttpRequest {
            method: "POST".into(),
            path: "/orders".into(),
            headers,
            body: Some(body.to_vec()),
            ..HttpRequest::default()
        };
        let ct = |r: &HttpRequest| -> Vec<Vec<u8>> {
            r.headers
                .iter()
                .filter(|(n, _)| n.eq_ignore_ascii_case("content-type"))
                .map(|(_, v)| v.clone())
                .collect()
        };
        let sent = as_a_client_sends(req(br#"["doomed"]"#, Vec::new()));
        assert_eq!(ct(&sent), vec![b"application/json".to_vec()]);
        // Its own media type is kept, alone.
        let own = vec![("content-type".to_owned(), b"text/plain".to_vec())];
        assert_eq!(
            ct(&as_a_client_sends(req(b"{}", own))),
            vec![b"text/plain".to_vec()]
        );
        // Not JSON, or no body: nothing added.
        assert!(ct(&as_a_client_sends(req(b"k=v", Vec::new()))).is_empty());
        assert!(ct(&as_a_client_sends(HttpRequest::default())).is_empty());
    }

    #[test]
    fn idem_forms_parse_and_print_back() {
        for form in [
            "idem+http://127.0.0.1:7080",
            "idem+https://localhost:7443",
            "reference-idem",
            "reference-idem:wait",
            "reference-idem:released@redis://127.0.0.1:6379",
            "broken-idem:check-then-set",
            "broken-idem:race-window-5us",
            "broken-idem:race-window-1000us:wait",
        ] {
            let spec = IdemSpec::parse(form).unwrap().unwrap();
            assert_eq!(spec.to_string(), form);
        }
        assert_eq!(IdemSpec::parse("memory").unwrap(), None);
        assert!(IdemSpec::parse("broken-idem:nope").is_err());
        // Only the calibrated windows.
        assert!(IdemSpec::parse("broken-idem:race-window-7us").is_err());
        assert!(IdemSpec::parse("broken-idem:race-window-us").is_err());
        assert!(IdemSpec::parse("reference-idem:queue").is_err());
        assert!(IdemSpec::parse("reference-idem@sqlite:x").is_err());
        assert!(IdemSpec::parse("idem+http://h:1/x").is_err());
        assert_eq!(IdemSpec::parse("postgres://u:p@h/db").unwrap(), None);
        let secret = IdemSpec::parse("reference-idem@redis://:hunter2@h:1/0")
            .unwrap()
            .unwrap();
        assert!(!format!("{secret:?} {secret}").contains("hunter2"));
        assert_eq!(builtin_variants().len(), IdemDefect::ALL.len());
    }
}
