//! `reqkey fuzz`: generated programs of store operations against a store
//! target and the sequential spec (the engine is `run::fuzz::store`); agent
//! targets go to `cmd/fuzz_agent.rs` (engine `run::fuzz::agent`), idem
//! targets to `cmd/fuzz_idem.rs` (engine `run::fuzz::idem`).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use crate::cmd::exit::{fresh_seed, harness_error};
use crate::cmd::runtime::runtime;
use crate::run::runner::RunConfig;
use crate::targets::spec::open_target;
use crate::targets::{Level, TargetOptions};

#[derive(Debug, Args)]
pub struct FuzzArgs {
    /// The store, agent server or idem app to fuzz (see "Targets" below).
    #[arg(long, short, default_value = "memory")]
    pub target: String,
    /// Programs to generate.
    /// (Agent targets: 256 is long; certification runs a few dozen.)
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub cases: u32,
    /// The seed of the generated programs (printed on failure; reproduces them).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Also write the shrunk failing scenario to this file (the first
    /// violation's; each other one's beside it as FILE.2.yaml,
    /// FILE.3.yaml, ...).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Bound on every single call to the target, in milliseconds.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub timeout_ms: u64,
    /// An agent target's profile, as `run --profile` takes it (default:
    /// what its `/health` declares).
    #[arg(long)]
    pub profile: Option<String>,
    #[command(flatten)]
    pub scale: crate::cmd::fuzz_scale::ScaleArgs,
    #[command(flatten)]
    pub link: crate::cmd::judging::AccessArgs,
}

pub fn fuzz_command(args: FuzzArgs) -> ExitCode {
    use crate::run::fuzz::store::{self as fuzz, FuzzOptions, FuzzOutcome};
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => return harness_error(format!("cannot start the runtime: {e}")),
    };
    // Drawn before anything is sent: every request of the run says it.
    let seed = args.seed.unwrap_or_else(fresh_seed);
    crate::targets::user_agent::choose(seed);
    let link = match args.link.link() {
        Ok(link) => link,
        Err(e) => return harness_error(e),
    };
    let opts = TargetOptions {
        call_timeout_ms: args.timeout_ms,
        link,
        ..TargetOptions::default()
    };
    let target = match rt.block_on(open_target(&args.target, opts)) {
        Ok(t) => t,
        Err(e) => return harness_error(e),
    };
    if target.level() == Level::Idem {
        if args.profile.is_some() {
            return harness_error(
                "--profile: an idem app's profile is declared by its /.reqkey/health",
            );
        }
        return crate::cmd::fuzz_idem::fuzz_idem_command(
            &rt,
            target,
            args.cases,
            args.timeout_ms,
            args.out.as_deref(),
            seed,
            args.scale,
        );
    }
    if target.level() == Level::Agent {
        return crate::cmd::fuzz_agent::fuzz_agent_command(
            &rt,
            target,
            &crate::cmd::fuzz_agent::AgentFuzzArgs {
                cases: args.cases,
                timeout_ms: args.timeout_ms,
                profile: args.profile.clone(),
                out: args.out.clone(),
                scale: args.scale,
            },
            seed,
        );
    }
    let cfg = RunConfig::new(seed);
    let opts = FuzzOptions {
        cases: args.cases,
        seed,
        namespace: format!("{}.fuzz", cfg.namespace),
        target_name: target.describe(),
        lin_budget_steps: reqkey_check::lin::DEFAULT_BUDGET_STEPS,
        call_timeout_ms: args.timeout_ms,
        max_shrink_iters: 4_096,
        batches: true,
        every: true,
    };
    println!(
        "reqkey fuzz: {} programs against {} (seed {seed})",
        args.cases,
        target.describe()
    );
    let probes = crate::run::fuzz::scale::ScaleProbes {
        target: std::sync::Arc::clone(&target),
        profile: reqkey_model::vocab::Profile::default(),
        idem: None,
        patience: args.scale.patience,
        call_timeout_ms: args.timeout_ms,
        namespace: format!("{}.fuzz", cfg.namespace),
        keys: args.scale.capacity_keys,
    };
    let (outcome, scale) =
        crate::cmd::fuzz_scale::around(&rt, &probes, || fuzz::fuzz(&rt, target, &opts));
    let code = match outcome {
        FuzzOutcome::Passed { cases } => {
            println!("{cases} programs passed");
            ExitCode::SUCCESS
        }
        FuzzOutcome::Failed(f) => crate::cmd::fuzz_idem::failed_exit(
            f.seed,
            &f.violations,
            f.stopped.as_deref(),
            args.out.as_deref(),
        ),
        FuzzOutcome::Error(e) => harness_error(e),
    };
    crate::cmd::fuzz_scale::combined(code, crate::cmd::fuzz_scale::report(&scale))
}
