//! What `certify merge` checks about its shards before it believes them:
//! each shard holds exactly its share of the suite it claims, and every
//! shard judged the same server.
//!
//! Why: the shards' own counts were once all merge compared, so a real
//! scenario renamed to an invented id, fifteen failing scenarios deleted
//! with the file count lowered, or shards of two different servers behind
//! one URL all merged. The suite the shards claim (its digest) is loaded
//! here, split by the same partition, and each shard's ids must be its
//! share, no more and no fewer; the servers' `/health` identities (name,
//! version, protocol) must be one. The seal ([`crate::report::seal`])
//! guards the rest of each shard's content.

use std::collections::BTreeSet;

use reqkey_scenario::Scenario;

use crate::report::merge::Shard;
use crate::run::partition::Partition;

/// The most ids one refusal names.
const MAX_NAMED: usize = 5;

fn named(ids: &BTreeSet<&str>) -> String {
    let mut shown: Vec<String> = ids
        .iter()
        .take(MAX_NAMED)
        .map(|id| crate::report::inert::terminal(id))
        .collect();
    if ids.len() > MAX_NAMED {
        shown.push(format!("and {} more", ids.len() - MAX_NAMED));
    }
    shown.join(", ")
}

/// Does each shard report exactly its share of `suite` (run or not
/// applicable)? A shard that stopped early (no verdict for the run) may
/// lack some of its share, never hold another id.
pub fn check_against_suite(shards: &[Shard], suite: &[Scenario]) -> Result<(), String> {
    for s in shards {
        let Some(p) = s.doc.partition else {
            return Err(format!("{}: not a shard", s.origin));
        };
        let p = Partition::new(p.index, p.count)
            .ok_or_else(|| format!("{}: partition {}/{} is not k/n", s.origin, p.index, p.count))?;
        let share: Vec<Scenario> = p.select(suite.to_vec());
        let want: BTreeSet<&str> = share.iter().map(|s| s.id.as_str()).collect();
        let got: BTreeSet<&str> = s
            .doc
            .scenarios
            .iter()
            .map(|r| r.id.as_str())
            .chain(s.doc.not_applicable.iter().map(|n| n.id.as_str()))
            .collect();
        let reported = s.doc.scenarios.len() + s.doc.not_applicable.len();
        if reported != got.len() {
            return Err(format!("{} (shard {p}) reports a scenario twice", s.origin));
        }
        let foreign: BTreeSet<&str> = got.difference(&want).copied().collect();
        if !foreign.is_empty() {
            return Err(format!(
                "{} (shard {p}) reports scenarios its share of the suite does not hold: {}",
                s.origin,
                named(&foreign)
            ));
        }
        let missing: BTreeSet<&str> = want.difference(&got).copied().collect();
        if !missing.is_empty() && s.doc.indefinite.is_none() {
            return Err(format!(
                "{} (shard {p}) lacks {} of the {} scenarios of its share: {}",
                s.origin,
                missing.len(),
                want.len(),
                named(&missing)
            ));
        }
    }
    Ok(())
}

/// The identity a certificate names: `/health`'s name, version and
/// protocol.
fn identity(shard: &Shard) -> Option<(String, String, String)> {
    let h = shard.doc.target.health.as_ref()?;
    let field = |k: &str| {
        h.get(k)
            .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
            .unwrap_or_default()
    };
    Some((field("name"), field("version"), field("protocol")))
}

/// Did every shard judge the same server (one `/health` identity)?
pub fn check_identity(shards: &[Shard]) -> Result<(), String> {
    let Some(first) = shards.first() else {
        return Ok(());
    };
    let want = identity(first);
    for s in &shards[1..] {
        let got = identity(s);
        if got != want {
            let show = |i: &Option<(String, String, String)>| match i {
                Some((n, v, p)) => crate::report::inert::terminal(&crate::run::bound::text(
                    &format!("{n} {v} ({p})"),
                )),
                None => "no identity".to_owned(),
            };
            return Err(format!(
                "the shards judged different servers: {} names itself {}, {} names itself {}",
                first.origin,
                show(&want),
                s.origin,
                show(&got)
            ));
        }
    }
    Ok(())
}
