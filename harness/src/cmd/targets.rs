//! `reqkey targets`: every form `--target` takes, and every built-in
//! broken variant with the scenarios it fails (from the falsification
//! record built into this binary), so that an installed `reqkey` needs no
//! repository file to say what it can judge.

use std::process::ExitCode;

use reqkey_model::vocab::Level;

use crate::cmd::coverage::suite_record;
use crate::cmd::exit::harness_error;
use crate::targets::spec::{builtin_variants, TARGET_HELP};

pub fn targets_command() -> ExitCode {
    let record = match suite_record(None) {
        Ok(r) => r,
        Err(e) => return harness_error(e),
    };
    println!("The forms of --target:\n\n{TARGET_HELP}\n");
    println!(
        "Secrets in a URL (user:password@, a token as the user, query values) are \
         redacted in every output."
    );
    for level in Level::ALL {
        let what = match level {
            Level::Store => "broken stores (a store target: the store suite fails on each)",
            Level::Agent => {
                "broken reference servers (an agent target: the agent suite fails on each)"
            }
            Level::Idem => {
                "broken idempotency middlewares (an idem target: the idem suite fails on each)"
            }
        };
        println!("\nBuilt-in {what}:");
        let recorded = record.level(level);
        for variant in builtin_variants(level) {
            let fails = recorded.get(&variant).filter(|ids| !ids.is_empty() || !at_scale(&variant)).map_or_else(
                || {
                    if at_scale(&variant) {
                        "no scenario: the fuzz pass's probes at scale find it (--patience, docs/fuzz.md)".to_owned()
                    } else {
                        "no scenario recorded".to_owned()
                    }
                },
                |ids| {
                    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
                    format!("fails {}", ids.join(", "))
                },
            );
            println!("  {variant:<48} {fails}");
        }
        if level == Level::Idem {
            println!(
                "  (a scenario your app fails as a variant does is not proof of that variant's bug: \
                 the certificate names the clauses of the check that failed and its evidence; a \
                 burst whose connections queued (warning[listen_queue]) is not judged, never \
                 called a race)"
            );
        }
        if level == Level::Store {
            println!(
                "  (each postgres+DEFECT is judged through a database link the harness owns: \
                 --start 'reqkey serve store --store {{db}} --listen 127.0.0.1:{{port}}' \
                 --db postgres+DEFECT://USER@HOST/DB --target store+http://127.0.0.1:{{port}}; \
                 docs/link-faults.md)"
            );
        }
        // Correct servers stated to be of another profile are recorded too.
        for (variant, ids) in recorded {
            if variant.contains(" --profile ") {
                let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
                println!("  {variant:<48} fails {}", ids.join(", "));
            }
        }
    }
    ExitCode::SUCCESS
}

/// Whether only the fuzz pass's probes at scale find the built-in variant
/// `variant` (issue 55).
fn at_scale(variant: &str) -> bool {
    use reqkey_reference::agent::executor::ExecutorDefect;
    use reqkey_reference::idem::IdemDefect;
    use reqkey_reference::store::MemoryDefect;
    if let Some(name) = variant.strip_prefix("broken-memory:") {
        return MemoryDefect::parse(name).is_some_and(|d| d.scale_bug().is_some());
    }
    if let Some(name) = variant.strip_prefix("reference-agent:") {
        return ExecutorDefect::parse(name).is_some_and(ExecutorDefect::at_scale);
    }
    variant
        .strip_prefix("broken-idem:")
        .and_then(IdemDefect::parse)
        .is_some_and(IdemDefect::at_scale)
}
