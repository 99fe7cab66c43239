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
use reqkey_reference::store::{MemoryStore, SessionStateStore, StoreSpec};

use crate::targets::http_agent::HttpAgentTarget;
use crate::targets::{open_error, TargetError, TargetOptions};

/// A variant of the reference agent server: a correct server of another
/// profile, or a deliberately broken executor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentVariant {
    /// `no-request-keys`: a correct server that declares
    /// `supportsRequestKey: false`.
    NoRequestKeys,
    /// `interrupt-previous`: a correct server of that concurrency profile.
    InterruptPrevious,
    /// `entry-wait`: a correct server that admits a session's entries one
    /// at a time and declares `entryWaitMs`.
    EntryWait,
    /// A deliberately broken executor (tests of tests).
    Broken(ExecutorDefect),
}

impl AgentVariant {
    pub fn parse(name: &str) -> Option<AgentVariant> {
        match name {
            "no-request-keys" => Some(AgentVariant::NoRequestKeys),
            "interrupt-previous" => Some(AgentVariant::InterruptPrevious),
            "entry-wait" => Some(AgentVariant::EntryWait),
            other => ExecutorDefect::parse(other).map(AgentVariant::Broken),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            AgentVariant::NoRequestKeys => "no-request-keys",
            AgentVariant::InterruptPrevious => "interrupt-previous",
            AgentVariant::EntryWait => "entry-wait",
            AgentVariant::Broken(defect) => defect.name(),
        }
    }
}

/// The executor configuration a `reference-agent[:VARIANT]` spec names.
/// `no-request-keys`, `interrupt-previous` and `entry-wait` (entries
/// admitted one at a time, `entryWaitMs` declared) are correct servers of
/// the other profiles (SPEC 7); every other variant is a deliberately
/// broken executor (of the profile its defect belongs to).
pub fn reference_config(variant: Option<AgentVariant>) -> ExecutorConfig {
    let mut config = ExecutorConfig::default();
    match variant {
        None => {}
        Some(AgentVariant::NoRequestKeys) => config.supports_request_key = false,
        Some(AgentVariant::InterruptPrevious) => config.policy = ConcurrentEntry::InterruptPrevious,
        Some(AgentVariant::EntryWait) => config.entry_wait_ms = Some(ENTRY_WAIT_MS),
        Some(AgentVariant::Broken(defect)) => config = defect.config(),
    }
    config
}

/// Starts the reference server in process on an ephemeral port, over a
/// fresh memory store or the reference store `store` names, and returns
/// its handle (`reqkey proxy` puts itself in front of it).
pub async fn spawn_reference_agent(
    variant: Option<AgentVariant>,
    store: Option<&StoreSpec>,
    opts: &TargetOptions,
) -> Result<ServerHandle, TargetError> {
    let config = reference_config(variant);
    let sessions: Arc<dyn SessionStateStore> = match store {
        None => Arc::new(MemoryStore::new()),
        Some(spec) => tokio::time::timeout(opts.call_timeout(), spec.open())
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
    variant: Option<AgentVariant>,
    store: Option<&StoreSpec>,
    name: String,
    opts: TargetOptions,
) -> Result<HttpAgentTarget, TargetError> {
    let server = spawn_reference_agent(variant, store, &opts).await?;
    HttpAgentTarget::serving(server, name, &opts)
}

/// Starts `count` reference servers in process, all of one variant: over
/// the store `store` names (each server opens its own connection, as
/// separate processes would), or each over its own fresh memory store.
pub async fn reference_agents(
    count: usize,
    variant: Option<AgentVariant>,
    store: Option<&StoreSpec>,
    name: &str,
    opts: TargetOptions,
) -> Result<Vec<HttpAgentTarget>, TargetError> {
    let mut replicas = Vec::with_capacity(count);
    for _ in 0..count {
        replicas.push(reference_agent(variant, store, name.to_owned(), opts.clone()).await?);
    }
    Ok(replicas)
}
