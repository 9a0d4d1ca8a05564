//! Analytic oracles: single-flow goodput, incast fairness and completion, permutation
//! throughput with adaptive routing.

mod common;
use common::*;
use fabricsim_experiment::results::goodput_gbps;

const RATE_GBPS: f64 = 400.0;

/// goodput = link rate x payload / (payload + 26 B of LRH, BTH, ICRC and VCRC), within 0.5 %.
fn assert_line_rate_goodput(topology: &str, dst: u32) {
    let r = one_64mib_flow("infiniband", topology, dst);
    assert_eq!(r.buffer_overflows, 0);
    assert_goodput(goodput_gbps(&r, 1), RATE_GBPS * ib_efficiency(4096.0));
}

#[test]
fn one_flow_goodput_through_one_switch() {
    assert_line_rate_goodput("[topology]\nkind = \"single-switch\"\nhosts = 2", 1);
}

#[test]
fn one_flow_goodput_through_a_three_tier_fat_tree() {
    // Host 0 to host 15 of a k=4 fat-tree crosses edge, aggregation, core, aggregation, edge.
    assert_line_rate_goodput("[topology]\nkind = \"fat-tree\"\nk = 4", 15);
}

fn incast(n: u32) {
    let size: u64 = 4 << 20;
    let senders: Vec<String> = (1..=n).map(|i| i.to_string()).collect();
    let s = scenario(&format!(
        "[topology]\nkind = \"single-switch\"\nhosts = {}\n[[traffic]]\nkind = \"incast\"\nsenders = [{}]\ndst = 0\nsize = {size}\n",
        n + 1,
        senders.join(", ")
    ));
    let (mut sim, _) = simulation(&s);
    // Steady state: the middle half of the ideal completion time.
    let goodput_bps = RATE_GBPS * 1e9 * ib_efficiency(4096.0);
    let ideal_s = n as f64 * size as f64 * 8.0 / goodput_bps;
    let ideal_ps = (ideal_s * 1e12) as u64;
    let window = delivered_between(&mut sim, n as usize, ideal_ps / 4, 3 * ideal_ps / 4);
    let total: u64 = window.iter().sum();
    for (i, d) in window.iter().enumerate() {
        let share = *d as f64 / total as f64;
        let fair = 1.0 / n as f64;
        assert!(
            (share - fair).abs() / fair < 0.02,
            "{n}:1 incast: sender {} got {:.4} of the bottleneck, fair share {fair:.4}",
            i + 1,
            share
        );
    }
    sim.run();
    let r = sim.report();
    assert_eq!(r.buffer_overflows, 0, "credits must prevent any overflow");
    assert_eq!(r.drops, 0);
    assert!(
        r.flows
            .iter()
            .all(|f| f.finish.is_some() && f.delivered_bytes == size),
        "every flow completes"
    );
    let last = r.flows.iter().filter_map(|f| f.finish).max().unwrap();
    let got_s = last.as_secs_f64();
    let err = (got_s - ideal_s).abs() / ideal_s;
    assert!(
        err < 0.01,
        "{n}:1 incast completed in {:.3} us; N x S / goodput = {:.3} us ({:.3} %)",
        got_s * 1e6,
        ideal_s * 1e6,
        err * 100.0
    );
    let stall: u64 = r.ports.iter().map(|p| p.credit_stall.ps()).sum();
    assert!(
        stall > 0,
        "an incast must back up and stall upstream senders on credits"
    );
}

#[test]
fn incast_8_to_1_is_fair_lossless_and_on_time() {
    incast(8);
}

#[test]
fn incast_32_to_1_is_fair_lossless_and_on_time() {
    incast(32);
}

/// Aggregate payload throughput of a permutation in steady state (the middle half of the
/// run), as a fraction of hosts x line rate x payload efficiency.
fn permutation_fraction(adaptive: bool, k: u32) -> (f64, f64) {
    let s = scenario(&format!(
        "[fabric.infiniband]\nadaptive_routing = {adaptive}\n[topology]\nkind = \"fat-tree\"\nk = {k}\n[[traffic]]\nkind = \"permutation\"\nsize = \"16MiB\"\n"
    ));
    let hosts = (k * k * k / 4) as usize;
    let ideal_bps = hosts as f64 * RATE_GBPS * 1e9 * ib_efficiency(4096.0);
    let (mut sim, _) = simulation(&s);
    let one_host_s = (16u64 << 20) as f64 * 8.0 / (RATE_GBPS * 1e9 * ib_efficiency(4096.0));
    let (t1, t2) = ((one_host_s * 0.25e12) as u64, (one_host_s * 0.75e12) as u64);
    let window: u64 = delivered_between(&mut sim, hosts, t1, t2).iter().sum();
    let steady = window as f64 * 8.0 / ((t2 - t1) as f64 * 1e-12) / ideal_bps;
    sim.run();
    let r = sim.report();
    assert_eq!(r.buffer_overflows, 0);
    let makespan = goodput_gbps(&r, 1) * 1e9 / ideal_bps;
    (steady, makespan)
}

#[test]
fn permutation_on_a_non_blocking_fat_tree_with_adaptive_routing() {
    let (ar_steady, ar_makespan) = permutation_fraction(true, 4);
    let (st_steady, st_makespan) = permutation_fraction(false, 4);
    eprintln!(
        "k=4 permutation: adaptive {:.1} % steady / {:.1} % makespan; static {:.1} % / {:.1} %",
        ar_steady * 100.0,
        ar_makespan * 100.0,
        st_steady * 100.0,
        st_makespan * 100.0
    );
    assert!(
        ar_steady >= 0.90,
        "adaptive routing reached {:.1} % of ideal in steady state",
        ar_steady * 100.0
    );
    assert!(
        ar_steady > st_steady,
        "adaptive routing must beat static d-mod-k on a random permutation"
    );
}
