//! `--partition k/n`: one CI job's share of a suite, so a certification
//! can run as `n` jobs and be merged back (`reqkey certify merge`).
//!
//! The split must be deterministic (every job computes its own share with
//! no coordination) and exact (every scenario in exactly one shard). It is
//! made by **index in the suite sorted by scenario id**: the scenarios are
//! ordered by id (ties, which a valid suite does not have, by file path),
//! and the scenario at 0-based position `i` belongs to shard
//! `i mod n + 1` — round robin, the way nextest's count-based partitioning
//! does it. Sorting by id, not by file, means the shares do not move when
//! files are renamed or moved between directories; round robin (rather than
//! hashing the id) keeps the shards within one scenario of the same size,
//! which is what a CI matrix wants. Adding a scenario may move others to
//! another shard; that is harmless, since shards are only ever merged with
//! shards of the same suite digest.
//!
//! The split is taken over the whole suite as loaded, before the target's
//! profile narrows it, so that the shards of one suite are the same for
//! every target and `merge` can account for every scenario: each one was
//! either run or reported not applicable by exactly one shard.

use std::fmt;
use std::str::FromStr;

use reqkey_scenario::Scenario;

/// The most shards a suite can be split into: far more than a suite has
/// scenarios, and a bound on what `merge` keeps track of.
pub const MAX_SHARDS: u32 = 1024;

/// Shard `index` of `count` (1-based, `1 <= index <= count`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct Partition {
    pub index: u32,
    pub count: u32,
}

impl fmt::Display for Partition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl FromStr for Partition {
    type Err = String;

    /// Parses `k/n` (as `--partition` takes it).
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = |why: &str| format!("`{text}` is not a partition k/n ({why})");
        let (k, n) = text
            .split_once('/')
            .ok_or_else(|| bad("no `/`; for example 2/3"))?;
        let index: u32 = k
            .trim()
            .parse()
            .map_err(|_| bad("k is not a whole number"))?;
        let count: u32 = n
            .trim()
            .parse()
            .map_err(|_| bad("n is not a whole number"))?;
        Partition::new(index, count)
            .ok_or_else(|| bad(&format!("needs 1 <= k <= n <= {MAX_SHARDS}")))
    }
}

impl Partition {
    /// `None` unless `1 <= index <= count <= MAX_SHARDS`.
    pub fn new(index: u32, count: u32) -> Option<Partition> {
        (index >= 1 && index <= count && count <= MAX_SHARDS).then_some(Partition { index, count })
    }

    /// The 1-based shard of the scenario at 0-based `position` in the suite
    /// sorted by id.
    pub fn shard_of(position: usize, count: u32) -> u32 {
        // `count` is at least 1 (a `Partition` cannot be built otherwise).
        (position % count.max(1) as usize) as u32 + 1
    }

    /// The `--partition` flag as a run's selection lists it.
    pub fn flag(&self) -> String {
        format!("--partition {self}")
    }

    /// Keeps this shard's scenarios, in the order they were given.
    pub fn select(&self, scenarios: Vec<Scenario>) -> Vec<Scenario> {
        let mut order: Vec<usize> = (0..scenarios.len()).collect();
        order.sort_by(|&a, &b| {
            (&scenarios[a].id, &scenarios[a].file).cmp(&(&scenarios[b].id, &scenarios[b].file))
        });
        let mut mine = vec![false; scenarios.len()];
        for (position, &original) in order.iter().enumerate() {
            mine[original] = Partition::shard_of(position, self.count) == self.index;
        }
        scenarios
            .into_iter()
            .zip(mine)
            .filter_map(|(s, keep)| keep.then_some(s))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn parses_k_of_n_and_refuses_the_rest() {
        assert_eq!(
            "2/3".parse::<Partition>(),
            Ok(Partition { index: 2, count: 3 })
        );
        assert_eq!("1/1".parse::<Partition>().unwrap().to_string(), "1/1");
        for bad in ["0/3", "4/3", "3", "a/3", "1/0", "1/2000", "", "/", "1/-2"] {
            assert!(bad.parse::<Partition>().is_err(), "{bad}");
        }
    }

    fn ids(scenarios: &[Scenario]) -> Vec<String> {
        scenarios.iter().map(|s| s.id.clone()).collect()
    }

    #[test]
    fn every_scenario_lands_in_exactly_one_shard() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/store");
        let suite = reqkey_scenario::load_paths(&[root]).unwrap();
        assert!(suite.len() >= 10);
        for count in [1u32, 2, 3, 7] {
            let mut seen: Vec<String> = Vec::new();
            let mut sizes = Vec::new();
            for index in 1..=count {
                let shard = Partition { index, count }.select(suite.clone());
                sizes.push(shard.len());
                seen.extend(ids(&shard));
            }
            let total = seen.len();
            seen.sort();
            seen.dedup();
            assert_eq!(total, suite.len(), "{count} shards");
            assert_eq!(seen.len(), suite.len(), "{count} shards: a duplicate");
            let (min, max) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
            assert!(max - min <= 1, "{count} shards unbalanced: {sizes:?}");
        }
    }

    #[test]
    fn the_split_does_not_depend_on_the_order_given() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/store");
        let suite = reqkey_scenario::load_paths(&[root]).unwrap();
        let mut reversed = suite.clone();
        reversed.reverse();
        let p = Partition { index: 2, count: 3 };
        let mut a = ids(&p.select(suite));
        let mut b = ids(&p.select(reversed));
        a.sort();
        b.sort();
        assert_eq!(a, b);
    }
}
