//! Link-fault steps (`link: {action, at, ms, sqlstate, db}`): foul weather
//! between a store and its database. When the harness starts the store
//! (`--start`) and owns its database link (`--db URL`: the store is given
//! the address of the harness's own proxy in place of `{db}`), a scenario
//! may reset that link, stall it or silence it at a point of the
//! database protocol (a commit about to be sent, a commit sent and not
//! yet answered, a transaction open), or have the database refuse the
//! commit with a typed error, the way a real network and a real database
//! fail a store. A request key exists for the retry after exactly such an
//! ambiguous failure.
//!
//! A `link` step arms its fault and returns at once; the fault strikes the
//! first time its point comes on the link (a later step's write), once.
//! `link: {action: heal}` ends every fault (held bytes are delivered late,
//! a silenced connection is reset) and says which armed fault never
//! struck; an armed fault that never struck leaves the trial not judged,
//! never passed. What the harness recognises as a commit, per protocol, is
//! in docs/link-faults.md. Nothing here touches a socket: this crate is
//! pure.

use std::fmt;

use serde::Deserialize;
use serde_json::Value;

/// The longest a link fault may hold a commit or its answer (`ms`).
pub const MAX_LINK_HOLD_MS: u64 = 60_000;
/// The most `--db` links a scenario can name (`db: N`).
pub const MAX_LINK_INDEX: u64 = 63;

/// Where on the link, relative to a write's commit, a fault strikes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkPoint {
    /// The commit is about to be sent: it never reaches the database.
    BeforeCommit,
    /// The commit reached the database (and was applied), its answer is
    /// on its way back: the store never learns the outcome.
    AfterCommit,
    /// A transaction is open (the first statement sent inside one); for a
    /// store whose write is one atomic command (a Redis script), the
    /// commit itself, before it is sent.
    InTransaction,
}

impl LinkPoint {
    pub const ALL: [LinkPoint; 3] = [
        LinkPoint::BeforeCommit,
        LinkPoint::AfterCommit,
        LinkPoint::InTransaction,
    ];

    pub fn name(self) -> &'static str {
        match self {
            LinkPoint::BeforeCommit => "before-commit",
            LinkPoint::AfterCommit => "after-commit",
            LinkPoint::InTransaction => "in-transaction",
        }
    }

    pub fn parse(text: &str) -> Option<LinkPoint> {
        LinkPoint::ALL.into_iter().find(|p| p.name() == text)
    }
}

impl fmt::Display for LinkPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A PostgreSQL SQLSTATE the harness may answer a commit with, each only
/// where it is true of what the harness did to the commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkSqlState {
    /// `40001` serialization_failure: the commit was rolled back.
    SerializationFailure,
    /// `40P01` deadlock_detected: the commit was rolled back.
    DeadlockDetected,
    /// `40003` statement_completion_unknown: the commit was applied, and
    /// the database says it cannot tell (an ambiguous result).
    CompletionUnknown,
}

impl LinkSqlState {
    pub const ALL: [LinkSqlState; 3] = [
        LinkSqlState::SerializationFailure,
        LinkSqlState::DeadlockDetected,
        LinkSqlState::CompletionUnknown,
    ];

    /// The five-character code.
    pub fn code(self) -> &'static str {
        match self {
            LinkSqlState::SerializationFailure => "40001",
            LinkSqlState::DeadlockDetected => "40P01",
            LinkSqlState::CompletionUnknown => "40003",
        }
    }

    pub fn parse(text: &str) -> Option<LinkSqlState> {
        LinkSqlState::ALL.into_iter().find(|s| s.code() == text)
    }

    /// Where the code is true: a rollback is answered in place of a
    /// commit that was not sent; an unknown completion in place of the
    /// answer of a commit that was.
    pub fn point(self) -> LinkPoint {
        match self {
            LinkSqlState::SerializationFailure | LinkSqlState::DeadlockDetected => {
                LinkPoint::BeforeCommit
            }
            LinkSqlState::CompletionUnknown => LinkPoint::AfterCommit,
        }
    }
}

impl fmt::Display for LinkSqlState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

/// What a fault does to the link, typed: each action with only the
/// points and fields it takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkFaultKind {
    /// The connection is reset (both ways) at the point.
    Reset(LinkPoint),
    /// The link stalls for `ms` (or until healed): before the commit, the
    /// commit is held; after it, its answer is held; then delivered late.
    Delay { at: LinkPoint, ms: u64 },
    /// Everything the database sends from the commit's answer on is
    /// dropped; the silent connection is reset after `ms` (or when healed).
    Drop { ms: u64 },
    /// The link goes down at the commit, before it is sent: the
    /// connection is reset, and every connection to the database (new or
    /// relayed) is refused or reset until healed. Outlasts any store's
    /// own bound on its database (the Redis store's resend budget).
    Down,
    /// The database's answer to the commit is this error (PostgreSQL):
    /// a rollback in place of a commit not sent, or an unknown completion
    /// in place of the answer of a commit that was applied.
    Error(LinkSqlState),
}

impl LinkFaultKind {
    /// The action's name as a scenario writes it.
    pub fn action(self) -> &'static str {
        match self {
            LinkFaultKind::Reset(_) => "reset",
            LinkFaultKind::Delay { .. } => "delay",
            LinkFaultKind::Drop { .. } => "drop",
            LinkFaultKind::Error(_) => "error",
            LinkFaultKind::Down => "down",
        }
    }

    /// Where it strikes.
    pub fn point(self) -> LinkPoint {
        match self {
            LinkFaultKind::Reset(p) => p,
            LinkFaultKind::Delay { at, .. } => at,
            LinkFaultKind::Drop { .. } => LinkPoint::AfterCommit,
            LinkFaultKind::Error(s) => s.point(),
            LinkFaultKind::Down => LinkPoint::BeforeCommit,
        }
    }

    /// Does only a PostgreSQL link take it?
    pub fn postgres_only(self) -> bool {
        matches!(self, LinkFaultKind::Error(_))
    }
}

impl fmt::Display for LinkFaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LinkFaultKind::Reset(p) => write!(f, "reset {p}"),
            LinkFaultKind::Delay { at, ms } => write!(f, "delay {at} {ms} ms"),
            LinkFaultKind::Drop { ms } => write!(f, "drop after-commit {ms} ms"),
            LinkFaultKind::Error(s) => write!(f, "error {s} {}", s.point()),
            LinkFaultKind::Down => f.write_str("down before-commit until healed"),
        }
    }
}

/// A fault armed on the link (all of them, or the `db`-th `--db`'s).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LinkFault {
    pub kind: LinkFaultKind,
    /// `--db` index; `None`: whichever link the commit goes through (every
    /// node of a Redis Cluster, every database).
    pub db: Option<usize>,
}

impl fmt::Display for LinkFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.db {
            Some(db) => write!(f, "{} on db {db}", self.kind),
            None => write!(f, "{}", self.kind),
        }
    }
}

/// A `link` step, typed at load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkStep {
    /// Arms a fault.
    Fault(LinkFault),
    /// Ends every fault: held bytes go through, silenced connections are
    /// reset, and a fault that never struck is reported.
    Heal,
}

const LINK_KEYS: [&str; 5] = ["action", "at", "ms", "sqlstate", "db"];
const ACTIONS: [&str; 6] = ["reset", "delay", "drop", "error", "down", "heal"];

impl LinkStep {
    /// Parses a `link` step's map; a mistake is the message a load error
    /// carries (with the step's position).
    pub fn parse(spec: &Value) -> Result<LinkStep, String> {
        let Value::Object(map) = spec else {
            return Err(
                "`link` takes a map: {action: reset|delay|drop|error|down|heal, at: ..., ms: N, sqlstate: ..., db: N}"
                    .into(),
            );
        };
        if let Some(unknown) = map.keys().find(|k| !LINK_KEYS.contains(&k.as_str())) {
            return Err(format!(
                "`link` has no field `{unknown}` (it takes {})",
                LINK_KEYS.join(", ")
            ));
        }
        let text = |name: &str| -> Result<Option<&str>, String> {
            match map.get(name) {
                None => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.as_str())),
                Some(_) => Err(format!("link.{name} is a string")),
            }
        };
        let number = |name: &str, max: u64| -> Result<Option<u64>, String> {
            match map.get(name) {
                None => Ok(None),
                Some(v) => v
                    .as_u64()
                    .filter(|n| *n <= max)
                    .map(Some)
                    .ok_or_else(|| format!("link.{name} is a whole number from 0 to {max}")),
            }
        };
        let action = text("action")?
            .ok_or_else(|| format!("`link` needs an action ({})", ACTIONS.join(", ")))?;
        let at = text("at")?
            .map(|s| {
                LinkPoint::parse(s).ok_or_else(|| {
                    format!(
                        "link.at `{s}` is not one of {}",
                        LinkPoint::ALL.map(LinkPoint::name).join(", ")
                    )
                })
            })
            .transpose()?;
        let ms = number("ms", MAX_LINK_HOLD_MS)?;
        let sqlstate = text("sqlstate")?;
        let db = number("db", MAX_LINK_INDEX)?
            .map(|n| usize::try_from(n).map_err(|_| "link.db is too large".to_owned()))
            .transpose()?;
        let refuse = |field: &str, what: &str| -> Result<(), String> {
            if map.contains_key(field) {
                return Err(format!("link {action} takes no `{field}` ({what})"));
            }
            Ok(())
        };
        let kind = match action {
            "heal" => {
                for field in ["at", "ms", "sqlstate", "db"] {
                    refuse(field, "it ends every fault on every link")?;
                }
                return Ok(LinkStep::Heal);
            }
            "reset" => {
                refuse("ms", "a reset is at once")?;
                refuse("sqlstate", "a reset answers nothing")?;
                LinkFaultKind::Reset(at.ok_or(
                    "link reset needs `at`: before-commit, after-commit or in-transaction",
                )?)
            }
            "delay" => {
                refuse("sqlstate", "a delay answers nothing")?;
                let at = at.ok_or("link delay needs `at`: before-commit or after-commit")?;
                if at == LinkPoint::InTransaction {
                    return Err(
                        "link delay is at before-commit (the commit held) or after-commit (its answer held)"
                            .into(),
                    );
                }
                let ms = ms.ok_or("link delay needs `ms`: how long the link stalls")?;
                if ms == 0 {
                    return Err("link delay needs `ms` above 0".into());
                }
                LinkFaultKind::Delay { at, ms }
            }
            "drop" => {
                refuse("sqlstate", "a dropped answer is no answer")?;
                if at.is_some_and(|p| p != LinkPoint::AfterCommit) {
                    return Err(
                        "link drop drops the commit's answer: `at` is after-commit (or left out)"
                            .into(),
                    );
                }
                let ms = ms.ok_or(
                    "link drop needs `ms`: how long the silent connection stays open before it is reset",
                )?;
                if ms == 0 {
                    return Err("link drop needs `ms` above 0".into());
                }
                LinkFaultKind::Drop { ms }
            }
            "down" => {
                refuse("ms", "the link stays down until healed")?;
                refuse("sqlstate", "a link that is down answers nothing")?;
                if at.is_some_and(|p| p != LinkPoint::BeforeCommit) {
                    return Err(
                        "link down goes down as the commit is about to be sent: `at` is before-commit (or left out)"
                            .into(),
                    );
                }
                LinkFaultKind::Down
            }
            "error" => {
                refuse("ms", "the error is the answer")?;
                let code = sqlstate
                    .ok_or("link error needs `sqlstate`: 40001 or 40P01 (the commit rolled back), 40003 (its completion unknown)")?;
                let state = LinkSqlState::parse(code).ok_or_else(|| {
                    format!(
                        "link.sqlstate `{code}` is not one the harness can answer truthfully: \
                         40001 or 40P01 (a rollback, in place of a commit it did not send) or \
                         40003 (completion unknown, in place of the answer of a commit it sent)"
                    )
                })?;
                if let Some(p) = at.filter(|p| *p != state.point()) {
                    return Err(format!(
                        "link error {code} is answered {} (the harness makes it true there), not {p}",
                        state.point()
                    ));
                }
                LinkFaultKind::Error(state)
            }
            other => {
                return Err(format!(
                    "link.action `{other}` is not one of {}",
                    ACTIONS.join(", ")
                ))
            }
        };
        Ok(LinkStep::Fault(LinkFault { kind, db }))
    }

    pub fn label(&self) -> String {
        match self {
            LinkStep::Fault(f) => format!("link {f}"),
            LinkStep::Heal => "link heal".into(),
        }
    }
}

/// A database protocol the harness can proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LinkProtocol {
    Postgres,
    Redis,
}

impl LinkProtocol {
    pub fn name(self) -> &'static str {
        match self {
            LinkProtocol::Postgres => "postgres",
            LinkProtocol::Redis => "redis",
        }
    }
}

impl fmt::Display for LinkProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a scenario with `link` steps needs (`requires: {link: ...}`):
/// the harness owning a database link at all, or one of a protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkNeed {
    /// `link: true`: any database link the harness owns.
    Any,
    /// `link: postgres` / `link: redis`.
    Protocol(LinkProtocol),
}

/// The database links a run owns (`--db`), by protocol: what link
/// scenarios are offered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OwnedLinks {
    pub postgres: usize,
    pub redis: usize,
}

impl OwnedLinks {
    pub fn any(&self) -> bool {
        self.postgres + self.redis > 0
    }

    pub fn has(&self, protocol: LinkProtocol) -> bool {
        match protocol {
            LinkProtocol::Postgres => self.postgres > 0,
            LinkProtocol::Redis => self.redis > 0,
        }
    }
}

impl LinkNeed {
    /// Is a run that owns `owned` enough?
    pub fn met_by(self, owned: OwnedLinks) -> bool {
        match self {
            LinkNeed::Any => owned.any(),
            LinkNeed::Protocol(p) => owned.has(p),
        }
    }

    pub fn describe(self) -> String {
        match self {
            LinkNeed::Any => "link: the harness owns no database link (`--start` with `--db URL` gives the started store the harness's proxy in place of `{db}`)".into(),
            LinkNeed::Protocol(p) => format!(
                "link: {p}: the harness owns no {p} link (`--start` with `--db {p}://...`)"
            ),
        }
    }
}

impl<'de> Deserialize<'de> for LinkNeed {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Value::deserialize(d)? {
            Value::Bool(true) => Ok(LinkNeed::Any),
            Value::String(s) if s == "postgres" => Ok(LinkNeed::Protocol(LinkProtocol::Postgres)),
            Value::String(s) if s == "redis" => Ok(LinkNeed::Protocol(LinkProtocol::Redis)),
            _ => Err(serde::de::Error::custom(
                "link takes true (any database link the harness owns), postgres or redis",
            )),
        }
    }
}

impl schemars::JsonSchema for LinkNeed {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "LinkNeed".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "The database link the harness must own: true (any), postgres or redis.",
            "enum": [true, "postgres", "redis"]
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<LinkStep, String> {
        LinkStep::parse(&v)
    }

    #[test]
    fn every_action_is_typed_with_its_own_fields() {
        assert_eq!(
            parse(json!({"action": "reset", "at": "after-commit"})),
            Ok(LinkStep::Fault(LinkFault {
                kind: LinkFaultKind::Reset(LinkPoint::AfterCommit),
                db: None
            }))
        );
        assert_eq!(
            parse(json!({"action": "delay", "at": "before-commit", "ms": 7000, "db": 1})),
            Ok(LinkStep::Fault(LinkFault {
                kind: LinkFaultKind::Delay {
                    at: LinkPoint::BeforeCommit,
                    ms: 7000
                },
                db: Some(1)
            }))
        );
        assert_eq!(
            parse(json!({"action": "drop", "ms": 20000})),
            Ok(LinkStep::Fault(LinkFault {
                kind: LinkFaultKind::Drop { ms: 20000 },
                db: None
            }))
        );
        assert_eq!(
            parse(json!({"action": "error", "sqlstate": "40P01"})),
            Ok(LinkStep::Fault(LinkFault {
                kind: LinkFaultKind::Error(LinkSqlState::DeadlockDetected),
                db: None
            }))
        );
        assert_eq!(
            parse(json!({"action": "down", "db": 0})),
            Ok(LinkStep::Fault(LinkFault {
                kind: LinkFaultKind::Down,
                db: Some(0)
            }))
        );
        assert_eq!(parse(json!({"action": "heal"})), Ok(LinkStep::Heal));
    }

    #[test]
    fn mistakes_are_named() {
        let e = |v| parse(v).unwrap_err();
        assert!(e(json!("reset")).contains("takes a map"));
        assert!(e(json!({"action": "reset"})).contains("needs `at`"));
        assert!(e(json!({"action": "reset", "at": "later"})).contains("not one of"));
        assert!(e(json!({"action": "reset", "at": "after-commit", "ms": 5})).contains("no `ms`"));
        assert!(e(json!({"action": "delay", "at": "after-commit"})).contains("needs `ms`"));
        assert!(
            e(json!({"action": "delay", "at": "in-transaction", "ms": 5}))
                .contains("before-commit")
        );
        assert!(
            e(json!({"action": "delay", "at": "after-commit", "ms": 60001})).contains("0 to 60000")
        );
        assert!(
            e(json!({"action": "drop", "at": "before-commit", "ms": 5})).contains("after-commit")
        );
        assert!(e(json!({"action": "error", "sqlstate": "23505"})).contains("truthfully"));
        assert!(
            e(json!({"action": "error", "sqlstate": "40003", "at": "before-commit"}))
                .contains("answered after-commit")
        );
        assert!(e(json!({"action": "heal", "db": 0})).contains("no `db`"));
        assert!(e(json!({"action": "down", "ms": 5})).contains("no `ms`"));
        assert!(e(json!({"action": "down", "at": "after-commit"})).contains("before-commit"));
        assert!(e(json!({"action": "burn"})).contains("not one of"));
        assert!(
            e(json!({"action": "reset", "at": "after-commit", "port": 1}))
                .contains("no field `port`")
        );
    }

    #[test]
    fn a_need_is_met_by_the_protocols_owned() {
        let pg = OwnedLinks {
            postgres: 1,
            redis: 0,
        };
        assert!(LinkNeed::Any.met_by(pg));
        assert!(!LinkNeed::Any.met_by(OwnedLinks::default()));
        assert!(LinkNeed::Protocol(LinkProtocol::Postgres).met_by(pg));
        assert!(!LinkNeed::Protocol(LinkProtocol::Redis).met_by(pg));
        let need: LinkNeed = serde_json::from_value(json!("redis")).unwrap();
        assert_eq!(need, LinkNeed::Protocol(LinkProtocol::Redis));
        assert!(serde_json::from_value::<LinkNeed>(json!(false)).is_err());
    }
}
