//! `cargo bench -p reqkey-harness --bench lin`: the checker figure.
//!
//! Records a 1,000-operation history from 8 concurrent clients over 4
//! sessions against the memory store and prints how long its
//! linearizability check takes (target: under 1 s). `REQKEY_SEED` sets the
//! first seed; `REQKEY_TARGET` another store target.

use reqkey_harness::bench::checker::{checker_benchmark, default_workload};

fn main() {
    let seed = std::env::var("REQKEY_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    // REQKEY_TARGET=broken-memory:holder-read-outside-commit times the
    // search and minimization of a history that is not linearizable.
    let target = std::env::var("REQKEY_TARGET").unwrap_or_else(|_| "memory".to_owned());
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start a runtime: {e}");
            std::process::exit(2);
        }
    };
    for s in seed..seed + 3 {
        match runtime.block_on(checker_benchmark(&target, default_workload(s))) {
            Ok(figures) => println!("{figures}"),
            Err(e) => {
                eprintln!("benchmark failed: {e}");
                std::process::exit(2);
            }
        }
    }
}
