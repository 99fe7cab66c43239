//! `reqkey serve idem`: the reference `Idempotency-Key` app (`reqkey-idem/1`,
//! SPEC 10) as a process.
//!
//! The harness certifies it in process (`--target reference-idem`); this
//! command serves the same app over a real socket so that it can be
//! certified as `idem+http://ADDR` exactly as a wrapped library is, and
//! killed and restarted (`--start`). It prints `listening on
//! idem+http://ADDR` once bound and stops on SIGINT or SIGTERM.

use std::io::Write as _;
use std::net::SocketAddr;
use std::process::ExitCode;

use clap::Args;
use reqkey_reference::idem::{self, IdemConfig, IdemVariant};

use crate::targets::idem::IdemStorageSpec;

#[derive(Debug, Args)]
pub struct ServeIdemArgs {
    /// Where the middleware keeps keys: `memory` or `redis://HOST:PORT`.
    #[arg(long, default_value = "memory", value_parser = IdemStorageSpec::parse)]
    pub storage: IdemStorageSpec,
    /// Where to listen (port 0: an ephemeral port, printed on start).
    #[arg(long, default_value = "127.0.0.1:7080")]
    pub listen: SocketAddr,
    /// `expiryMs` to declare and honour (0: keys never expire).
    #[arg(long, default_value_t = idem::DEFAULT_EXPIRY_MS)]
    pub expiry_ms: u64,
    /// The profile: `default`, `wait` (duplicates in flight wait),
    /// `released` (an error answer frees the key), `optional` (a keyless
    /// request runs), `wait-released`, `long-lock`, `short-lock`,
    /// `no-expiry`, `loose`, `bytes`, `token`, `any`, `lenient`
    /// (docs/idempotency-key.md); or a
    /// deliberately broken middleware, `broken-idem:DEFECT[:VARIANT]`
    /// (`reqkey targets` lists them).
    #[arg(long, default_value = "default")]
    pub profile_variant: String,
}

fn error(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("reqkey: error: {message}");
    ExitCode::from(2)
}

/// Parses `--storage` and `--profile-variant` into a config.
pub fn config_of(args: &ServeIdemArgs) -> Result<IdemConfig, String> {
    let (variant, defect) = idem::parse_name(&args.profile_variant).ok_or_else(|| {
        format!(
            "--profile-variant takes {} or broken-idem:DEFECT[:VARIANT] (`reqkey targets` lists them)",
            IdemVariant::ALL.map(IdemVariant::name).join(", ")
        )
    })?;
    Ok(IdemConfig {
        variant,
        defect,
        redis_url: args.storage.redis_url(),
        expiry_ms: (args.expiry_ms > 0).then_some(args.expiry_ms),
    })
}

/// Runs `reqkey serve idem` until `shutdown`; returns the exit code.
pub async fn serve_idem(
    args: ServeIdemArgs,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> ExitCode {
    let config = match config_of(&args) {
        Ok(c) => c,
        Err(e) => return error(e),
    };
    let listener = match reqkey_reference::http_serve::bind(args.listen).await {
        Ok(l) => l,
        Err(e) => return error(format!("cannot listen on {}: {e}", args.listen)),
    };
    let addr = listener
        .local_addr()
        .map_or_else(|_| args.listen.to_string(), |a| a.to_string());
    println!("listening on idem+http://{addr}");
    let _ = std::io::stdout().flush();
    match idem::serve(&config, listener, shutdown).await {
        Ok(()) => {
            eprintln!("reqkey: idem app stopped");
            ExitCode::SUCCESS
        }
        Err(e) => error(format!("the idem app failed: {e}")),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use reqkey_reference::idem::IdemDefect;

    fn args(storage: &str, variant: &str, expiry_ms: u64) -> ServeIdemArgs {
        ServeIdemArgs {
            storage: IdemStorageSpec::parse(storage).unwrap(),
            listen: "127.0.0.1:0".parse().unwrap(),
            expiry_ms,
            profile_variant: variant.into(),
        }
    }

    #[test]
    fn storage_and_variant_parse_into_a_config_and_mistakes_are_refused() {
        let c = config_of(&args("memory", "wait", 0)).unwrap();
        assert_eq!(
            (c.variant, c.defect, c.expiry_ms),
            (IdemVariant::Wait, None, None)
        );
        let c = config_of(&args(
            "redis://127.0.0.1:6379",
            "broken-idem:lock-kept-after-error",
            500,
        ))
        .unwrap();
        assert_eq!(c.defect, Some(IdemDefect::LockKeptAfterError));
        assert_eq!(c.variant, IdemVariant::Released);
        assert_eq!(c.expiry_ms, Some(500));
        assert!(IdemStorageSpec::parse("sqlite:x").is_err());
        assert!(config_of(&args("memory", "queue", 1)).is_err());
        assert!(config_of(&args("memory", "broken-idem:nope", 1)).is_err());
    }
}
