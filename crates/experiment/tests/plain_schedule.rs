//! The RoCEv2 model defers a frame's end event when it foresees that the end will find
//! nothing to send (`Simulation::transmit`). That rests on one invariant: whatever makes
//! a packet sendable sooner than the queues say calls `try_transmit`. These tests check it
//! rather than trust it: the plain schedule (`RoceConfig::plain_schedule`: one event at
//! every frame end, no foresight) must give the same results, the event count aside, on
//! every example run as RoCEv2 at packet level, on one thread and on two, and on random
//! small fabrics.

use fabricsim_core::units::Time;
use fabricsim_experiment::runner::{run_threaded, Outcome, Trial};
use fabricsim_experiment::scenario::{FabricKind, Level, Scenario};
use fabricsim_fabric::driver::CaptureFilter;
use proptest::prelude::*;
use std::path::{Path, PathBuf};

/// Examples too large for the suite's time (each has a smaller sibling of its kind).
const TOO_LARGE: [&str; 4] = [
    "bench-permutation-k24.toml",
    "cluster-4096.toml",
    "flow-training-16k.toml",
    "bench-fat-tree-k8.toml",
];

/// How much of each example's simulated time is compared.
const HORIZON: Time = Time::from_us(150);

fn examples(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            examples(&p, out);
        } else if p.extension().is_some_and(|e| e == "toml")
            && !TOO_LARGE.iter().any(|n| p.ends_with(n))
        {
            out.push(p);
        }
    }
}

/// What a run produced, but for its event count and wall time, one record a line.
fn results(o: &Outcome) -> Vec<String> {
    let mut report = o.report.clone();
    report.events = 0;
    let mut lines: Vec<String> = report.flows.iter().map(|f| format!("{f:?}")).collect();
    lines.extend(report.ports.iter().map(|p| format!("{p:?}")));
    report.flows.clear();
    report.ports.clear();
    lines.push(format!("{report:?}"));
    lines.extend(o.rates.iter().map(|r| format!("{r:?}")));
    lines.push(format!("{:?}", o.captured));
    lines
}

/// Runs `s` by the default and the plain schedule, on `threads`; panics on a difference.
fn assert_plain_agrees(s: &Scenario, threads: usize, what: &str) {
    let capture = Some(CaptureFilter {
        limit: Some(2_000),
        flows: None,
    });
    let run = |s: &Scenario| run_threaded(s, capture.clone(), false, threads, Trial::Always);
    let Ok(deferred) = run(s) else {
        return; // what RoCEv2 cannot run (SHARP, say) is not this test's concern
    };
    let mut plain = s.clone();
    plain.roce.plain_schedule = true;
    let plain = run(&plain).unwrap();
    assert!(
        plain.report.events >= deferred.report.events,
        "{what}: the plain schedule took fewer events"
    );
    let (deferred, plain) = (results(&deferred), results(&plain));
    if let Some((d, p)) = deferred.iter().zip(&plain).find(|(d, p)| d != p) {
        panic!("{what} on {threads} thread(s): the deferred frame ends changed the results:\n  deferred: {d}\n  plain:    {p}");
    }
    assert_eq!(
        deferred.len(),
        plain.len(),
        "{what}: records differ in number"
    );
}

#[test]
fn every_example_gives_the_same_results_by_the_plain_schedule() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut files = Vec::new();
    examples(&root, &mut files);
    assert!(files.len() > 20, "found only {} examples", files.len());
    for path in files {
        let Ok(mut s) = Scenario::load(&path) else {
            continue; // sweeps' and catalogs' files are not scenarios
        };
        s.fabric = FabricKind::Rocev2;
        s.level = Level::Packet;
        s.roce.record_rates = true;
        // The invariant is local to each frame: the first stretch of every run shows it as
        // well as the whole would, in a fraction of the suite's time.
        s.stop_at = Some(s.stop_at.map_or(HORIZON, |t| t.min(HORIZON)));
        let what = path.display().to_string();
        assert_plain_agrees(&s, 1, &what);
        assert_plain_agrees(&s, 2, &what);
    }
}

/// A small random fabric and workload: a leaf-spine of `leaves` x `hosts_per_leaf` hosts
/// and `spines` spines (oversubscribed or not), with PFC and DCQCN on or off, shallow buffers so that pauses, marks and drops
/// happen, a mix of incasts and random pairs at staggered starts, and perhaps an uplink
/// `(leaf, spine, at_ns, for_ns)` down for a while (re-routed 5 us after it fails).
fn random_scenario(
    (leaves, hosts_per_leaf, spines): (u32, u32, u32),
    (pfc, dcqcn, buffer_kib): (bool, bool, u32),
    flows: &[(u32, u32, u32, u32)],
    failure: Option<(u32, u32, u32, u32)>,
    seed: u64,
) -> Scenario {
    let hosts = leaves * hosts_per_leaf;
    let mut text = format!(
        "name = \"random\"\nseed = {seed}\n\
         [topology]\nkind = \"leaf-spine\"\nleaves = {leaves}\nhosts = {hosts}\nspines = {spines}\n\
         [fabric]\nkind = \"rocev2\"\nlink_rate = \"100Gbps\"\n\
         [fabric.rocev2]\npfc = {pfc}\nswitch_buffer = \"{buffer_kib}KiB\"\n",
    );
    let cc = if dcqcn { "dcqcn" } else { "none" };
    text.push_str(&format!("congestion_control = \"{cc}\"\n"));
    if let Some((leaf, spine, at, down)) = failure {
        // Node ids: the hosts, then the leaves, then the spines.
        let (leaf, spine) = (hosts + leaf % leaves, hosts + leaves + spine % spines);
        text.push_str(&format!(
            "failure_detection = \"2us\"\nreroute_time = \"3us\"\n\
             [[failure]]\nat = \"{at}ns\"\nuntil = \"{}ns\"\nlink = [{leaf}, {spine}]\n",
            at + down
        ));
    }
    for &(src, dst, kib, start_ns) in flows {
        let (src, dst) = (src % hosts, dst % hosts);
        let dst = if dst == src { (dst + 1) % hosts } else { dst };
        text.push_str(&format!(
            "[[traffic]]\nkind = \"flow\"\nsrc = {src}\ndst = {dst}\nsize = \"{kib}KiB\"\nstart = \"{start_ns}ns\"\n"
        ));
    }
    let mut s = Scenario::parse(&text, "random").unwrap_or_else(|e| panic!("{e}\n{text}"));
    s.level = Level::Packet;
    s.roce.record_rates = true;
    s.stop_at = Some(Time::from_us(20_000));
    s
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn random_small_fabrics_give_the_same_results_by_the_plain_schedule(
        shape in (2u32..4, 2u32..5, 1u32..3),
        switches in (any::<bool>(), any::<bool>(), 96u32..1024),
        flows in prop::collection::vec((0u32..16, 0u32..16, 1u32..400, 0u32..20_000), 1..24),
        failure in prop::option::of((0u32..4, 0u32..3, 0u32..20_000, 1u32..20_000)),
        seed in 0u64..1000,
    ) {
        let s = random_scenario(shape, switches, &flows, failure, seed);
        assert_plain_agrees(&s, 1, "a random fabric");
        assert_plain_agrees(&s, 2, "a random fabric");
    }
}
