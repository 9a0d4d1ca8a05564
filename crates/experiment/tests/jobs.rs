//! Several jobs on one cluster (issue 37): placement by policy, traffic in a job's own
//! numbering, jobs on disjoint hosts that share no link running exactly as they do alone,
//! interference reported where they share an oversubscribed fabric, and background
//! traffic drawn at its load.

mod common;
use common::scenario;
use fabricsim_core::units::HostId;
use fabricsim_experiment::results::summary;
use fabricsim_experiment::runner::{self, RunRequest};
use fabricsim_experiment::scenario::{Placement, Scenario};

/// A 2:1 leaf-spine: 4 leaves of 8 hosts at 100G, 2 spines with one 200G uplink each per
/// leaf (800G down, 400G up).
const LEAF_SPINE: &str = "[topology]\nkind = \"leaf-spine\"\nhosts = 32\nleaves = 4\nspines = 2\nuplink_rate = \"200Gbps\"\n";

fn two_jobs(fabric: &str, placement: &str, traffic: &str) -> Scenario {
    on(LEAF_SPINE, fabric, placement, traffic)
}

fn on(topology: &str, fabric: &str, placement: &str, traffic: &str) -> Scenario {
    scenario(&format!(
        "[fabric]\nkind = \"{fabric}\"\nlink_rate = \"100Gbps\"\n{topology}\
         [[job]]\nname = \"a\"\ngpus = 8\nplacement = \"{placement}\"\n\
         [[job]]\nname = \"b\"\ngpus = 8\nplacement = \"{placement}\"\n{traffic}"
    ))
}

/// Each job's flows' (src, dst, start, finish) in a run of `s`.
fn job_flows(s: &Scenario, job: usize) -> Vec<(u32, u32, u64, Option<u64>)> {
    let out = runner::run(s, None, false).unwrap();
    out.entries
        .iter()
        .zip(&s.traffic_jobs)
        .filter(|(_, owner)| **owner == Some(job))
        .flat_map(|(r, _)| &out.report.flows[r.start as usize..r.end as usize])
        .map(|f| (f.src, f.dst, f.start.ps(), f.finish.map(|t| t.ps())))
        .collect()
}

const MIXED: &str = "[[traffic]]\nkind = \"permutation\"\njob = \"a\"\nsize = \"256KiB\"\n\
    [[traffic]]\nkind = \"collective\"\njob = \"b\"\nop = \"all-reduce\"\nsize = \"2MiB\"\n\
    [[traffic]]\nkind = \"collective\"\njob = \"a\"\nop = \"all-to-all\"\nsize = \"1MiB\"\nstart = \"20us\"\n";

#[test]
fn jobs_on_disjoint_leaves_run_bit_identically_to_their_runs_alone() {
    for fabric in ["infiniband", "rocev2"] {
        // Packed: job a on leaf 0, job b on leaf 1; neither crosses a spine.
        let s = two_jobs(fabric, "packed", MIXED);
        assert_eq!(s.jobs[0].hosts, (0..8).map(HostId).collect::<Vec<_>>());
        assert_eq!(s.jobs[1].hosts, (8..16).map(HostId).collect::<Vec<_>>());
        for j in 0..2 {
            let together = job_flows(&s, j);
            assert!(!together.is_empty() && together.iter().all(|f| f.3.is_some()));
            assert!(together
                .iter()
                .all(|f| s.jobs[j].rank(HostId(f.0)).is_some()
                    && s.jobs[j].rank(HostId(f.1)).is_some()));
            assert_eq!(together, job_flows(&s.job_alone(j), j), "{fabric}: job {j}");
        }
    }
}

#[test]
fn jobs_spread_over_an_oversubscribed_fabric_report_their_interference() {
    // Spread: each job has two hosts on every leaf of a 4:1 leaf-spine (800G down, 2 x
    // 100G up), so both jobs' all-to-alls cross the uplinks together: each job alone
    // offers a leaf's uplinks 2 x 100G x 6/7 = 171G, both together 343G.
    let four_to_one = LEAF_SPINE.replace("200Gbps", "100Gbps");
    let a2a =
        "[[traffic]]\nkind = \"collective\"\njob = \"a\"\nop = \"all-to-all\"\nsize = \"4MiB\"\n\
        [[traffic]]\nkind = \"collective\"\njob = \"b\"\nop = \"all-to-all\"\nsize = \"4MiB\"\n";
    for fabric in ["infiniband", "rocev2"] {
        let s = on(&four_to_one, fabric, "spread", a2a);
        assert_eq!(s.jobs[0].leaves, 4);
        let (sum, _) = runner::execute(&s, &RunRequest::default()).unwrap();
        assert_eq!(sum.jobs.len(), 2);
        for job in &sum.jobs {
            let alone = job.alone_makespan_ns.expect("an alone run");
            let shared = job.makespan_ns.unwrap();
            let slowdown = job.slowdown_from_sharing.unwrap();
            assert!(
                (slowdown - (shared as f64 / alone as f64 - 1.0)).abs() < 1e-12,
                "{fabric}: {job:?}"
            );
            assert!(
                shared >= alone,
                "{fabric}: sharing made job {} faster",
                job.job
            );
        }
        let worst = sum
            .jobs
            .iter()
            .map(|j| j.slowdown_from_sharing.unwrap())
            .fold(0.0, f64::max);
        assert!(
            worst > 0.2,
            "{fabric}: two all-to-alls over 4:1 uplinks slowed neither: {worst}"
        );
    }
}

/// `compare` makes each fabric's runs beside its main one as `run` does: every job alone
/// and the run without failures, so its summaries carry the same interference and
/// failure impact as `run` on that fabric.
#[test]
fn compare_reports_interference_and_failure_impact_as_run_does() {
    let four_to_one = LEAF_SPINE.replace("200Gbps", "100Gbps");
    let a2a =
        "[[traffic]]\nkind = \"collective\"\njob = \"a\"\nop = \"all-to-all\"\nsize = \"1MiB\"\n\
        [[traffic]]\nkind = \"collective\"\njob = \"b\"\nop = \"all-to-all\"\nsize = \"1MiB\"\n\
        [[failure]]\nat = \"20us\"\nlink = [32, 36]\nuntil = \"200us\"\n";
    let s = on(&four_to_one, "infiniband", "spread", a2a);
    let c = fabricsim_experiment::compare::run_both(&s, false, 2).unwrap();
    for run in &c.runs {
        let (alone, _) = runner::execute(&run.scenario, &RunRequest::default()).unwrap();
        let fabric = &run.summary.fabric;
        assert!(
            run.summary
                .jobs
                .iter()
                .all(|j| j.slowdown_from_sharing.is_some()),
            "{fabric}"
        );
        assert_eq!(
            serde_json::to_value(&run.summary.jobs).unwrap(),
            serde_json::to_value(&alone.jobs).unwrap(),
            "{fabric}"
        );
        assert!(run.summary.failure_impact.is_some(), "{fabric}");
        assert_eq!(
            serde_json::to_value(&run.summary.failure_impact).unwrap(),
            serde_json::to_value(&alone.failure_impact).unwrap(),
            "{fabric}"
        );
    }
}

#[test]
fn policies_place_jobs_on_packed_spread_random_and_listed_hosts() {
    // k = 4 fat-tree: 8 edge switches of 2 hosts.
    let place = |jobs: &str, seed: u64| -> Result<Scenario, String> {
        Scenario::parse(
            &format!("seed = {seed}\n[topology]\nkind = \"fat-tree\"\nk = 4\n{jobs}[[traffic]]\nkind = \"flow\"\nsrc = 0\ndst = 1\nsize = \"1KiB\"\n"),
            "t",
        )
        .map_err(|e| e.to_string())
    };
    let one = |policy: &str, seed: u64| {
        place(
            &format!("[[job]]\nname = \"x\"\ngpus = 4\nplacement = \"{policy}\"\n"),
            seed,
        )
        .unwrap()
        .jobs
        .remove(0)
    };
    let packed = one("packed", 1);
    assert_eq!(packed.hosts, (0..4).map(HostId).collect::<Vec<_>>());
    assert_eq!((packed.leaves, packed.placement), (2, Placement::Packed));
    let spread = one("spread", 1);
    assert_eq!(spread.leaves, 4);
    assert_eq!(spread.hosts, [0, 2, 4, 6].map(HostId));
    let random = one("random", 1);
    assert_eq!(
        random,
        one("random", 1),
        "random placement follows the seed"
    );
    assert!(
        (2..12).any(|seed| one("random", seed).hosts != random.hosts),
        "random placement ignores the seed"
    );
    // A second job takes what the first left; a listed one exactly its hosts.
    let s = place(
        "[[job]]\nname = \"x\"\ngpus = 4\n[[job]]\nname = \"y\"\nplacement = \"list\"\nhosts = [15, 9]\n[[job]]\nname = \"z\"\ngpus = 2\n",
        1,
    )
    .unwrap();
    assert_eq!(s.jobs[1].hosts, [9, 15].map(HostId));
    assert_eq!(s.jobs[2].hosts, [4, 5].map(HostId));
    for (jobs, needle) in [
        ("[[job]]\nname = \"x\"\ngpus = 4\n[[job]]\nname = \"x\"\ngpus = 2\n", "job[1].name = \"x\""),
        ("[[job]]\nname = \"x\"\ngpus = 17\n", "job[0].gpus"),
        ("[[job]]\nname = \"x\"\ngpus = 16\n[[job]]\nname = \"y\"\ngpus = 2\n", "only 0 whole servers"),
        ("[[job]]\nname = \"x\"\ngpus = 4\n[[job]]\nname = \"y\"\nplacement = \"list\"\nhosts = [3, 9]\n", "job[1].hosts"),
        ("[[job]]\nname = \"x\"\ngpus = 4\nhosts = [1, 2]\n", "job[0].hosts"),
        ("[[job]]\nname = \"x\"\ngpus = 4\nplacement = \"scattered\"\n", "job[0].placement = \"scattered\""),
        ("[[job]]\ngpus = 4\n", "job[0]: name is required"),
    ] {
        let e = place(jobs, 1).unwrap_err();
        assert!(e.contains(needle), "{needle:?} not in {e}");
    }
}

#[test]
fn a_jobs_entries_are_numbered_inside_it_and_checked_against_its_size() {
    let base = "[topology]\nkind = \"single-switch\"\nhosts = 16\n[[job]]\nname = \"a\"\ngpus = 4\n[[job]]\nname = \"b\"\ngpus = 4\n";
    let s = scenario(&format!(
        "{base}[[traffic]]\nkind = \"flow\"\njob = \"b\"\nsrc = 0\ndst = 3\nsize = \"1KiB\"\n"
    ));
    assert!(matches!(
        s.traffic[0],
        fabricsim_fabric::workload::Traffic::Flow {
            src: HostId(4),
            dst: HostId(7),
            ..
        }
    ));
    assert_eq!(s.traffic_jobs, vec![Some(1)]);
    // The effective configuration places and numbers everything again the same way.
    let again = scenario(&s.effective_toml());
    assert_eq!(again.traffic, s.traffic);
    let hosts = |s: &Scenario| s.jobs.iter().map(|j| j.hosts.clone()).collect::<Vec<_>>();
    assert_eq!(hosts(&again), hosts(&s));
    for (entry, needle) in [
        (
            "kind = \"flow\"\njob = \"b\"\nsrc = 0\ndst = 4\nsize = \"1KiB\"\n",
            "traffic[0].dst",
        ),
        (
            "kind = \"flow\"\njob = \"c\"\nsrc = 0\ndst = 1\nsize = \"1KiB\"\n",
            "traffic[0].job = \"c\"",
        ),
    ] {
        let e = Scenario::parse(&format!("{base}[[traffic]]\n{entry}"), "t")
            .unwrap_err()
            .to_string();
        assert!(e.contains(needle), "{needle:?} not in {e}");
    }
}

#[test]
fn background_traffic_offers_its_load_and_refuses_sizes() {
    let base = "[fabric]\nlink_rate = \"100Gbps\"\n[topology]\nkind = \"single-switch\"\nhosts = 16\n[[traffic]]\nkind = \"background\"\ndistribution = \"websearch\"\n";
    let s = scenario(&format!("{base}load = 0.4\nduration = \"2ms\"\n"));
    let out = runner::run(&s, None, false).unwrap();
    let bytes: u64 = out.report.flows.iter().map(|f| f.bytes).sum();
    // Offered load: bytes x 8 over hosts x rate x duration, within the Poisson noise of
    // a few hundred WebSearch flows.
    let offered = bytes as f64 * 8.0 / (16.0 * 100e9 * 2e-3);
    assert!((offered - 0.4).abs() < 0.1, "offered load {offered}");
    assert!(out
        .report
        .flows
        .iter()
        .all(|f| f.start.ps() < 2_000_000_000));
    let sum = summary(&s, &out);
    assert_eq!(sum.flows.completed, sum.flows.count);
    for (extra, needle) in [
        (
            "load = 0.4\nduration = \"2ms\"\nsize = \"1MiB\"\n",
            "traffic[0].size",
        ),
        ("load = 1.0\nduration = \"2ms\"\n", "traffic[0].load"),
        ("duration = \"2ms\"\n", "load is required"),
        ("load = 0.4\n", "duration is required"),
    ] {
        let e = Scenario::parse(&format!("{base}{extra}"), "t")
            .unwrap_err()
            .to_string();
        assert!(e.contains(needle), "{needle:?} not in {e}");
    }
    let e = Scenario::parse(
        "[topology]\nkind = \"single-switch\"\nhosts = 4\n[[traffic]]\nkind = \"flow\"\nsrc = 0\ndst = 1\nsize = \"1KiB\"\nload = 0.3\n",
        "t",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("traffic[0].load"), "{e}");
}

#[test]
fn a_fragmented_placement_costs_the_collective_on_both_fabrics() {
    // examples/placement.toml: a 16-GPU all-reduce beside a 32-GPU all-to-all on a 2:1
    // leaf-spine. Packed, the all-reduce keeps to its two leaves and meets nobody; spread
    // or random, its ring crosses uplinks the neighbour loads (Meta: over 30 %).
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/placement.toml");
    let base = Scenario::load(&path).unwrap();
    for fabric in ["infiniband", "rocev2"] {
        let time = |placement: &str| {
            let text = std::fs::read_to_string(&path)
                .unwrap()
                .replace(
                    "placement = \"packed\"",
                    &format!("placement = \"{placement}\""),
                )
                .replace("kind = \"rocev2\"", &format!("kind = \"{fabric}\""));
            let s = scenario(&text);
            let (sum, _) = runner::execute(&s, &RunRequest::default()).unwrap();
            let job = &sum.jobs[0];
            (
                sum.collectives[0].time_ns.unwrap(),
                job.slowdown_from_sharing.unwrap(),
                job.leaves,
            )
        };
        let (packed, alone_cost, leaves) = time("packed");
        assert_eq!(
            (alone_cost, leaves),
            (0.0, 2),
            "{fabric}: packed shares nothing"
        );
        for policy in ["spread", "random"] {
            let (t, slowdown, leaves) = time(policy);
            assert!(leaves > 2, "{fabric} {policy}: {leaves} leaves");
            assert!(
                t > 1.1 * packed,
                "{fabric} {policy}: {t:.0} ns against packed {packed:.0} ns"
            );
            assert!(slowdown > 0.1, "{fabric} {policy}: slowdown {slowdown}");
        }
    }
    assert_eq!(base.jobs.len(), 2);
}
