//! `reqkey bench lookup` on the reference backends: `getRunByRequestKey`
//! with a small and a large number of runs in the store, measured beside
//! the same backend's own primitive at the same sizes, in one run.
//!
//! | backend | primitive |
//! |---|---|
//! | memory | a `std` hash-map get (key: session and run id) of a cloned run |
//! | sqlite, postgres | `getRun`: a read by the `runs` table's primary key |
//! | redis | `getRun`: one `HGET` on the session's runs hash |
//!
//! The SQL and Redis primitives go through the same store, connection and
//! row decoding as the lookup, so the ratio compares the two reads alone.
//! The figure is the *ratio of ratios*: how much more the lookup grows
//! from the small to the large store than the primitive does. A hash
//! index reads a bounded number of entries whatever the size, so it grows
//! like the primitive (near 1); a scan grows with the store.
//!
//! Each size is its own store (memory: its own instance; SQLite: its own
//! file; Postgres and Redis: one server, sessions under a prefix per size).
//! Runs are laid out as sessions of `runs_per_session` keyed runs and
//! seeded through each backend's bulk path (memory: ordinary commits).
//! The four series (lookup and primitive, small and large) are sampled
//! round-robin, the order rotating, so that load drifting on a shared
//! machine falls on all four alike. Everything seeded is removed at the
//! end, after a failure too.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use reqkey_model::{RunMetadata, StartRun};
use reqkey_reference::store::{
    MemoryStore, PostgresStore, RedisStore, SessionStateStore, SqliteStore,
};

/// Untimed rounds before the measured ones.
const WARMUP_ROUNDS: usize = 200;
/// The bound on seeding one size (a million runs on Postgres take about
/// 30 s on the project's machine).
const SEED_TIMEOUT_MS: u64 = 600_000;

/// `fut` under a bound of `timeout_ms`, naming `what` when it runs out.
async fn bounded<T>(
    what: &str,
    timeout_ms: u64,
    fut: impl std::future::Future<Output = Result<T, String>>,
) -> Result<T, String> {
    tokio::time::timeout(Duration::from_millis(timeout_ms), fut)
        .await
        .unwrap_or_else(|_| Err(format!("{what}: no answer within {timeout_ms} ms")))
}

/// A reference backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    Memory,
    Sqlite,
    Postgres,
    Redis,
}

impl Backend {
    pub const ALL: [Backend; 4] = [
        Backend::Memory,
        Backend::Sqlite,
        Backend::Postgres,
        Backend::Redis,
    ];

    fn name(self) -> &'static str {
        match self {
            Backend::Memory => "memory",
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
            Backend::Redis => "redis",
        }
    }

    fn primitive(self) -> &'static str {
        match self {
            Backend::Memory => "hash-map get",
            Backend::Sqlite | Backend::Postgres => "primary-key read",
            Backend::Redis => "HGET",
        }
    }
}

/// The settings of the backend lookup benchmark.
#[derive(Debug, Clone)]
pub struct BackendLookupConfig {
    pub backends: Vec<Backend>,
    pub small_runs: u64,
    pub large_runs: u64,
    pub runs_per_session: u64,
    /// Measured rounds (each samples all four series once).
    pub samples: usize,
    pub seed: u64,
    /// The bound on opening a store and on every single read.
    pub call_timeout_ms: u64,
    pub postgres_url: String,
    pub redis_url: String,
}

/// Median and p99 of one series, in microseconds.
#[derive(Debug, Clone, Copy)]
pub struct Series {
    pub median_us: f64,
    pub p99_us: f64,
}

/// One backend's figures.
#[derive(Debug, Clone)]
pub struct BackendLookupFigures {
    pub backend: Backend,
    pub small_runs: u64,
    pub large_runs: u64,
    pub samples: usize,
    pub seeded_in_s: f64,
    pub lookup_small: Series,
    pub lookup_large: Series,
    pub primitive_small: Series,
    pub primitive_large: Series,
}

impl BackendLookupFigures {
    pub fn lookup_growth(&self) -> f64 {
        self.lookup_large.median_us / self.lookup_small.median_us.max(1e-9)
    }

    pub fn primitive_growth(&self) -> f64 {
        self.primitive_large.median_us / self.primitive_small.median_us.max(1e-9)
    }

    /// How much more the lookup grows than the primitive.
    pub fn ratio_of_ratios(&self) -> f64 {
        self.lookup_growth() / self.primitive_growth().max(1e-9)
    }
}

impl std::fmt::Display for BackendLookupFigures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:<8} getRunByRequestKey {:.2} → {:.2} µs ({:.2}x); {} {:.2} → {:.2} µs ({:.2}x); \
             ratio of ratios {:.2}x [{} → {} runs, medians of {}, p99 {:.1} / {:.1} µs, seeded in {:.1} s]",
            self.backend.name(),
            self.lookup_small.median_us,
            self.lookup_large.median_us,
            self.lookup_growth(),
            self.backend.primitive(),
            self.primitive_small.median_us,
            self.primitive_large.median_us,
            self.primitive_growth(),
            self.ratio_of_ratios(),
            self.small_runs,
            self.large_runs,
            self.samples,
            self.lookup_small.p99_us,
            self.lookup_large.p99_us,
            self.seeded_in_s,
        )
    }
}

/// One store of one size: sessions `{prefix}-{i}`, runs `r1..rN`, keys
/// `k1..kN`, N = runs per session.
struct Sized {
    store: Arc<dyn SessionStateStore>,
    /// The memory primitive: the same runs in a plain hash map.
    map: HashMap<String, RunMetadata>,
    prefix: String,
    sessions: u64,
    cleanup: Cleanup,
}

/// The backend handle of one size, for bulk seeding and cleanup.
enum Cleanup {
    /// Dropped with the store.
    Nothing,
    Sqlite(Arc<SqliteStore>, std::path::PathBuf),
    Postgres(Arc<PostgresStore>),
    Redis(Arc<RedisStore>),
}

fn seeded_run(session_id: &str, j: u64) -> RunMetadata {
    RunMetadata {
        session_id: session_id.to_owned(),
        run_id: format!("r{j}"),
        status: reqkey_model::RunStatus::Running,
        start_sequence: j,
        request_key: Some(format!("k{j}")),
        request_digest: Some(format!("d{j}")),
    }
}

/// Opens the store of one size (empty; see [`seed`]).
async fn open_sized(
    backend: Backend,
    cfg: &BackendLookupConfig,
    prefix: String,
    runs: u64,
) -> Result<Sized, String> {
    let sessions = runs / cfg.runs_per_session;
    let err = |e: reqkey_reference::store::OpenError| format!("{}: {e}", backend.name());
    let (store, cleanup): (Arc<dyn SessionStateStore>, Cleanup) = match backend {
        Backend::Memory => (Arc::new(MemoryStore::new()), Cleanup::Nothing),
        Backend::Sqlite => {
            let path = std::env::temp_dir().join(format!("reqkey-{prefix}.sqlite"));
            let store = Arc::new(SqliteStore::open(&path).await.map_err(err)?);
            (store.clone(), Cleanup::Sqlite(store, path))
        }
        Backend::Postgres => {
            let store = Arc::new(
                PostgresStore::connect(&cfg.postgres_url)
                    .await
                    .map_err(err)?,
            );
            (store.clone(), Cleanup::Postgres(store))
        }
        Backend::Redis => {
            let store = Arc::new(RedisStore::connect(&cfg.redis_url).await.map_err(err)?);
            (store.clone(), Cleanup::Redis(store))
        }
    };
    Ok(Sized {
        store,
        map: HashMap::new(),
        prefix,
        sessions,
        cleanup,
    })
}

/// Seeds one size: the SQL and Redis stores through their bulk paths,
/// the memory store through ordinary commits (and its primitive's map).
async fn seed(sized: &mut Sized, per: u64) -> Result<(), String> {
    let (prefix, sessions) = (sized.prefix.clone(), sized.sessions);
    let r = match &sized.cleanup {
        Cleanup::Nothing => {
            for s in 0..sessions {
                let session_id = format!("{prefix}-{s}");
                for j in 1..=per {
                    sized
                        .store
                        .commit_run_start(StartRun {
                            session_id: session_id.clone(),
                            run_id: format!("r{j}"),
                            expected_current_run_id: (j > 1).then(|| format!("r{}", j - 1)),
                            input: serde_json::Value::Null,
                            request_key: Some(format!("k{j}")),
                            request_digest: Some(format!("d{j}")),
                        })
                        .await
                        .map_err(|e| format!("memory: {e}"))?;
                    sized
                        .map
                        .insert(format!("{session_id}/r{j}"), seeded_run(&session_id, j));
                }
            }
            Ok(())
        }
        Cleanup::Sqlite(store, _) => store.bulk_seed(&prefix, sessions, per).await,
        Cleanup::Postgres(store) => store.bulk_seed(&prefix, sessions, per).await,
        Cleanup::Redis(store) => store.bulk_seed(&prefix, sessions, per).await,
    };
    r.map_err(|e| e.to_string())
}

async fn clean(sized: &Sized) -> Result<(), String> {
    match &sized.cleanup {
        Cleanup::Nothing => Ok(()),
        Cleanup::Sqlite(_, path) => {
            // The file is this size's own: removed whole.
            for suffix in ["", "-wal", "-shm"] {
                let file = format!("{}{suffix}", path.display());
                match std::fs::remove_file(&file) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        return Err(format!("removing {file}: {e}"))
                    }
                    _ => {}
                }
            }
            Ok(())
        }
        Cleanup::Postgres(store) => store
            .delete_sessions_with_prefix(&format!("{}-", sized.prefix))
            .await
            .map(drop)
            .map_err(|e| e.to_string()),
        Cleanup::Redis(store) => store
            .delete_seeded(&sized.prefix, sized.sessions)
            .await
            .map_err(|e| e.to_string()),
    }
}

/// What one timed read is of.
#[derive(Debug, Clone, Copy)]
enum Read {
    Lookup,
    Primitive,
}

/// One timed read of a random seeded run; checks the answer is that run.
async fn timed(
    sized: &Sized,
    read: Read,
    memory: bool,
    per: u64,
    rng: &mut rand::rngs::Xoshiro256PlusPlus,
) -> Result<Duration, String> {
    use rand::RngExt;
    let session = format!("{}-{}", sized.prefix, rng.random_range(0..sized.sessions));
    let j = 1 + rng.random_range(0..per);
    let (key, run_id) = (format!("k{j}"), format!("r{j}"));
    let (took, found) = match (read, memory) {
        (Read::Lookup, _) => {
            let started = Instant::now();
            let found = sized.store.get_run_by_request_key(&session, &key).await;
            (started.elapsed(), found)
        }
        (Read::Primitive, false) => {
            let started = Instant::now();
            let found = sized.store.get_run(&session, &run_id).await;
            (started.elapsed(), found)
        }
        (Read::Primitive, true) => {
            let map_key = format!("{session}/{run_id}");
            let started = Instant::now();
            let found = std::hint::black_box(&sized.map).get(&map_key).cloned();
            (started.elapsed(), Ok(found))
        }
    };
    match found {
        Ok(Some(run)) if run.run_id == run_id => Ok(took),
        Ok(other) => Err(format!(
            "{read:?} of {session}/{run_id} (key {key}) answered {other:?}: the seeding is broken"
        )),
        Err(e) => Err(format!("{read:?} of {session}/{run_id}: {e}")),
    }
}

fn series(mut us: Vec<f64>) -> Series {
    us.sort_by(f64::total_cmp);
    let at = |q: usize| {
        us.get(q.min(us.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0.0)
    };
    Series {
        median_us: at(us.len() / 2),
        p99_us: at(us.len() * 99 / 100),
    }
}

/// Seeds both sizes of one backend, samples the four series, removes
/// what it seeded.
async fn bench_backend(
    backend: Backend,
    cfg: &BackendLookupConfig,
    stamp: &str,
    rng: &mut rand::rngs::Xoshiro256PlusPlus,
) -> Result<BackendLookupFigures, String> {
    let per = cfg.runs_per_session;
    let mut opened: Vec<Sized> = Vec::new();
    let measured = async {
        let started = Instant::now();
        for (tag, runs) in [("s", cfg.small_runs), ("l", cfg.large_runs)] {
            let prefix = format!("bench-{stamp}-{}-{tag}", backend.name());
            let what = format!("opening the {} store", backend.name());
            opened.push(
                bounded(
                    &what,
                    cfg.call_timeout_ms,
                    open_sized(backend, cfg, prefix, runs),
                )
                .await?,
            );
            if let Some(sized) = opened.last_mut() {
                let what = format!("seeding {runs} runs on {}", backend.name());
                bounded(&what, SEED_TIMEOUT_MS, seed(sized, per)).await?;
            }
        }
        let seeded_in_s = started.elapsed().as_secs_f64();
        let memory = backend == Backend::Memory;
        let mut samples: [Vec<f64>; 4] = Default::default();
        let plan = [
            (0, Read::Lookup),
            (1, Read::Lookup),
            (0, Read::Primitive),
            (1, Read::Primitive),
        ];
        for round in 0..WARMUP_ROUNDS + cfg.samples {
            for k in 0..plan.len() {
                let which = (round + k) % plan.len();
                let (size, read) = plan[which];
                let took = bounded(
                    backend.name(),
                    cfg.call_timeout_ms,
                    timed(&opened[size], read, memory, per, rng),
                )
                .await?;
                if round >= WARMUP_ROUNDS {
                    samples[which].push(took.as_secs_f64() * 1e6);
                }
            }
        }
        let [ls, ll, ps, pl] = samples;
        Ok::<_, String>(BackendLookupFigures {
            backend,
            small_runs: cfg.small_runs,
            large_runs: cfg.large_runs,
            samples: cfg.samples,
            seeded_in_s,
            lookup_small: series(ls),
            lookup_large: series(ll),
            primitive_small: series(ps),
            primitive_large: series(pl),
        })
    }
    .await;
    let mut cleaned = Ok(());
    for sized in &opened {
        if let Err(e) = bounded("cleaning up", SEED_TIMEOUT_MS, clean(sized)).await {
            cleaned = Err(format!(
                "removing the sessions under {}: {e} (they may remain)",
                sized.prefix
            ));
        }
    }
    let figures = measured?;
    cleaned.map(|()| figures)
}

/// Runs the benchmark on every configured backend, one after the other.
/// Stops at the first backend that fails (a service that is down is an
/// error, not a skipped row).
pub async fn backend_lookup_benchmark(
    cfg: &BackendLookupConfig,
    mut each: impl FnMut(&BackendLookupFigures),
) -> Result<Vec<BackendLookupFigures>, String> {
    if cfg.runs_per_session == 0
        || cfg.samples == 0
        || cfg.small_runs == 0
        || cfg.small_runs % cfg.runs_per_session != 0
        || cfg.large_runs % cfg.runs_per_session != 0
        || cfg.large_runs < cfg.small_runs
    {
        return Err(format!(
            "--small ({}) and --large ({}) must be non-zero multiples of --runs-per-session ({}), \
             --large at least --small",
            cfg.small_runs, cfg.large_runs, cfg.runs_per_session
        ));
    }
    let stamp = format!(
        "{}-{}",
        std::process::id(),
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis())
    );
    let mut rng = <rand::rngs::Xoshiro256PlusPlus as rand::SeedableRng>::seed_from_u64(cfg.seed);
    let mut all = Vec::new();
    for &backend in &cfg.backends {
        let figures = bench_backend(backend, cfg, &stamp, &mut rng).await?;
        each(&figures);
        all.push(figures);
    }
    Ok(all)
}

/// The machine's floor: nanoseconds per dependent random read (a pointer
/// chase through one random cycle) in a buffer of `bytes`. A lookup of a
/// random one of a million runs pays at least one such read from DRAM,
/// while a store of a thousand runs sits in the CPU caches.
pub fn chase_ns(bytes: usize, seed: u64) -> f64 {
    use rand::RngExt;
    let mut rng = <rand::rngs::Xoshiro256PlusPlus as rand::SeedableRng>::seed_from_u64(seed);
    let n = (bytes / std::mem::size_of::<u32>()).max(2);
    // Sattolo's algorithm: a random permutation that is a single cycle.
    let mut next: Vec<u32> = (0..n as u32).collect();
    for i in (1..n).rev() {
        let j = rng.random_range(0..i);
        next.swap(i, j);
    }
    let steps = 1_000_000u32;
    let mut at = 0u32;
    let started = Instant::now();
    for _ in 0..steps {
        at = next[at as usize];
    }
    let took = started.elapsed();
    std::hint::black_box(at);
    took.as_secs_f64() * 1e9 / f64::from(steps)
}
