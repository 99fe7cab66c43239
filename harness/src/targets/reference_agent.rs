//! `reference-agent[:VARIANT][@STORE]`: the reference server of
//! `reqkey-reference` started in process on an ephemeral port, over a fresh
//! memory store or another reference store, and reached over real HTTP.
//! Variants (`no-request-keys`, `interrupt-previous`, `entry-wait`, and deliberately
//! broken executors) prove that the agent corpus fails servers that get
//! keys wrong.

use std::sync::Arc;

use reqkey_reference::agent::executor::ENTRY_WAIT_MS;
use reqkey_reference::agent::{
    spawn, ConcurrentEntry, Executor, ExecutorConfig, ExecutorDefect, ServerHandle,
};
use reqkey_reference::store::{self, MemoryStore, SessionStateStore};

use crate::targets::http_agent::HttpAgentTarget;
use crate::targets::{open_error, TargetError, TargetOptions};

/// The executor configuration a `reference-agent[:VARIANT]` spec names.
/// `no-request-keys`, `interrupt-previous` and `entry-wait` (entries
/// admitted one at a time, `entryWaitMs` declared) are correct servers of
/// the other profiles (SPEC 7); every other variant is a deliberately
/// broken executor (of the profile its defect belongs to).
pub fn reference_config(variant: Option<&str>) -> Result<ExecutorConfig, TargetError> {
    let mut config = ExecutorConfig::default();
    match variant {
        None => {}
        Some("no-request-keys") => config.supports_request_key = false,
        Some("interrupt-previous") => config.policy = ConcurrentEntry::InterruptPrevious,
        Some("entry-wait") => config.entry_wait_ms = Some(ENTRY_WAIT_MS),
        Some(name) => {
            let defect = ExecutorDefect::parse(name).ok_or_else(|| {
                TargetError::BadSpec(format!(
                    "unknown reference-agent variant `{name}`; see `reqkey run --help`"
                ))
            })?;
            config = defect.config();
        }
    }
    Ok(config)
}

/// Starts the reference server in process on an ephemeral port, over a
/// fresh memory store or the reference store `store` names, and returns
/// its handle (`reqkey proxy` puts itself in front of it).
pub async fn spawn_reference_agent(
    variant: Option<&str>,
    store: Option<&str>,
    opts: &TargetOptions,
) -> Result<ServerHandle, TargetError> {
    let config = reference_config(variant)?;
    let sessions: Arc<dyn SessionStateStore> = match store {
        None => Arc::new(MemoryStore::new()),
        Some(spec) => tokio::time::timeout(opts.call_timeout(), store::open(spec))
            .await
            .map_err(|_| TargetError::Timeout {
                timeout_ms: opts.call_timeout_ms,
            })?
            .map_err(open_error)?,
    };
    let executor = Executor::new(sessions, config);
    spawn(executor, ([127, 0, 0, 1], 0).into())
        .await
        .map_err(|e| TargetError::Unreachable(format!("cannot start the reference agent: {e}")))
}

/// Starts the reference server in process on an ephemeral port, over a
/// fresh memory store or the reference store `store` names.
pub async fn reference_agent(
    variant: Option<&str>,
    store: Option<&str>,
    opts: TargetOptions,
) -> Result<HttpAgentTarget, TargetError> {
    let server = spawn_reference_agent(variant, store, &opts).await?;
    let mut name = String::from("reference-agent");
    if let Some(v) = variant {
        name = format!("{name}:{v}");
    }
    if let Some(s) = store {
        name = format!("{name}@{}", store::redact_url(s));
    }
    HttpAgentTarget::serving(server, name, opts)
}

/// Starts `count` reference servers in process, all of one variant: over
/// the store `store` names (each server opens its own connection, as
/// separate processes would), or each over its own fresh memory store.
/// Answers the name reports give them and the servers.
pub async fn reference_agents(
    count: usize,
    variant: Option<&str>,
    store: Option<&str>,
    opts: TargetOptions,
) -> Result<(String, Vec<HttpAgentTarget>), TargetError> {
    let mut replicas = Vec::with_capacity(count);
    for _ in 0..count {
        replicas.push(reference_agent(variant, store, opts).await?);
    }
    let mut name = format!("reference-agents:{count}");
    if let Some(v) = variant {
        name = format!("{name}:{v}");
    }
    if let Some(s) = store {
        name = format!("{name}@{}", store::redact_url(s));
    }
    Ok((name, replicas))
}
