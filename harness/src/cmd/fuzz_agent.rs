//! `reqkey fuzz` on an agent target: its profile resolved, the agent fuzzer run, the result printed.

use std::process::ExitCode;
use std::sync::Arc;

use crate::cmd::exit::harness_error;
use crate::run::fuzz::agent::{fuzz_agent, AgentFuzzOptions, AgentFuzzOutcome};
use crate::run::runner::RunConfig;
use crate::targets::profile::{parse_profile_flag, resolve_profile};
use crate::targets::Target;

/// What `reqkey fuzz` passes on for an agent target.
#[derive(Debug, Clone)]
pub struct AgentFuzzArgs {
    pub cases: u32,
    pub timeout_ms: u64,
    pub profile: Option<String>,
    pub out: Option<std::path::PathBuf>,
    /// The probes at scale (`--patience`, `--capacity-keys`).
    pub scale: crate::cmd::fuzz_scale::ScaleArgs,
}

pub fn fuzz_agent_command(
    rt: &tokio::runtime::Runtime,
    target: Arc<dyn Target>,
    args: &AgentFuzzArgs,
    seed: u64,
) -> ExitCode {
    let stated = match args.profile.as_deref().map(parse_profile_flag).transpose() {
        Ok(p) => p,
        Err(e) => return harness_error(format!("--profile: {e}")),
    };
    let info = match rt.block_on(resolve_profile(target.as_ref(), stated, args.timeout_ms)) {
        Ok(info) => info,
        Err(e) => return harness_error(e.to_string()),
    };
    let cfg = RunConfig::new(seed);
    let opts = AgentFuzzOptions {
        cases: args.cases,
        seed,
        namespace: format!("{}.afz", cfg.namespace),
        target_name: target.describe(),
        profile: info.profile,
        call_timeout_ms: args.timeout_ms,
        max_shrink_iters: 512,
        every: true,
    };
    println!(
        "reqkey fuzz: {} agent programs against {} ({}; seed {seed})",
        args.cases,
        target.describe(),
        info.profile
    );
    let probes = crate::run::fuzz::scale::ScaleProbes {
        target: Arc::clone(&target),
        profile: info.profile,
        idem: None,
        patience: args.scale.patience,
        call_timeout_ms: args.timeout_ms,
        namespace: format!("{}.afz", cfg.namespace),
        keys: args.scale.capacity_keys,
    };
    let (outcome, scale) =
        crate::cmd::fuzz_scale::around(rt, &probes, || fuzz_agent(rt, target, &opts));
    let code = match outcome {
        AgentFuzzOutcome::Passed { cases } => {
            println!("{cases} programs passed");
            ExitCode::SUCCESS
        }
        AgentFuzzOutcome::Failed(f) => crate::cmd::fuzz_idem::failed_exit(
            f.seed,
            &f.violations,
            f.stopped.as_deref(),
            args.out.as_deref(),
        ),
        AgentFuzzOutcome::Error(e) => harness_error(e),
    };
    crate::cmd::fuzz_scale::combined(code, crate::cmd::fuzz_scale::report(&scale))
}
