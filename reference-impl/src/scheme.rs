//! The schemes of every URL reqkey reads, known in one place: target URLs
//! (`http[s]://` an agent server, `store+http[s]://` a store adapter,
//! `idem+http[s]://` an Idempotency-Key app) and database URLs
//! (`postgres[ql]://`, `postgres+VARIANT://` a broken PostgreSQL store,
//! `redis[s]://`, `redis+cluster://`).
//!
//! Why: the schemes were matched by prefix in six files (`--target`'s
//! parser, the idem target's, `--db`'s, the secret scrubber, the store
//! specification and its redaction), each with its own idea of which
//! spellings count (`postgres+` counted as PostgreSQL in two of them, as
//! nothing in the others; `rediss` refused in one, taken in another).
//! Here a URL's text is split once at `://` into its scheme and the rest,
//! and the scheme is named once ([`Scheme`], with TLS and a variant);
//! every other file asks ([`split`], [`parse`], [`url_start`]), and
//! `harness/tests/architecture.rs` fails on a prefix match of a scheme
//! anywhere else. It lives in this crate (the reference implementations)
//! because the store specification here needs it and the harness, which
//! depends on this crate, asks it too.

/// What a URL's scheme names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// `http`, `https`: an HTTP server (an agent server, `reqkey-agent/1`).
    Http,
    /// `store+http`, `store+https`: a store adapter (`reqkey-store/1`).
    StoreHttp,
    /// `idem+http`, `idem+https`: an app behind an Idempotency-Key layer
    /// (`reqkey-idem/1`).
    IdemHttp,
    /// `postgres`, `postgresql`.
    Postgres,
    /// `postgres+VARIANT`: a deliberately broken PostgreSQL store (its
    /// variant in [`Known::variant`]).
    PostgresVariant,
    /// `redis`, `rediss`.
    Redis,
    /// `redis+cluster`.
    RedisCluster,
}

impl Scheme {
    /// A database's (PostgreSQL's, in any variant).
    pub fn is_postgres(self) -> bool {
        matches!(self, Scheme::Postgres | Scheme::PostgresVariant)
    }

    /// A Redis server's or cluster's.
    pub fn is_redis(self) -> bool {
        matches!(self, Scheme::Redis | Scheme::RedisCluster)
    }

    /// An HTTP target's, at any level.
    pub fn is_http(self) -> bool {
        matches!(self, Scheme::Http | Scheme::StoreHttp | Scheme::IdemHttp)
    }
}

/// A known scheme as written: what it names, whether it is the TLS
/// spelling, and a `postgres+VARIANT`'s variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Known<'a> {
    pub scheme: Scheme,
    /// `https`, `store+https`, `idem+https`, `rediss`.
    pub tls: bool,
    /// `postgres+VARIANT`'s `VARIANT` (never empty).
    pub variant: Option<&'a str>,
}

/// Every spelling of every known scheme, for a "did you mean" (the
/// `postgres+VARIANT` ones are their own lists).
pub const NAMES: [&str; 11] = [
    "http",
    "https",
    "store+http",
    "store+https",
    "idem+http",
    "idem+https",
    "postgres",
    "postgresql",
    "redis",
    "rediss",
    "redis+cluster",
];

/// The scheme a name (`store+https`, `postgres+blind-retry`) is, or
/// `None` for one reqkey does not read.
pub fn known(name: &str) -> Option<Known<'_>> {
    let plain = |scheme, tls| {
        Some(Known {
            scheme,
            tls,
            variant: None,
        })
    };
    match name {
        "http" => plain(Scheme::Http, false),
        "https" => plain(Scheme::Http, true),
        "store+http" => plain(Scheme::StoreHttp, false),
        "store+https" => plain(Scheme::StoreHttp, true),
        "idem+http" => plain(Scheme::IdemHttp, false),
        "idem+https" => plain(Scheme::IdemHttp, true),
        "postgres" | "postgresql" => plain(Scheme::Postgres, false),
        "redis" => plain(Scheme::Redis, false),
        "rediss" => plain(Scheme::Redis, true),
        "redis+cluster" => plain(Scheme::RedisCluster, false),
        _ => {
            let variant = name.strip_prefix("postgres+").filter(|v| !v.is_empty())?;
            Some(Known {
                scheme: Scheme::PostgresVariant,
                tls: false,
                variant: Some(variant),
            })
        }
    }
}

/// A URL's text split once: its scheme as written and what follows `://`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Url<'a> {
    /// The scheme as written (`store+https`, `mongodb`).
    pub name: &'a str,
    /// Everything after `://`.
    pub rest: &'a str,
}

impl<'a> Url<'a> {
    /// What the scheme names, if reqkey reads it.
    pub fn known(&self) -> Option<Known<'a>> {
        known(self.name)
    }

    /// Is it PostgreSQL's (any variant)?
    pub fn is_postgres(&self) -> bool {
        self.known().is_some_and(|k| k.scheme.is_postgres())
    }
}

/// `text` split at its first `://` (any scheme, known or not), or `None`
/// when it has none: the one place a URL's scheme is cut off.
pub fn split(text: &str) -> Option<Url<'_>> {
    let (name, rest) = text.split_once("://")?;
    Some(Url { name, rest })
}

/// `text` as a URL of a scheme reqkey reads: what it names and what
/// follows `://` (`None`: not a URL, or an unknown scheme).
pub fn parse(text: &str) -> Option<(Known<'_>, &str)> {
    let url = split(text)?;
    Some((url.known()?, url.rest))
}

/// Where the URL embedded in a form starts (`reference-agent@postgres://`:
/// at `postgres`): the scheme characters (letters, digits, `+ - .`) just
/// before the first `://`. `None` when the text holds no `://`.
pub fn url_start(text: &str) -> Option<usize> {
    let at = text.find("://")?;
    Some(
        text[..at]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
            .map_or(0, |j| j + 1),
    )
}

/// `text` when it is a URL of `scheme`: the TLS spelling or not, and what
/// follows `://`.
pub fn of_scheme(text: &str, scheme: Scheme) -> Option<(bool, &str)> {
    parse(text)
        .filter(|(k, _)| k.scheme == scheme)
        .map(|(k, rest)| (k.tls, rest))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn every_spelling_names_its_scheme_once() {
        for name in NAMES {
            let k = known(name).unwrap();
            let tls = ["https", "store+https", "idem+https", "rediss"].contains(&name);
            assert_eq!(k.tls, tls, "{name}");
        }
        assert_eq!(
            parse("store+https://h:1").unwrap(),
            (
                Known {
                    scheme: Scheme::StoreHttp,
                    tls: true,
                    variant: None
                },
                "h:1"
            )
        );
        let (k, rest) = parse("postgres+blind-retry://u@h/db").unwrap();
        assert_eq!(
            (k.scheme, k.variant, rest),
            (Scheme::PostgresVariant, Some("blind-retry"), "u@h/db")
        );
        assert!(k.scheme.is_postgres());
        assert_eq!(parse("postgres+://h"), None);
        assert_eq!(parse("mongodb://h"), None);
        assert_eq!(split("mongodb://h").unwrap().name, "mongodb");
        assert_eq!(split("memory"), None);
        assert_eq!(
            of_scheme("idem+http://h:1", Scheme::IdemHttp),
            Some((false, "h:1"))
        );
        assert_eq!(of_scheme("http://h:1", Scheme::IdemHttp), None);
        assert_eq!(url_start("reference-agent:x@postgres://u@h/db"), Some(18));
        assert_eq!(url_start("redis://h"), Some(0));
        assert_eq!(url_start("memory"), None);
    }
}
