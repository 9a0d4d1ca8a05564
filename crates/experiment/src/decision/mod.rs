//! The decision: each fabric's network priced from its bill of materials, the cost of
//! the job it runs (GPU hours plus network hours), and the recommendation with its
//! reasons in numbers and the points where it would flip.
//!
//! The money model, per fabric f: GPUs cost g = price / lifetime hours + watts x PUE x
//! energy price per hour each; the network costs n_f = its lifetime cost / lifetime hours
//! per hour (capital, energy with PUE, support); the job of T_f hours costs
//! C_f = T_f x (GPUs x g + n_f). The fabric with the lower C_f is recommended.

pub mod bom;
pub mod findings;
pub mod uncertainty;

use crate::results::Summary;
use crate::scenario::{CostSettings, FabricKind, Scenario, ROCEV2_ADAPTIVE};
use bom::{BomLine, Counts};
use fabricsim_core::topology::Topology;
use findings::{Finding, Flip, Tail};
use serde::Serialize;
use uncertainty::{Surface, Verdict};

const HOURS_PER_YEAR: f64 = 8760.0;

/// A design's shape, as SCENARIO.md v2 asks: tiers, switches, links (host links included).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Design {
    pub tiers: usize,
    pub switches: u32,
    pub links: u32,
    pub switches_per_tier: Vec<u32>,
    pub links_per_tier: Vec<u32>,
    pub counts: Counts,
}

/// What one fabric's network costs, and its job.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NetworkCost {
    pub capex_usd: f64,
    /// Facility power: the network's equipment power x PUE.
    pub power_kw: f64,
    pub it_power_kw: f64,
    pub opex_usd_per_year: f64,
    pub lifetime_usd: f64,
    /// The network's lifetime cost per hour of its life.
    pub network_usd_per_hour: f64,
    /// One GPU's cost per hour (price over the lifetime plus its power).
    pub gpu_usd_per_hour: f64,
    pub gpus: u32,
    /// The job's length on this fabric, or null if it did not finish.
    pub job_hours: Option<f64>,
    pub job_cost_usd: Option<f64>,
    pub bom: Vec<BomLine>,
}

/// A GPU's price and power as the scenario gives them.
pub(crate) struct GpuCost<'a> {
    /// `[cost] gpu_usd`, else the catalog GPU's price.
    pub listed_usd: f64,
    pub watts: f64,
    /// The NIC entry and its price when the listed price includes the NIC (the
    /// catalog's `includes_nic`): the network's bill counts the NIC, so the GPU does not.
    pub nic_included: Option<(&'a str, f64)>,
}

impl GpuCost<'_> {
    /// The GPU's own price, its NIC taken off if the listed price includes it.
    pub fn usd(&self) -> f64 {
        self.listed_usd - self.nic_included.map_or(0.0, |n| n.1)
    }
}

/// The GPU price and power the scenario uses: `[cost]` overrides (a GPU alone), else the
/// catalog's GPU.
pub(crate) fn gpu(s: &Scenario) -> GpuCost<'_> {
    let g = s.catalog.get(&s.hardware.gpu).expect("checked at load");
    let nic = s
        .catalog
        .get(&s.hardware.server_nic)
        .expect("checked at load");
    GpuCost {
        listed_usd: s.cost.gpu_usd.unwrap_or(g.price_usd),
        watts: s.cost.gpu_watts.unwrap_or(g.watts),
        nic_included: (g.includes_nic && s.cost.gpu_usd.is_none())
            .then_some((nic.name.as_str(), nic.price_usd)),
    }
}

/// The money model's settings the verdict samples.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct MoneySettings {
    pub lifetime_years: f64,
    pub electricity_usd_per_kwh: f64,
    pub pue: f64,
    pub support_share_per_year: f64,
}

impl MoneySettings {
    pub fn of(c: &CostSettings) -> MoneySettings {
        MoneySettings {
            lifetime_years: c.lifetime_years,
            electricity_usd_per_kwh: c.electricity_usd_per_kwh,
            pue: c.pue,
            support_share_per_year: c.support_share_per_year,
        }
    }
}

/// One GPU's cost per hour under `m`.
fn gpu_per_hour(price: f64, watts: f64, m: &MoneySettings) -> f64 {
    price / (m.lifetime_years * HOURS_PER_YEAR) + watts / 1000.0 * m.pue * m.electricity_usd_per_kwh
}

/// A network's running figures from its capital cost and equipment power.
pub(crate) struct NetworkMoney {
    pub power_kw: f64,
    pub opex_usd_per_year: f64,
    pub lifetime_usd: f64,
    pub usd_per_hour: f64,
}

/// Power with PUE; energy, support and the operating lines (staff, licences:
/// `operating_usd_per_year`) per year; the lifetime cost and its hourly share.
fn network_money(
    capex: f64,
    it_kw: f64,
    operating_usd_per_year: f64,
    m: &MoneySettings,
) -> NetworkMoney {
    let power_kw = it_kw * m.pue;
    let opex = power_kw * HOURS_PER_YEAR * m.electricity_usd_per_kwh
        + m.support_share_per_year * capex
        + operating_usd_per_year;
    let lifetime = capex + opex * m.lifetime_years;
    NetworkMoney {
        power_kw,
        opex_usd_per_year: opex,
        lifetime_usd: lifetime,
        usd_per_hour: lifetime / (m.lifetime_years * HOURS_PER_YEAR),
    }
}

/// The job's length in hours on one fabric: the longest training job's projected time,
/// else the simulated time of the traffic x `runs_per_job`; `None` if unfinished.
pub fn job_hours(s: &Summary, c: &CostSettings) -> Option<f64> {
    if !s.training.is_empty() {
        let jobs: Option<Vec<f64>> = s.training.iter().map(|t| t.projected_job_seconds).collect();
        return jobs.map(|j| j.into_iter().fold(0.0, f64::max) / 3600.0);
    }
    (s.flows.completed == s.flows.count)
        .then(|| s.sim_time_ns as f64 * 1e-9 * c.runs_per_job / 3600.0)
}

/// The design and cost of `topo` on `fabric`, with the job `summary` measured.
pub fn price(
    s: &Scenario,
    fabric: FabricKind,
    topo: &Topology,
    summary: &Summary,
) -> (Design, NetworkCost) {
    let (counts, bom) = bom::bill(topo, fabric, &s.hardware, &s.catalog, &s.cost.software);
    let mut links_per_tier = counts.links.clone();
    if links_per_tier.is_empty() {
        links_per_tier.push(topo.host_count());
    }
    let design = Design {
        tiers: counts.switches.len(),
        switches: counts.switches.iter().sum(),
        links: (topo.ports().len() / 2) as u32,
        switches_per_tier: counts.switches.clone(),
        links_per_tier,
        counts,
    };
    let m = MoneySettings::of(&s.cost);
    let capex: f64 = bom.iter().map(BomLine::usd).sum();
    let it_kw = bom.iter().map(BomLine::total_watts).sum::<f64>() / 1000.0;
    let operating = s.cost.operations.usd_per_year(fabric as usize);
    let net = network_money(capex, it_kw, operating, &m);
    let per_hour = net.usd_per_hour;
    let g_cost = gpu(s);
    let g = gpu_per_hour(g_cost.usd(), g_cost.watts, &m);
    let gpus = topo.host_count();
    let hours = job_hours(summary, &s.cost);
    let cost = NetworkCost {
        capex_usd: capex,
        power_kw: net.power_kw,
        it_power_kw: it_kw,
        opex_usd_per_year: net.opex_usd_per_year,
        lifetime_usd: net.lifetime_usd,
        network_usd_per_hour: per_hour,
        gpu_usd_per_hour: g,
        gpus,
        job_hours: hours,
        job_cost_usd: hours.map(|h| h * (gpus as f64 * g + per_hour)),
        bom,
    };
    (design, cost)
}

/// Where the answer would flip, as numbers.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FlipPoints {
    /// The GPU price at which both fabrics' jobs cost the same (null: no price does).
    pub gpu_usd: Option<f64>,
    /// RoCEv2's job time over InfiniBand's at which both cost the same, and now.
    pub rocev2_time_ratio: Option<f64>,
    pub rocev2_time_ratio_now: Option<f64>,
    /// InfiniBand's network lifetime cost at which both cost the same.
    pub infiniband_network_lifetime_usd: Option<f64>,
}

/// SCENARIO.md v2's D: the fabric, its reasons and where it would flip.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Recommendation {
    pub fabric: &'static str,
    pub reasons: Vec<String>,
    pub flip: Vec<String>,
    pub flip_points: FlipPoints,
    /// The cheaper fabric's saving per job, as a share of the dearer one's cost.
    pub saving: Option<f64>,
    /// The verdict across the inputs' ranges (SCENARIO.md v3 `verdict`, `share`,
    /// `drivers`).
    #[serde(flatten)]
    pub across_ranges: Verdict,
    /// The reasons as typed values with their numbers (`reasons` is their text).
    pub findings: Vec<Finding>,
    /// The flip points as typed values (`flip` is their text).
    pub flips: Vec<Flip>,
}

/// `x` with three significant digits (at least two decimals), for small amounts.
pub(crate) fn sig(x: f64) -> String {
    let a = x.abs();
    let decimals = if a >= 1.0 || a == 0.0 {
        2
    } else {
        (2.0 - a.log10().floor()) as usize
    };
    format!("{x:.decimals$}")
}

/// A whole number with thousands separators (12,345); fractions rounded.
pub fn thousands(x: f64) -> String {
    let digits = format!("{:.0}", x.abs());
    let mut out = String::new();
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    if x < 0.0 && digits != "0" {
        out.insert(0, '-');
    }
    out
}

/// A figure for a person: a whole number with thousands separators, else at most three
/// decimals without trailing zeros (never a raw float such as "2000.0"); an axis label.
pub fn tick(x: &f64) -> String {
    let x = *x;
    if x.abs() >= 1000.0 || x.fract().abs() < 1e-9 {
        return thousands(x);
    }
    let t = if x.abs() < 0.01 {
        sig(x)
    } else {
        format!("{x:.3}")
    };
    t.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Dollars, shortened above ten thousand.
pub(crate) fn usd(x: f64) -> String {
    let a = x.abs();
    let s = if a >= 1e9 {
        format!("${:.2}B", a / 1e9)
    } else if a >= 1e6 {
        format!("${:.2}M", a / 1e6)
    } else if a >= 1e4 {
        format!("${:.0}k", a / 1e3)
    } else {
        format!("${}", sig(a))
    };
    if x < 0.0 {
        format!("-{s}")
    } else {
        s
    }
}

pub(crate) fn hours(h: f64) -> String {
    if h >= 1.0 {
        format!("{h:.2} h")
    } else if h * 3600.0 >= 1.0 {
        format!("{:.3} s", h * 3600.0)
    } else {
        format!("{:.3} us", h * 3.6e9)
    }
}

/// An input's value in its unit.
pub fn value(x: f64, unit: &str) -> String {
    match unit {
        "USD" if (1.0..1e4).contains(&x.abs()) => format!("${}", thousands(x)),
        "USD" => usd(x),
        "ns" => format!("{x:.0} ns"),
        "years" => format!("{x:.1} years"),
        "USD/kWh" => format!("${x:.3}/kWh"),
        _ => format!("{x:.3}"),
    }
}

/// What `compare --tune` found: RoCEv2 with the tuner's settings, and its robust worst
/// case over two other seeds at the scenario's load.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Tuning {
    pub trials: usize,
    /// The tuned job's hours on the scenario's own seed and load, and at its worst.
    pub tuned_hours: f64,
    pub robust_hours: f64,
    /// Whether the tuned settings kept every constraint in every robustness run.
    pub robust_feasible: bool,
}

/// The candidates beside InfiniBand and RoCEv2 that the recommendation weighs.
#[derive(Clone, Copy, Default)]
pub struct Candidates<'a> {
    /// "rocev2-adaptive": Ethernet with adaptive routing or spraying, its run and cost.
    pub adaptive: Option<(&'a Summary, &'a NetworkCost)>,
    /// "rocev2-tuned": what the tuner found, and the tuned run's cost.
    pub tuned: Option<(&'a Tuning, &'a NetworkCost)>,
}

/// Decides among the candidates from their summaries and costs (the cheapest job at the
/// base values: InfiniBand, RoCEv2 or Ethernet with adaptive routing), and across the
/// ranges on `surface` (`None`: a job did not finish, so the finishing fabric wins
/// everywhere). The flip points are InfiniBand's against RoCEv2's.
pub fn recommend(
    s: &Scenario,
    sums: [&Summary; 2],
    costs: [&NetworkCost; 2],
    others: Candidates,
    surface: Option<&Surface>,
    ends_unfinished: bool,
) -> Recommendation {
    let tuned = others.tuned;
    let [ib, roce] = costs;
    let gpus = ib.gpus as f64;
    let g = ib.gpu_usd_per_hour;
    let (n_ib, n_roce) = (ib.network_usd_per_hour, roce.network_usd_per_hour);
    let mut findings = vec![Finding::Practice {
        departures: s.departures.clone(),
    }];
    let (mut fabric, mut saving) = match (ib.job_cost_usd, roce.job_cost_usd) {
        (Some(a), Some(b)) => {
            let (win, lo, hi) = if b < a {
                (FabricKind::Rocev2, b, a)
            } else {
                (FabricKind::Infiniband, a, b)
            };
            findings.push(Finding::CostPerJob {
                infiniband_usd: a,
                rocev2_usd: b,
                cheaper: win.name(),
                saving_usd: hi - lo,
                saving: (hi - lo) / hi,
            });
            (win.name(), Some((hi - lo) / hi))
        }
        (a, b) => {
            let finished = match (a, b) {
                (Some(_), None) => Some(FabricKind::Infiniband),
                (None, Some(_)) => Some(FabricKind::Rocev2),
                _ => None,
            };
            findings.push(Finding::Unfinished {
                finished: finished.map(FabricKind::name),
            });
            (finished.unwrap_or(FabricKind::Infiniband).name(), None)
        }
    };
    if let Some((summary, a)) = others.adaptive {
        let finding = adaptive_finding(s, summary, a, costs);
        // The adaptive candidate wins when its job is the cheapest of the finished ones.
        let best_other = [ib.job_cost_usd, roce.job_cost_usd]
            .into_iter()
            .flatten()
            .fold(f64::INFINITY, f64::min);
        if let Some(c) = a.job_cost_usd.filter(|&c| c < best_other) {
            fabric = ROCEV2_ADAPTIVE;
            saving = best_other
                .is_finite()
                .then(|| (best_other - c) / best_other);
        }
        findings.push(finding);
    }
    let gpu_capex = gpus * gpu(s).usd();
    findings.push(Finding::NetworkCapex {
        infiniband_usd: ib.capex_usd,
        rocev2_usd: roce.capex_usd,
        infiniband_share: ib.capex_usd / (ib.capex_usd + gpu_capex),
        rocev2_share: roce.capex_usd / (roce.capex_usd + gpu_capex),
    });
    findings.push(Finding::NetworkPower {
        infiniband_kw: ib.power_kw,
        rocev2_kw: roce.power_kw,
        infiniband_opex_usd_per_year: ib.opex_usd_per_year,
        rocev2_opex_usd_per_year: roce.opex_usd_per_year,
    });
    if let (Some(ti), Some(tr)) = (ib.job_hours, roce.job_hours) {
        findings.push(Finding::JobTime {
            infiniband_hours: ti,
            rocev2_hours: tr,
            extra_gpu_hours: (tr - ti) * gpus,
            worth_usd: (tr - ti) * gpus * g,
        });
    }
    if let Some(f) = microsecond(sums, costs) {
        findings.push(f);
    }
    if let (Some((t, k)), Some(ti), Some(tr)) = (tuned, ib.job_cost_usd, roce.job_hours) {
        let per_hour = k.gpus as f64 * k.gpu_usd_per_hour + k.network_usd_per_hour;
        findings.push(Finding::Tuning {
            trials: t.trials,
            untuned_hours: tr,
            tuned_hours: t.tuned_hours,
            robust_hours: t.robust_hours,
            untuned_usd: tr * per_hour,
            tuned_usd: t.tuned_hours * per_hour,
            robust_usd: t.robust_hours * per_hour,
            infiniband_usd: ti,
            robust_feasible: t.robust_feasible,
        });
    }
    findings.push(Finding::Tail {
        infiniband: Tail::of(sums[0]),
        rocev2: Tail::of(sums[1]),
    });
    findings.push(Finding::risks(sums[1]));
    if sums.iter().any(|s| s.level == "flow") {
        findings.push(Finding::FlowLevel {
            notes: sums
                .iter()
                .flat_map(|s| s.flow_level_notes.iter().cloned())
                .collect(),
        });
    }
    let mut points = FlipPoints {
        gpu_usd: None,
        rocev2_time_ratio: None,
        rocev2_time_ratio_now: None,
        infiniband_network_lifetime_usd: None,
    };
    let mut flips = Vec::new();
    if let (Some(ti), Some(tr)) = (ib.job_hours, roce.job_hours) {
        if ti > 0.0 {
            let r_star = (gpus * g + n_ib) / (gpus * g + n_roce);
            points.rocev2_time_ratio = Some(r_star);
            points.rocev2_time_ratio_now = Some(tr / ti);
            flips.push(Flip::TimeRatio {
                at: r_star,
                now: tr / ti,
            });
            let n_star =
                (tr * (gpus * g + n_roce) / ti - gpus * g) * s.cost.lifetime_years * HOURS_PER_YEAR;
            points.infiniband_network_lifetime_usd = Some(n_star);
            flips.push(Flip::InfinibandLifetime {
                at_usd: n_star,
                now_usd: ib.lifetime_usd,
            });
        }
        // G g (ti - tr) = tr n_roce - ti n_ib, g = price / life + energy.
        if (ti - tr).abs() > ti * 1e-12 {
            let g_star = (tr * n_roce - ti * n_ib) / (gpus * (ti - tr));
            let watts = gpu(s).watts;
            let c = &s.cost;
            let energy = watts / 1000.0 * c.pue * c.electricity_usd_per_kwh;
            let p_star = (g_star - energy) * c.lifetime_years * HOURS_PER_YEAR;
            let faster = if ti > tr {
                FabricKind::Rocev2
            } else {
                FabricKind::Infiniband
            };
            if p_star > 0.0 {
                points.gpu_usd = Some(p_star);
                flips.push(Flip::GpuPrice {
                    at_usd: p_star,
                    now_usd: gpu(s).usd(),
                    cheaper_above: faster.name(),
                });
            } else {
                flips.push(Flip::NoGpuPrice {
                    cheaper: faster.name(),
                });
            }
        } else {
            flips.push(Flip::EqualTimes);
        }
        flips.push(Flip::JobLength);
    }
    let across_ranges = match surface {
        Some(surface) => {
            let v = uncertainty::verdict(surface, s.compare.samples, s.compare.threshold, s.seed);
            let latencies = surface.inputs().iter().any(|i| i.effect.changes_run());
            findings.insert(0, Finding::across_ranges(&v, latencies, ends_unfinished));
            v
        }
        None => Verdict::certain(fabric, s.compare.threshold),
    };
    Recommendation {
        fabric,
        reasons: findings.iter().map(Finding::text).collect(),
        flip: flips.iter().map(Flip::text).collect(),
        flip_points: points,
        saving,
        across_ranges,
        findings,
        flips,
    }
}

/// The adaptive Ethernet candidate beside RoCEv2 with ECMP and InfiniBand: its job, its
/// network's capital cost and what its load balancing did to the busiest link.
fn adaptive_finding(
    s: &Scenario,
    summary: &Summary,
    a: &NetworkCost,
    [ib, roce]: [&NetworkCost; 2],
) -> Finding {
    let settings = s
        .compare
        .adaptive
        .as_ref()
        .expect("the candidate was asked for");
    let busiest = |x: &Summary| x.link_load.as_ref().map(|l| l.max_over_mean);
    Finding::Adaptive {
        load_balancing: settings.load_balancing.name(),
        nic: settings.nic.clone(),
        switch: settings.switch.clone(),
        hours: a.job_hours,
        usd: a.job_cost_usd,
        capex_usd: a.capex_usd,
        busiest_link_over_mean: busiest(summary),
        rocev2_hours: roce.job_hours,
        rocev2_usd: roce.job_cost_usd,
        rocev2_capex_usd: roce.capex_usd,
        infiniband_hours: ib.job_hours,
        infiniband_usd: ib.job_cost_usd,
    }
}

/// What one microsecond more per exchange adds to the (longest) training job on each
/// fabric, in hours and dollars: the seed's point in this cluster's terms.
fn microsecond(sums: [&Summary; 2], costs: [&NetworkCost; 2]) -> Option<Finding> {
    let per = |f: usize| {
        let extra = sums[f]
            .training
            .iter()
            .filter_map(|t| t.extra_job_seconds_per_us_per_exchange)
            .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))))?;
        let k = costs[f];
        let h = extra / 3600.0;
        Some((
            h,
            h * (k.gpus as f64 * k.gpu_usd_per_hour + k.network_usd_per_hour),
        ))
    };
    let (ib, roce) = (per(0)?, per(1)?);
    Some(Finding::Microsecond {
        infiniband_hours: ib.0,
        rocev2_hours: roce.0,
        infiniband_usd: ib.1,
        rocev2_usd: roce.1,
    })
}

#[cfg(test)]
mod tests {
    use super::thousands;

    #[test]
    fn thousands_groups_digits_by_three() {
        assert_eq!(thousands(0.0), "0");
        assert_eq!(thousands(999.4), "999");
        assert_eq!(thousands(1000.0), "1,000");
        assert_eq!(thousands(820800.0), "820,800");
        assert_eq!(thousands(-1234567.0), "-1,234,567");
    }
}
