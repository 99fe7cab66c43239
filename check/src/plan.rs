//! The fault plan: which fault each entry request gets, from a seed.
//!
//! A plan is a list of `fault=probability` pairs (`--plan
//! drop-after-commit=0.4,delay=0.05,503=0.05,duplicate=0.05`); the rest of
//! the probability mass forwards the request untouched. The fault of the
//! `n`-th entry request (in arrival order, counting from 0) is a pure
//! function of `(seed, n)`, so the same seed and the same sequence of
//! requests replay the same faults.

use std::fmt;

use serde::{Deserialize, Serialize};

/// What the proxy does to one entry request (SPEC 9, `[[client.proxy.faults]]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fault {
    /// Forwarded, answered as the server answered.
    None,
    /// Forwarded and answered whole by the server (it committed), then the
    /// client's connection is closed without an answer.
    DropAfterCommit,
    /// Forwarded, the answer held for `--delay-ms`, then the connection is
    /// closed without an answer: past any client timeout shorter than that.
    Delay,
    /// Answered `502` without forwarding.
    #[serde(rename = "502")]
    Status502,
    /// Answered `503` without forwarding.
    #[serde(rename = "503")]
    Status503,
    /// Forwarded twice, one after the other; the client gets the first answer.
    Duplicate,
}

impl Fault {
    pub const ALL: [Fault; 5] = [
        Fault::DropAfterCommit,
        Fault::Delay,
        Fault::Status502,
        Fault::Status503,
        Fault::Duplicate,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Fault::None => "none",
            Fault::DropAfterCommit => "drop-after-commit",
            Fault::Delay => "delay",
            Fault::Status502 => "502",
            Fault::Status503 => "503",
            Fault::Duplicate => "duplicate",
        }
    }

    fn parse(name: &str) -> Option<Fault> {
        Fault::ALL.into_iter().find(|f| f.name() == name)
    }

    /// The client does not get the server's answer: it must re-send.
    pub fn fails_answer(self) -> bool {
        matches!(
            self,
            Fault::DropAfterCommit | Fault::Delay | Fault::Status502 | Fault::Status503
        )
    }

    /// The request reaches the server (at least once).
    pub fn forwards(self) -> bool {
        !matches!(self, Fault::Status502 | Fault::Status503)
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A bad `--plan`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    #[error("--plan: `{0}` is not `fault=probability`")]
    NotAPair(String),
    #[error("--plan: unknown fault `{0}` (known: drop-after-commit, delay, 502, 503, duplicate)")]
    UnknownFault(String),
    #[error("--plan: `{0}` is not a probability between 0 and 1")]
    BadProbability(String),
    #[error("--plan: `{0}` is named twice")]
    Repeated(String),
    #[error("--plan: the probabilities add up to {0}, more than 1")]
    OverOne(f64),
}

/// Faults with their probabilities, in the order written.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FaultPlan {
    entries: Vec<(Fault, f64)>,
}

impl FaultPlan {
    /// Parses `fault=p,fault=p,...` (an empty string is the plan without
    /// faults).
    pub fn parse(text: &str) -> Result<FaultPlan, PlanError> {
        let mut entries: Vec<(Fault, f64)> = Vec::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, p) = part
                .split_once('=')
                .ok_or_else(|| PlanError::NotAPair(part.to_owned()))?;
            let fault = Fault::parse(name.trim())
                .ok_or_else(|| PlanError::UnknownFault(name.trim().to_owned()))?;
            let p: f64 = p
                .trim()
                .parse()
                .ok()
                .filter(|p: &f64| p.is_finite() && (0.0..=1.0).contains(p))
                .ok_or_else(|| PlanError::BadProbability(p.trim().to_owned()))?;
            if entries.iter().any(|(f, _)| *f == fault) {
                return Err(PlanError::Repeated(fault.name().to_owned()));
            }
            entries.push((fault, p));
        }
        let total: f64 = entries.iter().map(|(_, p)| p).sum();
        if total > 1.0 + 1e-9 {
            return Err(PlanError::OverOne(total));
        }
        Ok(FaultPlan { entries })
    }

    /// The probability of `fault`.
    pub fn probability(&self, fault: Fault) -> f64 {
        self.entries
            .iter()
            .find(|(f, _)| *f == fault)
            .map_or(0.0, |(_, p)| *p)
    }

    /// The fault of the `n`-th entry request under `seed`.
    pub fn choose(&self, seed: u64, n: u64) -> Fault {
        let u = unit(seed, n);
        let mut acc = 0.0;
        for (fault, p) in &self.entries {
            acc += p;
            if u < acc {
                return *fault;
            }
        }
        Fault::None
    }
}

impl fmt::Display for FaultPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .entries
            .iter()
            .map(|(fault, p)| format!("{}={p}", fault.name()))
            .collect();
        f.write_str(&parts.join(","))
    }
}

fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A uniform number in [0, 1) from `(seed, n)`.
fn unit(seed: u64, n: u64) -> f64 {
    let bits = splitmix64(seed ^ splitmix64(n.wrapping_add(1)));
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_refuses() {
        let plan = FaultPlan::parse("drop-after-commit=0.4, delay=0.1,503=0.1,duplicate=0.05")
            .unwrap_or_default();
        assert_eq!(plan.probability(Fault::DropAfterCommit), 0.4);
        assert_eq!(plan.probability(Fault::Status502), 0.0);
        assert_eq!(
            plan.to_string(),
            "drop-after-commit=0.4,delay=0.1,503=0.1,duplicate=0.05"
        );
        assert_eq!(FaultPlan::parse(""), Ok(FaultPlan::default()));
        assert!(matches!(
            FaultPlan::parse("drop"),
            Err(PlanError::NotAPair(_))
        ));
        assert!(matches!(
            FaultPlan::parse("boom=0.1"),
            Err(PlanError::UnknownFault(_))
        ));
        assert!(matches!(
            FaultPlan::parse("delay=1.5"),
            Err(PlanError::BadProbability(_))
        ));
        assert!(matches!(
            FaultPlan::parse("delay=NaN"),
            Err(PlanError::BadProbability(_))
        ));
        assert!(matches!(
            FaultPlan::parse("delay=0.1,delay=0.2"),
            Err(PlanError::Repeated(_))
        ));
        assert!(matches!(
            FaultPlan::parse("delay=0.6,503=0.6"),
            Err(PlanError::OverOne(_))
        ));
    }

    #[test]
    fn the_same_seed_replays_and_frequencies_follow_the_plan() {
        let plan = FaultPlan::parse("drop-after-commit=0.4,503=0.1").unwrap_or_default();
        let a: Vec<Fault> = (0..2000).map(|n| plan.choose(7, n)).collect();
        let b: Vec<Fault> = (0..2000).map(|n| plan.choose(7, n)).collect();
        let c: Vec<Fault> = (0..2000).map(|n| plan.choose(8, n)).collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
        let drops = a.iter().filter(|f| **f == Fault::DropAfterCommit).count();
        let s503 = a.iter().filter(|f| **f == Fault::Status503).count();
        assert!((700..900).contains(&drops), "{drops} drops of 2000");
        assert!((140..260).contains(&s503), "{s503} 503s of 2000");
        assert!(FaultPlan::default().choose(1, 1) == Fault::None);
    }
}
