//! A `--target` string, parsed once into a [`TargetSpec`] and opened.
//!
//! This is the only place that knows the forms a target can take; every
//! other file receives an opened [`Target`] or a typed spec. A store is a
//! [`StoreSpec`] of `reqkey-reference` (the one parser of store forms, for
//! `--target`, `@STORE` and `serve`); a variant is an [`AgentVariant`].
//! Reports name a target by [`TargetSpec::display_name`] only: secrets in
//! a URL (userinfo, query values) are redacted there, and the raw string is
//! not kept.

use reqkey_reference::scheme::{self, Scheme};
use std::sync::Arc;

use std::fmt;

use reqkey_reference::store::{redact_url, MemoryStore, StoreSpec};

use crate::targets::http_agent::HttpAgentTarget;
use crate::targets::http_store::HttpStore;
use crate::targets::reference_agent::{reference_agent, reference_agents, AgentVariant};
use crate::targets::replicas::{ReplicaTarget, MAX_REPLICAS};
use crate::targets::store::InProcessStore;
use crate::targets::transport::{self, check_protocol, HttpBase};
use crate::targets::{open_error, Level, Target, TargetError, TargetOptions};

/// The target specifications `--target` accepts, for help texts.
pub const TARGET_HELP: &str = "\
memory                    the in-process reference memory store (the embedded default)
broken-memory:DEFECT      a deliberately broken memory store, to see the suite fail
                          (no-key-rule, key-rule-after-cas, no-replay-first, no-cas,
                          delete-keeps-keys, holder-read-outside-commit, ...:
                          `reqkey targets` lists every one with what it fails)
sqlite:PATH               the reference store on a SQLite file, in process
                          (created and migrated on open)
postgres://USER@HOST/DB   the reference store on PostgreSQL, in process
                          (tables reqkey_*, migrated on open)
redis://HOST:PORT         the reference store on Redis, in process (rediss:// for TLS)
redis+cluster://HOST:PORT[,HOST:PORT...]
                          the reference store on a Redis Cluster, in process
postgres+standby-reads://USER@PRIMARY:PORT/DB?standby=HOST:PORT
                          a deliberately broken PostgreSQL store: writes to the
                          primary, reads key holders and current runs from its
                          hot standby (docs/pg-replication.md)
store+http://HOST:PORT    any store behind a reqkey-store/1 adapter, any language
                          (`reqkey serve store` serves a reference one);
                          store+https:// over TLS (--cacert PEM for a private CA)
http://HOST:PORT          any agent server speaking reqkey-agent/1 (https:// over TLS)
http://A,http://B[,...]   replicas of one agent deployment over one store: requests
                          go round-robin (a race's items to different replicas);
                          every /health must declare one profile
reference-agent           the reference agent server, in process, over a memory store
reference-agent:VARIANT   a variant of it: no-request-keys, interrupt-previous,
                          entry-wait (the other profiles), or a deliberately broken executor or
                          server (policy-before-key, no-replan-after-key-taken,
                          ignore-digest, ...: `reqkey targets` lists every one with
                          what it fails)
reference-agent[:VARIANT]@STORE
                          the same over another reference store (sqlite:PATH,
                          postgres://..., redis://..., redis+cluster://...)
idem+http://HOST:PORT     any app speaking reqkey-idem/1: an Idempotency-Key library
                          wrapped per docs/idempotency-key.md (idem+https:// over TLS);
                          with --api MAP, any app at its own routes and auth
reference-idem[:VARIANT][@redis://HOST:PORT]
                          the reference Idempotency-Key middleware, in process
                          (default, wait, released, optional, wait-released,
                          long-lock, short-lock, no-expiry, loose, bytes, token,
                          any, lenient), over memory or Redis
broken-idem:DEFECT[:VARIANT][@redis://HOST:PORT]
                          a deliberately broken middleware (check-then-set,
                          unscoped-caller, ...: `reqkey targets` lists them), under
                          the profile it declares or under VARIANT's
reference-agents:N[:VARIANT][@STORE]
                          N (2..16) reference servers in process, round-robin, each
                          with its own connection to STORE (replicas over one store);
                          without @STORE each over its own memory store (a broken
                          deployment: the cross-replica races must fail it)";

/// What a `--target` string names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetSpec {
    /// A reference store in process: `memory`, `broken-memory:DEFECT`,
    /// `sqlite:PATH`, `postgres://...`, `redis://...`, `rediss://...`,
    /// `redis+cluster://...`.
    Store(StoreSpec),
    /// `store+http://HOST:PORT`: a `reqkey-store/1` adapter (reached at
    /// `http://HOST:PORT`).
    StoreHttp { base: HttpBase },
    /// `http://HOST:PORT`: a `reqkey-agent/1` server.
    AgentHttp { base: HttpBase },
    /// `reference-agent[:VARIANT][@STORE]`: the reference agent in process.
    ReferenceAgent {
        variant: Option<AgentVariant>,
        store: Option<StoreSpec>,
    },
    /// `http://A,http://B[,...]`: replicas of one `reqkey-agent/1` deployment.
    AgentReplicas { bases: Vec<HttpBase> },
    /// `reference-agents:N[:VARIANT][@STORE]`: N reference servers in
    /// process, each with its own store connection (or its own memory store).
    ReferenceAgents {
        count: usize,
        variant: Option<AgentVariant>,
        store: Option<StoreSpec>,
    },
    /// An `Idempotency-Key` app (SPEC 10): `idem+http://`, `reference-idem`,
    /// `broken-idem:DEFECT` (`targets/idem.rs`).
    Idem(crate::targets::idem::IdemSpec),
}

/// Splits `[:VARIANT][@STORE]` (the variant never holds an `@`; a store URL
/// may: `postgres://u@h/db`) and parses both.
fn variant_and_store(
    spec: &str,
    rest: &str,
) -> Result<(Option<AgentVariant>, Option<StoreSpec>), TargetError> {
    let (variant, store) = match rest.split_once('@') {
        Some((v, store)) => (
            v,
            Some(StoreSpec::parse(store).map_err(|e| TargetError::BadSpec(e.to_string()))?),
        ),
        None => (rest, None),
    };
    let variant = match variant {
        "" => None,
        v => {
            let name = v.strip_prefix(':').ok_or_else(|| {
                TargetError::BadSpec(format!(
                    "`{}` is not reference-agent[:VARIANT][@STORE]",
                    redact_url(spec)
                ))
            })?;
            Some(AgentVariant::parse(name).ok_or_else(|| {
                TargetError::BadSpec(format!(
                    "unknown reference-agent variant `{name}`; `reqkey targets` lists them"
                ))
            })?)
        }
    };
    Ok((variant, store))
}

impl TargetSpec {
    /// Parses a `--target` string; an unknown form or defect is
    /// [`TargetError::BadSpec`] (exit 2), naming the string redacted.
    pub fn parse(spec: &str) -> Result<Self, TargetError> {
        crate::secrets::register_target(spec);
        let bad = |what: &str| TargetError::BadSpec(format!("`{}`: {what}", redact_url(spec)));
        if let Some(idem) = crate::targets::idem::IdemSpec::parse(spec)? {
            return Ok(TargetSpec::Idem(idem));
        }
        let store = scheme::of_scheme(spec, Scheme::StoreHttp).map(|(tls, a)| (a, tls));
        if let Some((authority, tls)) = store {
            if authority.is_empty() || authority.contains('/') {
                return Err(bad("expected store+http[s]://HOST:PORT"));
            }
            let base = HttpBase::of_authority(authority, tls)
                .map_err(|_| bad("expected store+http[s]://HOST:PORT"))?;
            return Ok(TargetSpec::StoreHttp { base });
        }
        let agent_http = scheme::of_scheme(spec, Scheme::Http).is_some();
        if agent_http && spec.contains(',') {
            let bases: Vec<&str> = spec.split(',').collect();
            if bases.len() > MAX_REPLICAS {
                return Err(bad(&format!(
                    "expected 2 to {MAX_REPLICAS} endpoints http[s]://HOST:PORT,http[s]://HOST:PORT,..."
                )));
            }
            let bases = bases
                .into_iter()
                .map(|b| HttpBase::parse(b).map_err(|what| bad(&what)))
                .collect::<Result<Vec<_>, _>>()?;
            return Ok(TargetSpec::AgentReplicas { bases });
        }
        if agent_http {
            return Ok(TargetSpec::AgentHttp {
                base: HttpBase::parse(spec).map_err(|what| bad(&what))?,
            });
        }
        if let Some(rest) = spec.strip_prefix("reference-agents:") {
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            let count: usize = rest[..digits]
                .parse()
                .map_err(|_| bad("is not reference-agents:N[:VARIANT][@STORE]"))?;
            if !(2..=MAX_REPLICAS).contains(&count) {
                return Err(bad(&format!("N must be 2 to {MAX_REPLICAS}")));
            }
            let (variant, store) = variant_and_store(spec, &rest[digits..])?;
            return Ok(TargetSpec::ReferenceAgents {
                count,
                variant,
                store,
            });
        }
        if let Some(rest) = spec.strip_prefix("reference-agent") {
            let (variant, store) = variant_and_store(spec, rest)?;
            return Ok(TargetSpec::ReferenceAgent { variant, store });
        }
        match StoreSpec::parse(spec) {
            Ok(store) => Ok(TargetSpec::Store(store)),
            Err(_) => Err(TargetError::BadSpec(format!(
                "unknown target `{}`{}; `reqkey targets` lists the forms",
                super::suggest::shown(spec),
                super::suggest::hint(spec)
                    .map(|h| format!(": {h}"))
                    .unwrap_or_default()
            ))),
        }
    }

    /// `parse` for clap's `value_parser`: a bad `--target` is a usage
    /// error (exit 2) before anything runs.
    pub fn parse_arg(spec: &str) -> Result<Self, String> {
        Self::parse(spec).map_err(|e| e.to_string())
    }

    /// How every output names the target: its specification with secrets
    /// redacted. The only name a report, a log line or an error receives.
    pub fn display_name(&self) -> String {
        self.to_string()
    }

    /// The contract the target speaks.
    pub fn level(&self) -> Level {
        match self {
            TargetSpec::Store(_) | TargetSpec::StoreHttp { .. } => Level::Store,
            TargetSpec::AgentHttp { .. }
            | TargetSpec::ReferenceAgent { .. }
            | TargetSpec::AgentReplicas { .. }
            | TargetSpec::ReferenceAgents { .. } => Level::Agent,
            TargetSpec::Idem(_) => Level::Idem,
        }
    }

    /// Opens the target.
    ///
    /// An HTTP target whose `/health` does not answer over HTTP, or names
    /// the other protocol, fails here (see [`reachable`]).
    pub async fn open(&self, opts: TargetOptions) -> Result<Arc<dyn Target>, TargetError> {
        let timeout_ms = opts.call_timeout_ms;
        match self.open_unnamed(opts).await {
            Err(e @ TargetError::Certificate(_)) => {
                // Name the certificate of the endpoint the refusal names.
                let message = e.to_string();
                let bases = self.http_bases();
                let base = bases
                    .iter()
                    .find(|b| message.contains(&b.to_string()))
                    .or(bases.first());
                match base {
                    Some(base) => {
                        Err(transport::name_refused_certificate(e, base, timeout_ms).await)
                    }
                    None => Err(e),
                }
            }
            other => other,
        }
    }

    /// The HTTP endpoints the target names (none for a target in process).
    pub fn http_bases(&self) -> Vec<HttpBase> {
        match self {
            TargetSpec::StoreHttp { base } | TargetSpec::AgentHttp { base } => vec![base.clone()],
            TargetSpec::AgentReplicas { bases } => bases.clone(),
            TargetSpec::Idem(idem) => idem.http_base().into_iter().collect(),
            _ => Vec::new(),
        }
    }

    async fn open_unnamed(&self, opts: TargetOptions) -> Result<Arc<dyn Target>, TargetError> {
        let name = self.display_name();
        match self {
            TargetSpec::Store(StoreSpec::Memory) => Ok(Arc::new(InProcessStore::new(
                name,
                Arc::new(MemoryStore::new()),
            ))),
            TargetSpec::Store(StoreSpec::BrokenMemory(defect)) => {
                let store = InProcessStore::new(name, Arc::new(MemoryStore::with_defect(*defect)));
                Ok(Arc::new(if defect.breaks_the_wire() {
                    store.with_keyless_fields_null()
                } else {
                    store
                }))
            }
            TargetSpec::Store(spec) => {
                let opened = tokio::time::timeout(opts.call_timeout(), spec.open())
                    .await
                    .map_err(|_| TargetError::Timeout {
                        timeout_ms: opts.call_timeout_ms,
                    })?
                    .map_err(open_error)?;
                Ok(Arc::new(InProcessStore::new(name, opened)))
            }
            TargetSpec::StoreHttp { base } => {
                let target = HttpStore::new(&name, base, &opts)?;
                reachable(target).await
            }
            TargetSpec::AgentHttp { base } => {
                let target = HttpAgentTarget::new(base, &opts)?;
                reachable(target).await
            }
            TargetSpec::ReferenceAgent { variant, store } => Ok(Arc::new(
                reference_agent(*variant, store.as_ref(), name, opts).await?,
            )),
            TargetSpec::AgentReplicas { bases } => {
                let replicas = bases
                    .iter()
                    .map(|b| HttpAgentTarget::new(b, &opts))
                    .collect::<Result<Vec<_>, _>>()?;
                replicated(ReplicaTarget::new(name, replicas)?).await
            }
            TargetSpec::ReferenceAgents {
                count,
                variant,
                store,
            } => {
                let one = TargetSpec::ReferenceAgent {
                    variant: *variant,
                    store: store.clone(),
                }
                .display_name();
                let replicas =
                    reference_agents(*count, *variant, store.as_ref(), &one, opts).await?;
                replicated(ReplicaTarget::new(name, replicas)?).await
            }
            TargetSpec::Idem(spec) => spec.open(name, opts).await,
        }
    }
}

impl fmt::Display for TargetSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let agent = |f: &mut fmt::Formatter<'_>,
                     head: String,
                     variant: &Option<AgentVariant>,
                     store: &Option<StoreSpec>| {
            f.write_str(&head)?;
            if let Some(v) = variant {
                write!(f, ":{}", v.name())?;
            }
            if let Some(s) = store {
                write!(f, "@{s}")?;
            }
            Ok(())
        };
        match self {
            TargetSpec::Store(store) => write!(f, "{store}"),
            TargetSpec::StoreHttp { base } => {
                write!(f, "store+{}://{}", base.scheme(), base.shown_authority())
            }
            TargetSpec::AgentHttp { base } => write!(f, "{base}"),
            TargetSpec::AgentReplicas { bases } => {
                let shown: Vec<String> = bases.iter().map(ToString::to_string).collect();
                f.write_str(&shown.join(","))
            }
            TargetSpec::ReferenceAgent { variant, store } => {
                agent(f, "reference-agent".into(), variant, store)
            }
            TargetSpec::ReferenceAgents {
                count,
                variant,
                store,
            } => agent(f, format!("reference-agents:{count}"), variant, store),
            TargetSpec::Idem(spec) => write!(f, "{spec}"),
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

/// Every built-in broken variant's `--target`, by level: the broken
/// stores and the broken reference executors.
pub fn builtin_variants(level: Level) -> Vec<String> {
    match level {
        Level::Store => reqkey_reference::store::MemoryDefect::ALL
            .iter()
            .map(|d| format!("broken-memory:{}", d.name()))
            // Judged through a database link the harness owns: `--start
            // 'reqkey serve store --store {db} ...' --db postgres+DEFECT://...`.
            .chain(
                reqkey_reference::store::PgLinkDefect::ALL
                    .iter()
                    .map(|d| d.scheme()),
            )
            .collect(),
        Level::Agent => reqkey_reference::agent::ExecutorDefect::ALL
            .iter()
            .map(|d| format!("reference-agent:{}", d.name()))
            .collect(),
        Level::Idem => crate::targets::idem::builtin_variants(),
    }
}

/// Is `name` a built-in variant of `level` that the falsification record
/// may name: a `broken-memory:DEFECT` store, a `postgres+DEFECT` store (the
/// broken PostgreSQL stores only a fault on the database link shows, named
/// by their scheme), or a `reference-agent[:VARIANT]` server (in process,
/// over its own memory store), optionally stated to be of a profile
/// (`reference-agent --profile interrupt-previous`).
pub fn is_builtin_variant(level: Level, name: &str) -> bool {
    let target = name.split(" --profile ").next().unwrap_or(name);
    if level == Level::Store && reqkey_reference::store::PgLinkDefect::from_scheme(name).is_some() {
        return true;
    }
    matches!(
        (level, TargetSpec::parse(target)),
        (
            Level::Store,
            Ok(TargetSpec::Store(StoreSpec::BrokenMemory(_)))
        ) | (
            Level::Agent,
            Ok(TargetSpec::ReferenceAgent { store: None, .. })
        ) | (
            Level::Idem,
            Ok(TargetSpec::Idem(
                crate::targets::idem::IdemSpec::Reference {
                    storage: crate::targets::idem::IdemStorageSpec::Memory,
                    ..
                }
            ))
        )
    )
}

/// Opens a target from its `--target` specification (parsed once, by
/// [`TargetSpec::parse`]).
pub async fn open_target(spec: &str, opts: TargetOptions) -> Result<Arc<dyn Target>, TargetError> {
    TargetSpec::parse(spec)?.open(opts).await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn builtin_variants_are_the_broken_stores_and_the_reference_servers() {
        assert!(is_builtin_variant(Level::Store, "broken-memory:no-cas"));
        assert!(is_builtin_variant(Level::Store, "postgres+blind-retry"));
        assert!(!is_builtin_variant(Level::Store, "postgres+nope"));
        assert!(!is_builtin_variant(Level::Agent, "postgres+blind-retry"));
        assert!(!is_builtin_variant(Level::Store, "memory"));
        assert!(!is_builtin_variant(Level::Store, "broken-memory:nope"));
        assert!(!is_builtin_variant(Level::Agent, "broken-memory:no-cas"));
        assert!(is_builtin_variant(
            Level::Agent,
            "reference-agent:ignore-digest"
        ));
        assert!(is_builtin_variant(
            Level::Agent,
            "reference-agent --profile interrupt-previous"
        ));
        assert!(!is_builtin_variant(Level::Agent, "reference-agent@memory"));
        assert!(!is_builtin_variant(Level::Agent, "http://127.0.0.1:1"));
    }

    #[test]
    fn the_display_name_is_the_only_name_and_it_carries_no_secret() {
        for (text, shown) in [
            ("memory", "memory"),
            ("postgres://u:hunter2@h/db", "postgres://u:***@h/db"),
            (
                "reference-agent:ignore-digest@redis://:hunter2@h:1/0",
                "reference-agent:ignore-digest@redis://***@h:1/0",
            ),
            (
                "reference-agents:3@postgres://u:hunter2@h/db?password=hunter2",
                "reference-agents:3@postgres://u:***@h/db?password=***",
            ),
            (
                "http://tok:hunter2@a:1,http://b:2/",
                "http://***@a:1,http://b:2",
            ),
            (
                "store+http://u:hunter2@127.0.0.1:9",
                "store+http://***@127.0.0.1:9",
            ),
        ] {
            let spec = TargetSpec::parse(text).unwrap();
            assert_eq!(spec.display_name(), shown);
            assert!(!format!("{spec:?}").contains("hunter2"), "{spec:?}");
        }
        let e = TargetSpec::parse("mongodb://u:hunter2@h/db").unwrap_err();
        assert!(!e.to_string().contains("hunter2"), "{e}");
    }
}
