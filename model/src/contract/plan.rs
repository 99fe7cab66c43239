//! Planning a keyed entry (SPEC 5): the executor's decision table.
//!
//! The executor parses the key, reads the holder with `getRunByRequestKey`
//! *before* any concurrency policy, and asks [`plan_keyed_entry`]. The
//! digest comparison comes first: a different input under a taken key is a
//! conflict whatever the holder's status.

use crate::contract::types::RunMetadata;

/// The wire code of a keyed request whose input differs from its holder's.
pub const STATE_REQUEST_KEY_CONFLICT: &str = "state_request_key_conflict";
/// The wire code of a keyed request whose finished holder is no longer current.
pub const STATE_REQUEST_ALREADY_COMPLETED: &str = "state_request_already_completed";

/// What a keyed entry does.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum KeyedEntryPlan {
    /// No holder: run, and record the key and digest in the run-start commit.
    New,
    /// The holder is live: answer attached, execute nothing.
    Attach(RunMetadata),
    /// The holder is finished and still current: the same attached answer.
    Replay(RunMetadata),
    /// 409 `state_request_key_conflict`, naming the holder. Nothing written.
    Conflict { holder_run_id: String },
    /// 409 `state_request_already_completed`, naming the holder. Nothing written.
    AlreadyCompleted { holder_run_id: String },
}

/// The SPEC 5 table, conflict first.
///
/// `holder` is the session's run that holds the key (if any),
/// `current_run_id` the session's current run, `request_digest` this
/// request's digest.
pub fn plan_keyed_entry(
    holder: Option<&RunMetadata>,
    current_run_id: Option<&str>,
    request_digest: &str,
) -> KeyedEntryPlan {
    let Some(holder) = holder else {
        return KeyedEntryPlan::New;
    };
    if holder.request_digest.as_deref() != Some(request_digest) {
        return KeyedEntryPlan::Conflict {
            holder_run_id: holder.run_id.clone(),
        };
    }
    if holder.status.is_live() {
        return KeyedEntryPlan::Attach(holder.clone());
    }
    if current_run_id == Some(holder.run_id.as_str()) {
        KeyedEntryPlan::Replay(holder.clone())
    } else {
        KeyedEntryPlan::AlreadyCompleted {
            holder_run_id: holder.run_id.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::types::RunStatus;

    fn holder(status: RunStatus) -> RunMetadata {
        RunMetadata {
            session_id: "s".into(),
            run_id: "h".into(),
            status,
            start_sequence: 1,
            request_key: Some("k".into()),
            request_digest: Some("d".into()),
        }
    }

    #[test]
    fn the_table_row_by_row() {
        use KeyedEntryPlan as P;
        let live = holder(RunStatus::SuspendedTool);
        let done = holder(RunStatus::Failed);
        assert_eq!(plan_keyed_entry(None, Some("x"), "d"), P::New);
        assert_eq!(
            plan_keyed_entry(Some(&live), Some("h"), "d"),
            P::Attach(live.clone())
        );
        assert_eq!(
            plan_keyed_entry(Some(&done), Some("h"), "d"),
            P::Replay(done.clone())
        );
        assert_eq!(
            plan_keyed_entry(Some(&done), Some("later"), "d"),
            P::AlreadyCompleted {
                holder_run_id: "h".into()
            }
        );
    }

    #[test]
    fn a_conflict_wins_over_every_status() {
        for status in RunStatus::ALL {
            for current in [Some("h"), Some("later")] {
                let plan = plan_keyed_entry(Some(&holder(status)), current, "other");
                assert_eq!(
                    plan,
                    KeyedEntryPlan::Conflict {
                        holder_run_id: "h".into()
                    }
                );
            }
        }
    }
}
