//! A `--target` string, parsed once into a [`TargetSpec`] and opened.
//!
//! This is the only place that knows the forms a target can take; every
//! other file receives an opened [`Target`] or a typed spec.

use std::sync::Arc;

use reqkey_reference::store::{self, redact_url, MemoryDefect, MemoryStore};

use crate::targets::http_agent::HttpAgentTarget;
use crate::targets::http_store::HttpStore;
use crate::targets::reference_agent::{reference_agent, reference_agents};
use crate::targets::replicas::{ReplicaTarget, MAX_REPLICAS};
use crate::targets::store::InProcessStore;
use crate::targets::transport::check_protocol;
use crate::targets::{open_error, Level, Target, TargetError, TargetOptions};

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
http://A,http://B[,...]   replicas of one agent deployment over one store: requests
                          go round-robin (a race's items to different replicas);
                          every /health must declare one profile
reference-agent           the reference agent server, in process, over a memory store
reference-agent:VARIANT   a variant of it: no-request-keys, interrupt-previous,
                          entry-wait (the other profiles), or a deliberately broken executor or
                          server (policy-before-key, no-replan-after-key-taken,
                          ignore-digest, ...: every one is in scenarios/falsification.json
                          with what it fails)
reference-agent[:VARIANT]@STORE
                          the same over another reference store (sqlite:PATH,
                          postgres://..., redis://..., redis+cluster://...)
reference-agents:N[:VARIANT][@STORE]
                          N (2..16) reference servers in process, round-robin, each
                          with its own connection to STORE (replicas over one store);
                          without @STORE each over its own memory store (a broken
                          deployment: the cross-replica races must fail it)";

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
    /// `http://A,http://B[,...]`: replicas of one `reqkey-agent/1` deployment.
    AgentReplicas { bases: Vec<String> },
    /// `reference-agents:N[:VARIANT][@STORE]`: N reference servers in
    /// process, each with its own store connection (or its own memory store).
    ReferenceAgents {
        count: usize,
        variant: Option<String>,
        store: Option<String>,
    },
}

/// Splits `[:VARIANT][@STORE]` (the variant never holds an `@`; a store URL
/// may: `postgres://u@h/db`).
fn variant_and_store(
    spec: &str,
    rest: &str,
) -> Result<(Option<String>, Option<String>), TargetError> {
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
    Ok((variant, store))
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
        if spec.starts_with("http://") && spec.contains(',') {
            let bases: Vec<String> = spec.split(',').map(|b| b.trim().to_owned()).collect();
            if bases.len() > MAX_REPLICAS || bases.iter().any(|b| !b.starts_with("http://")) {
                return Err(TargetError::BadSpec(format!(
                    "`{spec}`: expected 2 to {MAX_REPLICAS} endpoints http://HOST:PORT,http://HOST:PORT,..."
                )));
            }
            return Ok(TargetSpec::AgentReplicas { bases });
        }
        if let Some(rest) = spec.strip_prefix("reference-agents:") {
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            let count: usize = rest[..digits].parse().map_err(|_| {
                TargetError::BadSpec(format!(
                    "`{spec}` is not reference-agents:N[:VARIANT][@STORE]"
                ))
            })?;
            if !(2..=MAX_REPLICAS).contains(&count) {
                return Err(TargetError::BadSpec(format!(
                    "`{spec}`: N must be 2 to {MAX_REPLICAS}"
                )));
            }
            let (variant, store) = variant_and_store(spec, &rest[digits..])?;
            return Ok(TargetSpec::ReferenceAgents {
                count,
                variant,
                store,
            });
        }
        if spec.starts_with("http://") {
            return Ok(TargetSpec::AgentHttp {
                base: spec.to_owned(),
            });
        }
        if let Some(rest) = spec.strip_prefix("reference-agent") {
            let (variant, store) = variant_and_store(spec, rest)?;
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
            TargetSpec::AgentHttp { .. }
            | TargetSpec::ReferenceAgent { .. }
            | TargetSpec::AgentReplicas { .. }
            | TargetSpec::ReferenceAgents { .. } => Level::Agent,
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
            TargetSpec::AgentReplicas { bases } => {
                let replicas = bases
                    .iter()
                    .map(|b| HttpAgentTarget::new(b, opts))
                    .collect::<Result<Vec<_>, _>>()?;
                replicated(ReplicaTarget::new(bases.join(","), replicas)?).await
            }
            TargetSpec::ReferenceAgents {
                count,
                variant,
                store,
            } => {
                let (name, replicas) =
                    reference_agents(*count, variant.as_deref(), store.as_deref(), opts).await?;
                replicated(ReplicaTarget::new(name, replicas)?).await
            }
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

/// A replicated target, once every replica's `/health` answered over HTTP,
/// names `reqkey-agent/1` (not the store protocol) and all declare one
/// profile. Unlike one endpoint, a replica whose `/health` does not conform
/// fails here: replicas that cannot be compared cannot be certified as one.
async fn replicated(target: ReplicaTarget) -> Result<Arc<dyn Target>, TargetError> {
    let health = target.check_replicas().await?;
    check_protocol(Level::Agent, &health)?;
    Ok(Arc::new(target))
}

/// Opens a target from its `--target` specification.
pub async fn open_target(spec: &str, opts: TargetOptions) -> Result<Arc<dyn Target>, TargetError> {
    TargetSpec::parse(spec)?.open(spec, opts).await
}
