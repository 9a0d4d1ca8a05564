//! `fabricsim compare`: one scenario on both fabrics (each on its own design when the
//! scenario has a `[cluster]`), priced, with the recommendation; the side-by-side table
//! and the JSON object of SCENARIO.md v2.

use crate::decision::uncertainty::{self, Surface};
use crate::decision::{self, Candidates, Design, NetworkCost, Recommendation, Tuning};
use crate::results::{Percentiles, Summary};
use crate::runner::{self, Outcome};
use crate::scenario::{Scenario, INFINIBAND, ROCEV2, ROCEV2_ADAPTIVE};
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
    /// Ethernet with adaptive routing or spraying, when `[compare]` names
    /// "rocev2-adaptive".
    pub adaptive: Option<FabricRun>,
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

/// A candidate's R.
fn r(run: &FabricRun) -> FabricJson<'_> {
    FabricJson {
        summary: &run.summary,
        design: &run.design,
        cost: &run.cost,
    }
}

/// `{"infiniband": R, "rocev2": R, "recommendation": D}`, and R of each further
/// candidate.
#[derive(Serialize)]
struct ComparisonJson<'a> {
    infiniband: FabricJson<'a>,
    rocev2: FabricJson<'a>,
    /// Ethernet with adaptive routing or spraying, when `[compare]` names it.
    #[serde(rename = "rocev2-adaptive", skip_serializing_if = "Option::is_none")]
    rocev2_adaptive: Option<FabricJson<'a>>,
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
        let v = ComparisonJson {
            infiniband: r(&self.runs[0]),
            rocev2: r(&self.runs[1]),
            rocev2_adaptive: self.adaptive.as_ref().map(r),
            rocev2_tuned: self.tuned.as_ref().map(|(run, tuning)| TunedJson {
                run: r(run),
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

/// Runs `scenario` on InfiniBand and on RoCEv2, and on Ethernet with adaptive routing
/// when `[compare]` names "rocev2-adaptive" (each with the runs `run` makes beside its
/// main one: a training job's +1 us run, each job alone, the run without failures;
/// RoCEv2 rates recorded if `rates`; each catalog latency of a design at the ends of its
/// range), prices each and decides across the ranges. The runs go up to
/// `threads` at a time, the main runs first; the comparison is the same for any number
/// of threads.
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
    // The adaptive candidate runs at RoCEv2's level, so that like is compared with like.
    let adaptive = scenario.adaptive_candidate().map(|mut s| {
        s.level = fabrics[1].level;
        s.level_reason = fabrics[1].level_reason.clone();
        runner::recording_rates(&s, rates)
    });
    let mains: Vec<&Scenario> = fabrics.iter().chain(&adaptive).collect();
    // Each candidate's runs beside its main one: a training job's +1 us run, each job
    // alone, the run without failures.
    let beside: Vec<runner::Beside> = mains.iter().map(|s| runner::Beside::of(s)).collect();
    if let Some(b) = beside.first() {
        b.say();
    }
    let beside_runs: Vec<&Scenario> = beside.iter().flat_map(runner::Beside::scenarios).collect();
    let run_inputs = uncertainty::run_inputs(scenario);
    let ends = uncertainty::end_runs(&run_inputs, adaptive.is_some());
    let end_scenarios: Vec<Scenario> = ends
        .iter()
        .map(|e| runner::recording_rates(&e.scenario(&mains, &run_inputs), false))
        .collect();
    let jobs: Vec<_> = mains
        .iter()
        .copied()
        .chain(beside_runs.iter().copied())
        .chain(&end_scenarios)
        .map(|s| (s, None))
        .collect();
    let mut outcomes = runner::run_all(&jobs, threads).into_iter();
    let main_outcomes: Vec<_> = outcomes.by_ref().take(mains.len()).collect();
    let beside_outcomes: Vec<_> = outcomes.by_ref().take(beside_runs.len()).collect();
    let mut beside_outcomes = beside_outcomes.into_iter();
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
    let mut runs = Vec::with_capacity(mains.len());
    for ((s, outcome), b) in mains.into_iter().zip(main_outcomes).zip(&beside) {
        let outcome = outcome?;
        let summary = b.summarize(s, &outcome, &mut beside_outcomes)?;
        runs.push(fabric_run(s.clone(), outcome, summary)?);
    }
    let adaptive = (runs.len() == 3).then(|| runs.pop().expect("three runs"));
    let runs: [FabricRun; 2] = runs.try_into().ok().expect("two fabrics");
    let costs = [&runs[0].cost, &runs[1].cost];
    let surface = Surface::new(
        scenario,
        costs,
        adaptive.as_ref().map(|a| &a.cost),
        run_inputs,
        &end_hours,
    );
    let ends_unfinished = end_hours.iter().any(|e| e.1.is_none());
    let recommendation = decision::recommend(
        scenario,
        [&runs[0].summary, &runs[1].summary],
        costs,
        Candidates {
            adaptive: adaptive.as_ref().map(|a| (&a.summary, &a.cost)),
            tuned: None,
        },
        surface.as_ref(),
        ends_unfinished,
    );
    Ok(Comparison {
        runs,
        adaptive,
        recommendation,
        tuned: None,
        scenario: scenario.clone(),
        surface,
        ends_unfinished,
    })
}

/// One candidate's run with its summary, its design and price.
fn fabric_run(s: Scenario, outcome: Outcome, summary: Summary) -> Result<FabricRun, String> {
    let topo = s.build_topology()?;
    let (design, cost) = decision::price(&s, s.fabric, &topo, &summary);
    Ok(FabricRun {
        scenario: s,
        summary,
        outcome,
        design,
        cost,
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
        let run = fabric_run(s, outcome, summary)?;
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
            Candidates {
                adaptive: self.adaptive.as_ref().map(|a| (&a.summary, &a.cost)),
                tuned: Some((&tuning, &run.cost)),
            },
            surface.as_ref(),
            self.ends_unfinished,
        );
        self.surface = surface;
        self.tuned = Some((run, tuning));
        Ok(self)
    }
}

/// A row of the table: its name, each candidate's figure (in the order of
/// [`Comparison::candidates`]), and whether a candidate's figure over InfiniBand's means
/// something.
pub struct Row {
    pub name: String,
    pub values: Vec<f64>,
    pub ratio: bool,
}

impl Comparison {
    /// The candidates compared, by name: InfiniBand, RoCEv2, then Ethernet with adaptive
    /// routing when asked.
    pub fn candidates(&self) -> Vec<(&'static str, &FabricRun)> {
        let mut v = vec![(INFINIBAND, &self.runs[0]), (ROCEV2, &self.runs[1])];
        v.extend(self.adaptive.as_ref().map(|a| (ROCEV2_ADAPTIVE, a)));
        v
    }

    /// A row whose figure `f` reads from each candidate's run.
    fn row(&self, name: impl Into<String>, ratio: bool, f: impl Fn(&FabricRun) -> f64) -> Row {
        Row {
            name: name.into(),
            values: self.candidates().into_iter().map(|(_, r)| f(r)).collect(),
            ratio,
        }
    }
}

/// A missing figure as NaN (shown as "-").
fn or_nan(x: Option<f64>) -> f64 {
    x.unwrap_or(f64::NAN)
}

/// The network rows: design and cost.
fn network_rows(c: &Comparison) -> Vec<Row> {
    let mut rows = vec![
        c.row("tiers", false, |r| r.design.tiers as f64),
        c.row("switches", true, |r| r.design.switches as f64),
        c.row("links", false, |r| r.design.links as f64),
        c.row("network capex (USD)", true, |r| r.cost.capex_usd.round()),
        c.row("network power (kW, PUE)", true, |r| r.cost.power_kw),
        c.row("network opex (USD/year)", true, |r| {
            r.cost.opex_usd_per_year.round()
        }),
        c.row("network lifetime (USD)", true, |r| {
            r.cost.lifetime_usd.round()
        }),
    ];
    let all = |f: &dyn Fn(&FabricRun) -> bool| c.candidates().iter().all(|(_, r)| f(r));
    if all(&|r| r.cost.job_hours.is_some()) {
        rows.push(c.row("job time (h)", true, |r| or_nan(r.cost.job_hours)));
    }
    if all(&|r| r.cost.job_cost_usd.is_some()) {
        rows.push(c.row("job cost (USD)", true, |r| or_nan(r.cost.job_cost_usd)));
    }
    if all(&|r| r.summary.link_load.is_some()) {
        rows.push(c.row("busiest switch link / mean", true, |r| {
            or_nan(r.summary.link_load.as_ref().map(|l| l.max_over_mean))
        }));
    }
    rows
}

/// The rows of training entry `i`, named `n`.
fn training_rows(c: &Comparison, i: usize, n: &str, rows: &mut Vec<Row>) {
    let t = |r: &FabricRun| r.summary.training.get(i).cloned();
    let ms = |x: Option<f64>| or_nan(x) / 1e6;
    rows.push(c.row(format!("{n} iteration (ms)"), true, |r| {
        ms(t(r).and_then(|t| t.iteration_time_ns))
    }));
    // Jitter: iteration to iteration, and over ranks, beside the mean.
    let pick = |p: Option<Percentiles>, k: usize| p.map(|p| [p.p50, p.p99, p.max][k] as f64);
    for (k, what) in ["iteration p50", "iteration p99", "iteration max"]
        .iter()
        .enumerate()
    {
        rows.push(c.row(format!("{n} {what} (ms)"), true, |r| {
            ms(t(r).and_then(|t| pick(t.iteration_percentiles_ns, k)))
        }));
    }
    for (k, what) in [(1, "rank iteration p99"), (2, "rank iteration max")] {
        rows.push(c.row(format!("{n} {what} (ms)"), true, |r| {
            ms(t(r).and_then(|t| pick(t.iteration_spread_ns, k)))
        }));
    }
    rows.push(c.row(format!("{n} compute (ms)"), false, |r| {
        ms(t(r).map(|t| t.compute_ns))
    }));
    rows.push(c.row(format!("{n} exposed comm (ms)"), true, |r| {
        ms(t(r).and_then(|t| t.exposed_communication_ns))
    }));
    rows.push(c.row(format!("{n} job (h)"), true, |r| {
        or_nan(t(r).and_then(|t| t.projected_job_seconds)) / 3600.0
    }));
    let extra = |r: &FabricRun| or_nan(t(r).and_then(|t| t.extra_job_seconds_per_us_per_exchange));
    rows.push(c.row(format!("{n} +1us/exchange (s)"), false, extra));
    // What those seconds cost: the cluster's GPUs and network for that long.
    rows.push(c.row(format!("{n} +1us/exchange (USD)"), false, |r| {
        let cost = &r.cost;
        extra(r) / 3600.0 * (cost.gpus as f64 * cost.gpu_usd_per_hour + cost.network_usd_per_hour)
    }));
}

/// The workload rows: collectives, training jobs and data paths.
fn workload_rows(c: &Comparison) -> Vec<Row> {
    let first = &c.runs[0].summary;
    let mut rows: Vec<Row> = Vec::new();
    for (i, x) in first.collectives.iter().enumerate() {
        let name = format!("#{i} {} {} {}B", x.op, x.algorithm, x.size);
        let col = |r: &FabricRun| r.summary.collectives.get(i).cloned();
        rows.push(c.row(format!("{name} time (us)"), true, |r| {
            or_nan(col(r).and_then(|x| x.time_ns)) / 1e3
        }));
        rows.push(c.row(format!("{name} algbw (GB/s)"), true, |r| {
            or_nan(col(r).and_then(|x| x.algbw_gbps))
        }));
        rows.push(c.row(format!("{name} busbw (GB/s)"), true, |r| {
            or_nan(col(r).and_then(|x| x.busbw_gbps))
        }));
    }
    for (i, x) in first.training.iter().enumerate() {
        let n = match &x.job {
            Some(job) => format!("training #{i} (job {job})"),
            None => format!("training #{i}"),
        };
        training_rows(c, i, &n, &mut rows);
    }
    for (i, x) in first.jobs.iter().enumerate() {
        let n = format!(
            "job {} ({} GPUs {} over {} leaves)",
            x.job, x.gpus, x.placement, x.leaves
        );
        let job = |r: &FabricRun| r.summary.jobs.get(i).cloned();
        rows.push(c.row(format!("{n} makespan (ms)"), true, |r| {
            job(r)
                .and_then(|j| j.makespan_ns)
                .map_or(f64::NAN, |v| v as f64 / 1e6)
        }));
        rows.push(c.row(format!("{n} FCT p99 (us)"), true, |r| {
            job(r).map_or(f64::NAN, |j| j.fct_ns.p99 as f64 / 1e3)
        }));
    }
    if first.data_path.is_some() {
        rows.push(c.row("data path latency (us)", true, |r| {
            r.summary
                .data_path
                .as_ref()
                .map_or(f64::NAN, |d| d.mean_latency_ns / 1e3)
        }));
    }
    rows
}

/// A candidate's run summary.
fn s(r: &FabricRun) -> &Summary {
    &r.summary
}

/// The flow rows of every run.
fn flow_rows(c: &Comparison) -> Vec<Row> {
    let us = |ns: u64| ns as f64 / 1e3;
    vec![
        c.row("flows completed", false, |r| s(r).flows.completed as f64),
        c.row("simulated time (us)", true, |r| us(s(r).sim_time_ns)),
        c.row("goodput (Gb/s)", true, |r| s(r).goodput_gbps),
        c.row("FCT p50 (us)", true, |r| us(s(r).fct_ns.p50)),
        c.row("FCT p99 (us)", true, |r| us(s(r).fct_ns.p99)),
        c.row("FCT max (us)", true, |r| us(s(r).fct_ns.max)),
        c.row("peak queue (KiB)", true, |r| {
            s(r).peak_queue_bytes as f64 / 1024.0
        }),
        c.row("drops", false, |r| s(r).drops as f64),
        c.row("retransmitted packets", false, |r| {
            s(r).retransmitted_packets as f64
        }),
        c.row("credit stall (us)", false, |r| us(s(r).credit_stall_ns)),
        c.row("PFC pause frames", false, |r| s(r).pfc_pause_frames as f64),
        c.row("PFC paused (us)", false, |r| us(s(r).pfc_paused_ns)),
        c.row("FECN / ECN marked", false, |r| s(r).ecn_marked as f64),
        c.row("BECN / CNP", false, |r| s(r).cnps as f64),
        c.row("events", false, |r| s(r).events as f64),
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
    rows.push(c.row("wall time (s)", false, |r| r.summary.wall_seconds));
    rows
}

/// A candidate's figure over InfiniBand's, where the row's ratio means something.
pub fn ratio(row: &Row, k: usize) -> Option<f64> {
    let (a, b) = (row.values[0], row.values[k]);
    (row.ratio && a > 0.0 && b.is_finite()).then(|| b / a)
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
        "{}: {}\nrecommendation: {verdict}\n",
        c.runs[0].summary.scenario,
        if c.adaptive.is_some() {
            "InfiniBand vs RoCEv2 vs Ethernet with adaptive routing"
        } else {
            "InfiniBand vs RoCEv2"
        }
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
    let w = rows.iter().map(|r| r.name.len()).max().unwrap_or(0).max(36);
    let names: Vec<&str> = c.candidates().iter().map(|(n, _)| *n).collect();
    let _ = write!(s, "\n{:<w$}", "");
    for n in &names {
        let _ = write!(s, "{n:>16}");
    }
    for n in &names[1..] {
        let ratio = format!("{}/ib", n.replace("rocev2-", ""));
        let _ = write!(s, "{ratio:>12}");
    }
    s.push('\n');
    for row in rows {
        let _ = write!(s, "{:<w$}", row.name);
        for v in &row.values {
            let _ = write!(s, "{:>16}", num(*v));
        }
        for k in 1..names.len() {
            let r = ratio(&row, k).map_or(String::new(), |r| format!("{r:.3}"));
            let _ = write!(s, "{r:>12}");
        }
        s.push('\n');
    }
    for (_, run) in c.candidates() {
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
