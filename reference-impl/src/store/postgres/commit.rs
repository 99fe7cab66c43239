//! One attempt at a run-start commit (the session row locked, the rules
//! decided, the rows written) and at a delete, with what a failed attempt
//! means: retry, or the typed error.

use reqkey_model::rules::{check_status_transition, RunStartContext, RunStartDecision};
use reqkey_model::{
    apply_run_start_rules, CommitOutcome, CommitResult, RunMetadata, RunStatus, StartRun,
    StoreError,
};
use tokio_postgres::error::SqlState;

use super::connect::*;
use super::standby::*;
use crate::store::link_defects::PgLinkDefect;
use crate::store::rows::seq_to_sql;

/// How one attempt of the commit transaction ended.
pub(super) enum Attempt {
    Done(Result<CommitResult, StoreError>),
    /// A unique index fired (the key's backstop); re-read the holder.
    KeyIndexFired,
    /// PostgreSQL rolled the transaction back and says it may succeed if
    /// run again; run the commit again.
    Retry(String),
}

/// Did PostgreSQL roll the transaction back as one that may succeed if
/// run again (SQLSTATE 40001 serialization_failure, 40P01
/// deadlock_detected)? Then nothing of it was written and running it
/// again is safe (SPEC 4 `[[store.link.rolled-back-retried]]`). Nothing
/// else is retried: an error without a SQLSTATE (the link broke) or
/// 40003 (statement completion unknown) leaves the outcome unknown, and a
/// commit run again after it would answer for a write it cannot know
/// (`[[store.link.unknown-outcome]]`).
pub(super) fn rolled_back(e: &tokio_postgres::Error) -> bool {
    matches!(e.code(), Some(c) if *c == SqlState::T_R_SERIALIZATION_FAILURE || *c == SqlState::T_R_DEADLOCK_DETECTED)
}

/// Classifies an error of a write inside the commit.
pub(super) fn write_failure(e: tokio_postgres::Error) -> Attempt {
    match e.code() {
        _ if rolled_back(&e) => Attempt::Retry(describe(&e)),
        Some(code) if *code == SqlState::UNIQUE_VIOLATION => Attempt::KeyIndexFired,
        _ => Attempt::Done(Err(pg_err(e))),
    }
}

/// What one commit attempt reads and does differently in a broken
/// variant (every field `false`/`None` in the reference).
#[derive(Clone, Copy, Default)]
pub(super) struct AttemptHow<'a> {
    /// Off only in the backstop test.
    pub(super) read_holder: bool,
    /// The standby-reads variant's standby.
    pub(super) standby: Option<&'a StandbyConn>,
    /// A link variant (tests of tests only).
    pub(super) defect: Option<PgLinkDefect>,
}

pub(super) async fn commit_attempt(
    conn: &mut Conn,
    start: &StartRun,
    how: AttemptHow<'_>,
) -> Attempt {
    match commit_attempt_inner(conn, start, how).await {
        Ok(attempt) => attempt,
        Err(e) => write_failure(e),
    }
}

pub(super) async fn commit_attempt_inner(
    conn: &mut Conn,
    start: &StartRun,
    how: AttemptHow<'_>,
) -> Result<Attempt, tokio_postgres::Error> {
    let AttemptHow {
        read_holder,
        standby,
        defect,
    } = how;
    let st = &conn.stmts;
    let tx = conn.client.transaction().await?;
    let sid = &start.session_id;
    tx.execute(&st.lock_session, &[sid]).await?;
    // Under the lock: the three reads the rules need (pipelined).
    let key = start.request_key.as_deref().filter(|_| read_holder);
    let same_params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [sid, &start.run_id];
    let current_params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [sid];
    // The broken variant reads the holder and the current run from the
    // standby instead: outside this transaction, from a past state.
    let (same, holder, current) = tokio::try_join!(
        tx.query_opt(&st.run_by_id, &same_params),
        async {
            match (key, standby) {
                (Some(k), Some(standby)) => standby.holder(sid, k).await,
                (Some(k), None) => tx.query_opt(&st.run_by_key, &[sid, &k]).await,
                (None, _) => Ok(None),
            }
        },
        async {
            match standby {
                Some(standby) => standby.current(sid).await,
                None => tx.query_opt(&st.current_run, &current_params).await,
            }
        },
    )?;
    let decided = (|| {
        let same_digest: Option<String> = same
            .as_ref()
            .map(|r| r.try_get(6))
            .transpose()
            .map_err(pg_err)?;
        let same = opt_run(same)?;
        let holder = opt_run(holder)?;
        let current = opt_run(current)?;
        let ctx = RunStartContext {
            same_run_id: same.as_ref().zip(same_digest.as_deref()),
            request_key_holder: holder.as_ref(),
            current_run_id: current.as_ref().map(|r| r.run_id.as_str()),
            next_start_sequence: current.as_ref().map_or(1, |r| r.start_sequence + 1),
        };
        apply_run_start_rules(start, ctx)
    })();
    let decision = match decided {
        Ok(d) => d,
        Err(e) => {
            // Refused (or unreadable): undo the session row we may have created.
            tx.rollback().await?;
            return Ok(Attempt::Done(Err(e)));
        }
    };
    match decision {
        RunStartDecision::Replay(run) => {
            tx.rollback().await?;
            Ok(Attempt::Done(Ok(CommitResult {
                outcome: CommitOutcome::Replayed,
                run,
            })))
        }
        RunStartDecision::Start { run, start_digest } => {
            let seq = match seq_to_sql(run.start_sequence) {
                Ok(s) => s,
                Err(e) => return Ok(Attempt::Done(Err(e))),
            };
            tx.execute(
                &st.insert_run,
                &[
                    &run.session_id,
                    &run.run_id,
                    &run.status.as_str(),
                    &seq,
                    &start_digest,
                    &run.request_key,
                    &run.request_digest,
                ],
            )
            .await?;
            let input = reqkey_model::written_json(&start.input);
            let input_params: [&(dyn tokio_postgres::types::ToSql + Sync); 4] =
                [&run.session_id, &seq, &run.run_id, &input];
            if defect == Some(PgLinkDefect::HalfWritten) {
                // The broken variant: the run (and its key) in one
                // transaction, its input in a second.
                tx.commit().await?;
                conn.client.execute(&st.insert_input, &input_params).await?;
            } else {
                tx.execute(&st.insert_input, &input_params).await?;
                tx.commit().await?;
            }
            Ok(Attempt::Done(Ok(CommitResult {
                outcome: CommitOutcome::Started,
                run,
            })))
        }
    }
}

/// One attempt of `deleteSession`: whether the session existed.
///
/// Why the lock comes first, exactly as in the commit: a commit that is
/// creating the session holds an uncommitted session row, which a plain
/// `DELETE` would not see (and not wait for). Its statements would then
/// delete the commit's run (committed between them) but not its input,
/// leaving a session that no later commit can write. Locking (creating if
/// need be) the row first serializes the delete with every commit of the
/// session.
pub(super) async fn delete_attempt(
    conn: &mut Conn,
    session_id: &str,
) -> Result<bool, tokio_postgres::Error> {
    let st = &conn.stmts;
    let tx = conn.client.transaction().await?;
    tx.execute(&st.lock_session, &[&session_id]).await?;
    tx.execute(&st.delete_inputs, &[&session_id]).await?;
    tx.execute(
        "DELETE FROM reqkey_run_leases WHERE session_id = $1",
        &[&session_id],
    )
    .await?;
    let runs = tx.execute(&st.delete_runs, &[&session_id]).await?;
    // Also removes the row this transaction may have just created.
    tx.execute(&st.delete_session, &[&session_id]).await?;
    tx.commit().await?;
    // A session exists exactly while it has runs.
    Ok(runs > 0)
}

/// One attempt of `setRunStatus`: the run locked, the transition checked,
/// the status written. `Ok(Err(..))` is the store's typed refusal (the
/// read-only transaction rolled back on drop); `Err` a database error.
pub(super) async fn status_attempt(
    conn: &mut Conn,
    session_id: &str,
    run_id: &str,
    status: RunStatus,
) -> Result<Result<RunMetadata, StoreError>, tokio_postgres::Error> {
    let st = &conn.stmts;
    let tx = conn.client.transaction().await?;
    let row = tx.query_opt(&st.lock_run, &[&session_id, &run_id]).await?;
    let mut run = match opt_run(row) {
        Ok(Some(run)) => run,
        Ok(None) => {
            return Ok(Err(StoreError::NotFound(format!(
                "no run {run_id} in session {session_id}"
            ))))
        }
        Err(e) => return Ok(Err(e)),
    };
    if let Err(e) = check_status_transition(&run, status) {
        return Ok(Err(e));
    }
    tx.execute(&st.update_status, &[&session_id, &run_id, &status.as_str()])
        .await?;
    tx.commit().await?;
    run.status = status;
    Ok(Ok(run))
}
