//! `fabricsim calibrate`: how far flow level is from packet level. Each case of
//! examples/calibration runs at both levels on both fabrics; the table sets the flow-level
//! figure beside the packet-level one with the error and the target for it.
//!
//! The suite's last run is recorded in examples/calibration/record.json (`calibrate
//! --record`), which also rewrites BENCHMARKS.md's table between its markers. The record
//! is what users are told flow level's error is (`recorded_range`), and a test reruns the
//! suite and fails when either level drifts from it.

use crate::catalog::Catalog;
pub use crate::flow_error::{record, recorded_range, Calibration};
use crate::output;
use crate::results::{self, Summary};
use crate::runner;
use crate::scenario::{FabricKind, Level, Scenario};
use crate::validate;
use fabricsim_fabric::workload::{CollectiveOp, Traffic};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The suite's folder, examples/calibration.
pub fn default_suite() -> PathBuf {
    validate::examples_folder("calibration")
}

/// Targets (issue 32): collective and iteration times within 5 % where bandwidth
/// dominates, an all-to-all's time and every completion (the slowest FCT of a set of
/// flows) within 10 %; FCT p50 within 10 %, web-search slowdowns within 15 %.
fn targets(s: &Scenario) -> (f64, f64) {
    let time = if all_to_all(s) { 0.10 } else { 0.05 };
    (time, 0.10)
}

/// Whether `s` holds an all-to-all.
fn all_to_all(s: &Scenario) -> bool {
    s.traffic
        .iter()
        .any(|t| matches!(t, Traffic::Collective(c) if c.op == CollectiveOp::AllToAll))
}

/// The figures a case is judged by, from its summary: the first training job's iteration,
/// else the first collective's time, else for a flow list (a web-search mix, say) the
/// p50 and p99 slowdown, else the flows' p50 FCT and completion.
fn figures(s: &Summary, out: &runner::Outcome, listed: bool) -> Figures {
    if let Some(t) = s.training.first() {
        return vec![("iteration_ns", t.iteration_time_ns.unwrap_or(f64::NAN))];
    }
    if let Some(c) = s.collectives.first() {
        return vec![("collective_ns", c.time_ns.unwrap_or(f64::NAN))];
    }
    if listed {
        let at = |p| validate::slowdown_percentile(&out.report, p).unwrap_or(f64::NAN);
        return vec![("slowdown_p50", at(50.0)), ("slowdown_p99", at(99.0))];
    }
    vec![
        ("fct_p50_ns", s.fct_ns.p50 as f64),
        ("completion_ns", s.fct_ns.max as f64),
    ]
}

/// A run's figures, by name (see `figures`).
type Figures = Vec<(&'static str, f64)>;

/// Runs one case file on both fabrics at both levels.
pub fn run_case(file: &Path, catalog: &Catalog) -> Result<Vec<Calibration>, String> {
    let base = Scenario::load_with(file, catalog).map_err(|e| e.to_string())?;
    let (time_target, completion_target) = targets(&base);
    let listed = base
        .traffic
        .iter()
        .any(|t| matches!(t, Traffic::Listed { .. }));
    let seeds = if all_to_all(&base) {
        ALL_TO_ALL_SEEDS
    } else if open_loop(&base) {
        SEEDS
    } else {
        1
    };
    let mut rows = Vec::new();
    for fabric in [FabricKind::Infiniband, FabricKind::Rocev2] {
        // A level's figures on each seed, and its wall time over them.
        let at = |level: Level| -> Result<(Vec<Figures>, f64), String> {
            let mut runs = Vec::new();
            let mut wall = 0.0;
            for k in 0..seeds {
                let mut s = Scenario {
                    fabric,
                    seed: base.seed + k,
                    ..base.clone()
                };
                s.set_level(level).map_err(|e| e.to_string())?;
                let out = runner::run(&s, None, false)?;
                let summary = results::summary(&s, &out);
                runs.push(figures(&summary, &out, listed));
                wall += summary.wall_seconds;
            }
            Ok((runs, wall))
        };
        let ((packet, packet_wall), (flow, flow_wall)) = (at(Level::Packet)?, at(Level::Flow)?);
        for (i, &(metric, _)) in packet[0].iter().enumerate() {
            let over = |runs: &[Figures]| -> Vec<f64> { runs.iter().map(|r| r[i].1).collect() };
            let (packets, flows) = (over(&packet), over(&flow));
            let mean = |xs: &[f64]| xs.iter().sum::<f64>() / xs.len() as f64;
            let (p, f) = (mean(&packets), mean(&flows));
            let spread = (seeds > 1).then(|| {
                let lo = packets.iter().copied().fold(f64::INFINITY, f64::min);
                let hi = packets.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                (lo, hi)
            });
            rows.push(Calibration {
                case: base.name.clone(),
                fabric: fabric.name().to_string(),
                metric: metric.to_string(),
                packet: p,
                flow: f,
                error: f / p - 1.0,
                target: match metric {
                    "fct_p50_ns" => 0.10,
                    "slowdown_p50" | "slowdown_p99" => 0.15,
                    "completion_ns" => completion_target,
                    _ => time_target,
                },
                seeds: seeds as u32,
                packet_spread: spread,
                packet_wall_seconds: packet_wall,
                flow_wall_seconds: flow_wall,
            });
        }
    }
    Ok(rows)
}

/// Seeds an open-loop case runs on at each level ([`open_loop`]): its figures are their
/// means. DCQCN's cuts on an incast depend on which packets the ECN draws mark, so one
/// seed's FCT p50 or completion can land in either of two modes (a 31:1 incast across
/// leaves completes in 333 or 494 us at packet level by seed, BENCHMARKS.md); a single
/// seed would compare coin flips. A project choice, the spread shown beside the figure.
const SEEDS: u64 = 5;

/// Seeds an all-to-all runs on at each level: its sends all start at once, as an
/// open-loop case's do, and its completion is its slowest connection's, which DCQCN's
/// draws move most. The 16-host all-to-all on RoCEv2 takes 555 us at packet level with a
/// standard deviation of 134 us over seeds 1 to 20, so the mean of five has a standard
/// error of 11 % (wider than the 10 % target) and the mean of twenty 5.4 %
/// (BENCHMARKS.md). A project choice.
const ALL_TO_ALL_SEEDS: u64 = 20;

/// Whether every traffic entry of `s` starts its messages at given times, none waiting
/// for another (flows, incasts, permutations, flow lists, background mixes).
fn open_loop(s: &Scenario) -> bool {
    s.traffic.iter().all(|t| {
        matches!(
            t,
            Traffic::Flow { .. }
                | Traffic::Incast { .. }
                | Traffic::Permutation { .. }
                | Traffic::Listed { .. }
                | Traffic::Background(_)
        )
    })
}

/// Runs every case of the suite in `dir`, in name order.
pub fn run_suite(dir: &Path, catalog: &Catalog) -> Result<Vec<Calibration>, String> {
    let mut rows = Vec::new();
    for file in validate::case_files(dir)? {
        rows.extend(run_case(&file, catalog)?);
    }
    Ok(rows)
}

/// The error table, as Markdown, with each run's wall times.
pub fn table(rows: &[Calibration]) -> String {
    let mut s = String::from(
        "| case | fabric | figure | packet | flow | error | target | within | wall packet / flow |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let _ = writeln!(
            s,
            "{} {:.2} s / {:.4} s |",
            figures_row(r),
            r.packet_wall_seconds,
            r.flow_wall_seconds
        );
    }
    s
}

/// The error table without wall times: what BENCHMARKS.md holds, from the record.
pub fn recorded_table(rows: &[Calibration]) -> String {
    let mut s = String::from(
        "| case | fabric | figure | packet | flow | error | target | within |\n|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let _ = writeln!(s, "{}", figures_row(r));
    }
    s
}

/// A row's figures as table cells, up to its verdict.
fn figures_row(r: &Calibration) -> String {
    let shown = |v: f64| match r.metric.strip_suffix("_ns") {
        Some(_) => format!("{:.1} us", v / 1e3),
        None => format!("{v:.2} x"),
    };
    let packet = match r.packet_spread {
        Some((lo, hi)) => format!(
            "{} ({} to {}, {} seeds)",
            shown(r.packet),
            shown(lo),
            shown(hi),
            r.seeds
        ),
        None => shown(r.packet),
    };
    format!(
        "| {} | {} | {} | {} | {} | {:+.1} % | {:.0} % | {} |",
        r.case,
        r.fabric,
        r.metric.trim_end_matches("_ns"),
        packet,
        shown(r.flow),
        r.error * 100.0,
        r.target * 100.0,
        if r.within() { "yes" } else { "NO" },
    )
}

/// The record's file, beside the suite's cases.
pub fn record_file(suite: &Path) -> PathBuf {
    suite.join("record.json")
}

/// The markers around BENCHMARKS.md's generated table.
pub const TABLE_BEGIN: &str = "<!-- calibrate --record writes this table -->";
pub const TABLE_END: &str = "<!-- end of the table calibrate --record writes -->";

/// Writes `rows` as the record beside `suite`'s cases and as the table between the
/// markers of `benchmarks` (BENCHMARKS.md), each file atomically.
pub fn write_record(rows: &[Calibration], suite: &Path, benchmarks: &Path) -> Result<(), String> {
    let plain: Vec<Calibration> = rows
        .iter()
        .map(|r| Calibration {
            packet_wall_seconds: 0.0,
            flow_wall_seconds: 0.0,
            ..r.clone()
        })
        .collect();
    let json = serde_json::to_string_pretty(&plain).expect("rows serialise") + "\n";
    let text = std::fs::read_to_string(benchmarks)
        .map_err(|e| format!("{}: {e}", benchmarks.display()))?;
    let (Some(a), Some(b)) = (text.find(TABLE_BEGIN), text.find(TABLE_END)) else {
        return Err(format!(
            "{}: the markers {TABLE_BEGIN:?} and {TABLE_END:?} are missing",
            benchmarks.display()
        ));
    };
    let updated = format!(
        "{}{TABLE_BEGIN}\n{}{}",
        &text[..a],
        recorded_table(&plain),
        &text[b..]
    );
    let record = record_file(suite);
    output::write_file(&record, json.as_bytes())
        .map_err(|e| format!("{}: {e}", record.display()))?;
    output::write_file(benchmarks, updated.as_bytes())
        .map_err(|e| format!("{}: {e}", benchmarks.display()))
}
