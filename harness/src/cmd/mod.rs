//! The `reqkey` command line: one file per command; this file only
//! declares them and dispatches a parsed [`Cli`].
//!
//! Exit codes (the contract CI scripts against):
//!
//! | code | meaning |
//! |---|---|
//! | 0 | every scenario passed |
//! | 1 | a scenario failed: the target does not conform |
//! | 2 | the harness could not judge: bad YAML, bad arguments, target unreachable, timeout |
//!
//! With `--expected-failures`, a listed scenario that fails keeps the run
//! at 0, and a listed scenario that passes makes it 1.

pub mod bench;
pub mod certify;
pub mod check;
pub mod coverage;
pub mod exit;
pub mod explain;
pub mod fields;
pub mod fuzz;
pub mod fuzz_agent;
pub mod fuzz_idem;
pub mod fuzz_scale;
pub mod interrupt;
pub mod interrupt_reports;
pub mod judging;
pub mod model;
pub mod outputs;
pub mod proxy;
pub mod run;
pub mod runtime;
pub mod serve;
pub mod serve_agent;
pub mod serve_idem;
pub mod suite;
pub mod targets;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use self::bench::BenchArgs;
use self::certify::CertifyArgs;
use self::coverage::CoverageArgs;
use self::exit::{target_help, EXIT_CODES};
use self::fuzz::FuzzArgs;
use self::run::RunArgs;

/// reqkey: certify request-key stores, agent servers and Idempotency-Key
/// middleware against the spec.
#[derive(Debug, Parser)]
#[command(name = "reqkey", version, after_help = EXIT_CODES)]
#[command(
    long_about = "reqkey specifies, model-checks and certifies request keys: idempotency \
keys that make a retried agent-run request attach to, replay or be refused by the original run \
instead of running twice. It judges three levels: a store (reqkey-store/1), an agent server \
(reqkey-agent/1, its X-Helix-Request-Key header) and an app behind an HTTP Idempotency-Key \
layer (reqkey-idem/1, the IETF draft's header). `reqkey run` drives YAML scenarios against a \
target of any level and exits 0 only if every scenario passes; `reqkey certify` runs the whole \
suite of the target's level and writes the certificate."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// The most resident memory this process may hold while it reads an
    /// input, in bytes (any command; Linux, read from /proc): a history
    /// (`check history`: every 256 KiB read and 65,536 search steps), a
    /// shard's results (`certify merge`: at each shard), a target's answer
    /// (every 256 KiB of it). Past it the reader stops and the command
    /// exits 2 naming this bound, instead of being ended by the system's
    /// own cap. (An API map has a fixed bound: 256 KiB, YAML aliases
    /// limited.) Default 4 GiB (4294967296); at least 32 MiB.
    #[arg(long, global = true, value_name = "BYTES",
          default_value_t = crate::memory::DEFAULT_MAX_MEMORY_BYTES,
          value_parser = crate::memory::parse_ceiling)]
    pub max_memory_bytes: u64,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run scenarios against a target.
    #[command(after_help = target_help())]
    Run(RunArgs),
    /// Model-check the keyed-entry protocol (stateright).
    Model {
        #[command(subcommand)]
        cmd: model::ModelCommand,
    },
    /// Serve a reference implementation over its wire protocol.
    #[command(subcommand)]
    Serve(serve::ServeCommand),
    /// Certify a target: the whole suite of its level, nothing skipped;
    /// writes certificate.md, report.html, junit.xml and results.json.
    #[command(after_help = target_help())]
    Certify(CertifyArgs),
    /// Print the JSON Schema of the scenario format.
    Schema,
    /// Judge a recorded history from a file: `reqkey check history FILE`
    /// (reqkey's JSON form or Jepsen's events; exit 0 linearizable, 1 not,
    /// 2 bad input).
    #[command(subcommand)]
    Check(check::CheckCommand),
    /// Clause coverage: which clause of spec/SPEC.md has a scenario that can
    /// fail on it, per level; exit 1 on a gap, 2 on bad input.
    Coverage(CoverageArgs),
    /// A clause of spec/SPEC.md: its statement, where it is certified, and
    /// the scenarios that check it (reports name clauses by id).
    Explain(explain::ExplainArgs),
    /// Model-based fuzzing at the target's level: random programs (store
    /// operations, or agent requests, with concurrent batches) against the
    /// target and the spec's sequential model; a failure is shrunk and
    /// printed as a YAML scenario.
    #[command(after_help = target_help())]
    Fuzz(FuzzArgs),
    /// Benchmarks: the linearizability checker, race detection, and the
    /// key lookup of any store.
    Bench(BenchArgs),
    /// Every form `--target` takes and every built-in broken variant, with
    /// the scenarios each fails.
    Targets,
    /// The scenario suite built into this binary: `info`, `export DIR`.
    #[command(subcommand)]
    Suite(suite::SuiteCommand),
    /// A fault-injecting proxy between a client and an agent server that
    /// judges the client's use of request keys (SPEC 9): drops, delays,
    /// 502/503 and duplicates from a seeded plan; then the client verdict.
    #[command(after_help = proxy::PROXY_HELP)]
    Proxy(proxy::ProxyArgs),
    /// Internal: the watchdog a `--start` run leaves behind, which stops
    /// what the run started when the run ends by any path (even SIGKILL).
    #[command(name = "__watchdog", hide = true)]
    Watchdog {
        tag: String,
        /// The judge's pid: also stop every process it had as a
        /// descendant (marked or not) when it ends.
        judge: Option<i32>,
    },
}

/// Parses the command line; a usage error is printed and exit 2, `--help`
/// and `--version` exit 0.
pub fn parse() -> Result<Cli, ExitCode> {
    Cli::try_parse().map_err(|e| {
        let _ = e.print();
        if e.use_stderr() {
            ExitCode::from(2)
        } else {
            ExitCode::SUCCESS
        }
    })
}

/// Runs a parsed command; returns the process exit code.
pub fn dispatch(cli: Cli) -> ExitCode {
    // This process is the judge: whatever `--start` spawns and orphans is
    // its own to stop, marked or not (`targets::reap`).
    crate::targets::reap::own_every_descendant();
    crate::memory::set_ceiling(cli.max_memory_bytes);
    match cli.command {
        Command::Run(args) => run::run_command(args),
        Command::Model { cmd } => model::run(cmd),
        Command::Certify(args) => certify::certify_entry(args),
        Command::Schema => {
            println!("{}", reqkey_scenario::schema::scenario_schema_json());
            ExitCode::SUCCESS
        }
        Command::Check(command) => check::run(command),
        Command::Coverage(args) => coverage::coverage_command(args),
        Command::Explain(args) => explain::explain_command(args),
        Command::Fuzz(args) => fuzz::fuzz_command(args),
        Command::Bench(args) => bench::bench_command(args),
        Command::Serve(command) => serve::run(command),
        Command::Suite(command) => suite::run(command),
        Command::Targets => targets::targets_command(),
        Command::Proxy(args) => proxy::proxy_command(args),
        Command::Watchdog { tag, judge } => crate::targets::reap::watchdog_main(&tag, judge),
    }
}
