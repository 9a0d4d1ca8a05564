//! Ethernet load balancing against its closed forms: per-QP ECMP loses what balls into bins
//! predicts, spraying and adaptive routing reach the bisection bound, and both levels
//! agree on where each QP goes.

mod common;
use common::scenario;
use fabricsim_core::units::Time;
use fabricsim_experiment::results::LinkLoad;
use fabricsim_experiment::runner;
use fabricsim_experiment::scenario::{Level, Scenario};
use fabricsim_fabric::report::RunReport;

/// Spines of the one-way leaf-spine below, and its flows (one per spine).
const SPINES: u32 = 8;

/// Hosts 0-7 on leaf 0 each send 2 MiB to hosts 8-15 on leaf 1 over a non-blocking
/// leaf-spine of 8 spines: every flow has a spine of its own to take, if the balancer
/// finds it. PFC alone keeps it lossless (DCQCN's cuts and slow recovery would leave
/// colliding flows unfair, which is not what is measured here): a spine's egress serves
/// its inputs in turn, so colliding flows share it equally.
fn one_way(seed: u64, load_balancing: &str) -> Scenario {
    let mut text = format!(
        "seed = {seed}\n[fabric]\nkind = \"rocev2\"\n[fabric.rocev2]\ncongestion_control = \"none\"\nload_balancing = \"{load_balancing}\"\n[topology]\nkind = \"leaf-spine\"\nhosts = 16\nleaves = 2\nspines = {SPINES}\n"
    );
    for i in 0..SPINES {
        text.push_str(&format!(
            "[[traffic]]\nkind = \"flow\"\nsrc = {i}\ndst = {}\nsize = \"2MiB\"\n",
            i + SPINES
        ));
    }
    scenario(&text)
}

/// The last completion, from the first start.
fn completion(r: &RunReport) -> Time {
    let start = r.flows.iter().map(|f| f.start).min().unwrap();
    r.flows
        .iter()
        .map(|f| f.finish.expect("finished"))
        .max()
        .unwrap()
        - start
}

/// Flows per spine: each spine's data packets toward leaf 1 over one flow's packets.
fn flows_per_spine(r: &RunReport) -> Vec<u64> {
    let leaf1 = r
        .ports
        .iter()
        .find(|p| p.node == 2 * SPINES + 1)
        .map(|p| p.node);
    let per_flow = (2u64 << 20).div_ceil(4096);
    let spines = r
        .ports
        .iter()
        .filter(|p| Some(p.peer_node) == leaf1 && p.node > leaf1.unwrap());
    spines
        .map(|p| (p.tx_packets as f64 / per_flow as f64).round() as u64)
        .collect()
}

/// E[most balls in one bin] for `n` balls thrown into `m` bins uniformly:
/// P(max <= k) = n! / m^n x [x^n] (sum_{j<=k} x^j / j!)^m.
fn expected_max_load(n: usize, m: usize) -> f64 {
    let factorial = |k: usize| (1..=k).map(|i| i as f64).product::<f64>();
    let at_most = |k: usize| {
        let term: Vec<f64> = (0..=n)
            .map(|j| if j <= k { 1.0 / factorial(j) } else { 0.0 })
            .collect();
        let mut poly = vec![0.0; n + 1];
        poly[0] = 1.0;
        for _ in 0..m {
            let mut next = vec![0.0; n + 1];
            for (a, &pa) in poly.iter().enumerate() {
                for (b, &tb) in term.iter().enumerate().take(n + 1 - a) {
                    next[a + b] += pa * tb;
                }
            }
            poly = next;
        }
        poly[n] * factorial(n) / (m as f64).powi(n as i32)
    };
    (1..=n)
        .map(|k| k as f64 * (at_most(k) - at_most(k - 1)))
        .sum()
}

#[test]
fn the_balls_into_bins_expectation_is_exact_on_small_cases() {
    // Two balls in two bins: max 1 with probability 1/2, else 2.
    assert!((expected_max_load(2, 2) - 1.5).abs() < 1e-12);
    // Three balls in three bins: all apart 6/27, all together 3/27, else 2.
    let e = (6.0 + 2.0 * 18.0 + 3.0 * 3.0) / 27.0;
    assert!((expected_max_load(3, 3) - e).abs() < 1e-12);
}

#[test]
fn per_qp_ecmp_loses_what_balls_into_bins_predicts() {
    // A flow alone on its spine completes at its ideal time.
    let alone = runner::run(&one_way(1, "ecmp"), None, false)
        .unwrap()
        .report;
    let t1 = alone.flows[0].ideal.ps() as f64;
    let (mut loads, mut times) = (Vec::new(), Vec::new());
    for seed in 1..=24 {
        let r = runner::run(&one_way(seed, "ecmp"), None, false)
            .unwrap()
            .report;
        let per_spine = flows_per_spine(&r);
        assert_eq!(
            per_spine.iter().sum::<u64>(),
            SPINES as u64,
            "{per_spine:?}"
        );
        let most = *per_spine.iter().max().unwrap() as f64;
        let ratio = completion(&r).ps() as f64 / t1;
        // The spine carrying the most flows shares its line rate among them.
        assert!(
            (ratio - most).abs() <= 0.1 * most,
            "seed {seed}: {per_spine:?} flows per spine, completion {ratio:.2} x a lone flow's"
        );
        loads.push(most);
        times.push(ratio);
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let expected = expected_max_load(SPINES as usize, SPINES as usize);
    // 24 draws of the most loaded spine (standard deviation about 0.6): their mean within
    // 0.4 of the expectation, the completions within 10 % of it.
    assert!(
        (mean(&loads) - expected).abs() < 0.4,
        "{loads:?} vs E = {expected:.3}"
    );
    assert!(
        (mean(&times) - expected).abs() < 0.1 * expected,
        "{times:?} vs E = {expected:.3}"
    );
}

/// How far above the bisection bound random per-packet spraying may end: each packet
/// draws its port, so a port's arrivals bunch and its queue builds and drains (6-10 %
/// measured on these fabrics); adaptive routing, which sees the queues, stays at the bound.
fn slack(lb: &str) -> f64 {
    if lb == "spray" {
        1.10
    } else {
        1.01
    }
}

#[test]
fn spraying_and_adaptive_routing_reach_the_bisection_bound() {
    // One-way across the spines: every flow at its own line rate.
    for lb in ["spray", "adaptive"] {
        let r = runner::run(&one_way(5, lb), None, false).unwrap().report;
        let ideal = r.flows.iter().map(|f| f.ideal).max().unwrap();
        let got = completion(&r);
        assert!(
            got.ps() as f64 <= slack(lb) * ideal.ps() as f64,
            "{lb}: {got} against the ideal {ideal}"
        );
        assert_eq!((r.drops, r.retransmitted_packets), (0, 0), "{lb}");
        // What the receivers' out-of-order placement had to track: fewer packets than a
        // message's 512, and some under spraying's random draws (adaptive routing here
        // keeps each flow on the spine it found empty, in order).
        let least = u64::from(lb == "spray");
        assert!(
            (least..512).contains(&r.peak_reorder_packets),
            "{lb}: {} packets held out of order",
            r.peak_reorder_packets
        );
    }
    // A permutation on a non-blocking k = 4 fat-tree: every host could send and receive at
    // its line rate. Spraying draws each packet's spine and core at random: the last flow
    // ends within its slack of its ideal time (6.4 % here), where per-QP ECMP's
    // collisions more than double it.
    let text = |lb: &str| {
        format!("seed = 2\n[fabric]\nkind = \"rocev2\"\n[fabric.rocev2]\nload_balancing = \"{lb}\"\n[topology]\nkind = \"fat-tree\"\nk = 4\n[[traffic]]\nkind = \"permutation\"\nsize = \"4MiB\"\n")
    };
    let r = runner::run(&scenario(&text("spray")), None, false)
        .unwrap()
        .report;
    let ideal = r.flows.iter().map(|f| f.ideal).max().unwrap();
    assert!(
        completion(&r).ps() as f64 <= slack("spray") * ideal.ps() as f64,
        "spray: {} against the ideal {ideal}",
        completion(&r)
    );
    let ecmp = runner::run(&scenario(&text("ecmp")), None, false)
        .unwrap()
        .report;
    assert!(
        completion(&ecmp).ps() > 2 * completion(&r).ps(),
        "ECMP collides where spraying does not"
    );
    // The results say so: the busiest link between switches over their mean.
    let (even, hashed) = (
        LinkLoad::of(&r.ports).unwrap(),
        LinkLoad::of(&ecmp.ports).unwrap(),
    );
    assert_eq!(even.links, hashed.links);
    assert!(
        even.max_over_mean < 1.2 && hashed.max_over_mean > 1.5,
        "spray {even:?}, ECMP {hashed:?}"
    );
}

#[test]
fn flow_level_refuses_flowlets_it_does_not_model() {
    let err = one_way(1, "flowlet")
        .set_level(Level::Flow)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("flowlet") && err.contains("not modelled"),
        "{err}"
    );
}

#[test]
fn both_levels_put_each_qp_on_the_same_spine() {
    for (seed, lb) in [(3, "ecmp"), (4, "ecmp"), (3, "spray"), (3, "adaptive")] {
        let mut s = one_way(seed, lb);
        let packet = runner::run(&s, None, false).unwrap().report;
        s.set_level(Level::Flow).unwrap();
        let flow = runner::run(&s, None, false).unwrap().report;
        if lb == "ecmp" {
            assert_eq!(
                flows_per_spine(&packet),
                flows_per_spine(&flow),
                "seed {seed}"
            );
        }
        // Flow level splits a sprayed flow evenly: the bound, which random draws miss by
        // their slack.
        let (a, b) = (
            completion(&packet).ps() as f64,
            completion(&flow).ps() as f64,
        );
        let tolerance = 0.05f64.max(slack(lb) - 1.0);
        assert!(
            (b / a - 1.0).abs() < tolerance,
            "{lb} seed {seed}: packet {a} ps, flow {b} ps"
        );
    }
}

#[test]
fn the_effective_configuration_keeps_load_balancing_and_connections() {
    // `check` prints a scenario that loads back to the same settings.
    let text = "[nccl]\nqps_per_connection = 4\npxn = false\n[fabric]\nkind = \"rocev2\"\n[fabric.rocev2]\nload_balancing = \"flowlet\"\nflowlet_gap = \"3us\"\n[topology]\nhosts = 4\n";
    let s = scenario(text);
    let again = scenario(&s.effective_toml());
    assert_eq!(again.roce.load_balancing, s.roce.load_balancing);
    assert_eq!(again.nccl.connections, s.nccl.connections);
    assert_eq!(s.nccl.connections.qps_per_connection, 4);
    assert!(!s.nccl.connections.pxn);
}
