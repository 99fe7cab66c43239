//! `reqkey bench`: its arguments and dispatch; the benchmarks themselves
//! are in `crate::bench`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use crate::bench::backends::{backend_lookup_benchmark, chase_ns, Backend, BackendLookupConfig};
use crate::bench::checker::{
    checker_benchmark, default_workload, detection_benchmark, export_lin_history, lin_benchmark,
    lin_workload_of, lin_workloads,
};
use crate::bench::failover::{failover_benchmark, FailoverConfig};
use crate::bench::fuzz::{fuzz_benchmark, FuzzBenchConfig};
use crate::bench::heads::{heads_benchmark, HeadsConfig};
use crate::bench::lookup::{lookup_benchmark, LookupConfig};
use crate::bench::model::{model_benchmark, model_cases};
use crate::bench::soak::{soak_benchmark, SoakConfig, SoakServer};
use crate::cmd::exit::harness_error;
use crate::cmd::runtime::runtime;
use crate::run::select::filter_by_tags;
use crate::targets::Level;

/// Which benchmark to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BenchKind {
    /// The checker and race benchmarks (not lookup, which seeds a store,
    /// nor lin, which takes minutes).
    All,
    /// The linearizability checker on fixed-seed simulated histories (1k,
    /// 10k, 100k ops; 8 and 16 clients on one session; correct and not):
    /// ops/s and the verdict of each (--quick: the 1k ones only).
    Lin,
    /// Time the linearizability check of a recorded 1,000-op history.
    Checker,
    /// Detection rate of the race scenarios against the racy store.
    Race,
    /// getRunByRequestKey with --small vs --large runs (default 1,000 vs
    /// 1,000,000) on every reference backend (--backend), beside the
    /// backend's own primitive, and the ratio of their growths; with
    /// --target, on any store target through the protocol (default
    /// --large there: 100,000).
    Lookup,
    /// The fault test: --replicas `reqkey serve agent` processes over
    /// --store under bounded keyed load, one killed with SIGKILL mid-load,
    /// failed requests retried with their key on another replica; exit 1
    /// on any duplicate run, lost or doubled input.
    Failover,
    /// Mixed honest and hostile load (1 MiB bodies, idle floods, slow
    /// heads, clients that never read, long polls) against `reqkey serve
    /// store`, `serve agent` and `reqkey proxy` on loopback, each for
    /// --duration-s (--quick: 5 s): peak and final RSS of the server
    /// process and a fresh client's p99; exit 1 when a target is missed
    /// (peak < 512 MB, final within 20% of the start, p99 < 100 ms).
    Soak,
    /// The model checker (`reqkey model check`, --threads, default 2) on
    /// the default world, the default without reductions, `--retries 2`
    /// and `--twins 1`: unique and total states, depth, wall clock, CPU
    /// seconds, states/s, peak RSS (--quick: the default world only, a
    /// second). Exit 1 when a check does not pass.
    Model,
    /// A fresh client's `GET /health` every 100 ms while --heads
    /// connections (default 400) hold half-sent request heads, reopened
    /// when closed, against `reqkey serve store`, `serve agent` and
    /// `reqkey proxy` (--server), for --duration-s (default 30; --quick:
    /// 3): median, p99 and max latency; exit 1 when the p99 is 100 ms or
    /// more or a probe failed (issue 39).
    Heads,
    /// The fuzz pass's detection: every built-in broken variant (of
    /// --level, default store and agent; --target: those whose name holds
    /// it) fuzzed in process with up to --max-cases programs on --seeds
    /// seeds from --seed, and the correct references; the programs to the
    /// first failure, and the curve certify's default is chosen from
    /// (docs/fuzz.md). Exit 1 when a correct reference is flagged.
    Fuzz,
    /// The catch rate per certification of a check-then-set race of a set
    /// window (`broken-idem:race-window-<N>us`, --window-us, default every
    /// calibrated one): one certification's fuzz pass (the battery and
    /// --fuzz-cases programs) per seed (--seeds from --seed), its bursts
    /// released behind a barrier (plain) and with their last bytes
    /// together (synchronised), side by side; the correct reference too
    /// (exit 1 when it is flagged or a trial has no verdict; --quick leaves
    /// it out). The curve of docs/fuzz.md.
    RaceWindow,
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    #[arg(value_enum, default_value_t = BenchKind::All)]
    pub kind: BenchKind,
    /// Independent runs of the race scenarios (race benchmark).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub runs: u32,
    /// The target: the racy store of the race benchmark (also a second
    /// checker workload; default broken-memory:holder-read-outside-commit),
    /// or the store of the lookup benchmark (any store target,
    /// store+http:// included; without it, the reference backends); for
    /// fuzz, the variants whose name holds one of these (comma-separated).
    #[arg(long)]
    pub target: Option<String>,
    /// lookup without --target: the reference backends to measure
    /// (repeatable; default all four). Postgres and Redis come from
    /// REQKEY_POSTGRES_URL and REQKEY_REDIS_URL (default: the local
    /// services).
    #[arg(long = "backend", value_enum)]
    pub backends: Vec<Backend>,
    /// Runs in the small store of the lookup benchmark (the ratio's base).
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub small: u64,
    /// Runs in the large store of the lookup benchmark (default 1,000,000
    /// on the reference backends, seeded in bulk; 100,000 with --target,
    /// seeded through commitRunStart: over HTTP expect a few seconds per
    /// 10,000 runs).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub large: Option<u64>,
    /// Keyed runs per seeded session (lookup benchmark). A scan within one
    /// session only shows when this grows with --large.
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub runs_per_session: u64,
    /// Measured lookups in each store (lookup benchmark; on the reference
    /// backends, rounds of one read of each of the four series).
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub samples: u64,
    /// Exit 1 when the lookup ratio (large median / small median; on the
    /// reference backends the ratio of ratios) is above this: a gate.
    #[arg(long)]
    pub max_ratio: Option<f64>,
    /// Bound on every single call to the target in the lookup benchmark
    /// (on the reference backends: on opening a store and on each read;
    /// seeding and cleanup have 600 s), in milliseconds.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub timeout_ms: u64,
    /// Scenario files or directories of the race benchmark (those tagged
    /// `race`). Default: the embedded store suite.
    #[arg(long)]
    pub scenarios: Option<PathBuf>,
    /// First seed (run k uses seed + k; failover: picks the killed replica).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The store the replicas of the failover test share (default: the
    /// local Postgres, postgres://postgres@127.0.0.1:5432/test).
    #[arg(long)]
    pub store: Option<String>,
    /// Replicas of the failover test.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(2..=8))]
    pub replicas: u16,
    /// Keyed requests of the failover test, each in its own session.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub requests: u32,
    /// Requests in flight at once (failover test).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub concurrency: u16,
    /// The lease of every replica, in ms (failover test, `--lease-ms`).
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(30..=600_000))]
    pub lease_ms: u64,
    /// How long each run executes, in ms (failover test).
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(0..=60_000))]
    pub run_ms: u64,
    /// Answered requests before the kill (failover test; default a third).
    #[arg(long)]
    pub kill_after: Option<u32>,
    /// lin: only the 1,000-operation histories, each checked once; lookup
    /// on the reference backends: 100 vs 10,000 runs in sessions of 100,
    /// 200 samples; model: the default world only (CI's check that the
    /// benchmarks work; seconds).
    #[arg(long)]
    pub quick: bool,
    /// fuzz: one level only.
    #[arg(long, value_parser = ["store", "agent"])]
    pub level: Option<String>,
    /// race-window: the windows between check and set, in µs (repeatable;
    /// default every calibrated one, 1 to 10000).
    #[arg(long = "window-us")]
    pub windows_us: Vec<u32>,
    /// race-window: each trial's app a `reqkey serve idem` process of its
    /// own, certified over loopback (default: in process).
    #[arg(long)]
    pub process: bool,
    /// race-window: generated programs of each certification's fuzz pass
    /// after the battery (certify's default).
    #[arg(long, default_value_t = crate::run::fuzz::pass::DEFAULT_CERTIFY_FUZZ_CASES,
          value_parser = clap::value_parser!(u32).range(0..=100_000))]
    pub fuzz_cases: u32,
    /// fuzz, race-window: how many seeds, from --seed on.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=100))]
    pub seeds: u64,
    /// fuzz: the most programs per variant and seed.
    #[arg(long, default_value_t = 512, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub max_cases: u32,
    /// fuzz: variants fuzzed at once.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub jobs: u16,
    /// Checker threads (model benchmark).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub threads: u16,
    /// Seconds of load on each server (soak: default 600, --quick: 5;
    /// heads: default 30, --quick: 3).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=3_600))]
    pub duration_s: Option<u64>,
    /// soak, heads: the `reqkey` binary whose servers are loaded (default
    /// this one), to measure an older build with the same load.
    #[arg(long, value_name = "PATH")]
    pub server_exe: Option<PathBuf>,
    /// Half-sent request heads held open at once (heads).
    #[arg(long, default_value_t = 400, value_parser = clap::value_parser!(u64).range(1..=5_000))]
    pub heads: u64,
    /// Seconds between the end of the load and the final RSS, and between
    /// the warm-up and the start RSS (soak; --quick: 12 and 0; past the
    /// 10 s write and head timeouts).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(0..=600))]
    pub settle_s: u64,
    /// The servers to soak or measure (soak, heads; repeatable; default
    /// all three).
    #[arg(long = "server", value_enum)]
    pub servers: Vec<SoakServer>,
    /// lin: also write each history it checks into DIR (created), in the
    /// JSON form `reqkey check history` reads, one file per history named
    /// by its operations, clients, sessions, seed and store
    /// (`lin-ops10000-clients16-sessions1-seed1-not.json`), so that another
    /// checker (Porcupine, docs/benchmarks.md) judges the same
    /// operations. Each file's path is printed before its figures.
    #[arg(long, value_name = "DIR")]
    pub export_histories: Option<PathBuf>,
    /// lin: instead of the fixed set, one workload of this many
    /// operations (a correct store and one that skips the key rule once),
    /// over `--lin-sessions` sessions from `--lin-clients` clients: a
    /// generator of large histories (with --export-histories, e.g. the
    /// 1M-operation, 2,560-session one of docs/benchmarks.md).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub lin_ops: Option<u64>,
    /// lin, with --lin-ops: the sessions.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub lin_sessions: u64,
    /// lin, with --lin-ops: the clients.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub lin_clients: u64,
}

/// `reqkey bench soak`: prints each server's figures; exit 1 when a
/// target is missed.
async fn soak_bench(args: &BenchArgs) -> ExitCode {
    let cfg = SoakConfig {
        duration_s: if args.quick {
            5
        } else {
            args.duration_s.unwrap_or(600)
        },
        settle_s: if args.quick { 12 } else { args.settle_s },
        start_settle_s: if args.quick { 0 } else { args.settle_s },
        servers: if args.servers.is_empty() {
            SoakServer::ALL.to_vec()
        } else {
            args.servers.clone()
        },
        exe: args.server_exe.clone(),
    };
    // --quick checks that the benchmark works: its figures (seconds of
    // load, often a debug build) are not judged, only the honest answers.
    let quick = args.quick;
    let mut missed = false;
    let result = soak_benchmark(&cfg, |f| {
        println!("{f}");
        missed |= if quick { !f.honest_ok() } else { !f.all_ok() };
    })
    .await;
    match result {
        Err(e) => harness_error(e),
        Ok(_) if missed => ExitCode::from(1),
        Ok(_) => ExitCode::SUCCESS,
    }
}

/// `reqkey bench heads`: prints each server's figures; exit 1 when the
/// goal is missed (not with --quick, whose figures are not judged).
async fn heads_bench(args: &BenchArgs) -> ExitCode {
    let cfg = HeadsConfig {
        heads: usize::try_from(args.heads).unwrap_or(400),
        duration_s: if args.quick {
            3
        } else {
            args.duration_s.unwrap_or(30)
        },
        servers: if args.servers.is_empty() {
            SoakServer::ALL.to_vec()
        } else {
            args.servers.clone()
        },
        exe: args.server_exe.clone(),
    };
    let quick = args.quick;
    let mut missed = false;
    let result = heads_benchmark(&cfg, |f| {
        println!("{f}");
        missed |= if quick { f.probes == 0 } else { !f.ok() };
    })
    .await;
    match result {
        Err(e) => harness_error(e),
        Ok(_) if missed => ExitCode::from(1),
        Ok(_) => ExitCode::SUCCESS,
    }
}

/// `reqkey bench lookup`: prints the figures; exit 1 only when
/// `--max-ratio` is given and exceeded.
async fn lookup_bench(args: &BenchArgs) -> ExitCode {
    let Ok(samples) = usize::try_from(args.samples) else {
        return harness_error("--samples does not fit this machine");
    };
    if args.max_ratio.is_some_and(|r| !(r.is_finite() && r > 0.0)) {
        return harness_error("--max-ratio must be a positive number");
    }
    let Some(target) = args.target.as_deref() else {
        return backends_lookup_bench(args, samples).await;
    };
    let cfg = LookupConfig {
        small_runs: args.small,
        large_runs: args.large.unwrap_or(100_000),
        runs_per_session: args.runs_per_session,
        samples,
        seed: args.seed,
        call_timeout_ms: args.timeout_ms,
    };
    match lookup_benchmark(target, &cfg).await {
        Ok(f) => {
            println!("{f}");
            match args.max_ratio {
                Some(max) if f.ratio() > max => {
                    println!(
                        "the lookup grows with the store: ratio {:.2}x is above --max-ratio {max}",
                        f.ratio()
                    );
                    ExitCode::from(1)
                }
                _ => ExitCode::SUCCESS,
            }
        }
        Err(e) => harness_error(e),
    }
}

/// `reqkey bench failover`: prints the figures; exit 1 unless clean.
async fn failover_bench(args: &BenchArgs) -> ExitCode {
    let requests = args.requests as usize;
    let cfg = FailoverConfig {
        store: args
            .store
            .clone()
            .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/test".into()),
        replicas: usize::from(args.replicas),
        requests,
        concurrency: usize::from(args.concurrency),
        lease_ms: args.lease_ms,
        run_ms: args.run_ms,
        kill_after: args.kill_after.map_or(requests / 3, |k| k as usize),
        call_timeout_ms: args.timeout_ms,
        seed: args.seed,
    };
    match failover_benchmark(&cfg).await {
        Ok(f) => {
            println!("{f}");
            if f.clean() && f.kills == 1 {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => harness_error(e),
    }
}

/// `reqkey bench lookup` without `--target`: the reference backends,
/// each beside its primitive; exit 1 only when `--max-ratio` is given and
/// a ratio of ratios is above it.
async fn backends_lookup_bench(args: &BenchArgs, samples: usize) -> ExitCode {
    // An environment URL may carry a password: remembered, so no output shows it.
    let env_or = |name: &str, default: &str| {
        let value = std::env::var(name).unwrap_or_else(|_| default.into());
        crate::secrets::register_target(&value);
        value
    };
    let (small, large, per, samples) = if args.quick {
        (100, 10_000, 100, 200)
    } else {
        (
            args.small,
            args.large.unwrap_or(1_000_000),
            args.runs_per_session,
            samples,
        )
    };
    let cfg = BackendLookupConfig {
        backends: if args.backends.is_empty() {
            Backend::ALL.to_vec()
        } else {
            args.backends.clone()
        },
        small_runs: small,
        large_runs: large,
        runs_per_session: per,
        samples,
        seed: args.seed,
        call_timeout_ms: args.timeout_ms,
        postgres_url: env_or(
            "REQKEY_POSTGRES_URL",
            "postgres://postgres@127.0.0.1:5432/test",
        ),
        redis_url: env_or("REQKEY_REDIS_URL", "redis://127.0.0.1:6379/"),
    };
    println!(
        "getRunByRequestKey with {small} and {large} runs beside each backend's own primitive \
         (seed {}): growth = large median / small median; ratio of ratios = the lookup's growth \
         / the primitive's",
        args.seed
    );
    let mut over = false;
    let result = backend_lookup_benchmark(&cfg, |f| {
        println!("{f}");
        if let Some(max) = args.max_ratio {
            if f.ratio_of_ratios() > max {
                println!(
                    "  ^ ratio of ratios {:.2}x is above --max-ratio {max}",
                    f.ratio_of_ratios()
                );
                over = true;
            }
        }
    })
    .await;
    if let Err(e) = result {
        return harness_error(e);
    }
    if !args.quick {
        println!(
            "floor    one dependent random read: {:.0} ns in 1 MiB (cache), {:.0} ns in 512 MiB (DRAM)",
            chase_ns(1 << 20, args.seed),
            chase_ns(512 << 20, args.seed)
        );
    }
    if over {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

pub fn bench_command(args: BenchArgs) -> ExitCode {
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => return harness_error(format!("cannot start the runtime: {e}")),
    };
    if args.kind == BenchKind::Lin {
        return lin_bench(&args);
    }
    if args.kind == BenchKind::Model {
        return model_bench(&args);
    }
    if args.kind == BenchKind::Fuzz {
        return fuzz_bench(&args);
    }
    if args.kind == BenchKind::RaceWindow {
        drop(rt);
        return race_window_bench(&args);
    }
    if args.export_histories.is_some() {
        return harness_error("--export-histories is an option of `reqkey bench lin` only");
    }
    rt.block_on(async move {
        if args.kind == BenchKind::Lookup {
            return lookup_bench(&args).await;
        }
        if args.kind == BenchKind::Failover {
            return failover_bench(&args).await;
        }
        if args.kind == BenchKind::Soak {
            return soak_bench(&args).await;
        }
        if args.kind == BenchKind::Heads {
            return heads_bench(&args).await;
        }
        let racy = args
            .target
            .as_deref()
            .unwrap_or("broken-memory:holder-read-outside-commit");
        if matches!(args.kind, BenchKind::All | BenchKind::Checker) {
            // A linearizable history (memory), then one that is not.
            for target in ["memory", racy] {
                match checker_benchmark(target, default_workload(args.seed)).await {
                    Ok(f) => println!("{f}"),
                    Err(e) => return harness_error(e),
                }
            }
        }
        if matches!(args.kind, BenchKind::All | BenchKind::Race) {
            let loaded = match &args.scenarios {
                Some(path) => reqkey_scenario::load_paths(std::slice::from_ref(path))
                    .map_err(|e| e.to_string()),
                None => crate::run::suite::embedded_suite(crate::targets::Level::Store)
                    .map(|(_, s)| s)
                    .map_err(|e| e.to_string()),
            };
            let scenarios = match loaded {
                Ok(s) => filter_by_tags(s, &["race".to_owned()], &[]),
                Err(e) => return harness_error(e),
            };
            if scenarios.is_empty() {
                return harness_error("no scenario tagged `race` to run");
            }
            match detection_benchmark(racy, &scenarios, args.runs, args.seed).await {
                Ok(f) => println!("{f}"),
                Err(e) => return harness_error(e),
            }
        }
        ExitCode::SUCCESS
    })
}

/// `reqkey bench fuzz`: the tables of docs/fuzz.md; exit 1 when a correct
/// reference was flagged (or could not be judged).
fn fuzz_bench(args: &BenchArgs) -> ExitCode {
    let record = match crate::cmd::coverage::suite_record(None) {
        Ok(r) => r,
        Err(e) => return harness_error(e),
    };
    let levels = match args.level.as_deref() {
        Some(l) => Level::parse(l).into_iter().collect(),
        None => vec![Level::Store, Level::Agent],
    };
    let config = FuzzBenchConfig {
        levels,
        seeds: (args.seed..args.seed.saturating_add(args.seeds)).collect(),
        max_cases: args.max_cases,
        jobs: usize::from(args.jobs),
        only: args.target.clone(),
        call_timeout_ms: args.timeout_ms,
    };
    let started = std::time::Instant::now();
    let report = fuzz_benchmark(&config, &record);
    print!("{}", report.render());
    println!(
        "(`reqkey bench fuzz --seeds {} --max-cases {}`: {:.0} s wall)",
        args.seeds,
        args.max_cases,
        started.elapsed().as_secs_f64()
    );
    if report.has_problem() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// `reqkey bench race-window`: the catch rate of each window, plain and
/// synchronised; exit 1 when the reference was flagged or a trial had no
/// verdict.
fn race_window_bench(args: &BenchArgs) -> ExitCode {
    use crate::bench::race_window::{header, race_window_benchmark, RaceWindowConfig};
    let cfg = RaceWindowConfig {
        windows_us: if args.windows_us.is_empty() {
            reqkey_reference::idem::RaceWindow::all_us()
        } else {
            args.windows_us.clone()
        },
        seeds: (args.seed..args.seed.saturating_add(args.seeds)).collect(),
        cases: args.fuzz_cases,
        call_timeout_ms: args.timeout_ms,
        reference: !args.quick,
        process: args.process,
    };
    println!(
        "the fuzz pass of one certification (the battery, then {} programs) per seed, seeds {}..={}, against broken-idem:race-window-<N>us; caught / certifications",
        cfg.cases,
        args.seed,
        args.seed.saturating_add(args.seeds).saturating_sub(1)
    );
    println!("{}", header());
    let started = std::time::Instant::now();
    let mut problem = false;
    let result = race_window_benchmark(&cfg, |row| {
        problem |= row.has_problem();
        println!("{row}");
    });
    if let Err(e) = result {
        return harness_error(e);
    }
    println!(
        "(`reqkey bench race-window --seeds {} --fuzz-cases {}`: {:.0} s wall)",
        args.seeds,
        args.fuzz_cases,
        started.elapsed().as_secs_f64()
    );
    if problem {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// `reqkey bench model`: one line per world; exit 1 when a check does
/// not pass (a violated property or an unreached `sometimes` one).
fn model_bench(args: &BenchArgs) -> ExitCode {
    let mut failed = false;
    for case in model_cases(args.quick) {
        let f = model_benchmark(&case, usize::from(args.threads));
        println!("{f}");
        failed |= !f.passed;
    }
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// `reqkey bench lin`: every history's figures; exit 1 when a verdict is
/// not the expected one, 2 when a budget ran out.
fn lin_bench(args: &BenchArgs) -> ExitCode {
    let mut mismatch = false;
    let mut unknown = false;
    if let Some(dir) = &args.export_histories {
        if let Err(e) = std::fs::create_dir_all(dir) {
            return harness_error(format!("cannot create {}: {e}", dir.display()));
        }
    }
    let workloads = match args.lin_ops {
        Some(ops) => lin_workload_of(ops, args.lin_sessions, args.lin_clients, args.seed),
        None => lin_workloads(args.quick, args.seed),
    };
    for (w, store) in workloads {
        if let Some(dir) = &args.export_histories {
            match export_lin_history(dir, &w, store) {
                Ok(path) => println!("history: {}", path.display()),
                Err(e) => return harness_error(e),
            }
        }
        let repeats = if args.quick || w.ops_total > 10_000 {
            1
        } else {
            5
        };
        // Many sessions: on one thread too, to show what the parallel
        // check of partitions buys.
        let threads: &[usize] = if w.sessions > 1 { &[1, 0] } else { &[0] };
        for &t in threads {
            let f = lin_benchmark(&w, store, repeats, t);
            println!("{f}");
            match f.linearizable {
                None => unknown = true,
                Some(l) if l != f.expected_linearizable() => {
                    println!("  ^ the verdict is not the expected one");
                    mismatch = true;
                }
                Some(_) => {}
            }
        }
    }
    if mismatch {
        return ExitCode::from(1);
    }
    if unknown {
        return harness_error("a history was not decided within the default budget");
    }
    ExitCode::SUCCESS
}
