//! The model's state: sessions, clients, their executor tasks and the
//! answers they got, in small integers and inline vectors; the actions
//! that move it; clients sorted for symmetry (`Representative`).

use stateright::Representative;

use crate::checker::compact::pack_opt_ref;
use crate::checker::compact::{
    AnswerKind, Meta, RunRef, StoreSession, MAX_CLIENTS, MAX_KEYS, MAX_TASKS,
};
use crate::checker::inline::Inline;

/// A session: the store's part and the model's bookkeeping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Session {
    pub store: StoreSession,
    /// Deletes so far.
    pub epoch: u8,
    /// Ghost: a bit per key held at some delete.
    pub freed: u8,
    /// Only under [`Mutant::DeleteKeepsKeys`]: the key index a delete left.
    pub zombie_keys: Inline<(u8, Meta), MAX_KEYS>,
}

/// A client-visible answer plus ghost facts about the moment it was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Answer {
    pub kind: AnswerKind,
    /// The run the answer names (started, attached, replayed, 409).
    pub run: Option<RunRef>,
    /// The answer came from the re-plan after `request_key_taken`.
    pub replanned: bool,
    /// The session's epoch (deletes so far) when the answer was given.
    pub epoch: u8,
    /// Ghost: the named run was the key's holder in this session.
    pub names_holder: bool,
    /// Ghost: the named run carries this request's digest.
    pub same_input: bool,
    /// Ghost: a started run took a key that an earlier epoch held.
    pub reused_key: bool,
    /// Ghost: the session was deleted while the entry was in flight.
    pub deleted_meanwhile: bool,
    /// Ghost: a replay of a run that was `interrupted` when answered (its
    /// status is final by then, so the answer says it for good).
    pub replayed_interrupted: bool,
}

/// Where an executor task is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Phase {
    #[default]
    Lookup,
    ReadCurrent,
    Commit {
        expected: Option<RunRef>,
    },
    /// Only under [`Mutant::HolderReadOutsideCommit`]: the holder was read,
    /// the decision and write come later.
    CommitWrite {
        expected: Option<RunRef>,
        stale_holder: Option<Meta>,
    },
    Replan {
        holder: RunRef,
    },
    Done(Answer),
}

/// One attempt (HTTP request) of a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Task {
    pub run: RunRef,
    /// The session's epoch when the attempt was sent.
    pub epoch: u8,
    pub cas_tries: u8,
    pub replanned: bool,
    pub phase: Phase,
}

/// A client: where it is in its script, and the attempts of the current
/// request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Client {
    /// The client's role: its script, shared with its twins.
    pub role: u8,
    pub request: u8,
    pub sent: u8,
    pub tasks: Inline<Task, MAX_TASKS>,
}

/// The whole system. Sessions and clients are the two heap vectors, sized
/// by the configuration; everything inside them is inline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SystemState {
    /// One store session per session index (the store is a map of these).
    pub sessions: Vec<Session>,
    pub deletes_left: u8,
    pub retries_left: u8,
    /// Lease expiries still possible.
    pub expiries_left: u8,
    /// Run ids handed out so far, per role.
    pub role_counters: Inline<u8, MAX_CLIENTS>,
    pub clients: Vec<Client>,
    /// Ghost: some keyed commit was answered other than "request_key_taken
    /// naming the holder" exactly when another run held its key.
    pub key_refusal_wrong: bool,
    /// Constant per model: hash (and order twins) by what is still read
    /// (`reduction.rs`, reduction 3) rather than by every field.
    pub reduced: bool,
}

impl std::hash::Hash for SystemState {
    /// The checker tells states apart by this hash alone. Exact: every
    /// field. Reduced: an answered attempt as its answer's view, a
    /// client's attempts as a multiset (`reduction.rs`).
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.sessions.hash(state);
        self.deletes_left.hash(state);
        self.retries_left.hash(state);
        self.expiries_left.hash(state);
        self.role_counters.hash(state);
        if self.reduced {
            state.write_usize(self.clients.len());
            for client in &self.clients {
                client.reduced_key().hash(state);
            }
        } else {
            self.clients.hash(state);
        }
        self.key_refusal_wrong.hash(state);
    }
}

impl Answer {
    /// 37 bits.
    pub(crate) fn pack(&self) -> u64 {
        let kind = self.kind as u64;
        kind << 32
            | pack_opt_ref(self.run) << 15
            | u64::from(self.epoch) << 4
            | u64::from(self.replanned) << 3
            | u64::from(self.names_holder) << 2
            | u64::from(self.same_input) << 1
            | u64::from(self.reused_key)
            | u64::from(self.deleted_meanwhile) << 35
            | u64::from(self.replayed_interrupted) << 36
    }
}

impl std::hash::Hash for Task {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        let (own, payload) = self.words();
        state.write_u64(own);
        state.write_u64(payload);
    }
}

/// Which client (and task) moves, or which environment event happens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// The client sends its current request (again, after a lost response).
    Send { client: u8 },
    /// One executor step of a task.
    Step { client: u8, task: u8 },
    /// The client moves on to its next request.
    Next { client: u8 },
    /// A live run completes.
    Finish { session: u8, run: RunRef },
    /// `deleteSession`.
    Delete { session: u8 },
    /// The executor of a running run died; its lease ran out and a reader
    /// (any replica) set the run `interrupted` in one atomic step that
    /// compares the lease (SPEC 5, `[[lease.expire.compare]]`). The dead
    /// executor's own finish is then no longer possible: `interrupted` is
    /// final.
    Expire { session: u8, run: RunRef },
}

impl Representative for SystemState {
    /// Sorts the clients. A client's behaviour depends only on its own
    /// fields (its role names its script), and run ids are per role, so any
    /// permutation of the client vector is an equivalent state; sorting
    /// picks one per class. Only twins (same role) really move: `role` is
    /// the first field of the order.
    fn representative(&self) -> Self {
        let mut rep = self.clone();
        if self.reduced {
            rep.clients.sort_by_cached_key(Client::reduced_key);
        } else {
            rep.clients.sort_unstable();
        }
        rep
    }
}
