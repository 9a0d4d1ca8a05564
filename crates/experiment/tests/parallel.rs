//! A packet-level run split over threads (`parallel`, on RoCEv2 and InfiniBand) gives
//! exactly the results of the same run on one thread, whatever the number of threads:
//! flows, ports, counters, the peak of packets in flight, the events, a deadlock, where
//! a stopped run stopped, and the rate cuts and samples of rates.csv. A run whose
//! receivers bound it to too few events per window is not split at all, nor is one
//! with SHARP.

mod common;

use common::scenario;
use fabricsim_core::units::Time;
use fabricsim_experiment::runner::{self, Trial};
use fabricsim_experiment::scenario::{FabricKind, Scenario};
use fabricsim_fabric::parallel::MIN_EVENTS_PER_WINDOW;
use fabricsim_fabric::report::RunReport;
use fabricsim_fabric::rocev2::parallel::events_per_window_ceiling;
use fabricsim_fabric::workload::build_with;
use std::path::Path;

/// The example `name` on RoCEv2.
fn example_on_roce(name: &str) -> Scenario {
    let mut s = example(name);
    s.fabric = FabricKind::Rocev2;
    s
}

/// The example `name` as it is.
fn example(name: &str) -> Scenario {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(name);
    Scenario::load(&path).expect("the example loads")
}

/// Runs `s` on one thread and on each of `threads`, checks that every split run was split
/// and agrees with the one-thread run; returns that run's report.
fn same_on(s: &Scenario, threads: &[usize]) -> RunReport {
    let one = runner::run_threaded(s, None, false, 1, Trial::Always).expect("runs");
    assert_eq!(one.threads, 1);
    for &n in threads {
        let split = runner::run_threaded(s, None, false, n, Trial::Always).expect("runs");
        assert_eq!(split.threads, n, "{} was split over {n} threads", s.name);
        assert_eq!(split.report, one.report, "{} on {n} threads", s.name);
        assert_eq!(split.rates, one.rates, "{}'s rates on {n} threads", s.name);
    }
    one.report
}

#[test]
fn a_fat_tree_with_ecn_marks_and_pfc_is_the_same_on_any_number_of_threads() {
    // Cross-pod traffic under DCQCN: ECN draws, CNPs, PAUSE frames and the deadlock check
    // all cross the cuts.
    let s = scenario(
        "seed = 3\n[fabric]\nkind = \"rocev2\"\n[fabric.rocev2]\ncongestion_control = \"dcqcn\"\nswitch_buffer = \"1MiB\"\necn = { kmin = \"20KiB\", kmax = \"80KiB\", pmax = 0.2 }\n[topology]\nkind = \"fat-tree\"\nk = 4\n[[traffic]]\nkind = \"incast\"\nsenders = [4, 8, 12, 13, 9]\ndst = 0\nsize = \"2MiB\"\n[[traffic]]\nkind = \"permutation\"\nsize = \"512KiB\"\n",
    );
    let mut s = s;
    s.roce.record_rates = true;
    s.roce.rate_sample = Time::from_us(5);
    let r = same_on(&s, &[2, 3, 4]);
    assert!(
        r.congestion_marks > 0 && r.pfc_pause_frames > 0,
        "{} marks, {} PAUSE frames",
        r.congestion_marks,
        r.pfc_pause_frames
    );
    assert!(r.flows.iter().all(|f| f.finish.is_some()));
}

#[test]
fn every_ethernet_load_balancing_is_the_same_on_any_number_of_threads() {
    // Adaptive routing and flowlets choose on arrival from the switch's own queues and
    // table, which its part holds; spraying draws per packet; all place or NAK alike.
    for lb in ["flowlet", "adaptive", "spray"] {
        let s = scenario(&format!(
            "seed = 5\n[fabric]\nkind = \"rocev2\"\n[fabric.rocev2]\nload_balancing = \"{lb}\"\n[topology]\nkind = \"fat-tree\"\nk = 4\n[[traffic]]\nkind = \"permutation\"\nsize = \"1MiB\"\n"
        ));
        let r = same_on(&s, &[2, 3]);
        assert!(r.flows.iter().all(|f| f.finish.is_some()), "{lb}");
    }
}

#[test]
fn an_incast_on_one_switch_with_pfc_is_the_same_on_two_threads() {
    let r = same_on(&example_on_roce("rocev2-incast-pfc.toml"), &[2, 3]);
    assert!(r.pfc_pause_frames > 0);
}

#[test]
fn dcqcn_rate_cuts_and_samples_are_the_same_on_two_threads() {
    let mut s = example_on_roce("rocev2-dcqcn.toml");
    s.roce.record_rates = true;
    s.stop_at = Some(Time::from_us(600));
    same_on(&s, &[2, 3]);
}

#[test]
fn a_deadlock_is_found_at_the_same_instant_on_any_number_of_threads() {
    let r = same_on(&example_on_roce("rocev2-pfc-deadlock.toml"), &[2, 3]);
    assert!(r.deadlock.is_some(), "the example deadlocks");
}

#[test]
fn dependencies_across_servers_and_transfers_inside_them_are_the_same_on_two_threads() {
    // A ring all-reduce: each step waits for the previous one's data from another server.
    let ring = same_on(
        &scenario("[fabric]\nkind = \"rocev2\"\nlink_rate = \"400Gbps\"\n[topology]\nkind = \"fat-tree\"\nk = 4\n[[traffic]]\nkind = \"collective\"\nop = \"all-reduce\"\nalgorithm = \"ring\"\nsize = \"16MiB\"\nchannels = 2\n"),
        &[2, 4],
    );
    assert!(ring.flows.iter().all(|f| f.finish.is_some()));
    // Host data paths: PCIe and CPU stages inside servers around the network messages.
    same_on(&example_on_roce("host-data-paths.toml"), &[2]);
}

#[test]
fn a_run_stopped_by_time_stops_at_the_same_place_on_two_threads() {
    let mut s = example_on_roce("bench-fat-tree-k8.toml");
    s.stop_at = Some(Time::from_us(20));
    let r = same_on(&s, &[2]);
    assert!(r.stopped_by_time);
    assert!(r.flows.iter().any(|f| f.finish.is_none()));
}

#[test]
fn a_training_job_is_the_same_on_two_threads() {
    // Data-parallel iterations: NVLink inside servers, bucketed all-reduces across them,
    // compute delays between.
    let r = same_on(&example_on_roce("training-data-parallel.toml"), &[2]);
    assert!(r.flows.iter().all(|f| f.finish.is_some()));
}

/// `s`'s ceiling on events per window (see `events_per_window_ceiling`).
fn ceiling(s: &Scenario) -> Option<f64> {
    let topo = s.build_topology().expect("the topology builds");
    let workload = build_with(&s.traffic, s.seed, false, Default::default());
    events_per_window_ceiling(&s.roce, &topo, &workload)
}

#[test]
fn an_incast_is_held_under_a_ceiling_by_its_receivers_link_and_runs_on_one_thread() {
    // A k=4 fat-tree: host 1 shares host 0's edge switch (2 links away), host 2 its pod
    // (4 links), host 4 is in another pod (6 links).
    let incast_of = |senders: &str, size: &str| {
        scenario(&format!("[fabric]\nkind = \"rocev2\"\n[topology]\nkind = \"fat-tree\"\nk = 4\n[[traffic]]\nkind = \"incast\"\nsenders = [{senders}]\ndst = 0\nsize = \"{size}\"\n"))
    };
    let incast = |senders: &str| incast_of(senders, "1MiB");
    let near = ceiling(&incast("1")).expect("one receiver is sparse");
    let pod = ceiling(&incast("2")).expect("one receiver is sparse");
    let far = ceiling(&incast("4")).expect("one receiver is sparse");
    // The same packets through the same receiving link, over 2, 4 and 6 hops.
    assert!((pod / near - 2.0).abs() < 1e-9, "{near} {pod}");
    assert!((far / near - 3.0).abs() < 1e-9, "{near} {far}");
    // More senders into the same receiver do not raise it: its link bounds them all.
    let many = ceiling(&incast("1, 2, 4, 5, 8, 9, 12, 13")).expect("one receiver is sparse");
    assert_eq!(many, far);
    assert!(far < MIN_EVENTS_PER_WINDOW as f64);
    // So a run that may give up does not even try threads, and is the same. (This one is
    // short enough to end before the trial could give up: split, it would stay split.)
    let s = incast_of("1, 2, 4, 5, 8, 9, 12, 13", "64KiB");
    let one = runner::run_threaded(&s, None, false, 1, Trial::Always).expect("runs");
    let tried = runner::run_threaded(&s, None, false, 2, Trial::GiveUpIfSparse).expect("runs");
    assert_eq!(tried.threads, 1);
    assert_eq!(tried.report, one.report);
    // A permutation has as many receivers as senders: it is left to the trial.
    let permutation = scenario("[fabric]\nkind = \"rocev2\"\n[topology]\nkind = \"fat-tree\"\nk = 4\n[[traffic]]\nkind = \"permutation\"\nsize = \"1MiB\"\n");
    assert_eq!(ceiling(&permutation), None);
}

#[test]
fn an_infiniband_fat_tree_with_adaptive_routing_and_congestion_control_is_the_same_on_any_number_of_threads(
) {
    // Cross-pod traffic: packets and flow-control packets cross the cuts, adaptive routing
    // reads the credits they return, FECN marks come back as BECNs from another part.
    let s = scenario(
        "seed = 3\n[fabric]\nkind = \"infiniband\"\n[fabric.infiniband]\nadaptive_routing = true\ncongestion_control = true\nfecn_threshold = \"32KiB\"\n[topology]\nkind = \"fat-tree\"\nk = 4\n[[traffic]]\nkind = \"incast\"\nsenders = [4, 8, 12, 13, 9]\ndst = 0\nsize = \"2MiB\"\n[[traffic]]\nkind = \"permutation\"\nsize = \"512KiB\"\n",
    );
    let r = same_on(&s, &[2, 3, 4]);
    assert!(
        r.congestion_marks > 0 && r.congestion_notifications > 0,
        "{} FECN marks, {} BECNs",
        r.congestion_marks,
        r.congestion_notifications
    );
    assert!(r.ports.iter().any(|p| p.credit_stall > Time::ZERO));
    assert!(r.flows.iter().all(|f| f.finish.is_some()));
}

#[test]
fn an_infiniband_credit_loop_is_found_at_the_same_instant_on_any_number_of_threads() {
    let r = same_on(&example("infiniband-credit-loop.toml"), &[2, 3]);
    assert!(r.deadlock.is_some(), "the example deadlocks");
}

#[test]
fn an_infiniband_ring_all_reduce_and_a_stopped_run_are_the_same_on_two_threads() {
    // Each step of the ring waits for the previous one's data from another server.
    let r = same_on(
        &scenario("[fabric]\nkind = \"infiniband\"\nlink_rate = \"400Gbps\"\n[topology]\nkind = \"fat-tree\"\nk = 4\n[[traffic]]\nkind = \"collective\"\nop = \"all-reduce\"\nalgorithm = \"ring\"\nsize = \"16MiB\"\nchannels = 2\n"),
        &[2, 4],
    );
    assert!(r.flows.iter().all(|f| f.finish.is_some()));
    let mut s = example("bench-fat-tree-k8.toml");
    s.stop_at = Some(Time::from_us(20));
    let r = same_on(&s, &[2]);
    assert!(r.stopped_by_time);
    assert!(r.flows.iter().any(|f| f.finish.is_none()));
}

#[test]
fn a_sharp_all_reduce_goes_on_one_thread_with_the_same_results() {
    // A SHARP group's result completes every rank's message at once, across parts.
    let s = scenario("[fabric]\nkind = \"infiniband\"\n[topology]\nkind = \"fat-tree\"\nk = 4\n[[traffic]]\nkind = \"collective\"\nop = \"all-reduce\"\nalgorithm = \"sharp\"\nsize = \"1MiB\"\n");
    let one = runner::run_threaded(&s, None, false, 1, Trial::Always).expect("runs");
    let asked = runner::run_threaded(&s, None, false, 2, Trial::Always).expect("runs");
    assert_eq!(asked.threads, 1);
    assert_eq!(asked.report, one.report);
}
