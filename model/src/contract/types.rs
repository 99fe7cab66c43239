//! Wire types shared by stores, servers and the harness.
//!
//! Field names are the wire's camelCase. The key fields of a keyless run are
//! *absent*, never `null` (SPEC 1): `skip_serializing_if` on output, and an
//! explicit `null` on input reads as absent.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A run's status. `running`, `suspended_input`, `suspended_tool` are live;
/// `completed`, `failed`, `interrupted` are finished and never change again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Running,
    SuspendedInput,
    SuspendedTool,
    Completed,
    Failed,
    Interrupted,
}

impl RunStatus {
    pub const ALL: [RunStatus; 6] = [
        RunStatus::Running,
        RunStatus::SuspendedInput,
        RunStatus::SuspendedTool,
        RunStatus::Completed,
        RunStatus::Failed,
        RunStatus::Interrupted,
    ];

    pub fn is_live(self) -> bool {
        matches!(
            self,
            RunStatus::Running | RunStatus::SuspendedInput | RunStatus::SuspendedTool
        )
    }

    pub fn is_finished(self) -> bool {
        !self.is_live()
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::SuspendedInput => "suspended_input",
            RunStatus::SuspendedTool => "suspended_tool",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Interrupted => "interrupted",
        }
    }

    pub fn parse(s: &str) -> Option<RunStatus> {
        RunStatus::ALL.into_iter().find(|st| st.as_str() == s)
    }
}

/// One run of a session, as every read returns it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunMetadata {
    pub session_id: String,
    pub run_id: String,
    pub status: RunStatus,
    pub start_sequence: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_digest: Option<String>,
}

/// The argument of `commitRunStart`. `expectedCurrentRunId` is always sent
/// (as `null` for a session without runs); an absent one reads as `null`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StartRun {
    pub session_id: String,
    pub run_id: String,
    #[serde(default)]
    pub expected_current_run_id: Option<String>,
    pub input: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_digest: Option<String>,
}

/// How a run-start commit ended when it was not refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CommitOutcome {
    Started,
    Replayed,
}

/// The answer of a run-start commit: `{outcome, run}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CommitResult {
    pub outcome: CommitOutcome,
    pub run: RunMetadata,
}

/// One entry of a session's input log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InputEntry {
    pub run_id: String,
    pub input: Value,
}

/// The answer of `deleteSession`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DeleteResult {
    pub deleted: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keyless_runs_serialize_without_key_fields() {
        let run = RunMetadata {
            session_id: "s".into(),
            run_id: "r".into(),
            status: RunStatus::SuspendedInput,
            start_sequence: 1,
            request_key: None,
            request_digest: None,
        };
        assert_eq!(
            serde_json::to_value(&run).unwrap(),
            json!({"sessionId": "s", "runId": "r", "status": "suspended_input", "startSequence": 1})
        );
    }

    #[test]
    fn start_run_reads_absent_expected_current_run_id_as_null() {
        let s: StartRun =
            serde_json::from_value(json!({"sessionId": "s", "runId": "r", "input": null})).unwrap();
        assert_eq!(s.expected_current_run_id, None);
        assert_eq!(
            serde_json::to_value(&s).unwrap()["expectedCurrentRunId"],
            Value::Null
        );
    }

    #[test]
    fn status_names_round_trip() {
        for st in RunStatus::ALL {
            assert_eq!(RunStatus::parse(st.as_str()), Some(st));
            assert_eq!(serde_json::to_value(st).unwrap(), json!(st.as_str()));
            assert_ne!(st.is_live(), st.is_finished());
        }
    }
}
