//! Typed store errors that carry the wire codes of `reqkey-store/1`.
//!
//! The wire form (SPEC 6) is
//! `{"kind": "run_start_rejected", "cause": ..., "details": {...}}` or
//! `{"kind": "not_found" | "invalid_transition" | "invalid_argument" | "internal", "message": ...}`.
//! [`StoreError`] serializes to and from exactly that.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// Why a run-start commit was refused (SPEC 4). Nothing was written.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RunStartRejection {
    /// Another run of this session holds the key.
    RequestKeyTaken { existing_run_id: String },
    /// The session's current run is not the expected one.
    CasMismatch { current_run_id: Option<String> },
    /// A run with this runId exists and was started by a different commit.
    RunIdConflict { existing_run_id: String },
}

impl RunStartRejection {
    pub fn cause(&self) -> &'static str {
        match self {
            RunStartRejection::RequestKeyTaken { .. } => "request_key_taken",
            RunStartRejection::CasMismatch { .. } => "cas_mismatch",
            RunStartRejection::RunIdConflict { .. } => "run_id_conflict",
        }
    }

    pub fn details(&self) -> Value {
        match self {
            RunStartRejection::RequestKeyTaken { existing_run_id }
            | RunStartRejection::RunIdConflict { existing_run_id } => {
                json!({ "existingRunId": existing_run_id })
            }
            RunStartRejection::CasMismatch { current_run_id } => {
                json!({ "currentRunId": current_run_id })
            }
        }
    }
}

/// Every error a store operation can answer.
#[derive(Debug, Clone, PartialEq, Eq, Hash, thiserror::Error)]
pub enum StoreError {
    #[error("run start rejected: {} {}", .0.cause(), .0.details())]
    RunStartRejected(RunStartRejection),
    #[error("not found: {0}")]
    NotFound(String),
    #[error("invalid transition: {0}")]
    InvalidTransition(String),
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("internal: {0}")]
    Internal(String),
}

impl StoreError {
    /// The wire `kind`.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::RunStartRejected(_) => "run_start_rejected",
            StoreError::NotFound(_) => "not_found",
            StoreError::InvalidTransition(_) => "invalid_transition",
            StoreError::InvalidArgument(_) => "invalid_argument",
            StoreError::Internal(_) => "internal",
        }
    }

    pub fn invalid_argument(msg: impl Into<String>) -> Self {
        StoreError::InvalidArgument(msg.into())
    }

    pub fn internal(msg: impl Into<String>) -> Self {
        StoreError::Internal(msg.into())
    }

    /// The wire form (SPEC 6).
    pub fn to_wire(&self) -> Value {
        match self {
            StoreError::RunStartRejected(r) => {
                json!({"kind": self.kind(), "cause": r.cause(), "details": r.details()})
            }
            StoreError::NotFound(m)
            | StoreError::InvalidTransition(m)
            | StoreError::InvalidArgument(m)
            | StoreError::Internal(m) => json!({"kind": self.kind(), "message": m}),
        }
    }

    /// Reads the wire form back; `None` for anything that is not a
    /// well-formed SPEC 6 error.
    pub fn from_wire(v: &Value) -> Option<StoreError> {
        let kind = v.get("kind")?.as_str()?;
        let message = || v.get("message").and_then(Value::as_str).map(str::to_owned);
        Some(match kind {
            "run_start_rejected" => {
                let details = v.get("details")?;
                let existing = || details.get("existingRunId")?.as_str().map(str::to_owned);
                StoreError::RunStartRejected(match v.get("cause")?.as_str()? {
                    "request_key_taken" => RunStartRejection::RequestKeyTaken {
                        existing_run_id: existing()?,
                    },
                    "run_id_conflict" => RunStartRejection::RunIdConflict {
                        existing_run_id: existing()?,
                    },
                    "cas_mismatch" => RunStartRejection::CasMismatch {
                        current_run_id: match details.get("currentRunId")? {
                            Value::Null => None,
                            Value::String(s) => Some(s.clone()),
                            _ => return None,
                        },
                    },
                    _ => return None,
                })
            }
            "not_found" => StoreError::NotFound(message()?),
            "invalid_transition" => StoreError::InvalidTransition(message()?),
            "invalid_argument" => StoreError::InvalidArgument(message()?),
            "internal" => StoreError::Internal(message()?),
            _ => return None,
        })
    }
}

impl From<RunStartRejection> for StoreError {
    fn from(r: RunStartRejection) -> Self {
        StoreError::RunStartRejected(r)
    }
}

impl Serialize for StoreError {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_wire().serialize(s)
    }
}

impl<'de> Deserialize<'de> for StoreError {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        StoreError::from_wire(&v)
            .ok_or_else(|| serde::de::Error::custom("not a reqkey-store/1 error object"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_forms_round_trip() {
        let errors = [
            StoreError::from(RunStartRejection::RequestKeyTaken {
                existing_run_id: "r1".into(),
            }),
            StoreError::from(RunStartRejection::RunIdConflict {
                existing_run_id: "r1".into(),
            }),
            StoreError::from(RunStartRejection::CasMismatch {
                current_run_id: None,
            }),
            StoreError::from(RunStartRejection::CasMismatch {
                current_run_id: Some("r".into()),
            }),
            StoreError::NotFound("x".into()),
            StoreError::InvalidTransition("x".into()),
            StoreError::InvalidArgument("x".into()),
            StoreError::Internal("x".into()),
        ];
        for e in errors {
            let wire = serde_json::to_value(&e).unwrap();
            assert_eq!(wire["kind"], e.kind());
            assert_eq!(serde_json::from_value::<StoreError>(wire).unwrap(), e);
        }
    }

    #[test]
    fn request_key_taken_names_the_holder_on_the_wire() {
        let e = StoreError::from(RunStartRejection::RequestKeyTaken {
            existing_run_id: "r9".into(),
        });
        assert_eq!(
            e.to_wire(),
            json!({"kind": "run_start_rejected", "cause": "request_key_taken", "details": {"existingRunId": "r9"}})
        );
    }
}
