//! The run-start commit's rules (SPEC 4) as one pure function.
//!
//! A store reads, inside its atomic step, the three things the rules look
//! at — the run with the commit's runId (and its start digest), the run of
//! this session that holds the key, and the session's current run id — and
//! hands them to [`apply_run_start_rules`]. The function decides; the store
//! writes what it decided, still inside the same step. Order matters and is
//! fixed here: same-runId replay, key holder, CAS, write.
//!
//! [`RuleVariant`] exists so that tests can prove the conformance suite and
//! the model catch a store that applies the rules in another order or not at
//! all. Production code uses [`RuleVariant::SPEC`].

use crate::contract::digest::start_digest;
use crate::contract::error::{RunStartRejection, StoreError};
use crate::contract::key::parse_request_key;
use crate::contract::types::{RunMetadata, RunStatus, StartRun};

/// The longest session id or run id (SPEC 1).
pub const ID_MAX_LEN: usize = 256;
/// The longest session id (SPEC 1).
pub const SESSION_ID_MAX_LEN: usize = ID_MAX_LEN;
/// The longest run id (SPEC 1).
pub const RUN_ID_MAX_LEN: usize = ID_MAX_LEN;

/// What a store read inside its atomic step, for one commit.
#[derive(Debug, Clone, Copy)]
pub struct RunStartContext<'a> {
    /// The session's run with the commit's `runId`, with that run's start digest.
    pub same_run_id: Option<(&'a RunMetadata, &'a str)>,
    /// The run of THIS session that holds the commit's `requestKey`.
    pub request_key_holder: Option<&'a RunMetadata>,
    /// The session's current run id; `None` when it has no runs.
    pub current_run_id: Option<&'a str>,
    /// The `startSequence` a new run would get.
    pub next_start_sequence: u64,
}

/// What the commit does when it is not refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunStartDecision {
    /// Write nothing; answer `replayed` with this run as it is now.
    Replay(RunMetadata),
    /// Create this run, make it current, append the input.
    Start {
        run: RunMetadata,
        start_digest: String,
    },
}

/// Where (whether) the key rule is applied. Only [`KeyRule::BeforeCas`] is
/// the spec; the others are deliberate bugs for proving tests can fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyRule {
    BeforeCas,
    AfterCas,
    Absent,
}

/// A version of the rules. [`RuleVariant::SPEC`] is the contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RuleVariant {
    pub key_rule: KeyRule,
    /// Check for a same-runId replay first (rule 1). Without it a retried
    /// commit is refused by its own key.
    pub replay_first: bool,
}

impl RuleVariant {
    pub const SPEC: RuleVariant = RuleVariant {
        key_rule: KeyRule::BeforeCas,
        replay_first: true,
    };
}

/// Checks a session id: 1 to 256 characters of `[A-Za-z0-9._:-]`.
pub fn validate_session_id(session_id: &str) -> Result<(), StoreError> {
    validate_id("sessionId", session_id)
}

/// An id in an agent request's path: its segment with each `%XX`
/// decoded exactly once (SPEC 7 `[[agent.path.percent-decoded-once]]`);
/// `None` when the bytes decoded are not UTF-8. The limits of SPEC 1 apply
/// to what this returns, so `a%62` is `ab` and `a%2562` the invalid `a%62`.
pub fn path_id(segment: &str) -> Option<String> {
    let bytes = segment.as_bytes();
    let hex = |at: usize| bytes.get(at).and_then(|b| (*b as char).to_digit(16));
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match (bytes[i], hex(i + 1), hex(i + 2)) {
            (b'%', Some(hi), Some(lo)) => {
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// Checks a run id (`runId`, `expectedCurrentRunId`): 1 to 256 characters
/// of `[A-Za-z0-9._:-]`, the limits of a session id (SPEC 1).
///
/// Every store checks it before touching storage, so a run id no engine
/// could index (a Postgres btree row holds about 2.7 kB) is refused alike
/// everywhere with `invalid_argument` instead of one backend answering
/// `internal`.
pub fn validate_run_id(field: &str, run_id: &str) -> Result<(), StoreError> {
    validate_id(field, run_id)
}

/// 1 to [`ID_MAX_LEN`] characters of `[A-Za-z0-9._:-]`. The message names
/// the field and the rule, never the value.
fn validate_id(field: &str, id: &str) -> Result<(), StoreError> {
    if id.is_empty() || id.len() > ID_MAX_LEN {
        return Err(StoreError::invalid_argument(format!(
            "{field} must be 1 to {ID_MAX_LEN} characters"
        )));
    }
    if !id.bytes().all(crate::contract::key::is_key_byte) {
        return Err(StoreError::invalid_argument(format!(
            "{field} has a character outside [A-Za-z0-9._:-]"
        )));
    }
    Ok(())
}

/// Checks a request digest: a non-empty string without U+0000.
///
/// SPEC 3 leaves a black-box store's digest algorithm open, so only what
/// some engine cannot store is refused (Postgres `text` cannot hold NUL):
/// every reference store refuses it alike rather than one answering
/// `internal`. Digests are never indexed, so their length is free.
pub fn validate_digest(field: &str, digest: &str) -> Result<(), StoreError> {
    if digest.is_empty() {
        return Err(StoreError::invalid_argument(format!(
            "{field} must not be empty"
        )));
    }
    if digest.contains('\0') {
        return Err(StoreError::invalid_argument(format!(
            "{field} must not contain U+0000"
        )));
    }
    Ok(())
}

/// Checks the fields of a `StartRun` (SPEC 4, field rules).
pub fn validate_start_run(start: &StartRun) -> Result<(), StoreError> {
    validate_session_id(&start.session_id)?;
    validate_run_id("runId", &start.run_id)?;
    if let Some(expected) = &start.expected_current_run_id {
        validate_run_id("expectedCurrentRunId", expected)?;
    }
    match (&start.request_key, &start.request_digest) {
        (None, None) => Ok(()),
        (Some(key), Some(digest)) => {
            parse_request_key(key).map_err(|e| StoreError::invalid_argument(e.to_string()))?;
            validate_digest("requestDigest", digest)
        }
        _ => Err(StoreError::invalid_argument(
            "requestKey and requestDigest come together",
        )),
    }
}

/// The four ordered rules of the run-start commit (SPEC 4).
pub fn apply_run_start_rules(
    start: &StartRun,
    ctx: RunStartContext<'_>,
) -> Result<RunStartDecision, StoreError> {
    apply_run_start_rules_variant(start, ctx, RuleVariant::SPEC)
}

/// [`apply_run_start_rules`] under a [`RuleVariant`] (tests and mutants).
pub fn apply_run_start_rules_variant(
    start: &StartRun,
    ctx: RunStartContext<'_>,
    variant: RuleVariant,
) -> Result<RunStartDecision, StoreError> {
    validate_start_run(start)?;
    let digest = start_digest(start);
    apply_validated_run_start_rules(start, &digest, ctx, variant)
}

/// The rules for a `start` that already passed [`validate_start_run`], with
/// its [`start_digest`] computed once by the caller (the linearizability
/// checker tries one commit at many points of a history).
pub fn apply_validated_run_start_rules(
    start: &StartRun,
    digest: &str,
    ctx: RunStartContext<'_>,
    variant: RuleVariant,
) -> Result<RunStartDecision, StoreError> {
    // 1. Same-runId replay.
    let replay = |ctx: &RunStartContext<'_>| -> Option<Result<RunStartDecision, StoreError>> {
        let (existing, existing_digest) = ctx.same_run_id?;
        Some(if existing_digest == digest {
            Ok(RunStartDecision::Replay(existing.clone()))
        } else {
            Err(RunStartRejection::RunIdConflict {
                existing_run_id: existing.run_id.clone(),
            }
            .into())
        })
    };
    if variant.replay_first {
        if let Some(answer) = replay(&ctx) {
            return answer;
        }
    }

    // 2. Key holder (another run of this session holds the key).
    let key_rule = |ctx: &RunStartContext<'_>| -> Result<(), StoreError> {
        if start.request_key.is_none() {
            return Ok(());
        }
        match ctx.request_key_holder {
            Some(holder) if holder.run_id != start.run_id => {
                Err(RunStartRejection::RequestKeyTaken {
                    existing_run_id: holder.run_id.clone(),
                }
                .into())
            }
            _ => Ok(()),
        }
    };
    if variant.key_rule == KeyRule::BeforeCas {
        key_rule(&ctx)?;
    }

    // 3. CAS on the current run.
    if ctx.current_run_id != start.expected_current_run_id.as_deref() {
        return Err(RunStartRejection::CasMismatch {
            current_run_id: ctx.current_run_id.map(str::to_owned),
        }
        .into());
    }
    if variant.key_rule == KeyRule::AfterCas {
        key_rule(&ctx)?;
    }
    if !variant.replay_first {
        if let Some(answer) = replay(&ctx) {
            return answer;
        }
    }

    // 4. Write.
    Ok(RunStartDecision::Start {
        run: RunMetadata {
            session_id: start.session_id.clone(),
            run_id: start.run_id.clone(),
            status: RunStatus::Running,
            start_sequence: ctx.next_start_sequence,
            request_key: start.request_key.clone(),
            request_digest: start.request_digest.clone(),
        },
        start_digest: digest.to_owned(),
    })
}

/// `setRunStatus`'s rule: any live -> live or live -> finished change is
/// allowed; a finished run refuses every change, to its own status too.
pub fn check_status_transition(run: &RunMetadata, to: RunStatus) -> Result<(), StoreError> {
    if run.status.is_finished() {
        return Err(StoreError::InvalidTransition(format!(
            "run {} is {} and finished runs never change (asked: {})",
            run.run_id,
            run.status.as_str(),
            to.as_str()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_path_id_is_its_segment_decoded_once() {
        assert_eq!(path_id("a%62").as_deref(), Some("ab"));
        assert_eq!(path_id("a%2562").as_deref(), Some("a%62"));
        assert_eq!(path_id("a%6").as_deref(), Some("a%6"));
        assert_eq!(path_id("a%zz:b").as_deref(), Some("a%zz:b"));
        assert_eq!(path_id("%ff"), None);
        assert!(validate_session_id(&path_id("s%2578").unwrap_or_default()).is_err());
    }

    use super::*;
    use serde_json::json;

    fn start(run_id: &str, expected: Option<&str>, key: Option<&str>) -> StartRun {
        StartRun {
            session_id: "s".into(),
            run_id: run_id.into(),
            expected_current_run_id: expected.map(Into::into),
            input: json!({"text": run_id}),
            request_key: key.map(Into::into),
            request_digest: key.map(|_| "d".into()),
        }
    }

    fn run(run_id: &str, seq: u64, key: Option<&str>) -> RunMetadata {
        RunMetadata {
            session_id: "s".into(),
            run_id: run_id.into(),
            status: RunStatus::Running,
            start_sequence: seq,
            request_key: key.map(Into::into),
            request_digest: key.map(|_| "d".into()),
        }
    }

    fn ctx<'a>(
        same: Option<(&'a RunMetadata, &'a str)>,
        holder: Option<&'a RunMetadata>,
        current: Option<&'a str>,
    ) -> RunStartContext<'a> {
        RunStartContext {
            same_run_id: same,
            request_key_holder: holder,
            current_run_id: current,
            next_start_sequence: 2,
        }
    }

    fn cause(r: Result<RunStartDecision, StoreError>) -> &'static str {
        match r {
            Ok(RunStartDecision::Replay(_)) => "replayed",
            Ok(RunStartDecision::Start { .. }) => "started",
            Err(StoreError::RunStartRejected(r)) => r.cause(),
            Err(e) => e.kind(),
        }
    }

    #[test]
    fn run_ids_have_the_limits_of_session_ids() {
        let longest = "r".repeat(RUN_ID_MAX_LEN);
        let refused = |id: &str| {
            cause(apply_run_start_rules(
                &start(id, None, None),
                ctx(None, None, None),
            ))
        };
        assert_eq!(refused(&longest), "started");
        assert_eq!(refused("A-z.0_9:x"), "started");
        for bad in [
            String::new(),
            "r".repeat(RUN_ID_MAX_LEN + 1),
            "r 1".into(),
            "r/1".into(),
            "r\u{0}".into(),
            "é".into(),
        ] {
            assert_eq!(refused(&bad), "invalid_argument", "{bad:?}");
        }
        let mut stale = start("r2", Some(&"r".repeat(RUN_ID_MAX_LEN + 1)), None);
        assert!(validate_start_run(&stale).is_err());
        stale.expected_current_run_id = Some("r1".into());
        assert!(validate_start_run(&stale).is_ok());
        // A digest is not an id: any non-empty string without NUL.
        let mut keyed = start("r3", None, Some("k"));
        keyed.request_digest = Some("a b/é".repeat(1000));
        assert!(validate_start_run(&keyed).is_ok());
    }

    #[test]
    fn a_fresh_commit_starts_with_the_next_sequence_and_the_key() {
        let s = start("r2", Some("r1"), Some("k"));
        let d = apply_run_start_rules(&s, ctx(None, None, Some("r1"))).unwrap();
        let RunStartDecision::Start {
            run,
            start_digest: sd,
        } = d
        else {
            panic!("{d:?}")
        };
        assert_eq!((run.start_sequence, run.status), (2, RunStatus::Running));
        assert_eq!(run.request_key.as_deref(), Some("k"));
        assert_eq!(sd, crate::contract::digest::start_digest(&s));
    }

    #[test]
    fn replay_comes_before_the_key_rule() {
        let s = start("r1", None, Some("k"));
        let holder = run("r1", 1, Some("k"));
        let sd = crate::contract::digest::start_digest(&s);
        let r = apply_run_start_rules(&s, ctx(Some((&holder, &sd)), Some(&holder), Some("r1")));
        assert_eq!(cause(r), "replayed");
    }

    #[test]
    fn a_same_run_id_with_other_fields_conflicts() {
        let s = start("r1", None, Some("k"));
        let existing = run("r1", 1, None);
        let r = apply_run_start_rules(&s, ctx(Some((&existing, "other")), None, Some("r1")));
        assert_eq!(cause(r), "run_id_conflict");
    }

    #[test]
    fn the_key_rule_comes_before_cas() {
        let s = start("r2", Some("stale"), Some("k"));
        let holder = run("r1", 1, Some("k"));
        assert_eq!(
            cause(apply_run_start_rules(
                &s,
                ctx(None, Some(&holder), Some("r1"))
            )),
            "request_key_taken"
        );
        let after = RuleVariant {
            key_rule: KeyRule::AfterCas,
            replay_first: true,
        };
        let r = apply_run_start_rules_variant(&s, ctx(None, Some(&holder), Some("r1")), after);
        assert_eq!(cause(r), "cas_mismatch");
    }

    #[test]
    fn cas_refuses_a_stale_expectation() {
        let s = start("r2", None, None);
        let r = apply_run_start_rules(&s, ctx(None, None, Some("r1")));
        assert_eq!(
            r,
            Err(RunStartRejection::CasMismatch {
                current_run_id: Some("r1".into())
            }
            .into())
        );
    }

    #[test]
    fn malformed_start_runs_are_invalid_arguments() {
        let mut half = start("r1", None, Some("k"));
        half.request_digest = None;
        let mut bad_key = start("r1", None, Some("k k"));
        bad_key.request_digest = Some("d".into());
        let mut empty_session = start("r1", None, None);
        empty_session.session_id.clear();
        let mut empty_digest = start("r1", None, Some("k"));
        empty_digest.request_digest = Some(String::new());
        let mut nul_digest = start("r1", None, Some("k"));
        nul_digest.request_digest = Some("d\0".into());
        for s in [
            half,
            bad_key,
            empty_session,
            empty_digest,
            nul_digest,
            start("", None, None),
            start("r1", Some(""), None),
            start("r\0-1", None, None),
            start("r1", Some("r\0-0"), None),
        ] {
            assert_eq!(
                cause(apply_run_start_rules(&s, ctx(None, None, None))),
                "invalid_argument",
                "{s:?}"
            );
        }
    }

    #[test]
    fn finished_runs_refuse_every_change() {
        let mut r = run("r1", 1, None);
        for to in RunStatus::ALL {
            assert!(check_status_transition(&r, to).is_ok());
        }
        r.status = RunStatus::Completed;
        for to in RunStatus::ALL {
            assert!(matches!(
                check_status_transition(&r, to),
                Err(StoreError::InvalidTransition(_))
            ));
        }
    }
}
