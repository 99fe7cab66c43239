//! `getRunByRequestKey` latency in a small and a large store, seeded
//! through the protocol, so that any store in any language can show its key
//! lookup is an index read (the ratio stays near 1) rather than a scan.

use std::sync::Arc;
use std::time::Instant;

use crate::targets::spec::open_target;
use crate::targets::{TargetError, TargetOptions};

/// Sessions seeded (or deleted) at once: each is a chain of commits, so
/// this bounds the requests in flight.
const LOOKUP_SEED_CONCURRENCY: usize = 8;
/// Untimed lookups before each measured batch.
const LOOKUP_WARMUP: usize = 200;

/// The lookup benchmark's settings.
#[derive(Debug, Clone)]
pub struct LookupConfig {
    /// Runs in the small store (the base of the ratio).
    pub small_runs: u64,
    /// Runs in the large store.
    pub large_runs: u64,
    /// Keyed runs per seeded session (the last one may hold fewer). A scan
    /// within one session only shows when this grows with the store.
    pub runs_per_session: u64,
    /// Measured lookups in each store.
    pub samples: usize,
    pub seed: u64,
    pub call_timeout_ms: u64,
}

/// What the lookup benchmark measured.
#[derive(Debug, Clone)]
pub struct LookupFigures {
    pub target: String,
    pub small_runs: u64,
    pub large_runs: u64,
    pub samples: usize,
    pub seed: u64,
    pub seeded_in_s: f64,
    pub small_median_us: f64,
    pub small_p99_us: f64,
    pub large_median_us: f64,
    pub large_p99_us: f64,
}

impl LookupFigures {
    /// The large store's median over the small store's.
    pub fn ratio(&self) -> f64 {
        self.large_median_us / self.small_median_us.max(1e-9)
    }
}

impl std::fmt::Display for LookupFigures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "getRunByRequestKey on {}: {} runs {:.1} µs median (p99 {:.1} µs), {} runs {:.1} µs \
             median (p99 {:.1} µs); ratio {:.2}x [{} lookups each, seeded in {:.1} s, seed {}]",
            self.target,
            self.small_runs,
            self.small_median_us,
            self.small_p99_us,
            self.large_runs,
            self.large_median_us,
            self.large_p99_us,
            self.ratio(),
            self.samples,
            self.seeded_in_s,
            self.seed
        )
    }
}

/// One seeded set of sessions: `{prefix}.{i}` with runs `r1..rN`, keys
/// `k1..kN`, N = `per_session` (the last session may hold fewer).
#[derive(Debug, Clone)]
struct Seeded {
    prefix: String,
    runs: u64,
    per_session: u64,
}

impl Seeded {
    fn sessions(&self) -> u64 {
        self.runs.div_ceil(self.per_session)
    }

    fn session(&self, i: u64) -> String {
        format!("{}.{i}", self.prefix)
    }

    fn runs_in(&self, i: u64) -> u64 {
        (self.runs - i * self.per_session).min(self.per_session)
    }
}

/// One store call under the timeout; `{"ok": v}` answers `v`.
async fn store_ok(
    target: &dyn crate::targets::Target,
    request: serde_json::Value,
    timeout_ms: u64,
) -> Result<serde_json::Value, String> {
    let answer = tokio::time::timeout(
        std::time::Duration::from_millis(timeout_ms),
        target.store_call(&request),
    )
    .await
    .map_err(|_| TargetError::Timeout { timeout_ms }.to_string())?
    .map_err(|e| e.to_string())?;
    match answer.get("ok") {
        Some(v) => Ok(v.clone()),
        None => Err(format!("{} answered {answer} to {request}", request["op"])),
    }
}

/// Commits one session's chain of keyed runs.
async fn seed_session(
    target: Arc<dyn crate::targets::Target>,
    session: String,
    runs: u64,
    timeout_ms: u64,
) -> Result<(), String> {
    for j in 1..=runs {
        let start = serde_json::json!({
            "sessionId": session,
            "runId": format!("r{j}"),
            "expectedCurrentRunId": (j > 1).then(|| format!("r{}", j - 1)),
            "input": null,
            "requestKey": format!("k{j}"),
            "requestDigest": format!("d{j}"),
        });
        let request = serde_json::json!({"op": "commitRunStart", "args": {"startRun": start}});
        let ok = store_ok(target.as_ref(), request, timeout_ms).await?;
        if ok["outcome"] != "started" {
            return Err(format!("seeding {session}/r{j}: the commit answered {ok}"));
        }
    }
    Ok(())
}

/// Runs `op(i)` for every session index, at most
/// [`LOOKUP_SEED_CONCURRENCY`] at once. After the first error nothing new
/// starts (a target that went away is not waited on once per session);
/// what is in flight finishes, and the first error is the answer.
async fn for_each_session<F, Fut>(sessions: u64, op: F) -> Result<(), String>
where
    F: Fn(u64) -> Fut,
    Fut: std::future::Future<Output = Result<(), String>> + Send + 'static,
{
    let mut set = tokio::task::JoinSet::new();
    let mut first_error = None;
    for i in 0..sessions {
        if set.len() >= LOOKUP_SEED_CONCURRENCY {
            if let Some(done) = set.join_next().await {
                let r = done.unwrap_or_else(|e| Err(format!("a task failed: {e}")));
                first_error = first_error.or(r.err());
            }
        }
        if first_error.is_some() {
            break;
        }
        set.spawn(op(i));
    }
    while let Some(done) = set.join_next().await {
        let r = done.unwrap_or_else(|e| Err(format!("a task failed: {e}")));
        first_error = first_error.or(r.err());
    }
    first_error.map_or(Ok(()), Err)
}

/// What [`over_set`] does to each session of a set.
#[derive(Debug, Clone, Copy)]
enum SetOp {
    /// Commit the session's chain of keyed runs.
    Seed,
    /// `deleteSession` it.
    Delete,
}

/// Seeds or deletes every session of a set, 8 at once; stops starting new
/// ones after the first failure (the caller then names the sessions that
/// may remain).
async fn over_set(
    target: &Arc<dyn crate::targets::Target>,
    set: &Seeded,
    op: SetOp,
    timeout_ms: u64,
) -> Result<(), String> {
    let set = set.clone();
    let target = Arc::clone(target);
    for_each_session(set.sessions(), move |i| {
        let (target, session, runs) = (Arc::clone(&target), set.session(i), set.runs_in(i));
        async move {
            match op {
                SetOp::Seed => seed_session(target, session, runs, timeout_ms).await,
                SetOp::Delete => {
                    let request =
                        serde_json::json!({"op": "deleteSession", "args": {"sessionId": session}});
                    store_ok(target.as_ref(), request, timeout_ms)
                        .await
                        .map(drop)
                }
            }
        }
    })
    .await
}

/// One timed lookup of a random seeded key; checks the answer is its run.
async fn timed_lookup(
    target: &dyn crate::targets::Target,
    set: &Seeded,
    rng: &mut rand::rngs::Xoshiro256PlusPlus,
    timeout_ms: u64,
) -> Result<f64, String> {
    use rand::RngExt;
    let i = rng.random_range(0..set.sessions());
    let j = 1 + rng.random_range(0..set.runs_in(i));
    let session = set.session(i);
    let request = serde_json::json!({
        "op": "getRunByRequestKey",
        "args": {"sessionId": session, "requestKey": format!("k{j}")},
    });
    let started = Instant::now();
    let ok = store_ok(target, request, timeout_ms).await?;
    let took_us = started.elapsed().as_secs_f64() * 1e6;
    if ok["runId"] != format!("r{j}") {
        return Err(format!(
            "getRunByRequestKey({session}, k{j}) answered {ok}, not run r{j}: the store lost a key"
        ));
    }
    Ok(took_us)
}

/// `count` timed lookups in `set`, after [`LOOKUP_WARMUP`] untimed ones.
async fn sample(
    target: &dyn crate::targets::Target,
    set: &Seeded,
    count: usize,
    rng: &mut rand::rngs::Xoshiro256PlusPlus,
    timeout_ms: u64,
) -> Result<Vec<f64>, String> {
    let mut us = Vec::with_capacity(count);
    for i in 0..LOOKUP_WARMUP + count {
        let took = timed_lookup(target, set, rng, timeout_ms).await?;
        if i >= LOOKUP_WARMUP {
            us.push(took);
        }
    }
    Ok(us)
}

fn median_and_p99(mut us: Vec<f64>) -> (f64, f64) {
    us.sort_by(f64::total_cmp);
    let at = |q: usize| {
        us.get(q.min(us.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0.0)
    };
    (at(us.len() / 2), at(us.len() * 99 / 100))
}

/// Times `getRunByRequestKey` on random seeded keys of any store target
/// with a small and then a large number of runs in it, seeding through
/// `commitRunStart` (so it works on every store in any language). The
/// store is one, so the sets are not measured side by side: the small set
/// is seeded and measured (half its samples), the large set seeded beside
/// it and measured, removed, and the small set measured again (the other
/// half), so that load drifting on the machine does not favour either.
/// Every seeded session is deleted again, after a failure too. An index
/// read keeps the ratio near 1; a scan grows with the store.
pub async fn lookup_benchmark(
    target_spec: &str,
    cfg: &LookupConfig,
) -> Result<LookupFigures, String> {
    let target = open_target(target_spec, TargetOptions::default())
        .await
        .map_err(|e| e.to_string())?;
    if target.level() != crate::targets::Level::Store {
        return Err(format!(
            "the lookup benchmark needs a store target; {} is an agent server",
            target.describe()
        ));
    }
    let namespace = crate::run::runner::RunConfig::new(cfg.seed).namespace;
    if cfg.small_runs == 0 || cfg.large_runs == 0 || cfg.runs_per_session == 0 || cfg.samples == 0 {
        return Err("the lookup benchmark needs at least one run, session and sample".into());
    }
    let small = Seeded {
        prefix: format!("{namespace}.lookup-small"),
        runs: cfg.small_runs,
        per_session: cfg.runs_per_session,
    };
    let large = Seeded {
        prefix: format!("{namespace}.lookup-large"),
        runs: cfg.large_runs,
        per_session: cfg.runs_per_session,
    };
    let timeout_ms = cfg.call_timeout_ms;
    let mut rng = <rand::rngs::Xoshiro256PlusPlus as rand::SeedableRng>::seed_from_u64(cfg.seed);
    let mut seeded_in_s = 0.0;
    let mut large_seeded = false;
    let measured: Result<(Vec<f64>, Vec<f64>), String> = async {
        let t = Instant::now();
        over_set(&target, &small, SetOp::Seed, timeout_ms).await?;
        seeded_in_s += t.elapsed().as_secs_f64();
        let first_half = cfg.samples / 2;
        let mut small_us =
            sample(target.as_ref(), &small, first_half, &mut rng, timeout_ms).await?;
        let t = Instant::now();
        large_seeded = true;
        over_set(&target, &large, SetOp::Seed, timeout_ms).await?;
        seeded_in_s += t.elapsed().as_secs_f64();
        let large_us = sample(target.as_ref(), &large, cfg.samples, &mut rng, timeout_ms).await?;
        over_set(&target, &large, SetOp::Delete, timeout_ms).await?;
        large_seeded = false;
        small_us.extend(
            sample(
                target.as_ref(),
                &small,
                cfg.samples - first_half,
                &mut rng,
                timeout_ms,
            )
            .await?,
        );
        Ok((small_us, large_us))
    }
    .await;
    let cleaned = async {
        if large_seeded {
            over_set(&target, &large, SetOp::Delete, timeout_ms).await?;
        }
        over_set(&target, &small, SetOp::Delete, timeout_ms).await
    }
    .await;
    let leftover = |e: String| {
        format!(
            "{e} (sessions under {} and {} may remain in the store)",
            small.prefix, large.prefix
        )
    };
    let (small_us, large_us) = match (measured, cleaned) {
        (Ok(m), Ok(())) => m,
        (Err(e), Ok(())) => return Err(e),
        (Ok(_), Err(e)) => return Err(leftover(format!("removing the seeded sessions: {e}"))),
        (Err(e), Err(c)) => return Err(leftover(format!("{e}; then removing them: {c}"))),
    };
    let (small_median_us, small_p99_us) = median_and_p99(small_us);
    let (large_median_us, large_p99_us) = median_and_p99(large_us);
    // A Nagle-shaped stall swamps every figure below: say so (issue 41:
    // 44 ms per lookup instead of 0.2 ms, and nothing said why).
    for w in target.warnings() {
        eprintln!("reqkey: {}", w.line());
    }
    Ok(LookupFigures {
        target: target.describe(),
        small_runs: cfg.small_runs,
        large_runs: cfg.large_runs,
        samples: cfg.samples,
        seed: cfg.seed,
        seeded_in_s,
        small_median_us,
        small_p99_us,
        large_median_us,
        large_p99_us,
    })
}
