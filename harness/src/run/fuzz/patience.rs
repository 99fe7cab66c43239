//! The patience (issue 55): the longest single wait the judge spends on one
//! promise, and the record of how far each promise was tested.
//!
//! A promise is tested where it can break: at the time, count and size it
//! was declared for. A key declared kept for a day cannot be waited out in a
//! certification, so the judge waits as long as its patience allows
//! (`--patience`, [`DEFAULT_PATIENCE_MS`] by default, measured in
//! docs/fuzz.md "The default patience: cost and catch") and every report says, per timing field,
//! whether it was judged at its declared value or only up to the patience
//! (`expiryMs 86400000: judged up to 10 s`). A certificate says "every
//! declared value is judged" only when each was reached.
//!
//! What the probes of `run/fuzz/scale.rs` found and reached is kept here as
//! [`ScaleRecord`], a field of the fuzz pass's record (`FuzzPass.scale`),
//! so every report renders the same facts from one place.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The patience a certification and `reqkey fuzz` wait by default: long
/// enough to outlive the examples of promises broken seconds after
/// the fact (a key forgotten after 2 or 4 s, a lock lapsing after 750 ms, a
/// cleanup job after 5 s), short enough that the waits, which run side by
/// side, add about 1 s (store), 15-20 s (agent) and 13 s (idem) to a
/// certification of the references (docs/fuzz.md, "The default patience:
/// cost and catch").
pub const DEFAULT_PATIENCE_MS: u64 = 10_000;
/// [`DEFAULT_PATIENCE_MS`] as `--patience` writes it (clap's default).
pub const DEFAULT_PATIENCE: &str = "10s";
/// The shortest patience `--patience` takes (tests run with 1 s).
pub const MIN_PATIENCE_MS: u64 = 100;
/// The longest: an hour.
pub const MAX_PATIENCE_MS: u64 = 3_600_000;

/// The longest single wait on one promise, parsed once at the edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Patience {
    ms: u64,
}

impl Default for Patience {
    fn default() -> Self {
        Self {
            ms: DEFAULT_PATIENCE_MS,
        }
    }
}

impl Patience {
    /// A patience of `ms` milliseconds, or why it is out of bounds.
    pub fn from_ms(ms: u64) -> Result<Self, String> {
        if !(MIN_PATIENCE_MS..=MAX_PATIENCE_MS).contains(&ms) {
            return Err(format!(
                "a patience is {} to {}",
                duration(MIN_PATIENCE_MS),
                duration(MAX_PATIENCE_MS)
            ));
        }
        Ok(Self { ms })
    }

    pub fn ms(self) -> u64 {
        self.ms
    }

    pub fn is_default(self) -> bool {
        self.ms == DEFAULT_PATIENCE_MS
    }

    /// As `--patience` takes it back (`10s`, `1500ms`).
    pub fn flag(self) -> String {
        if self.ms % 1000 == 0 {
            format!("{}s", self.ms / 1000)
        } else {
            format!("{}ms", self.ms)
        }
    }
}

impl FromStr for Patience {
    type Err = String;

    /// `DURATION`: a whole number with a unit, `ms`, `s` or `m`
    /// (`500ms`, `10s`, `2m`).
    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        let (digits, unit) = t
            .find(|c: char| !c.is_ascii_digit())
            .map_or((t, ""), |i| t.split_at(i));
        let factor = match unit {
            "ms" => 1,
            "s" => 1_000,
            "m" | "min" => 60_000,
            "" => return Err(format!("`{s}` has no unit: write it as 500ms, 10s or 2m")),
            _ => return Err(format!("`{s}`: the unit is ms, s or m (500ms, 10s, 2m)")),
        };
        let n: u64 = digits
            .parse()
            .map_err(|_| format!("`{s}` is not a duration (500ms, 10s, 2m)"))?;
        Self::from_ms(n.saturating_mul(factor))
    }
}

impl fmt::Display for Patience {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&duration(self.ms))
    }
}

/// `ms` as a person reads it: `750 ms`, `10 s`, `1.5 s`, `2 min`.
pub fn duration(ms: u64) -> String {
    if ms < 1_000 {
        format!("{ms} ms")
    } else if ms % 60_000 == 0 {
        format!("{} min", ms / 60_000)
    } else if ms % 1_000 == 0 {
        format!("{} s", ms / 1_000)
    } else {
        format!("{:.1} s", ms as f64 / 1000.0)
    }
}

/// How far one declared timing field was judged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FieldReach {
    /// The profile field (`expiryMs`, `lockMs`).
    pub field: String,
    /// Its declared value (`None`: null).
    pub declared: Option<u64>,
    /// The longest span the probes judged, in ms (`None`: nothing was
    /// judged: the probe could not run, see `how`).
    pub judged_up_to_ms: Option<u64>,
    /// Whether the declared value itself was reached (and past it, where
    /// the field promises something there).
    pub at_declared: bool,
    /// What was sent, in the harness's own words.
    pub how: String,
}

impl FieldReach {
    /// One line: `expiryMs 86400000: judged up to 10 s (...)`.
    pub fn line(&self) -> String {
        let declared = self
            .declared
            .map_or_else(|| "null".to_owned(), |v| v.to_string());
        let reach = match (self.judged_up_to_ms, self.at_declared, self.declared) {
            (None, _, _) => "not judged".to_owned(),
            (Some(_), true, _) => "judged at its declared value".to_owned(),
            (Some(ms), false, None) => format!("probed up to {}", duration(ms)),
            (Some(ms), false, Some(_)) => format!("judged up to {} only", duration(ms)),
        };
        format!("{} {declared}: {reach} ({})", self.field, self.how)
    }

    /// A declared value the probes did not reach: a number past the
    /// patience, or `null` (never, until completion), which no wait reaches.
    pub fn short_of_declared(&self) -> bool {
        !self.at_declared
    }
}

/// What the probes at scale did (issue 55): the patience, each timing
/// field's reach, the capacity written before the first keys were asked
/// again, and the final reads after a quiet period.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ScaleRecord {
    pub patience_ms: u64,
    /// The keys written before the first were asked again
    /// (`--capacity-keys`).
    #[serde(default)]
    pub capacity_keys: u64,
    /// Per timing field of the declared profile (the idem level's
    /// `expiryMs` and `lockMs`; the store and agent levels declare none).
    #[serde(default)]
    pub reach: Vec<FieldReach>,
    /// What was written before the first keys were asked again, one line
    /// per dimension (per session, across sessions, per caller and route).
    #[serde(default)]
    pub capacity: Vec<String>,
    /// What was read again after the quiet period, one line per kind.
    #[serde(default)]
    pub final_reads: Vec<String>,
    /// Probes the target or the machine did not let run, and why: never a
    /// pass, never a fail.
    #[serde(default)]
    pub not_judged: Vec<String>,
    /// The wall time the probes added to the run, in ms: their two halves
    /// around the programs (the waits the programs covered are not
    /// counted twice). A measurement, shown in `results.json` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub added_ms: Option<u64>,
}

impl ScaleRecord {
    /// The patience line every report starts with.
    pub fn patience_line(&self) -> String {
        format!(
            "{} (--patience): the longest single wait on one promise",
            duration(self.patience_ms)
        )
    }

    /// The declared timing fields judged only up to the patience, as
    /// `field value (judged up to N)`.
    pub fn short_of_declared(&self) -> Vec<String> {
        self.reach
            .iter()
            .filter(|r| r.short_of_declared())
            .map(|r| {
                let reach = r.judged_up_to_ms.map_or_else(
                    || "not judged".to_owned(),
                    |ms| format!("judged up to {} only", duration(ms)),
                );
                match r.declared {
                    Some(v) => format!("{} {v} ({reach})", r.field),
                    None => format!("{} null ({reach})", r.field),
                }
            })
            .collect()
    }

    /// Every line of the record, for the formats that list them.
    pub fn lines(&self) -> Vec<(&'static str, String)> {
        let mut out = vec![("patience", self.patience_line())];
        out.extend(self.reach.iter().map(|r| ("timing", r.line())));
        out.extend(self.capacity.iter().map(|c| ("capacity", c.clone())));
        out.extend(self.final_reads.iter().map(|c| ("final reads", c.clone())));
        out.extend(self.not_judged.iter().map(|c| ("not judged", c.clone())));
        out
    }
}

/// A violation a probe at scale proved: it becomes one `FuzzViolation` of
/// the pass (`run/fuzz/scale.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The clause the answer breaks.
    pub clause: String,
    /// The probe that showed it, one line.
    pub probe: String,
    /// The request, the answer and what the spec allowed.
    pub message: String,
    /// A scenario that replays it, where one can be written.
    pub scenario_yaml: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_their_unit_and_within_bounds() {
        let ok = |s: &str| s.parse::<Patience>().map(Patience::ms);
        assert_eq!(ok("10s"), Ok(10_000));
        assert_eq!(ok("500ms"), Ok(500));
        assert_eq!(ok("2m"), Ok(120_000));
        assert_eq!(ok(" 1s "), Ok(1_000));
        for bad in ["10", "s", "1.5s", "-1s", "10h", "0ms", "2h", ""] {
            assert!(ok(bad).is_err(), "{bad}");
        }
        assert_eq!(Patience::default().flag(), DEFAULT_PATIENCE);
        assert_eq!(DEFAULT_PATIENCE.parse(), Ok(Patience::default()));
        assert_eq!(
            Patience::from_ms(1_500).map(Patience::flag),
            Ok("1500ms".into())
        );
    }

    #[test]
    fn a_field_says_whether_its_declared_value_was_reached() {
        let mut r = FieldReach {
            field: "expiryMs".into(),
            declared: Some(86_400_000),
            judged_up_to_ms: Some(10_000),
            at_declared: false,
            how: "retries".into(),
        };
        assert_eq!(
            r.line(),
            "expiryMs 86400000: judged up to 10 s only (retries)"
        );
        assert!(r.short_of_declared());
        r.declared = None;
        assert_eq!(r.line(), "expiryMs null: probed up to 10 s (retries)");
        assert!(r.short_of_declared(), "null is never reached by a wait");
        r.declared = Some(2_000);
        r.at_declared = true;
        assert_eq!(
            r.line(),
            "expiryMs 2000: judged at its declared value (retries)"
        );
        r.judged_up_to_ms = None;
        assert!(r.line().contains("not judged"));
    }
}
