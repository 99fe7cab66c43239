//! The state-space reductions of the system model, and why each keeps every
//! counterexample and every witness (the full argument is in
//! `docs/model.md`, "Reductions"). All three are on by default and off with
//! `Config::reduction = false` (`reqkey model check --no-reduction`), which
//! gives the unreduced counts for comparison.
//!
//! 1. **Unwatched runs do not finish.** No step and no property reads a
//!    run's status except through the key it holds: the plan reads the
//!    holder of the entry's key (`getRunByRequestKey`, or `getRun` of the
//!    holder a refusal named), the commit reads ids only, `getCurrentRun`
//!    is used for its id only. A run whose key no client will read again
//!    in its session (no attempt in flight, no request still to send or to
//!    resend names that session and key), and every keyless run, is
//!    *unwatched*: its `Finish` and `Expire` change only what nobody reads,
//!    so they are not offered. The set of watched keys only shrinks.
//! 2. **A client that is done moves on at once.** When every attempt of a
//!    client's request has answered and no resend is left, the only thing
//!    the client can still do is `Next`, which touches the client alone,
//!    commutes with every other step and leaves the watched keys as they
//!    are (the next request was already counted). It is the only action
//!    offered from such a state (an ample set of one): the state before
//!    it, with the client's answers, is still visited, and its answers
//!    never change afterwards.
//! 3. **What an answer no longer decides is forgotten.** Once an attempt
//!    has answered, no step reads it again except to see that it answered;
//!    the properties read its kind and the ghost flags that property reads
//!    for that kind. The state's hash (the checker tells states apart by
//!    it) sees only that view of an answered attempt, and a client's
//!    attempts as a multiset: states that differ in the run an answer
//!    named, or in the order in which attempts were sent, have the same
//!    future and the same property values, so one of them is explored.

use crate::checker::compact::{pack_opt_ref, pack_ref, AnswerKind, MAX_SESSIONS, MAX_TASKS};
use crate::checker::inline::Inline;
use crate::checker::mutants::Mutant;
use crate::checker::state::{Answer, Client, Phase, SystemState, Task};
use crate::checker::system::KeyedEntryModel;

/// Per session, a bit per key that some client will still read there.
pub type WatchedKeys = [u8; MAX_SESSIONS];

impl KeyedEntryModel {
    /// The keys some client will still read, per session (reduction 1): the
    /// key of every request still to be sent, of a current request with an
    /// attempt in flight, not yet sent, or that a resend may repeat.
    pub(super) fn watched_keys(&self, state: &SystemState) -> WatchedKeys {
        let mut watched = [0u8; MAX_SESSIONS];
        for client in &state.clients {
            let script = self.role_script(client.role);
            let start = client.request as usize;
            for (i, request) in script.iter().enumerate().skip(start) {
                let Some(k) = request.key else { continue };
                let reads_again = i > start
                    || client.tasks.is_empty()
                    || state.retries_left > 0
                    || client
                        .tasks
                        .iter()
                        .any(|t| !matches!(t.phase, Phase::Done(_)));
                if reads_again {
                    watched[request.session as usize] |= 1 << k;
                }
            }
        }
        if self.config.mutant == Some(Mutant::GlobalKeyIndex) {
            // One key index for all sessions: a read of a key in one
            // session may return the holder in any other.
            let all = watched.iter().fold(0, |a, w| a | w);
            watched = [all; MAX_SESSIONS];
        }
        watched
    }

    /// Whether a run (of `session`, holding `key`) may still finish or
    /// expire in a way someone reads (reduction 1).
    pub(super) fn is_watched(watched: &WatchedKeys, session: usize, key: Option<u8>) -> bool {
        key.is_some_and(|k| watched[session] & (1 << k) != 0)
    }

    /// A client whose request has answered with no resend left: its `Next`
    /// is the only action worth offering (reduction 2). Of several such
    /// clients, the least by [`Client::reduced_key`]: the choice then does
    /// not depend on the clients' order, so a state and its symmetric
    /// images offer the same move and the reduced graph, like the full
    /// one, is the same from every member of a symmetry class (the counts
    /// do not depend on which member a thread met first).
    pub(super) fn forced_next(&self, state: &SystemState) -> Option<u8> {
        if state.retries_left > 0 {
            return None;
        }
        state
            .clients
            .iter()
            .enumerate()
            .filter(|(c, client)| {
                !client.tasks.is_empty()
                    && client
                        .tasks
                        .iter()
                        .all(|t| matches!(t.phase, Phase::Done(_)))
                    && self.current_request(state, *c).is_some()
            })
            .min_by_key(|(_, client)| client.reduced_key())
            .map(|(c, _)| c as u8)
    }
}

impl Answer {
    /// What the properties read of an answer (reduction 3): its kind and,
    /// per kind, the ghost flags some property reads for it. The run it
    /// named, the epoch of a non-start and the other flags are left out.
    pub(crate) fn view(&self) -> u64 {
        let flags = match self.kind {
            AnswerKind::Started => u64::from(self.epoch) << 8 | u64::from(self.reused_key),
            AnswerKind::Attached | AnswerKind::Replayed => {
                u64::from(self.names_holder)
                    | u64::from(self.same_input) << 1
                    | u64::from(self.replanned) << 2
                    | u64::from(self.replayed_interrupted) << 3
            }
            AnswerKind::KeyConflict | AnswerKind::AlreadyCompleted => u64::from(self.names_holder),
            AnswerKind::KeyTaken => u64::from(self.deleted_meanwhile),
            AnswerKind::Busy | AnswerKind::Internal => 0,
        };
        (self.kind as u64) << 32 | flags
    }
}

impl Task {
    /// The task as the reduced hash sees it: an attempt in flight whole, an
    /// answered one as its answer's [`Answer::view`] (reduction 3).
    fn reduced_words(&self) -> (u64, u64) {
        match self.phase {
            Phase::Done(answer) => (1 << 62, answer.view()),
            _ => self.words(),
        }
    }

    /// The two words the exact hash writes: the attempt's own fields and
    /// its phase's payload.
    pub(crate) fn words(&self) -> (u64, u64) {
        let (tag, payload) = match self.phase {
            Phase::Lookup => (0, 0),
            Phase::ReadCurrent => (1, 0),
            Phase::Commit { expected } => (2, pack_opt_ref(expected)),
            Phase::CommitWrite {
                expected,
                stale_holder,
            } => (
                3,
                pack_opt_ref(expected) << 45 | stale_holder.map_or(0, |m| 1 << 44 | m.pack()),
            ),
            Phase::Replan { holder } => (4, pack_ref(holder)),
            Phase::Done(a) => (5, a.pack()),
        };
        (
            pack_ref(self.run) << 32
                | u64::from(self.epoch) << 16
                | u64::from(self.cas_tries) << 8
                | u64::from(self.replanned) << 3
                | tag,
            payload,
        )
    }
}

/// A client as the reduced hash and the reduced symmetry order see it:
/// role, request, attempts sent, and its attempts as a sorted multiset.
pub(crate) type ClientKey = (u8, u8, u8, Inline<(u64, u64), MAX_TASKS>);

impl Client {
    pub(crate) fn reduced_key(&self) -> ClientKey {
        let mut tasks: Inline<(u64, u64), MAX_TASKS> =
            self.tasks.iter().map(Task::reduced_words).collect();
        tasks.sort_unstable();
        (self.role, self.request, self.sent, tasks)
    }
}
