//! RoCEv2 oracles: goodput, PFC headroom, lossy recovery, DCQCN, ECMP and determinism.

mod common;
use common::{assert_goodput, one_64mib_flow, roce_sim, run_conserving, scenario, EventDriven};
use fabricsim_core::units::Time;
use fabricsim_experiment::results::goodput_gbps;
use fabricsim_experiment::runner;
use fabricsim_experiment::scenario::Scenario;

/// RoCEv2/IPv4 payload efficiency: payload / (payload + 82 B of preamble and IFG,
/// Ethernet, IPv4, UDP, BTH, ICRC and FCS).
fn roce_efficiency(mtu: f64) -> f64 {
    mtu / (mtu + 82.0)
}

/// goodput = link rate x payload / (payload + 82 B), within 0.5 %, with nothing lost.
fn assert_line_rate_goodput(topology: &str, dst: u32) {
    let r = one_64mib_flow("rocev2", topology, dst);
    assert_eq!((r.drops, r.retransmitted_packets), (0, 0));
    assert_goodput(goodput_gbps(&r, 1), 400.0 * roce_efficiency(4096.0));
}

#[test]
fn one_flow_goodput_through_one_switch() {
    assert_line_rate_goodput("[topology]\nkind = \"single-switch\"\nhosts = 2", 1);
}

#[test]
fn one_flow_goodput_through_a_three_tier_fat_tree() {
    assert_line_rate_goodput("[topology]\nkind = \"fat-tree\"\nk = 4", 15);
}

/// A 16:1 incast at 400 Gb/s with DCQCN off, so PFC alone keeps it lossless.
fn incast16(buffer: &str, extra: &str) -> Scenario {
    let senders: Vec<String> = (1..=16).map(|i| i.to_string()).collect();
    scenario(&format!(
        "[fabric]\nkind = \"rocev2\"\nlink_rate = \"400Gbps\"\n[fabric.rocev2]\ncongestion_control = \"none\"\nswitch_buffer = \"{buffer}\"\n{extra}\n[topology]\nkind = \"single-switch\"\nhosts = 17\n[[traffic]]\nkind = \"incast\"\nsenders = [{}]\ndst = 0\nsize = \"1MiB\"\n",
        senders.join(", ")
    ))
}

#[test]
fn incast_with_pfc_and_rule_headroom_never_drops() {
    let s = incast16("4MiB", "");
    let mut sim = roce_sim(&s);
    run_conserving(&mut sim);
    let r = sim.report();
    assert_eq!(r.drops, 0, "PFC with the mlx5 headroom must not drop");
    assert!(r.pfc_pause_frames > 0, "the incast must trigger PFC");
    assert!(r.flows.iter().all(|f| f.delivered_bytes == 1 << 20));
    assert_eq!(r.retransmitted_packets, 0);
}

#[test]
fn incast_with_headroom_below_the_rule_drops() {
    // One MTU frame does not fit: any packet that reaches the headroom is lost.
    let s = incast16("4MiB", "headroom = \"2KiB\"\nrto_exponent = 8");
    assert!(s.roce.headroom_for(s.link_rate) < 135_000);
    let mut sim = roce_sim(&s);
    run_conserving(&mut sim);
    let r = sim.report();
    // Every ingress that sent PAUSE kept receiving what its sender had already started
    // and what was in flight on the cable (the headroom rule's round trip); no such frame
    // fits 2 KiB, so each pausing ingress dropped at least one packet, and only ingresses
    // that paused dropped (the rest never reached the headroom). Every dropped packet was
    // sent again (all is delivered, go-back-N).
    let pausing: Vec<_> = r.ports.iter().filter(|p| p.pause_frames > 0).collect();
    assert!(!pausing.is_empty(), "the incast must trigger PFC");
    for p in &r.ports {
        assert_eq!(
            p.pause_frames > 0,
            p.drops > 0,
            "node {} port {}: {} PAUSE frames, {} drops",
            p.node,
            p.port,
            p.pause_frames,
            p.drops
        );
    }
    assert!(r.retransmitted_packets >= r.drops);
    assert!(r
        .flows
        .iter()
        .all(|f| f.finish.is_some() && f.delivered_bytes == 1 << 20));
}

#[test]
fn lossy_incast_recovers_every_byte_exactly_once() {
    let s = incast16("1MiB", "pfc = false\nrto_exponent = 8");
    let mut sim = roce_sim(&s);
    run_conserving(&mut sim);
    let r = sim.report();
    assert!(r.drops > 0, "a 1 MiB buffer under a 16:1 incast must drop");
    assert!(r.naks > 0 && r.retransmitted_packets > 0);
    assert_eq!(r.pfc_pause_frames, 0);
    let a = sim.audit();
    assert_eq!(a.in_flight_payload, 0);
    assert_eq!(
        a.delivered_payload,
        16 << 20,
        "each byte placed exactly once"
    );
    assert!(r
        .flows
        .iter()
        .all(|f| f.finish.is_some() && f.delivered_bytes == 1 << 20));
}

/// What `two_flows` measures between t1 and t2 at the port both flows share.
struct Shared {
    /// Each flow's share of the bytes delivered.
    shares: [f64; 2],
    /// The bottleneck queue's mean and largest sampled size (bytes, every 500 ns).
    mean_queue: f64,
    max_queue: u64,
    /// Time any port spent paused over the whole run (ns).
    paused: u64,
    /// Delivered payload rate (Gb/s).
    gbps: f64,
    /// ECN marks at the bottleneck over the whole run.
    marks: u64,
}

/// Two flows into one port, the second starting later, measured between t1 and t2, in a
/// run seeded with `seed` (the ECN marking draws).
fn two_flows(cc: &str, t1_us: u64, t2_us: u64, mib: u64, seed: u64) -> Shared {
    let s = scenario(&format!(
        "[fabric]\nkind = \"rocev2\"\nlink_rate = \"100Gbps\"\n[fabric.rocev2]\n{cc}\nswitch_buffer = \"8MiB\"\necn = {{ kmin = \"40KiB\", kmax = \"160KiB\", pmax = 0.2 }}\n[topology]\nkind = \"single-switch\"\nhosts = 3\n[[traffic]]\nkind = \"flow\"\nsrc = 1\ndst = 0\nsize = \"{mib}MiB\"\n[[traffic]]\nkind = \"flow\"\nsrc = 2\ndst = 0\nsize = \"{mib}MiB\"\nstart = \"200us\"\n"
    ));
    let mut s = s;
    s.seed = seed;
    s.roce.record_rates = true;
    let mut sim = roce_sim(&s);
    let topo = s.build_topology().unwrap();
    // The switch's port toward host 0.
    let host0 = topo.host_port(fabricsim_core::units::HostId(0));
    let bottleneck = topo.port(host0).peer;
    let (t1, t2) = (Time::from_us(t1_us), Time::from_us(t2_us));
    sim.run_until(t1);
    let a = [sim.flow_delivered(0), sim.flow_delivered(1)];
    let (mut sum, mut n, mut max_queue) = (0u64, 0u64, 0u64);
    let mut t = t1;
    while t < t2 {
        t += Time::from_ns(500);
        sim.run_until(t);
        let q = sim.queued_data(bottleneck);
        sum += q;
        max_queue = max_queue.max(q);
        n += 1;
    }
    let d = [sim.flow_delivered(0) - a[0], sim.flow_delivered(1) - a[1]];
    // The periodic rate samples agree with the bytes delivered: each flow's mean sampled
    // sending rate over the window is within 5 % of its delivered rate.
    for (f, delivered) in d.iter().enumerate() {
        let sent: Vec<f64> = sim
            .rate_samples()
            .iter()
            .filter(|r| r.flow == f as u32 && r.time > t1 && r.time <= t2)
            .filter_map(|r| r.sent.map(|b| b.bps() as f64))
            .collect();
        let mean = sent.iter().sum::<f64>() / sent.len() as f64;
        let got = *delivered as f64 * 8.0 / (t2 - t1).as_secs_f64();
        assert!(
            (mean - got).abs() / got < 0.05,
            "flow {f}: sampled {mean:.3e} b/s vs delivered {got:.3e} b/s over {} samples",
            sent.len()
        );
    }
    let total = (d[0] + d[1]) as f64;
    let gbps = total * 8.0 / (t2 - t1).as_secs_f64() / 1e9;
    sim.run();
    let report = sim.report();
    let bottleneck_port = report
        .ports
        .iter()
        .find(|p| p.node == topo.port(bottleneck).node.0 && p.port == topo.port(bottleneck).local)
        .expect("the bottleneck port is reported");
    Shared {
        shares: [d[0] as f64 / total, d[1] as f64 / total],
        mean_queue: sum as f64 / n as f64,
        max_queue,
        paused: report.ports.iter().map(|p| p.paused.ns()).sum(),
        gbps,
        marks: bottleneck_port.ecn_marks,
    }
}

#[test]
fn dcqcn_converges_to_fair_share_and_keeps_the_queue_in_the_ecn_band() {
    // The paper's parameters (55 us timers, byte counter). The firmware-style presets with
    // a 300 us increase timer converge far more slowly (see the closing note of issue 3).
    let dcqcn = "congestion_control = \"dcqcn\"\ndcqcn_preset = \"paper\"";
    let on = two_flows(dcqcn, 4000, 8000, 96, 1);
    let off = two_flows("congestion_control = \"none\"", 4000, 8000, 96, 1);
    let msg = format!(
        "DCQCN: shares {:.3}/{:.3}, {:.2} Gb/s, queue mean {:.0} B max {} B, {} marks, paused {} ns; without: queue mean {:.0} B, paused {} ns",
        on.shares[0], on.shares[1], on.gbps, on.mean_queue, on.max_queue, on.marks, on.paused, off.mean_queue, off.paused
    );
    // Fair on average over the marking draws: one run's shares over 4 ms depend on
    // which flow the few dozen marks hit (seed 2 gave 42/58 and seed 1 65/35 with one
    // order of same-time events or another), so the expectation is what converges.
    let seeds = [1, 2, 3, 4, 5, 6];
    let mean = seeds
        .iter()
        .map(|&seed| two_flows(dcqcn, 4000, 8000, 96, seed).shares[0])
        .sum::<f64>()
        / seeds.len() as f64;
    assert!(
        (mean - 0.5).abs() / 0.5 < 0.10,
        "mean share {mean:.3}; {msg}"
    );
    // The ECN band is Kmin 40 KiB to Kmax 160 KiB. DCQCN cuts only on marks, and RED marks
    // only above Kmin, so the queue must climb into the band (marks, and a sampled queue
    // above Kmin); each cut then drains it, so it does not stay there: it peaks below
    // Kmax, and its mean is below Kmin.
    let (kmin, kmax) = (40.0 * 1024.0, 160.0 * 1024.0);
    assert!(on.marks > 0 && on.max_queue as f64 > kmin, "{msg}");
    assert!(
        (on.max_queue as f64) < kmax && on.mean_queue < kmin,
        "{msg}"
    );
    assert!(on.gbps > 0.9 * 100.0 * roce_efficiency(4096.0), "{msg}");
    assert!(
        off.mean_queue > on.mean_queue && off.paused > on.paused,
        "{msg}"
    );
}

#[test]
fn ecmp_spreads_flows_over_spines_deterministically() {
    let text = |seed: u32| {
        format!(
            "seed = {seed}\n[fabric]\nkind = \"rocev2\"\n[topology]\nkind = \"leaf-spine\"\nhosts = 16\nleaves = 2\nspines = 4\n[[traffic]]\nkind = \"permutation\"\nsize = \"256KiB\"\nhosts = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]\n"
        )
    };
    let spine_load = |seed: u32| -> Vec<u64> {
        let s = scenario(&text(seed));
        let out = runner::run(&s, None, false).unwrap();
        // Ports of spine switches toward leaves: spines are the last 4 nodes.
        let nodes = out.report.ports.iter().map(|p| p.node).max().unwrap();
        (nodes - 3..=nodes)
            .map(|n| {
                out.report
                    .ports
                    .iter()
                    .filter(|p| p.node == n)
                    .map(|p| p.tx_packets)
                    .sum()
            })
            .collect()
    };
    let a = spine_load(1);
    assert_eq!(a, spine_load(1), "same seed, same spread");
    let used = a.iter().filter(|&&p| p > 0).count();
    assert!(used >= 2, "the hash must use several spines: {a:?}");
    assert_ne!(a, spine_load(2), "another seed hashes differently");
}

#[test]
fn ecmp_balances_many_flows_across_spines() {
    // An all-to-all over 32 hosts on 2 leaves and 4 spines: 2 x 16 x 16 = 512 equal
    // flows cross the spines, each hashed onto one of them (its ACKs likewise). A uniform
    // hash puts a binomial share on each spine: mean 1/4, standard deviation
    // sqrt(1/4 x 3/4 / 512) = 1.9 % of the flows, so every spine carries a quarter of the
    // packets within 7.7 % (4 standard deviations).
    let s = scenario(
        "[fabric]\nkind = \"rocev2\"\n[topology]\nkind = \"leaf-spine\"\nhosts = 32\nleaves = 2\nspines = 4\n[[traffic]]\nkind = \"collective\"\nop = \"all-to-all\"\nsize = \"1MiB\"\n",
    );
    let out = runner::run(&s, None, false).unwrap();
    let r = &out.report;
    assert!(r.flows.iter().all(|f| f.finish.is_some()));
    let nodes = r.ports.iter().map(|p| p.node).max().unwrap();
    let load: Vec<u64> = (nodes - 3..=nodes)
        .map(|n| {
            r.ports
                .iter()
                .filter(|p| p.node == n)
                .map(|p| p.tx_packets)
                .sum()
        })
        .collect();
    let total: u64 = load.iter().sum();
    for &l in &load {
        let share = l as f64 / total as f64;
        assert!(
            (share - 0.25).abs() < 4.0 * (0.25f64 * 0.75 / 512.0).sqrt(),
            "spine packets {load:?}: share {share:.3}"
        );
    }
}

#[test]
fn runs_are_deterministic() {
    let mut s = incast16("1MiB", "pfc = false\nrto_exponent = 8");
    s.roce.record_rates = true;
    let a = runner::run(&s, None, false).unwrap();
    let b = runner::run(&s, None, false).unwrap();
    assert_eq!(a.report, b.report);
    assert!(!a.rates.is_empty());
    assert_eq!(a.rates, b.rates);
}

#[test]
fn recording_rates_changes_nothing_but_the_records() {
    // Sampling is a read-only event: without it the run is the same, minus those events.
    let mut s = scenario("[fabric]\nkind = \"rocev2\"\n[topology]\nhosts = 5\n[[traffic]]\nkind = \"incast\"\nsenders = [1, 2, 3, 4]\ndst = 0\nsize = \"2MiB\"\n");
    let quiet = runner::run(&s, None, false).unwrap();
    s.roce.record_rates = true;
    let recorded = runner::run(&s, None, false).unwrap();
    assert!(quiet.rates.is_empty());
    let samples = recorded.rates.iter().filter(|r| r.sent.is_some()).count();
    assert!(
        samples > 0 && recorded.rates.len() > samples,
        "samples and DCQCN cuts"
    );
    let (q, r) = (&quiet.report, &recorded.report);
    assert_eq!(
        (&q.flows, &q.ports, q.sim_time),
        (&r.flows, &r.ports, r.sim_time)
    );
    assert!(
        r.events > q.events,
        "the sampling events are the difference"
    );
}

#[test]
fn an_mtu_beyond_what_the_model_takes_is_an_error_not_a_truncation() {
    // The scenario file allows 1024, 2048 or 4096; a configuration built in code may not.
    let s = scenario("[fabric]\nkind = \"rocev2\"\n[topology]\nkind = \"single-switch\"\nhosts = 2\n[[traffic]]\nkind = \"permutation\"\nsize = \"1MiB\"\n");
    let cfg = fabricsim_fabric::rocev2::RoceConfig {
        mtu: 1 << 16,
        ..s.roce.clone()
    };
    let msgs =
        fabricsim_fabric::workload::build_with(&s.traffic, s.seed, false, Default::default());
    let err =
        fabricsim_fabric::rocev2::Simulation::new(cfg, s.build_topology().unwrap(), &msgs, None)
            .err()
            .expect("an error");
    assert_eq!(
        err,
        fabricsim_fabric::driver::BuildError::Mtu {
            mtu: 65536,
            max: 16384
        }
    );
    assert!(err.to_string().contains("fabric.mtu = 65536"), "{err}");
}
