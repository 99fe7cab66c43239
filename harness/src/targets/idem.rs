//! The idem level's targets (SPEC 10): `idem+http://HOST:PORT` (any app
//! speaking `reqkey-idem/1`, a wrapped library), `reference-idem[:VARIANT]
//! [@redis://...]` and `broken-idem:DEFECT[@redis://...]` (the reference
//! middleware, in process on an ephemeral port).
//!
//! The HTTP exchanges go through [`HttpAgentTarget`]'s client (bounded
//! reads, the `wire:` forms), so an app is judged the same way whatever
//! serves it; this type only changes the level, the health route
//! (`/.reqkey/health`) and the profile, which is read and typed here.

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

/// An idem `--target`. Its `Debug` is its redacted display name (a Redis
/// URL may carry a password).
#[derive(Clone, PartialEq, Eq)]
pub enum IdemSpec {
    /// `idem+http://HOST:PORT`.
    Http { base: HttpBase },
    /// The reference middleware in process.
    Reference {
        variant: IdemVariant,
        defect: Option<IdemDefect>,
        redis_url: Option<String>,
    },
}

impl IdemSpec {
    /// `Ok(None)` when `spec` is not an idem form; a malformed one is
    /// [`TargetError::BadSpec`].
    pub fn parse(spec: &str) -> Result<Option<Self>, TargetError> {
        let bad = |what: &str| TargetError::BadSpec(format!("`{}`: {what}", redact_url(spec)));
        if let Some(authority) = spec.strip_prefix("idem+http://") {
            if authority.is_empty() || authority.contains('/') {
                return Err(bad("expected idem+http://HOST:PORT"));
            }
            let base = HttpBase::parse(&format!("http://{authority}"))
                .map_err(|_| bad("expected idem+http://HOST:PORT"))?;
            return Ok(Some(IdemSpec::Http { base }));
        }
        if !(spec.starts_with("reference-idem") || spec.starts_with("broken-idem:")) {
            return Ok(None);
        }
        let (head, redis_url) = match spec.split_once('@') {
            Some((h, url)) if url.starts_with("redis://") || url.starts_with("rediss://") => {
                (h, Some(url.to_owned()))
            }
            Some(_) => return Err(bad("the storage after @ is redis://HOST:PORT")),
            None => (spec, None),
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
            redis_url,
        }))
    }

    /// Opens it (starting the reference app when it is one).
    pub async fn open(
        &self,
        name: String,
        opts: TargetOptions,
    ) -> Result<Arc<dyn Target>, TargetError> {
        match self {
            IdemSpec::Http { base } => {
                let inner = HttpAgentTarget::new(base, opts)?;
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
                redis_url,
            } => {
                let config = IdemConfig {
                    variant: *variant,
                    defect: *defect,
                    redis_url: redis_url.clone(),
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
                    inner: HttpAgentTarget::new(&base, opts)?,
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
                let shown = base.to_string();
                write!(
                    f,
                    "idem+http://{}",
                    shown.strip_prefix("http://").unwrap_or(&shown)
                )
            }
            IdemSpec::Reference {
                variant,
                defect,
                redis_url,
            } => {
                match defect {
                    Some(d) if d.declares() == *variant => write!(f, "broken-idem:{}", d.name())?,
                    Some(d) => write!(f, "broken-idem:{}:{}", d.name(), variant.name())?,
                    None if *variant == IdemVariant::Default => f.write_str("reference-idem")?,
                    None => write!(f, "reference-idem:{}", variant.name())?,
                }
                if let Some(url) = redis_url {
                    write!(f, "@{}", redact_url(url))?;
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
        self.inner.http(request).await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn idem_forms_parse_and_print_back() {
        for form in [
            "idem+http://127.0.0.1:7080",
            "reference-idem",
            "reference-idem:wait",
            "reference-idem:released@redis://127.0.0.1:6379",
            "broken-idem:check-then-set",
        ] {
            let spec = IdemSpec::parse(form).unwrap().unwrap();
            assert_eq!(spec.to_string(), form);
        }
        assert_eq!(IdemSpec::parse("memory").unwrap(), None);
        assert!(IdemSpec::parse("broken-idem:nope").is_err());
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
