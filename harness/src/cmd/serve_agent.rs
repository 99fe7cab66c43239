//! `reqkey serve agent`: the reference agent server as a process.
//!
//! It exists so that the agent corpus can be pointed at a server over a
//! real socket (`reqkey run --target http://127.0.0.1:PORT`) exactly as at
//! an independent implementation, and so implementers have a reference to
//! compare against. It prints `listening on http://ADDR` once bound (with
//! `--listen 127.0.0.1:0`, that line is how a script learns the port) and
//! shuts down gracefully on SIGINT or SIGTERM: open chat streams end,
//! in-flight requests finish, then the process exits 0.

use std::io::Write as _;
use std::net::SocketAddr;
use std::process::ExitCode;

use clap::Args;
use reqkey_reference::agent::{serve, ConcurrentEntry, Executor, ExecutorConfig};
use reqkey_reference::store::StoreSpec;

#[derive(Debug, Args)]
pub struct ServeAgentArgs {
    /// The session store behind the server (memory, sqlite:PATH,
    /// postgres://..., redis://..., redis+cluster://...).
    #[arg(long, default_value = "memory")]
    pub store: String,
    /// Where to listen (port 0: an ephemeral port, printed on start).
    #[arg(long, default_value = "127.0.0.1:7070")]
    pub listen: SocketAddr,
    /// Run an executor that does not record request keys: keys are
    /// ignored with one `request_key.ignored` warning, and /health says
    /// `supportsRequestKey: false`.
    #[arg(long)]
    pub no_request_keys: bool,
    /// What a new entry does to a running current run (declared in
    /// `/health` as `concurrentEntry`; SPEC 7 profiles).
    #[arg(long, default_value = "reject", value_parser = ["reject", "interrupt_previous"])]
    pub policy: String,
    /// The lease on a running run, in ms (SPEC 5, [[lease.length]]): a run
    /// whose replica stops renewing it is `interrupted` this long after.
    #[arg(long, default_value_t = reqkey_reference::agent::LEASE_MS,
          value_parser = clap::value_parser!(u64).range(30..=600_000))]
    pub lease_ms: u64,
    /// Admit a session's entries one at a time and declare `entryWaitMs`
    /// in `/health` (SPEC 7): a keyed entry waits this long for another
    /// entry's admission, a keyless one is answered busy at once. Without
    /// it, no admission claim (the store's CAS and key rule arbitrate).
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub entry_wait_ms: Option<u64>,
    /// Serve a variant of the reference server instead (the names of
    /// `reference-agent:VARIANT`, `reqkey targets` lists them): another
    /// profile, or a deliberately broken executor, as a process the
    /// harness can kill and restart (`--start`).
    #[arg(long, value_name = "VARIANT")]
    pub variant: Option<String>,
}

fn error(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("reqkey: error: {message}");
    ExitCode::from(2)
}

/// Runs `reqkey serve agent` until SIGINT/SIGTERM; returns the exit code.
pub async fn serve_agent(
    args: ServeAgentArgs,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> ExitCode {
    let store = match StoreSpec::parse(&args.store) {
        Ok(spec) => match spec.open().await {
            Ok(s) => s,
            Err(e) => return error(e),
        },
        Err(e) => return error(e),
    };
    let config = match args.variant.as_deref() {
        None => ExecutorConfig {
            supports_request_key: !args.no_request_keys,
            policy: ConcurrentEntry::parse(&args.policy).unwrap_or_default(),
            lease_ms: args.lease_ms,
            entry_wait_ms: args.entry_wait_ms,
            ..ExecutorConfig::default()
        },
        Some(name) => {
            let Some(variant) = crate::targets::reference_agent::AgentVariant::parse(name) else {
                return error(format!(
                    "--variant {name}: no such variant of the reference agent (`reqkey targets` lists them)"
                ));
            };
            if args.no_request_keys || args.policy != "reject" {
                return error(
                    "--variant fixes the profile: it takes neither --no-request-keys nor --policy",
                );
            }
            let mut config = crate::targets::reference_agent::reference_config(Some(variant));
            config.lease_ms = args.lease_ms;
            if args.entry_wait_ms.is_some() {
                config.entry_wait_ms = args.entry_wait_ms;
            }
            config
        }
    };
    let executor = Executor::new(store, config);
    let listener = match reqkey_reference::http_serve::bind(args.listen).await {
        Ok(l) => l,
        Err(e) => return error(format!("cannot listen on {}: {e}", args.listen)),
    };
    let addr = listener
        .local_addr()
        .map_or_else(|_| args.listen.to_string(), |a| a.to_string());
    println!("listening on http://{addr}");
    let _ = std::io::stdout().flush();
    match serve(executor, listener, shutdown).await {
        Ok(()) => {
            eprintln!("reqkey: agent server stopped");
            ExitCode::SUCCESS
        }
        Err(e) => error(format!("the server failed: {e}")),
    }
}
