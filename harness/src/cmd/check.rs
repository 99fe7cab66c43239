//! `reqkey check history FILE`: a recorded store history, from a file,
//! judged for linearizability against the store's sequential spec.
//!
//! The file is in reqkey's form or Jepsen's event form
//! ([`reqkey_check::history`]; `--export-histories` on `run` and `certify`
//! writes the first), so a history recorded by a run, by someone else's
//! recorder, or one another checker was given, meets the same judge as
//! the `linearizable: true` groups of a run ([`reqkey_check::lin`]). Exit
//! 0: linearizable; 1: not (the smallest failing subset printed, with the
//! clause it breaks); 2: the file cannot be read or judged (a mistake is
//! placed at file:line:col; an exhausted search budget is no verdict).
//!
//! Memory (issue 58: a 257 MB history that was not linearizable peaked
//! at 10.2 GB and was aborted by a 12 GB cap): the history is held typed,
//! about 2.5 to 6 times its text by what it holds; one session's search
//! adds its spec state and at most the budget's cached configurations
//! (16 to 40 bytes each); the report reads back a few hundred operations
//! whatever the history's size. A sequential history of 254 MB that is
//! not linearizable: 1.24 GB peak (debug build). Above that, the
//! process's resident memory is checked every 256 KiB read and every
//! 65,536 search steps against `--max-memory-bytes` (default 4 GiB):
//! reading past it is exit 2 naming it; a search past it is no verdict
//! (exit 2); shrinking or explaining past it stops where it is, the
//! verdict found kept.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::{Args, Subcommand};
use reqkey_check::history::{self, HistoryFormat, MAX_HISTORY_BYTES};
use reqkey_check::lin::{self, CheckOptions, Verdict};
use reqkey_check::stream;

use crate::cmd::exit::harness_error;
use crate::memory;
use crate::report::inert;

#[derive(Debug, Subcommand)]
pub enum CheckCommand {
    /// Judge a recorded store history (a file) for linearizability against
    /// the sequential spec: exit 0 linearizable, 1 not, 2 bad input. The
    /// history is held typed (about 2.5 to 6 times its text) within
    /// `--max-session-bytes` per session and `--max-memory-bytes` in all
    /// (past either: exit 2 naming it, where reading stopped).
    History(HistoryArgs),
}

#[derive(Debug, Args)]
pub struct HistoryArgs {
    /// The history: reqkey's JSON form (an array of operations) or
    /// Jepsen's events as JSON lines (docs/race-safety.md).
    pub file: PathBuf,
    /// The file's form; by default told by its first non-space byte
    /// (`[` reqkey's, `{` Jepsen's).
    #[arg(long, value_name = "json|jepsen")]
    pub format: Option<HistoryFormat>,
    /// Bound on the search, in steps (an exhausted budget is exit 2).
    #[arg(long, default_value_t = lin::DEFAULT_BUDGET_STEPS,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000_000))]
    pub budget_steps: u64,
    /// Do not judge: print the history in this form on stdout (exit 0),
    /// to hand a run's history to another checker or read one in.
    #[arg(long, value_name = "json|jepsen")]
    pub convert_to: Option<HistoryFormat>,
    /// The verdict alone, timed: no counterexample shrinking, and the
    /// parse (the file's text into the checker's types) and the check are
    /// timed apart (as `reqkey bench lin` times them; a benchmark against
    /// another checker on the same file, docs/benchmarks.md). Prints
    /// `parsed in X ms, checked in Y ms` under the verdict, with the
    /// process's peak resident memory and its ceiling (--max-memory-bytes).
    #[arg(long, conflicts_with = "convert_to")]
    pub verdict_only: bool,
    /// Bound on one session's history text, in bytes: its operations are
    /// held typed (about 2.5 to 6 times the text) until the session is
    /// searched, so a larger session is refused (exit 2) before more of it
    /// is held. The whole history is bounded by `--max-memory-bytes`.
    #[arg(long, default_value_t = reqkey_check::stream::DEFAULT_MAX_SESSION_BYTES,
          value_parser = clap::value_parser!(u64).range(1024..=(1u64 << 36)))]
    pub max_session_bytes: u64,
}

pub fn run(command: CheckCommand) -> ExitCode {
    match command {
        CheckCommand::History(args) => history_command(&args),
    }
}

/// The history `--convert-to` converts: at most [`MAX_HISTORY_BYTES`]
/// and [`history::MAX_OPERATIONS`], read one entry at a time within the
/// memory ceiling, held as operations (the output is sorted).
fn convert_input(args: &HistoryArgs) -> Result<Vec<lin::Operation>, String> {
    let shown = args.file.display().to_string();
    let size = std::fs::metadata(&args.file)
        .map_err(|e| format!("{shown}: {e}"))?
        .len();
    if size > MAX_HISTORY_BYTES {
        return Err(format!(
            "{shown}: over {} MiB, more than a history file to convert may hold (judging it has no such bound)",
            MAX_HISTORY_BYTES >> 20
        ));
    }
    let mut ops: Vec<lin::Operation> = Vec::new();
    let mut too_many = false;
    stream::read_history_gauged(
        open(&args.file)?.take(MAX_HISTORY_BYTES + 1),
        args.format,
        &memory::over,
        &mut |i, op| {
            if let Some(slot) = ops.get_mut(i) {
                *slot = op;
            } else if ops.len() < history::MAX_OPERATIONS {
                ops.push(op);
            } else {
                too_many = true;
            }
        },
    )
    .map_err(|e| format!("{shown}:{e}"))?;
    if too_many {
        return Err(format!(
            "{shown}: more than {} operations, more than a history to convert may hold",
            history::MAX_OPERATIONS
        ));
    }
    Ok(ops)
}

fn history_command(args: &HistoryArgs) -> ExitCode {
    let shown = args.file.display().to_string();
    if let Some(format) = args.convert_to {
        // Converting holds the whole history (the output is sorted), so
        // it keeps the size bound (and the memory ceiling); judging
        // streams (below).
        let history = match convert_input(args) {
            Ok(h) => h,
            Err(e) => return harness_error(e),
        };
        emit(&history::write_history(&history, format));
        return ExitCode::SUCCESS;
    }
    // Streamed straight into the checker's form, by session (typed, one
    // entry's text at a time): each session bounded by
    // --max-session-bytes, the process by --max-memory-bytes, and nothing
    // kept for a report; the operations a report shows are read again
    // from the file.
    let started = Instant::now();
    let bounds = stream::ReadBounds {
        max_session_bytes: args.max_session_bytes,
        over_memory: &memory::over,
    };
    let parsed = match open(&args.file).and_then(|r| {
        stream::read_partitioned_bounded(r, args.format, &bounds)
            .map_err(|e| format!("{shown}:{e}"))
    }) {
        Ok(h) => h,
        Err(e) => return harness_error(e),
    };
    let parse_ms = started.elapsed().as_secs_f64() * 1e3;
    let (operations, sessions) = (parsed.len(), parsed.sessions());
    // The few operations a report shows (its timelines' lines and the
    // anomaly's), read again from the file.
    let mut fetch = |at: &[usize]| -> Vec<lin::Operation> {
        open(&args.file)
            .and_then(|r| {
                stream::read_operations_at(r, args.format, at).map_err(|e| format!("{shown}:{e}"))
            })
            .unwrap_or_default()
    };
    let started = Instant::now();
    let report = lin::check_partitioned(
        parsed,
        CheckOptions {
            budget_steps: args.budget_steps,
            minimize: !args.verdict_only,
            over_memory: Some(memory::is_over),
            ..CheckOptions::default()
        },
        // The verdict alone shows no timeline: nothing to read again.
        (!args.verdict_only)
            .then_some(&mut fetch as &mut dyn FnMut(&[usize]) -> Vec<lin::Operation>),
    );
    let check_ms = started.elapsed().as_secs_f64() * 1e3;
    let shown = inert::terminal(&shown);
    if args.verdict_only {
        let peak = memory::peak_bytes().map_or_else(String::new, |b| {
            format!(
                ", peak memory {} MiB of a {} MiB ceiling",
                b >> 20,
                memory::ceiling() >> 20
            )
        });
        let timings = format!(
            "  parsed in {parse_ms:.1} ms, checked in {check_ms:.1} ms ({} search steps, {} thread{}{peak})\n",
            report.steps,
            report.threads,
            if report.threads == 1 { "" } else { "s" }
        );
        return match report.verdict {
            Verdict::Linearizable => {
                emit(&format!(
                    "reqkey: {shown}: linearizable ({operations} operations, {sessions} sessions)\n{timings}"
                ));
                ExitCode::SUCCESS
            }
            Verdict::NotLinearizable(c) => {
                emit(&format!(
                    "reqkey: {shown}: NOT linearizable ({operations} operations): {}\n{timings}",
                    inert::terminal(&c.reason)
                ));
                ExitCode::from(1)
            }
            Verdict::Unknown { reason } => {
                harness_error(format!("{shown}: no verdict: {}", inert::terminal(&reason)))
            }
        };
    }
    match report.verdict {
        Verdict::Linearizable => {
            emit(&format!(
                "reqkey: {shown}: linearizable ({operations} operations, {} sessions, {} search steps)\n",
                report.partitions, report.steps
            ));
            ExitCode::SUCCESS
        }
        Verdict::NotLinearizable(c) => {
            emit(&format!(
                "reqkey: {shown}: NOT linearizable ({operations} operations): {}\n  breaks {}\n  the smallest failing subset: operations {} of the file (0-based)\n{}",
                inert::terminal(&c.reason),
                explained_breaks(&c),
                lin::listed(&c.minimal, MAX_SUBSET_LISTED),
                inert::lines_kept(&c.to_string())
            ));
            ExitCode::from(1)
        }
        Verdict::Unknown { reason } => {
            harness_error(format!("{shown}: no verdict: {}", inert::terminal(&reason)))
        }
    }
}

/// `path` opened for reading, buffered.
fn open(path: &Path) -> Result<BufReader<File>, String> {
    File::open(path)
        .map(|f| BufReader::with_capacity(1 << 16, f))
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// Writes `text` to stdout; a reader that went away (`| head`) is not an
/// error of the verdict, and never a panic.
fn emit(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

/// The operations of the smallest failing subset the report lists by
/// index (a sequential history's subset is every write before the
/// failure: the rest are counted).
const MAX_SUBSET_LISTED: usize = 64;

/// What a non-linearizable history breaks: the rule that forbids the
/// first answer no order of the smallest failing subset can give, with
/// its clause and that answer ([`lin::Anomaly`]); when no single rule
/// explains it, SPEC 4's atomicity clauses of the writes in it.
fn explained_breaks(c: &lin::Counterexample) -> String {
    match &c.anomaly {
        Some(a) => format!(
            "[[{}]] ({}; `reqkey explain {}`)\n  {}",
            a.clause,
            a.rule,
            a.clause,
            inert::terminal(&a.to_string())
        ),
        None => format!(
            "{} (SPEC 4: every operation is one atomic step, under any concurrency; `reqkey explain CLAUSE`)",
            lin::clause_list(&c.atomicity)
        ),
    }
}
