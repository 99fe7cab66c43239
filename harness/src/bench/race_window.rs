//! `reqkey bench race-window`: how often a certification's fuzz pass
//! catches a check-then-set race of a set window, with its bursts released
//! behind a barrier (plain) and with their last bytes sent together
//! (synchronised, `targets/together.rs`), side by side (issue 56; the curve
//! of docs/fuzz.md).
//!
//! Each trial is the fuzz pass of one certification (`certify --seed S`:
//! the battery, then `cases` generated programs, stopped at the first
//! failure) against a fresh in-process `broken-idem:race-window-<N>us`,
//! one trial per seed; the catch rate is the share of trials that went
//! red. The correct reference runs the same trials and must stay green (a
//! failure there is a false alarm, exit 1). Figures from a count of
//! trials, not a time box, so a loaded machine measures the same thing
//! (slower). Beside each rate, the mean number of the battery's program
//! that caught it: the rate per burst a saturated rate hides.
//!
//! In process the app and the harness share one runtime's threads; with
//! `process` each trial starts `reqkey serve idem` (this binary) as a
//! process of its own and certifies it over loopback, as an app of its
//! own is certified.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use reqkey_reference::idem::RaceWindow;
use serde_json::Value;

use crate::run::fuzz::idem::{fuzz_idem, IdemFuzzOptions, IdemFuzzOutcome};
use crate::targets::profile::resolve_profile;
use crate::targets::spec::open_target;
use crate::targets::{HttpRequest, HttpResponse, Level, Target, TargetError, TargetOptions};

/// What to measure.
#[derive(Debug, Clone)]
pub struct RaceWindowConfig {
    /// The windows, in µs (each a calibrated `race-window-<N>us`).
    pub windows_us: Vec<u32>,
    /// One trial per seed.
    pub seeds: Vec<u64>,
    /// Generated programs after the battery (a certification's default:
    /// `DEFAULT_CERTIFY_FUZZ_CASES`).
    pub cases: u32,
    pub call_timeout_ms: u64,
    /// Whether the correct reference runs the same trials (off only under
    /// `--quick`, the check that the command works).
    pub reference: bool,
    /// Each trial's app a `reqkey serve idem` process of its own.
    pub process: bool,
}

/// How a trial's bursts go out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// Behind a barrier, each on the client's pooled connections.
    Plain,
    /// Last bytes together (`targets/together.rs`).
    Synchronised,
}

/// One window's figures: per release, (trials caught, trials judged) and
/// the errors (no verdict) met.
#[derive(Debug, Clone)]
pub struct WindowRow {
    /// `None`: the correct reference.
    pub window_us: Option<u32>,
    pub plain: (u32, u32),
    pub synchronised: (u32, u32),
    /// Per release, the battery's programs that caught it (1-based).
    pub plain_at: Vec<u32>,
    pub synchronised_at: Vec<u32>,
    pub errors: Vec<String>,
    pub seconds: f64,
}

/// A target whose bursts go out behind a barrier: `sends_together` off.
#[derive(Debug)]
struct Plain(Arc<dyn Target>);

#[async_trait]
impl Target for Plain {
    fn level(&self) -> Level {
        self.0.level()
    }
    fn describe(&self) -> String {
        self.0.describe()
    }
    async fn health(&self) -> Result<Value, TargetError> {
        self.0.health().await
    }
    async fn http(&self, request: HttpRequest) -> Result<HttpResponse, TargetError> {
        self.0.http(request).await
    }
    async fn http_within(
        &self,
        request: HttpRequest,
        timeout_ms: u64,
    ) -> Result<HttpResponse, TargetError> {
        self.0.http_within(request, timeout_ms).await
    }
    fn long_calls(&self) -> bool {
        self.0.long_calls()
    }
}

/// How a trial ended: green, or red at the battery's program `Some(n)`
/// (`None`: at a generated one).
enum Caught {
    No,
    At(Option<u32>),
}

/// The battery's program a failure names (`the battery's program N (`).
fn battery_program(reason: &str) -> Option<u32> {
    let rest = reason.split_once("the battery's program ")?.1;
    rest.split(' ').next()?.parse().ok()
}

/// One certification's fuzz pass.
fn trial(
    spec: &str,
    release: Release,
    seed: u64,
    cfg: &RaceWindowConfig,
) -> Result<Caught, String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a runtime: {e}"))?;
    let opts = TargetOptions {
        call_timeout_ms: cfg.call_timeout_ms,
        ..TargetOptions::default()
    };
    // A process of its own, killed when the trial ends.
    let served = if cfg.process {
        let variant = match spec.strip_prefix("reference-idem") {
            Some(_) => "default",
            None => spec,
        };
        let args = [
            "serve",
            "idem",
            "--listen",
            "127.0.0.1:0",
            "--profile-variant",
            variant,
        ];
        Some(runtime.block_on(crate::bench::soak::start(None, &args))?)
    } else {
        None
    };
    let at = served.as_ref().map_or(spec, |p| p.base());
    let target = runtime
        .block_on(open_target(at, opts))
        .map_err(|e| format!("{spec}: {e}"))?;
    let info = runtime
        .block_on(resolve_profile(target.as_ref(), None, cfg.call_timeout_ms))
        .map_err(|e| format!("{spec}: {e}"))?;
    let profile = info
        .idem
        .ok_or_else(|| format!("{spec} declared no idem profile"))?;
    let target: Arc<dyn Target> = match release {
        Release::Plain => Arc::new(Plain(target)),
        Release::Synchronised => target,
    };
    let opts = IdemFuzzOptions {
        cases: cfg.cases,
        seed,
        namespace: format!("bench-race-window.{seed}"),
        target_name: spec.to_owned(),
        profile,
        call_timeout_ms: cfg.call_timeout_ms,
        max_shrink_iters: 0,
        long_pauses: crate::run::fuzz::pass::CERTIFY_IDEM_LONG_PAUSES,
        battery: true,
    };
    let outcome = fuzz_idem(&runtime, target, &opts);
    drop(served);
    match outcome {
        IdemFuzzOutcome::Passed { .. } => Ok(Caught::No),
        IdemFuzzOutcome::Failed(f) => Ok(Caught::At(battery_program(&f.reason))),
        IdemFuzzOutcome::Error(e) => Err(format!("{spec} seed {seed}: {e}")),
    }
}

/// The spec of window `us` (`None`: the correct reference).
fn spec_of(us: Option<u32>) -> Result<String, String> {
    match us {
        None => Ok("reference-idem".to_owned()),
        Some(us) => RaceWindow::of_us(us)
            .map(|_| format!("broken-idem:race-window-{us}us"))
            .ok_or_else(|| {
                format!(
                    "{us} µs is not a calibrated window (one of {:?})",
                    RaceWindow::all_us()
                )
            }),
    }
}

/// Measures every window (and the reference), calling `each` as a row is
/// done.
pub fn race_window_benchmark(
    cfg: &RaceWindowConfig,
    mut each: impl FnMut(&WindowRow),
) -> Result<Vec<WindowRow>, String> {
    let mut windows: Vec<Option<u32>> = cfg.windows_us.iter().copied().map(Some).collect();
    if cfg.reference {
        windows.push(None);
    }
    let specs = windows
        .iter()
        .map(|w| spec_of(*w))
        .collect::<Result<Vec<_>, _>>()?;
    let mut rows = Vec::with_capacity(windows.len());
    for (window_us, spec) in windows.into_iter().zip(specs) {
        let started = Instant::now();
        let mut row = WindowRow {
            window_us,
            plain: (0, 0),
            synchronised: (0, 0),
            plain_at: Vec::new(),
            synchronised_at: Vec::new(),
            errors: Vec::new(),
            seconds: 0.0,
        };
        for &seed in &cfg.seeds {
            for release in [Release::Plain, Release::Synchronised] {
                let (tally, at) = match release {
                    Release::Plain => (&mut row.plain, &mut row.plain_at),
                    Release::Synchronised => (&mut row.synchronised, &mut row.synchronised_at),
                };
                match trial(&spec, release, seed, cfg) {
                    Ok(caught) => {
                        tally.1 += 1;
                        if let Caught::At(n) = caught {
                            tally.0 += 1;
                            at.extend(n);
                        }
                    }
                    Err(e) => row.errors.push(e),
                }
            }
        }
        row.seconds = started.elapsed().as_secs_f64();
        each(&row);
        rows.push(row);
    }
    Ok(rows)
}

impl WindowRow {
    /// A failure of the correct reference (a false alarm) or no verdict.
    pub fn has_problem(&self) -> bool {
        !self.errors.is_empty()
            || (self.window_us.is_none() && (self.plain.0 > 0 || self.synchronised.0 > 0))
    }
}

/// The table's head.
pub fn header() -> String {
    format!(
        "{:<22} {:>22} {:>22} {:>8}\n{:<22} {:>22} {:>22}",
        "window (check to set)",
        "plain",
        "synchronised",
        "wall",
        "",
        "caught (at program)",
        "caught (at program)"
    )
}

fn rate((caught, judged): (u32, u32), at: &[u32]) -> String {
    if judged == 0 {
        return "-".to_owned();
    }
    let mean = if at.is_empty() {
        String::new()
    } else {
        let sum: u32 = at.iter().sum();
        format!(" (@{:.1})", f64::from(sum) / at.len() as f64)
    };
    format!(
        "{caught}/{judged} {:>3.0}%{mean}",
        f64::from(caught) * 100.0 / f64::from(judged)
    )
}

impl std::fmt::Display for WindowRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match self.window_us {
            Some(us) if us >= 1_000 && us % 1_000 == 0 => format!("{} ms", us / 1_000),
            Some(us) => format!("{us} µs"),
            None => "reference (no race)".to_owned(),
        };
        let mut line = format!(
            "{name:<22} {:>22} {:>22} {:>7.0}s",
            rate(self.plain, &self.plain_at),
            rate(self.synchronised, &self.synchronised_at),
            self.seconds
        );
        for e in &self.errors {
            let _ = write!(line, "\n  no verdict: {e}");
        }
        f.write_str(&line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_calibrated_windows_are_measured() {
        assert_eq!(
            spec_of(Some(5)).as_deref(),
            Ok("broken-idem:race-window-5us")
        );
        assert_eq!(spec_of(None).as_deref(), Ok("reference-idem"));
        assert!(spec_of(Some(7)).is_err());
    }

    #[test]
    fn a_caught_reference_is_a_problem_and_a_caught_window_is_not() {
        let mut row = WindowRow {
            window_us: Some(5),
            plain: (1, 3),
            synchronised: (3, 3),
            plain_at: vec![4],
            synchronised_at: vec![1, 2, 6],
            errors: Vec::new(),
            seconds: 1.0,
        };
        assert!(!row.has_problem());
        assert!(row.to_string().contains("3/3 100% (@3.0)"), "{row}");
        assert!(row.to_string().contains("1/3  33% (@4.0)"), "{row}");
        assert_eq!(
            battery_program("the battery's program 12 (SucceedingBurst, one of 66"),
            Some(12)
        );
        assert_eq!(battery_program("step 0: ..."), None);
        row.window_us = None;
        assert!(row.has_problem());
        row.plain = (0, 3);
        row.synchronised = (0, 3);
        assert!(!row.has_problem());
        row.errors.push("x".into());
        assert!(row.has_problem());
    }
}
