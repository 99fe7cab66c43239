//! A `--target` string, parsed once into a [`TargetSpec`] and opened.
//!
//! This is the only place that knows the forms a target can take; every
//! other file receives an opened [`Target`] or a typed spec.

use std::sync::Arc;

use reqkey_reference::store::{self, redact_url, MemoryDefect, MemoryStore};

use crate::target::http_agent::HttpAgentTarget;
use crate::target::http_store::HttpStore;
use crate::target::reference_agent::reference_agent;
use crate::target::store::InProcessStore;
use crate::target::transport::check_protocol;
use crate::target::{open_error, Level, Target, TargetError, TargetOptions};

/// The target specifications `--target` accepts, for help texts.
pub const TARGET_HELP: &str = "\
memory                    the in-process reference memory store (the embedded default)
broken-memory:DEFECT      a deliberately broken memory store, to see the suite fail
                          (no-key-rule, key-rule-after-cas, no-replay-first, no-cas,
                          delete-keeps-keys, holder-read-outside-commit, ...: every
                          one is in scenarios/falsification.json with what it fails)
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
reference-agent:VARIANT   a variant of it: no-request-keys, interrupt-previous (the
                          other two profiles), or a deliberately broken executor or
                          server (policy-before-key, no-replan-after-key-taken,
                          ignore-digest, ...: every one is in scenarios/falsification.json
                          with what it fails)
reference-agent[:VARIANT]@STORE
                          the same over another reference store (sqlite:PATH,
                          postgres://..., redis://..., redis+cluster://...)";

/// What a `--target` string names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetSpec {
    /// `memory`: the embedded reference memory store.
    Memory,
    /// `broken-memory:DEFECT`: a deliberately broken memory store.
    BrokenMemory(MemoryDefect),
    /// `sqlite:PATH`, `postgres://...`, `postgresql://...`, `redis://...`,
    /// `redis+cluster://...`:
    /// a reference store on a real engine, in process.
    ReferenceStore(String),
    /// `store+http://HOST:PORT`: a `reqkey-store/1` adapter.
    StoreHttp { authority: String },
    /// `http://HOST:PORT`: a `reqkey-agent/1` server.
    AgentHttp { base: String },
    /// `reference-agent[:VARIANT][@STORE]`: the reference agent in process.
    ReferenceAgent {
        variant: Option<String>,
        store: Option<String>,
    },
}

impl TargetSpec {
    /// Parses a `--target` string; an unknown form or defect is
    /// [`TargetError::BadSpec`] (exit 2).
    pub fn parse(spec: &str) -> Result<Self, TargetError> {
        if let Some(authority) = spec.strip_prefix("store+http://") {
            if authority.is_empty() || authority.contains('/') {
                return Err(TargetError::BadSpec(format!(
                    "`{spec}`: expected store+http://HOST:PORT"
                )));
            }
            return Ok(TargetSpec::StoreHttp {
                authority: authority.to_owned(),
            });
        }
        if spec.starts_with("sqlite:")
            || spec.starts_with("postgres://")
            || spec.starts_with("postgresql://")
            || spec.starts_with("redis://")
            || spec.starts_with("redis+cluster://")
        {
            return Ok(TargetSpec::ReferenceStore(spec.to_owned()));
        }
        if spec.starts_with("http://") {
            return Ok(TargetSpec::AgentHttp {
                base: spec.to_owned(),
            });
        }
        if let Some(rest) = spec.strip_prefix("reference-agent") {
            // The variant never holds an `@`; a store URL may (`postgres://u@h/db`).
            let (variant, store) = match rest.split_once('@') {
                Some((v, store)) => (v, Some(store.to_owned())),
                None => (rest, None),
            };
            let variant = match variant {
                "" => None,
                v => Some(
                    v.strip_prefix(':')
                        .ok_or_else(|| {
                            TargetError::BadSpec(format!(
                                "`{spec}` is not reference-agent[:VARIANT][@STORE]"
                            ))
                        })?
                        .to_owned(),
                ),
            };
            return Ok(TargetSpec::ReferenceAgent { variant, store });
        }
        if spec == "memory" {
            return Ok(TargetSpec::Memory);
        }
        if let Some(name) = spec.strip_prefix("broken-memory:") {
            let defect = MemoryDefect::parse(name).ok_or_else(|| {
                TargetError::BadSpec(format!("unknown defect `{name}`; see `reqkey run --help`"))
            })?;
            return Ok(TargetSpec::BrokenMemory(defect));
        }
        Err(TargetError::BadSpec(format!(
            "unknown target `{spec}`; see `reqkey run --help` for the forms"
        )))
    }

    /// The contract the target speaks.
    pub fn level(&self) -> Level {
        match self {
            TargetSpec::Memory
            | TargetSpec::BrokenMemory(_)
            | TargetSpec::ReferenceStore(_)
            | TargetSpec::StoreHttp { .. } => Level::Store,
            TargetSpec::AgentHttp { .. } | TargetSpec::ReferenceAgent { .. } => Level::Agent,
        }
    }

    /// Opens the target. `raw` is the string it was parsed from (reports
    /// name a target by it, credentials redacted).
    ///
    /// An HTTP target whose `/health` does not answer over HTTP, or names
    /// the other protocol, fails here (see [`reachable`]).
    pub async fn open(
        &self,
        raw: &str,
        opts: TargetOptions,
    ) -> Result<Arc<dyn Target>, TargetError> {
        match self {
            TargetSpec::Memory => Ok(Arc::new(InProcessStore::new(
                "memory",
                Arc::new(MemoryStore::new()),
            ))),
            TargetSpec::BrokenMemory(defect) => {
                let store = InProcessStore::new(raw, Arc::new(MemoryStore::with_defect(*defect)));
                Ok(Arc::new(if defect.breaks_the_wire() {
                    store.with_keyless_fields_null()
                } else {
                    store
                }))
            }
            TargetSpec::ReferenceStore(spec) => {
                let opened = tokio::time::timeout(opts.call_timeout(), store::open(spec))
                    .await
                    .map_err(|_| TargetError::Timeout {
                        timeout_ms: opts.call_timeout_ms,
                    })?
                    .map_err(open_error)?;
                Ok(Arc::new(InProcessStore::new(redact_url(spec), opened)))
            }
            TargetSpec::StoreHttp { authority } => {
                let target = HttpStore::new(raw, authority, opts)?;
                reachable(target).await
            }
            TargetSpec::AgentHttp { base } => {
                let target = HttpAgentTarget::new(base, opts)?;
                reachable(target).await
            }
            TargetSpec::ReferenceAgent { variant, store } => Ok(Arc::new(
                reference_agent(variant.as_deref(), store.as_deref(), opts).await?,
            )),
        }
    }
}

/// The target, once its `/health` has answered over HTTP and does not
/// name the other protocol. A target that is down, hangs, closes the
/// connection, answers over the cap, is not an HTTP server, or speaks the
/// protocol of the other scheme fails here with one typed message (exit 2)
/// instead of once per scenario; a `/health` that answers but does not
/// conform otherwise is left for the scenarios to judge.
async fn reachable<T: Target + 'static>(target: T) -> Result<Arc<dyn Target>, TargetError> {
    match target.health().await {
        Ok(health) => check_protocol(target.level(), &health)?,
        Err(e) if e.is_harness_error() => return Err(e),
        Err(_) => {}
    }
    Ok(Arc::new(target))
}

/// Opens a target from its `--target` specification.
pub async fn open_target(spec: &str, opts: TargetOptions) -> Result<Arc<dyn Target>, TargetError> {
    TargetSpec::parse(spec)?.open(spec, opts).await
}
