//! `reqkey model ...`: the model checker's command line.
//!
//! The model lives in `reqkey-model` (no IO); this module only parses
//! arguments, prints figures and counterexamples, serves the stateright
//! Explorer and writes the exported scenarios as YAML (the model hands them
//! over as JSON values; YAML is the harness's business).
//!
//! Exit codes: 0 the check passed (no counterexample, every `sometimes`
//! property reached), 1 a property was violated or a `sometimes` property
//! was never reached, 2 bad arguments or an IO failure.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use reqkey_model::check::{check_with_progress, format_path, CheckOptions, CheckSummary};
use reqkey_model::export::{export_scenarios, ExportedScenario};
use reqkey_model::mutants::Mutant;
use reqkey_model::system::{Config, KeyedEntryModel};
use stateright::Model;

#[derive(Debug, Subcommand)]
pub enum ModelCommand {
    /// Check the keyed-entry model exhaustively (DFS) and print the figures.
    Check {
        #[command(flatten)]
        world: WorldArgs,
        /// Worker threads.
        #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64))]
        threads: u16,
        /// Explore without symmetry reduction.
        #[arg(long)]
        no_symmetry: bool,
        /// Stop at the first counterexample.
        #[arg(long)]
        first: bool,
        /// No progress lines (by default one every 5 s on stderr, when
        /// stderr is a terminal and CI is unset).
        #[arg(long, conflicts_with = "progress")]
        quiet: bool,
        /// Progress lines even when stderr is not a terminal or in CI.
        #[arg(long)]
        progress: bool,
    },
    /// Serve the stateright Explorer for the model.
    Explore {
        #[command(flatten)]
        world: WorldArgs,
        /// Address to listen on, e.g. 127.0.0.1:3000.
        #[arg(long, default_value = "127.0.0.1:3000")]
        listen: String,
    },
    /// Write the witnesses of the `sometimes` properties and each mutant's
    /// counterexample as store-level YAML scenarios into DIR.
    ExportScenarios {
        /// Output directory (created if missing).
        dir: PathBuf,
        #[command(flatten)]
        world: WorldArgs,
    },
}

/// The size of the modelled world (defaults: the default configuration).
#[derive(Debug, Args, Clone)]
pub struct WorldArgs {
    /// Clients, each with its own script of requests.
    #[arg(long, default_value_t = Config::default().clients)]
    pub clients: usize,
    /// Sessions.
    #[arg(long, default_value_t = Config::default().sessions)]
    pub sessions: usize,
    /// Request keys (0: every entry keyless).
    #[arg(long, default_value_t = Config::default().keys)]
    pub keys: usize,
    /// Distinct inputs.
    #[arg(long, default_value_t = Config::default().inputs)]
    pub inputs: usize,
    /// Logical requests in all, dealt to the clients in turn.
    #[arg(long, default_value_t = Config::default().requests)]
    pub requests: usize,
    /// Resends of a request after a lost response.
    #[arg(long, default_value_t = Config::default().retries)]
    pub retries: usize,
    /// deleteSession calls.
    #[arg(long, default_value_t = Config::default().deletes)]
    pub deletes: usize,
    /// Extra clients with client 0's script (symmetric twins).
    #[arg(long, default_value_t = Config::default().twins)]
    pub twins: usize,
    /// Times an entry decides again after cas_mismatch.
    #[arg(long, default_value_t = Config::default().cas_retries)]
    pub cas_retries: usize,
    /// Runs never complete.
    #[arg(long)]
    pub no_finish: bool,
    /// Lease expiries: a running run's executor dies and a reader sets the
    /// run interrupted once its lease runs out (SPEC 5, [[lease.expire.any-reader]]).
    #[arg(long, default_value_t = Config::default().expiries)]
    pub expiries: usize,
    /// Explore every interleaving without the model's reductions (unwatched
    /// runs finishing, a done client moving on at once, answered attempts
    /// hashed by what is still read): the unreduced counts, for comparison.
    #[arg(long)]
    pub no_reduction: bool,
    /// Check a deliberately broken model (one single-bug switch).
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(Mutant::ALL.map(Mutant::name)))]
    pub mutant: Option<String>,
}

impl WorldArgs {
    fn config(&self) -> Result<Config, String> {
        let mutant = match self.mutant.as_deref() {
            None => None,
            Some(name) => Some(Mutant::parse(name).ok_or_else(|| {
                let names: Vec<_> = Mutant::ALL.iter().map(|m| m.name()).collect();
                format!("unknown mutant `{name}`; one of: {}", names.join(", "))
            })?),
        };
        let config = Config {
            clients: self.clients,
            sessions: self.sessions,
            keys: self.keys,
            inputs: self.inputs,
            requests: self.requests,
            retries: self.retries,
            deletes: self.deletes,
            twins: self.twins,
            finishes: !self.no_finish,
            expiries: self.expiries,
            cas_retries: self.cas_retries,
            mutant,
            reduction: !self.no_reduction,
        };
        config.validate()?;
        Ok(config)
    }
}

fn bad_args(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("reqkey model: error: {message}");
    ExitCode::from(2)
}

/// Runs a `reqkey model` subcommand; returns the exit code.
pub fn run(cmd: ModelCommand) -> ExitCode {
    match cmd {
        ModelCommand::Check {
            world,
            threads,
            no_symmetry,
            first,
            quiet,
            progress,
        } => {
            let config = match world.config() {
                Ok(c) => c,
                Err(e) => return bad_args(e),
            };
            let opts = CheckOptions {
                threads: usize::from(threads),
                symmetry: !no_symmetry,
                stop_at_first_violation: first,
                until: None,
                shortest_counterexamples: true,
            };
            let every = show_progress(quiet, progress).then(|| Duration::from_secs(5));
            let summary = check_with_progress(config.clone(), opts, every, &mut |p| {
                eprintln!("{}", p.line());
            });
            print_summary(&config, &opts, &summary);
            if summary.passed() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        ModelCommand::Explore { world, listen } => {
            let config = match world.config() {
                Ok(c) => c,
                Err(e) => return bad_args(e),
            };
            // tiny_http panics on a bind failure: find out first.
            match std::net::TcpListener::bind(&listen) {
                Ok(probe) => drop(probe),
                Err(e) => return bad_args(format!("cannot listen on {listen}: {e}")),
            }
            println!(
                "Explorer for {} on http://{listen}/ (Ctrl-C to stop)",
                describe(&config)
            );
            let _checker = KeyedEntryModel::new(config).checker().serve(listen);
            ExitCode::SUCCESS
        }
        ModelCommand::ExportScenarios { dir, world } => {
            let config = match world.config() {
                Ok(c) => c,
                Err(e) => return bad_args(e),
            };
            if config.mutant.is_some() {
                return bad_args("export-scenarios exports every mutant itself; drop --mutant");
            }
            let scenarios = export_scenarios(&config);
            match write_scenarios(&dir, &scenarios) {
                Ok(n) => {
                    println!("wrote {n} scenarios to {}", dir.display());
                    ExitCode::SUCCESS
                }
                Err(e) => bad_args(e),
            }
        }
    }
}

/// Progress lines: asked for, or on a terminal outside CI unless quiet.
fn show_progress(quiet: bool, forced: bool) -> bool {
    use std::io::IsTerminal;
    forced || (!quiet && std::io::stderr().is_terminal() && std::env::var_os("CI").is_none())
}

fn describe(config: &Config) -> String {
    let expiries = match config.expiries {
        0 => String::new(),
        n => format!(" expiries={n}"),
    };
    format!(
        "clients={} sessions={} keys={} inputs={} requests={} retries={} deletes={} twins={} cas_retries={} finish={} mutant={}{expiries}",
        config.clients,
        config.sessions,
        config.keys,
        config.inputs,
        config.requests,
        config.retries,
        config.deletes,
        config.twins,
        config.cas_retries,
        config.finishes,
        config.mutant.map_or("none", Mutant::name),
    )
}

fn print_summary(config: &Config, opts: &CheckOptions, s: &CheckSummary) {
    let model = KeyedEntryModel::new(config.clone());
    println!("model:          {}", describe(config));
    for (i, script) in model.scripts().iter().enumerate() {
        let reqs: Vec<String> = script.iter().map(ToString::to_string).collect();
        println!("  client {i}:     {}", reqs.join(", "));
    }
    let symmetry = match (opts.symmetry, model.has_twins()) {
        (false, _) => "off",
        (true, true) => "on (twins are interchangeable)",
        (true, false) => "on, nothing to reduce (no twins)",
    };
    let reduction = if config.reduction {
        "on (unwatched runs do not finish, a done client moves on at once, answered attempts by what is still read)"
    } else {
        "off (every interleaving)"
    };
    println!(
        "search:         DFS, {} thread(s), symmetry {symmetry}",
        opts.threads
    );
    println!("reduction:      {reduction}");
    println!("unique states:  {}", s.unique_states);
    println!(
        "total states:   {} (every generated successor)",
        s.total_states
    );
    println!("max depth:      {}", s.max_depth);
    println!("elapsed:        {:.2} s", s.elapsed.as_secs_f64());
    println!("unique states/s: {:.0}", s.unique_states_per_second());
    println!("total states/s: {:.0}", s.total_states_per_second());
    for (name, _) in &s.examples {
        println!("  sometimes ok: {name}");
    }
    for name in &s.unreached {
        println!("  NEVER REACHED: {name}");
    }
    for (name, path) in &s.violations {
        println!("  VIOLATED:     {name}");
        println!(
            "counterexample ({} actions):",
            path.clone().into_actions().len()
        );
        print!("{}", format_path(&model, path));
    }
    let verdict = if s.passed() {
        "PASS"
    } else if !s.violations.is_empty() {
        "FAIL (property violated)"
    } else {
        "FAIL (a sometimes property was never reached)"
    };
    println!("verdict:        {verdict}");
}

/// Writes each scenario as `DIR/<file stem>.yaml`; returns how many.
fn write_scenarios(dir: &std::path::Path, scenarios: &[ExportedScenario]) -> Result<usize, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    for s in scenarios {
        let path = dir.join(format!("{}.yaml", s.file_stem));
        std::fs::write(&path, render(s)?)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(scenarios.len())
}

/// The YAML file of an exported scenario: a header naming its origin and
/// the model path it replays, then the scenario.
pub fn render(s: &ExportedScenario) -> Result<String, String> {
    let yaml = serde_yaml::to_string(&ordered(&s.scenario))
        .map_err(|e| format!("cannot render {}: {e}", s.file_stem))?;
    let listing: String = s
        .path_listing
        .lines()
        .map(|l| format!("#  {l}\n"))
        .collect();
    Ok(format!(
        "# Generated by `reqkey model export-scenarios` from the model's {}.\n# Regenerate instead of editing. The model path:\n{listing}{yaml}",
        s.origin
    ))
}

/// JSON to YAML with the keys in reading order: `id`, `level`, `tags`,
/// `summary` first, `expect` then `judges` after the step's action, the rest
/// as they come.
fn ordered(v: &serde_json::Value) -> serde_yaml::Value {
    use serde_json::Value as J;
    use serde_yaml::Value as Y;
    const FIRST: [&str; 4] = ["id", "level", "tags", "summary"];
    let rank = |k: &str| match FIRST.iter().position(|f| *f == k) {
        Some(i) => i,
        None if k == "expect" => FIRST.len() + 2,
        None if k == "judges" => FIRST.len() + 3,
        None => FIRST.len() + 1,
    };
    match v {
        J::Null => Y::Null,
        J::Bool(b) => Y::Bool(*b),
        // Not `serde_yaml::to_value(n)`: with serde_json's
        // `arbitrary_precision` a Number serialises as a private map.
        J::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), _, _) => Y::Number(u.into()),
            (None, Some(i), _) => Y::Number(i.into()),
            (None, None, Some(f)) => Y::Number(f.into()),
            (None, None, None) => Y::String(n.to_string()),
        },
        J::String(s) => Y::String(s.clone()),
        J::Array(items) => Y::Sequence(items.iter().map(ordered).collect()),
        J::Object(map) => {
            let mut entries: Vec<(&String, &J)> = map.iter().collect();
            entries.sort_by_key(|(k, _)| rank(k));
            Y::Mapping(
                entries
                    .into_iter()
                    .map(|(k, v)| (Y::String(k.clone()), ordered(v)))
                    .collect(),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(subcommand)]
        cmd: ModelCommand,
    }

    #[test]
    fn the_checked_in_model_scenarios_are_what_the_model_exports() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/store/model");
        let scenarios = export_scenarios(&Config::default());
        assert_eq!(scenarios.len(), 14);
        for s in &scenarios {
            let path = dir.join(format!("{}.yaml", s.file_stem));
            let on_disk = std::fs::read_to_string(&path).unwrap();
            assert_eq!(
                on_disk,
                render(s).unwrap(),
                "{} is stale: run `reqkey model export-scenarios scenarios/store/model`",
                path.display()
            );
        }
    }

    #[test]
    fn bad_world_arguments_exit_2() {
        let cli = Cli::try_parse_from(["x", "check", "--clients", "0"]).unwrap();
        assert_eq!(run(cli.cmd), ExitCode::from(2));
        assert!(Cli::try_parse_from(["x", "check", "--mutant", "nope"]).is_err());
    }

    #[test]
    fn a_mutant_check_exits_1_and_the_small_correct_one_exits_0() {
        let args = |extra: &[&str]| {
            let mut v = vec!["x", "check", "--clients", "3", "--requests", "3", "--first"];
            v.extend_from_slice(extra);
            Cli::try_parse_from(v).unwrap().cmd
        };
        assert_eq!(run(args(&["--mutant", "no-replan"])), ExitCode::from(1));
        let small =
            Cli::try_parse_from(["x", "check", "--clients", "2", "--requests", "2"]).unwrap();
        // Two clients never reach state_request_already_completed: exit 1
        // for a vacuous property, by design.
        assert_eq!(run(small.cmd), ExitCode::from(1));
    }
}
