//! `fabricsim bench`: the reference benchmark (a 128-host k=8 fat-tree, a permutation of
//! 64 MiB per host, adaptive routing), timed over several runs, with measured memory.

use crate::heap;
use crate::results;
use crate::runner::{self, Outcome};
use crate::scenario::{FabricKind, Scenario};
use fabricsim_fabric::infiniband::Simulation;
use rand::{Rng, SeedableRng};
use std::fmt::Write as _;

/// The split-run scenario (examples/bench-permutation-k24.toml).
const SPLIT_SCENARIO: &str = include_str!("../../../examples/bench-permutation-k24.toml");

/// The flow-level scale scenario (examples/flow-training-16k.toml).
const FLOW_SCENARIO: &str = include_str!("../../../examples/flow-training-16k.toml");

/// The reference scenario (examples/bench-fat-tree-k8.toml).
const BENCH_SCENARIO: &str = include_str!("../../../examples/bench-fat-tree-k8.toml");

/// Peak resident memory of this process in bytes (Linux VmHWM), if readable.
fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// The reference scenario with `size` per host and, if given, another VL buffer size.
fn bench_scenario(size: &str, vl_buffer: Option<&str>) -> Result<Scenario, String> {
    let mut text = BENCH_SCENARIO.replace("size = \"64MiB\"", &format!("size = \"{size}\""));
    if let Some(b) = vl_buffer {
        text = text.replace(
            "adaptive_routing = true",
            &format!("adaptive_routing = true\nvl_buffer = \"{b}\""),
        );
    }
    Scenario::parse(&text, "bench-fat-tree-k8").map_err(|e| e.to_string())
}

/// Runs `scenario`, returning its outcome and the growth of the heap's peak over the heap
/// in use before it started. The figure is real only in a process whose global allocator
/// is [`heap::Counting`] (the `fabricsim` binary), which counts from here on; elsewhere it
/// is 0.
fn measured_run(scenario: &Scenario) -> Result<(Outcome, usize), String> {
    heap::start_counting();
    let before = heap::in_use();
    heap::reset_peak();
    let outcome = runner::run(scenario, None, true)?;
    Ok((outcome, (heap::peak() - before).max(0) as usize))
}

/// Runs the benchmark `runs` times (`size` per host, default 64 MiB) and returns its
/// report, one `name value` line per figure: median events/s and wall time with the
/// range, peak memory, and bytes per packet in flight measured as the extra peak heap of
/// a run with 4x the VL buffers over its extra packets. Fails if the runs' event counts
/// differ.
pub fn run(size: Option<&str>, runs: u32) -> Result<String, String> {
    let scenario = bench_scenario(size.unwrap_or("64MiB"), None)?;
    let (outcome, heap_growth) = measured_run(&scenario)?;
    let mut walls = vec![outcome.wall_seconds];
    for _ in 1..runs {
        let again = runner::run(&scenario, None, true)?;
        if again.report.events != outcome.report.events {
            return Err("the benchmark's runs differ: the simulator is not deterministic".into());
        }
        walls.push(again.wall_seconds);
    }
    walls.sort_by(f64::total_cmp);
    let median = walls[walls.len() / 2];
    let r = &outcome.report;
    let rate = |wall: f64| r.events as f64 / wall;
    let mut s = String::new();
    let _ = writeln!(s, "scenario            {}", scenario.name);
    let _ = writeln!(s, "hosts               128 (k=8 fat-tree), permutation");
    let _ = writeln!(s, "events              {}", r.events);
    let _ = writeln!(s, "runs                {runs}");
    let _ = writeln!(s, "wall_seconds        {median:.3}");
    let _ = writeln!(s, "events_per_second   {:.0}", rate(median));
    let _ = writeln!(
        s,
        "events_per_second_range {:.0} {:.0}",
        rate(walls[walls.len() - 1]),
        rate(walls[0])
    );
    let _ = writeln!(
        s,
        "ns_per_event        {:.1}",
        median * 1e9 / r.events as f64
    );
    let _ = writeln!(s, "simulated           {}", r.sim_time);
    let _ = writeln!(
        s,
        "goodput_gbps        {:.1}",
        results::goodput_gbps(r, scenario.gpus_per_node)
    );
    let _ = writeln!(s, "peak_rss_bytes      {}", peak_rss().unwrap_or(0));
    let _ = writeln!(s, "peak_heap_growth_bytes {heap_growth}");
    let _ = writeln!(s, "peak_packets_in_flight {}", r.peak_packets_in_flight);
    let (small, small_heap) = measured_run(&bench_scenario("8MiB", Some("32KiB"))?)?;
    let (large, large_heap) = measured_run(&bench_scenario("8MiB", Some("128KiB"))?)?;
    let extra_packets = large
        .report
        .peak_packets_in_flight
        .saturating_sub(small.report.peak_packets_in_flight);
    let _ = writeln!(
        s,
        "bytes_per_packet_in_flight {:.0} (measured: +{} B peak heap for +{} packets with 4x VL buffers; {} B of state per packet)",
        large_heap.saturating_sub(small_heap) as f64 / extra_packets.max(1) as f64,
        large_heap.saturating_sub(small_heap),
        extra_packets,
        Simulation::bytes_per_packet_in_flight(),
    );
    Ok(s)
}

/// One cache line of [`memory_latency_ns`]'s chase: the index of the next.
#[repr(align(64))]
struct Line {
    next: usize,
}

/// `lines` cache lines linked into one cycle in a random order (Sattolo's shuffle, seeded),
/// so that each load's address comes from the load before and no prefetcher can guess it.
fn chase_cycle(lines: usize) -> Vec<Line> {
    let mut next: Vec<usize> = (0..lines).collect();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
    for i in (1..lines).rev() {
        next.swap(i, rng.gen_range(0..i));
    }
    next.into_iter().map(|next| Line { next }).collect()
}

/// The mean time of a dependent load from a working set of `bytes`, in nanoseconds: a
/// pointer chase through [`chase_cycle`]. At 1 MiB it is the second-level cache's latency;
/// at 64 MiB, what a scattered working set that outgrows it pays per miss on this machine
/// (its shared cache, or memory). A packet-level run at scale misses the second-level
/// cache a few times an event, so its one-thread events/s follow the second figure across
/// machines, and this figure says how fast a machine is for such runs.
fn memory_latency_ns(bytes: usize) -> f64 {
    let cycle = chase_cycle((bytes / 64).max(2));
    let steps = 2_000_000u64;
    let mut at = 0usize;
    for _ in 0..cycle.len() {
        at = cycle[at].next;
    }
    let started = std::time::Instant::now();
    for _ in 0..steps {
        at = cycle[at].next;
    }
    let elapsed = started.elapsed();
    std::hint::black_box(at);
    elapsed.as_secs_f64() * 1e9 / steps as f64
}

/// The split-run benchmark: examples/bench-permutation-k24.toml (a permutation of 2 MB
/// per host) on a k-ary fat-tree and `fabric` (InfiniBand with adaptive routing), on
/// one thread and split over `threads`, interleaved `runs` times: median wall times,
/// events/s, the speed-up, and whether the two gave the same results (they must).
pub fn split(k: u32, fabric: FabricKind, threads: usize, runs: u32) -> Result<String, String> {
    let text = SPLIT_SCENARIO.replace("k = 24", &format!("k = {k}"));
    let mut scenario = Scenario::parse(&text, "bench-permutation").map_err(|e| e.to_string())?;
    scenario.fabric = fabric;
    scenario.ib.adaptive_routing = true;
    let (mut one, mut many) = (Vec::new(), Vec::new());
    let (mut reports, mut windows) = (Vec::new(), 0);
    for _ in 0..runs {
        for (n, walls) in [(1, &mut one), (threads, &mut many)] {
            let o = runner::run_threaded(&scenario, None, true, n, runner::Trial::Always)?;
            walls.push(o.wall_seconds);
            windows = windows.max(o.windows);
            reports.push(o.report);
        }
    }
    let identical = reports.windows(2).all(|w| w[0] == w[1]);
    for walls in [&mut one, &mut many] {
        walls.sort_by(f64::total_cmp);
    }
    let (a, b) = (one[one.len() / 2], many[many.len() / 2]);
    let r = &reports[0];
    let mut s = String::new();
    let fabric = match fabric {
        FabricKind::Infiniband => "InfiniBand, adaptive routing",
        FabricKind::Rocev2 => "RoCEv2",
    };
    let _ = writeln!(s, "scenario            {} (k={k}, {fabric})", scenario.name);
    let _ = writeln!(s, "hosts               {}", k * k * k / 4);
    let _ = writeln!(s, "events              {}", r.events);
    let _ = writeln!(s, "peak_packets_in_flight {}", r.peak_packets_in_flight);
    let _ = writeln!(s, "runs                {runs} (interleaved)");
    let _ = writeln!(s, "threads             {threads}");
    let _ = writeln!(
        s,
        "wall_seconds_1      {a:.3} (range {:.3} {:.3})",
        one[0],
        one[one.len() - 1]
    );
    let _ = writeln!(
        s,
        "wall_seconds_{threads:<6} {b:.3} (range {:.3} {:.3})",
        many[0],
        many[many.len() - 1]
    );
    let _ = writeln!(s, "events_per_second_1 {:.0}", r.events as f64 / a);
    let _ = writeln!(
        s,
        "events_per_second_{threads:<2} {:.0}",
        r.events as f64 / b
    );
    let _ = writeln!(s, "speedup             {:.2}", a / b);
    let _ = writeln!(
        s,
        "windows             {windows} ({:.0} events each)",
        r.events as f64 / windows.max(1) as f64
    );
    let _ = writeln!(
        s,
        "overhead_per_window_us {:.2} (split wall time beyond one thread's over {threads}, per window: synchronisation and imbalance)",
        (b - a / threads as f64).max(0.0) * 1e6 / windows.max(1) as f64
    );
    let _ = writeln!(s, "identical_results   {identical}");
    let _ = writeln!(
        s,
        "memory_latency_ns   {:.1} at 1 MiB, {:.1} at 64 MiB (a dependent load: the second-level cache, and a working set beyond it)",
        memory_latency_ns(1 << 20),
        memory_latency_ns(64 << 20)
    );
    if !identical {
        return Err(format!(
            "{s}the split runs' results differ from one thread's: a model bug"
        ));
    }
    Ok(s)
}

/// The flow-level scale benchmark: examples/flow-training-16k.toml (one data-parallel
/// iteration, a hierarchical all-reduce of 10 GiB) on `gpus` GPUs and `fabric`'s
/// `[cluster]` design, once: wall time (set-up included), events/s, peak memory and the
/// iteration's simulated time.
pub fn flow(gpus: u32, fabric: FabricKind) -> Result<String, String> {
    let text = FLOW_SCENARIO
        .replace("gpus = 16384", &format!("gpus = {gpus}"))
        .replace(
            "[simulation]",
            &format!("[fabric]\nkind = \"{}\"\n[simulation]", fabric.name()),
        );
    let scenario = Scenario::parse(&text, "flow-training").map_err(|e| e.to_string())?;
    let started = std::time::Instant::now();
    let (outcome, heap_growth) = measured_run(&scenario)?;
    let wall = started.elapsed().as_secs_f64();
    let r = &outcome.report;
    let iteration = results::training_results(&outcome)
        .first()
        .and_then(|t| t.iteration_time_ns)
        .unwrap_or(f64::NAN);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "scenario            flow-training ({gpus} GPUs, {})",
        fabric.name()
    );
    let _ = writeln!(s, "flows               {}", r.flows.len());
    let _ = writeln!(s, "events              {}", r.events);
    let _ = writeln!(s, "wall_seconds        {wall:.3}");
    let _ = writeln!(s, "run_seconds         {:.3}", outcome.wall_seconds);
    let _ = writeln!(
        s,
        "events_per_second   {:.0}",
        r.events as f64 / outcome.wall_seconds
    );
    let _ = writeln!(s, "peak_rss_bytes      {}", peak_rss().unwrap_or(0));
    let _ = writeln!(s, "peak_heap_growth_bytes {heap_growth}");
    let _ = writeln!(s, "iteration_ns        {iteration:.0}");
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The chase visits every line once before it returns: one cycle, so a probe over a
    /// working set really loads all of it.
    #[test]
    fn chase_is_one_cycle_through_every_line() {
        for lines in [2, 3, 64, 1000] {
            let cycle = chase_cycle(lines);
            let mut seen = vec![false; lines];
            let mut at = 0;
            for _ in 0..lines {
                assert!(!seen[at], "line {at} visited twice in a cycle of {lines}");
                seen[at] = true;
                at = cycle[at].next;
            }
            assert_eq!(at, 0, "the chase returns to its start after {lines} steps");
        }
    }
}
