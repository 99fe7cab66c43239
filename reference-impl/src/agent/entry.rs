//! One entry (start, resume, retry, chat send) as the HTTP layer hands it
//! to the executor, and how it ends: an outcome or a typed refusal.

use reqkey_model::json_text::JsonText;
use reqkey_model::plan::{STATE_REQUEST_ALREADY_COMPLETED, STATE_REQUEST_KEY_CONFLICT};
use reqkey_model::{RequestKey, RunMetadata, StoreError};

/// The four entries of SPEC 7.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EntryKind {
    Start,
    Resume,
    Retry,
    /// A chat send; its input is `{"text": <last message content>}`.
    Chat,
}

/// One entry as the HTTP layer (or any caller) hands it over.
#[derive(Debug, Clone, PartialEq)]
pub struct EntryRequest {
    pub session_id: String,
    pub kind: EntryKind,
    /// The entry's input (ignored on retry, which re-runs the last input),
    /// as text: a `Value` of a large input costs many times its size.
    pub input: JsonText,
    /// Already parsed: a malformed key never gets this far.
    pub request_key: Option<RequestKey>,
    /// The string escapes (`\u00e9`, `\/`) the body was written with, in
    /// order: read only by the digest of the broken variant
    /// `ExecutorDefect::DigestKeepsStringEscapes`.
    pub written_escapes: String,
}

/// How an entry ended when it was not refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryOutcome {
    /// A new run started (HTTP 201 `started`).
    Started(RunMetadata),
    /// The key's holder answers (HTTP 200 `attached`): attach or replay.
    Attached(RunMetadata),
}

impl EntryOutcome {
    pub fn run(&self) -> &RunMetadata {
        match self {
            EntryOutcome::Started(r) | EntryOutcome::Attached(r) => r,
        }
    }

    pub fn attached(&self) -> bool {
        matches!(self, EntryOutcome::Attached(_))
    }
}

/// Why an entry was refused. Nothing was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EntryError {
    #[error("the session already has runs")]
    SessionExists,
    #[error("the session does not exist")]
    SessionNotFound,
    #[error("the session's current run is still running")]
    AlreadyRunning,
    #[error("the request key is held by a run with a different input")]
    KeyConflict { run_id: String },
    #[error("the request key's run has finished and a later run exists")]
    AlreadyCompleted { run_id: String },
    #[error("the session changed too often under this entry; retry")]
    Contended,
    #[error("store: {0}")]
    Store(StoreError),
}

impl EntryError {
    /// The wire code.
    pub fn code(&self) -> &'static str {
        match self {
            EntryError::SessionExists => "state_session_exists",
            EntryError::SessionNotFound => "state_session_not_found",
            EntryError::AlreadyRunning => "state_already_running",
            EntryError::KeyConflict { .. } => STATE_REQUEST_KEY_CONFLICT,
            EntryError::AlreadyCompleted { .. } => STATE_REQUEST_ALREADY_COMPLETED,
            EntryError::Contended => "state_contended",
            EntryError::Store(StoreError::InvalidArgument(_)) => "validation_error",
            EntryError::Store(_) => "store_unavailable",
        }
    }

    /// The HTTP status. Never 500: a store failure is 503.
    pub fn http_status(&self) -> u16 {
        match self {
            EntryError::SessionNotFound => 404,
            EntryError::SessionExists
            | EntryError::AlreadyRunning
            | EntryError::KeyConflict { .. }
            | EntryError::AlreadyCompleted { .. } => 409,
            EntryError::Store(StoreError::InvalidArgument(_)) => 400,
            EntryError::Contended | EntryError::Store(_) => 503,
        }
    }

    /// The run the two keyed 409s name (and only they).
    pub fn run_id(&self) -> Option<&str> {
        match self {
            EntryError::KeyConflict { run_id } | EntryError::AlreadyCompleted { run_id } => {
                Some(run_id)
            }
            _ => None,
        }
    }
}

impl From<StoreError> for EntryError {
    fn from(e: StoreError) -> Self {
        EntryError::Store(e)
    }
}
