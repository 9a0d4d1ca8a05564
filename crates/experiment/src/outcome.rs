//! What a finished run hands back: its report, wall time, capture and rates, and the
//! collectives, training jobs and data paths it ran (for the summary and the files).

use fabricsim_fabric::infiniband::Captured;
use fabricsim_fabric::report::RunReport;
use fabricsim_fabric::rocev2::{CapturedFrame, RateSample};
use fabricsim_fabric::workload::datapath::PathedMessage;
use fabricsim_fabric::workload::{Collective, Training};
use std::ops::Range;

/// A finished run with its wall time and, if asked for, its captured packets.
pub struct Outcome {
    pub report: RunReport,
    pub wall_seconds: f64,
    pub captured: Capture,
    /// RoCEv2: every flow's DCQCN rate cuts and periodic rate samples.
    pub rates: Vec<RateSample>,
    /// The collectives run, each with the range of its messages (flows).
    pub collectives: Vec<(Collective, Range<u32>)>,
    /// The training jobs run, each with its iterations' ranges of messages.
    pub trainings: Vec<(Training, Vec<Range<u32>>)>,
    /// Each traffic entry's messages (flows), in entry order.
    pub entries: Vec<Range<u32>>,
    /// Messages sent along host data paths, with their stages.
    pub data_paths: Vec<PathedMessage>,
    /// Whether the run was simulated at flow level.
    pub flow_level: bool,
    /// Why `level = "auto"` chose the level it did.
    pub level_reason: Option<String>,
    /// At flow level, where the result leaves the range calibrated against packet level.
    pub flow_notes: Vec<String>,
    /// The threads the run was split over (1: it ran on one).
    pub threads: usize,
    /// The windows of a split run (0 on one thread).
    pub windows: u64,
}

/// Captured packets, as each fabric records them.
#[derive(Clone, Debug)]
pub enum Capture {
    /// Native IB packets leaving their source HCA.
    Infiniband(Vec<Captured>),
    /// Ethernet frames: RoCEv2 packets leaving their source NIC, PFC frames from any port.
    Ethernet(Vec<CapturedFrame>),
}

impl Capture {
    pub fn len(&self) -> usize {
        match self {
            Capture::Infiniband(c) => c.len(),
            Capture::Ethernet(c) => c.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Outcome {
    /// Every finished flow's completion time in microseconds, sorted.
    pub fn sorted_fcts_us(&self) -> Vec<f64> {
        let mut v: Vec<f64> = self
            .report
            .flows
            .iter()
            .filter_map(|f| f.finish.map(|t| (t - f.start).ps() as f64 / 1e6))
            .collect();
        v.sort_by(f64::total_cmp);
        v
    }
}
