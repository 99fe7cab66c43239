//! A store specification, parsed once into a [`StoreSpec`] and opened: the
//! one place that knows the forms a store can be named by (`memory`,
//! `sqlite:PATH`, `postgres://...`, `redis://...`, `rediss://...`,
//! `redis+cluster://...`, `broken-memory:DEFECT`,
//! `postgres+standby-reads://...`, `postgres+DEFECT://...` of
//! [`PgLinkDefect`]). The harness's
//! `--target` and `@STORE`, `reqkey serve store` and `reqkey serve agent`
//! all parse through [`StoreSpec::parse`]; nothing else matches a scheme.
//!
//! A URL can carry a secret (a password, a token as the user, a token in
//! the query). It is held as a [`SecretUrl`], whose `Display` and `Debug`
//! are the redacted form: the only way to the secret is
//! [`SecretUrl::expose`], which only a driver's connect call uses. So a
//! report, a log line or an error that formats a spec cannot leak it.

use crate::scheme::{self, Scheme};
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use super::api::{redact_url, OpenError, SessionStateStore};
use super::link_defects::PgLinkDefect;
use super::memory::{MemoryDefect, MemoryStore};
#[cfg(feature = "postgres")]
use super::postgres::PostgresStore;
#[cfg(feature = "redis")]
use super::redis::RedisStore;
#[cfg(feature = "sqlite")]
use super::sqlite::SqliteStore;

/// The store specifications [`StoreSpec::parse`] accepts, for help texts.
pub const STORE_HELP: &str = "\
memory                    the in-process memory store
broken-memory:DEFECT      a deliberately broken memory store (tests of tests)
sqlite:PATH               a SQLite database file (created and migrated on open)
postgres://USER@HOST/DB   PostgreSQL (tables reqkey_*, migrated on open)
redis://HOST:PORT[/DB]    Redis (keys session:request-keys:{id} and reqkey:*:{id});
                          rediss:// for TLS
redis+cluster://HOST:PORT[,HOST:PORT...]
                          Redis Cluster (the same keys; a session's keys share
                          the hash tag {id}, so one slot)
postgres+standby-reads://USER@PRIMARY:PORT/DB?standby=HOST:PORT
                          a deliberately broken PostgreSQL store: writes to the
                          primary, reads key holders and current runs from its
                          hot standby (docs/pg-replication.md)
postgres+blind-retry://USER@HOST/DB, postgres+early-success://...,
postgres+half-written://..., postgres+no-retry://...
                          deliberately broken PostgreSQL stores only a fault on
                          the database link shows: a commit run again after the
                          link broke, a commit whose answer never came counted
                          as done, a run and its input in two transactions, a
                          rolled-back write not run again (docs/link-faults.md)";

/// A URL that may carry a secret. Formats (Display and Debug) as its
/// redacted form; [`SecretUrl::expose`] is the only way to the text.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct SecretUrl(String);

impl SecretUrl {
    pub fn new(url: impl Into<String>) -> Self {
        Self(url.into())
    }

    /// The URL with its secrets, for a driver's connect call only.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The redacted form every output uses.
    pub fn redacted(&self) -> String {
        redact_url(&self.0)
    }
}

impl fmt::Display for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SecretUrl({})", self.redacted())
    }
}

/// What a store specification names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreSpec {
    /// `memory`.
    Memory,
    /// `broken-memory:DEFECT`: a deliberately broken memory store.
    BrokenMemory(MemoryDefect),
    /// `sqlite:PATH`.
    Sqlite { path: String },
    /// `postgres://...` or `postgresql://...`.
    Postgres { url: SecretUrl },
    /// `redis://...` or `rediss://...`.
    Redis { url: SecretUrl },
    /// `redis+cluster://HOST:PORT[,HOST:PORT...]`.
    RedisCluster { url: SecretUrl },
    /// `postgres+standby-reads://USER@PRIMARY:PORT/DB?standby=HOST:PORT`:
    /// the deliberately broken Postgres store that reads key holders and
    /// current runs from a hot standby of the primary (`url` is the spec
    /// as given; `primary` and `standby` the two `postgres://` URLs made
    /// from it, the standby's with the primary's user, database and
    /// other query parameters).
    PostgresStandbyReads {
        url: SecretUrl,
        primary: SecretUrl,
        standby: SecretUrl,
    },
    /// `postgres+DEFECT://...`: a deliberately broken Postgres store only a
    /// fault on its database link shows (`url` as given, `postgres` the
    /// `postgres://` URL it connects to).
    PostgresLinkDefect {
        defect: PgLinkDefect,
        url: SecretUrl,
        postgres: SecretUrl,
    },
}

/// The scheme of the broken standby-reads form.
const STANDBY_READS_VARIANT: &str = "standby-reads";

/// The primary's and the standby's `postgres://` URLs of a
/// `postgres+standby-reads://AUTHORITY/DB?standby=HOST:PORT[&...]` (`rest`
/// is what follows the scheme's `://`); `None` unless exactly one
/// non-empty `standby=HOST:PORT` is given.
fn standby_reads_urls(rest: &str) -> Option<(String, String)> {
    let (before_query, query) = rest.split_once('?')?;
    let mut standby = None;
    let mut kept = Vec::new();
    for pair in query.split('&') {
        match pair.strip_prefix("standby=") {
            Some(host) if standby.is_none() && !host.is_empty() => standby = Some(host),
            Some(_) => return None,
            None => kept.push(pair),
        }
    }
    let standby = standby?;
    if standby.contains(['/', '@', '#', ',']) {
        return None;
    }
    let (authority, path) = match before_query.split_once('/') {
        Some((a, p)) => (a, format!("/{p}")),
        None => (before_query, String::new()),
    };
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if host.is_empty() || host.contains(',') {
        return None;
    }
    let userinfo = authority
        .rsplit_once('@')
        .map(|(u, _)| format!("{u}@"))
        .unwrap_or_default();
    let query = if kept.is_empty() {
        String::new()
    } else {
        format!("?{}", kept.join("&"))
    };
    Some((
        format!("postgres://{authority}{path}{query}"),
        format!("postgres://{userinfo}{standby}{path}{query}"),
    ))
}

impl StoreSpec {
    /// Parses a store specification; a form no backend takes is
    /// [`OpenError::UnknownSpec`], naming it redacted.
    pub fn parse(spec: &str) -> Result<StoreSpec, OpenError> {
        let unknown = || OpenError::UnknownSpec(redact_url(spec));
        if spec == "memory" {
            return Ok(StoreSpec::Memory);
        }
        if let Some(name) = spec.strip_prefix("broken-memory:") {
            return MemoryDefect::parse(name)
                .map(StoreSpec::BrokenMemory)
                .ok_or_else(unknown);
        }
        if let Some(path) = spec.strip_prefix("sqlite:") {
            if path.is_empty() {
                return Err(unknown());
            }
            return Ok(StoreSpec::Sqlite {
                path: path.to_owned(),
            });
        }
        let url = || SecretUrl::new(spec);
        let written = scheme::split(spec).ok_or_else(unknown)?;
        let rest = written.rest;
        if rest.is_empty() {
            return Err(unknown());
        }
        let known = written.known().ok_or_else(unknown)?;
        match (known.scheme, known.variant) {
            (Scheme::Postgres, _) => Ok(StoreSpec::Postgres { url: url() }),
            (Scheme::Redis, _) => Ok(StoreSpec::Redis { url: url() }),
            (Scheme::RedisCluster, _) => Ok(StoreSpec::RedisCluster { url: url() }),
            (Scheme::PostgresVariant, _) if PgLinkDefect::from_scheme(written.name).is_some() => {
                let defect = PgLinkDefect::from_scheme(written.name).ok_or_else(unknown)?;
                Ok(StoreSpec::PostgresLinkDefect {
                    defect,
                    url: url(),
                    postgres: SecretUrl::new(format!("postgres://{rest}")),
                })
            }
            (Scheme::PostgresVariant, Some(STANDBY_READS_VARIANT)) => {
                let (primary, standby) = standby_reads_urls(rest).ok_or_else(unknown)?;
                Ok(StoreSpec::PostgresStandbyReads {
                    url: url(),
                    primary: SecretUrl::new(primary),
                    standby: SecretUrl::new(standby),
                })
            }
            _ => Err(unknown()),
        }
    }

    /// How every output names it: the specification with its secrets
    /// redacted.
    pub fn display_name(&self) -> String {
        self.to_string()
    }

    /// Opens the store. SQL stores are migrated to this build's schema.
    pub async fn open(&self) -> Result<Arc<dyn SessionStateStore>, OpenError> {
        match self {
            StoreSpec::Memory => Ok(Arc::new(MemoryStore::new())),
            StoreSpec::BrokenMemory(defect) => Ok(Arc::new(MemoryStore::with_defect(*defect))),
            #[cfg(feature = "sqlite")]
            StoreSpec::Sqlite { path } => Ok(Arc::new(SqliteStore::open(path).await?)),
            #[cfg(not(feature = "sqlite"))]
            StoreSpec::Sqlite { .. } => Err(OpenError::NotBuilt("sqlite")),
            #[cfg(feature = "postgres")]
            StoreSpec::Postgres { url } => {
                Ok(Arc::new(PostgresStore::connect(url.expose()).await?))
            }
            #[cfg(not(feature = "postgres"))]
            StoreSpec::Postgres { .. } => Err(OpenError::NotBuilt("postgres")),
            #[cfg(feature = "postgres")]
            StoreSpec::PostgresStandbyReads {
                primary, standby, ..
            } => Ok(Arc::new(
                PostgresStore::connect_with_standby_reads(primary.expose(), standby.expose())
                    .await?,
            )),
            #[cfg(not(feature = "postgres"))]
            StoreSpec::PostgresStandbyReads { .. } => Err(OpenError::NotBuilt("postgres")),
            #[cfg(feature = "postgres")]
            StoreSpec::PostgresLinkDefect {
                defect, postgres, ..
            } => Ok(Arc::new(
                PostgresStore::connect_with_link_defect(postgres.expose(), *defect).await?,
            )),
            #[cfg(not(feature = "postgres"))]
            StoreSpec::PostgresLinkDefect { .. } => Err(OpenError::NotBuilt("postgres")),
            #[cfg(feature = "redis")]
            StoreSpec::Redis { url } | StoreSpec::RedisCluster { url } => {
                Ok(Arc::new(RedisStore::connect(url.expose()).await?))
            }
            #[cfg(not(feature = "redis"))]
            StoreSpec::Redis { .. } | StoreSpec::RedisCluster { .. } => {
                Err(OpenError::NotBuilt("redis"))
            }
        }
    }
}

impl fmt::Display for StoreSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreSpec::Memory => f.write_str("memory"),
            StoreSpec::BrokenMemory(defect) => write!(f, "broken-memory:{}", defect.name()),
            StoreSpec::Sqlite { path } => write!(f, "sqlite:{path}"),
            StoreSpec::Postgres { url }
            | StoreSpec::Redis { url }
            | StoreSpec::RedisCluster { url }
            | StoreSpec::PostgresStandbyReads { url, .. }
            | StoreSpec::PostgresLinkDefect { url, .. } => write!(f, "{url}"),
        }
    }
}

impl FromStr for StoreSpec {
    type Err = OpenError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        StoreSpec::parse(s)
    }
}

/// Opens a store from its specification text (parsed by
/// [`StoreSpec::parse`]).
pub async fn open(spec: &str) -> Result<Arc<dyn SessionStateStore>, OpenError> {
    StoreSpec::parse(spec)?.open().await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::store::api::REDACTED;

    #[test]
    fn every_form_parses_to_its_backend() {
        assert_eq!(StoreSpec::parse("memory").unwrap(), StoreSpec::Memory);
        assert!(matches!(
            StoreSpec::parse("sqlite:/tmp/x.db").unwrap(),
            StoreSpec::Sqlite { .. }
        ));
        for pg in ["postgres://u@h/db", "postgresql://u@h/db"] {
            assert!(matches!(
                StoreSpec::parse(pg).unwrap(),
                StoreSpec::Postgres { .. }
            ));
        }
        for r in ["redis://h:1", "rediss://h:1"] {
            assert!(matches!(
                StoreSpec::parse(r).unwrap(),
                StoreSpec::Redis { .. }
            ));
        }
        assert!(matches!(
            StoreSpec::parse("redis+cluster://a:1,b:2").unwrap(),
            StoreSpec::RedisCluster { .. }
        ));
        assert!(matches!(
            StoreSpec::parse("broken-memory:no-cas").unwrap(),
            StoreSpec::BrokenMemory(_)
        ));
        for defect in PgLinkDefect::ALL {
            let text = format!("{}://u:pw@h:1/db", defect.scheme());
            let StoreSpec::PostgresLinkDefect {
                defect: parsed,
                postgres,
                ..
            } = StoreSpec::parse(&text).unwrap()
            else {
                panic!("{text} is not a link defect")
            };
            assert_eq!(parsed, defect);
            assert_eq!(postgres.expose(), "postgres://u:pw@h:1/db");
        }
        let StoreSpec::PostgresStandbyReads {
            primary, standby, ..
        } = StoreSpec::parse(
            "postgres+standby-reads://u:pw@127.0.0.1:5442/test?sslmode=disable&standby=127.0.0.1:5443",
        )
        .unwrap()
        else {
            panic!("not the standby-reads form")
        };
        assert_eq!(
            primary.expose(),
            "postgres://u:pw@127.0.0.1:5442/test?sslmode=disable"
        );
        assert_eq!(
            standby.expose(),
            "postgres://u:pw@127.0.0.1:5443/test?sslmode=disable"
        );
    }

    #[test]
    fn unknown_forms_are_refused_without_their_secret() {
        for bad in [
            "",
            "sqlite:",
            "mongodb://u:hunter2@h/db",
            "redis://",
            "broken-memory:nope",
            "memory2",
            "postgres+standby-reads://u:hunter2@h:1/db",
            "postgres+standby-reads://u:hunter2@h:1/db?standby=",
            "postgres+standby-reads://u:hunter2@h:1/db?standby=a:1&standby=b:2",
            "postgres+standby-reads://u:hunter2@h:1/db?standby=x:hunter2@b:2",
            "postgres+standby-reads://u:hunter2@/db?standby=b:2",
        ] {
            let e = StoreSpec::parse(bad).unwrap_err();
            assert!(matches!(e, OpenError::UnknownSpec(_)), "{bad}");
            assert!(!e.to_string().contains("hunter2"), "{e}");
        }
    }

    #[test]
    fn no_output_form_carries_a_secret() {
        let specs = [
            "postgres://user:hunter2@db.example:5432/app?sslpassword=hunter2&sslmode=require",
            "redis://:hunter2@127.0.0.1:6379/0",
            "rediss://hunter2@cache:6380",
            "redis+cluster://u:hunter2@a:1,u:hunter2@b:2",
            "postgres+standby-reads://u:hunter2@a:1/db?standby=b:2&password=hunter2",
            "postgres+blind-retry://u:hunter2@a:1/db",
        ];
        for text in specs {
            let spec = StoreSpec::parse(text).unwrap();
            for shown in [spec.to_string(), format!("{spec:?}"), spec.display_name()] {
                assert!(!shown.contains("hunter2"), "{shown}");
                assert!(shown.contains(REDACTED), "{shown}");
            }
        }
        assert_eq!(
            redact_url("postgres://user:pw@h:5432/db?sslmode=require"),
            "postgres://user:***@h:5432/db?sslmode=***"
        );
        assert_eq!(redact_url("postgres://h/db"), "postgres://h/db");
        assert_eq!(redact_url("postgres://app@h/db"), "postgres://app@h/db");
        assert_eq!(redact_url("http://tok@h/"), "http://***@h/");
        assert_eq!(redact_url("sqlite:/tmp/a.db"), "sqlite:/tmp/a.db");
    }
}
