//! What every backend shares: the [`SessionStateStore`] trait, the wire
//! dispatch onto it, and the error of opening a store. Backends import this
//! file, never `store/mod.rs`, so no two files of the crate import each other.

use async_trait::async_trait;
use reqkey_model::json_text::JsonText;
use reqkey_model::seq::{StoreOp, StoreReply};
use reqkey_model::{
    CommitResult, DeleteResult, InputEntry, RunMetadata, RunStatus, StartRun, StoreError,
};

/// Why a store could not be opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    /// The specification names no backend this build knows.
    #[error(
        "unknown store `{0}`; expected memory, sqlite:PATH, postgres://USER@HOST:PORT/DB, redis://HOST:PORT or redis+cluster://HOST:PORT[,HOST:PORT...]"
    )]
    UnknownSpec(String),
    /// The backend's cargo feature is off in this build.
    #[error("this build has no {0} backend (enable the `{0}` feature of reqkey-reference)")]
    NotBuilt(&'static str),
    /// The backend did not answer or refused the connection.
    #[error("cannot open the {backend} store at {target}: {message}")]
    Backend {
        backend: &'static str,
        /// Where it was (credentials redacted).
        target: String,
        message: String,
    },
    /// The schema could not be brought to this build's version.
    #[error("migrating the {backend} schema failed: {message}")]
    Migration {
        backend: &'static str,
        message: String,
    },
}

/// An error with every cause under it, on one line: `tokio_postgres`
/// shows only `db error` or `error connecting to server` and keeps the
/// server's own reason (`database "x" does not exist`, `Connection
/// refused`) in its source.
pub fn with_causes(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    // Bounded: a source chain is short, but nothing promises it ends.
    for _ in 0..8 {
        let Some(c) = cause else { break };
        let text = c.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cause = c.source();
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The redacted stand-in for a secret.
pub const REDACTED: &str = "***";

/// `scheme://USERINFO@host/path?k=v` with the userinfo and every query
/// value replaced by `***`: a password, a token given as the user name
/// and a token in the query never reach a message. Text that is not a URL
/// is returned as it is (it has no userinfo to hide). A PostgreSQL URL
/// keeps its user name (a role, never a secret; "which user?" is the
/// first question when the server refuses it) and hides only the
/// password: `postgres://app:***@h/db`, `postgres://app@h/db`.
pub fn redact_url(url: &str) -> String {
    let Some(written) = crate::scheme::split(url) else {
        return url.to_owned();
    };
    let (scheme, rest) = (written.name, written.rest);
    let postgres = written.is_postgres();
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    // A cluster lists several authorities, each may carry userinfo.
    let authority = authority
        .split(',')
        .map(|a| match a.rsplit_once('@') {
            Some((userinfo, host)) if postgres => match userinfo.split_once(':') {
                Some((user, _)) => format!("{user}:{REDACTED}@{host}"),
                None => format!("{userinfo}@{host}"),
            },
            Some((_, host)) => format!("{REDACTED}@{host}"),
            None => a.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(",");
    let (path, query) = match tail.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (tail, None),
    };
    let mut out = format!("{scheme}://{authority}{path}");
    if let Some(query) = query {
        let query = query.split('#').next().unwrap_or(query);
        let pairs: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((name, _)) => format!("{name}={REDACTED}"),
                None => pair.to_owned(),
            })
            .collect();
        out.push('?');
        out.push_str(&pairs.join("&"));
    }
    out
}

/// A session state store with request keys (SPEC 4).
///
/// Implementations must make `commit_run_start` one atomic step that reads
/// the same-runId run, the key's holder and the current run and decides with
/// `reqkey_model::apply_run_start_rules`.
#[async_trait]
pub trait SessionStateStore: Send + Sync + std::fmt::Debug {
    /// A short backend name for reports (`memory`, `sqlite`, ...).
    fn backend(&self) -> &'static str;

    /// Does what it stores survive a restart of the process that opened it
    /// (a database behind it), so that `/health` may declare `durable:
    /// true` (SPEC 6 `[[wire.store.durable]]`, SPEC 7 `[[agent.durable]]`)?
    /// A store in process memory does not.
    fn durable(&self) -> bool {
        false
    }

    async fn commit_run_start(&self, start: StartRun) -> Result<CommitResult, StoreError>;
    /// [`SessionStateStore::commit_run_start`] with the input given as text
    /// (`start.input` is not read): what `serve agent` calls, so that a
    /// large input is never a `serde_json::Value` unless the store needs
    /// one (issue 39). By default it parses the text into `start.input`
    /// and commits that; a store that keeps inputs as text (the memory
    /// store) overrides it. Both must decide and store the same.
    async fn commit_run_start_text(
        &self,
        mut start: StartRun,
        input: &JsonText,
    ) -> Result<CommitResult, StoreError> {
        start.input = input.to_value();
        self.commit_run_start(start).await
    }
    async fn get_run(
        &self,
        session_id: &str,
        run_id: &str,
    ) -> Result<Option<RunMetadata>, StoreError>;
    async fn get_current_run(&self, session_id: &str) -> Result<Option<RunMetadata>, StoreError>;
    async fn list_runs(&self, session_id: &str) -> Result<Vec<RunMetadata>, StoreError>;
    /// An indexed read; never resolves a key to another session's run.
    async fn get_run_by_request_key(
        &self,
        session_id: &str,
        request_key: &str,
    ) -> Result<Option<RunMetadata>, StoreError>;
    async fn list_inputs(&self, session_id: &str) -> Result<Vec<InputEntry>, StoreError>;
    async fn set_run_status(
        &self,
        session_id: &str,
        run_id: &str,
        status: RunStatus,
    ) -> Result<RunMetadata, StoreError>;
    /// Removes the session's runs, inputs and keys at once; `true` only if it existed.
    /// Its run leases go with it.
    async fn delete_session(&self, session_id: &str) -> Result<bool, StoreError>;

    /// Takes or renews the lease on a run (SPEC 5, `[[lease.renew.owner-only]]`):
    /// `owner` holds it until `expires_at_ms` (ms since the Unix epoch).
    /// `false`, and nothing written, when another owner holds it. A lease
    /// may be taken before its run is committed (the executor does so, so a
    /// run is never `running` without a lease).
    async fn renew_lease(
        &self,
        session_id: &str,
        run_id: &str,
        owner: &str,
        expires_at_ms: u64,
    ) -> Result<bool, StoreError>;

    /// Expires a run's lease (SPEC 5, `[[lease.expire.compare]]`): in one
    /// atomic step, a `running` run whose lease is absent or expired at
    /// `now_ms` becomes `interrupted`; any other run is left as it is.
    /// Answers the run as it is after the step (`None`: no such run).
    async fn expire_lease(
        &self,
        session_id: &str,
        run_id: &str,
        now_ms: u64,
    ) -> Result<Option<RunMetadata>, StoreError>;

    /// Whether [`dispatch`] skips its argument checks for this store. Only
    /// a deliberately broken test store (`MemoryDefect::NoArgumentChecks`,
    /// `HalfKeyStartsKeyless`) answers true.
    fn skip_argument_checks(&self) -> bool {
        false
    }

    /// The operation as this store reads it, before [`dispatch`] checks
    /// it. Every correct store reads it as sent; only a deliberately
    /// broken test store (`MemoryDefect::EmptyFieldsAbsent`,
    /// `IdsCaseInsensitive`) rewrites it, as a careless parser or a
    /// case-insensitive collation would.
    fn prepare_op(&self, op: StoreOp) -> StoreOp {
        op
    }

    /// A rewrite of the raw request before it is parsed. Correct stores
    /// have none; a deliberately broken one (`MemoryStore` with
    /// `StatusCaseFolded`) reads the wire as a careless parser would.
    fn wire_rewrite(&self) -> Option<fn(&serde_json::Value) -> serde_json::Value> {
        None
    }
}

/// Is a lease that expires at `expires_at` (none: never taken) over at `now`?
pub fn lease_over(expires_at: Option<u64>, now_ms: u64) -> bool {
    expires_at.is_none_or(|at| at <= now_ms)
}

/// Runs one validated wire operation against a store.
pub async fn dispatch(
    store: &dyn SessionStateStore,
    op: StoreOp,
) -> Result<StoreReply, StoreError> {
    let op = store.prepare_op(op);
    if !store.skip_argument_checks() {
        op.validate()?;
    }
    Ok(match op {
        StoreOp::CommitRunStart(a) => {
            StoreReply::Commit(store.commit_run_start(a.start_run).await?)
        }
        StoreOp::GetRun(a) => StoreReply::Run(store.get_run(&a.session_id, &a.run_id).await?),
        StoreOp::GetCurrentRun(a) => StoreReply::Run(store.get_current_run(&a.session_id).await?),
        StoreOp::ListRuns(a) => StoreReply::Runs(store.list_runs(&a.session_id).await?),
        StoreOp::GetRunByRequestKey(a) => StoreReply::Run(
            store
                .get_run_by_request_key(&a.session_id, &a.request_key)
                .await?,
        ),
        StoreOp::ListInputs(a) => StoreReply::Inputs(store.list_inputs(&a.session_id).await?),
        StoreOp::SetRunStatus(a) => StoreReply::Run(Some(
            store
                .set_run_status(&a.session_id, &a.run_id, a.status)
                .await?,
        )),
        StoreOp::DeleteSession(a) => StoreReply::Deleted(DeleteResult {
            deleted: store.delete_session(&a.session_id).await?,
        }),
    })
}

/// Parses a raw `{"op", "args"}` request and runs it: the whole server path.
pub async fn dispatch_wire(
    store: &dyn SessionStateStore,
    request: &serde_json::Value,
) -> Result<StoreReply, StoreError> {
    match store.wire_rewrite() {
        Some(rewrite) => dispatch(store, StoreOp::parse_wire(&rewrite(request))?).await,
        None => dispatch(store, StoreOp::parse_wire(request)?).await,
    }
}

/// Upgrades (SPEC 4 `[S4-upgrade]`, `store/legacy.rs`): the rows the SQL
/// backends write through their first schema version.
/// One run as the first schema version holds it: no key columns.
#[derive(Debug, Clone, PartialEq)]
pub struct LegacyRun {
    pub session_id: String,
    pub run_id: String,
    pub status: RunStatus,
    pub start_sequence: u64,
    /// The start digest of the keyless `StartRun` that made it, so that
    /// the identical commit replays after the upgrade.
    pub start_digest: String,
    pub expected_current_run_id: Option<String>,
    pub input: serde_json::Value,
}

impl LegacyRun {
    pub fn start_run(&self) -> StartRun {
        StartRun {
            session_id: self.session_id.clone(),
            run_id: self.run_id.clone(),
            expected_current_run_id: self.expected_current_run_id.clone(),
            input: self.input.clone(),
            request_key: None,
            request_digest: None,
        }
    }

    pub fn metadata(&self) -> RunMetadata {
        RunMetadata {
            session_id: self.session_id.clone(),
            run_id: self.run_id.clone(),
            status: self.status,
            start_sequence: self.start_sequence,
            request_key: None,
            request_digest: None,
        }
    }
}

/// [`dispatch_wire`] from the request's bytes (the store server's path):
/// the arguments are parsed once, into their own types
/// ([`StoreOp::parse_wire_bytes`]).
pub async fn dispatch_wire_bytes(
    store: &dyn SessionStateStore,
    request: &[u8],
) -> Result<StoreReply, StoreError> {
    if let Some(rewrite) = store.wire_rewrite() {
        // Only a broken store reads a request as a value first.
        let value: serde_json::Value = serde_json::from_slice(request)
            .map_err(|e| StoreError::InvalidArgument(format!("not JSON: {e}")))?;
        return dispatch(store, StoreOp::parse_wire(&rewrite(&value))?).await;
    }
    dispatch(store, StoreOp::parse_wire_bytes(request)?).await
}
