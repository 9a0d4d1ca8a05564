//! `fabricsim compare`: one scenario's topology and traffic on both fabrics, side by side.

use crate::results::{self, Summary};
use crate::runner;
use crate::scenario::{FabricKind, Scenario};
use std::fmt::Write as _;

/// Runs `scenario` on InfiniBand and on RoCEv2; returns the two summaries in that order.
pub fn run_both(scenario: &Scenario) -> Result<[Summary; 2], String> {
    runner::require_traffic(scenario)?;
    let once = |kind: FabricKind| -> Result<Summary, String> {
        let s = Scenario {
            fabric: kind,
            ..scenario.clone()
        };
        if kind == FabricKind::Rocev2 && ![1024, 2048, 4096].contains(&s.roce.mtu) {
            return Err(format!(
                "fabric.mtu = {}: RoCEv2 needs 1024, 2048 or 4096, so this scenario cannot be compared",
                s.roce.mtu
            ));
        }
        let outcome = runner::run(&s, None, true)?;
        Ok(results::summary(&s, &outcome))
    };
    Ok([once(FabricKind::Infiniband)?, once(FabricKind::Rocev2)?])
}

/// The side-by-side table: one row per figure, with RoCEv2 relative to InfiniBand where
/// a ratio means something.
pub fn table(ib: &Summary, roce: &Summary) -> String {
    let rows: Vec<(&str, f64, f64, bool)> = vec![
        (
            "flows completed",
            ib.flows.completed as f64,
            roce.flows.completed as f64,
            false,
        ),
        (
            "simulated time (us)",
            us(ib.sim_time_ns),
            us(roce.sim_time_ns),
            true,
        ),
        ("goodput (Gb/s)", ib.goodput_gbps, roce.goodput_gbps, true),
        ("FCT p50 (us)", us(ib.fct_ns.p50), us(roce.fct_ns.p50), true),
        ("FCT p99 (us)", us(ib.fct_ns.p99), us(roce.fct_ns.p99), true),
        ("FCT max (us)", us(ib.fct_ns.max), us(roce.fct_ns.max), true),
        (
            "peak queue (KiB)",
            kib(ib.peak_queue_bytes),
            kib(roce.peak_queue_bytes),
            true,
        ),
        ("drops", ib.drops as f64, roce.drops as f64, false),
        (
            "retransmitted packets",
            ib.retransmitted_packets as f64,
            roce.retransmitted_packets as f64,
            false,
        ),
        (
            "credit stall (us)",
            us(ib.credit_stall_ns),
            us(roce.credit_stall_ns),
            false,
        ),
        (
            "PFC pause frames",
            ib.pfc_pause_frames as f64,
            roce.pfc_pause_frames as f64,
            false,
        ),
        (
            "PFC paused (us)",
            us(ib.pfc_paused_ns),
            us(roce.pfc_paused_ns),
            false,
        ),
        (
            "FECN / ECN marked",
            ib.ecn_marked as f64,
            roce.ecn_marked as f64,
            false,
        ),
        ("BECN / CNP", ib.cnps as f64, roce.cnps as f64, false),
        ("events", ib.events as f64, roce.events as f64, false),
        ("wall time (s)", ib.wall_seconds, roce.wall_seconds, false),
    ];
    let mut s = format!(
        "{}: InfiniBand vs RoCEv2\n{:<24}{:>16}{:>16}{:>12}\n",
        ib.scenario, "", "infiniband", "rocev2", "rocev2/ib"
    );
    for (name, a, b, ratio) in rows {
        let r = if ratio && a > 0.0 {
            format!("{:.3}", b / a)
        } else {
            String::new()
        };
        let _ = writeln!(s, "{name:<24}{:>16}{:>16}{r:>12}", num(a), num(b));
    }
    for (fabric, sum) in [("infiniband", ib), ("rocev2", roce)] {
        if let Some(d) = &sum.deadlock {
            let _ = writeln!(s, "{fabric}: deadlock detected at {} ns", d.detected_at_ns);
        }
    }
    s
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1e3
}

fn kib(bytes: u64) -> f64 {
    bytes as f64 / 1024.0
}

/// Integers without decimals, other figures with three.
fn num(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
    }
}
