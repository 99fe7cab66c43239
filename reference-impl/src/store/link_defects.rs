//! The deliberately broken PostgreSQL stores that only a fault on the
//! database link shows (issue 49; tests of tests only, never a correct
//! store). Each is a common mistake with the ambiguous commit, the one a
//! request key exists for; `reqkey run --start ... --db URL` with the
//! `link` scenarios catches each (`harness/tests/link_faults.rs`).
//!
//! - `postgres+blind-retry://`: when the link breaks during a commit, it
//!   connects again and runs the commit again: a commit that had reached
//!   the database answers `replayed` to the one client that sent it once.
//! - `postgres+early-success://`: a commit whose link broke (before the
//!   commit was sent, or while its transaction was open) is answered
//!   `started`, as if it had landed: a run that was never written is
//!   promised.
//! - `postgres+half-written://`: the run (and its key) in one transaction,
//!   its input in a second: a break between the two leaves a run whose
//!   input is lost, the key held by a half-written run.
//! - `postgres+no-retry://`: a write PostgreSQL rolled back as a deadlock
//!   or a serialization failure is answered `internal`, not run again:
//!   contention fails a client's write.

/// A broken PostgreSQL store's flaw.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PgLinkDefect {
    BlindRetry,
    EarlySuccess,
    HalfWritten,
    NoRetry,
}

impl PgLinkDefect {
    pub const ALL: [PgLinkDefect; 4] = [
        PgLinkDefect::BlindRetry,
        PgLinkDefect::EarlySuccess,
        PgLinkDefect::HalfWritten,
        PgLinkDefect::NoRetry,
    ];

    pub fn name(self) -> &'static str {
        match self {
            PgLinkDefect::BlindRetry => "blind-retry",
            PgLinkDefect::EarlySuccess => "early-success",
            PgLinkDefect::HalfWritten => "half-written",
            PgLinkDefect::NoRetry => "no-retry",
        }
    }

    /// The URL scheme that opens the variant (`postgres+NAME`).
    pub fn scheme(self) -> String {
        format!("postgres+{}", self.name())
    }

    /// The variant a scheme names.
    pub fn from_scheme(scheme: &str) -> Option<PgLinkDefect> {
        let name = crate::scheme::known(scheme)?.variant?;
        PgLinkDefect::ALL.into_iter().find(|d| d.name() == name)
    }
}
