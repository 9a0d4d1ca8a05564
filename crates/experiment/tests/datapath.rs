//! Host data paths: small-message latency is the sum of its stages and orders gpudirect <
//! rdma < cpu-staged; a long message runs at its slowest stage; two GPUs behind one PCIe
//! switch share it; the CPU-staged path lengthens a training job.

mod common;
use common::scenario;
use fabricsim_core::units::{BitRate, Time};
use fabricsim_core::wire::ib;
use fabricsim_experiment::results::{data_path_summary, training_results, DataPathSummary};
use fabricsim_experiment::runner;
use fabricsim_experiment::scenario::Scenario;
use fabricsim_fabric::workload::datapath::{pcie_rate, DataPath};

fn run(host: &str, traffic: &str) -> (DataPathSummary, runner::Outcome, Scenario) {
    let s = scenario(&format!(
        "[topology]\nkind = \"single-switch\"\nhosts = 8\n[host]\n{host}\n{traffic}"
    ));
    let out = runner::run(&s, None, false).unwrap();
    (
        data_path_summary(&out).expect("messages took the data path"),
        out,
        s,
    )
}

fn flow(src: u32, dst: u32, size: &str) -> String {
    format!("[[traffic]]\nkind = \"flow\"\nsrc = {src}\ndst = {dst}\nsize = \"{size}\"\n")
}

/// The latency of an 8-byte message from host 0 to host 2 of one switch, derived from
/// the documented model and the scenario's own parameters: each stage costs its start
/// latency plus 8 bytes at its rate (a DMA over the GPU's or NIC's PCIe link; a copy
/// engine or NIC access through the PCIe switch's uplink and host memory, at the slowest
/// of PCIe, uplink and memory; a CPU copy at the slower of one core and memory), and the
/// network one RDMA WRITE: both HCAs' latencies, two links, the switch, and the one
/// packet serialised on each link.
fn expected_small_latency(s: &Scenario) -> Time {
    let h = s.host.as_ref().unwrap();
    let bytes = 8;
    let at = |rate: BitRate| rate.serialization(bytes);
    let copy_rate = BitRate(h.pcie.bps().min(h.uplink.bps()).min(h.host_memory.bps()));
    let cpu_rate = BitRate(h.cpu_copy.bps().min(h.host_memory.bps()));
    let frame = ib::write_packet_len(bytes as u32, true) as u64;
    let network = s.ib.hca_tx_latency
        + s.ib.hca_rx_latency
        + s.link_delay * 2
        + s.ib.switch_latency
        + s.link_rate.serialization(frame) * 2;
    let dma = h.pcie_latency + at(h.pcie);
    let copy_engine = h.copy_latency + at(copy_rate);
    let nic_via_host = h.pcie_latency + at(copy_rate);
    let cpu = h.cpu_overhead + at(cpu_rate);
    network
        + match h.data_path {
            DataPath::GpuDirect => dma * 2,
            DataPath::Rdma => (copy_engine + nic_via_host) * 2,
            DataPath::CpuStaged => (copy_engine + cpu + nic_via_host) * 2,
        }
}

#[test]
fn small_message_latency_is_the_sum_of_its_stages_and_ordered() {
    let mut latencies = Vec::new();
    for path in ["gpudirect", "rdma", "cpu-staged"] {
        let (d, out, s) = run(&format!("data_path = \"{path}\""), &flow(0, 2, "8B"));
        let expected = expected_small_latency(&s).ps() as f64 / 1e3;
        assert!(
            (d.mean_latency_ns - expected).abs() < 1e-3,
            "{path}: latency {} ns vs the model's {expected} ns: {d:?}",
            d.mean_latency_ns
        );
        assert!(out.report.flows.iter().all(|f| f.finish.is_some()));
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
    let pcie = pcie_rate(4, 16, 256).unwrap().bps() as f64 / 8.0;
    for (path, slowest) in [("rdma", pcie), ("cpu-staged", 12e9)] {
        let (d, _, _) = run(
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
    let (alone, _, _) = run(host, &flow(0, 2, "128MiB"));
    let (_, out, _) = run(host, &(flow(0, 2, "128MiB") + &flow(1, 4, "128MiB")));
    let alone_rate = (128u64 << 20) as f64 / alone.mean_latency_ns;
    let pcie = pcie_rate(4, 16, 256).unwrap().bps() as f64 / 8.0 / 1e9;
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
        let (_, out, _) = run(&format!("data_path = \"{path}\""), job);
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

/// PCIe's data rate counts its transaction-layer packets: generations 3 to 5 add 26 B
/// (framing, sequence number, 4-DW header, LCRC) to each maximum payload, generation 6
/// carries 236 of each flit's 256 B and a 16 B header per packet. A bad payload size is
/// refused with its key.
#[test]
fn pcie_counts_its_packet_overheads() {
    let gbps = |g, mps| pcie_rate(g, 16, mps).unwrap().bps() as f64 / 1e9;
    let gen5 = 32.0 * 16.0 * 128.0 / 130.0;
    assert!((gbps(5, 256) - gen5 * 256.0 / 282.0).abs() < 1e-6);
    assert!((gbps(5, 4096) - gen5 * 4096.0 / 4122.0).abs() < 1e-6);
    assert!((gbps(6, 256) - 64.0 * 16.0 * 236.0 / 256.0 * 256.0 / 272.0).abs() < 1e-6);
    assert!(gbps(4, 128) < gbps(4, 256) && gbps(4, 256) < gbps(4, 512));
    let e = Scenario::parse(
        "[topology]\nkind = \"single-switch\"\nhosts = 2\n[host]\npcie_max_payload = 300\n[[traffic]]\nkind = \"flow\"\nsrc = 0\ndst = 1\nsize = 4096\n",
        "t",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("host.pcie_max_payload = 300: must be a power of two"),
        "{e}"
    );
}

/// `[host] nic` names a NIC generation: its PCIe link is the default (an explicit key
/// still wins), and a NIC rate its ports cannot run is refused with the key.
#[test]
fn a_nic_generation_sets_the_pcie_link_and_bounds_the_rate() {
    let host = |rate: &str, extra: &str| {
        Scenario::parse(
            &format!("[fabric]\nlink_rate = \"{rate}\"\n[topology]\nkind = \"single-switch\"\nhosts = 2\n[host]\n{extra}\n[[traffic]]\nkind = \"flow\"\nsrc = 0\ndst = 1\nsize = 4096\n"),
            "t",
        )
    };
    let h = host("200Gbps", "nic = \"connectx-6\"")
        .unwrap()
        .host
        .unwrap();
    assert_eq!((h.pcie_generation, h.pcie_lanes), (4, 16));
    assert_eq!(h.pcie, pcie_rate(4, 16, 256).unwrap());
    let h = host("200Gbps", "nic = \"connectx-6\"\npcie_generation = 3")
        .unwrap()
        .host
        .unwrap();
    assert_eq!(h.pcie_generation, 3, "the explicit key wins");
    let e = host("400Gbps", "nic = \"connectx-6\"")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("host.nic = \"connectx-6\"") && e.contains("200"),
        "{e}"
    );
    let e = host("400Gbps", "nic = \"cx7\"").unwrap_err().to_string();
    assert!(e.contains("host.nic") && e.contains("connectx-7"), "{e}");
    // The effective configuration keeps the NIC.
    let s = host("400Gbps", "nic = \"connectx-7\"").unwrap();
    assert!(s.effective_toml().contains("nic = \"connectx-7\""));
    Scenario::parse(&s.effective_toml(), "again").unwrap();
}

/// `[host] nic_message_rate`: a NIC starts at most that many messages per second, so 100
/// small messages from one host take 99 intervals more than the first, at packet and at
/// flow level, on both fabrics; other hosts' NICs are not held up.
#[test]
fn a_nic_message_rate_spaces_one_hosts_messages() {
    use fabricsim_experiment::scenario::Level;
    let flows: String = (0..100)
        .map(|_| "[[traffic]]\nkind = \"flow\"\nsrc = 0\ndst = 1\nsize = 64\n")
        .chain(["[[traffic]]\nkind = \"flow\"\nsrc = 2\ndst = 3\nsize = 64\n"])
        .collect();
    for fabric in ["infiniband", "rocev2"] {
        for level in [Level::Packet, Level::Flow] {
            let finish = |host: &str| {
                let mut s = Scenario::parse(
                    &format!("[fabric]\nkind = \"{fabric}\"\n[topology]\nkind = \"single-switch\"\nhosts = 4\n[host]\n{host}\n{flows}"),
                    "t",
                )
                .unwrap();
                s.set_level(level).unwrap();
                let out = runner::run(&s, None, false).unwrap();
                // With [host], each message is its data-path stages and its network
                // message: the last of each pair's.
                let last = |pair: [u32; 2]| {
                    let f = out.report.flows.iter().filter(|f| pair.contains(&f.src));
                    f.map(|f| f.finish.unwrap()).max().unwrap()
                };
                (last([0, 1]), last([2, 3]))
            };
            let (free, other_free) = finish("");
            let (limited, other) = finish("nic_message_rate = 1e6");
            assert!(
                limited >= Time::from_us(99),
                "{fabric} {level:?}: {limited}"
            );
            assert!(
                limited < Time::from_us(99) + free,
                "{fabric} {level:?}: {limited}"
            );
            assert_eq!(
                other, other_free,
                "{fabric} {level:?}: host 2's NIC is its own"
            );
        }
    }
}
