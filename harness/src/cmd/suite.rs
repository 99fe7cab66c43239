//! `reqkey suite`: the scenario suite built into this binary, for reading.
//! `info` prints its version and, per level, its file count and digest
//! (the digest a certificate names); `export DIR` writes it out.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;

use crate::cmd::exit::harness_error;
use crate::run::suite;
use crate::targets::Level;

#[derive(Debug, Subcommand)]
pub enum SuiteCommand {
    /// Print the embedded suite's version, and per level its files and digest.
    Info,
    /// Write the embedded suite under DIR (VERSION, store/, agent/); pass
    /// DIR to `--scenarios` or as run PATHS to judge by an edited copy.
    Export {
        /// Where to write it (created if missing).
        dir: PathBuf,
    },
}

pub fn run(cmd: SuiteCommand) -> ExitCode {
    match cmd {
        SuiteCommand::Info => {
            println!("embedded suite, version {}", suite::embedded_version());
            for level in Level::ALL {
                match suite::embedded_suite(level) {
                    Ok((info, scenarios)) => println!(
                        "{level}: {} files, {} scenarios, {}",
                        info.files,
                        scenarios.len(),
                        info.digest
                    ),
                    Err(e) => return harness_error(format!("the embedded {level} suite: {e}")),
                }
            }
            ExitCode::SUCCESS
        }
        SuiteCommand::Export { dir } => match suite::export_embedded(&dir) {
            Ok(n) => {
                println!("wrote {n} files under {}", dir.display());
                ExitCode::SUCCESS
            }
            Err(e) => harness_error(e),
        },
    }
}
