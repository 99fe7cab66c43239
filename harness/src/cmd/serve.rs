//! `reqkey serve store|agent`: a reference store behind `reqkey-store/1`,
//! or the reference agent server (`crate::cmd::serve_agent`).
//!
//! The server itself is `reqkey_reference::store_server`; this module only
//! parses the arguments, opens the store (`--store`, the same forms as
//! `reqkey_reference::store::open`), binds `--listen`, prints the address
//! it serves on, and stops cleanly on Ctrl-C or SIGTERM. It exits 2 when the
//! store cannot be opened or the address cannot be bound.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use reqkey_reference::store::{StoreSpec, STORE_HELP};
use reqkey_reference::store_server;

fn store_help() -> String {
    format!("Stores (--store):\n{STORE_HELP}")
}

/// What `reqkey serve` serves.
#[derive(Debug, Subcommand)]
pub enum ServeCommand {
    /// A reference store over reqkey-store/1 (`GET /health`, `POST /rpc`).
    #[command(after_help = store_help())]
    Store(ServeStoreArgs),
    /// The reference agent server over reqkey-agent/1.
    #[command(after_help = store_help())]
    Agent(crate::cmd::serve_agent::ServeAgentArgs),
    /// The reference Idempotency-Key app over reqkey-idem/1 (SPEC 10).
    Idem(crate::cmd::serve_idem::ServeIdemArgs),
}

#[derive(Debug, Args)]
pub struct ServeStoreArgs {
    /// The store to serve (see "Stores" below).
    #[arg(long, default_value = "memory")]
    pub store: String,
    /// The address to listen on (`HOST:PORT`; port 0 picks a free one).
    #[arg(long, default_value = "127.0.0.1:7001")]
    pub listen: String,
}

/// Runs a `reqkey serve` subcommand until it is stopped.
pub fn run(command: ServeCommand) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(format!("cannot start the runtime: {e}")),
    };
    match command {
        ServeCommand::Store(args) => rt.block_on(serve_store(args)),
        ServeCommand::Agent(args) => {
            rt.block_on(crate::cmd::serve_agent::serve_agent(args, stop_signal()))
        }
        ServeCommand::Idem(args) => {
            rt.block_on(crate::cmd::serve_idem::serve_idem(args, stop_signal()))
        }
    }
}

fn fail(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("reqkey: error: {message}");
    ExitCode::from(2)
}

async fn serve_store(args: ServeStoreArgs) -> ExitCode {
    let spec = match StoreSpec::parse(&args.store) {
        Ok(spec) => spec,
        Err(e) => return fail(e),
    };
    let store = match spec.open().await {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    let listener = match reqkey_reference::http_serve::bind(&args.listen).await {
        Ok(l) => l,
        Err(e) => return fail(format!("cannot listen on {}: {e}", args.listen)),
    };
    let addr = match listener.local_addr() {
        Ok(a) => a,
        Err(e) => return fail(format!("cannot read the bound address: {e}")),
    };
    // The first stdout line is the address, so scripts can read it.
    println!("listening on http://{addr}");
    eprintln!(
        "reqkey: serving the {} store ({}) over {} on http://{addr}; target it with --target store+http://{addr}",
        store.backend(),
        spec,
        store_server::PROTOCOL
    );
    match store_server::serve(store, listener, stop_signal()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(format!("the server stopped: {e}")),
    }
}

/// Completes on Ctrl-C, or on SIGTERM where there is one.
pub async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}
