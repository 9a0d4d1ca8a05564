//! Congestion control beyond DCQCN (HPCC, Swift, TIMELY) and loss recovery beyond
//! go-back-N (IRN's selective repeat), against what their papers state they do.

mod common;
use common::*;
use fabricsim_core::units::{PortId, Time};
use fabricsim_experiment::runner;
use fabricsim_fabric::report::RunReport;
use fabricsim_fabric::rocev2::Simulation;

/// `n` senders into host 0 of one 400G switch, `size` each, starting at `starts` (us).
fn incast_text(rocev2: &str, n: u32, size: &str, starts: &[u64]) -> String {
    let mut t = format!(
        "[fabric]\nkind = \"rocev2\"\nlink_rate = \"400Gbps\"\nmtu = 4096\nlink_delay = \"25ns\"\n[fabric.rocev2]\n{rocev2}\n[topology]\nkind = \"single-switch\"\nhosts = {}\n",
        n + 1
    );
    for s in 1..=n {
        let start = starts.get(s as usize - 1).copied().unwrap_or(0);
        t += &format!(
            "[[traffic]]\nkind = \"flow\"\nsrc = {s}\ndst = 0\nsize = \"{size}\"\nstart = \"{start}us\"\n"
        );
    }
    t
}

/// The switch port toward host 0: the incast's bottleneck.
fn bottleneck(sim_topology: &fabricsim_core::topology::Topology) -> PortId {
    sim_topology
        .port(sim_topology.host_port(fabricsim_core::units::HostId(0)))
        .peer
}

/// The bottleneck queue (waiting, as the switch reports it) sampled every 1 us over
/// [from, to] us, and the payload host 0 received over it.
fn queue_and_goodput(rocev2: &str, from: u64, to: u64) -> (Vec<u64>, f64) {
    let s = scenario(&incast_text(rocev2, 4, "8MiB", &[]));
    let port = bottleneck(&s.build_topology().unwrap());
    let mut sim: Simulation = roce_sim(&s);
    sim.run_until(Time::from_us(from));
    let before: u64 = (0..4).map(|f| sim.flow_delivered(f)).sum();
    let mut q = Vec::new();
    for t in from + 1..=to {
        sim.run_until(Time::from_us(t));
        q.push(sim.waiting_data(port));
    }
    let after: u64 = (0..4).map(|f| sim.flow_delivered(f)).sum();
    let gbps = (after - before) as f64 * 8.0 / ((to - from) as f64 * 1e3);
    (q, gbps)
}

fn mean(v: &[u64]) -> f64 {
    v.iter().sum::<u64>() as f64 / v.len() as f64
}

/// HPCC (Li et al. 2019): the bottleneck runs near eta x line rate with a queue near
/// zero, where DCQCN at the same load keeps one standing.
#[test]
fn hpcc_keeps_the_bottleneck_queue_near_zero_at_high_utilisation() {
    let (q, gbps) = queue_and_goodput("congestion_control = \"hpcc\"", 30, 150);
    let (q_dcqcn, gbps_dcqcn) = queue_and_goodput("congestion_control = \"dcqcn\"", 30, 150);
    let (m, m_dcqcn) = (mean(&q), mean(&q_dcqcn));
    eprintln!(
        "HPCC: mean queue {m:.0} B, {gbps:.1} Gb/s; DCQCN: {m_dcqcn:.0} B, {gbps_dcqcn:.1} Gb/s"
    );
    // Payload at 95 % of 400G: frames of 4096 B payload carry 4096 / (4096 + 100) of it.
    assert!(
        gbps > 0.95 * 400.0 * 0.95 * 4096.0 / 4196.0 * 0.97,
        "utilisation {gbps:.1} Gb/s"
    );
    // Near zero: under 5 packets on average (the fabric's BDP is about 18).
    assert!(m < 5.0 * 4196.0, "HPCC's mean queue {m:.0} B");
    assert!(
        m * 10.0 < m_dcqcn,
        "HPCC's queue {m:.0} B against DCQCN's {m_dcqcn:.0} B"
    );
}

/// HPCC: a flow joining a busy link gets a fair share within a few RTTs (the newcomer
/// starts at line rate, both are cut by the same factor, additive increase evens the
/// rest). With the paper's additive step W_AI = W_init (1 - eta) / N for N = 10 expected
/// flows (2 Gb/s at 400G) and its maxStage 5; Jain's index over 20 us, 10 RTTs after the
/// join.
#[test]
fn hpcc_brings_two_flows_to_fair_shares_within_a_few_rtts() {
    let cc = "congestion_control = \"hpcc\"\nhpcc_rate_ai = \"2Gbps\"\nhpcc_max_stage = 5";
    let s = scenario(&incast_text(cc, 2, "8MiB", &[0, 40]));
    let mut sim = roce_sim(&s);
    sim.run_until(Time::from_us(55));
    let a: Vec<u64> = (0..2).map(|f| sim.flow_delivered(f)).collect();
    sim.run_until(Time::from_us(75));
    let b: Vec<f64> = (0..2)
        .map(|f| (sim.flow_delivered(f) - a[f]) as f64)
        .collect();
    let jain = (b[0] + b[1]).powi(2) / (2.0 * (b[0] * b[0] + b[1] * b[1]));
    eprintln!(
        "two flows over 20 us: {b:?} (ratio {:.3}, Jain {jain:.4})",
        b[0] / b[1]
    );
    assert!(jain >= 0.99, "shares {b:?}: Jain's index {jain:.4}");
    let total = (b[0] + b[1]) * 8.0 / 20e3;
    assert!(
        total > 0.9 * 400.0 * 4096.0 / 4196.0,
        "together they fill the link: {total:.1} Gb/s"
    );
}

/// Swift (Kumar et al. 2020): the measured delay sits near the target (between the
/// target at the largest window and at the smallest), where no congestion control lets
/// the queue grow to PFC's thresholds.
#[test]
fn swift_holds_the_delay_near_its_target() {
    use fabricsim_core::proto::swift::SwiftParams;
    let base_target = Time::from_us(4);
    let (q, gbps) = queue_and_goodput(
        "congestion_control = \"swift\"\nswift_base_target = \"4us\"",
        30,
        150,
    );
    let (q_none, _) = queue_and_goodput("congestion_control = \"none\"", 30, 150);
    // The queue-free RTT: two 25 ns links each way, a 4196 B frame serialised twice, an
    // ACK serialised twice, and the switch's 600 ns each way.
    let p = SwiftParams {
        base_target,
        fs_range: base_target * 5,
        ..SwiftParams::default_for(Time::ZERO)
    };
    let queueing = |bytes: f64| Time((bytes * 8.0 / 400e9 * 1e12) as u64);
    let base = Time::from_ns(100 + 2 * 84 + 2 * 600);
    let delay = base + queueing(mean(&q));
    let (low, high) = (p.target(1e9, 1), p.target(p.fs_min_cwnd, 1));
    eprintln!(
        "Swift: delay {delay} in [{low}, {high}], {gbps:.1} Gb/s; none: queue {:.0} B",
        mean(&q_none)
    );
    assert!(
        delay >= low - Time::from_us(1) && delay <= high,
        "delay {delay}"
    );
    assert!(
        base + queueing(mean(&q_none)) > high,
        "without control the delay passes any target"
    );
    assert!(
        gbps > 0.9 * 400.0 * 4096.0 / 4196.0,
        "Swift keeps the link busy: {gbps:.1} Gb/s"
    );
}

fn lossy(recovery: &str, traffic: &str) -> RunReport {
    let s = scenario(&format!(
        "[fabric]\nkind = \"rocev2\"\nlink_rate = \"400Gbps\"\n[fabric.rocev2]\npfc = false\nswitch_buffer = \"1MiB\"\ncongestion_control = \"none\"\nrto_exponent = 8\nloss_recovery = \"{recovery}\"\n{traffic}"
    ));
    let mut sim = roce_sim(&s);
    run_conserving(&mut sim);
    let r = sim.report();
    for f in &r.flows {
        assert_eq!(
            f.delivered_bytes, f.bytes,
            "{recovery}: every byte delivered"
        );
    }
    r
}

const INCAST_16: &str = "[topology]\nkind = \"single-switch\"\nhosts = 17\n[[traffic]]\nkind = \"incast\"\nsenders = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]\ndst = 0\nsize = \"1MiB\"\n";

/// Selective repeat (IRN) resends exactly the packets lost; go-back-N resends the window
/// behind each loss.
#[test]
fn selective_repeat_resends_exactly_the_lost_packets() {
    let sr = lossy("selective-repeat", INCAST_16);
    let gbn = lossy("go-back-n", INCAST_16);
    eprintln!(
        "16:1 lossy incast: selective repeat {} drops, {} resent, {} timeouts; go-back-N {} drops, {} resent",
        sr.drops, sr.retransmitted_packets, sr.timeouts, gbn.drops, gbn.retransmitted_packets
    );
    assert!(sr.drops > 0, "the incast must overflow the 1 MiB buffer");
    assert_eq!(
        sr.retransmitted_packets, sr.drops,
        "one resend per lost packet"
    );
    assert!(
        gbn.retransmitted_packets > gbn.drops,
        "go-back-N also resends packets that were not lost, those behind each loss"
    );
    let (t_sr, t_gbn) = (sr.sim_time, gbn.sim_time);
    assert!(
        t_sr < t_gbn,
        "selective repeat finishes first: {t_sr} vs {t_gbn}"
    );
}

/// A lossy fabric with selective repeat delivers every byte of a permutation across a
/// fat-tree, as the lossless one does.
#[test]
fn lossy_selective_repeat_delivers_a_permutation() {
    let r = lossy(
        "selective-repeat",
        "[topology]\nkind = \"fat-tree\"\nk = 4\n[[traffic]]\nkind = \"permutation\"\nsize = \"2MiB\"\n",
    );
    assert_eq!(r.retransmitted_packets, r.drops);
}

/// HPCC, Swift and TIMELY conserve bytes and finish an incast; their keys are refused
/// under another algorithm, and flow level refuses them by name where its fluid times
/// the traffic.
#[test]
fn every_algorithm_finishes_and_its_keys_are_its_own() {
    for cc in ["hpcc", "swift", "timely"] {
        let s = scenario(&incast_text(
            &format!("congestion_control = \"{cc}\""),
            8,
            "1MiB",
            &[],
        ));
        let mut sim = roce_sim(&s);
        run_conserving(&mut sim);
        assert!(
            sim.report().flows.iter().all(|f| f.finish.is_some()),
            "{cc}"
        );
        // At flow level an incast (open loop) is timed by per-link packet simulations,
        // which run the algorithm; a ring all-reduce, timed by the fluid, is refused.
        let flow = format!(
            "{}\n[simulation]\nlevel = \"flow\"\n",
            incast_text(&format!("congestion_control = \"{cc}\""), 2, "1MiB", &[])
        );
        assert!(fabricsim_experiment::scenario::Scenario::parse(&flow, "t").is_ok());
        let ring = format!(
            "[simulation]\nlevel = \"flow\"\n[fabric]\nkind = \"rocev2\"\n[fabric.rocev2]\ncongestion_control = \"{cc}\"\n[topology]\nkind = \"single-switch\"\nhosts = 4\n[[traffic]]\nkind = \"collective\"\nop = \"all-reduce\"\nalgorithm = \"ring\"\nsize = \"1MiB\"\n"
        );
        let err = fabricsim_experiment::scenario::Scenario::parse(&ring, "t")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("congestion_control") && err.contains(cc),
            "{err}"
        );
    }
    let bad = fabricsim_experiment::scenario::Scenario::parse(
        &incast_text(
            "congestion_control = \"dcqcn\"\nhpcc_eta = 0.9",
            2,
            "1MiB",
            &[],
        ),
        "t",
    )
    .unwrap_err()
    .to_string();
    assert!(bad.contains("hpcc_eta") && bad.contains("hpcc"), "{bad}");
    let r = runner::run(
        &scenario(&incast_text(
            "congestion_control = \"timely\"",
            2,
            "64KiB",
            &[],
        )),
        None,
        false,
    );
    assert!(r.is_ok());
}
