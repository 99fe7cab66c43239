//! `reqkey proxy`: a fault-injecting, recording proxy on loopback between
//! a client and a `reqkey-agent/1` server, and the client verdict of
//! SPEC 9 at the end (the proxy is `proxy::server`, the verdict
//! `check::client`, the reports `report::client`).
//!
//! Two ways to run it: with a client command after `--`, the proxy starts
//! it with `REQKEY_PROXY_URL` in its environment, judges when it exits (or
//! is stopped after `--client-timeout-ms`); without one, it prints
//! `listening on http://ADDR` and judges on SIGINT/SIGTERM or when the
//! `--requests` cap is reached.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;

use crate::cmd::exit::{fresh_seed, harness_error};
use crate::cmd::outputs::create;
use crate::cmd::runtime::with_runtime;
use crate::cmd::serve::stop_signal;
use crate::proxy::server::{read_snapshots, serve, ProxyConfig, Recorder, UpstreamAuth};
use crate::report::client::{
    closing_line, failed_share, render_json, render_junit, render_terminal, ClientRun,
};
use crate::targets::http_agent::HttpAgentTarget;
use crate::targets::profile::resolve_profile;
use crate::targets::reference_agent::spawn_reference_agent;
use crate::targets::spec::TargetSpec;
use crate::targets::transport::HttpBase;
use crate::targets::TargetOptions;
use reqkey_check::client::{judge, ClientEnd, NoVerdict};
use reqkey_check::plan::FaultPlan;

/// The plan when `--plan` is not given: 40% of answers fail.
pub const DEFAULT_PLAN: &str = "drop-after-commit=0.25,delay=0.05,502=0.05,503=0.05,duplicate=0.1";

pub const PROXY_HELP: &str = "\
Faults (--plan fault=probability,...; the rest of the mass forwards untouched):
  drop-after-commit  forwarded, the server answers whole (it committed), then the
                     client's connection is closed unanswered
  delay              forwarded, the answer held --delay-ms, then the connection is
                     closed unanswered (past any shorter client timeout)
  502, 503           answered so without forwarding
  duplicate          a keyed request forwarded twice; the client gets the first answer
Only entry requests (POST /sessions/{id}/start|resume|retry|chat) get faults.

Exit codes:
  0  every client rule held
  1  a rule did not hold: the client does not use request keys as SPEC 9 asks
  2  no verdict: bad arguments, the server unreachable or not recording keys,
     no entry request seen, a snapshot unreadable, fewer failed answers than
     --min-failed-share, a report not written";

#[derive(Debug, Args)]
pub struct ProxyArgs {
    /// The agent server behind the proxy: http[s]://HOST:PORT, or
    /// reference-agent[:VARIANT][@STORE] started in process.
    #[arg(long, short)]
    pub target: String,
    #[command(flatten)]
    pub link: crate::cmd::judging::AccessArgs,
    /// Where the proxy listens (port 0: an ephemeral port, printed).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// The fault plan: `fault=probability` pairs, comma-separated.
    #[arg(long, default_value = DEFAULT_PLAN)]
    pub plan: String,
    /// The seed of the fault plan (printed; the same seed and the same
    /// requests replay the same faults).
    #[arg(long)]
    pub seed: Option<u64>,
    /// How long the `delay` fault holds an answer, in milliseconds.
    #[arg(long, default_value_t = 3_000, value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub delay_ms: u64,
    /// Bound on the client command, in milliseconds; it is stopped after.
    #[arg(long, default_value_t = 300_000, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    pub client_timeout_ms: u64,
    /// Bound on every call to the server, in milliseconds.
    #[arg(long, default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub timeout_ms: u64,
    /// The largest answer read from the server (larger: the client gets 502).
    #[arg(long, default_value_t = 8 * 1024 * 1024)]
    pub max_response_bytes: usize,
    /// The largest request body forwarded (larger: 413).
    #[arg(long, default_value_t = 1024 * 1024)]
    pub max_body_bytes: usize,
    /// Client requests recorded at most; later ones are answered 503 and
    /// the run is judged.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub requests: u64,
    /// Open client connections at most (the oldest idle one is closed to
    /// make room, as in the reference servers).
    #[arg(long, default_value_t = 192)]
    pub max_connections: usize,
    /// No verdict (exit 2) when a smaller share of entry answers failed:
    /// the plan did not exercise the client enough to certify it.
    #[arg(long)]
    pub min_failed_share: Option<f64>,
    /// Write JUnit XML here.
    #[arg(long)]
    pub junit: Option<PathBuf>,
    /// Write the reqkey-client-results/1 JSON (the whole trace) here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Print only failures, the seed and the closing line.
    #[arg(long, short)]
    pub quiet: bool,
    /// The client command (after `--`); it finds the proxy in
    /// $REQKEY_PROXY_URL.
    #[arg(last = true)]
    pub command: Vec<String>,
}

pub fn proxy_command(args: ProxyArgs) -> ExitCode {
    with_runtime(|| run(args))
}

fn replay_line(args: &ProxyArgs, target_name: &str, seed: u64, plan: &FaultPlan) -> String {
    let mut parts = vec![
        "reqkey proxy".to_owned(),
        format!(
            "--target {}",
            crate::report::context::shell_quote(target_name)
        ),
        format!(
            "--plan {}",
            crate::report::context::shell_quote(&plan.to_string())
        ),
        format!("--seed {seed}"),
        format!("--delay-ms {}", args.delay_ms),
    ];
    // How the upstream is reached (`--cacert`, `-H NAME: env:VAR`,
    // `--max-rps`), never a secret (issue 57).
    parts.extend(
        args.link
            .replay_flags()
            .iter()
            .map(|w| crate::report::context::shell_quote(w)),
    );
    if !args.command.is_empty() {
        parts.push("--".to_owned());
        parts.extend(
            args.command
                .iter()
                .map(|a| crate::report::context::shell_quote(a)),
        );
    }
    parts.join(" ")
}

async fn run(args: ProxyArgs) -> ExitCode {
    let plan = match FaultPlan::parse(&args.plan) {
        Ok(p) => p,
        Err(e) => return harness_error(e),
    };
    if let Some(share) = args.min_failed_share {
        if !(0.0..=1.0).contains(&share) {
            return harness_error("--min-failed-share must be between 0 and 1");
        }
    }
    let seed = args.seed.unwrap_or_else(fresh_seed);
    if args.link.request_log.is_some() {
        // The proxy relays a client's requests; it sends none of its own.
        return harness_error(
            "--request-log is for run, certify and fuzz (the proxy relays a client's requests)",
        );
    }
    let link = match args.link.link() {
        Ok(link) => link,
        Err(e) => return harness_error(e),
    };
    let opts = TargetOptions {
        call_timeout_ms: args.timeout_ms,
        max_response_bytes: args.max_response_bytes as u64,
        link,
        api: None,
    };
    // The upstream: its base URL, and the in-process server kept alive.
    // Parsed once; only the typed spec and its redacted name from here on.
    let spec = match TargetSpec::parse(&args.target) {
        Ok(spec) => spec,
        Err(e) => return harness_error(e),
    };
    let target_name = spec.display_name();
    let (upstream, _server) = match spec {
        TargetSpec::AgentHttp { base } => (base, None),
        TargetSpec::ReferenceAgent { variant, store } => {
            match spawn_reference_agent(variant, store.as_ref(), &opts).await {
                Ok(h) => match HttpBase::parse(&format!("http://{}", h.addr)) {
                    Ok(base) => (base, Some(h)),
                    Err(e) => return harness_error(e),
                },
                Err(e) => return harness_error(e),
            }
        }
        TargetSpec::Store(_) | TargetSpec::StoreHttp { .. } | TargetSpec::Idem(_) => {
            return harness_error(format!(
                "`{target_name}` is not an agent server; reqkey proxy sits in front of a reqkey-agent/1 \
                 server (http://HOST:PORT or reference-agent)"
            ))
        }
        TargetSpec::AgentReplicas { .. } | TargetSpec::ReferenceAgents { .. } => {
            return harness_error(format!(
                "`{target_name}` is several replicas; reqkey proxy sits in front of one \
                 reqkey-agent/1 server (http://HOST:PORT or reference-agent)"
            ))
        }
    };
    let upstream_auth = UpstreamAuth {
        tls: match upstream.is_tls().then(|| opts.link.tls()).transpose() {
            Ok(tls) => tls,
            Err(e) => return harness_error(e),
        },
        headers: opts.link.headers().to_vec(),
    };
    let health_target = match HttpAgentTarget::new(&upstream, &opts) {
        Ok(t) => t,
        Err(e) => return harness_error(e),
    };
    match resolve_profile(&health_target, None, args.timeout_ms).await {
        Ok(info) if info.profile.supports_request_key => {}
        Ok(info) => {
            return harness_error(format!(
                "{} declares {}: it does not record request keys, so a client's \
                 keys cannot be judged end to end against it",
                target_name,
                info.describe()
            ))
        }
        Err(e) => {
            return harness_error(format!(
                "no verdict: {e}; reqkey proxy judges clients of a server whose /health \
                 declares supportsRequestKey: true"
            ))
        }
    }
    let listener = match tokio::net::TcpListener::bind(args.listen).await {
        Ok(l) => l,
        Err(e) => return harness_error(format!("cannot listen on {}: {e}", args.listen)),
    };
    let addr = listener
        .local_addr()
        .map_or_else(|_| args.listen.to_string(), |a| a.to_string());
    let proxy_url = format!("http://{addr}");
    println!(
        "reqkey proxy: listening on {proxy_url}, forwarding to {target_name} (seed {seed}, plan {plan})"
    );
    let _ = std::io::stdout().flush();
    let config = Arc::new(ProxyConfig {
        upstream: upstream.url().to_owned(),
        plan: plan.clone(),
        seed,
        delay_ms: args.delay_ms,
        max_body_bytes: args.max_body_bytes,
        max_response_bytes: args.max_response_bytes,
        upstream_timeout_ms: args.timeout_ms,
        max_connections: args.max_connections,
        max_requests: args.requests,
        upstream_auth: upstream_auth.clone(),
    });
    let recorder = Arc::new(Recorder::new());
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(listener, config, recorder.clone(), async move {
        let _ = stop_rx.await;
    }));
    let started = Instant::now();
    let client_end = if args.command.is_empty() {
        tokio::select! {
            () = stop_signal() => {}
            () = recorder.cap_reached.notified() => {}
        }
        None
    } else {
        match run_client(&args, &proxy_url, seed).await {
            Ok(end) => Some(end),
            Err(e) => {
                let _ = stop_tx.send(());
                let _ = server.await;
                return harness_error(e);
            }
        }
    };
    // Requests still being handled (a `delay` holding an answer) finish
    // before the trace is read; bounded by what one of them can take.
    let settle_ms = args.delay_ms + 2 * args.timeout_ms + 1_000;
    let settled = recorder.settle(settle_ms).await;
    let still = recorder.in_flight();
    let _ = stop_tx.send(());
    let _ = server.await;
    let exchanges = recorder.exchanges();
    let mut sessions: Vec<String> = exchanges
        .iter()
        .filter(|e| e.entry.is_some())
        .filter_map(|e| e.session.clone())
        .collect();
    sessions.sort();
    sessions.dedup();
    let snapshots = read_snapshots(
        upstream.url(),
        &upstream_auth,
        &sessions,
        args.timeout_ms,
        args.max_response_bytes,
    )
    .await;
    let mut verdict = judge(&exchanges, &snapshots, client_end.as_ref());
    if !settled && verdict.indefinite.is_none() {
        verdict.indefinite = Some(NoVerdict {
            reason: format!("{still} requests were still being handled after {settle_ms} ms"),
        });
    }
    if let Some(min) = args.min_failed_share {
        if verdict.indefinite.is_none() && failed_share(&verdict) < min {
            verdict.indefinite = Some(NoVerdict {
                reason: format!(
                    "only {} of {} entry answers failed ({:.0}%), fewer than --min-failed-share {min}: \
                     the plan did not exercise the client enough",
                    verdict.stats.failed_answers,
                    verdict.stats.entry_requests,
                    failed_share(&verdict) * 100.0
                ),
            });
        }
    }
    let run = ClientRun {
        target: target_name.clone(),
        proxy: proxy_url,
        seed,
        plan: plan.to_string(),
        delay_ms: args.delay_ms,
        client: (!args.command.is_empty()).then(|| {
            args.command
                .iter()
                .map(|a| crate::report::context::shell_quote(a))
                .collect::<Vec<_>>()
                .join(" ")
        }),
        client_end,
        duration_ms: started.elapsed().as_millis() as u64,
        replay: replay_line(&args, &target_name, seed, &plan),
    };
    let text = render_terminal(&run, &verdict);
    if args.quiet {
        for line in text.lines() {
            let keep = line.starts_with("FAIL ")
                || line.starts_with("     ")
                || line.starts_with("no verdict")
                || line.starts_with("seed: ")
                || line.starts_with("client ");
            if keep {
                println!("{line}");
            }
        }
        println!("{}", closing_line(&verdict));
    } else {
        print!("{text}");
    }
    if let Some(path) = &args.junit {
        if let Err(e) = write_file(path, &render_junit(&run, &verdict)) {
            return harness_error(e);
        }
    }
    if let Some(path) = &args.json {
        let json = render_json(&run, &verdict, &exchanges, &snapshots);
        if let Err(e) = write_file(path, &json) {
            return harness_error(e);
        }
    }
    ExitCode::from(verdict.exit_code())
}

fn write_file(path: &std::path::Path, text: &str) -> Result<(), String> {
    let mut f = create(path)?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.flush())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// Runs the client command with the proxy's URL and the seed in its
/// environment; stops it after `--client-timeout-ms`.
async fn run_client(args: &ProxyArgs, proxy_url: &str, seed: u64) -> Result<ClientEnd, String> {
    let Some((program, rest)) = args.command.split_first() else {
        return Err("no client command".to_owned());
    };
    let mut child = tokio::process::Command::new(program)
        .args(rest)
        .env("REQKEY_PROXY_URL", proxy_url)
        .env("REQKEY_PROXY_SEED", seed.to_string())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start the client `{program}`: {e}"))?;
    let waited =
        tokio::time::timeout(Duration::from_millis(args.client_timeout_ms), child.wait()).await;
    match waited {
        Ok(Ok(status)) => Ok(match status.code() {
            Some(code) => ClientEnd::Exited { code },
            None => ClientEnd::KilledBySignal,
        }),
        Ok(Err(e)) => Err(format!("cannot wait for the client: {e}")),
        Err(_) => {
            let _ = child.kill().await;
            Ok(ClientEnd::TimedOut {
                after_ms: args.client_timeout_ms,
            })
        }
    }
}
