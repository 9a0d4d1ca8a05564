//! Results: the JSON summary of docs/SCENARIO.md, flows.csv, ports.csv and rates.csv,
//! written as one folder that is never half-written (see [`crate::output`]).

use crate::outcome::Outcome;
use crate::output;
use crate::scenario::{FabricKind, Scenario};
use fabricsim_core::units::Time;
use fabricsim_fabric::report::{Deadlock, FlowResult, RunReport};
use fabricsim_fabric::rocev2::RateSample;
use fabricsim_fabric::workload::{Traffic, Training};
use serde::Serialize;
use std::fmt::Write as _;
use std::ops::Range;
use std::path::Path;

#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct FlowCounts {
    pub count: usize,
    pub completed: usize,
    pub bytes: u64,
}

#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct Percentiles {
    pub p50: u64,
    pub p99: u64,
    pub max: u64,
}

impl Percentiles {
    /// Nearest-rank percentiles of `values`.
    pub fn of(mut values: Vec<u64>) -> Percentiles {
        values.sort_unstable();
        Percentiles {
            p50: percentile(&values, 50.0),
            p99: percentile(&values, 99.0),
            max: values.last().copied().unwrap_or(0),
        }
    }
}

/// The finished flows' completion times: at flow level a compact edge stands for its
/// pieces, each counted at its piece's completion time, so both levels count and rank
/// the same messages.
fn fct_percentiles<'a>(flows: impl Iterator<Item = &'a FlowResult>) -> Percentiles {
    let mut fcts: Vec<(u64, u64)> = flows
        .filter_map(|f| {
            let fct = f.piece_fct.or(f.finish.map(|t| t - f.start))?;
            Some((fct.ns(), f.pieces))
        })
        .collect();
    fcts.sort_unstable();
    Percentiles {
        p50: weighted_percentile(&fcts, 50.0),
        p99: weighted_percentile(&fcts, 99.0),
        max: fcts.last().map_or(0, |f| f.0),
    }
}

/// The summary printed by `--json`: the contract's fields first, then ours.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct Summary {
    pub scenario: String,
    pub fabric: &'static str,
    /// "packet" or "flow": the level the run was simulated at.
    pub level: &'static str,
    /// Why `level = "auto"` chose it: the estimate against the budget, and at flow level
    /// the error the calibration suite measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub level_reason: Option<String>,
    pub sim_time_ns: u64,
    pub events: u64,
    pub wall_seconds: f64,
    pub flows: FlowCounts,
    pub fct_ns: Percentiles,
    pub goodput_gbps: f64,
    pub drops: u64,
    pub retransmitted_packets: u64,
    pub pfc_pause_frames: u64,
    /// Packets marked ECN CE (RoCEv2) or FECN (InfiniBand).
    pub ecn_marked: u64,
    /// CNPs sent (RoCEv2) or BECNs returned (InfiniBand).
    pub cnps: u64,
    /// Time ports spent paused by PFC, summed over ports.
    pub pfc_paused_ns: u64,
    pub naks: u64,
    pub retransmission_timeouts: u64,
    pub seed: u64,
    pub events_per_second: f64,
    pub credit_stall_ns: u64,
    pub peak_queue_bytes: u64,
    pub peak_packets_in_flight: u64,
    /// The most packets a receiver held beyond its in-order prefix (RoCEv2 adaptive
    /// routing or spraying: what out-of-order placement must track).
    pub peak_reorder_packets: u64,
    pub duplicates: u64,
    pub buffer_overflows: u64,
    pub stopped_by_time: bool,
    /// PFC watchdog trips (RoCEv2).
    pub watchdog_trips: u64,
    /// A deadlock that stopped the run, or null.
    pub deadlock: Option<DeadlockSummary>,
    /// Cycles of PFC-paused queues that formed while the PFC watchdog was on and were left
    /// to it to break (RoCEv2); the run went on.
    pub pfc_cycles: Vec<DeadlockSummary>,
    /// How evenly the links between switches carried the run's bytes; null without such
    /// links.
    pub link_load: Option<LinkLoad>,
    /// Every collective, as nccl-tests reports it.
    pub collectives: Vec<CollectiveResult>,
    /// Every training job.
    pub training: Vec<TrainingResult>,
    /// With `[[failure]]`: what the failures cost, against the same run without them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_impact: Option<FailureImpact>,
    /// With `[[job]]`: each job's placement and its own flows' figures.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub jobs: Vec<JobResult>,
    /// Messages on host data paths: their latency and its stages; null without `[host]`.
    pub data_path: Option<DataPathSummary>,
    /// At flow level, where the result leaves the range calibrated against packet level.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub flow_level_notes: Vec<String>,
}

/// The load on the links between switches, where load balancing chooses: how many there
/// are, the busiest one's bytes over their mean (1 when even), and how many carried
/// nothing.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct LinkLoad {
    pub links: usize,
    pub max_over_mean: f64,
    pub idle: usize,
}

impl LinkLoad {
    /// The load over `ports`' links between switches; None without any, or with no byte
    /// on them.
    pub fn of(ports: &[fabricsim_fabric::report::PortResult]) -> Option<LinkLoad> {
        let bytes: Vec<u64> = ports
            .iter()
            .filter(|p| p.between_switches)
            .map(|p| p.tx_bytes)
            .collect();
        let total: u64 = bytes.iter().sum();
        if total == 0 {
            return None;
        }
        let mean = total as f64 / bytes.len() as f64;
        Some(LinkLoad {
            links: bytes.len(),
            max_over_mean: *bytes.iter().max().expect("some") as f64 / mean,
            idle: bytes.iter().filter(|&&b| b == 0).count(),
        })
    }
}

/// Messages sent along host data paths: mean end-to-end latency (first stage's start to
/// last stage's end) and, for the first chunk of each message, each stage's mean time
/// (start to end, queueing included), in path order.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct DataPathSummary {
    pub messages: usize,
    pub completed: usize,
    pub mean_latency_ns: f64,
    pub first_chunk_stages: Vec<StageTime>,
}

#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct StageTime {
    pub stage: &'static str,
    pub mean_ns: f64,
}

/// The data-path summary of a run (None when no message took a data path).
pub fn data_path_summary(out: &Outcome) -> Option<DataPathSummary> {
    if out.data_paths.is_empty() {
        return None;
    }
    let flows = &out.report.flows;
    let mut stages: Vec<(&'static str, f64, u64)> = Vec::new();
    let (mut total, mut done) = (0.0, 0usize);
    for m in &out.data_paths {
        let first = &flows[m.chunks[0][0] as usize];
        let last = m.chunks.last().and_then(|c| c.last()).expect("a chunk");
        if let Some(end) = flows[*last as usize].finish {
            total += (end - first.start).ps() as f64 / 1e3;
            done += 1;
        }
        for (k, &id) in m.chunks[0].iter().enumerate() {
            let f = &flows[id as usize];
            let Some(end) = f.finish else { continue };
            let t = (end - f.start).ps() as f64 / 1e3;
            match stages.iter_mut().find(|s| s.0 == m.stages[k]) {
                Some(s) => {
                    s.1 += t;
                    s.2 += 1;
                }
                None => stages.push((m.stages[k], t, 1)),
            }
        }
    }
    Some(DataPathSummary {
        messages: out.data_paths.len(),
        completed: done,
        mean_latency_ns: if done > 0 { total / done as f64 } else { 0.0 },
        first_chunk_stages: stages
            .into_iter()
            .map(|(stage, sum, n)| StageTime {
                stage,
                mean_ns: sum / n as f64,
            })
            .collect(),
    })
}

/// A training job: each simulated iteration's time, the steady iteration (the mean after
/// the first, which starts cold), compute, exposed communication (iteration - compute),
/// and the whole job projected from the steady iteration.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct TrainingResult {
    /// The `[[job]]` the training entry belongs to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    pub ranks: u32,
    pub gradient_bytes: u64,
    pub buckets: u32,
    pub algorithm: &'static str,
    pub overlap: bool,
    pub iteration_ns: Vec<Option<f64>>,
    /// Each rank's iteration time (from its previous iteration's last arrival to this
    /// one's), over every rank and the steady iterations (all of them if there is only
    /// one): the spread over ranks and iterations; null if a message is unfinished.
    pub iteration_spread_ns: Option<Percentiles>,
    /// The job's iteration times (first to last rank) over the steady iterations (all of
    /// them if there is only one): the jitter from iteration to iteration; null if a
    /// message is unfinished.
    pub iteration_percentiles_ns: Option<Percentiles>,
    pub iteration_time_ns: Option<f64>,
    pub compute_ns: f64,
    pub exposed_communication_ns: Option<f64>,
    pub job_iterations: u64,
    pub projected_job_seconds: Option<f64>,
    /// How much longer the whole job runs with one more microsecond per message: the
    /// projected job time of a second run with every NIC's posting latency raised by
    /// 1 us, less this run's. Never negative: a second run that came out faster (packet
    /// level's ECMP and PFC timing shift with the latency) is reported as 0, and
    /// `sensitivity_note` says by how much it was faster.
    pub extra_job_seconds_per_us_per_exchange: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sensitivity_note: Option<String>,
}

/// The training jobs' results, from their messages' completions.
pub fn training_results(out: &Outcome) -> Vec<TrainingResult> {
    out.trainings
        .iter()
        .map(|(t, ranges)| {
            let mut ends: Vec<Option<Time>> = Vec::new();
            for r in ranges {
                let flows = &out.report.flows[r.start as usize..r.end as usize];
                ends.push(
                    flows
                        .iter()
                        .map(|f| f.finish)
                        .collect::<Option<Vec<_>>>()
                        .and_then(|e| e.into_iter().max()),
                );
            }
            let mut previous = Some(t.start);
            let iteration_ns: Vec<Option<f64>> = ends
                .iter()
                .map(|&end| {
                    let d = previous.zip(end).map(|(a, b)| (b - a).ps() as f64 / 1e3);
                    previous = end;
                    d
                })
                .collect();
            let steady: Vec<f64> = iteration_ns.iter().skip(1).flatten().copied().collect();
            let iteration = if iteration_ns.iter().all(Option::is_some) {
                if steady.is_empty() {
                    iteration_ns[0]
                } else {
                    Some(steady.iter().sum::<f64>() / steady.len() as f64)
                }
            } else {
                None
            };
            let compute_ns = t.compute().ps() as f64 / 1e3;
            let iteration_spread_ns = rank_iterations(out, t, ranges).map(Percentiles::of);
            let iteration_percentiles_ns = iteration.map(|_| {
                let pool = if steady.is_empty() {
                    &iteration_ns[..]
                } else {
                    &iteration_ns[1..]
                };
                Percentiles::of(pool.iter().flatten().map(|&x| x.round() as u64).collect())
            });
            TrainingResult {
                job: None,
                ranks: t.ranks.len() as u32,
                gradient_bytes: t.gradient,
                buckets: t.buckets,
                algorithm: t.algorithm.name(),
                overlap: t.overlap,
                iteration_ns,
                iteration_spread_ns,
                iteration_percentiles_ns,
                iteration_time_ns: iteration,
                compute_ns,
                exposed_communication_ns: iteration.map(|i| i - compute_ns),
                job_iterations: t.job_iterations,
                projected_job_seconds: iteration.map(|i| i * 1e-9 * t.job_iterations as f64),
                extra_job_seconds_per_us_per_exchange: None,
                sensitivity_note: None,
            }
        })
        .collect()
}

/// Every rank's iteration times in ns, the first iteration left out when there are more:
/// from the rank's previous last arrival (the job's start for the first) to the last
/// message it receives in the iteration. None if a message is unfinished.
fn rank_iterations(out: &Outcome, t: &Training, ranges: &[Range<u32>]) -> Option<Vec<u64>> {
    let slot: std::collections::BTreeMap<u32, usize> =
        t.ranks.iter().enumerate().map(|(i, h)| (h.0, i)).collect();
    let mut previous = vec![t.start; t.ranks.len()];
    let mut times = Vec::new();
    for (k, r) in ranges.iter().enumerate() {
        let mut end = previous.clone();
        for f in &out.report.flows[r.start as usize..r.end as usize] {
            let finish = f.finish?;
            if let Some(&i) = slot.get(&f.dst) {
                end[i] = end[i].max(finish);
            }
        }
        if k > 0 || ranges.len() == 1 {
            times.extend(end.iter().zip(&previous).map(|(e, p)| (*e - *p).ns()));
        }
        previous = end;
    }
    Some(times)
}

/// Fills each training job's sensitivity from a run with one more microsecond per message.
pub fn add_sensitivity(summary: &mut Summary, plus_one_us: &Outcome) {
    for (t, other) in summary
        .training
        .iter_mut()
        .zip(training_results(plus_one_us))
    {
        (t.extra_job_seconds_per_us_per_exchange, t.sensitivity_note) =
            sensitivity(t.projected_job_seconds, other.projected_job_seconds);
    }
}

/// The extra job seconds per microsecond per exchange from the projected job times of a
/// run and of its run with 1 us more per exchange, never negative, with a note when the
/// second came out faster (see [`TrainingResult::extra_job_seconds_per_us_per_exchange`]).
fn sensitivity(run: Option<f64>, plus_one_us: Option<f64>) -> (Option<f64>, Option<String>) {
    let Some(extra) = run.zip(plus_one_us).map(|(a, b)| b - a) else {
        return (None, None);
    };
    let note = (extra < 0.0).then(|| {
        format!(
            "the run with 1 us more per exchange came out {:.3} s faster over the job: a microsecond's effect here is below the model's run-to-run variation (ECMP and PFC timing shift with the latency), so 0 is reported",
            -extra
        )
    });
    (Some(extra.max(0.0)), note)
}

/// One collective: time from its start to its last message's completion, and nccl-tests'
/// bandwidths in GB/s (10^9 bytes per second): algbw = size / time, busbw = algbw x the
/// op's bus factor. Unfinished collectives have null figures.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct CollectiveResult {
    pub op: &'static str,
    pub algorithm: &'static str,
    pub ranks: u32,
    pub size: u64,
    pub channels: u32,
    pub time_ns: Option<f64>,
    pub algbw_gbps: Option<f64>,
    pub busbw_gbps: Option<f64>,
}

/// The collectives' results, from their messages' completions.
pub fn collective_results(out: &Outcome) -> Vec<CollectiveResult> {
    out.collectives
        .iter()
        .map(|(c, range)| {
            let flows = &out.report.flows[range.start as usize..range.end as usize];
            let end = flows
                .iter()
                .map(|f| f.finish)
                .collect::<Option<Vec<_>>>()
                .and_then(|ends| ends.into_iter().max());
            let time_ns = end.map(|e| (e - c.start).ps() as f64 / 1e3);
            let algbw = time_ns.map(|t| c.size as f64 / t);
            let n = c.ranks.len() as u32;
            CollectiveResult {
                op: c.op.name(),
                algorithm: c.algorithm.name(),
                ranks: n,
                size: c.size,
                channels: c.channels,
                time_ns,
                algbw_gbps: algbw,
                busbw_gbps: algbw.map(|a| a * c.op.bus_factor(n)),
            }
        })
        .collect()
}

/// A detected deadlock: when, and the cycle of egresses, each waiting on the next.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct DeadlockSummary {
    pub detected_at_ns: u64,
    pub cycle: Vec<DeadlockEgress>,
}

impl From<&Deadlock> for DeadlockSummary {
    fn from(d: &Deadlock) -> Self {
        DeadlockSummary {
            detected_at_ns: d.at.ns(),
            cycle: d
                .cycle
                .iter()
                .map(|h| DeadlockEgress {
                    node: h.node,
                    port: h.port,
                    to_node: h.peer_node,
                })
                .collect(),
        }
    }
}

#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct DeadlockEgress {
    pub node: u32,
    pub port: u16,
    pub to_node: u32,
}

/// Nearest-rank percentile of sorted values (the default value if there are none).
pub fn percentile<T: Copy + Default>(sorted: &[T], p: f64) -> T {
    if sorted.is_empty() {
        return T::default();
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Nearest-rank percentile of sorted `(value, weight)` pairs, each standing for `weight`
/// equal values (0 if there are none).
pub fn weighted_percentile(sorted: &[(u64, u64)], p: f64) -> u64 {
    let total: u64 = sorted.iter().map(|v| v.1).sum();
    let rank = (((p / 100.0) * total as f64).ceil() as u64).clamp(1, total.max(1));
    let mut seen = 0;
    for &(value, weight) in sorted {
        seen += weight;
        if seen >= rank {
            return value;
        }
    }
    0
}

/// Whether a flow crossed the network: its ends are in different servers of
/// `gpus_per_node` GPUs, or it is a SHARP contribution (its ends one host, through the
/// switches' aggregation tree). Transfers inside a server (NVLink, NVLink SHARP, a host
/// data path's stages) are not the network's.
pub fn crosses_network(f: &FlowResult, gpus_per_node: u32) -> bool {
    let g = gpus_per_node.max(1);
    !f.local && (f.src == f.dst || f.src / g != f.dst / g)
}

/// Delivered payload x 8 / (last finish - first start) of the flows that crossed the
/// network, in Gb/s.
pub fn goodput_gbps(r: &RunReport, gpus_per_node: u32) -> f64 {
    let done: Vec<_> = r
        .flows
        .iter()
        .filter(|f| f.finish.is_some() && crosses_network(f, gpus_per_node))
        .collect();
    let (Some(first), Some(last)) = (
        done.iter().map(|f| f.start).min(),
        done.iter().filter_map(|f| f.finish).max(),
    ) else {
        return 0.0;
    };
    let bytes: u64 = done.iter().map(|f| f.delivered_bytes).sum();
    if last <= first {
        return 0.0;
    }
    bytes as f64 * 8.0 / ((last - first).ps() as f64 * 1e-12) / 1e9
}

pub fn summary(scenario: &Scenario, out: &Outcome) -> Summary {
    let r = &out.report;
    let gpn = scenario.gpus_per_node;
    // At flow level a compact edge stands for its pieces: counted as they are, each at
    // its piece's completion time, so both levels count and rank the same messages.
    let count: u64 = r.flows.iter().map(|f| f.pieces).sum();
    let completed: u64 = r
        .flows
        .iter()
        .filter(|f| f.finish.is_some())
        .map(|f| f.pieces)
        .sum();
    Summary {
        scenario: scenario.name.clone(),
        fabric: scenario.fabric.name(),
        level: if out.flow_level { "flow" } else { "packet" },
        level_reason: out.level_reason.clone(),
        sim_time_ns: r.sim_time.ns(),
        events: r.events,
        wall_seconds: out.wall_seconds,
        flows: FlowCounts {
            count: count as usize,
            completed: completed as usize,
            bytes: r.flows.iter().map(|f| f.bytes).sum(),
        },
        fct_ns: fct_percentiles(r.flows.iter().filter(|f| crosses_network(f, gpn))),
        goodput_gbps: goodput_gbps(r, gpn),
        drops: r.drops,
        retransmitted_packets: r.retransmitted_packets,
        pfc_pause_frames: r.pfc_pause_frames,
        ecn_marked: r.congestion_marks,
        cnps: r.congestion_notifications,
        pfc_paused_ns: r.ports.iter().map(|p| p.paused.ns()).sum(),
        naks: r.naks,
        retransmission_timeouts: r.timeouts,
        seed: scenario.seed,
        events_per_second: if out.wall_seconds > 0.0 {
            r.events as f64 / out.wall_seconds
        } else {
            0.0
        },
        credit_stall_ns: r.ports.iter().map(|p| p.credit_stall.ns()).sum(),
        peak_queue_bytes: r
            .ports
            .iter()
            .map(|p| p.peak_queue_bytes)
            .max()
            .unwrap_or(0),
        peak_packets_in_flight: r.peak_packets_in_flight,
        peak_reorder_packets: r.peak_reorder_packets,
        duplicates: r.duplicates,
        buffer_overflows: r.buffer_overflows,
        stopped_by_time: r.stopped_by_time,
        watchdog_trips: r.watchdog_trips,
        link_load: LinkLoad::of(&r.ports),
        collectives: collective_results(out),
        training: training_of_jobs(scenario, training_results(out)),
        jobs: job_results(scenario, out),
        failure_impact: None,
        data_path: data_path_summary(out),
        flow_level_notes: out.flow_notes.clone(),
        deadlock: r.deadlock.as_ref().map(DeadlockSummary::from),
        pfc_cycles: r.pfc_cycles.iter().map(DeadlockSummary::from).collect(),
    }
}

/// A `[[job]]`'s placement and what its traffic entries' messages did.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct JobResult {
    pub job: String,
    pub placement: &'static str,
    pub gpus: u32,
    /// Distinct leaves its servers hang from.
    pub leaves: u32,
    pub flows: FlowCounts,
    /// Its messages' completion times (every message, NVLink included).
    pub fct_ns: Percentiles,
    /// From its first message's start to its last completion; null if one is unfinished.
    pub makespan_ns: Option<u64>,
    /// With two jobs or more: its makespan in a run of it alone (the other jobs' entries
    /// left out, every job on the same hosts), and how much longer it took beside them
    /// (makespan / alone - 1): the interference.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alone_makespan_ns: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slowdown_from_sharing: Option<f64>,
}

/// What a run's failures cost: its figures against a healthy twin's (the same scenario
/// without `[[failure]]`).
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct FailureImpact {
    /// First start to last completion, with the failures and without (null if a flow is
    /// unfinished).
    pub makespan_ns: Option<u64>,
    pub healthy_makespan_ns: Option<u64>,
    /// Flows (messages) that finished later than in the healthy run, or not at all.
    pub flows_delayed: u64,
    /// The largest delay of a finished flow.
    pub max_flow_delay_ns: u64,
    /// Packets lost (a failed switch's) and packets sent again.
    pub packets_dropped: u64,
    pub retransmitted_packets: u64,
    /// Goodput lost: the healthy run's goodput less this one's.
    pub goodput_lost_gbps: f64,
}

impl FailureImpact {
    pub fn of(run: &Summary, out: &Outcome, healthy: &Summary, healthy_out: &Outcome) -> Self {
        let (mut delayed, mut worst) = (0, 0);
        for (f, h) in out.report.flows.iter().zip(&healthy_out.report.flows) {
            match (f.finish, h.finish) {
                (Some(a), Some(b)) if a > b => {
                    delayed += 1;
                    worst = worst.max((a - b).ns());
                }
                (None, _) => delayed += 1,
                _ => {}
            }
        }
        FailureImpact {
            makespan_ns: makespan(out.report.flows.iter()),
            healthy_makespan_ns: makespan(healthy_out.report.flows.iter()),
            flows_delayed: delayed,
            max_flow_delay_ns: worst,
            packets_dropped: run.drops,
            retransmitted_packets: run.retransmitted_packets,
            goodput_lost_gbps: healthy.goodput_gbps - run.goodput_gbps,
        }
    }
}

/// From the first flow's start to the last one's completion; None if one is unfinished
/// (or there are none).
fn makespan<'a>(flows: impl Iterator<Item = &'a FlowResult> + Clone) -> Option<u64> {
    let first = flows.clone().map(|f| f.start).min()?;
    let last = flows
        .map(|f| f.finish)
        .collect::<Option<Vec<_>>>()?
        .into_iter()
        .max()?;
    Some((last - first).ns())
}

/// Fills job `j`'s figures alone from the summary of a run of it alone.
pub fn add_alone(summary: &mut Summary, j: usize, alone: &Summary) {
    let (Some(job), Some(by_itself)) = (summary.jobs.get_mut(j), alone.jobs.get(j)) else {
        return;
    };
    job.alone_makespan_ns = by_itself.makespan_ns;
    job.slowdown_from_sharing = job
        .makespan_ns
        .zip(by_itself.makespan_ns)
        .filter(|(_, a)| *a > 0)
        .map(|(m, a)| m as f64 / a as f64 - 1.0);
}

/// Each training result named with the job its entry belongs to (training entries are
/// expanded in entry order).
fn training_of_jobs(scenario: &Scenario, mut training: Vec<TrainingResult>) -> Vec<TrainingResult> {
    let owners = scenario
        .traffic
        .iter()
        .zip(&scenario.traffic_jobs)
        .filter(|(t, _)| matches!(t, Traffic::Training(_)))
        .map(|(_, owner)| owner.map(|j| scenario.jobs[j].name.clone()));
    for (r, owner) in training.iter_mut().zip(owners) {
        r.job = owner;
    }
    training
}

/// Every `[[job]]`'s figures, from the messages of the traffic entries it owns.
fn job_results(scenario: &Scenario, out: &Outcome) -> Vec<JobResult> {
    scenario
        .jobs
        .iter()
        .enumerate()
        .map(|(j, job)| {
            let flows: Vec<&FlowResult> = out
                .entries
                .iter()
                .zip(&scenario.traffic_jobs)
                .filter(|(_, owner)| **owner == Some(j))
                .flat_map(|(r, _)| &out.report.flows[r.start as usize..r.end as usize])
                .collect();
            JobResult {
                job: job.name.clone(),
                placement: job.placement.name(),
                gpus: job.hosts.len() as u32,
                leaves: job.leaves,
                flows: FlowCounts {
                    count: flows.iter().map(|f| f.pieces as usize).sum(),
                    completed: flows
                        .iter()
                        .filter(|f| f.finish.is_some())
                        .map(|f| f.pieces as usize)
                        .sum(),
                    bytes: flows.iter().map(|f| f.bytes).sum(),
                },
                fct_ns: fct_percentiles(flows.iter().copied()),
                makespan_ns: makespan(flows.iter().copied()),
                alone_makespan_ns: None,
                slowdown_from_sharing: None,
            }
        })
        .collect()
}

/// flows.csv: `flow_id,src,dst,bytes,start_ns,finish_ns,fct_ns,slowdown`; unfinished
/// flows have empty finish, fct and slowdown. Slowdown is FCT / ideal FCT, not floored:
/// below 1 would mean the ideal is wrong.
pub fn flows_csv(r: &RunReport) -> String {
    let mut s = String::from("flow_id,src,dst,bytes,start_ns,finish_ns,fct_ns,slowdown\n");
    for (i, f) in r.flows.iter().enumerate() {
        let _ = write!(
            s,
            "{i},{},{},{},{:.3},",
            f.src,
            f.dst,
            f.bytes,
            ns3(f.start.ps())
        );
        match f.finish {
            Some(t) => {
                let fct = (t - f.start).ps();
                let slowdown = fct as f64 / f.ideal.ps() as f64;
                let _ = writeln!(s, "{:.3},{:.3},{:.4}", ns3(t.ps()), ns3(fct), slowdown);
            }
            None => s.push_str(",,\n"),
        }
    }
    s
}

fn ns3(ps: u64) -> f64 {
    ps as f64 / 1000.0
}

/// ports.csv: one row per directed port.
pub fn ports_csv(r: &RunReport) -> String {
    let mut s = String::from("node,port,peer_node,tx_bytes,tx_packets,credit_packets,peak_queue_bytes,peak_input_bytes,credit_stall_ns,pause_frames,paused_ns,drops,ecn_marks\n");
    for p in &r.ports {
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{},{:.3},{},{:.3},{},{}",
            p.node,
            p.port,
            p.peer_node,
            p.tx_bytes,
            p.tx_packets,
            p.credit_packets,
            p.peak_queue_bytes,
            p.peak_input_bytes,
            ns3(p.credit_stall.ps()),
            p.pause_frames,
            ns3(p.paused.ps()),
            p.drops,
            p.ecn_marks
        );
    }
    s
}

/// rates.csv: `time_ns,flow_id,event,rate_gbps,sent_gbps` in time order. `event` is `cut`
/// (a DCQCN rate cut; sent_gbps empty) or `sample` (periodic: the pacing rate, and the
/// payload rate sent over the interval just ended).
pub fn rates_csv(rates: &[RateSample]) -> String {
    let mut s = String::from("time_ns,flow_id,event,rate_gbps,sent_gbps\n");
    for r in rates {
        let _ = writeln!(
            s,
            "{:.3},{},{},{:.6},{}",
            ns3(r.time.ps()),
            r.flow,
            if r.sent.is_some() { "sample" } else { "cut" },
            r.rate.bps() as f64 / 1e9,
            r.sent
                .map_or(String::new(), |b| format!("{:.6}", b.bps() as f64 / 1e9))
        );
    }
    s
}

/// Every file a results folder can hold.
const RESULT_FILES: [&str; 4] = ["summary.json", "flows.csv", "ports.csv", "rates.csv"];

/// Writes summary.json, flows.csv, ports.csv and (RoCEv2) rates.csv as the folder `dir`,
/// replacing whatever it held, atomically (see [`output::write_folder`]).
pub fn write_out_dir(dir: &Path, summary: &Summary, out: &Outcome) -> std::io::Result<()> {
    let r = &out.report;
    let json = serde_json::to_string_pretty(summary).expect("summary serialises");
    let mut files = vec![
        ("summary.json", format!("{json}\n").into_bytes()),
        ("flows.csv", flows_csv(r).into_bytes()),
        ("ports.csv", ports_csv(r).into_bytes()),
    ];
    if summary.fabric == FabricKind::Rocev2.name() {
        files.push(("rates.csv", rates_csv(&out.rates).into_bytes()));
    }
    output::write_folder(dir, &files, &RESULT_FILES)
}

impl Summary {
    /// The one-line account `fabricsim run` prints without `--json`.
    pub fn one_line(&self, sim_time: Time) -> String {
        format!(
            "{}: {} of {} flows completed in {} simulated; goodput {:.2} Gb/s; FCT p50 {} ns, p99 {} ns; {} events in {:.3} s ({:.1} M events/s)",
            self.scenario,
            self.flows.completed,
            self.flows.count,
            sim_time,
            self.goodput_gbps,
            self.fct_ns.p50,
            self.fct_ns.p99,
            self.events,
            self.wall_seconds,
            self.events_per_second / 1e6
        )
    }

    /// Why the run ended with messages unfinished (a deadlock, `stop_at`, a pause storm
    /// without end), or `None` if every message completed.
    pub fn unfinished_note(&self) -> Option<String> {
        let unfinished = self.flows.count - self.flows.completed;
        (unfinished > 0).then(|| {
            format!(
                "{unfinished} of {} flows unfinished at {} ns ({})",
                self.flows.count,
                self.sim_time_ns,
                if self.deadlock.is_some() {
                    "stopped by a deadlock"
                } else if self.stopped_by_time {
                    "stop_at reached"
                } else {
                    "no event left to run"
                }
            )
        })
    }

    /// What to tell the user when cycles of paused queues formed and the PFC watchdog
    /// was left to break them, or `None`.
    pub fn pfc_cycles_note(&self) -> Option<String> {
        let first = self.pfc_cycles.first()?;
        Some(format!(
            "{} cycle(s) of PFC-paused queues formed (the first at {} ns); with the PFC watchdog on they are not permanent, so the run went on ({} watchdog trips)",
            self.pfc_cycles.len(),
            first.detected_at_ns,
            self.watchdog_trips
        ))
    }

    /// What to tell the user when a deadlock stopped the run, or `None`.
    pub fn deadlock_note(&self) -> Option<String> {
        let d = self.deadlock.as_ref()?;
        let hops: Vec<String> = d
            .cycle
            .iter()
            .map(|h| format!("node {} port {} -> node {}", h.node, h.port, h.to_node))
            .collect();
        Some(format!(
            "deadlock at {} ns ({}); the run stopped. Cycle of blocked egresses, each waiting on the next switch's buffer: {}",
            d.detected_at_ns,
            if self.fabric == FabricKind::Infiniband.name() {
                "a credit loop"
            } else {
                "a cycle of PFC-paused queues"
            },
            hops.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::{percentile, sensitivity, weighted_percentile};

    #[test]
    fn a_weighted_percentile_is_the_plain_one_over_the_repeated_values() {
        let pairs = [(3, 1), (5, 4), (9, 2), (20, 1)];
        let mut plain: Vec<u64> = pairs
            .iter()
            .flat_map(|&(v, w)| std::iter::repeat_n(v, w as usize))
            .collect();
        plain.sort_unstable();
        for p in [0.0, 10.0, 12.5, 50.0, 62.5, 87.5, 99.0, 100.0] {
            assert_eq!(
                weighted_percentile(&pairs, p),
                percentile(&plain, p),
                "p{p}"
            );
        }
        assert_eq!(weighted_percentile(&[], 50.0), 0);
    }

    #[test]
    fn a_microsecond_more_per_exchange_never_saves_time() {
        // Slower with the microsecond: the difference, no note.
        assert_eq!(sensitivity(Some(100.0), Some(103.5)), (Some(3.5), None));
        // Faster by noise: 0, and the note says by how much.
        let (extra, note) = sensitivity(Some(100.0), Some(99.25));
        assert_eq!(extra, Some(0.0));
        assert!(note.unwrap().contains("0.750 s faster"));
        // An unfinished run has no figure.
        assert_eq!(sensitivity(None, Some(1.0)), (None, None));
    }
}
