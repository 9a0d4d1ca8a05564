//! The inputs a decision rests on, with their ranges, and the runs a range needs: a
//! latency taken from the catalog changes the run, so `compare` runs each fabric it
//! changes with it at its low and high end (the verdict in `decision::uncertainty`
//! samples them; `estimate` counts these runs).

use super::{set_nic_latency, FabricKind, Scenario};
use crate::catalog::{Confidence, Range};
use fabricsim_core::units::Time;
use serde::Serialize;

/// What an input changes.
#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    /// A catalog entry's unit price, in every bill line made of it.
    Price(String),
    /// The GPU's price.
    GpuPrice,
    LifetimeYears,
    ElectricityUsdPerKwh,
    Pue,
    SupportSharePerYear,
    /// A fabric's staff to run and tune it, a year.
    StaffPerYear(FabricKind),
    /// A fabric's licences and software support, a year.
    LicencesPerYear(FabricKind),
    /// The switch latency of one fabric's design (a run parameter).
    SwitchLatency(FabricKind),
    /// Both fabrics' NIC latency on each side (a run parameter).
    NicLatency,
}

impl Effect {
    /// Whether the input changes a run (and so needs runs at its ends).
    pub fn changes_run(&self) -> bool {
        matches!(self, Effect::SwitchLatency(_) | Effect::NicLatency)
    }

    /// Whether it changes the run on `fabric`.
    pub fn runs_on(&self, fabric: FabricKind) -> bool {
        match self {
            Effect::SwitchLatency(f) => *f == fabric,
            Effect::NicLatency => true,
            _ => false,
        }
    }
}

/// One uncertain input.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Input {
    pub name: String,
    /// "USD", "ns", "years", "USD/kWh" or "" (a plain ratio).
    pub unit: &'static str,
    #[serde(flatten)]
    pub range: Range,
    pub confidence: Confidence,
    #[serde(skip)]
    pub effect: Effect,
}

/// The run parameters of `s` with ranges: the latencies a `[cluster]` design took from
/// its catalog entries.
pub fn run_inputs(s: &Scenario) -> Vec<Input> {
    let mut v = Vec::new();
    let from = &s.catalog_latency;
    for fabric in [FabricKind::Infiniband, FabricKind::Rocev2] {
        if let Some(name) = &from.switch[fabric as usize] {
            let i = s.catalog.get(name).expect("named from the catalog");
            v.push(latency_input(
                format!("{} switch latency ({})", i.name, fabric.label()),
                i.latency_range,
                i.confidence,
                Effect::SwitchLatency(fabric),
            ));
        }
    }
    if let Some(name) = &from.nic {
        let i = s.catalog.get(name).expect("named from the catalog");
        v.push(latency_input(
            format!("{} latency, each side", i.name),
            i.latency_range,
            i.confidence,
            Effect::NicLatency,
        ));
    }
    v.retain(|i| !i.range.is_point());
    v
}

/// A latency input in nanoseconds from a catalog range in picoseconds.
fn latency_input(name: String, r: Option<Range>, c: Confidence, effect: Effect) -> Input {
    let r = r.expect("a latency from the catalog has its range");
    Input {
        name,
        unit: "ns",
        range: Range {
            low: r.low / 1e3,
            base: r.base / 1e3,
            high: r.high / 1e3,
        },
        confidence: c,
        effect,
    }
}

/// `s` with the run input `effect` at `value`.
pub fn with_value(s: &Scenario, effect: &Effect, value: f64) -> Scenario {
    let mut s = s.clone();
    let t = Time((value * 1e3).round() as u64);
    match effect {
        Effect::SwitchLatency(FabricKind::Infiniband) => s.ib.switch_latency = t,
        Effect::SwitchLatency(FabricKind::Rocev2) => s.roce.switch_latency = t,
        Effect::NicLatency => set_nic_latency(&mut s.ib, &mut s.roce, t),
        _ => unreachable!("only run inputs change a scenario"),
    }
    s
}

/// One run the response surface needs: candidate `candidate` (0 InfiniBand, 1 RoCEv2,
/// 2 Ethernet with adaptive routing) with run input `input` at its low (`high ==
/// false`) or high end.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EndRun {
    pub input: usize,
    pub candidate: usize,
    pub high: bool,
}

impl EndRun {
    /// `candidates[self.candidate]` with the input at this end.
    pub fn scenario(&self, candidates: &[&Scenario], inputs: &[Input]) -> Scenario {
        let i = &inputs[self.input];
        let v = if self.high { i.range.high } else { i.range.low };
        with_value(candidates[self.candidate], &i.effect, v)
    }
}

/// The runs at the ends of each run input, for each candidate it changes: InfiniBand,
/// RoCEv2 and, with `adaptive`, Ethernet with adaptive routing (on RoCEv2's switches;
/// the NIC latency input moves every candidate's NICs).
pub fn end_runs(inputs: &[Input], adaptive: bool) -> Vec<EndRun> {
    let mut fabrics = vec![FabricKind::Infiniband, FabricKind::Rocev2];
    if adaptive {
        fabrics.push(FabricKind::Rocev2);
    }
    let mut v = Vec::new();
    for (i, input) in inputs.iter().enumerate() {
        for (candidate, fabric) in fabrics.iter().enumerate() {
            if !input.effect.runs_on(*fabric) {
                continue;
            }
            for (high, end) in [(false, input.range.low), (true, input.range.high)] {
                if end != input.range.base {
                    v.push(EndRun {
                        input: i,
                        candidate,
                        high,
                    });
                }
            }
        }
    }
    v
}
