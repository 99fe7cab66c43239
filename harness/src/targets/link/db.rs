//! `--db URL`: a database the started store uses, parsed once. Its scheme
//! says the protocol the proxy reads (`postgres*` / `postgresql*`:
//! PostgreSQL; `redis*`: Redis; `redis+cluster://` names several nodes),
//! its authority the nodes the proxies front; everything else (the
//! scheme's variant, the user, the path, the query) is passed to the
//! started command unchanged, with the proxies' addresses in place of the
//! nodes'. The URL is held as a secret: every output shows it redacted.

use reqkey_reference::scheme::{self, Scheme};
use reqkey_reference::store::SecretUrl;
use reqkey_scenario::link::LinkProtocol;

/// One `--db URL`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DbUrl {
    pub protocol: LinkProtocol,
    /// The nodes (host, port) its authority names.
    pub nodes: Vec<(String, u16)>,
    /// `SCHEME://` and `USERINFO@`, as given.
    head: SecretUrl,
    /// What follows the authority (`/db?...`), as given.
    tail: SecretUrl,
    /// The URL as given.
    pub url: SecretUrl,
}

fn default_port(protocol: LinkProtocol) -> u16 {
    match protocol {
        LinkProtocol::Postgres => 5432,
        LinkProtocol::Redis => 6379,
    }
}

/// `host:port` (`[v6]:port`, or a host alone: the default port).
fn node(text: &str, protocol: LinkProtocol) -> Result<(String, u16), String> {
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or_else(|| format!("`{text}`: an IPv6 host without its `]`"))?;
        (host, after.strip_prefix(':'))
    } else {
        match text.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        }
    };
    if host.is_empty() {
        return Err(format!(
            "`{text}` names no host (a socket path cannot be proxied)"
        ));
    }
    let port = match port {
        None => default_port(protocol),
        Some(p) => p
            .parse::<u16>()
            .map_err(|_| format!("`{text}`: the port is not a number from 0 to 65535"))?,
    };
    Ok((host.to_owned(), port))
}

impl DbUrl {
    /// Parses one `--db` value; an error never quotes a secret.
    pub fn parse(text: &str) -> Result<DbUrl, String> {
        let shown = SecretUrl::new(text).redacted();
        let written = scheme::split(text)
            .ok_or_else(|| format!("--db {shown}: not a URL (SCHEME://HOST:PORT/...)"))?;
        let (scheme, rest) = (written.name, written.rest);
        let known = written.known();
        let protocol = match known {
            Some(k) if k.scheme.is_postgres() => LinkProtocol::Postgres,
            Some(k) if k.scheme.is_redis() && k.tls => {
                return Err(format!(
                    "--db {shown}: a TLS link (rediss://) cannot be proxied: the harness must read the protocol to fault it"
                ))
            }
            Some(k) if k.scheme.is_redis() => LinkProtocol::Redis,
            _ => {
                return Err(format!(
                    "--db {shown}: the scheme `{scheme}` is neither PostgreSQL (postgres://...) nor Redis (redis://..., redis+cluster://...)"
                ))
            }
        };
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(end);
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let query = tail.split_once('?').map_or("", |(_, q)| q);
        if let Some(bad) = query.split('&').find(|p| {
            let key = p.split('=').next().unwrap_or("");
            matches!(key, "host" | "hostaddr" | "port")
        }) {
            let key = bad.split('=').next().unwrap_or("");
            return Err(format!(
                "--db {shown}: the query sets `{key}`, which would take the store past the harness's proxy: name the database's HOST:PORT in the authority"
            ));
        }
        let nodes = hosts
            .split(',')
            .map(|n| node(n, protocol))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("--db {shown}: {e}"))?;
        if nodes.len() > 1 && !known.is_some_and(|k| k.scheme == Scheme::RedisCluster) {
            return Err(format!(
                "--db {shown}: several hosts are a cluster's (redis+cluster://); give one --db per database"
            ));
        }
        let head = match userinfo {
            Some(u) => format!("{scheme}://{u}@"),
            None => format!("{scheme}://"),
        };
        Ok(DbUrl {
            protocol,
            nodes,
            head: SecretUrl::new(head),
            tail: SecretUrl::new(tail),
            url: SecretUrl::new(text),
        })
    }

    /// The URL with each node's address replaced by its proxy's
    /// (`locals[i]` on 127.0.0.1 for node `i`): what `{db}` becomes.
    pub fn proxied(&self, locals: &[u16]) -> SecretUrl {
        let hosts: Vec<String> = locals.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        SecretUrl::new(format!(
            "{}{}{}",
            self.head.expose(),
            hosts.join(","),
            self.tail.expose()
        ))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_url_keeps_all_but_its_nodes() {
        let db = DbUrl::parse("postgres://u:secret@db.example:6543/test?sslmode=disable").unwrap();
        assert_eq!(db.protocol, LinkProtocol::Postgres);
        assert_eq!(db.nodes, vec![("db.example".to_owned(), 6543)]);
        assert_eq!(
            db.proxied(&[9000]).expose(),
            "postgres://u:secret@127.0.0.1:9000/test?sslmode=disable"
        );
        assert!(!db.proxied(&[9000]).to_string().contains("secret"));
        let db = DbUrl::parse("postgres+blind-retry://postgres@127.0.0.1/test").unwrap();
        assert_eq!(db.nodes, vec![("127.0.0.1".to_owned(), 5432)]);
        assert_eq!(
            db.proxied(&[1]).expose(),
            "postgres+blind-retry://postgres@127.0.0.1:1/test"
        );
        let db = DbUrl::parse("redis+cluster://127.0.0.1:7101,[::1]:7102").unwrap();
        assert_eq!(db.protocol, LinkProtocol::Redis);
        assert_eq!(
            db.nodes,
            vec![("127.0.0.1".to_owned(), 7101), ("::1".to_owned(), 7102)]
        );
        assert_eq!(
            db.proxied(&[1, 2]).expose(),
            "redis+cluster://127.0.0.1:1,127.0.0.1:2"
        );
        assert_eq!(
            DbUrl::parse("redis://h").unwrap().proxied(&[5]).expose(),
            "redis://127.0.0.1:5"
        );
    }

    #[test]
    fn what_cannot_be_proxied_is_refused_without_its_secret() {
        for (url, why) in [
            ("rediss://u:pw@h:1", "TLS"),
            ("mysql://u:pw@h:1/d", "neither"),
            ("h:5432", "not a URL"),
            ("postgres://u:pw@h/d?host=/tmp", "`host`"),
            ("postgres://u:pw@/d", "no host"),
            ("postgres://u:pw@h:x/d", "port"),
            ("redis://u:pw@a:1,b:2", "cluster"),
        ] {
            let e = DbUrl::parse(url).unwrap_err();
            assert!(e.contains(why), "{url}: {e}");
            assert!(!e.contains("pw"), "{url}: {e}");
        }
    }
}
