//! `getRunByRequestKey` latency with 1,000 runs vs 1,000,000 runs in the
//! store, on every backend: the lookup is an indexed read, so its median
//! should not grow with the store (target: within 1.5x).
//!
//! ```sh
//! cargo bench -p reqkey-reference --bench lookup            # all backends
//! cargo bench -p reqkey-reference --bench lookup -- redis   # some of them
//! ```
//!
//! Runs are laid out as sessions of 1,000 keyed runs (`k1..k1000`): the
//! small store is one session, the large one 1,000 sessions (a 100,000-run
//! point in between shows where the curve flattens). The SQL and
//! Redis stores are seeded through their bulk paths (one transaction,
//! `generate_series`, pipelining); the memory store through ordinary
//! commits. Each size is seeded, measured (2,000 sequential lookups of
//! random existing keys after 200 warm-up lookups) and removed in turn; the
//! 1,000-run set stays throughout and is measured half before and half
//! after the larger ones, so that load drifting on the (shared) machine
//! does not favour it. Ratios are against the 1,000-run median. Everything seeded is deleted at the end
//! (the SQLite file too). Postgres and Redis come from `REQKEY_POSTGRES_URL`
//! and `REQKEY_REDIS_URL` (defaults: the local services).

#![allow(clippy::print_stdout)]

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use reqkey_model::StartRun;
use reqkey_reference::store::{
    MemoryStore, PostgresStore, RedisStore, SessionStateStore, SqliteStore,
};
use serde_json::json;

const RUNS_PER_SESSION: u64 = 1_000;
const SIZES: [u64; 3] = [1_000, 100_000, 1_000_000];
const WARMUP: usize = 200;
const SAMPLES: usize = 2_000;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A small deterministic generator (xorshift64*), so runs are comparable.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

#[derive(Debug, Clone, Copy)]
struct Stats {
    median: Duration,
    p99: Duration,
}

/// `count` sequential lookups of random existing keys (after warm-up).
async fn sample(
    store: &dyn SessionStateStore,
    prefix: &str,
    sessions: u64,
    count: usize,
    rng: &mut Rng,
) -> Result<Vec<Duration>, BoxError> {
    let mut samples = Vec::with_capacity(count);
    for i in 0..WARMUP + count {
        let session = format!("{prefix}-{}", rng.below(sessions));
        let key = format!("k{}", 1 + rng.below(RUNS_PER_SESSION));
        let started = Instant::now();
        let found = store.get_run_by_request_key(&session, &key).await?;
        let took = started.elapsed();
        if found.as_ref().and_then(|r| r.request_key.as_deref()) != Some(key.as_str()) {
            return Err(format!("{session}/{key} was not found: the seeding is broken").into());
        }
        if i >= WARMUP {
            samples.push(took);
        }
    }
    Ok(samples)
}

fn stats(mut samples: Vec<Duration>) -> Stats {
    samples.sort_unstable();
    Stats {
        median: samples[samples.len() / 2],
        p99: samples[samples.len() * 99 / 100],
    }
}

/// One backend: how to seed `sessions` sessions under a prefix, and how to
/// remove them again.
enum Backend {
    Memory(Arc<MemoryStore>),
    Sqlite(SqliteStore, std::path::PathBuf),
    Postgres(PostgresStore),
    Redis(Box<RedisStore>),
}

impl Backend {
    fn store(&self) -> &dyn SessionStateStore {
        match self {
            Backend::Memory(s) => s.as_ref(),
            Backend::Sqlite(s, _) => s,
            Backend::Postgres(s) => s,
            Backend::Redis(s) => s.as_ref(),
        }
    }

    async fn seed(&self, prefix: &str, sessions: u64) -> Result<(), BoxError> {
        match self {
            Backend::Memory(store) => {
                for s in 0..sessions {
                    let session_id = format!("{prefix}-{s}");
                    for j in 1..=RUNS_PER_SESSION {
                        store
                            .commit_run_start(StartRun {
                                session_id: session_id.clone(),
                                run_id: format!("r{j}"),
                                expected_current_run_id: (j > 1).then(|| format!("r{}", j - 1)),
                                input: json!(null),
                                request_key: Some(format!("k{j}")),
                                request_digest: Some(format!("d{j}")),
                            })
                            .await?;
                    }
                }
            }
            Backend::Sqlite(store, _) => {
                store.bulk_seed(prefix, sessions, RUNS_PER_SESSION).await?
            }
            Backend::Postgres(store) => store.bulk_seed(prefix, sessions, RUNS_PER_SESSION).await?,
            Backend::Redis(store) => store.bulk_seed(prefix, sessions, RUNS_PER_SESSION).await?,
        }
        Ok(())
    }

    async fn clean(&self, prefix: &str, sessions: u64) -> Result<(), BoxError> {
        match self {
            Backend::Memory(store) => {
                for s in 0..sessions {
                    store.delete_session(&format!("{prefix}-{s}")).await?;
                }
            }
            Backend::Sqlite(store, _) => {
                store.delete_sessions_with_prefix(prefix).await?;
            }
            Backend::Postgres(store) => {
                store.delete_sessions_with_prefix(prefix).await?;
            }
            Backend::Redis(store) => store.delete_seeded(prefix, sessions).await?,
        }
        Ok(())
    }
}

async fn open(name: &str, stamp: &str) -> Result<Backend, BoxError> {
    Ok(match name {
        "memory" => Backend::Memory(Arc::new(MemoryStore::new())),
        "sqlite" => {
            let path = std::env::temp_dir().join(format!("reqkey-bench-{stamp}.sqlite"));
            Backend::Sqlite(SqliteStore::open(&path).await?, path)
        }
        "postgres" => {
            let url = std::env::var("REQKEY_POSTGRES_URL")
                .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
            Backend::Postgres(PostgresStore::connect(&url).await?)
        }
        "redis" => {
            let url = std::env::var("REQKEY_REDIS_URL")
                .unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
            Backend::Redis(Box::new(RedisStore::connect(&url).await?))
        }
        other => return Err(format!("unknown backend {other}").into()),
    })
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Seeds, measures and removes each size in turn, so that the store holds
/// that many runs (plus the first size's) while it is measured. The first
/// size is measured before and after the larger ones and its samples are
/// pooled, so that load drifting on the machine does not favour it.
async fn bench_backend(name: &str, stamp: &str) -> Result<Vec<(u64, Stats, Duration)>, BoxError> {
    let backend = open(name, stamp).await?;
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut seeded: Vec<(String, u64)> = Vec::new();
    let result: Result<Vec<(u64, Stats, Duration)>, BoxError> = async {
        let mut rows = Vec::new();
        let mut first: Option<(String, u64, Vec<Duration>, Duration)> = None;
        for size in SIZES {
            let prefix = format!("bench-{stamp}-{size}");
            let sessions = size / RUNS_PER_SESSION;
            let t = Instant::now();
            seeded.push((prefix.clone(), sessions));
            backend.seed(&prefix, sessions).await?;
            let seed_time = t.elapsed();
            match &first {
                None => {
                    let samples =
                        sample(backend.store(), &prefix, sessions, SAMPLES / 2, &mut rng).await?;
                    first = Some((prefix, sessions, samples, seed_time));
                }
                Some(_) => {
                    let samples =
                        sample(backend.store(), &prefix, sessions, SAMPLES, &mut rng).await?;
                    rows.push((size, stats(samples), seed_time));
                    backend.clean(&prefix, sessions).await?;
                    seeded.pop();
                }
            }
        }
        if let Some((prefix, sessions, mut samples, seed_time)) = first {
            samples
                .extend(sample(backend.store(), &prefix, sessions, SAMPLES / 2, &mut rng).await?);
            rows.insert(0, (SIZES[0], stats(samples), seed_time));
        }
        Ok(rows)
    }
    .await;
    // Clean up whatever is still seeded, even after a failure.
    for (prefix, sessions) in &seeded {
        backend.clean(prefix, *sessions).await?;
    }
    if let Backend::Sqlite(_, path) = &backend {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
    }
    result
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> std::process::ExitCode {
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let stamp = format!(
        "{}-{}",
        std::process::id(),
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    );
    println!("getRunByRequestKey latency, {SAMPLES} sequential lookups of random existing keys");
    println!(
        "{:<9} {:>10} {:>12} {:>10} {:>10} {:>8}",
        "backend", "runs", "seeded in", "median µs", "p99 µs", "ratio"
    );
    let mut failed = false;
    for name in ["memory", "sqlite", "postgres", "redis"] {
        if !filters.is_empty() && !filters.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        match bench_backend(name, &stamp).await {
            Ok(rows) => {
                let base = rows.first().map(|r| r.1.median);
                for (size, stats, seed) in rows {
                    let ratio = base.map_or(1.0, |b| micros(stats.median) / micros(b).max(1e-9));
                    println!(
                        "{name:<9} {size:>10} {:>11.1}s {:>10.1} {:>10.1} {:>7.2}x",
                        seed.as_secs_f64(),
                        micros(stats.median),
                        micros(stats.p99),
                        ratio
                    );
                }
            }
            Err(e) => {
                failed = true;
                println!("{name:<9} failed: {e}");
            }
        }
    }
    if failed {
        std::process::ExitCode::FAILURE
    } else {
        std::process::ExitCode::SUCCESS
    }
}
