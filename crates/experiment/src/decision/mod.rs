//! The decision: each fabric's network priced from its bill of materials, the cost of
//! the job it runs (GPU hours plus network hours), and the recommendation with its
//! reasons in numbers and the points where it would flip.
//!
//! The money model, per fabric f: GPUs cost g = price / lifetime hours + watts x PUE x
//! energy price per hour each; the network costs n_f = its lifetime cost / lifetime hours
//! per hour (capital, energy with PUE, support); the job of T_f hours costs
//! C_f = T_f x (GPUs x g + n_f). The fabric with the lower C_f is recommended.

pub mod bom;

use crate::results::Summary;
use crate::scenario::{CostSettings, FabricKind, Scenario};
use bom::{BomLine, Counts};
use fabricsim_core::topology::Topology;
use serde::Serialize;

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

/// The GPU price and power the scenario uses: `[cost]` overrides, else the catalog's GPU.
pub(crate) fn gpu(s: &Scenario) -> (f64, f64) {
    let g = s.catalog.get(&s.hardware.gpu).expect("checked at load");
    (
        s.cost.gpu_usd.unwrap_or(g.price_usd),
        s.cost.gpu_watts.unwrap_or(g.watts),
    )
}

/// One GPU's cost per hour under `c`.
fn gpu_per_hour(price: f64, watts: f64, c: &CostSettings) -> f64 {
    price / (c.lifetime_years * HOURS_PER_YEAR) + watts / 1000.0 * c.pue * c.electricity_usd_per_kwh
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
    let c = &s.cost;
    let capex: f64 = bom.iter().map(BomLine::usd).sum();
    let it_kw = bom.iter().map(BomLine::total_watts).sum::<f64>() / 1000.0;
    let power_kw = it_kw * c.pue;
    let opex =
        power_kw * HOURS_PER_YEAR * c.electricity_usd_per_kwh + c.support_share_per_year * capex;
    let lifetime = capex + opex * c.lifetime_years;
    let per_hour = lifetime / (c.lifetime_years * HOURS_PER_YEAR);
    let (gpu_usd, gpu_watts) = gpu(s);
    let g = gpu_per_hour(gpu_usd, gpu_watts, c);
    let gpus = topo.host_count();
    let hours = job_hours(summary, c);
    let cost = NetworkCost {
        capex_usd: capex,
        power_kw,
        it_power_kw: it_kw,
        opex_usd_per_year: opex,
        lifetime_usd: lifetime,
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
}

/// `x` with three significant digits (at least two decimals), for small amounts.
fn sig(x: f64) -> String {
    let a = x.abs();
    let decimals = if a >= 1.0 || a == 0.0 {
        2
    } else {
        (2.0 - a.log10().floor()) as usize
    };
    format!("{x:.decimals$}")
}

/// Dollars, shortened above ten thousand.
fn usd(x: f64) -> String {
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

fn hours(h: f64) -> String {
    if h >= 1.0 {
        format!("{h:.2} h")
    } else if h * 3600.0 >= 1.0 {
        format!("{:.3} s", h * 3600.0)
    } else {
        format!("{:.3} us", h * 3.6e9)
    }
}

/// Decides between the two fabrics from their summaries and costs.
pub fn recommend(s: &Scenario, sums: [&Summary; 2], costs: [&NetworkCost; 2]) -> Recommendation {
    let [ib, roce] = costs;
    let gpus = ib.gpus as f64;
    let g = ib.gpu_usd_per_hour;
    let (n_ib, n_roce) = (ib.network_usd_per_hour, roce.network_usd_per_hour);
    let mut reasons = Vec::new();
    let mut flip = Vec::new();
    let (fabric, saving) = match (ib.job_cost_usd, roce.job_cost_usd) {
        (Some(a), Some(b)) => {
            let (win, lo, hi) = if b < a {
                (FabricKind::Rocev2, b, a)
            } else {
                (FabricKind::Infiniband, a, b)
            };
            reasons.push(format!(
                "cost per job: InfiniBand {}, RoCEv2 {}: {} costs {} ({:.2} %) less per job",
                usd(a),
                usd(b),
                FabricKind::label(win),
                usd(hi - lo),
                (hi - lo) / hi * 100.0
            ));
            (win, Some((hi - lo) / hi))
        }
        (Some(_), None) => {
            reasons.push("the job did not finish on RoCEv2 (see its risks below)".into());
            (FabricKind::Infiniband, None)
        }
        (None, Some(_)) => {
            reasons.push("the job did not finish on InfiniBand".into());
            (FabricKind::Rocev2, None)
        }
        (None, None) => {
            reasons.push("the job finished on neither fabric; InfiniBand named by default".into());
            (FabricKind::Infiniband, None)
        }
    };
    let gpu_capex = gpus * gpu(s).0;
    reasons.push(format!(
        "network capital cost: InfiniBand {} ({:.1} % of the cluster with its GPUs), RoCEv2 {} ({:.1} %), a difference of {}",
        usd(ib.capex_usd),
        ib.capex_usd / (ib.capex_usd + gpu_capex) * 100.0,
        usd(roce.capex_usd),
        roce.capex_usd / (roce.capex_usd + gpu_capex) * 100.0,
        usd(ib.capex_usd - roce.capex_usd)
    ));
    reasons.push(format!(
        "network power with PUE: InfiniBand {:.1} kW, RoCEv2 {:.1} kW; operating cost {} vs {} per year",
        ib.power_kw,
        roce.power_kw,
        usd(ib.opex_usd_per_year),
        usd(roce.opex_usd_per_year)
    ));
    if let (Some(ti), Some(tr)) = (ib.job_hours, roce.job_hours) {
        let dt = tr - ti;
        reasons.push(format!(
            "job time: InfiniBand {}, RoCEv2 {} ({:+.2} %): {} GPU-hours, worth {}",
            hours(ti),
            hours(tr),
            if ti > 0.0 { dt / ti * 100.0 } else { 0.0 },
            format_args!("{}{}", if dt < 0.0 { "" } else { "+" }, sig(dt * gpus)),
            usd(dt * gpus * g)
        ));
    }
    reasons.push(tail_reason(sums));
    reasons.push(risk_reason(sums[1]));
    if sums.iter().any(|s| s.level == "flow") {
        reasons.push("simulated at flow level: flows share links max-min fairly (RoCEv2's shared ports at the share packet-level probes measured); `fabricsim calibrate` gives its error against packet level".into());
        reasons.extend(sums.iter().flat_map(|s| s.flow_level_notes.iter().cloned()));
    }
    let mut points = FlipPoints {
        gpu_usd: None,
        rocev2_time_ratio: None,
        rocev2_time_ratio_now: None,
        infiniband_network_lifetime_usd: None,
    };
    if let (Some(ti), Some(tr)) = (ib.job_hours, roce.job_hours) {
        if ti > 0.0 {
            let r_star = (gpus * g + n_ib) / (gpus * g + n_roce);
            points.rocev2_time_ratio = Some(r_star);
            points.rocev2_time_ratio_now = Some(tr / ti);
            flip.push(format!(
                "RoCEv2's job time over InfiniBand's: both cost the same at {r_star:.4} (now {:.4}); below it RoCEv2 is cheaper, above it InfiniBand",
                tr / ti
            ));
            let n_star =
                (tr * (gpus * g + n_roce) / ti - gpus * g) * s.cost.lifetime_years * HOURS_PER_YEAR;
            points.infiniband_network_lifetime_usd = Some(n_star);
            flip.push(format!(
                "InfiniBand network's lifetime cost: both cost the same at {} (now {})",
                usd(n_star),
                usd(ib.lifetime_usd)
            ));
        }
        // G g (ti - tr) = tr n_roce - ti n_ib, g = price / life + energy.
        if (ti - tr).abs() > ti * 1e-12 {
            let g_star = (tr * n_roce - ti * n_ib) / (gpus * (ti - tr));
            let (_, watts) = gpu(s);
            let c = &s.cost;
            let energy = watts / 1000.0 * c.pue * c.electricity_usd_per_kwh;
            let p_star = (g_star - energy) * c.lifetime_years * HOURS_PER_YEAR;
            if p_star > 0.0 {
                points.gpu_usd = Some(p_star);
                let (above, below) = if ti > tr {
                    ("RoCEv2", "InfiniBand")
                } else {
                    ("InfiniBand", "RoCEv2")
                };
                flip.push(format!(
                    "GPU price: both cost the same at {} per GPU (now {}); above it {above} is cheaper, below it {below}",
                    usd(p_star),
                    usd(gpu(s).0)
                ));
            } else {
                flip.push(format!(
                    "GPU price: no GPU price flips it ({} is cheaper at any price)",
                    if ti > tr { "RoCEv2" } else { "InfiniBand" }
                ));
            }
        } else {
            flip.push(
                "GPU price: the job times are equal, so the network's cost alone decides".into(),
            );
        }
        flip.push("job length: both fabrics' costs grow in proportion to it, so it does not flip the answer".into());
    }
    Recommendation {
        fabric: fabric.name(),
        reasons,
        flip,
        flip_points: points,
        saving,
    }
}

/// Tail latency and jitter: FCT p99 against p50, and the spread of iteration times.
fn tail_reason(sums: [&Summary; 2]) -> String {
    let part = |s: &Summary| {
        let ratio = if s.fct_ns.p50 > 0 {
            s.fct_ns.p99 as f64 / s.fct_ns.p50 as f64
        } else {
            0.0
        };
        let mut t = format!(
            "FCT p99 {:.1} us (p99/p50 {ratio:.2})",
            s.fct_ns.p99 as f64 / 1e3
        );
        let iters: Vec<f64> = s
            .training
            .iter()
            .flat_map(|t| t.iteration_ns.iter().skip(1).flatten().copied())
            .collect();
        if iters.len() > 1 {
            let (lo, hi) = iters
                .iter()
                .fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
            t.push_str(&format!(", iteration spread {:.1} us", (hi - lo) / 1e3));
        }
        t
    };
    format!(
        "tail: InfiniBand {}; RoCEv2 {}",
        part(sums[0]),
        part(sums[1])
    )
}

/// What went wrong, or nearly, on RoCEv2.
fn risk_reason(s: &Summary) -> String {
    let mut risks = Vec::new();
    if s.pfc_pause_frames > 0 {
        risks.push(format!(
            "{} PFC pause frames ({:.1} us paused over all ports)",
            s.pfc_pause_frames,
            s.pfc_paused_ns as f64 / 1e3
        ));
    }
    if s.drops > 0 {
        risks.push(format!(
            "{} drops, {} packets retransmitted",
            s.drops, s.retransmitted_packets
        ));
    }
    if s.deadlock.is_some() {
        risks.push("a PFC deadlock that stopped the run".into());
    }
    if !s.pfc_cycles.is_empty() || s.watchdog_trips > 0 {
        risks.push(format!(
            "{} cycles of paused queues, {} PFC watchdog trips",
            s.pfc_cycles.len(),
            s.watchdog_trips
        ));
    }
    if s.cnps > 0 {
        risks.push(format!("{} ECN marks, {} CNPs", s.ecn_marked, s.cnps));
    }
    if s.level == "flow" {
        "RoCEv2 risks: not seen at flow level, which models no pause, drop, mark or deadlock (run at packet level to see them)".into()
    } else if risks.is_empty() {
        "RoCEv2 risks seen in the run: none (no pause, drop, deadlock or watchdog trip)".into()
    } else {
        format!("RoCEv2 risks seen in the run: {}", risks.join("; "))
    }
}
