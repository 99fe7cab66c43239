//! Reporters: subscribers to the runner's [`crate::event::Event`]s.

pub mod terminal;

pub use terminal::TerminalReporter;
