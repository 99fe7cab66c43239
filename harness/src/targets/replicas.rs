//! Several endpoints of one agent deployment (replicas over one store),
//! certified as one target: `http://A,http://B,http://C`, or in process
//! `reference-agents:N[:VARIANT][@STORE]` (N reference servers, each with
//! its own store connection).
//!
//! Every HTTP exchange goes to the next replica in turn (one atomic
//! counter), so the items of a `parallel` group, which are sent at once,
//! land on different replicas: a race of keyed duplicates is a race
//! *across* replicas, which only the shared store can settle. Sequential
//! steps are spread the same way, so a retry is answered by another
//! replica than the first try, as behind a load balancer.
//!
//! `/health` is read from every replica and must name the same profile
//! (`supportsRequestKey`, `concurrentEntry`): replicas that disagree cannot
//! be certified as one deployment (exit 2, never a verdict).

use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use serde_json::Value;

use crate::targets::http_agent::HttpAgentTarget;
use crate::targets::profile::Profile;
use crate::targets::{HttpRequest, HttpResponse, Level, Target, TargetError};

/// The most replicas one target may name (every one is opened and checked).
pub const MAX_REPLICAS: usize = 16;

/// One agent deployment reached through several endpoints, round-robin.
#[derive(Debug)]
pub struct ReplicaTarget {
    name: String,
    replicas: Vec<HttpAgentTarget>,
    next: AtomicUsize,
}

impl ReplicaTarget {
    /// A target over `replicas` (at least two), named `name` in reports.
    pub fn new(name: String, replicas: Vec<HttpAgentTarget>) -> Result<Self, TargetError> {
        if replicas.len() < 2 || replicas.len() > MAX_REPLICAS {
            return Err(TargetError::BadSpec(format!(
                "a replicated target names 2 to {MAX_REPLICAS} endpoints, not {}",
                replicas.len()
            )));
        }
        Ok(Self {
            name,
            replicas,
            next: AtomicUsize::new(0),
        })
    }

    /// How many replicas the target spreads its requests over.
    pub fn len(&self) -> usize {
        self.replicas.len()
    }

    /// Always false: a replicated target has at least two replicas.
    pub fn is_empty(&self) -> bool {
        self.replicas.is_empty()
    }

    fn pick(&self) -> &HttpAgentTarget {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.replicas.len();
        &self.replicas[i]
    }

    /// Reads `/health` of every replica: each must answer, and all must
    /// declare one profile. Answers the first replica's `/health`, with
    /// `replicas` (the endpoints) added so a certificate names them all.
    pub async fn check_replicas(&self) -> Result<Value, TargetError> {
        let mut first: Option<(Value, Result<Profile, String>)> = None;
        for replica in &self.replicas {
            let health = replica.health().await.map_err(|e| match e {
                TargetError::Protocol(m) => {
                    TargetError::Protocol(format!("{}: {m}", replica.describe()))
                }
                other => other,
            })?;
            let profile =
                crate::targets::profile::profile_from_health(&health).map_err(|e| e.to_string());
            match &first {
                None => first = Some((health, profile)),
                Some((_, p0)) if *p0 == profile => {}
                Some((_, p0)) => {
                    return Err(TargetError::BadSpec(format!(
                        "the replicas do not declare one profile: {} says {}, {} says {}",
                        self.replicas[0].describe(),
                        describe_profile(p0),
                        replica.describe(),
                        describe_profile(&profile)
                    )))
                }
            }
        }
        let (mut health, _) = first.ok_or_else(|| TargetError::BadSpec("no replicas".into()))?;
        if let Some(obj) = health.as_object_mut() {
            obj.insert(
                "replicas".into(),
                Value::Array(
                    self.replicas
                        .iter()
                        .map(|r| Value::String(r.describe()))
                        .collect(),
                ),
            );
        }
        Ok(health)
    }
}

fn describe_profile(p: &Result<Profile, String>) -> String {
    match p {
        Ok(p) => p.flag(),
        Err(e) => format!("no profile ({e})"),
    }
}

#[async_trait]
impl Target for ReplicaTarget {
    fn level(&self) -> Level {
        Level::Agent
    }

    fn describe(&self) -> String {
        self.name.clone()
    }

    async fn health(&self) -> Result<Value, TargetError> {
        self.check_replicas().await
    }

    async fn http(&self, request: HttpRequest) -> Result<HttpResponse, TargetError> {
        match request.replica {
            Some(i) => self.replicas[i % self.replicas.len()].http(request).await,
            None => self.pick().http(request).await,
        }
    }
}
