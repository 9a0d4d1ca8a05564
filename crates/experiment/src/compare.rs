//! `fabricsim compare`: one scenario on both fabrics (each on its own design when the
//! scenario has a `[cluster]`), priced, with the recommendation; the side-by-side table
//! and the JSON object of SCENARIO.md v2.

use crate::decision::uncertainty::{self, Surface};
use crate::decision::{self, Design, NetworkCost, Recommendation, Tuning};
use crate::results::{Percentiles, Summary};
use crate::runner::{self, Outcome};
use crate::scenario::Scenario;
use serde::Serialize;
use std::fmt::Write as _;

/// One fabric's run, its network's design and its cost.
pub struct FabricRun {
    pub scenario: Scenario,
    pub summary: Summary,
    pub outcome: Outcome,
    pub design: Design,
    pub cost: NetworkCost,
}

/// Both fabrics and the decision between them.
pub struct Comparison {
    /// InfiniBand, then RoCEv2.
    pub runs: [FabricRun; 2],
    pub recommendation: Recommendation,
    /// RoCEv2 with the tuner's settings (`compare --tune`), and what the tuner found.
    pub tuned: Option<(FabricRun, Tuning)>,
    /// What the recommendation was decided from, to decide again with a tuned RoCEv2.
    scenario: Scenario,
    surface: Option<Surface>,
    ends_unfinished: bool,
}

/// R of SCENARIO.md v2: the run summary plus the design and the cost.
#[derive(Serialize)]
struct FabricJson<'a> {
    #[serde(flatten)]
    summary: &'a Summary,
    design: &'a Design,
    cost: &'a NetworkCost,
}

/// `{"infiniband": R, "rocev2": R, "recommendation": D}`.
#[derive(Serialize)]
struct ComparisonJson<'a> {
    infiniband: FabricJson<'a>,
    rocev2: FabricJson<'a>,
    /// RoCEv2 with the tuner's settings, with `compare --tune`.
    #[serde(rename = "rocev2-tuned", skip_serializing_if = "Option::is_none")]
    rocev2_tuned: Option<TunedJson<'a>>,
    recommendation: &'a Recommendation,
}

/// The tuned candidate's R, with what the tuner found.
#[derive(Serialize)]
struct TunedJson<'a> {
    #[serde(flatten)]
    run: FabricJson<'a>,
    tuning: &'a Tuning,
}

impl Comparison {
    /// The JSON object `compare --json` prints and the report's summary.json holds.
    pub fn to_json(&self) -> String {
        let r = |i: usize| FabricJson {
            summary: &self.runs[i].summary,
            design: &self.runs[i].design,
            cost: &self.runs[i].cost,
        };
        let v = ComparisonJson {
            infiniband: r(0),
            rocev2: r(1),
            rocev2_tuned: self.tuned.as_ref().map(|(run, tuning)| TunedJson {
                run: FabricJson {
                    summary: &run.summary,
                    design: &run.design,
                    cost: &run.cost,
                },
                tuning,
            }),
            recommendation: &self.recommendation,
        };
        serde_json::to_string_pretty(&v).expect("results serialise") + "\n"
    }

    pub fn summaries(&self) -> [&Summary; 2] {
        [&self.runs[0].summary, &self.runs[1].summary]
    }
}

/// Runs `scenario` on InfiniBand and on RoCEv2 (training jobs with their +1 us
/// sensitivity run; RoCEv2 rates recorded if `rates`; each catalog latency of a design
/// at the ends of its range), prices both and decides across the ranges. The runs go up
/// to `threads` at a time, the fabrics' main runs first; the comparison is the same for
/// any number of threads.
pub fn run_both(scenario: &Scenario, rates: bool, threads: usize) -> Result<Comparison, String> {
    runner::require_traffic(scenario)?;
    let fabrics = scenario
        .compared_fabrics()
        .map(|s| runner::recording_rates(&s, rates));
    if ![1024, 2048, 4096].contains(&fabrics[1].roce.mtu) {
        return Err(format!(
            "fabric.mtu = {}: RoCEv2 needs 1024, 2048 or 4096, so this scenario cannot be compared",
            fabrics[1].roce.mtu
        ));
    }
    let trains = runner::has_training(scenario);
    let plus = fabrics.each_ref().map(runner::plus_one_us_per_exchange);
    let run_inputs = uncertainty::run_inputs(scenario);
    let ends = uncertainty::end_runs(&run_inputs);
    let end_scenarios: Vec<Scenario> = ends
        .iter()
        .map(|e| runner::recording_rates(&e.scenario(&fabrics, &run_inputs), false))
        .collect();
    let mut jobs: Vec<_> = fabrics.iter().map(|s| (s, None)).collect();
    if trains {
        jobs.extend(plus.iter().map(|s| (s, None)));
    }
    jobs.extend(end_scenarios.iter().map(|s| (s, None)));
    let mut outcomes = runner::run_all(&jobs, threads).into_iter();
    let mains = [outcomes.next(), outcomes.next()].map(|o| o.expect("two main runs"));
    let pluses = if trains {
        [outcomes.next(), outcomes.next()]
    } else {
        [None, None]
    };
    let end_hours: Vec<_> = ends
        .iter()
        .zip(&end_scenarios)
        .zip(outcomes)
        .map(|((e, s), o)| {
            let hours = o
                .ok()
                .and_then(|o| decision::job_hours(&runner::summarize(s, &o, None), &s.cost));
            (*e, hours)
        })
        .collect();
    let mut runs = Vec::with_capacity(2);
    for ((s, outcome), sensitivity) in fabrics.into_iter().zip(mains).zip(pluses) {
        let outcome = outcome?;
        let sensitivity = sensitivity.transpose()?;
        let summary = runner::summarize(&s, &outcome, sensitivity.as_ref());
        let topo = s.build_topology()?;
        let (design, cost) = decision::price(&s, s.fabric, &topo, &summary);
        runs.push(FabricRun {
            scenario: s,
            summary,
            outcome,
            design,
            cost,
        });
    }
    let runs: [FabricRun; 2] = runs.try_into().ok().expect("two fabrics");
    let costs = [&runs[0].cost, &runs[1].cost];
    let surface = Surface::new(scenario, costs, run_inputs, &end_hours);
    let ends_unfinished = end_hours.iter().any(|e| e.1.is_none());
    let recommendation = decision::recommend(
        scenario,
        [&runs[0].summary, &runs[1].summary],
        costs,
        surface.as_ref(),
        ends_unfinished,
        None,
    );
    Ok(Comparison {
        runs,
        recommendation,
        tuned: None,
        scenario: scenario.clone(),
        surface,
        ends_unfinished,
    })
}

impl Comparison {
    /// Adds RoCEv2 run with the tuner's settings (`scenario`, at the level RoCEv2 ran)
    /// as a third candidate, and decides again among the three.
    pub fn with_tuned(
        mut self,
        scenario: Scenario,
        mut tuning: Tuning,
        threads: usize,
    ) -> Result<Comparison, String> {
        let mut s = scenario;
        s.level = self.runs[1].scenario.level;
        s.level_reason = self.runs[1].scenario.level_reason.clone();
        let outcome = runner::run_all(&[(&s, None)], threads)
            .pop()
            .expect("one run")?;
        let summary = runner::summarize(&s, &outcome, None);
        let topo = s.build_topology()?;
        let (design, cost) = decision::price(&s, s.fabric, &topo, &summary);
        let run = FabricRun {
            scenario: s,
            summary,
            outcome,
            design,
            cost,
        };
        // The tuned row is this run's (at compare's level); the robust worst is the tuner's,
        // and never better than this run.
        if let Some(h) = run.cost.job_hours {
            tuning.tuned_hours = h;
            tuning.robust_hours = tuning.robust_hours.max(h);
        }
        let surface = self
            .surface
            .take()
            .map(|x| x.with_tuned(tuning.robust_hours));
        self.recommendation = decision::recommend(
            &self.scenario,
            self.summaries(),
            [&self.runs[0].cost, &self.runs[1].cost],
            surface.as_ref(),
            self.ends_unfinished,
            Some((&tuning, &run.cost)),
        );
        self.surface = surface;
        self.tuned = Some((run, tuning));
        Ok(self)
    }
}

/// A row of the table: its name, both fabrics' figures, and whether RoCEv2 / InfiniBand
/// means something.
pub type Row = (String, f64, f64, bool);

/// The network rows: design and cost.
fn network_rows(c: &Comparison) -> Vec<Row> {
    let [a, b] = [&c.runs[0], &c.runs[1]];
    let mut rows: Vec<Row> = vec![
        (
            "tiers".into(),
            a.design.tiers as f64,
            b.design.tiers as f64,
            false,
        ),
        (
            "switches".into(),
            a.design.switches as f64,
            b.design.switches as f64,
            true,
        ),
        (
            "links".into(),
            a.design.links as f64,
            b.design.links as f64,
            false,
        ),
        (
            "network capex (USD)".into(),
            a.cost.capex_usd.round(),
            b.cost.capex_usd.round(),
            true,
        ),
        (
            "network power (kW, PUE)".into(),
            a.cost.power_kw,
            b.cost.power_kw,
            true,
        ),
        (
            "network opex (USD/year)".into(),
            a.cost.opex_usd_per_year.round(),
            b.cost.opex_usd_per_year.round(),
            true,
        ),
        (
            "network lifetime (USD)".into(),
            a.cost.lifetime_usd.round(),
            b.cost.lifetime_usd.round(),
            true,
        ),
    ];
    if let (Some(x), Some(y)) = (a.cost.job_hours, b.cost.job_hours) {
        rows.push(("job time (h)".into(), x, y, true));
    }
    if let (Some(x), Some(y)) = (a.cost.job_cost_usd, b.cost.job_cost_usd) {
        rows.push(("job cost (USD)".into(), x, y, true));
    }
    if let (Some(x), Some(y)) = (&a.summary.link_load, &b.summary.link_load) {
        rows.push((
            "busiest switch link / mean".into(),
            x.max_over_mean,
            y.max_over_mean,
            true,
        ));
    }
    rows
}

/// The workload rows: collectives, training jobs and data paths.
fn workload_rows(c: &Comparison) -> Vec<Row> {
    let [a, b] = c.summaries();
    let mut rows: Vec<Row> = Vec::new();
    let or0 = |x: Option<f64>| x.unwrap_or(f64::NAN);
    for (i, (x, y)) in a.collectives.iter().zip(&b.collectives).enumerate() {
        let name = format!("#{i} {} {} {}B", x.op, x.algorithm, x.size);
        rows.push((
            format!("{name} time (us)"),
            or0(x.time_ns) / 1e3,
            or0(y.time_ns) / 1e3,
            true,
        ));
        rows.push((
            format!("{name} algbw (GB/s)"),
            or0(x.algbw_gbps),
            or0(y.algbw_gbps),
            true,
        ));
        rows.push((
            format!("{name} busbw (GB/s)"),
            or0(x.busbw_gbps),
            or0(y.busbw_gbps),
            true,
        ));
    }
    for (i, (x, y)) in a.training.iter().zip(&b.training).enumerate() {
        let n = match &x.job {
            Some(job) => format!("training #{i} (job {job})"),
            None => format!("training #{i}"),
        };
        rows.push((
            format!("{n} iteration (ms)"),
            or0(x.iteration_time_ns) / 1e6,
            or0(y.iteration_time_ns) / 1e6,
            true,
        ));
        // Jitter: iteration to iteration, and over ranks, beside the mean.
        let ms = |p: &Option<Percentiles>, k: usize| {
            p.as_ref()
                .map_or(f64::NAN, |p| [p.p50, p.p99, p.max][k] as f64 / 1e6)
        };
        for (k, what) in ["iteration p50", "iteration p99", "iteration max"]
            .iter()
            .enumerate()
        {
            let (u, v) = (&x.iteration_percentiles_ns, &y.iteration_percentiles_ns);
            rows.push((format!("{n} {what} (ms)"), ms(u, k), ms(v, k), true));
        }
        for (k, what) in [(1, "rank iteration p99"), (2, "rank iteration max")] {
            let (u, v) = (&x.iteration_spread_ns, &y.iteration_spread_ns);
            rows.push((format!("{n} {what} (ms)"), ms(u, k), ms(v, k), true));
        }
        rows.push((
            format!("{n} compute (ms)"),
            x.compute_ns / 1e6,
            y.compute_ns / 1e6,
            false,
        ));
        rows.push((
            format!("{n} exposed comm (ms)"),
            or0(x.exposed_communication_ns) / 1e6,
            or0(y.exposed_communication_ns) / 1e6,
            true,
        ));
        rows.push((
            format!("{n} job (h)"),
            or0(x.projected_job_seconds) / 3600.0,
            or0(y.projected_job_seconds) / 3600.0,
            true,
        ));
        rows.push((
            format!("{n} +1us/exchange (s)"),
            or0(x.extra_job_seconds_per_us_per_exchange),
            or0(y.extra_job_seconds_per_us_per_exchange),
            false,
        ));
        // What those seconds cost: the cluster's GPUs and network for that long.
        let usd = |k: usize, extra: Option<f64>| {
            let cost = &c.runs[k].cost;
            or0(extra) / 3600.0
                * (cost.gpus as f64 * cost.gpu_usd_per_hour + cost.network_usd_per_hour)
        };
        rows.push((
            format!("{n} +1us/exchange (USD)"),
            usd(0, x.extra_job_seconds_per_us_per_exchange),
            usd(1, y.extra_job_seconds_per_us_per_exchange),
            false,
        ));
    }
    for (x, y) in a.jobs.iter().zip(&b.jobs) {
        let n = format!(
            "job {} ({} GPUs {} over {} leaves)",
            x.job, x.gpus, x.placement, x.leaves
        );
        let ms = |v: Option<u64>| v.map_or(f64::NAN, |v| v as f64 / 1e6);
        rows.push((
            format!("{n} makespan (ms)"),
            ms(x.makespan_ns),
            ms(y.makespan_ns),
            true,
        ));
        rows.push((
            format!("{n} FCT p99 (us)"),
            x.fct_ns.p99 as f64 / 1e3,
            y.fct_ns.p99 as f64 / 1e3,
            true,
        ));
    }
    if let (Some(x), Some(y)) = (&a.data_path, &b.data_path) {
        rows.push((
            "data path latency (us)".into(),
            x.mean_latency_ns / 1e3,
            y.mean_latency_ns / 1e3,
            true,
        ));
    }
    rows
}

/// The flow rows of every run.
fn flow_rows(c: &Comparison) -> Vec<Row> {
    let [a, b] = c.summaries();
    let us = |ns: u64| ns as f64 / 1e3;
    vec![
        (
            "flows completed".into(),
            a.flows.completed as f64,
            b.flows.completed as f64,
            false,
        ),
        (
            "simulated time (us)".into(),
            us(a.sim_time_ns),
            us(b.sim_time_ns),
            true,
        ),
        (
            "goodput (Gb/s)".into(),
            a.goodput_gbps,
            b.goodput_gbps,
            true,
        ),
        (
            "FCT p50 (us)".into(),
            us(a.fct_ns.p50),
            us(b.fct_ns.p50),
            true,
        ),
        (
            "FCT p99 (us)".into(),
            us(a.fct_ns.p99),
            us(b.fct_ns.p99),
            true,
        ),
        (
            "FCT max (us)".into(),
            us(a.fct_ns.max),
            us(b.fct_ns.max),
            true,
        ),
        (
            "peak queue (KiB)".into(),
            a.peak_queue_bytes as f64 / 1024.0,
            b.peak_queue_bytes as f64 / 1024.0,
            true,
        ),
        ("drops".into(), a.drops as f64, b.drops as f64, false),
        (
            "retransmitted packets".into(),
            a.retransmitted_packets as f64,
            b.retransmitted_packets as f64,
            false,
        ),
        (
            "credit stall (us)".into(),
            us(a.credit_stall_ns),
            us(b.credit_stall_ns),
            false,
        ),
        (
            "PFC pause frames".into(),
            a.pfc_pause_frames as f64,
            b.pfc_pause_frames as f64,
            false,
        ),
        (
            "PFC paused (us)".into(),
            us(a.pfc_paused_ns),
            us(b.pfc_paused_ns),
            false,
        ),
        (
            "FECN / ECN marked".into(),
            a.ecn_marked as f64,
            b.ecn_marked as f64,
            false,
        ),
        ("BECN / CNP".into(), a.cnps as f64, b.cnps as f64, false),
        ("events".into(), a.events as f64, b.events as f64, false),
    ]
}

/// Every row of the side-by-side table that the scenario and seed decide: network,
/// workload, flows (the report's; nothing that differs between two runs of it).
pub fn rows(c: &Comparison) -> Vec<Row> {
    let mut rows = network_rows(c);
    rows.extend(workload_rows(c));
    rows.extend(flow_rows(c));
    rows
}

/// The rows and this machine's wall time per run (the CLI's table).
fn rows_with_wall_time(c: &Comparison) -> Vec<Row> {
    let mut rows = rows(c);
    let [a, b] = c.summaries();
    rows.push((
        "wall time (s)".into(),
        a.wall_seconds,
        b.wall_seconds,
        false,
    ));
    rows
}

/// The recommendation, then the side-by-side table.
pub fn table(c: &Comparison) -> String {
    let r = &c.recommendation;
    let v = &r.across_ranges;
    let verdict = match v.verdict {
        "too-close" => format!(
            "too close to call (cheapest at the base values: {})",
            r.fabric
        ),
        f if f != r.fabric => format!("{f} across the ranges ({} at the base values)", r.fabric),
        f => f.to_string(),
    };
    let mut s = format!(
        "{}: InfiniBand vs RoCEv2\nrecommendation: {verdict}\n",
        c.runs[0].summary.scenario
    );
    for line in &r.reasons {
        let _ = writeln!(s, "  - {line}");
    }
    s.push_str("where it would flip:\n");
    for line in &r.flip {
        let _ = writeln!(s, "  - {line}");
    }
    if let Some((run, t)) = &c.tuned {
        let rows = [
            (
                "rocev2, untuned",
                c.runs[1].cost.job_hours,
                c.runs[1].cost.job_cost_usd,
            ),
            ("rocev2, tuned", run.cost.job_hours, run.cost.job_cost_usd),
            (
                "rocev2, tuned at its robust worst",
                Some(t.robust_hours),
                run.cost
                    .job_hours
                    .zip(run.cost.job_cost_usd)
                    .map(|(h, usd)| usd / h * t.robust_hours),
            ),
            (
                "infiniband",
                c.runs[0].cost.job_hours,
                c.runs[0].cost.job_cost_usd,
            ),
        ];
        let _ = writeln!(
            s,
            "RoCEv2 tuned by `fabricsim tune` ({} trials, job time):\n  {:<36}{:>16}{:>16}",
            t.trials, "", "job (h)", "job (USD)"
        );
        for (name, h, usd) in rows {
            let _ = writeln!(
                s,
                "  {name:<36}{:>16}{:>16}",
                num(h.unwrap_or(f64::NAN)),
                num(usd.unwrap_or(f64::NAN))
            );
        }
    }
    let rows = rows_with_wall_time(c);
    let w = rows.iter().map(|r| r.0.len()).max().unwrap_or(0).max(36);
    let _ = writeln!(
        s,
        "\n{:<w$}{:>16}{:>16}{:>12}",
        "", "infiniband", "rocev2", "rocev2/ib"
    );
    for (name, a, b, ratio) in rows {
        let r = if ratio && a > 0.0 && b.is_finite() {
            format!("{:.3}", b / a)
        } else {
            String::new()
        };
        let _ = writeln!(s, "{name:<w$}{:>16}{:>16}{r:>12}", num(a), num(b));
    }
    for run in &c.runs {
        if let Some(d) = &run.summary.deadlock {
            let _ = writeln!(
                s,
                "{}: deadlock detected at {} ns",
                run.summary.fabric, d.detected_at_ns
            );
        }
    }
    s
}

/// Integers without decimals, other figures with three; a missing figure as "-".
pub fn num(v: f64) -> String {
    if !v.is_finite() {
        "-".into()
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
    }
}
