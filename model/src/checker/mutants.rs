//! Single-bug switches for the system model.
//!
//! A model checker that never finds anything proves little: maybe the
//! properties are vacuous, maybe the model never reaches the interesting
//! interleavings. Each [`Mutant`] breaks exactly one rule of SPEC 4/5 the
//! way a plausible implementation would, and names the property that must
//! catch it. Tests pin that every mutant yields a counterexample for its
//! property and that the correct model yields none.
//!
//! Store-side mutants still decide through `reqkey_model`'s rules
//! ([`crate::contract::seq::SessionState::decide`] with a wrong holder, or a
//! [`crate::contract::rules::RuleVariant`]); executor-side mutants still plan through
//! [`crate::contract::plan::plan_keyed_entry`] with a wrong argument. No rule is
//! restated, only mis-fed.

use crate::contract::rules::{KeyRule, RuleVariant};

/// One deliberate bug.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mutant {
    /// The store reads the key's holder in one step and decides and writes
    /// in a later one (a read outside the transaction).
    HolderReadOutsideCommit,
    /// The store checks CAS before the key rule, so a lost keyed race is
    /// refused `cas_mismatch` instead of `request_key_taken`.
    KeyRuleAfterCas,
    /// The store has no key rule at all (no unique index).
    NoKeyRule,
    /// The executor does not re-plan after `request_key_taken`; the raw
    /// refusal reaches the client.
    NoReplan,
    /// `deleteSession` removes runs and inputs but leaves the key index.
    DeleteKeepsKeys,
    /// The executor plans without comparing digests (a different input
    /// under a taken key attaches).
    DigestNotCompared,
    /// The key index is global instead of per session.
    GlobalKeyIndex,
}

impl Mutant {
    pub const ALL: [Mutant; 7] = [
        Mutant::HolderReadOutsideCommit,
        Mutant::KeyRuleAfterCas,
        Mutant::NoKeyRule,
        Mutant::NoReplan,
        Mutant::DeleteKeepsKeys,
        Mutant::DigestNotCompared,
        Mutant::GlobalKeyIndex,
    ];

    /// The CLI name (`--mutant NAME`) and the scenario id suffix.
    pub fn name(self) -> &'static str {
        match self {
            Mutant::HolderReadOutsideCommit => "holder-read-outside-commit",
            Mutant::KeyRuleAfterCas => "key-rule-after-cas",
            Mutant::NoKeyRule => "no-key-rule",
            Mutant::NoReplan => "no-replan",
            Mutant::DeleteKeepsKeys => "delete-keeps-keys",
            Mutant::DigestNotCompared => "digest-not-compared",
            Mutant::GlobalKeyIndex => "global-key-index",
        }
    }

    pub fn parse(name: &str) -> Option<Mutant> {
        Mutant::ALL.into_iter().find(|m| m.name() == name)
    }

    /// One line: what is broken.
    pub fn description(self) -> &'static str {
        match self {
            Mutant::HolderReadOutsideCommit => {
                "the store reads the key holder outside its atomic commit step"
            }
            Mutant::KeyRuleAfterCas => "the store applies the key rule after CAS",
            Mutant::NoKeyRule => "the store has no key rule (no unique index)",
            Mutant::NoReplan => "the executor does not re-plan after request_key_taken",
            Mutant::DeleteKeepsKeys => "deleteSession leaves the key index behind",
            Mutant::DigestNotCompared => "the executor plans without comparing digests",
            Mutant::GlobalKeyIndex => "the key index is global, not per session",
        }
    }

    /// The `always` property this mutant must violate.
    pub fn violates(self) -> &'static str {
        use crate::checker::props;
        match self {
            // CAS from the lookup's snapshot already keeps a second run
            // out; what these bugs break is the answer a lost race gets.
            Mutant::HolderReadOutsideCommit | Mutant::KeyRuleAfterCas | Mutant::NoKeyRule => {
                props::KEY_REFUSAL
            }
            Mutant::NoReplan => props::LOST_RACE_ATTACHES,
            Mutant::DeleteKeepsKeys => props::DELETE_FREES_KEYS,
            Mutant::DigestNotCompared => props::ATTACH_SAME_INPUT,
            Mutant::GlobalKeyIndex => props::KEY_PER_SESSION,
        }
    }

    /// The run-start rules the store applies under this mutant.
    pub fn rule_variant(mutant: Option<Mutant>) -> RuleVariant {
        match mutant {
            Some(Mutant::KeyRuleAfterCas) => RuleVariant {
                key_rule: KeyRule::AfterCas,
                replay_first: true,
            },
            Some(Mutant::NoKeyRule) => RuleVariant {
                key_rule: KeyRule::Absent,
                replay_first: true,
            },
            _ => RuleVariant::SPEC,
        }
    }
}
