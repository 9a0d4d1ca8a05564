//! Flow level's error against packet level as last recorded by `fabricsim calibrate`
//! (examples/calibration/record.json, built in): what a run at flow level is told it errs
//! by.

use serde::{Deserialize, Serialize};

/// One figure of one case on one fabric at both levels.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Calibration {
    pub case: String,
    /// "infiniband" or "rocev2".
    pub fabric: String,
    /// "collective_ns", "iteration_ns", "fct_p50_ns" or "completion_ns".
    pub metric: String,
    pub packet: f64,
    pub flow: f64,
    /// flow / packet - 1.
    pub error: f64,
    /// The largest |error| the target allows.
    pub target: f64,
    /// Seeds the figures are means over (an open-loop case's, see `calibrate`), and
    /// packet level's lowest and highest figure over them.
    #[serde(default = "one_seed")]
    pub seeds: u32,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub packet_spread: Option<(f64, f64)>,
    /// The error's standard error over the seeds (see `calibrate`), on more than one.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub error_standard_error: Option<f64>,
    /// Wall times: measured, so left out of the record.
    #[serde(skip_serializing_if = "is_unmeasured", default)]
    pub packet_wall_seconds: f64,
    #[serde(skip_serializing_if = "is_unmeasured", default)]
    pub flow_wall_seconds: f64,
}

fn one_seed() -> u32 {
    1
}

fn is_unmeasured(x: &f64) -> bool {
    *x == 0.0
}

impl Calibration {
    pub fn within(&self) -> bool {
        self.error.abs() <= self.target
    }
}

/// The record of the suite's last run, as committed (examples/calibration/record.json).
const RECORD: &str = include_str!("../../../examples/calibration/record.json");

/// The recorded rows of the built-in suite.
pub fn record() -> Vec<Calibration> {
    serde_json::from_str(RECORD).expect("examples/calibration/record.json is a list of rows")
}

/// The smallest and largest error recorded for `fabric`'s figures whose case matches
/// `shared`, over the record: what a run is told flow level errs by.
pub fn recorded_range(fabric: &str, shared: impl Fn(&Calibration) -> bool) -> Option<(f64, f64)> {
    record()
        .iter()
        .filter(|r| r.fabric == fabric && shared(r))
        .fold(None, |acc, r| match acc {
            None => Some((r.error, r.error)),
            Some((lo, hi)) => Some((f64::min(lo, r.error), f64::max(hi, r.error))),
        })
}
