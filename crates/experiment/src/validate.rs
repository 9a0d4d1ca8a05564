//! `fabricsim validate`: the built-in suite of scenarios that reproduce published
//! measurements (examples/validation/*.toml). Each file is a scenario with
//! `[[validation]]` entries: the measured figure, its unit and source, the metric of the
//! run it is compared with, what the scenario cannot reproduce, and, for a case known to
//! miss by more than its tolerance, why and the simulated figure recorded when that was
//! written (so a model change that moves it is seen).

use crate::catalog::Catalog;
use crate::results::{self, Summary};
use crate::runner;
use crate::scenario::{FabricKind, Scenario};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// One `[[validation]]` entry of a case file.
#[derive(Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
struct Entry {
    case: String,
    /// `busbw_gbps` / `algbw_gbps` (the first collective, GB/s), `slowdown_pNN` (per-flow
    /// FCT over the ideal FCT, percentile NN).
    metric: String,
    measured: f64,
    unit: String,
    source: String,
    /// What kind of reference the figure is: one of [`REFERENCE_KINDS`].
    reference_kind: String,
    /// What the scenario leaves out of the measured setup.
    missing: String,
    /// Run on this fabric instead of the file's.
    fabric: Option<String>,
    /// Allowed |error|; default 0.05.
    tolerance: Option<f64>,
    /// Run once per seed and compare the mean: for a figure one run's random draws move
    /// by more than the tolerance allows for (a tail percentile of a run with ECN marks).
    /// Default: the file's seed alone.
    seeds: Option<Vec<u64>>,
    /// Why the case misses its tolerance, and the simulated figure when that was written.
    known_miss: Option<String>,
    recorded: Option<f64>,
}

/// The kinds of reference a case compares with (SCENARIO.md v3): a measurement on real
/// hardware, a vendor's or operator's rule of thumb, or another simulator's result.
pub const REFERENCE_KINDS: [&str; 3] = ["measurement", "rule-of-thumb", "simulator"];

#[derive(Deserialize)]
struct CaseFile {
    validation: Vec<Entry>,
}

/// One compared figure: SCENARIO.md v2's `{"case", "measured", "simulated", "error",
/// "unit", "source"}` and ours.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct Comparison {
    pub case: String,
    pub measured: f64,
    pub simulated: f64,
    /// (simulated - measured) / measured.
    pub error: f64,
    pub unit: String,
    pub source: String,
    /// One of [`REFERENCE_KINDS`].
    pub reference_kind: String,
    pub file: String,
    pub fabric: &'static str,
    pub missing: String,
    pub tolerance: f64,
    /// |error| within the tolerance.
    pub within: bool,
    pub known_miss: Option<String>,
    /// For a known miss: the simulated figure recorded in the case file.
    pub recorded: Option<f64>,
}

/// The furthest from its measurement a known miss may hold a case (issue 33: a model
/// that misses by more fails, whatever it names as left out).
pub const KNOWN_MISS_BOUND: f64 = 0.10;

/// How far a known miss's figure may move from the one recorded in its case file.
const RECORDED_DRIFT: f64 = 0.01;

impl Comparison {
    /// A case holds if it is within its tolerance, or it is a known miss within
    /// [`KNOWN_MISS_BOUND`] of the measurement whose figure has not moved (see
    /// [`Self::moved`]).
    pub fn holds(&self) -> bool {
        self.within
            || (self.known_miss.is_some() && self.error.abs() <= KNOWN_MISS_BOUND && !self.moved())
    }

    /// A known miss whose figure moved more than 1 % from the one recorded in its case
    /// file: the model changed under it, so its reason needs a look.
    pub fn moved(&self) -> bool {
        match (&self.known_miss, self.recorded) {
            (Some(_), Some(r)) => (self.simulated - r).abs() > RECORDED_DRIFT * r.abs(),
            _ => false,
        }
    }

    /// What the table and the report say of the case.
    pub fn status(&self) -> String {
        match &self.known_miss {
            _ if self.within => "within tolerance".to_string(),
            None => format!("MISS (tolerance {:.0} %)", self.tolerance * 100.0),
            Some(why) if self.error.abs() > KNOWN_MISS_BOUND => format!(
                "MISS: beyond the {:.0} % a known miss may hold (known miss: {why})",
                KNOWN_MISS_BOUND * 100.0
            ),
            Some(why) if self.moved() => format!(
                "MOVED from the recorded {} (known miss: {why})",
                self.recorded.unwrap_or_default()
            ),
            Some(why) => format!("known miss: {why}"),
        }
    }
}

/// The suite's folder: `examples/validation` under the working directory, else in the
/// source tree fabricsim was built from.
pub fn default_suite() -> PathBuf {
    examples_folder("validation")
}

/// `examples/NAME` under the working directory, else in the source tree fabricsim was
/// built from.
pub fn examples_folder(name: &str) -> PathBuf {
    let here = Path::new("examples").join(name);
    if here.is_dir() {
        return here;
    }
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(name)
}

/// The case files of `dir`, in name order.
pub fn case_files(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("suite {}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(format!("suite {}: no case files (*.toml)", dir.display()));
    }
    Ok(files)
}

/// The figure `metric` of a run.
fn metric(metric: &str, summary: &Summary, out: &runner::Outcome) -> Result<f64, String> {
    let collective = || {
        summary
            .collectives
            .first()
            .ok_or_else(|| format!("metric {metric}: the scenario has no collective"))
    };
    match metric {
        "busbw_gbps" => collective()?
            .busbw_gbps
            .ok_or_else(|| "the collective did not finish".into()),
        "algbw_gbps" => collective()?
            .algbw_gbps
            .ok_or_else(|| "the collective did not finish".into()),
        m => {
            let p: f64 = m
                .strip_prefix("slowdown_p")
                .and_then(|p| p.parse().ok())
                .filter(|p| (0.0..=100.0).contains(p))
                .ok_or_else(|| {
                    format!("metric {m}: expected busbw_gbps, algbw_gbps or slowdown_pNN")
                })?;
            slowdown_percentile(&out.report, p)
                .ok_or_else(|| format!("metric {m}: no flow finished"))
        }
    }
}

/// The `p`th percentile of the finished flows' slowdowns (FCT over ideal FCT, not
/// floored); None if none finished.
pub(crate) fn slowdown_percentile(
    report: &fabricsim_fabric::report::RunReport,
    p: f64,
) -> Option<f64> {
    let mut s: Vec<f64> = report
        .flows
        .iter()
        .filter_map(|f| {
            f.finish
                .map(|t| (t - f.start).ps() as f64 / f.ideal.ps() as f64)
        })
        .collect();
    if s.is_empty() {
        return None;
    }
    s.sort_by(f64::total_cmp);
    Some(results::percentile(&s, p))
}

/// Runs one case file: its scenario once per fabric its entries ask for.
pub fn run_case(file: &Path, catalog: &Catalog) -> Result<Vec<Comparison>, String> {
    let at = |e: String| format!("{}: {e}", file.display());
    let text = std::fs::read_to_string(file).map_err(|e| at(e.to_string()))?;
    let entries = toml::from_str::<CaseFile>(&text)
        .map_err(|e| at(format!("[[validation]]: {}", e.to_string().trim_end())))?
        .validation;
    let scenario = Scenario::load_with(file, catalog).map_err(|e| e.to_string())?;
    let mut runs: Vec<(FabricKind, u64, Summary, runner::Outcome)> = Vec::new();
    let mut out = Vec::new();
    for e in entries {
        if !REFERENCE_KINDS.contains(&e.reference_kind.as_str()) {
            return Err(at(format!(
                "validation case \"{}\": reference_kind = \"{}\": expected one of {REFERENCE_KINDS:?}",
                e.case, e.reference_kind
            )));
        }
        let fabric = match e.fabric.as_deref() {
            None => scenario.fabric,
            Some("infiniband") => FabricKind::Infiniband,
            Some("rocev2") => FabricKind::Rocev2,
            Some(f) => {
                return Err(at(format!(
                    "validation fabric = \"{f}\": expected \"infiniband\" or \"rocev2\""
                )))
            }
        };
        let seeds = e.seeds.clone().unwrap_or(vec![scenario.seed]);
        if seeds.is_empty() {
            return Err(at(format!(
                "validation case \"{}\": seeds = []: give at least one seed",
                e.case
            )));
        }
        let mut sum = 0.0;
        for &seed in &seeds {
            if !runs.iter().any(|r| r.0 == fabric && r.1 == seed) {
                let s = Scenario {
                    fabric,
                    seed,
                    ..scenario.clone()
                };
                let outcome = runner::run(&s, None, false).map_err(at)?;
                runs.push((fabric, seed, results::summary(&s, &outcome), outcome));
            }
            let (.., summary, outcome) = (runs.iter())
                .find(|r| r.0 == fabric && r.1 == seed)
                .expect("run above");
            sum += metric(&e.metric, summary, outcome).map_err(at)?;
        }
        let simulated = sum / seeds.len() as f64;
        let error = (simulated - e.measured) / e.measured;
        let tolerance = e.tolerance.unwrap_or(0.05);
        out.push(Comparison {
            case: e.case,
            measured: e.measured,
            simulated,
            error,
            unit: e.unit,
            source: e.source,
            reference_kind: e.reference_kind,
            file: file
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            fabric: fabric.name(),
            missing: e.missing,
            tolerance,
            within: error.abs() <= tolerance,
            known_miss: e.known_miss,
            recorded: e.recorded,
        });
    }
    Ok(out)
}

/// Runs every case of the suite in `dir`.
pub fn run_suite(dir: &Path, catalog: &Catalog) -> Result<Vec<Comparison>, String> {
    let mut all = Vec::new();
    for f in case_files(dir)? {
        all.extend(run_case(&f, catalog)?);
    }
    Ok(all)
}

/// The table `fabricsim validate` prints.
pub fn table(results: &[Comparison]) -> String {
    let mut s = format!(
        "{:<44}{:>12}{:>12}{:>9}  {:<7}{:<15}{}\n",
        "case", "reference", "simulated", "error", "unit", "kind", "status"
    );
    for r in results {
        let status = r.status();
        let _ = writeln!(
            s,
            "{:<44}{:>12.3}{:>12.3}{:>8.1}%  {:<7}{:<15}{status}",
            r.case,
            r.measured,
            r.simulated,
            r.error * 100.0,
            r.unit,
            r.reference_kind
        );
    }
    s.push_str("\nsources and what each scenario leaves out:\n");
    for r in results {
        let _ = writeln!(
            s,
            "- {}: {} ({}; {}) Not reproduced: {}",
            r.case, r.source, r.file, r.fabric, r.missing
        );
    }
    s
}

/// `--report DIR`: validation.html (the table, and simulated against measured with the
/// identity line) and validation.json.
pub fn write_report(dir: &Path, results: &[Comparison]) -> std::io::Result<()> {
    let points: Vec<(String, f64, f64)> = results
        .iter()
        .map(|r| (r.case.clone(), r.measured, r.simulated))
        .collect();
    let svg = crate::report::identity_plot("Simulated against measured", &points);
    let mut h = String::from("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>fabricsim validation</title>\
<style>body{font-family:'DejaVu Sans',sans-serif;margin:24px auto;max-width:1100px}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 6px;font-size:13px;text-align:left}</style></head><body>\n<h1>fabricsim against published measurements</h1>\n<table><tr><th>case</th><th>measured</th><th>simulated</th><th>error</th><th>unit</th><th>kind of reference</th><th>status</th><th>source</th><th>not reproduced</th></tr>");
    let esc = crate::report::esc;
    for r in results {
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{:.3}</td><td>{:.3}</td><td>{:+.1} %</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&r.case),
            r.measured,
            r.simulated,
            r.error * 100.0,
            esc(&r.unit),
            esc(&r.reference_kind),
            esc(&r.status()),
            esc(&r.source),
            esc(&r.missing)
        );
    }
    let _ = write!(
        h,
        "</table>\n<figure class=\"plot\" id=\"plot-identity\">{svg}</figure>\n</body></html>\n"
    );
    let json = serde_json::to_string_pretty(results).expect("serialises") + "\n";
    crate::output::write_folder(
        dir,
        &[
            ("validation.html", h.into_bytes()),
            ("validation.json", json.into_bytes()),
        ],
        &["validation.html", "validation.json"],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(measured: f64, simulated: f64, known_miss: bool, recorded: Option<f64>) -> Comparison {
        let error = (simulated - measured) / measured;
        Comparison {
            case: "c".into(),
            measured,
            simulated,
            error,
            unit: "GB/s".into(),
            source: "s".into(),
            reference_kind: "measurement".into(),
            file: "f".into(),
            fabric: "infiniband",
            missing: String::new(),
            tolerance: 0.05,
            within: error.abs() <= 0.05,
            known_miss: known_miss.then(|| "why".to_string()),
            recorded,
        }
    }

    #[test]
    fn a_known_miss_holds_only_within_ten_percent_of_the_measurement_and_its_record() {
        assert!(case(100.0, 103.0, false, None).holds());
        assert!(!case(100.0, 106.0, false, None).holds());
        assert!(case(100.0, 109.0, true, Some(109.0)).holds());
        // Within 1 % of its record, but 12 % from the measurement.
        let far = case(100.0, 112.0, true, Some(112.0));
        assert!(!far.holds() && !far.moved());
        assert!(
            far.status().starts_with("MISS: beyond the 10 %"),
            "{}",
            far.status()
        );
        // Within 10 % of the measurement, but moved 2 % from its record.
        let moved = case(100.0, 108.0, true, Some(105.9));
        assert!(!moved.holds() && moved.moved());
        assert!(moved.status().starts_with("MOVED"), "{}", moved.status());
    }
}
