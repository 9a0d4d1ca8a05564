//! The recommendation's reasons and flip points as typed values carrying their numbers
//! (`findings` and `flips` in the JSON); each renders itself as the sentence the CLI,
//! summary.md and report.html show (`reasons` and `flip`).

use super::uncertainty::{Driver, RatioSpread, Verdict};
use super::{hours, sig, thousands, usd, value};
use crate::results::Summary;
use crate::scenario::{FabricKind, ROCEV2_ADAPTIVE, ROCEV2_TUNED};
use serde::Serialize;

/// One reason, with its numbers.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Finding {
    /// The verdict across the inputs' ranges.
    AcrossRanges {
        verdict: &'static str,
        share_infiniband: f64,
        share_rocev2: f64,
        /// RoCEv2 with the tuner's settings, when `compare --tune` made it a candidate.
        share_rocev2_tuned: Option<f64>,
        /// Ethernet with adaptive routing, when `[compare]` made it a candidate.
        share_rocev2_adaptive: Option<f64>,
        samples: u32,
        threshold: f64,
        cost_ratio: Option<RatioSpread>,
        /// The inputs whose break-even lies inside their range, the widest swing first
        /// (at most three).
        deciders: Vec<Driver>,
        /// The input with the widest swing.
        widest: Option<Driver>,
        latencies_sampled: bool,
        ends_unfinished: bool,
    },
    /// Whether each fabric runs at its best practice; how the scenario departs if not.
    Practice {
        departures: Vec<String>,
    },
    CostPerJob {
        infiniband_usd: f64,
        rocev2_usd: f64,
        cheaper: &'static str,
        saving_usd: f64,
        /// The saving over the dearer fabric's cost.
        saving: f64,
    },
    /// A job did not finish: on which fabric it did (`None`: neither).
    Unfinished {
        finished: Option<&'static str>,
    },
    NetworkCapex {
        infiniband_usd: f64,
        rocev2_usd: f64,
        /// The network's share of the cluster with its GPUs.
        infiniband_share: f64,
        rocev2_share: f64,
    },
    NetworkPower {
        infiniband_kw: f64,
        rocev2_kw: f64,
        infiniband_opex_usd_per_year: f64,
        rocev2_opex_usd_per_year: f64,
    },
    JobTime {
        infiniband_hours: f64,
        rocev2_hours: f64,
        /// RoCEv2's GPU-hours over InfiniBand's, and what they cost.
        extra_gpu_hours: f64,
        worth_usd: f64,
    },
    /// What one microsecond more per exchange adds to the job on each fabric.
    Microsecond {
        infiniband_hours: f64,
        rocev2_hours: f64,
        infiniband_usd: f64,
        rocev2_usd: f64,
    },
    /// What tuning RoCEv2 is worth (`compare --tune`): its job untuned, tuned and at the
    /// tuned settings' robust worst, beside InfiniBand's.
    Tuning {
        trials: usize,
        untuned_hours: f64,
        tuned_hours: f64,
        robust_hours: f64,
        untuned_usd: f64,
        tuned_usd: f64,
        robust_usd: f64,
        infiniband_usd: f64,
        robust_feasible: bool,
    },
    /// Ethernet with adaptive routing or spraying ("rocev2-adaptive") beside RoCEv2
    /// with ECMP and InfiniBand: job (null: unfinished) and network capital cost.
    Adaptive {
        load_balancing: &'static str,
        nic: String,
        switch: String,
        hours: Option<f64>,
        usd: Option<f64>,
        capex_usd: f64,
        /// The busiest switch link's load over the mean (packet level).
        busiest_link_over_mean: Option<f64>,
        rocev2_hours: Option<f64>,
        rocev2_usd: Option<f64>,
        rocev2_capex_usd: f64,
        infiniband_hours: Option<f64>,
        infiniband_usd: Option<f64>,
    },
    Tail {
        infiniband: Tail,
        rocev2: Tail,
    },
    /// What went wrong, or nearly, on RoCEv2 (nothing is seen at flow level).
    Risks {
        at_flow_level: bool,
        pfc_pause_frames: u64,
        pfc_paused_us: f64,
        drops: u64,
        retransmitted_packets: u64,
        deadlock: bool,
        pfc_cycles: usize,
        watchdog_trips: u64,
        ecn_marked: u64,
        cnps: u64,
    },
    /// Simulated at flow level, with its notes.
    FlowLevel {
        notes: Vec<String>,
    },
}

/// One fabric's tail: FCT p99, its ratio to p50, and the spread of iteration times.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Tail {
    pub fct_p99_us: f64,
    pub p99_over_p50: f64,
    pub iteration_spread_us: Option<f64>,
}

impl Tail {
    pub fn of(s: &Summary) -> Tail {
        let iters: Vec<f64> = s
            .training
            .iter()
            .flat_map(|t| t.iteration_ns.iter().skip(1).flatten().copied())
            .collect();
        let spread = (iters.len() > 1).then(|| {
            let (lo, hi) = iters
                .iter()
                .fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
            (hi - lo) / 1e3
        });
        Tail {
            fct_p99_us: s.fct_ns.p99 as f64 / 1e3,
            p99_over_p50: if s.fct_ns.p50 > 0 {
                s.fct_ns.p99 as f64 / s.fct_ns.p50 as f64
            } else {
                0.0
            },
            iteration_spread_us: spread,
        }
    }

    fn text(&self) -> String {
        let mut t = format!(
            "FCT p99 {:.1} us (p99/p50 {:.2})",
            self.fct_p99_us, self.p99_over_p50
        );
        if let Some(s) = self.iteration_spread_us {
            t += &format!(", iteration spread {s:.1} us");
        }
        t
    }
}

impl Finding {
    /// The verdict across the ranges as a finding.
    pub fn across_ranges(v: &Verdict, latencies_sampled: bool, ends_unfinished: bool) -> Finding {
        Finding::AcrossRanges {
            verdict: v.verdict,
            share_infiniband: v.share[FabricKind::Infiniband.name()],
            share_rocev2: v.share[FabricKind::Rocev2.name()],
            share_rocev2_tuned: v.share.get(ROCEV2_TUNED).copied(),
            share_rocev2_adaptive: v.share.get(ROCEV2_ADAPTIVE).copied(),
            samples: v.samples,
            threshold: v.threshold,
            cost_ratio: v.cost_ratio.clone(),
            deciders: v
                .drivers
                .iter()
                .filter(|d| d.breakeven.is_some_and(|b| (d.low..=d.high).contains(&b)))
                .take(3)
                .cloned()
                .collect(),
            widest: v.drivers.first().cloned(),
            latencies_sampled,
            ends_unfinished,
        }
    }

    /// RoCEv2's risks seen in its run `s`.
    pub fn risks(s: &Summary) -> Finding {
        Finding::Risks {
            at_flow_level: s.level == "flow",
            pfc_pause_frames: s.pfc_pause_frames,
            pfc_paused_us: s.pfc_paused_ns as f64 / 1e3,
            drops: s.drops,
            retransmitted_packets: s.retransmitted_packets,
            deadlock: s.deadlock.is_some(),
            pfc_cycles: s.pfc_cycles.len(),
            watchdog_trips: s.watchdog_trips,
            ecn_marked: s.ecn_marked,
            cnps: s.cnps,
        }
    }

    /// The sentence this finding is shown as.
    pub fn text(&self) -> String {
        match self {
            Finding::AcrossRanges {
                verdict,
                share_infiniband,
                share_rocev2,
                share_rocev2_tuned,
                share_rocev2_adaptive,
                samples,
                threshold,
                cost_ratio,
                deciders,
                widest,
                latencies_sampled,
                ends_unfinished,
            } => {
                let (ib, roce) = (share_infiniband * 100.0, share_rocev2 * 100.0);
                let share = |name: &str, x: &Option<f64>| {
                    x.map_or(String::new(), |t| format!(", {name} in {:.1} %", t * 100.0))
                };
                let tuned = share("RoCEv2 tuned", share_rocev2_tuned)
                    + &share("Ethernet adaptive", share_rocev2_adaptive);
                let spread = cost_ratio.as_ref().map_or(String::new(), |r| {
                    format!(
                        "; RoCEv2's job cost over InfiniBand's: median {:.3}, 10-90 % {:.3} to {:.3}",
                        r.p50, r.p10, r.p90
                    )
                });
                let samples = thousands(*samples as f64);
                let mut t = if *verdict == "too-close" {
                    let decide: Vec<String> = deciders
                        .iter()
                        .map(|d| {
                            format!(
                                "{} (break-even {}, range {} to {})",
                                d.input,
                                value(d.breakeven.unwrap_or(d.base), d.unit),
                                value(d.low, d.unit),
                                value(d.high, d.unit)
                            )
                        })
                        .collect();
                    format!(
                        "too close to call: no candidate is cheaper per job in {:.0} % of the inputs' ranges (InfiniBand in {ib:.1} %, RoCEv2 in {roce:.1} %{tuned} of {samples} samples{spread}); what decides it: {}",
                        threshold * 100.0,
                        if decide.is_empty() {
                            "no single input (several together)".into()
                        } else {
                            decide.join("; ")
                        }
                    )
                } else {
                    let (name, share) = match *verdict {
                        v if v == FabricKind::Infiniband.name() => ("InfiniBand", ib),
                        v if v == ROCEV2_TUNED => {
                            ("RoCEv2 tuned", share_rocev2_tuned.unwrap_or(0.0) * 100.0)
                        }
                        v if v == ROCEV2_ADAPTIVE => (
                            "Ethernet with adaptive routing",
                            share_rocev2_adaptive.unwrap_or(0.0) * 100.0,
                        ),
                        _ => ("RoCEv2", roce),
                    };
                    let mut t = format!(
                        "across the inputs' ranges: {name} is cheaper per job in {share:.1} % of {samples} samples{spread}"
                    );
                    if let Some(d) = widest {
                        t += &format!(
                            "; the input that moves it most: {} (ratio {:.3} at {}, {:.3} at {})",
                            d.input,
                            d.ratio_at_low,
                            value(d.low, d.unit),
                            d.ratio_at_high,
                            value(d.high, d.unit)
                        );
                    }
                    t
                };
                if !latencies_sampled {
                    t += "; latencies are the scenario's own and held fixed (a [cluster] design samples its catalog latencies)";
                }
                if *ends_unfinished {
                    t += "; a run at a latency's end did not finish, so that end is held at the base";
                }
                t
            }
            Finding::Practice { departures } if departures.is_empty() => {
                "each fabric at its best practice: InfiniBand routes adaptively (NCCL_IB_ADAPTIVE_ROUTING, on by default since NCCL 2.16); RoCEv2 runs PFC, ECN and DCQCN at the ConnectX firmware's defaults (NVIDIA DOCA); SHARP is not assumed, as NCCL enables it only with NCCL_COLLNET_ENABLE=1".into()
            }
            Finding::Practice { departures } => format!(
                "not each fabric at its best practice, as the scenario sets it: {}; the verdict is for these settings",
                departures.join("; ")
            ),
            Finding::CostPerJob {
                infiniband_usd,
                rocev2_usd,
                cheaper,
                saving_usd,
                saving,
            } => format!(
                "cost per job: InfiniBand {}, RoCEv2 {}: {} costs {} ({:.2} %) less per job",
                usd(*infiniband_usd),
                usd(*rocev2_usd),
                label(cheaper),
                usd(*saving_usd),
                saving * 100.0
            ),
            Finding::Unfinished { finished } => match finished {
                Some("infiniband") => {
                    "the job did not finish on RoCEv2 (see its risks below)".into()
                }
                Some(_) => "the job did not finish on InfiniBand".into(),
                None => "the job finished on neither fabric; InfiniBand named by default".into(),
            },
            Finding::NetworkCapex {
                infiniband_usd,
                rocev2_usd,
                infiniband_share,
                rocev2_share,
            } => format!(
                "network capital cost: InfiniBand {} ({:.1} % of the cluster with its GPUs), RoCEv2 {} ({:.1} %), a difference of {}",
                usd(*infiniband_usd),
                infiniband_share * 100.0,
                usd(*rocev2_usd),
                rocev2_share * 100.0,
                usd(infiniband_usd - rocev2_usd)
            ),
            Finding::NetworkPower {
                infiniband_kw,
                rocev2_kw,
                infiniband_opex_usd_per_year,
                rocev2_opex_usd_per_year,
            } => format!(
                "network power with PUE: InfiniBand {infiniband_kw:.1} kW, RoCEv2 {rocev2_kw:.1} kW; operating cost {} vs {} per year",
                usd(*infiniband_opex_usd_per_year),
                usd(*rocev2_opex_usd_per_year)
            ),
            Finding::JobTime {
                infiniband_hours,
                rocev2_hours,
                extra_gpu_hours,
                worth_usd,
            } => {
                let (ti, tr) = (*infiniband_hours, *rocev2_hours);
                format!(
                    "job time: InfiniBand {}, RoCEv2 {} ({:+.2} %): {}{} GPU-hours, worth {}",
                    hours(ti),
                    hours(tr),
                    if ti > 0.0 { (tr - ti) / ti * 100.0 } else { 0.0 },
                    if *extra_gpu_hours < 0.0 { "" } else { "+" },
                    sig(*extra_gpu_hours),
                    usd(*worth_usd)
                )
            }
            Finding::Microsecond {
                infiniband_hours,
                rocev2_hours,
                infiniband_usd,
                rocev2_usd,
            } => format!(
                "a microsecond: 1 us more per exchange adds {} to the job on InfiniBand ({}) and {} on RoCEv2 ({})",
                hours(*infiniband_hours),
                usd(*infiniband_usd),
                hours(*rocev2_hours),
                usd(*rocev2_usd)
            ),
            Finding::Tuning {
                trials,
                untuned_hours,
                tuned_hours,
                robust_hours,
                untuned_usd,
                tuned_usd,
                robust_usd,
                infiniband_usd,
                robust_feasible,
            } => format!(
                "what tuning is worth ({trials} trials of `fabricsim tune`): RoCEv2 untuned {} ({}), tuned {} ({}), at the tuned settings' robust worst {} ({}{}); InfiniBand {} per job",
                hours(*untuned_hours),
                usd(*untuned_usd),
                hours(*tuned_hours),
                usd(*tuned_usd),
                hours(*robust_hours),
                usd(*robust_usd),
                if *robust_feasible { "" } else { ", not feasible everywhere" },
                usd(*infiniband_usd)
            ),
            Finding::Adaptive {
                load_balancing,
                nic,
                switch,
                hours: h,
                usd: u,
                capex_usd,
                busiest_link_over_mean,
                rocev2_hours,
                rocev2_usd,
                rocev2_capex_usd,
                infiniband_hours,
                infiniband_usd,
            } => {
                let job = |h: &Option<f64>, u: &Option<f64>| match (h, u) {
                    (Some(h), Some(u)) => format!("{} ({})", hours(*h), usd(*u)),
                    _ => "unfinished".into(),
                };
                let busiest = busiest_link_over_mean.map_or(String::new(), |b| {
                    format!(", busiest switch link at {b:.2} x the mean")
                });
                format!(
                    "Ethernet with load balancing \"{load_balancing}\" ({switch} switches, {nic} NICs that place packets out of order): job {}{busiest}, network capex {}; RoCEv2 with ECMP {}, network capex {}; InfiniBand {}",
                    job(h, u),
                    usd(*capex_usd),
                    job(rocev2_hours, rocev2_usd),
                    usd(*rocev2_capex_usd),
                    job(infiniband_hours, infiniband_usd)
                )
            }
            Finding::Tail { infiniband, rocev2 } => format!(
                "tail: InfiniBand {}; RoCEv2 {}",
                infiniband.text(),
                rocev2.text()
            ),
            Finding::Risks {
                at_flow_level: true,
                ..
            } => "RoCEv2 risks: not seen at flow level, which models no pause, drop, mark or deadlock (run at packet level to see them)".into(),
            Finding::Risks {
                pfc_pause_frames,
                pfc_paused_us,
                drops,
                retransmitted_packets,
                deadlock,
                pfc_cycles,
                watchdog_trips,
                ecn_marked,
                cnps,
                ..
            } => {
                let mut risks = Vec::new();
                if *pfc_pause_frames > 0 {
                    risks.push(format!(
                        "{pfc_pause_frames} PFC pause frames ({pfc_paused_us:.1} us paused over all ports)"
                    ));
                }
                if *drops > 0 {
                    risks.push(format!(
                        "{drops} drops, {retransmitted_packets} packets retransmitted"
                    ));
                }
                if *deadlock {
                    risks.push("a PFC deadlock that stopped the run".into());
                }
                if *pfc_cycles > 0 || *watchdog_trips > 0 {
                    risks.push(format!(
                        "{pfc_cycles} cycles of paused queues, {watchdog_trips} PFC watchdog trips"
                    ));
                }
                if *cnps > 0 {
                    risks.push(format!("{ecn_marked} ECN marks, {cnps} CNPs"));
                }
                if risks.is_empty() {
                    "RoCEv2 risks seen in the run: none (no pause, drop, deadlock or watchdog trip)".into()
                } else {
                    format!("RoCEv2 risks seen in the run: {}", risks.join("; "))
                }
            }
            Finding::FlowLevel { notes } => {
                let mut t = "simulated at flow level: flows share links max-min fairly (RoCEv2's shared ports at the share packet-level probes measured); `fabricsim calibrate` gives its error against packet level".to_string();
                for n in notes {
                    t += "; ";
                    t += n;
                }
                t
            }
        }
    }
}

/// A fabric's name as the sentences write it.
fn label(name: &str) -> &'static str {
    if name == FabricKind::Rocev2.name() {
        "RoCEv2"
    } else {
        "InfiniBand"
    }
}

/// One point where the answer would flip, with its numbers.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Flip {
    /// RoCEv2's job time over InfiniBand's at which both cost the same, and now.
    TimeRatio { at: f64, now: f64 },
    /// InfiniBand's network lifetime cost at which both cost the same, and now.
    InfinibandLifetime { at_usd: f64, now_usd: f64 },
    /// The GPU price at which both cost the same; above it `cheaper_above` wins.
    GpuPrice {
        at_usd: f64,
        now_usd: f64,
        cheaper_above: &'static str,
    },
    /// No GPU price flips it: `cheaper` wins at any.
    NoGpuPrice { cheaper: &'static str },
    /// The job times are equal: the network's cost alone decides.
    EqualTimes,
    /// Both costs grow in proportion to the job's length.
    JobLength,
}

impl Flip {
    pub fn text(&self) -> String {
        match self {
            Flip::TimeRatio { at, now } => format!(
                "RoCEv2's job time over InfiniBand's: both cost the same at {at:.4} (now {now:.4}); below it RoCEv2 is cheaper, above it InfiniBand"
            ),
            Flip::InfinibandLifetime { at_usd, now_usd } => format!(
                "InfiniBand network's lifetime cost: both cost the same at {} (now {})",
                usd(*at_usd),
                usd(*now_usd)
            ),
            Flip::GpuPrice {
                at_usd,
                now_usd,
                cheaper_above,
            } => {
                let below = if *cheaper_above == FabricKind::Rocev2.name() {
                    "InfiniBand"
                } else {
                    "RoCEv2"
                };
                format!(
                    "GPU price: both cost the same at {} per GPU (now {}); above it {} is cheaper, below it {below}",
                    usd(*at_usd),
                    usd(*now_usd),
                    label(cheaper_above)
                )
            }
            Flip::NoGpuPrice { cheaper } => format!(
                "GPU price: no GPU price flips it ({} is cheaper at any price)",
                label(cheaper)
            ),
            Flip::EqualTimes => {
                "GPU price: the job times are equal, so the network's cost alone decides".into()
            }
            Flip::JobLength => "job length: both fabrics' costs grow in proportion to it, so it does not flip the answer".into(),
        }
    }
}
