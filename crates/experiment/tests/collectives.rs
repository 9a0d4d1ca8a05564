//! Collectives: ring and halving-doubling all-reduce against their analytic times on both
//! fabrics, all-to-all under oversubscription, the tree's latency advantage, and the
//! nccl-tests sweep on the command line.

mod common;
use common::scenario;
use fabricsim_core::units::Time;
use fabricsim_core::wire::{ib, roce};
use fabricsim_experiment::results::{collective_results, CollectiveResult};
use fabricsim_experiment::runner;
use fabricsim_experiment::scenario::{FabricKind, Scenario};

fn run(s: &Scenario) -> CollectiveResult {
    let out = runner::run(s, None, false).unwrap();
    let r = collective_results(&out);
    assert_eq!(r.len(), 1);
    r[0].clone()
}

fn single_switch(fabric: &str, hosts: u32, traffic: &str) -> Scenario {
    scenario(&format!(
        "[fabric]\nkind = \"{fabric}\"\nlink_rate = \"400Gbps\"\n[topology]\nkind = \"single-switch\"\nhosts = {hosts}\n[[traffic]]\nkind = \"collective\"\n{traffic}\n"
    ))
}

/// Payload bytes per second of a 400 Gb/s link with full MTU packets, and the latency of
/// one step: both endpoints' fixed latencies, two links, the switch latency and the
/// switch's store-and-forward of one packet.
fn link_model(s: &Scenario) -> (f64, Time) {
    let rate = s.link_rate;
    let (frame, endpoints, switch) = match s.fabric {
        FabricKind::Infiniband => (
            ib::write_packet_len(4096, false) as u64,
            s.ib.hca_tx_latency + s.ib.hca_rx_latency,
            s.ib.switch_latency,
        ),
        FabricKind::Rocev2 => (
            roce::write_frame_len(s.roce.ip, 4096, false) as u64,
            s.roce.nic_tx_latency + s.roce.nic_rx_latency,
            s.roce.switch_latency,
        ),
    };
    let payload_rate = rate.bps() as f64 / 8.0 * 4096.0 / frame as f64;
    let step = endpoints + s.link_delay * 2 + switch + rate.serialization(frame);
    (payload_rate, step)
}

fn assert_close(got: f64, expected: f64, tolerance: f64, what: &str) {
    let err = (got - expected).abs() / expected;
    assert!(
        err < tolerance,
        "{what}: {got:.1} vs analytic {expected:.1} ({:.2} % off)",
        err * 100.0
    );
}

#[test]
fn ring_all_reduce_matches_2_n_minus_1_over_n_s_over_b_on_both_fabrics() {
    let (n, size) = (8u32, 64u64 << 20);
    for fabric in ["infiniband", "rocev2"] {
        let s = single_switch(
            fabric,
            n,
            &format!("op = \"all-reduce\"\nsize = \"{size}B\""),
        );
        let r = run(&s);
        let (b, step) = link_model(&s);
        let steps = 2.0 * (n as f64 - 1.0);
        let expected_ns = steps / n as f64 * size as f64 / b * 1e9 + steps * step.ps() as f64 / 1e3;
        assert_close(
            r.time_ns.unwrap(),
            expected_ns,
            0.03,
            &format!("{fabric} ring time (ns)"),
        );
        // busbw is the link's payload rate (GB/s).
        assert_close(
            r.busbw_gbps.unwrap(),
            b / 1e9,
            0.03,
            &format!("{fabric} busbw (GB/s)"),
        );
    }
}

#[test]
fn halving_doubling_all_reduce_matches_its_analytic_time() {
    let (n, size) = (8u32, 32u64 << 20);
    let s = single_switch(
        "infiniband",
        n,
        &format!("op = \"all-reduce\"\nalgorithm = \"halving-doubling\"\nsize = \"{size}B\""),
    );
    let r = run(&s);
    let (b, step) = link_model(&s);
    // Each rank sends (n-1)/n of the buffer twice, in 2 log2(n) steps of one exchange each.
    let expected_ns = 2.0 * (n as f64 - 1.0) / n as f64 * size as f64 / b * 1e9
        + 2.0 * 3.0 * step.ps() as f64 / 1e3;
    assert_close(
        r.time_ns.unwrap(),
        expected_ns,
        0.03,
        "halving-doubling time (ns)",
    );
}

#[test]
fn all_to_all_slows_by_the_oversubscription_of_the_uplinks() {
    // 16 hosts on 4 leaves and one spine. Non-blocking: 1600 Gb/s uplinks; oversubscribed
    // 4:1: 400 Gb/s. Non-blocking, each NIC sends (n-1)/n of the buffer S; oversubscribed,
    // each leaf's uplink carries the (L-1)/L of its hosts' data bound off-leaf:
    // ratio = r x ((L-1)/L) / ((n-1)/n), which tends to r as leaves grow.
    // The fabric must really be non-blocking in the first case: InfiniBand with 128 KiB VL
    // buffers (with the default 64 KiB, credit head-of-line blocking at the leaves'
    // spine-facing inputs costs about 12 %), RoCEv2 without congestion control.
    let fabrics = [
        "kind = \"infiniband\"\n[fabric.infiniband]\nvl_buffer = \"128KiB\"",
        "kind = \"rocev2\"\n[fabric.rocev2]\ncongestion_control = \"none\"",
    ];
    for fabric in fabrics {
        let text = |uplink: &str| {
            format!("[fabric]\n{fabric}\n[topology]\nkind = \"leaf-spine\"\nhosts = 16\nleaves = 4\nspines = 1\nuplink_rate = \"{uplink}\"\n[[traffic]]\nkind = \"collective\"\nop = \"all-to-all\"\nsize = \"16MiB\"\n")
        };
        let fast = run(&scenario(&text("1600Gbps"))).time_ns.unwrap();
        let slow = run(&scenario(&text("400Gbps"))).time_ns.unwrap();
        let (r, l, n) = (4.0, 4.0, 16.0);
        let expected = r * ((l - 1.0) / l) / ((n - 1.0) / n);
        assert_close(
            slow / fast,
            expected,
            0.05,
            &format!("{fabric}: oversubscribed / non-blocking time"),
        );
    }
}

#[test]
fn tree_beats_ring_on_small_messages() {
    // 16 ranks, 8 KiB: the ring takes 2(n-1) = 30 dependent steps, the tree about
    // 2 log2(n) = 8, so the tree finishes first.
    let text = |alg: &str| format!("op = \"all-reduce\"\nalgorithm = \"{alg}\"\nsize = \"8KiB\"");
    let ring = run(&single_switch("infiniband", 16, &text("ring")))
        .time_ns
        .unwrap();
    let tree = run(&single_switch("infiniband", 16, &text("tree")))
        .time_ns
        .unwrap();
    assert!(tree < ring / 2.0, "tree {tree:.0} ns vs ring {ring:.0} ns");
}

/// Each op's time on 8 ranks of one switch, 4 MiB, one channel, against its closed form
/// (S: size, b: link payload rate, n: ranks, step: one hop's latency, C: channels, c:
/// chunk). With more channels, one channel's step latency hides behind another's data,
/// which these sums of data time and latency do not model.
/// - ring reduce-scatter and all-gather: each rank sends (n-1)/n S in n-1 dependent
///   steps: (n-1)/n S/b + (n-1) step;
/// - direct all-to-all: the same bytes in one step: (n-1)/n S/b + step;
/// - recursive-doubling all-gather: the same bytes in log2 n steps;
/// - chain broadcast: K = S/(C c) pieces per channel pipelined over n-1 hops, the C
///   channels sharing each link: (K + n - 2) C c/b + (n-1) step;
/// - double binary tree all-reduce: no closed form here (its pipeline fill depends on
///   the overlap of the two trees), so the bound every schedule obeys: the busiest NIC
///   sends 2 S (inner node of one tree, leaf of the other: up S/2 + down 2 x S/2 + up S/2),
///   so at least 2 S/b + 2 log2 n steps of latency; measured within 16 % of that bound, asserted within 25 %.
#[test]
fn every_op_takes_its_closed_form_time_on_both_fabrics() {
    let (n, size, channels, chunk) = (8.0f64, 4u64 << 20, 1.0f64, 512.0 * 1024.0);
    for fabric in ["infiniband", "rocev2"] {
        for (op, alg) in [
            ("reduce-scatter", "ring"),
            ("all-gather", "ring"),
            ("all-to-all", "direct"),
            ("broadcast", "ring"),
            ("all-reduce", "tree"),
            ("all-gather", "halving-doubling"),
        ] {
            let s = single_switch(
                fabric,
                n as u32,
                &format!("op = \"{op}\"\nalgorithm = \"{alg}\"\nsize = \"{size}B\"\nchannels = {channels}"),
            );
            let out = runner::run(&s, None, false).unwrap();
            assert!(
                out.report.flows.iter().all(|f| f.finish.is_some()),
                "{fabric} {op}"
            );
            let got = collective_results(&out)[0].time_ns.unwrap();
            let (b, step) = link_model(&s);
            let step_ns = step.ps() as f64 / 1e3;
            let moved_ns = (n - 1.0) / n * size as f64 / b * 1e9;
            let what = format!("{fabric} {op} {alg} time (ns)");
            match alg {
                "ring" if op == "broadcast" => {
                    let pieces = (size as f64 / (channels * chunk)).ceil();
                    let piece_ns = channels * chunk / b * 1e9;
                    let expected = (pieces + n - 2.0) * piece_ns + (n - 1.0) * step_ns;
                    assert_close(got, expected, 0.03, &what);
                }
                "ring" => assert_close(got, moved_ns + (n - 1.0) * step_ns, 0.03, &what),
                "direct" => assert_close(got, moved_ns + step_ns, 0.03, &what),
                "halving-doubling" => assert_close(got, moved_ns + n.log2() * step_ns, 0.03, &what),
                _ => {
                    let bound = 2.0 * size as f64 / b * 1e9 + 2.0 * n.log2() * step_ns;
                    assert!(
                        got >= bound && got < 1.25 * bound,
                        "{what}: {got:.0} ns against the busiest NIC's bound {bound:.0} ns"
                    );
                }
            }
        }
    }
}

#[test]
fn a_transfer_inside_a_server_takes_nvlink_time() {
    let s = scenario(
        "[topology]\nkind = \"leaf-spine\"\nhosts = 16\nleaves = 2\nspines = 1\ngpus_per_node = 8\nnvlink_bandwidth = \"450GB/s\"\nnvlink_latency = \"700ns\"\n[[traffic]]\nkind = \"flow\"\nsrc = 1\ndst = 6\nsize = \"64MiB\"\n",
    );
    let r = runner::run(&s, None, false).unwrap().report;
    let f = &r.flows[0];
    // Posting latency + NVLink latency + 64 MiB at 450 GB/s, exactly.
    let expected = s.ib.hca_tx_latency
        + Time::from_ns(700)
        + fabricsim_core::units::BitRate(450 * 8_000_000_000).serialization(64 << 20);
    assert_eq!(f.finish.unwrap() - f.start, expected);
    assert!(
        r.ports.iter().all(|p| p.tx_packets == 0),
        "no packet touched the NICs"
    );
}

#[test]
fn hierarchical_all_reduce_on_8_gpu_servers_beats_a_flat_ring() {
    // 4 rail-optimized servers of 8 GPUs. Hierarchical: reduce-scatter over NVLink,
    // all-reduce of each GPU's S/8 share across servers on its rail, all-gather over
    // NVLink, one phase after the other.
    let (servers, gpus, size) = (4.0f64, 8.0f64, 256u64 << 20);
    let text = |alg: &str| {
        format!("[fabric.infiniband]\nadaptive_routing = true\n[topology]\nkind = \"rail-optimized\"\nnodes = 4\ngpus_per_node = 8\nspines = 2\n[[traffic]]\nkind = \"collective\"\nop = \"all-reduce\"\nalgorithm = \"{alg}\"\nsize = \"{size}B\"\n")
    };
    let s = scenario(&text("hierarchical"));
    let hier = run(&s).time_ns.unwrap();
    let flat = run(&scenario(&text("ring"))).time_ns.unwrap();
    let (b, step) = link_model(&s);
    let nv = s.nvlink.rate.bps() as f64 / 8.0;
    let nv_step = (s.ib.hca_tx_latency + s.nvlink.latency).ps() as f64 / 1e3;
    let s_bytes = size as f64;
    // Analytic: 2 NVLink phases of (g-1) steps, and 2(N-1) rail steps on S/g.
    let expected = 2.0 * (gpus - 1.0) / gpus * s_bytes / nv * 1e9
        + 2.0 * (gpus - 1.0) * nv_step
        + 2.0 * (servers - 1.0) / servers * s_bytes / gpus / b * 1e9
        + 2.0 * (servers - 1.0) * step.ps() as f64 / 1e3;
    assert_close(hier, expected, 0.03, "hierarchical all-reduce time (ns)");
    assert!(
        flat > 2.0 * hier,
        "hierarchical {hier:.0} ns vs flat ring {flat:.0} ns"
    );
    println!(
        "256 MiB all-reduce on 4 x 8 GPUs: hierarchical {:.3} ms, flat ring {:.3} ms ({:.1}x faster)",
        hier / 1e6,
        flat / 1e6,
        flat / hier
    );
}

/// NVLS on one 8-GPU server: the NVSwitch reduces each GPU's slice and multicasts it, so
/// each GPU's NVLink carries the buffer and a slice each way, S (1 + 1/8), at NVLS's
/// efficiency (0.85, NCCL's nvlsEfficiency), against the ring's 2 (8 - 1) / 8 S. At both
/// levels the time is that bound; NVLS's busbw over the ring's is what nccl-tests
/// measured on an H100 server, 480 / 370 GB/s (docs/REFERENCE.md section 9), within 5 %.
#[test]
fn nvls_on_one_server_carries_the_buffer_and_a_slice_each_way() {
    use fabricsim_experiment::scenario::Level;
    let size = 256u64 << 20;
    let text = |alg: &str| {
        format!("[topology]\nkind = \"single-switch\"\nhosts = 8\ngpus_per_node = 8\n[[traffic]]\nkind = \"collective\"\nop = \"all-reduce\"\nalgorithm = \"{alg}\"\nsize = \"{size}B\"\n")
    };
    for level in [Level::Packet, Level::Flow] {
        let mut nvls = scenario(&text("nvls"));
        nvls.set_level(level).unwrap();
        let r = run(&nvls);
        let nv = nvls.nvlink.rate.bps() as f64 / 8.0 * 0.85;
        let expected = size as f64 * (1.0 + 1.0 / 8.0) / nv * 1e9;
        assert_close(
            r.time_ns.unwrap(),
            expected,
            0.02,
            &format!("{level:?}: NVLS time (ns)"),
        );
        let mut ring = scenario(&text("ring"));
        ring.set_level(level).unwrap();
        let ratio = r.busbw_gbps.unwrap() / run(&ring).busbw_gbps.unwrap();
        assert_close(
            ratio,
            480.0 / 370.0,
            0.05,
            &format!("{level:?}: NVLS / ring busbw"),
        );
    }
}

/// NVLS-tree on 4 servers of 8 GPUs (InfiniBand, adaptive routing): each slice's owners
/// all-reduce it over two binary trees of the servers, each tree half the slice. In
/// either tree a server sends its half up once (not the root) and down once per child,
/// so over both every NIC sends 3 halves: S / 8 x 3 / 2 at the link's payload rate bounds
/// the time, and the pipelined NVLink work and the trees' fill add a few per cent. Flow
/// level agrees with packet level within 5 %.
#[test]
fn nvls_tree_across_servers_is_bound_by_its_nics() {
    use fabricsim_experiment::scenario::Level;
    let size = 256u64 << 20;
    let mut times = Vec::new();
    for level in [Level::Packet, Level::Flow] {
        let mut s = scenario(&format!("[fabric]\nkind = \"infiniband\"\nlink_rate = \"400Gbps\"\n[fabric.infiniband]\nadaptive_routing = true\n[topology]\nkind = \"rail-optimized\"\nnodes = 4\ngpus_per_node = 8\nspines = 2\n[[traffic]]\nkind = \"collective\"\nop = \"all-reduce\"\nalgorithm = \"nvls\"\nsize = \"{size}B\"\n"));
        s.set_level(level).unwrap();
        let t = run(&s).time_ns.unwrap();
        let (b, _) = link_model(&s);
        let bound = size as f64 / 8.0 * 3.0 / 2.0 / b * 1e9;
        assert!(
            t >= bound && t <= bound * 1.08,
            "{level:?}: NVLS-tree {t:.0} ns against the NICs' bound {bound:.0} ns"
        );
        times.push(t);
    }
    assert_close(
        times[1],
        times[0],
        0.05,
        "NVLS-tree: flow against packet level (ns)",
    );
}

#[test]
fn sharp_all_reduce_runs_at_the_link_rate_in_algbw() {
    // SHARP on a k=4 fat-tree (16 ranks): each rank sends its buffer once up the switches'
    // aggregation tree and receives the result once, so algbw is the link's payload rate,
    // and nccl-tests' busbw = algbw x 2(n-1)/n is nearly twice the ring's.
    let text = |alg: &str, fabric: &str| {
        format!("[fabric]\nkind = \"{fabric}\"\n[topology]\nkind = \"fat-tree\"\nk = 4\n[[traffic]]\nkind = \"collective\"\nop = \"all-reduce\"\nalgorithm = \"{alg}\"\nsize = \"64MiB\"\n")
    };
    let s = scenario(&text("sharp", "infiniband"));
    let out = runner::run(&s, None, false).unwrap();
    let sharp = collective_results(&out)[0].clone();
    let ring = run(&scenario(&text("ring", "infiniband")));
    let (b, _) = link_model(&s);
    assert_close(
        sharp.algbw_gbps.unwrap(),
        b / 1e9,
        0.03,
        "SHARP algbw (GB/s)",
    );
    // Each rank's contribution (its ends one host) crosses the network: 16 NICs send at
    // the link's payload rate.
    assert_close(
        fabricsim_experiment::results::goodput_gbps(&out.report, s.gpus_per_node),
        16.0 * b * 8.0 / 1e9,
        0.03,
        "SHARP's network goodput (Gb/s)",
    );
    let n = 16.0;
    assert_close(
        sharp.busbw_gbps.unwrap() / ring.busbw_gbps.unwrap(),
        2.0 * (n - 1.0) / n,
        0.03,
        "SHARP busbw / ring busbw",
    );
    let err = runner::run(&scenario(&text("sharp", "rocev2")), None, false)
        .err()
        .unwrap();
    assert!(err.contains("InfiniBand"), "{err}");
}

/// NCCL's protocols carry data in lines with flags: LL128's 128-byte lines hold 120 bytes
/// of data and LL's 16-byte lines 8, so a bandwidth-bound ring all-reduce reaches 15/16
/// and 1/2 of Simple's bus bandwidth, on both fabrics. Each protocol's default step is
/// its NCCL buffer over 8 steps, less its flags.
#[test]
fn nccl_protocols_cost_their_line_overhead() {
    for fabric in ["infiniband", "rocev2"] {
        let busbw = |protocol: &str| {
            let s = single_switch(
                fabric,
                2,
                &format!("op = \"all-reduce\"\nalgorithm = \"ring\"\nsize = \"64MiB\"\nprotocol = \"{protocol}\""),
            );
            run(&s).busbw_gbps.unwrap()
        };
        let simple = busbw("simple");
        for (protocol, share) in [("ll128", 15.0 / 16.0), ("ll", 0.5)] {
            let r = busbw(protocol) / simple;
            assert!(
                (r - share).abs() < 0.005 * share,
                "{fabric} {protocol}: {r} of Simple"
            );
        }
    }
    let chunk = |protocol: &str| {
        let s = single_switch(
            "infiniband",
            2,
            &format!("op = \"all-reduce\"\nsize = \"1MiB\"\nprotocol = \"{protocol}\""),
        );
        match &s.traffic[0] {
            fabricsim_fabric::workload::Traffic::Collective(c) => c.chunk,
            _ => unreachable!(),
        }
    };
    assert_eq!(
        (chunk("simple"), chunk("ll128"), chunk("ll")),
        (512 << 10, 576_000, 32 << 10)
    );
    let refused = |extra: &str| {
        Scenario::parse(
            &format!("[topology]\nkind = \"single-switch\"\nhosts = 4\n[[traffic]]\n{extra}\n"),
            "t",
        )
        .unwrap_err()
        .to_string()
    };
    let e = refused("kind = \"training\"\nsize = \"1MiB\"\nprotocol = \"ll\"");
    assert!(e.contains("protocol") && e.contains("Simple"), "{e}");
    let e =
        refused("kind = \"collective\"\nop = \"all-reduce\"\nsize = \"1MiB\"\nprotocol = \"fast\"");
    assert!(e.contains("protocol = \"fast\""), "{e}");
}

/// `[topology] gpu` sets NVLink's bandwidth per GPU and direction by generation (half the
/// datasheets' both-ways figures); nvlink_bandwidth overrides it; with one GPU per node
/// it is refused.
#[test]
fn gpu_generations_set_nvlink() {
    let nvlink = |extra: &str| {
        let s = scenario(&format!(
            "[topology]\nkind = \"rail-optimized\"\nnodes = 2\ngpus_per_node = 8\n{extra}\n[[traffic]]\nkind = \"flow\"\nsrc = 0\ndst = 1\nsize = 4096\n"
        ));
        s.nvlink.rate.bps() / 8_000_000_000
    };
    assert_eq!(nvlink(""), 450, "H100 by default");
    assert_eq!(nvlink("gpu = \"a100\""), 300);
    assert_eq!(nvlink("gpu = \"b200\""), 900);
    assert_eq!(
        nvlink("gpu = \"a100\"\nnvlink_bandwidth = \"100GB/s\""),
        100
    );
    let e = Scenario::parse("[topology]\nkind = \"single-switch\"\nhosts = 2\ngpu = \"a100\"\n[[traffic]]\nkind = \"flow\"\nsrc = 0\ndst = 1\nsize = 4096\n", "t").unwrap_err().to_string();
    assert!(e.contains("topology.gpu"), "{e}");
}

/// A GPU's memory bandwidth times the ring's reductions and copies between steps: in a
/// latency-bound ring (one piece per step) each step waits for its reduction (3 bytes of
/// memory traffic per byte) or copy (2), so 8 ranks' all-reduce of 256 KiB blocks takes
/// 7 reductions and 6 copies more, at packet and at flow level.
#[test]
fn gpu_reductions_and_copies_lengthen_a_latency_bound_ring() {
    use fabricsim_experiment::scenario::Level;
    for level in [Level::Packet, Level::Flow] {
        let time = |gpu: &str| {
            let mut s = scenario(&format!(
                "[fabric]\nkind = \"infiniband\"\nlink_rate = \"400Gbps\"\n[topology]\nkind = \"single-switch\"\nhosts = 8\n{gpu}\n[[traffic]]\nkind = \"collective\"\nop = \"all-reduce\"\nalgorithm = \"ring\"\nsize = \"2MiB\"\n"
            ));
            s.set_level(level).unwrap();
            run(&s).time_ns.unwrap()
        };
        let added = time("gpu_memory_bandwidth = \"1000GB/s\"") - time("");
        let expected = (7.0 * 3.0 + 6.0 * 2.0) * (256 << 10) as f64 / 1000.0; // ns
        assert_close(added, expected, 0.03, &format!("{level:?}: added time"));
    }
}

/// `[nccl] algorithm`: "auto" runs NCCL's tuner model on every all-reduce that names no
/// algorithm (and says why in `check`), "ring" on GPU servers runs a ring per rail, an
/// entry's own `algorithm` wins, NVLink SHARP runs where the NVSwitch has it and is
/// refused by name where not, and files without
/// `[nccl]` keep the v1 ring unless they design a cluster.
#[test]
fn nccl_algorithm_is_chosen_as_nccls_tuner_chooses_or_as_forced() {
    use fabricsim_fabric::workload::{CollectiveAlgorithm as A, Traffic};
    let cluster = |extra: &str, entry: &str| {
        format!(
            "[cluster]\ngpus = 4096\ngpus_per_node = 8\nnic_rate = \"400Gbps\"\n{extra}\n[[traffic]]\nkind = \"training\"\nsize = \"64MiB\"\nbuckets = 8\n{entry}\n"
        )
    };
    let algorithm = |s: &Scenario| match &s.traffic[0] {
        Traffic::Training(t) => t.algorithm,
        other => panic!("{other:?}"),
    };
    let auto = Scenario::parse(&cluster("[nccl]\nalgorithm = \"auto\"", ""), "c").unwrap();
    assert_eq!(
        algorithm(&auto),
        A::Tree,
        "8 MiB buckets on 512 servers: NCCL's model runs trees"
    );
    // 256 MiB on 16 servers: NVLS-tree (the tuner's unit test works its times by hand).
    let big = Scenario::parse(
        "[cluster]\ngpus = 128\ngpus_per_node = 8\nnic_rate = \"400Gbps\"\n[[traffic]]\nkind = \"training\"\nsize = \"256MiB\"\nbuckets = 1\n",
        "c",
    )
    .unwrap();
    assert_eq!(algorithm(&big), A::Nvls);
    assert!(big.effective_toml().contains("nvls"));
    let text = auto.effective_toml();
    assert!(
        text.contains("NCCL 2.30.7") && text.contains("ring") && text.contains("tree"),
        "{text}"
    );
    let ring = Scenario::parse(&cluster("[nccl]\nalgorithm = \"ring\"", ""), "c").unwrap();
    assert_eq!(algorithm(&ring), A::Hierarchical);
    let own = Scenario::parse(
        &cluster("[nccl]\nalgorithm = \"tree\"", "algorithm = \"ring\""),
        "c",
    )
    .unwrap();
    assert_eq!(algorithm(&own), A::Ring);
    // A designed cluster without `[nccl]` runs NCCL's tuner too.
    let unset = Scenario::parse(&cluster("", ""), "c").unwrap();
    assert_eq!(algorithm(&unset), A::Tree);
    let nvls = Scenario::parse(&cluster("[nccl]\nalgorithm = \"nvls\"", ""), "c").unwrap();
    assert_eq!(algorithm(&nvls), A::Nvls);
    // A100 servers' NVSwitch has no NVLink SHARP: NVLS is refused by name.
    let a100 = |alg: &str| {
        Scenario::parse(&format!("[topology]\nkind = \"rail-optimized\"\nnodes = 2\ngpus_per_node = 8\ngpu = \"a100\"\n[[traffic]]\nkind = \"collective\"\nop = \"all-reduce\"\nsize = \"1GiB\"\nalgorithm = \"{alg}\"\n"), "a")
    };
    let err = a100("nvls").unwrap_err().to_string();
    assert!(err.contains("nvls") && err.contains("a100"), "{err}");
    assert!(a100("hierarchical").is_ok());
    let plain = single_switch("infiniband", 4, "op = \"all-reduce\"\nsize = \"1MiB\"");
    assert!(matches!(&plain.traffic[0], Traffic::Collective(c) if c.algorithm == A::Ring));
}

/// Where NCCL's model says one algorithm wins clearly, packet level agrees: a 64 KiB
/// all-reduce over 32 servers is latency-bound (a ring's 62 steps against a tree's
/// 2 log2 32), and NCCL's model picks the tree.
#[test]
fn where_nccls_model_picks_the_tree_packet_level_agrees() {
    let text = |alg: &str| {
        format!(
            "[fabric]\nkind = \"infiniband\"\nlink_rate = \"400Gbps\"\n[topology]\nkind = \"leaf-spine\"\nhosts = 32\nleaves = 4\nspines = 4\n{alg}\n[[traffic]]\nkind = \"collective\"\nop = \"all-reduce\"\nsize = \"64KiB\"\nchunk = \"8KiB\"\n"
        )
    };
    let auto = scenario(&text("[nccl]\nalgorithm = \"auto\""));
    assert!(auto.effective_toml().contains("algorithm = \"tree\""));
    let tree = run(&auto).time_ns.unwrap();
    let ring = run(&scenario(&text("[nccl]\nalgorithm = \"ring\"")))
        .time_ns
        .unwrap();
    assert!(tree < ring * 0.5, "tree {tree} ns, ring {ring} ns");
}

#[test]
fn pxn_keeps_an_all_to_all_on_its_rails() {
    // Two servers of four GPUs, rail-optimized: GPU g of each server on rail leaf g, the
    // leaves joined by spines. With PXN a share for the other server's GPU on another
    // rail goes over NVLink to the GPU on that rail first, so no byte crosses a spine;
    // without it, a GPU's own NIC sends it across the spines.
    for pxn in [true, false] {
        let s = scenario(&format!(
            "[nccl]\npxn = {pxn}\n[fabric]\nkind = \"infiniband\"\n[topology]\nkind = \"rail-optimized\"\nnodes = 2\ngpus_per_node = 4\nspines = 2\n[[traffic]]\nkind = \"collective\"\nop = \"all-to-all\"\nsize = \"1MiB\"\n"
        ));
        let r = runner::run(&s, None, false).unwrap().report;
        assert!(r.flows.iter().all(|f| f.finish.is_some()));
        // Packets, not bytes: the links' periodic credit updates cross the spines anyway.
        let across: u64 = (r.ports.iter())
            .filter(|p| p.between_switches)
            .map(|p| p.tx_packets)
            .sum();
        assert_eq!(
            across == 0,
            pxn,
            "pxn = {pxn}: {across} packets between switches"
        );
    }
}
