//! Judging what was recorded: linearizability of concurrent histories
//! ([`lin`], pure, no IO) and generated programs of store operations checked
//! against the sequential spec ([`fuzz`], and the bounded certification
//! stage of random concurrent programs, [`mixed`]); which clauses of the
//! spec the suite can fail on ([`coverage`]); the client verdict of
//! `reqkey proxy` ([`client`]). Checks name what the spec
//! requires; they never hold a target to the reference's own choices.

pub mod client;
pub mod coverage;
pub mod fuzz;
pub mod lin;
pub mod mixed;
