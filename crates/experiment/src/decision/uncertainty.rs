//! The verdict under uncertainty. Every input the answer rests on carries a range
//! (catalog prices, the money model's settings, the catalog latencies of a `[cluster]`
//! design); the verdict samples the ranges and says in how much of them each fabric is
//! cheaper per job, and which inputs decide it.
//!
//! Prices and money settings enter the job's cost in closed form. A latency changes the
//! run, so each one's low and high end is simulated (others at base) and the job time
//! is interpolated linearly between low, base and high, the effects of several latencies
//! added: the response surface a sample is read from. `tests/decision.rs` holds it to a
//! brute-force sweep of real runs.

use super::{gpu_per_hour, network_money, MoneySettings, NetworkCost};
use crate::catalog::{Confidence, Range};
pub use crate::scenario::ranges::{end_runs, run_inputs, Effect, EndRun, Input};
use crate::scenario::{
    FabricKind, Scenario, SettingRange, INFINIBAND, ROCEV2, ROCEV2_ADAPTIVE, ROCEV2_TUNED,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::collections::BTreeMap;

/// The inputs of `s` that enter the job's cost in closed form, where their ranges are not
/// points: each catalog entry priced in either bill, the GPU, the money settings.
pub fn money_inputs(s: &Scenario, costs: &[&NetworkCost]) -> Vec<Input> {
    let mut v = Vec::new();
    let mut priced: Vec<&str> = Vec::new();
    for line in costs.iter().flat_map(|c| &c.bom) {
        if !priced.contains(&line.catalog.as_str()) {
            priced.push(&line.catalog);
        }
    }
    let gpu = s.catalog.get(&s.hardware.gpu).expect("checked at load");
    let server_nic = s.hardware.server_nic.as_str();
    if gpu.includes_nic && s.cost.gpu_usd.is_none() && !priced.contains(&server_nic) {
        priced.push(server_nic);
    }
    for name in priced {
        let i = s.catalog.get(name).expect("billed from the catalog");
        v.push(Input {
            name: format!("{} price", i.name),
            unit: "USD",
            range: i.price_range,
            confidence: i.confidence,
            effect: Effect::Price(i.name.clone()),
        });
    }
    let (range, confidence) = match &s.cost.ranges.gpu_usd {
        Some(r) => (r.range, r.confidence),
        None => (gpu.price_range, gpu.confidence),
    };
    v.push(Input {
        name: format!("{} price", gpu.name),
        unit: "USD",
        range,
        confidence,
        effect: Effect::GpuPrice,
    });
    let r = &s.cost.ranges;
    let setting = |name: &str, unit: &'static str, x: &SettingRange, effect| Input {
        name: name.into(),
        unit,
        range: x.range,
        confidence: x.confidence,
        effect,
    };
    v.push(setting(
        "lifetime",
        "years",
        &r.lifetime_years,
        Effect::LifetimeYears,
    ));
    v.push(setting(
        "electricity",
        "USD/kWh",
        &r.electricity_usd_per_kwh,
        Effect::ElectricityUsdPerKwh,
    ));
    v.push(setting("PUE", "", &r.pue, Effect::Pue));
    v.push(setting(
        "support per year",
        "",
        &r.support_share_per_year,
        Effect::SupportSharePerYear,
    ));
    let o = &s.cost.operations;
    for fabric in [FabricKind::Infiniband, FabricKind::Rocev2] {
        let f = fabric as usize;
        v.push(setting(
            &format!("staff per year ({})", fabric.label()),
            "USD",
            &o.staff_usd_per_year[f],
            Effect::StaffPerYear(fabric),
        ));
        v.push(setting(
            &format!("licences per year ({})", fabric.label()),
            "USD",
            &o.licences_usd_per_year[f],
            Effect::LicencesPerYear(fabric),
        ));
    }
    v.retain(|i| !i.range.is_point());
    v
}

/// The money-model basis of one candidate at the base values.
#[derive(Clone)]
struct Basis {
    name: &'static str,
    /// The fabric whose staff and licences it needs.
    fabric: usize,
    /// The candidate whose end runs move its job time with the latencies (the tuned
    /// candidate has none of its own: RoCEv2's).
    ends_of: usize,
    hours: f64,
    /// Catalog entry, count, base unit price.
    lines: Vec<(String, f64, f64)>,
    it_kw: f64,
    /// Staff and licences a year.
    staff: f64,
    licences: f64,
}

/// The job cost of every candidate at any point of the ranges.
pub struct Surface {
    inputs: Vec<Input>,
    /// InfiniBand, RoCEv2, then the other candidates (on Ethernet).
    basis: Vec<Basis>,
    /// Per input and candidate with end runs: the job time's change in hours at the low
    /// and high end.
    deltas: Vec<Vec<(f64, f64)>>,
    gpus: f64,
    gpu_watts: f64,
    /// The GPU's price as the catalog or `[cost]` gives it.
    gpu_usd: f64,
    /// When that price includes the NIC: the NIC's entry and base price, taken off it.
    nic_in_gpu: Option<(String, f64)>,
    base_money: MoneySettings,
}

impl Basis {
    /// Candidate `name` on `fabric`'s operations, its job and bill as `cost` gives them.
    fn of(
        name: &'static str,
        fabric: FabricKind,
        ends_of: usize,
        cost: &NetworkCost,
        s: &Scenario,
    ) -> Option<Basis> {
        let ops = &s.cost.operations;
        let f = fabric as usize;
        Some(Basis {
            name,
            fabric: f,
            ends_of,
            staff: ops.staff_usd_per_year[f].range.base,
            licences: ops.licences_usd_per_year[f].range.base,
            hours: cost.job_hours?,
            lines: cost
                .bom
                .iter()
                .map(|l| (l.catalog.clone(), l.count as f64, l.unit_usd))
                .collect(),
            it_kw: cost.it_power_kw,
        })
    }
}

impl Surface {
    /// The surface from both fabrics' base costs (and the adaptive Ethernet candidate's),
    /// the run inputs and the job hours of the end runs (`None` where a run did not
    /// finish: that end is then held at the base, and the caller says so); `None` if a
    /// candidate's job did not finish.
    pub fn new(
        s: &Scenario,
        costs: [&NetworkCost; 2],
        adaptive: Option<&NetworkCost>,
        run_inputs: Vec<Input>,
        ends: &[(EndRun, Option<f64>)],
    ) -> Option<Surface> {
        let all: Vec<&NetworkCost> = costs.into_iter().chain(adaptive).collect();
        let mut inputs = money_inputs(s, &all);
        let offset = inputs.len();
        inputs.extend(run_inputs);
        let mut basis = vec![
            Basis::of(INFINIBAND, FabricKind::Infiniband, 0, costs[0], s)?,
            Basis::of(ROCEV2, FabricKind::Rocev2, 1, costs[1], s)?,
        ];
        if let Some(a) = adaptive {
            basis.push(Basis::of(ROCEV2_ADAPTIVE, FabricKind::Rocev2, 2, a, s)?);
        }
        let mut deltas = vec![vec![(0.0, 0.0); basis.len()]; inputs.len()];
        for (end, h) in ends {
            let d = h.map_or(0.0, |h| h - basis[end.candidate].hours);
            let slot = &mut deltas[offset + end.input][end.candidate];
            if end.high {
                slot.1 = d;
            } else {
                slot.0 = d;
            }
        }
        let gpu = super::gpu(s);
        Some(Surface {
            inputs,
            basis,
            deltas,
            gpus: costs[0].gpus as f64,
            gpu_watts: gpu.watts,
            gpu_usd: gpu.listed_usd,
            nic_in_gpu: gpu.nic_included.map(|(n, p)| (n.to_string(), p)),
            base_money: MoneySettings::of(&s.cost),
        })
    }

    pub fn inputs(&self) -> &[Input] {
        &self.inputs
    }

    /// Adds RoCEv2 tuned as a candidate on RoCEv2's network, its job taking `hours` at
    /// the base values and moving with RoCEv2's latency effects.
    pub fn with_tuned(mut self, hours: f64) -> Surface {
        let mut b = self.basis[1].clone();
        b.name = ROCEV2_TUNED;
        b.hours = hours;
        self.basis.push(b);
        self
    }

    /// The candidates' names, in the order `candidate_costs` gives their costs.
    fn names(&self) -> Vec<&'static str> {
        self.basis.iter().map(|b| b.name).collect()
    }

    /// Every input at its base value.
    pub fn base_point(&self) -> Vec<f64> {
        self.inputs.iter().map(|i| i.range.base).collect()
    }

    /// Both fabrics' job cost (USD) with input i at `x[i]`.
    pub fn job_costs(&self, x: &[f64]) -> [f64; 2] {
        let costs = self.candidate_costs(x);
        [costs[0], costs[1]]
    }

    /// Every candidate's job cost at `x`, in the order of `names`.
    fn candidate_costs(&self, x: &[f64]) -> Vec<f64> {
        let mut m = self.base_money;
        let mut gpu_usd = None;
        let mut prices: BTreeMap<&str, f64> = BTreeMap::new();
        let mut dt = vec![0.0; self.deltas.first().map_or(0, Vec::len)];
        let mut staff = [0, 1].map(|f| self.basis[f].staff);
        let mut licences = [0, 1].map(|f| self.basis[f].licences);
        for (k, (input, &v)) in self.inputs.iter().zip(x).enumerate() {
            match &input.effect {
                Effect::Price(name) => {
                    prices.insert(name, v);
                }
                Effect::GpuPrice => gpu_usd = Some(v),
                Effect::LifetimeYears => m.lifetime_years = v,
                Effect::ElectricityUsdPerKwh => m.electricity_usd_per_kwh = v,
                Effect::Pue => m.pue = v,
                Effect::SupportSharePerYear => m.support_share_per_year = v,
                Effect::StaffPerYear(f) => staff[*f as usize] = v,
                Effect::LicencesPerYear(f) => licences[*f as usize] = v,
                Effect::SwitchLatency(_) | Effect::NicLatency => {
                    for (f, d) in dt.iter_mut().enumerate() {
                        *d += interpolate(&input.range, self.deltas[k][f], v);
                    }
                }
            }
        }
        let gpu_usd = gpu_usd.unwrap_or(self.gpu_usd);
        let gpu_usd = match &self.nic_in_gpu {
            Some((nic, base)) => gpu_usd - prices.get(nic.as_str()).unwrap_or(base),
            None => gpu_usd,
        };
        let g = gpu_per_hour(gpu_usd, self.gpu_watts, &m);
        // Each candidate's job: its hours (moved by its fabric's latency effects) times
        // the cost of an hour of the GPUs and its network.
        self.basis
            .iter()
            .map(|b| {
                let capex: f64 = b
                    .lines
                    .iter()
                    .map(|(name, n, unit)| n * prices.get(name.as_str()).copied().unwrap_or(*unit))
                    .sum();
                let f = b.fabric;
                let net = network_money(capex, b.it_kw, staff[f] + licences[f], &m);
                let moved = dt.get(b.ends_of).copied().unwrap_or(0.0);
                (b.hours + moved) * (self.gpus * g + net.usd_per_hour)
            })
            .collect()
    }

    /// RoCEv2's job cost over InfiniBand's at `x` (below 1: RoCEv2 is cheaper).
    pub fn ratio(&self, x: &[f64]) -> f64 {
        let [ib, roce] = self.job_costs(x);
        roce / ib
    }
}

/// The change at `v` on the line through (low, d_low), (base, 0), (high, d_high),
/// extended beyond the ends by their segments' slopes.
fn interpolate(r: &Range, (d_low, d_high): (f64, f64), v: f64) -> f64 {
    let slope = |x0: f64, y0: f64, x1: f64, y1: f64| {
        if x1 == x0 {
            0.0
        } else {
            (y1 - y0) / (x1 - x0)
        }
    };
    let lower = slope(r.low, d_low, r.base, 0.0);
    let upper = slope(r.base, 0.0, r.high, d_high);
    let s = match (v < r.base, r.low < r.base, r.high > r.base) {
        (true, true, _) | (false, true, false) => lower,
        (false, _, true) | (true, false, true) => upper,
        _ => 0.0,
    };
    s * (v - r.base)
}

/// One input's swing: the answer at its ends with the others at base, and where the
/// two fabrics cost the same (SCENARIO.md v3 `drivers`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Driver {
    pub input: String,
    pub unit: &'static str,
    pub base: f64,
    pub low: f64,
    pub high: f64,
    pub confidence: Confidence,
    /// The value at which both fabrics' jobs cost the same (others at base), within the
    /// values the input can take; null if none.
    pub breakeven: Option<f64>,
    /// RoCEv2's job cost over InfiniBand's with the input at its low and high end.
    pub ratio_at_low: f64,
    pub ratio_at_high: f64,
}

/// Percentiles of RoCEv2's job cost over InfiniBand's across the samples.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RatioSpread {
    pub p10: f64,
    pub p50: f64,
    pub p90: f64,
}

/// The verdict across the ranges.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Verdict {
    /// A fabric's name, or "too-close".
    pub verdict: &'static str,
    /// Per fabric: the share of the samples in which its job is cheapest.
    pub share: BTreeMap<&'static str, f64>,
    pub samples: u32,
    pub threshold: f64,
    /// Null when nothing was sampled (a job did not finish).
    pub cost_ratio: Option<RatioSpread>,
    /// The inputs that move the answer most, first.
    pub drivers: Vec<Driver>,
}

impl Verdict {
    /// The verdict when no range can change it: only `fabric` finished its job.
    pub fn certain(fabric: &'static str, threshold: f64) -> Verdict {
        Verdict {
            verdict: fabric,
            share: [INFINIBAND, ROCEV2, fabric]
                .map(|f| (f, if f == fabric { 1.0 } else { 0.0 }))
                .into(),
            samples: 0,
            threshold,
            cost_ratio: None,
            drivers: Vec::new(),
        }
    }
}

/// Samples the surface uniformly over every input's range (seeded by the scenario) and
/// states the verdict.
pub fn verdict(surface: &Surface, samples: u32, threshold: f64, seed: u64) -> Verdict {
    let inputs = surface.inputs();
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x0076_6572_6469_6374); // "verdict": its own stream
    let mut x = surface.base_point();
    let mut ratios = Vec::with_capacity(samples as usize);
    let names = surface.names();
    let mut wins = vec![0.0; names.len()];
    for _ in 0..samples {
        for (v, i) in x.iter_mut().zip(inputs) {
            *v = i.range.low + rng.gen::<f64>() * (i.range.high - i.range.low);
        }
        let costs = surface.candidate_costs(&x);
        ratios.push(costs[1] / costs[0]);
        // The cheapest candidate wins the sample; a tie is shared.
        let least = costs.iter().copied().fold(f64::INFINITY, f64::min);
        let tied = costs.iter().filter(|&&c| c == least).count() as f64;
        for (w, c) in wins.iter_mut().zip(&costs) {
            if *c == least {
                *w += 1.0 / tied;
            }
        }
    }
    ratios.sort_by(f64::total_cmp);
    let at = |q: f64| ratios[((ratios.len() - 1) as f64 * q).round() as usize];
    let share: BTreeMap<&'static str, f64> = names
        .iter()
        .zip(&wins)
        .map(|(n, w)| (*n, w / samples as f64))
        .collect();
    let verdict = names
        .iter()
        .copied()
        .find(|n| share[n] >= threshold)
        .unwrap_or("too-close");
    Verdict {
        verdict,
        share,
        samples,
        threshold,
        cost_ratio: Some(RatioSpread {
            p10: at(0.1),
            p50: at(0.5),
            p90: at(0.9),
        }),
        drivers: drivers(surface),
    }
}

/// Each input's swing with the others at base, the widest first.
fn drivers(surface: &Surface) -> Vec<Driver> {
    let base = surface.base_point();
    let mut v: Vec<Driver> = surface
        .inputs()
        .iter()
        .enumerate()
        .map(|(k, i)| {
            let at = |value: f64| {
                let mut x = base.clone();
                x[k] = value;
                surface.ratio(&x)
            };
            Driver {
                input: i.name.clone(),
                unit: i.unit,
                base: i.range.base,
                low: i.range.low,
                high: i.range.high,
                confidence: i.confidence,
                breakeven: breakeven(i, at),
                ratio_at_low: at(i.range.low),
                ratio_at_high: at(i.range.high),
            }
        })
        .collect();
    // Widest swing first; ties keep the inputs' order (a stable sort).
    v.sort_by(|a, b| {
        let swing = |d: &Driver| (d.ratio_at_high - d.ratio_at_low).abs();
        swing(b).total_cmp(&swing(a))
    });
    v
}

/// Where a break-even of `effect` is looked for: the values it can physically take.
fn domain(effect: &Effect, r: &Range) -> (f64, f64) {
    match effect {
        Effect::LifetimeYears => (0.5, 20.0),
        Effect::ElectricityUsdPerKwh => (0.0, 1.0),
        Effect::Pue => (1.0, 3.0),
        Effect::SupportSharePerYear => (0.0, 1.0),
        _ => (0.0, 10.0 * r.high.max(r.base)),
    }
}

/// Where `ratio(value)` crosses 1 nearest the base, within the input's domain.
fn breakeven(i: &Input, ratio: impl Fn(f64) -> f64) -> Option<f64> {
    let (lo, hi) = domain(&i.effect, &i.range);
    const STEPS: usize = 400;
    let xs: Vec<f64> = (0..=STEPS)
        .map(|k| lo + (hi - lo) * k as f64 / STEPS as f64)
        .collect();
    let f = |x: f64| ratio(x) - 1.0;
    let mut best: Option<f64> = None;
    for w in xs.windows(2) {
        let (mut a, mut b) = (w[0], w[1]);
        let (fa, fb) = (f(a), f(b));
        if fa == 0.0 || fa.signum() == fb.signum() {
            continue;
        }
        for _ in 0..60 {
            let m = 0.5 * (a + b);
            if f(m).signum() == fa.signum() {
                a = m;
            } else {
                b = m;
            }
        }
        let root = 0.5 * (a + b);
        if best.is_none_or(|x| (x - i.range.base).abs() > (root - i.range.base).abs()) {
            best = Some(root);
        }
    }
    best
}
