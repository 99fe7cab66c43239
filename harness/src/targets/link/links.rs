//! The database links a run owns (`--db URL`, with `--start`): a proxy in
//! front of every node of every `--db`, on a runtime of their own (one
//! worker thread), so that the judge's own work never stalls a link; the
//! `{db}` (`{db0}`, `{db1}`...) a started command is given; and the faults
//! a scenario arms on them.

use std::sync::Arc;

use reqkey_reference::store::SecretUrl;
use reqkey_scenario::link::{LinkFault, OwnedLinks};

use super::db::DbUrl;
use super::nemesis::{Healed, Nemesis};
use super::proxy::Registry;

/// The most `--db` values one run takes.
pub const MAX_DBS: usize = 8;
/// How long a heal waits for what struck to settle.
pub const MAX_SETTLE: std::time::Duration = std::time::Duration::from_secs(10);

/// One `--db` and what its started command is given.
#[derive(Debug)]
struct Db {
    url: DbUrl,
    /// `{db}`: the URL with the proxies' addresses.
    proxied: SecretUrl,
}

/// The links of a run. Dropping it stops every proxy.
#[derive(Debug)]
pub struct Links {
    dbs: Vec<Db>,
    registry: Arc<Registry>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for Links {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

impl Links {
    /// Parses every `--db` and starts a proxy in front of each node.
    pub fn start(urls: &[String]) -> Result<Links, String> {
        if urls.len() > MAX_DBS {
            return Err(format!("at most {MAX_DBS} --db values"));
        }
        for u in urls {
            crate::secrets::register_target(u);
        }
        let parsed = urls
            .iter()
            .map(|u| DbUrl::parse(u))
            .collect::<Result<Vec<_>, _>>()?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("reqkey-link")
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the link proxies' runtime: {e}"))?;
        let registry = Registry::new(runtime.handle().clone(), Arc::new(Nemesis::default()));
        let mut dbs = Vec::new();
        for (index, url) in parsed.into_iter().enumerate() {
            let locals = url
                .nodes
                .iter()
                .map(|(host, port)| registry.local_for(host, *port, index, url.protocol))
                .collect::<Result<Vec<_>, _>>()?;
            dbs.push(Db {
                proxied: url.proxied(&locals),
                url,
            });
        }
        Ok(Links {
            dbs,
            registry,
            runtime: Some(runtime),
        })
    }

    /// `text` with `{dbN}` and `{db}` (the first) replaced by the proxied
    /// URLs; the secrets they carry are remembered so no output shows them.
    pub fn fill(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for (i, db) in self.dbs.iter().enumerate() {
            out = out.replace(&format!("{{db{i}}}"), db.proxied.expose());
        }
        if let Some(first) = self.dbs.first() {
            out = out.replace("{db}", first.proxied.expose());
        }
        out
    }

    /// Does `text` name a database (`{db}` or `{dbN}`)?
    pub fn named_in(&self, text: &str) -> bool {
        text.contains("{db}") || (0..self.dbs.len()).any(|i| text.contains(&format!("{{db{i}}}")))
    }

    /// The protocols owned, for the scenarios that need a link.
    pub fn owned(&self) -> OwnedLinks {
        let mut owned = OwnedLinks::default();
        for db in &self.dbs {
            match db.url.protocol {
                reqkey_scenario::link::LinkProtocol::Postgres => owned.postgres += 1,
                reqkey_scenario::link::LinkProtocol::Redis => owned.redis += 1,
            }
        }
        owned
    }

    /// One line for the reports: which databases' links the harness owns.
    pub fn describe(&self) -> String {
        let dbs: Vec<String> = self
            .dbs
            .iter()
            .enumerate()
            .map(|(i, db)| {
                format!(
                    "db {i} {} ({} node{})",
                    db.url.url,
                    db.url.nodes.len(),
                    if db.url.nodes.len() == 1 { "" } else { "s" }
                )
            })
            .collect();
        format!(
            "the harness owns the database link{} of the started store through its proxies: {}",
            if self.dbs.len() == 1 { "" } else { "s" },
            dbs.join("; ")
        )
    }

    pub fn arm(&self, fault: LinkFault) {
        self.registry.nemesis().arm(fault);
    }

    /// Ends every fault and waits (at most [`MAX_SETTLE`]) until what
    /// struck has settled: a commit held and let go is answered by its
    /// database, an answer held is delivered, a silenced connection reset.
    /// Only then is the link whole again, so that the reads after a heal
    /// never race a commit still on its way. What never struck, or never
    /// settled, is handed back.
    pub async fn heal(&self) -> Healed {
        let nemesis = self.registry.nemesis();
        let unstruck = nemesis.heal();
        let deadline = tokio::time::Instant::now() + MAX_SETTLE;
        while nemesis.unsettled() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        Healed {
            unstruck,
            incomplete: nemesis.take_unsettled(),
        }
    }

    /// What the proxies did since the last call.
    pub fn take_log(&self) -> Vec<String> {
        self.registry.nemesis().take_log()
    }

    /// Every fault that struck in this run, and how many connections no
    /// fault could strike (opaque); how many nodes are proxied.
    pub fn summary(&self) -> (Vec<String>, usize, usize) {
        let (struck, opaque) = self.registry.nemesis().summary();
        (struck, opaque, self.registry.len())
    }
}
