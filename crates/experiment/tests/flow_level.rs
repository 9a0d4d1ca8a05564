//! Flow level: a lone flow completes at its ideal time; flows sharing a port share it
//! fairly; a ring all-reduce meets its analytic time and packet level's; a 4,096-GPU
//! training iteration is no faster than its bandwidth bound; runs are deterministic;
//! the mechanisms only packets show are refused; calibration cases stay within target.

mod common;
use common::scenario;
use fabricsim_core::wire::{ib, roce};
use fabricsim_experiment::calibrate;
use fabricsim_experiment::catalog::Catalog;
use fabricsim_experiment::results::{self, collective_results};
use fabricsim_experiment::runner::{self, Outcome};
use fabricsim_experiment::scenario::{FabricKind, Level, Scenario};

fn at(level: Level, s: &Scenario) -> Outcome {
    let mut s = s.clone();
    s.set_level(level).unwrap();
    runner::run(&s, None, false).unwrap()
}

/// The first collective's time at flow and at packet level (ns), and flow / packet - 1.
fn collective_at_both_levels(s: &Scenario) -> (f64, f64, f64) {
    let time = |level| collective_results(&at(level, s))[0].time_ns.unwrap();
    let (flow, packet) = (time(Level::Flow), time(Level::Packet));
    (flow, packet, flow / packet - 1.0)
}

/// A message's wire bytes at full 4096 B packets, as the fabric frames them.
fn wire(fabric: FabricKind, size: u64) -> u64 {
    let packets = size.div_ceil(4096);
    let frame = match fabric {
        FabricKind::Infiniband => ib::write_packet_len(4096, false) as u64,
        FabricKind::Rocev2 => roce::write_frame_len(roce::IpVersion::V4, 4096, false) as u64,
    };
    // Every packet full, the first carrying the RETH too.
    let first = match fabric {
        FabricKind::Infiniband => ib::write_packet_len(4096, true) as u64,
        FabricKind::Rocev2 => roce::write_frame_len(roce::IpVersion::V4, 4096, true) as u64,
    };
    first + frame * (packets - 1)
}

#[test]
fn a_lone_flow_completes_at_its_ideal_time_and_as_packet_level_does() {
    for fabric in ["infiniband", "rocev2"] {
        let s = scenario(&format!(
            "[fabric]\nkind = \"{fabric}\"\n[topology]\nkind = \"fat-tree\"\nk = 4\n[[traffic]]\nkind = \"flow\"\nsrc = 0\ndst = 15\nsize = \"4MiB\"\n"
        ));
        let flow = at(Level::Flow, &s).report.flows[0].clone();
        let fct = flow.finish.unwrap() - flow.start;
        assert_eq!(fct, flow.ideal, "{fabric}: alone, exactly the ideal time");
        let packet = at(Level::Packet, &s).report.flows[0].clone();
        let p = (packet.finish.unwrap() - packet.start).ps() as f64;
        assert!(
            (fct.ps() as f64 / p - 1.0).abs() < 0.005,
            "{fabric}: flow {fct} vs packet {p} ps"
        );
    }
}

#[test]
fn an_incast_shares_the_receivers_link_equally_on_infiniband() {
    // N flows into one host: each drains at rate / N, so each completes (N - 1) whole
    // messages' link time after its ideal time.
    let n = 6u64;
    let size = 1u64 << 20;
    let s = scenario(
        "[simulation]\nopen_loop = \"fluid\"\n[fabric]\nkind = \"infiniband\"\nlink_rate = \"400Gbps\"\n[topology]\nkind = \"single-switch\"\nhosts = 7\n[[traffic]]\nkind = \"incast\"\nsenders = [1, 2, 3, 4, 5, 6]\ndst = 0\nsize = \"1MiB\"\n",
    );
    let out = at(Level::Flow, &s);
    let link = s
        .link_rate
        .serialization(wire(FabricKind::Infiniband, size))
        .ps() as f64;
    for f in &out.report.flows {
        let fct = (f.finish.unwrap() - f.start).ps() as f64;
        let expected = f.ideal.ps() as f64 + (n - 1) as f64 * link;
        assert!((fct - expected).abs() <= 8.0, "{fct} ps vs {expected} ps");
        assert_eq!(f.delivered_bytes, f.bytes, "every byte delivered");
    }
    // The receiver's link carried every message's wire bytes once.
    let down: u64 = out
        .report
        .ports
        .iter()
        .filter(|p| p.peer_node == 0)
        .map(|p| p.tx_bytes)
        .sum();
    assert_eq!(down, n * wire(FabricKind::Infiniband, size));
}

#[test]
fn a_rocev2_incast_at_a_probed_fan_in_completes_as_packet_level() {
    // The sharing probe measured exactly this (8:1 of 1 MiB on one switch, these
    // settings): the shared port's measured share reproduces packet level's completion.
    let s = scenario(
        "[simulation]\nopen_loop = \"fluid\"\n[fabric]\nkind = \"rocev2\"\n[topology]\nkind = \"single-switch\"\nhosts = 9\n[[traffic]]\nkind = \"incast\"\nsenders = [1, 2, 3, 4, 5, 6, 7, 8]\ndst = 0\nsize = \"1MiB\"\n",
    );
    let last = |o: &Outcome| {
        o.report
            .flows
            .iter()
            .filter_map(|f| f.finish)
            .max()
            .unwrap()
    };
    let (flow, packet) = (last(&at(Level::Flow, &s)), last(&at(Level::Packet, &s)));
    let err = flow.ps() as f64 / packet.ps() as f64 - 1.0;
    assert!(err.abs() < 0.01, "flow {flow} vs packet {packet}");
    // Well below the fair share: DCQCN cut the senders, so the correction did work.
    let fair = s
        .link_rate
        .serialization(wire(FabricKind::Rocev2, 1 << 20))
        .ps()
        * 8;
    assert!(
        packet.ps() as f64 > 1.5 * fair as f64,
        "{packet} vs fair {fair} ps"
    );
}

#[test]
fn a_ring_all_reduce_meets_its_analytic_time_and_packet_level() {
    for fabric in [FabricKind::Infiniband, FabricKind::Rocev2] {
        let s = scenario(&format!(
            "[fabric]\nkind = \"{}\"\nlink_rate = \"400Gbps\"\n[topology]\nkind = \"single-switch\"\nhosts = 8\n[[traffic]]\nkind = \"collective\"\nop = \"all-reduce\"\nalgorithm = \"ring\"\nsize = \"64MiB\"\n",
            fabric.name()
        ));
        let flow = collective_results(&at(Level::Flow, &s))[0].time_ns.unwrap();
        let packet = collective_results(&at(Level::Packet, &s))[0]
            .time_ns
            .unwrap();
        // 2 (n - 1) / n of the buffer through each host's link at its payload rate.
        let bytes = 2.0 * 7.0 / 8.0 * (64u64 << 20) as f64;
        let payload_share = (64u64 << 20) as f64 / wire(fabric, 64 << 20) as f64;
        let analytic = bytes / (50.0 * payload_share);
        assert!(
            flow >= analytic && flow < analytic * 1.02,
            "{fabric:?}: flow {flow} ns vs analytic {analytic} ns"
        );
        assert!(
            (flow / packet - 1.0).abs() < 0.01,
            "{fabric:?}: flow {flow} ns vs packet {packet} ns"
        );
    }
}

/// Flow level's pipelines against packet level, where latency decides: ring all-reduces
/// on a k = 8 fat-tree (rings of 8 to 128 ranks whose edges cross one, three or five
/// switches, ring steps of 4 KiB to 1 MiB), NCCL's node-aware trees on 16 to 128 GPUs with
/// NVLink in each server (one 64 KiB piece per tree edge: a chain of NVLink steps, then
/// network steps), and training with trees. A compact edge's wait is the sum of the steps
/// of the edges before it (each at its own latency), so both levels walk the same
/// critical path.
#[test]
fn latency_bound_rings_and_trees_agree_with_packet_level() {
    let mut cases = Vec::new();
    for fabric in ["infiniband", "rocev2"] {
        // (ranks, total bytes): steps of size / ranks.
        for (ranks, size) in [
            (8u32, 32u64 << 10),
            (8, 8 << 20),
            (32, 2 << 20),
            (128, 512 << 10),
        ] {
            let list: Vec<String> = (0..ranks).map(|r| r.to_string()).collect();
            cases.push((
                format!("{fabric} ring of {ranks}, {} KiB steps", (size / ranks as u64) >> 10),
                format!(
                    "[fabric]\nkind = \"{fabric}\"\n[topology]\nkind = \"fat-tree\"\nk = 8\n[[traffic]]\nkind = \"collective\"\nop = \"all-reduce\"\nalgorithm = \"ring\"\nranks = [{}]\nsize = {size}\n",
                    list.join(", ")
                ),
                0.02,
            ));
        }
        for gpus in [16, 64, 128] {
            cases.push((
                format!("{fabric} tree over {gpus} GPUs, 1 MiB"),
                format!(
                    "[fabric]\nkind = \"{fabric}\"\n[cluster]\ngpus = {gpus}\ngpus_per_node = 8\nnic_rate = \"400Gbps\"\n[[traffic]]\nkind = \"collective\"\nop = \"all-reduce\"\nalgorithm = \"tree\"\nsize = \"1MiB\"\n"
                ),
                0.05,
            ));
        }
    }
    for (name, file, ceiling) in cases {
        let (flow, packet, err) = collective_at_both_levels(&scenario(&file));
        assert!(
            err.abs() < ceiling,
            "{name}: flow {flow} ns vs packet {packet} ns ({:+.1} %)",
            err * 100.0
        );
    }
}

#[test]
fn a_4096_gpu_iteration_is_no_faster_than_its_bandwidth_bound() {
    let s = scenario(
        "[simulation]\nlevel = \"flow\"\n[cluster]\ngpus = 4096\ngpus_per_node = 8\nnic_rate = \"400Gbps\"\n[[traffic]]\nkind = \"training\"\nsize = \"16GiB\"\nbuckets = 1\niterations = 1\nforward = \"1ms\"\nbackward = \"2ms\"\noverlap = false\nalgorithm = \"hierarchical\"\n",
    );
    let out = runner::run(&s, None, false).unwrap();
    let summary = results::summary(&s, &out);
    assert_eq!(summary.level, "flow");
    let t = summary.training[0].iteration_time_ns.unwrap();
    // Compute, then NVLink reduce-scatter and all-gather (7/8 of the buffer each way at
    // 450 GB/s), then each rail's ring over 512 servers on 1/8 of it at 50 GB/s. 16 GiB
    // makes each ring step 8 pieces of 512 KiB, so the ring is bandwidth-bound (a step's
    // latency hides behind the pieces before it).
    let gib = (16u64 << 30) as f64;
    let nvlink = 2.0 * 7.0 / 8.0 * gib / 450.0;
    let rail = 2.0 * 511.0 / 512.0 * gib / 8.0 / 50.0;
    let bound = 3e6 + nvlink + rail;
    assert!(t >= bound && t < bound * 1.05, "{t} ns vs bound {bound} ns");
}

#[test]
fn flow_level_is_deterministic() {
    let s = scenario(
        "[simulation]\nlevel = \"flow\"\n[fabric]\nkind = \"rocev2\"\n[topology]\nkind = \"fat-tree\"\nk = 8\n[[traffic]]\nkind = \"permutation\"\nsize = \"2MiB\"\n",
    );
    let a = runner::run(&s, None, false).unwrap();
    let b = runner::run(&s, None, false).unwrap();
    assert_eq!(a.report, b.report);
    assert!(a.report.flows.iter().all(|f| f.finish.is_some()));
}

#[test]
fn flow_level_refuses_what_only_packets_show_and_auto_chooses_by_size() {
    let storm = "[fabric]\nkind = \"rocev2\"\n[[fabric.rocev2.pause_storm]]\nhost = 1\nstart = \"1us\"\nduration = \"5us\"\n[topology]\nkind = \"single-switch\"\nhosts = 4\n[[traffic]]\nkind = \"flow\"\nsrc = 0\ndst = 1\nsize = 1000\n";
    let err = Scenario::parse(&format!("[simulation]\nlevel = \"flow\"\n{storm}"), "s")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("pause_storm") && err.contains("packet level"),
        "{err}"
    );
    // auto above 4 hosts: the storm keeps it at packet level, and says why.
    let auto = Scenario::parse(
        &format!("[simulation]\nlevel = \"auto\"\nflow_above_hosts = 3\n{storm}"),
        "s",
    )
    .unwrap();
    let (flow, why) = auto.runs_at_flow_level();
    assert!(!flow && why.unwrap().contains("pause_storm"));
    let plain = "[topology]\nkind = \"single-switch\"\nhosts = 4\n[[traffic]]\nkind = \"flow\"\nsrc = 0\ndst = 1\nsize = 1000\n";
    for (above, expect) in [(3, true), (4, false)] {
        let s = Scenario::parse(
            &format!("[simulation]\nlevel = \"auto\"\nflow_above_hosts = {above}\n{plain}"),
            "s",
        )
        .unwrap();
        assert_eq!(s.runs_at_flow_level().0, expect, "4 hosts, above {above}");
    }
    let err = Scenario::parse(&format!("[simulation]\nflow_above_hosts = 3\n{plain}"), "s")
        .unwrap_err()
        .to_string();
    assert!(err.contains("simulation.flow_above_hosts = 3"), "{err}");
}

/// `fabricsim run` makes more runs than the main one (a training job's +1 us run, each of
/// several jobs alone, the run without its failures); the budget holds them together.
#[test]
fn auto_counts_every_run_that_run_makes_against_the_budget() {
    use fabricsim_experiment::estimate::{estimate, packet_runs_wall_seconds};
    let text = |budget: &str| {
        format!(
            "[simulation]\nlevel = \"auto\"\n{budget}[topology]\nkind = \"fat-tree\"\nk = 4\n\
             [[job]]\nname = \"a\"\ngpus = 8\nplacement = \"list\"\nhosts = [0, 1, 2, 3, 4, 5, 6, 7]\n\
             [[job]]\nname = \"b\"\ngpus = 8\nplacement = \"list\"\nhosts = [8, 9, 10, 11, 12, 13, 14, 15]\n\
             [[traffic]]\njob = \"a\"\nkind = \"collective\"\nop = \"all-reduce\"\nalgorithm = \"ring\"\nsize = \"32MiB\"\n\
             [[traffic]]\njob = \"b\"\nkind = \"collective\"\nop = \"all-reduce\"\nalgorithm = \"ring\"\nsize = \"32MiB\"\n"
        )
    };
    let s = scenario(&text(""));
    // The main run and each job alone.
    assert_eq!(s.runs_made(), 3);
    let mut packet = s.clone();
    packet.set_level(Level::Packet).unwrap();
    let events = estimate(&packet).unwrap().events;
    let (one, cores) = packet_runs_wall_seconds(events, 1);
    let (three, _) = packet_runs_wall_seconds(events, 3);
    // Three runs share the cores: never less than one run alone, and on fewer than three
    // cores more than it.
    assert!(
        three >= one && (cores >= 3 || three > one),
        "{one} s, {three} s on {cores}"
    );
    // A budget between one run's estimate and three runs': one run fits, three do not.
    let budget = format!(
        "budget = \"{}us\"\n",
        ((one + three) / 2.0 * 1e6).round() as u64
    );
    let mut s = scenario(&text(&budget));
    if cores < 3 {
        assert!(!s.runs_at_flow_level().0, "one run fits");
        let why = s.settle_level_for(s.runs_made()).unwrap();
        assert_eq!(s.level, Level::Flow, "{why}");
        assert!(
            why.contains("3 packet-level runs") && why.contains("beyond the budget"),
            "{why}"
        );
    }
}

#[test]
fn auto_runs_packet_level_while_its_estimate_fits_the_budget() {
    // One 64 MiB ring all-reduce over 16 hosts: tens of millions of packet-level events,
    // seconds at a few million events per second on any core.
    let file = |budget: &str| {
        format!(
            "[simulation]\nlevel = \"auto\"\n{budget}[topology]\nkind = \"fat-tree\"\nk = 4\n[[traffic]]\nkind = \"collective\"\nop = \"all-reduce\"\nalgorithm = \"ring\"\nsize = \"64MiB\"\n"
        )
    };
    let (events, secs) = {
        let mut s = scenario(&file(""));
        s.set_level(Level::Packet).unwrap();
        let e = fabricsim_experiment::estimate::estimate(&s).unwrap();
        (
            e.events,
            fabricsim_experiment::estimate::packet_wall_seconds(e.events).0,
        )
    };
    assert!(
        events > 1_000_000 && secs > 0.01 && secs < 60.0,
        "{events} events, {secs} s"
    );
    // The default budget (minutes) holds it; one of a hundredth of its estimate does not.
    let (flow, why) = scenario(&file("")).runs_at_flow_level();
    let why = why.unwrap();
    assert!(!flow && why.contains("within the budget of 5 min"), "{why}");
    let tight = format!("budget = \"{}us\"\n", (secs * 1e4).ceil() as u64);
    let s = scenario(&file(&tight));
    let (flow, why) = s.runs_at_flow_level();
    let why = why.unwrap();
    assert!(flow && why.contains("beyond the budget"), "{why}");
    // The summary says which level ran, and why, with the calibration suite's error.
    let out = runner::run(&s, None, false).unwrap();
    let summary = results::summary(&s, &out);
    assert_eq!(summary.level, "flow");
    let reason = summary.level_reason.unwrap();
    assert!(
        reason.contains("errs from") && reason.contains("examples/calibration"),
        "{reason}"
    );
    // A budget belongs to auto alone, and is one rule or the other.
    for (extra, key) in [
        (
            "level = \"packet\"\nbudget = \"1min\"\n",
            "simulation.budget",
        ),
        (
            "level = \"auto\"\nbudget = \"1min\"\nflow_above_hosts = 8\n",
            "simulation.flow_above_hosts",
        ),
        (
            "level = \"auto\"\nbudget = \"5 parsecs\"\n",
            "simulation.budget",
        ),
    ] {
        let text = format!("[simulation]\n{extra}[topology]\nkind = \"single-switch\"\nhosts = 2\n[[traffic]]\nkind = \"flow\"\nsrc = 0\ndst = 1\nsize = 1000\n");
        let err = Scenario::parse(&text, "s").unwrap_err().to_string();
        assert!(err.contains(key), "{extra}: {err}");
    }
}

/// The whole suite, rerun: both levels' figures equal the record (examples/calibration/
/// record.json, which users are shown as flow level's error), BENCHMARKS.md's table is the
/// record's, the bandwidth-bound cases stay within 5 % (host data paths included, and on
/// InfiniBand a ring across leaves beside background traffic), a web-search mix's
/// slowdowns within 15 %, and incasts' and an all-to-all's completion within 10 %.
#[test]
fn calibration_suite_matches_its_record_and_ring_and_latency_bound_cases_stay_within_five_percent()
{
    let dir = calibrate::default_suite();
    let rows = calibrate::run_suite(&dir, &Catalog::builtin()).unwrap();
    let record = calibrate::record();
    assert_eq!(rows.len(), record.len(), "rows against the record's");
    for (r, k) in rows.iter().zip(&record) {
        assert_eq!(
            (&r.case, &r.fabric, &r.metric, r.packet, r.flow, r.target),
            (&k.case, &k.fabric, &k.metric, k.packet, k.flow, k.target),
            "a level drifted from examples/calibration/record.json: review the change, then `fabricsim calibrate --record`"
        );
    }
    let benchmarks = std::fs::read_to_string(dir.join("../../BENCHMARKS.md")).unwrap();
    assert!(
        benchmarks.contains(&format!(
            "{}\n{}{}",
            calibrate::TABLE_BEGIN,
            calibrate::recorded_table(&record),
            calibrate::TABLE_END
        )),
        "BENCHMARKS.md's table is not the record's: `fabricsim calibrate --record`"
    );
    // Bandwidth-bound and latency-bound collectives and training. Besides them:
    // - per-QP ECMP puts each ring connection on one spine at both levels, and on RoCEv2
    //   DCQCN's fluid cuts the ring's senders where they collide (issue 33: -14.9 % with
    //   the probe's correction), each edge at most a step ahead of the edge before it
    //   (`ring_progress`; +7.7 % over five seeds without): a ring beside a permutation;
    // - latency-bound rings multiplex their steps on the uplinks they share
    //   (`multiplexed_step`; two-rings-4mib on InfiniBand was -7.5 % with perfect
    //   interleaving);
    // - a 64-rank ring of 32 MiB across a 2:1 leaf-spine's leaves sends 512 KiB pieces,
    //   long enough for their queues to build within each piece (`RESOLVED_BURST`),
    //   without congestion control. With DCQCN on it and on two 32-rank rings of 32 MiB,
    //   RoCEv2's figures are means over `CLOSED_LOOP_SEEDS` seeds and recorded misses
    //   (one seed's error there is a draw: -21 % to +22 % by seed on the two rings).
    for case in [
        "allreduce-nvls-32",
        "allreduce-ring-16",
        "allreduce-ring-64",
        "allreduce-ring-128-small",
        "allreduce-hierarchical-64",
        "allreduce-tree-gpus-64",
        "training-data-parallel",
        "training-cpu-staged",
        "ring-beside-permutation",
        "two-rings-4mib",
        "two-rings-64-ranks",
        "ring-64-across-leaves-no-cc",
    ] {
        let figures: Vec<_> = rows.iter().filter(|r| r.case == case).collect();
        assert_eq!(figures.len(), 2, "{case}: one figure per fabric");
        for r in figures {
            assert!(r.target <= 0.05 && r.within(), "{case}: {r:?}");
        }
    }
    for case in ["two-rings-32mib", "ring-64-across-leaves"] {
        let r = rows
            .iter()
            .find(|r| r.case == case && r.fabric == "infiniband")
            .expect("the case");
        assert!(r.target <= 0.05 && r.within(), "{case}: {r:?}");
    }
    // A closed-loop RoCEv2 case whose packet-level run marks packets runs on several
    // seeds at each level; one that marks none on one.
    for (case, seeds) in [
        ("two-rings-32mib", calibrate::CLOSED_LOOP_SEEDS as u32),
        ("allreduce-ring-16", 1),
    ] {
        let r = rows
            .iter()
            .find(|r| r.case == case && r.fabric == "rocev2")
            .expect("the case");
        assert_eq!(r.seeds, seeds, "{case}: {r:?}");
    }
    // Web-search mixes, timed by per-link packet simulations at flow level: p50 and p99
    // slowdown within 15 % (RoCEv2's p50 on the fat-tree was +17.8 % while every port's
    // simulation sent each message at its NIC's rate, also where a port before held it).
    // On the 4:1 leaf-spine InfiniBand's p99 is a recorded miss: credits back a
    // congested downlink up into switches whose other flows no port's simulation holds.
    for (case, fabric, metric) in [
        ("websearch-k8-50", "infiniband", "slowdown_p50"),
        ("websearch-k8-50", "infiniband", "slowdown_p99"),
        ("websearch-k8-50", "rocev2", "slowdown_p50"),
        ("websearch-k8-50", "rocev2", "slowdown_p99"),
        ("websearch-leaf-spine-4to1", "infiniband", "slowdown_p50"),
        ("websearch-leaf-spine-4to1", "rocev2", "slowdown_p50"),
        ("websearch-leaf-spine-4to1", "rocev2", "slowdown_p99"),
    ] {
        let r = rows
            .iter()
            .find(|r| r.case == case && r.fabric == fabric && r.metric == metric)
            .expect("a web-search case");
        assert!(r.target <= 0.15 && r.within(), "{r:?}");
    }
    // Incasts, 8:1 to 48:1, and all-to-alls (on a fat-tree, and across a 4:1
    // leaf-spine's uplinks): completion within 10 % (issue 32), as means over seeds
    // until the error is settled: DCQCN's cuts where many senders meet move by seed (the
    // RoCEv2 all-to-all takes 370 to 744 us at packet level over seeds 1 to 40). Behind
    // 8:1 oversubscribed uplinks the receiver's port's simulation holds the uplinks that
    // pace its senders (RoCEv2 +17.9 % with the sources straight behind the spines).
    for case in [
        "incast-8to1",
        "incast-16to1-leaves",
        "incast-24to1-leaves",
        "incast-31to1",
        "incast-48to1-oversubscribed",
        "alltoall-16",
        "alltoall-32-leaf-spine",
    ] {
        let completions: Vec<_> = rows
            .iter()
            .filter(|r| {
                r.case == case && matches!(r.metric.as_str(), "completion_ns" | "collective_ns")
            })
            .collect();
        assert_eq!(completions.len(), 2, "{case}: one completion per fabric");
        for r in completions {
            assert!(r.seeds >= 5 && r.target <= 0.10 && r.within(), "{r:?}");
        }
    }
    // Permutations with ECMP's collisions, timed by the per-link simulations: completion
    // within 10 % (on a 4:1 leaf-spine the uplink that holds a message sends it on to the
    // spine's downlink slower, which the downlink's simulation now sees).
    for case in ["permutation-k8", "permutation-oversubscribed"] {
        let r = rows
            .iter()
            .find(|r| r.case == case && r.fabric == "rocev2" && r.metric == "completion_ns")
            .expect("a permutation's completion");
        assert!(r.seeds >= 5 && r.target <= 0.10 && r.within(), "{r:?}");
    }
    // Every figure that draws ran until its error's standard error was a third of its
    // target, or on the most seeds allowed (open-loop traffic, all-to-alls), or on
    // `CLOSED_LOOP_SEEDS` (other collectives and training, whose packet level marks).
    for r in rows.iter().filter(|r| r.seeds > 1) {
        let se = r.error_standard_error.expect("a standard error over seeds");
        let case = Scenario::load(&dir.join(format!("{}.toml", r.case))).unwrap();
        if calibrate::draws_until_settled(&case) {
            assert!(
                se <= r.target * calibrate::SETTLED_SHARE
                    || u64::from(r.seeds) == calibrate::MAX_SEEDS,
                "{r:?}"
            );
        } else {
            assert_eq!(u64::from(r.seeds), calibrate::CLOSED_LOOP_SEEDS, "{r:?}");
        }
    }
}

#[test]
fn flow_level_refuses_what_it_does_not_model_and_auto_warns_of_it() {
    // A ring all-reduce waits step by step: the fluid times it, and holds none of these.
    let traffic = "[topology]\nkind = \"single-switch\"\nhosts = 4\n[[traffic]]\nkind = \"collective\"\nop = \"all-reduce\"\nalgorithm = \"ring\"\nsize = \"1MiB\"\n";
    for (fabric, key) in [
        (
            "kind = \"infiniband\"\n[fabric.infiniband]\ncongestion_control = true\n",
            "fabric.infiniband.congestion_control",
        ),
        (
            "kind = \"infiniband\"\n[fabric.infiniband]\nvirtual_lanes = 2\nvl_weights = [255, 32]\n",
            "fabric.infiniband.vl_weights",
        ),
        (
            "kind = \"rocev2\"\n[fabric.rocev2]\ncongestion_control = \"hpcc\"\n",
            "fabric.rocev2.congestion_control",
        ),
    ] {
        let fabric = format!("[fabric]\n{fabric}");
        let err = Scenario::parse(
            &format!("[simulation]\nlevel = \"flow\"\n{fabric}{traffic}"),
            "s",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains(key) && err.contains("not modelled"), "{err}");
        // auto, beyond its budget: flow level, with the warning naming the key.
        let s = Scenario::parse(
            &format!("[simulation]\nlevel = \"auto\"\nbudget = \"1ps\"\n{fabric}{traffic}"),
            "s",
        )
        .unwrap();
        let (flow, why) = s.runs_at_flow_level();
        let why = why.unwrap();
        assert!(
            flow && why.contains("warning") && why.contains(key),
            "{why}"
        );
    }
    // Equal weights are what flow level's fair share is.
    let equal = format!("[simulation]\nlevel = \"flow\"\n[fabric]\nkind = \"infiniband\"\n[fabric.infiniband]\nvirtual_lanes = 2\nvl_weights = [64, 64]\n{traffic}");
    assert!(Scenario::parse(&equal, "s").is_ok());
    // Open-loop traffic whose messages spread over paths cannot be held by per-link
    // simulations either: refused with adaptive routing.
    let spread = "[simulation]\nlevel = \"flow\"\n[fabric]\nkind = \"infiniband\"\n[fabric.infiniband]\nadaptive_routing = true\ncongestion_control = true\n[topology]\nkind = \"leaf-spine\"\nhosts = 8\nleaves = 2\nspines = 2\n[[traffic]]\nkind = \"permutation\"\nsize = \"1MiB\"\n";
    let err = Scenario::parse(spread, "s").unwrap_err().to_string();
    assert!(
        err.contains("fabric.infiniband.congestion_control"),
        "{err}"
    );
}

/// Open-loop traffic at flow level runs per-link packet simulations with the scenario's
/// own fabric settings, so the mechanisms the fluid leaves out are modelled there:
/// InfiniBand's VL arbitration weights and congestion control, RoCEv2's HPCC, Swift and
/// TIMELY. Each agrees with packet level, and the weights order the VLs at both levels.
#[test]
fn open_loop_traffic_at_flow_level_models_vl_weights_and_every_congestion_control() {
    let topology = "[topology]\nkind = \"leaf-spine\"\nhosts = 32\nleaves = 4\nspines = 4\n";
    let incast = |senders: std::ops::Range<u32>, sl: u8| {
        let senders: Vec<String> = senders.map(|h| h.to_string()).collect();
        format!(
            "[[traffic]]\nkind = \"incast\"\nsenders = [{}]\ndst = 0\nsize = \"512KiB\"\nsl = {sl}\n",
            senders.join(", ")
        )
    };
    let fct = |o: &Outcome, sl: u8| -> Vec<f64> {
        o.report
            .flows
            .iter()
            .filter(|f| (f.src < 16) == (sl == 0))
            .map(|f| (f.finish.unwrap() - f.start).ps() as f64)
            .collect()
    };
    // Eight senders on VL 0 and eight on VL 1 into one host, weights 255 : 32.
    let weighted = scenario(&format!(
        "[fabric]\nkind = \"infiniband\"\n[fabric.infiniband]\nvirtual_lanes = 2\nvl_weights = [255, 32]\n{topology}{}{}",
        incast(8..16, 0),
        incast(16..24, 1)
    ));
    let (flow, packet) = (at(Level::Flow, &weighted), at(Level::Packet, &weighted));
    for sl in [0, 1] {
        for (f, p) in fct(&flow, sl).iter().zip(fct(&packet, sl)) {
            assert!((f / p - 1.0).abs() < 0.05, "VL {sl}: {f} against {p}");
        }
    }
    let mean = |v: Vec<f64>| v.iter().sum::<f64>() / v.len() as f64;
    for o in [&flow, &packet] {
        // VL 0 takes most of the link until it is done: its eight finish in about half
        // the time all sixteen take.
        assert!(mean(fct(o, 0)) < 0.7 * mean(fct(o, 1)));
    }
    // An incast across the leaves beside a permutation, under each congestion control.
    for fabric in [
        "kind = \"infiniband\"\n[fabric.infiniband]\ncongestion_control = true\n",
        "kind = \"rocev2\"\n[fabric.rocev2]\ncongestion_control = \"hpcc\"\n",
        "kind = \"rocev2\"\n[fabric.rocev2]\ncongestion_control = \"swift\"\n",
        "kind = \"rocev2\"\n[fabric.rocev2]\ncongestion_control = \"timely\"\n",
    ] {
        let s = scenario(&format!(
            "[fabric]\n{fabric}{topology}{}[[traffic]]\nkind = \"permutation\"\nsize = \"1MiB\"\nhosts = [24, 25, 26, 27, 28, 29, 30, 31]\n",
            incast(8..24, 0)
        ));
        let (flow, packet) = (at(Level::Flow, &s), at(Level::Packet, &s));
        assert!(
            flow.flow_notes.iter().any(|n| n.contains("Parsimon")),
            "{fabric}"
        );
        let summary = |o: &Outcome| {
            let mut t: Vec<f64> = o
                .report
                .flows
                .iter()
                .map(|f| (f.finish.unwrap() - f.start).ps() as f64)
                .collect();
            t.sort_by(f64::total_cmp);
            (t[t.len() / 2], t[t.len() - 1])
        };
        let ((f50, fmax), (p50, pmax)) = (summary(&flow), summary(&packet));
        assert!(
            (f50 / p50 - 1.0).abs() < 0.10,
            "{fabric}: p50 {f50} against {p50}"
        );
        assert!(
            (fmax / pmax - 1.0).abs() < 0.10,
            "{fabric}: last {fmax} against {pmax}"
        );
    }
}

#[test]
fn a_compact_edge_reports_its_pieces_so_both_levels_count_and_rank_the_same_messages() {
    let ranks: Vec<String> = (0..32).map(|r| r.to_string()).collect();
    for fabric in ["infiniband", "rocev2"] {
        let s = scenario(&format!(
            "[fabric]\nkind = \"{fabric}\"\n[topology]\nkind = \"fat-tree\"\nk = 8\n[[traffic]]\nkind = \"collective\"\nop = \"all-reduce\"\nalgorithm = \"ring\"\nranks = [{}]\nsize = \"8MiB\"\n",
            ranks.join(", ")
        ));
        let summary = |level| {
            let out = at(level, &s);
            results::summary(&s, &out)
        };
        let (flow, packet) = (summary(Level::Flow), summary(Level::Packet));
        // 32 edges at flow level, each standing for 62 steps of its pieces.
        assert_eq!(flow.flows.count, packet.flows.count, "{fabric}");
        assert_eq!(flow.flows.completed, packet.flows.completed, "{fabric}");
        assert_eq!(flow.flows.bytes, packet.flows.bytes, "{fabric}");
        let err = flow.fct_ns.p50 as f64 / packet.fct_ns.p50 as f64 - 1.0;
        assert!(
            err.abs() < 0.02,
            "{fabric}: p50 {} vs {} ns",
            flow.fct_ns.p50,
            packet.fct_ns.p50
        );
    }
}

#[test]
fn a_rocev2_ring_over_oversubscribed_uplinks_pays_dcqcns_transient_once() {
    // 64 hosts of a 2:1 leaf-spine (16 x 400G down, 2 x 1.6T up per leaf), the ring
    // crossing a leaf at every hop. Each ring connection is one QP hashed onto one
    // uplink (the busiest carries 12 at 400G into its 1.6T, three times what it can).
    // DCQCN cuts once as the ring starts and settles near the fair share, so packet level
    // is within a fifth of the lossless figure; the probe's transient at the senders'
    // line-rate load, and the ring's pace (it forwards what reaches it, so it loads the
    // uplink no more than it drains) must reproduce it. Charging the steady share of the
    // line-rate load made this +27.8 % (+49 % with the 4 MiB share as a rate). Ceiling
    // 12 %: measured +4.5 %.
    let ranks: Vec<String> = (0..64)
        .map(|i| ((i % 4) * 16 + i / 4).to_string())
        .collect();
    let s = scenario(&format!(
        "[fabric]\nkind = \"rocev2\"\n[topology]\nkind = \"leaf-spine\"\nhosts = 64\nleaves = 4\nspines = 2\nuplink_rate = \"1600Gbps\"\n[[traffic]]\nkind = \"collective\"\nop = \"all-reduce\"\nalgorithm = \"ring\"\nranks = [{}]\nsize = \"32MiB\"\n",
        ranks.join(", ")
    ));
    let (flow, packet, err) = collective_at_both_levels(&s);
    assert!(
        err.abs() < 0.12,
        "flow {flow} ns vs packet {packet} ns ({:+.1} %)",
        err * 100.0
    );
}

/// Queueing behind long flows: one-packet messages sent every 40 us into a RoCEv2 port
/// that four 8 MiB senders overload. At flow level none waits before the port is
/// overloaded (the first arrives with the incast) nor after the incast, none waits
/// longer than the senders' excess could have queued (three times the time since the
/// incast began), beyond its share of the port for its one packet; and while the port is loaded they wait on average as at packet level
/// within a factor of three (each meets one quantile of the probe's measured queue, and
/// DCQCN's cuts empty the queue for a while at both levels). Without the queue model
/// they would not wait at all.
#[test]
fn messages_arriving_at_a_loaded_rocev2_port_wait_behind_its_queue_as_at_packet_level() {
    let mut text = String::from(
        "[simulation]\nopen_loop = \"fluid\"\n[fabric]\nkind = \"rocev2\"\n[topology]\nkind = \"single-switch\"\nhosts = 6\n[[traffic]]\nkind = \"incast\"\nsenders = [1, 2, 3, 4]\ndst = 0\nsize = \"8MiB\"\n",
    );
    for k in 0..16 {
        text += &format!(
            "[[traffic]]\nkind = \"flow\"\nsrc = 5\ndst = 0\nsize = \"1KiB\"\nstart = \"{}ns\"\n",
            k * 40_000
        );
    }
    let s = scenario(&text);
    // Each victim's (start, extra delay) and the mean extra of those inside the incast.
    let waits = |out: &Outcome| {
        let (incast, victims) = out.report.flows.split_at(4);
        let end = incast.iter().map(|f| f.finish.unwrap()).max().unwrap();
        let extra: Vec<_> = victims
            .iter()
            .map(|v| {
                (
                    v.start,
                    (v.finish.unwrap() - v.start).saturating_sub(v.ideal),
                    end,
                )
            })
            .collect();
        let inside: Vec<f64> = extra
            .iter()
            .filter(|(start, _, end)| start < end)
            .map(|(_, e, _)| e.ps() as f64)
            .collect();
        let mean = inside.iter().sum::<f64>() / inside.len() as f64;
        (extra, mean)
    };
    let (flow, flow_mean) = waits(&at(Level::Flow, &s));
    let (_, packet_mean) = waits(&at(Level::Packet, &s));
    // Sharing the port with the incast's four for its one packet costs under 1 us.
    let sharing = 1_000_000;
    for &(start, extra, end) in &flow {
        if start == fabricsim_core::units::Time::ZERO || start >= end {
            assert!(extra.ps() < sharing, "a message at {start} waited {extra}");
        }
        assert!(extra.ps() <= 3 * start.ps() + sharing, "{start}: {extra}");
    }
    assert!(
        flow_mean > packet_mean / 3.0 && flow_mean < packet_mean * 3.0,
        "mean wait inside the incast: flow {flow_mean} ps, packet {packet_mean} ps"
    );
}

#[test]
fn a_ring_across_leaves_takes_its_qps_spines_at_both_levels() {
    // examples/calibration/ring-beside-permutation.toml without DCQCN, with
    // NCCL_IB_QPS_PER_CONNECTION = 1 and 4. With one, every ring connection is hashed
    // onto one spine for the collective's life, the same at both levels, and the ring's
    // time is its most loaded uplink's. Its pieces take their connection's QPs in turn,
    // each QP hashed on its own, so four spread a connection's bytes over more spines
    // and the ring is
    // faster (Meta reports up to +40 % all-reduce from more QPs, SIGCOMM 2024); flow
    // level splits each edge's bytes over its QPs' paths and agrees within 5 %.
    let base =
        std::fs::read_to_string(calibrate::default_suite().join("ring-beside-permutation.toml"))
            .unwrap()
            .replace(
                "kind = \"rocev2\"\n",
                "kind = \"rocev2\"\n[fabric.rocev2]\ncongestion_control = \"none\"\n",
            );
    let time = |qps: u32| {
        let s = scenario(&base.replace(
            "[fabric]",
            &format!("[nccl]\nalgorithm = \"ring\"\nqps_per_connection = {qps}\n[fabric]"),
        ));
        assert_eq!(s.nccl.connections.qps_per_connection, qps as u16);
        // Every message's QP, so its path, is the same at both levels: each link between
        // switches carries the same bytes, within the packet model's ACKs (2 % of the
        // busiest link's). The
        // permutation's messages too, though flow level builds the ring compactly
        // (numbered by message index, they once took other spines there).
        let uplinks = |level| -> Vec<(u32, u32, u64)> {
            at(level, &s)
                .report
                .ports
                .iter()
                .filter(|p| p.between_switches)
                .map(|p| (p.node, p.peer_node, p.tx_bytes))
                .collect()
        };
        let (packet_links, flow_links) = (uplinks(Level::Packet), uplinks(Level::Flow));
        assert_eq!(packet_links.len(), flow_links.len());
        // A permutation message is 16 MiB, the busiest link's ACKs a few hundred KB.
        let busiest = packet_links.iter().map(|p| p.2).max().unwrap();
        for (p, f) in packet_links.iter().zip(&flow_links) {
            assert_eq!((p.0, p.1), (f.0, f.1));
            assert!(
                p.2.abs_diff(f.2) <= busiest / 50,
                "{qps} QPs: link {} -> {}: packet {} B, flow {} B",
                p.0,
                p.1,
                p.2,
                f.2
            );
        }
        let (flow, packet, err) = collective_at_both_levels(&s);
        assert!(
            err.abs() < 0.05,
            "{qps} QPs: flow {flow} ns vs packet {packet} ns ({:+.1} %)",
            err * 100.0
        );
        packet
    };
    let (one, four) = (time(1), time(4));
    assert!(four < 0.8 * one, "4 QPs {four} ns against 1 QP {one} ns");
}

/// A flow-level run with an NVLS or tree all-reduce states flow level's error for that
/// algorithm as the calibration record last measured it, not a figure written into the
/// sentence.
#[test]
fn nvls_and_tree_runs_state_their_recorded_flow_level_error() {
    use fabricsim_experiment::flow_error::recorded_range;
    for (algorithm, case) in [("nvls", "nvls"), ("tree", "tree")] {
        for fabric in ["infiniband", "rocev2"] {
            let s = scenario(&format!(
                "[fabric]\nkind = \"{fabric}\"\n[topology]\nkind = \"rail-optimized\"\nnodes = 2\ngpus_per_node = 8\nspines = 2\n[[traffic]]\nkind = \"collective\"\nop = \"all-reduce\"\nalgorithm = \"{algorithm}\"\nsize = \"4MiB\"\n"
            ));
            let out = at(Level::Flow, &s);
            let (lo, hi) = recorded_range(fabric, |r| r.case.contains(case)).unwrap();
            let range = format!("{:+.0} % to {:+.0} %", lo * 100.0, hi * 100.0);
            let named = format!("{algorithm} all-reduces");
            assert!(
                out.flow_notes
                    .iter()
                    .any(|n| n.to_lowercase().contains(&named) && n.contains(&range)),
                "{fabric} {algorithm}: {:?} should quote {range}",
                out.flow_notes
            );
        }
    }
}

/// Open-loop traffic at flow level is timed by per-link packet simulations (Parsimon's
/// decomposition): an incast from the other leaves of a leaf-spine, whose receiver's
/// leaf takes it from four spine links, completes as the whole network does at packet
/// level on both fabrics and several seeds, though each port's simulation holds only one
/// hop of it (the fluid model with RoCEv2's one-switch probe gave +126 % here); each
/// message delivers every byte no earlier than its ideal time; and the result is the
/// same on one thread as on two.
#[test]
fn an_incast_across_leaves_completes_at_flow_level_as_at_packet_level() {
    // RoCEv2 also with spraying, each message cut into parts on its four paths (it was
    // +137 % with max-min sharing and the one-switch incast probe).
    for fabric in [
        "infiniband",
        "rocev2",
        "rocev2\"\n[fabric.rocev2]\nload_balancing = \"spray",
    ] {
        let senders: Vec<String> = (8..24).map(|h| h.to_string()).collect();
        let text = format!(
            "[fabric]\nkind = \"{fabric}\"\n[topology]\nkind = \"leaf-spine\"\nhosts = 32\nleaves = 4\nspines = 4\n[[traffic]]\nkind = \"incast\"\nsenders = [{}]\ndst = 0\nsize = \"512KiB\"\n",
            senders.join(", ")
        );
        for seed in 1..=3 {
            let s = Scenario {
                seed,
                ..scenario(&text)
            };
            let last = |o: &Outcome| {
                o.report
                    .flows
                    .iter()
                    .filter_map(|f| f.finish)
                    .max()
                    .unwrap()
            };
            let flow = at(Level::Flow, &s);
            let packet = at(Level::Packet, &s);
            let err = last(&flow).ps() as f64 / last(&packet).ps() as f64 - 1.0;
            assert!(
                err.abs() < 0.05,
                "{fabric} seed {seed}: completion {err:+.3}"
            );
            assert!(
                flow.flow_notes.iter().any(|n| n.contains("Parsimon")),
                "{:?}",
                flow.flow_notes
            );
            for f in &flow.report.flows {
                assert_eq!(f.delivered_bytes, f.bytes);
                assert!(f.finish.unwrap() - f.start >= f.ideal, "{f:?}");
            }
            let mut flow_s = s.clone();
            flow_s.set_level(Level::Flow).unwrap();
            let two = runner::run_threaded(&flow_s, None, false, 2, runner::Trial::GiveUpIfSparse)
                .unwrap();
            let times =
                |o: &Outcome| -> Vec<_> { o.report.flows.iter().map(|f| f.finish).collect() };
            assert_eq!(
                times(&flow),
                times(&two),
                "{fabric}: one thread against two"
            );
        }
    }
}

/// compare on a 512-GPU data-parallel cluster (fat-tree style designs, 64 MiB of
/// gradients in four hierarchical buckets): the same recommendation and saving at both
/// levels within 2 percentage points, and each fabric's iteration within 5 %. Two rails'
/// latency-bound ring edges ECMP collide on RoCEv2's uplinks there in 16 KiB steps and
/// build no queue DCQCN or PFC would act on; flow level charged them DCQCN's correction
/// and max-min's slowdown on every step before its congestion onset (saving 23.7 %
/// against packet level's 3.9 %, issue 32).
#[test]
fn compare_on_a_512_gpu_data_parallel_cluster_decides_alike_at_both_levels() {
    let s = scenario(
        "seed = 1\n[cluster]\ngpus = 512\ngpus_per_node = 8\nnic_rate = \"400Gbps\"\nstyle = \"fat-tree\"\n[[traffic]]\nkind = \"training\"\nsize = \"64MiB\"\nbuckets = 4\niterations = 2\nforward = \"1ms\"\nbackward = \"2ms\"\noverlap = true\nalgorithm = \"hierarchical\"\n",
    );
    let decide = |level| {
        let mut s = s.clone();
        s.set_level(level).unwrap();
        let c = fabricsim_experiment::compare::run_both(&s, false, 2).unwrap();
        let iterations: Vec<f64> = c
            .runs
            .iter()
            .map(|r| {
                r.summary.training[0]
                    .iteration_time_ns
                    .expect("an iteration")
            })
            .collect();
        (
            c.recommendation.fabric,
            c.recommendation.saving.unwrap(),
            iterations,
        )
    };
    let (flow, packet) = (decide(Level::Flow), decide(Level::Packet));
    assert_eq!(
        flow.0, packet.0,
        "recommendation: flow {flow:?}, packet {packet:?}"
    );
    assert!(
        (flow.1 - packet.1).abs() <= 0.02,
        "saving: flow {:.1} %, packet {:.1} %",
        flow.1 * 100.0,
        packet.1 * 100.0
    );
    for (f, p) in flow.2.iter().zip(&packet.2) {
        assert!(
            (f / p - 1.0).abs() <= 0.05,
            "iteration: flow {f} ns, packet {p} ns"
        );
    }
}

/// A compact ring's edges enter together: each bucket's ring of job b in
/// examples/calibration/two-jobs-rail-64.toml (a ring of 32 over four servers, whose
/// cross-rail connections ECMP crowds on one uplink) waits until every one of its edges
/// is free of the bucket before. Past its first step every piece an edge sends came
/// round the whole ring, so no edge can finish a bucket before each of its ring-mates
/// finished the bucket before it (each connection sends its buckets in turn). Flow
/// level let one connection run seven buckets ahead of another before the ring waited.
#[test]
fn a_compact_rings_edges_keep_to_their_ring_from_bucket_to_bucket() {
    let text =
        std::fs::read_to_string(calibrate::default_suite().join("two-jobs-rail-64.toml")).unwrap();
    let s = scenario(&format!("{text}[fabric]\nkind = \"rocev2\"\n"));
    let out = at(Level::Flow, &s);
    // Job b's edges (its GPUs are hosts 32 to 63), each connection's buckets in order.
    let mut edges: std::collections::BTreeMap<(u32, u32), Vec<u64>> = Default::default();
    for f in out
        .report
        .flows
        .iter()
        .filter(|f| f.src >= 32 && f.dst >= 32)
    {
        edges
            .entry((f.src, f.dst))
            .or_default()
            .push(f.finish.expect("finished").ps());
    }
    assert_eq!(edges.len(), 32, "job b's ring of 32");
    let buckets = edges.values().next().unwrap().len();
    assert!(buckets >= 8, "four buckets in each of two iterations");
    for k in 1..buckets {
        let earliest = edges.values().map(|f| f[k]).min().unwrap();
        let before = edges.values().map(|f| f[k - 1]).max().unwrap();
        assert!(earliest >= before, "bucket {k}: an edge finished at {earliest} ps, a ring-mate finished bucket {} at {before} ps", k - 1);
    }
}
