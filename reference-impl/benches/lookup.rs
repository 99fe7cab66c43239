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
//! point in between shows where the curve flattens). The SQL and Redis
//! stores are seeded through their bulk paths (one transaction,
//! `generate_series`, pipelining); the memory store through ordinary
//! commits.
//!
//! Each larger store is measured against a 1,000-run store *at the same
//! time*: lookups alternate one for one between the two (2,000 each, of
//! random existing keys, after 200 warm-up pairs), so load drifting on the
//! shared 2-core machine falls on both medians alike. The ratio is the
//! larger store's median over the 1,000-run store's. Memory and SQLite
//! stores are separate instances (separate files); Postgres and Redis are
//! one server each, shared under different session prefixes. Everything
//! seeded is removed at the end, after a failure too. Postgres and Redis
//! come from `REQKEY_POSTGRES_URL` and `REQKEY_REDIS_URL` (defaults: the
//! local services).
//!
//! The last line (`floor`) measures the machine: the latency of one
//! dependent random read in 1 MiB (cache) and in 512 MiB (DRAM). It bounds
//! what an in-process store can reach: a lookup of a random one of
//! 1,000,000 runs must read at least one line that is not in cache.

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

/// One timed lookup of a random existing key among `sessions` sessions.
async fn lookup_once(
    store: &dyn SessionStateStore,
    prefix: &str,
    sessions: u64,
    rng: &mut Rng,
) -> Result<Duration, BoxError> {
    let session = format!("{prefix}-{}", rng.below(sessions));
    let key = format!("k{}", 1 + rng.below(RUNS_PER_SESSION));
    let started = Instant::now();
    let found = store.get_run_by_request_key(&session, &key).await?;
    let took = started.elapsed();
    if found.as_ref().and_then(|r| r.request_key.as_deref()) != Some(key.as_str()) {
        return Err(format!("{session}/{key} was not found: the seeding is broken").into());
    }
    Ok(took)
}

/// Lookups in the small set and in the large set, interleaved one for one
/// (the order alternating), so that both medians see the same machine:
/// load that drifts during a run cannot favour either. Returns the small
/// set's samples and the large set's, after warm-up.
async fn paired_samples(
    small: (&dyn SessionStateStore, &str, u64),
    large: (&dyn SessionStateStore, &str, u64),
    rng: &mut Rng,
) -> Result<(Vec<Duration>, Vec<Duration>), BoxError> {
    let (mut base, mut big) = (Vec::with_capacity(SAMPLES), Vec::with_capacity(SAMPLES));
    for i in 0..WARMUP + SAMPLES {
        let (b, l) = if i % 2 == 0 {
            let b = lookup_once(small.0, small.1, small.2, rng).await?;
            (b, lookup_once(large.0, large.1, large.2, rng).await?)
        } else {
            let l = lookup_once(large.0, large.1, large.2, rng).await?;
            (lookup_once(small.0, small.1, small.2, rng).await?, l)
        };
        if i >= WARMUP {
            base.push(b);
            big.push(l);
        }
    }
    Ok((base, big))
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
            Backend::Sqlite(_, path) => {
                // The file is this size's own: remove it whole.
                for suffix in ["", "-wal", "-shm"] {
                    let file = format!("{}{suffix}", path.display());
                    match std::fs::remove_file(&file) {
                        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                            return Err(format!("removing {file}: {e}").into())
                        }
                        _ => {}
                    }
                }
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

/// One row of the table: a store size, its lookups, the lookups of the
/// 1,000-run set measured alongside, and how long seeding took.
struct Row {
    runs: u64,
    stats: Stats,
    base: Stats,
    seeded_in: Duration,
}

/// Opens a store holding the 1,000-run base set, then for each size a
/// second store holding that many runs: seeded, measured interleaved with
/// the base store, emptied. Memory and SQLite get a store of their own per
/// size (a separate instance, a separate file), so "with 1,000 runs in the
/// store" is literal; Postgres and Redis are one server, so there the base
/// set and the larger set share it, under different session prefixes. The
/// 1,000-run row pairs two stores of equal size: its ratio shows the noise.
async fn bench_backend(name: &str, stamp: &str) -> Result<Vec<Row>, BoxError> {
    let base_prefix = format!("bench-{stamp}-base");
    let base_sessions = SIZES[0] / RUNS_PER_SESSION;
    let base = open(name, &format!("{stamp}-base")).await?;
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let result: Result<Vec<Row>, BoxError> = async {
        base.seed(&base_prefix, base_sessions).await?;
        let mut rows = Vec::new();
        for size in SIZES {
            let prefix = format!("bench-{stamp}-{size}");
            let sessions = size / RUNS_PER_SESSION;
            let large = open(name, &format!("{stamp}-{size}")).await?;
            let t = Instant::now();
            let measured = async {
                large.seed(&prefix, sessions).await?;
                let seeded_in = t.elapsed();
                let (base_samples, samples) = paired_samples(
                    (base.store(), &base_prefix, base_sessions),
                    (large.store(), &prefix, sessions),
                    &mut rng,
                )
                .await?;
                Ok::<_, BoxError>(Row {
                    runs: size,
                    stats: stats(samples),
                    base: stats(base_samples),
                    seeded_in,
                })
            }
            .await;
            // Emptied even after a failure.
            large.clean(&prefix, sessions).await?;
            rows.push(measured?);
        }
        Ok(rows)
    }
    .await;
    base.clean(&base_prefix, base_sessions).await?;
    result
}

/// The machine's floor: nanoseconds per dependent random read (a pointer
/// chase through a random cycle) in a buffer of `bytes`. A lookup that
/// must read a random one of 1,000,000 runs pays at least one such read
/// at the large size, while the whole 1,000-run store sits in cache.
fn chase_ns(bytes: usize, rng: &mut Rng) -> f64 {
    let n = bytes / std::mem::size_of::<u32>();
    // Sattolo's algorithm: a random permutation that is one cycle.
    let mut next: Vec<u32> = (0..n as u32).collect();
    for i in (1..n).rev() {
        let j = rng.below(i as u64) as usize;
        next.swap(i, j);
    }
    let steps = 1_000_000;
    let mut at = 0u32;
    let started = Instant::now();
    for _ in 0..steps {
        at = next[at as usize];
    }
    let took = started.elapsed();
    std::hint::black_box(at);
    took.as_secs_f64() * 1e9 / f64::from(steps)
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
    println!(
        "getRunByRequestKey latency: {SAMPLES} lookups of random existing keys, \
         interleaved one for one with lookups in a 1,000-run set (the base)"
    );
    println!(
        "{:<9} {:>10} {:>10} {:>10} {:>10} {:>10} {:>8}",
        "backend", "runs", "seeded in", "median µs", "p99 µs", "base µs", "ratio"
    );
    let mut failed = false;
    for name in ["memory", "sqlite", "postgres", "redis"] {
        if !filters.is_empty() && !filters.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        match bench_backend(name, &stamp).await {
            Ok(rows) => {
                for row in rows {
                    println!(
                        "{name:<9} {:>10} {:>9.1}s {:>10.1} {:>10.1} {:>10.1} {:>7.2}x",
                        row.runs,
                        row.seeded_in.as_secs_f64(),
                        micros(row.stats.median),
                        micros(row.stats.p99),
                        micros(row.base.median),
                        micros(row.stats.median) / micros(row.base.median).max(1e-9),
                    );
                }
            }
            Err(e) => {
                failed = true;
                println!("{name:<9} failed: {e}");
            }
        }
    }
    if filters.is_empty() || filters.iter().any(|f| f == "floor") {
        let mut rng = Rng(0x2545_F491_4F6C_DD1D);
        println!(
            "floor     one dependent random read: {:.0} ns in 1 MiB, {:.0} ns in 512 MiB",
            chase_ns(1 << 20, &mut rng),
            chase_ns(512 << 20, &mut rng),
        );
    }
    if failed {
        std::process::ExitCode::FAILURE
    } else {
        std::process::ExitCode::SUCCESS
    }
}
