//! Blame by counterfactual (SPEC `[[certify.blame.counterfactual]]`, issue
//! 54): which clause a batch of answers no order explains breaks.
//!
//! The strict model says only that no order of the answers is allowed. The
//! first answer that fitted nowhere is a poor witness: the order the search
//! happened to try last decides it, and a fallback clause gets blamed for
//! every fault it has no name for. So the model is asked again, with one
//! clause's rules waived at a time ([`ClauseSet`]): every check of
//! `idem_batch.rs` is a [`Rule`] tagged with the clause it enforces, and a
//! waived rule admits what an app breaking that clause does (each rule's
//! [`Rule::allows`] says what). The clause whose waiver alone lets some
//! order explain every answer is blamed; if none does, the smallest set
//! of at most [`MAX_BLAMED`] clauses that does. No clause is ever blamed by
//! default: where no such set exists the batch has no verdict.
//!
//! Several clauses may each explain the answers alone (a replay without
//! `X-Reqkey-Order` is a wrong replay, or, taking the marked replay for the
//! run, a run marked and a replay unmarked). The explanation that waives
//! the fewest distinct rules wins (one wrong replay against two marks),
//! searched by iterative deepening up to [`MAX_WAIVED_RULES`]; the rest of
//! a tie goes to the clause listed first in [`RELAXABLE`], the narrower
//! waivers before the broader ones, and the message names the others.
//!
//! Pure: a search over the model of `idem_model.rs`, nothing more.

use std::fmt;

use crate::idem_model::clause;

/// The most clauses blamed together: sets of one, then of two, are tried.
pub const MAX_BLAMED: usize = 2;
/// The most distinct rules an explanation may waive.
pub const MAX_WAIVED_RULES: usize = 4;

/// One check of the model, tagged with the clause it enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Rule {
    /// A key the declared syntax admits is taken (not refused as malformed).
    KeyTaken,
    /// A value the syntax does not admit (or an empty key) is refused
    /// `invalidKeyStatus` and runs nothing.
    MalformedRefused,
    /// Under `keySyntax: "token"`, a value of other than token characters
    /// is refused `invalidKeyStatus` and runs nothing.
    TokenRefused,
    /// Under `keyRequired: true` a keyless request is refused 400.
    MissingRefused,
    /// Under `keyRequired: false` a keyless request runs.
    MissingRuns,
    /// Two different keys never share a record.
    KeysApart,
    /// Another method or path in `scope` is another key.
    ScopeApart,
    /// Another caller's answer is never shown.
    CallerNotShown,
    /// Payloads equal as `fingerprint` compares them are one payload.
    FingerprintEquivalence,
    /// A completed key reused with another payload is refused `mismatchStatus`.
    MismatchRefused,
    /// Another payload in flight is refused.
    OtherPayloadRefused,
    /// A run answers its handler's status and carries no replay mark.
    RunIsFirst,
    /// A replay carries the declared replay header.
    ReplayMarked,
    /// Under `errors: released` an error answer frees the key.
    ErrorReleased,
    /// A replay of an error answer is that answer.
    ErrorReplayed,
    /// A replay is the first answer (status, `order`, echo, `X-Reqkey-Order`).
    Replayed,
    /// A key is forgotten by `expiryMs` and its margin.
    Forgotten,
    /// A run takes only a free key (never one held in flight or completed).
    RunsOnFreeKey,
    /// A duplicate in flight is refused `concurrentStatus` (or waits).
    InFlightAnswered,
    /// A refusal has a JSON body.
    RefusalBody,
}

impl Rule {
    /// The clause it enforces.
    pub fn clause(self) -> &'static str {
        match self {
            Self::KeyTaken => clause::SYNTAX,
            Self::MalformedRefused => clause::INVALID,
            Self::TokenRefused => clause::TOKEN,
            Self::MissingRefused => clause::MISSING_REQUIRED,
            Self::MissingRuns => clause::MISSING_OPTIONAL,
            Self::KeysApart => clause::EXACT,
            Self::ScopeApart => clause::SCOPE,
            Self::CallerNotShown => clause::NO_LEAK,
            Self::FingerprintEquivalence => clause::EQUIVALENCE,
            Self::MismatchRefused => clause::MISMATCH,
            Self::OtherPayloadRefused => clause::OTHER_PAYLOAD,
            Self::RunIsFirst | Self::ReplayMarked => clause::REPLAY_HEADER,
            Self::ErrorReleased | Self::ErrorReplayed => clause::REPLAY_ERRORS,
            Self::Replayed => clause::REPLAY,
            Self::Forgotten => clause::EXPIRY,
            Self::RunsOnFreeKey => clause::AT_MOST_ONCE,
            Self::InFlightAnswered => clause::CONCURRENT,
            Self::RefusalBody => clause::ERROR_BODY,
        }
    }

    /// What the rule allows, for messages ("… allows …").
    pub fn allows(self) -> &'static str {
        match self {
            Self::KeyTaken => "only taking a key the declared keySyntax admits, never refusing it as malformed",
            Self::MalformedRefused => "only a refusal invalidKeyStatus that runs nothing",
            Self::TokenRefused => "only a refusal invalidKeyStatus that runs nothing (not a token)",
            Self::MissingRefused => "only a refusal 400 that runs nothing",
            Self::MissingRuns => "only a run (the handler's status, a new order)",
            Self::KeysApart => "only this key's own answer (another key never shares its record)",
            Self::ScopeApart => "only this route's own answer (another method or path in scope is another key)",
            Self::CallerNotShown => "only a refusal that never shows another caller's answer",
            Self::FingerprintEquivalence => "only the answer to the same payload (as fingerprint compares payloads)",
            Self::MismatchRefused => "only a refusal mismatchStatus for another payload",
            Self::OtherPayloadRefused => "only a refusal concurrentStatus or mismatchStatus for another payload in flight",
            Self::RunIsFirst => "only a first execution without the replay header",
            Self::ReplayMarked => "only a replay carrying the declared replay header",
            Self::ErrorReleased => "only a new run after an error answer freed the key (errors released)",
            Self::ErrorReplayed => "only the stored error answer replayed (its status and order)",
            Self::Replayed => "only the first answer replayed (its status, order, echo and X-Reqkey-Order)",
            Self::Forgotten => "only a new run once expiryMs and its margin have passed",
            Self::RunsOnFreeKey => "only a replay or a refusal while the key is held (one run per key)",
            Self::InFlightAnswered => "only the declared answer to a duplicate in flight (concurrentStatus, or the first answer after waiting)",
            Self::RefusalBody => "only a refusal with a JSON body",
        }
    }

    fn bit(self) -> u32 {
        1 << (self as u32)
    }
}

/// The clauses a rule of the model enforces, in the order ties are broken:
/// the narrower waivers (one key, one payload, one answer's content) first,
/// the broader (any run, any answer in flight, any refusal's body) last.
pub const RELAXABLE: [&str; 18] = [
    clause::SYNTAX,
    clause::TOKEN,
    clause::INVALID,
    clause::MISSING_REQUIRED,
    clause::MISSING_OPTIONAL,
    clause::EXACT,
    clause::SCOPE,
    clause::NO_LEAK,
    clause::EQUIVALENCE,
    clause::MISMATCH,
    clause::OTHER_PAYLOAD,
    clause::REPLAY_HEADER,
    clause::REPLAY_ERRORS,
    clause::REPLAY,
    clause::EXPIRY,
    clause::AT_MOST_ONCE,
    clause::CONCURRENT,
    clause::ERROR_BODY,
];

/// A set of clauses of [`RELAXABLE`] whose rules are waived.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct ClauseSet(u32);

impl ClauseSet {
    /// No clause waived: the strict model.
    pub const NONE: ClauseSet = ClauseSet(0);

    /// The set of `clauses` (ids not in [`RELAXABLE`] are ignored).
    pub fn of(clauses: &[&str]) -> Self {
        let mut s = Self::NONE;
        for c in clauses {
            if let Some(i) = RELAXABLE.iter().position(|r| r == c) {
                s.0 |= 1 << i;
            }
        }
        s
    }

    pub fn has(self, clause: &str) -> bool {
        RELAXABLE
            .iter()
            .position(|r| *r == clause)
            .is_some_and(|i| self.0 & (1 << i) != 0)
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Its clauses, in [`RELAXABLE`] order.
    pub fn clauses(self) -> Vec<&'static str> {
        RELAXABLE
            .iter()
            .enumerate()
            .filter(|(i, _)| self.0 & (1 << i) != 0)
            .map(|(_, c)| *c)
            .collect()
    }
}

/// What a judge may waive: the clauses, and how many distinct rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Relax {
    pub clauses: ClauseSet,
    pub max_rules: usize,
}

impl Relax {
    /// Nothing waived.
    pub const STRICT: Relax = Relax {
        clauses: ClauseSet::NONE,
        max_rules: 0,
    };

    /// Whether `rule` may be waived at all.
    pub fn allows(self, rule: Rule) -> bool {
        self.clauses.has(rule.clause())
    }

    pub fn is_strict(self) -> bool {
        self.clauses.is_empty()
    }
}

/// Distinct rules waived (a bit set of [`Rule`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Rules(u32);

impl Rules {
    pub fn with(self, rule: Rule) -> Self {
        Rules(self.0 | rule.bit())
    }
    pub fn union(self, other: Rules) -> Self {
        Rules(self.0 | other.0)
    }
    pub fn count(self) -> usize {
        self.0.count_ones() as usize
    }
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
    /// Whether `relax` waives all of them, and no more of them than it may.
    pub fn within(self, relax: Relax) -> bool {
        self.count() <= relax.max_rules && self.rules().iter().all(|r| relax.allows(*r))
    }
    pub fn rules(self) -> Vec<Rule> {
        ALL_RULES
            .iter()
            .copied()
            .filter(|r| self.0 & r.bit() != 0)
            .collect()
    }
}

const ALL_RULES: [Rule; 20] = [
    Rule::KeyTaken,
    Rule::MalformedRefused,
    Rule::TokenRefused,
    Rule::MissingRefused,
    Rule::MissingRuns,
    Rule::KeysApart,
    Rule::ScopeApart,
    Rule::CallerNotShown,
    Rule::FingerprintEquivalence,
    Rule::MismatchRefused,
    Rule::OtherPayloadRefused,
    Rule::RunIsFirst,
    Rule::ReplayMarked,
    Rule::ErrorReleased,
    Rule::ErrorReplayed,
    Rule::Replayed,
    Rule::Forgotten,
    Rule::RunsOnFreeKey,
    Rule::InFlightAnswered,
    Rule::RefusalBody,
];

/// One waived check: the rule, the request it let through (its label and
/// answer as messages show them) and what the rule would have allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiver {
    pub rules: Rules,
    /// The request and its answer (`None`: a waiver of the key's timeline,
    /// described by `allowed`).
    pub request: Option<String>,
    pub allowed: String,
}

impl fmt::Display for Waiver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let clauses: Vec<&str> = self.rules.rules().iter().map(|r| r.clause()).collect();
        let clauses = clauses.join(", ");
        match &self.request {
            Some(r) => write!(f, "{r}; {clauses} allows {}", self.allowed),
            None => write!(f, "{clauses} allows {}", self.allowed),
        }
    }
}

/// The blamed clauses of a batch no strict order explains, found by
/// waiving them: `explains(relax)` is the model with `relax` waived, the
/// waivers of one explanation when it explains the answers.
pub fn blame(
    mut explains: impl FnMut(Relax) -> Option<Vec<Waiver>>,
) -> Option<(Vec<&'static str>, Vec<Waiver>, Vec<&'static str>)> {
    for size in 1..=MAX_BLAMED {
        let sets = subsets(size);
        for max_rules in size..=MAX_WAIVED_RULES {
            // Searched without messages; the set picked is searched again
            // with them (the search is deterministic: the same waivers).
            let mut found: Vec<(ClauseSet, Vec<Waiver>)> = Vec::new();
            for set in &sets {
                let relax = Relax {
                    clauses: *set,
                    max_rules,
                };
                if let Some(w) = crate::idem_why::quietly(|| explains(relax)) {
                    found.push((*set, w));
                }
            }
            if let Some((set, quiet_waivers)) = found.first().cloned() {
                let waivers = explains(Relax {
                    clauses: set,
                    max_rules,
                })
                .unwrap_or(quiet_waivers);
                let others = found[1..]
                    .iter()
                    .flat_map(|(s, _)| s.clauses())
                    .filter(|c| !set.has(c))
                    .collect();
                return Some((set.clauses(), waivers, others));
            }
        }
    }
    None
}

/// Every set of `size` clauses of [`RELAXABLE`], in list order.
fn subsets(size: usize) -> Vec<ClauseSet> {
    let n = RELAXABLE.len();
    let mut out = Vec::new();
    match size {
        1 => out.extend((0..n).map(|i| ClauseSet(1 << i))),
        _ => {
            for i in 0..n {
                for j in i + 1..n {
                    out.push(ClauseSet((1 << i) | (1 << j)));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_is_in_the_list_and_its_clause_relaxable() {
        for r in ALL_RULES {
            assert!(RELAXABLE.contains(&r.clause()), "{r:?}");
            assert!(ClauseSet::of(&[r.clause()]).has(r.clause()));
        }
        assert_eq!(ALL_RULES.len(), Rule::RefusalBody as usize + 1);
    }

    #[test]
    fn a_clause_set_keeps_list_order() {
        let s = ClauseSet::of(&[clause::CONCURRENT, clause::SYNTAX]);
        assert_eq!(s.clauses(), vec![clause::SYNTAX, clause::CONCURRENT]);
        assert!(!s.has(clause::REPLAY));
    }

    #[test]
    fn the_fewest_waived_rules_win_before_list_order() {
        // A clause later in the list explaining with one rule beats an
        // earlier one needing two.
        let (blamed, _, _) = blame(|r| {
            let one = r.clauses.has(clause::REPLAY) && r.max_rules >= 1;
            let two = r.clauses.has(clause::REPLAY_HEADER) && r.max_rules >= 2;
            (one || two).then(Vec::new)
        })
        .unwrap();
        assert_eq!(blamed, vec![clause::REPLAY]);
    }

    #[test]
    fn no_clause_is_blamed_when_nothing_explains() {
        assert!(blame(|_| None).is_none());
    }

    #[test]
    fn a_pair_is_blamed_only_when_no_single_clause_explains() {
        let (blamed, _, _) = blame(|r| {
            (r.clauses.has(clause::EXPIRY) && r.clauses.has(clause::REPLAY)).then(Vec::new)
        })
        .unwrap();
        assert_eq!(blamed, vec![clause::REPLAY, clause::EXPIRY]);
    }
}
