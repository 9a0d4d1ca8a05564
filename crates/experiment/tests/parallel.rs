//! A RoCEv2 run split over threads (`rocev2::parallel`) gives exactly the results of the
//! same run on one thread, whatever the number of threads: flows, ports, counters, the
//! peak of packets in flight, the events, a deadlock, where a stopped run stopped, and
//! the rate cuts and samples of rates.csv.

mod common;

use common::scenario;
use fabricsim_core::units::Time;
use fabricsim_experiment::runner::{self, Trial};
use fabricsim_experiment::scenario::{FabricKind, Scenario};
use fabricsim_fabric::report::RunReport;
use std::path::Path;

/// The example `name` on RoCEv2.
fn example_on_roce(name: &str) -> Scenario {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(name);
    let mut s = Scenario::load(&path).expect("the example loads");
    s.fabric = FabricKind::Rocev2;
    s
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
