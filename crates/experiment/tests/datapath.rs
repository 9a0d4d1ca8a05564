//! Host data paths: small-message latency is the sum of its stages and orders gpudirect <
//! rdma < cpu-staged; a long message runs at its slowest stage; two GPUs behind one PCIe
//! switch share it; the CPU-staged path lengthens a training job.

mod common;
use common::scenario;
use fabricsim_experiment::results::{data_path_summary, training_results, DataPathSummary};
use fabricsim_experiment::runner;
use fabricsim_fabric::workload::datapath::pcie_rate;

fn run(host: &str, traffic: &str) -> (DataPathSummary, fabricsim_experiment::runner::Outcome) {
    let s = scenario(&format!(
        "[topology]\nkind = \"single-switch\"\nhosts = 8\n[host]\n{host}\n{traffic}"
    ));
    let out = runner::run(&s, None, false).unwrap();
    (
        data_path_summary(&out).expect("messages took the data path"),
        out,
    )
}

fn flow(src: u32, dst: u32, size: &str) -> String {
    format!("[[traffic]]\nkind = \"flow\"\nsrc = {src}\ndst = {dst}\nsize = \"{size}\"\n")
}

#[test]
fn small_message_latency_is_the_sum_of_its_stages_and_ordered() {
    let mut latencies = Vec::new();
    for path in ["gpudirect", "rdma", "cpu-staged"] {
        let (d, _) = run(&format!("data_path = \"{path}\""), &flow(0, 2, "8B"));
        let sum: f64 = d.first_chunk_stages.iter().map(|s| s.mean_ns).sum();
        assert!(
            (d.mean_latency_ns - sum).abs() < 1e-6,
            "{path}: latency {} ns vs stages {sum} ns: {d:?}",
            d.mean_latency_ns
        );
        latencies.push(d.mean_latency_ns);
    }
    assert!(
        latencies[0] < latencies[1] && latencies[1] < latencies[2],
        "{latencies:?}"
    );
}

#[test]
fn a_long_message_runs_at_its_slowest_stage() {
    // PCIe Gen4 x16 (31.5 GB/s) below the 400 Gb/s NIC: rdma runs at PCIe's rate;
    // cpu-staged at the 12 GB/s CPU copy. 0 -> 2 keeps the two ends on different PCIe
    // switches.
    let size = 256u64 << 20;
    let pcie = pcie_rate(4, 16).unwrap().bps() as f64 / 8.0;
    for (path, slowest) in [("rdma", pcie), ("cpu-staged", 12e9)] {
        let (d, _) = run(
            &format!(
                "data_path = \"{path}\"\npcie_generation = 4\ncpu_copy_bandwidth = \"12GB/s\""
            ),
            &flow(0, 2, "256MiB"),
        );
        let rate = size as f64 / (d.mean_latency_ns * 1e-9);
        let err = (rate - slowest).abs() / slowest;
        assert!(
            err < 0.02,
            "{path}: {:.3} GB/s vs slowest stage {:.3} GB/s",
            rate / 1e9,
            slowest / 1e9
        );
    }
}

#[test]
fn two_gpus_behind_one_pcie_switch_each_get_half_of_it() {
    // Hosts 0 and 1 share PCIe switch 0: their GPU-to-host copies share its uplink.
    let host = "data_path = \"rdma\"\npcie_generation = 4";
    let (alone, _) = run(host, &flow(0, 2, "128MiB"));
    let (_, out) = run(host, &(flow(0, 2, "128MiB") + &flow(1, 4, "128MiB")));
    let alone_rate = (128u64 << 20) as f64 / alone.mean_latency_ns;
    let pcie = pcie_rate(4, 16).unwrap().bps() as f64 / 8.0 / 1e9;
    assert!(
        (alone_rate - pcie).abs() / pcie < 0.02,
        "alone {alone_rate} GB/s"
    );
    // Each message, from its first stage to its last, takes about twice as long.
    let shared = data_path_summary(&out).unwrap();
    let shared_rate = (128u64 << 20) as f64 / shared.mean_latency_ns;
    assert!(
        (shared_rate - pcie / 2.0).abs() / (pcie / 2.0) < 0.02,
        "shared {shared_rate:.3} GB/s each vs half of {pcie:.3} GB/s"
    );
}

#[test]
fn the_cpu_staged_path_lengthens_a_training_job() {
    let job = "[[traffic]]\nkind = \"training\"\nsize = \"256MiB\"\nbuckets = 4\niterations = 2\nforward = \"1ms\"\nbackward = \"2ms\"\n";
    let projected = |path: &str| {
        let (_, out) = run(&format!("data_path = \"{path}\""), job);
        training_results(&out)[0].projected_job_seconds.unwrap()
    };
    let (gdr, staged) = (projected("gpudirect"), projected("cpu-staged"));
    assert!(
        staged > 1.5 * gdr,
        "100,000 iterations: gpudirect {gdr:.0} s, cpu-staged {staged:.0} s"
    );
    println!(
        "training job: gpudirect {gdr:.0} s, cpu-staged {staged:.0} s ({:.2}x)",
        staged / gdr
    );
}
