//! The stateright model of the keyed-entry protocol: its compact state,
//! the bridge that asks [`crate::contract`] for every decision (never restating
//! a rule), its properties, the single-bug mutants that prove each
//! property can fail, running it, and exporting its paths as scenarios.

pub mod bridge;
pub mod check;
pub mod compact;
pub mod export;
pub mod inline;
pub mod mutants;
pub mod predicates;
pub mod props;
pub mod reduction;
pub mod state;
pub mod system;
