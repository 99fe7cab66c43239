//! Reporters: subscribers to the runner's [`crate::run::event::Event`]s.
//!
//! The runner knows nothing of formats. Each reporter listens to the same
//! event stream and renders it its own way:
//!
//! - [`TerminalReporter`]: lines for people, with a progress bar on a TTY;
//! - [`JunitReporter`]: JUnit XML for CI dashboards (via `quick-junit`);
//! - [`JsonReporter`]: the stable `reqkey-results/1` document for scripts
//!   (schema in `docs/reports.md`);
//! - [`CertificateReporter`]: the Markdown certificate a person reads;
//! - [`HtmlReporter`]: one self-contained page with race timelines.
//!
//! What the events do not carry — the target's `/health` identity, the
//! suite's digest, the date — comes from a [`ReportContext`] built by the
//! CLI before the run. Rendering is a pure function of the context and the
//! [`RunSummary`], so every format is snapshot-tested without a clock.
//!
//! Every format ends its human-readable part with the same closing line,
//! `N passed, N failed` ([`closing_line`]), where "failed" counts every
//! scenario that proved a violation (errors and indefinite races are
//! counted as what they are). Every format renders the one record of the
//! run, [`record::RunRecord`]: the verdict of [`verdict::RunVerdict`]
//! (the fuzz pass and a signal included) with the exit code, the clauses
//! (the suite's checks and the fuzz pass's violations), the declared
//! fields, the crash claim and the closing lines: none computes its own.

pub mod certificate;
pub mod clauses;
pub mod client;
pub mod context;
pub mod crash;
pub mod html;
pub mod inert;
pub mod json;
pub mod junit;
pub mod merge;
pub mod merge_check;
pub mod merge_fuzz_warnings;
pub mod record;
pub mod seal;
pub mod terminal;
pub mod verdict;

pub use certificate::CertificateReporter;
pub use context::{
    closing_line, closing_notes, verdict_label, warning_lines, ClauseCoverage, DeclaredField,
    ReportContext,
};
pub use html::HtmlReporter;
pub use json::JsonReporter;
pub use junit::JunitReporter;
pub use terminal::TerminalReporter;
