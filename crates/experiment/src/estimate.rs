//! A run's size before it starts: its peak memory and its events, estimated from the
//! scenario, so that `check` prints them and `run` refuses a run that would not fit in
//! memory. Estimates, not bounds: within a factor of a few (the per-item costs below are
//! the structures' sizes, rounded up; the events count each packet's links on its static
//! path, see [`Work`]).

use crate::flow_error::recorded_range;
use crate::scenario::ranges::{end_runs, run_inputs};
use crate::scenario::{flow_unmodelled, packets_only, Auto, FabricKind, Level, Scenario};
use fabricsim_core::topology::{Routes, Topology};
use fabricsim_core::units::{parse_quantity, Dimension, HostId};
use fabricsim_fabric::driver::static_path;
use fabricsim_fabric::workload::build_with;

/// Route table bytes per (switch, destination switch): a candidate range (12 B); and per
/// host, its group, switch and last-hop port (12 B).
const ROUTE_BYTES: u64 = 12;
/// State per message: its flow (transport, congestion control, progress), its workload
/// entries and its result.
const MESSAGE_BYTES: u64 = 512;
/// State per port and VL (credits, egress queue heads, counters).
const PORT_VL_BYTES: u64 = 256;
/// A packet in flight: its pool slot and queue entries (BENCHMARKS.md measures 64 B).
const PACKET_BYTES: u64 = 64;
/// State per message at flow level: its flow (path, fluid state, progress), workload
/// entries (its dependencies and feeds) and result. Measured (heaptrack, 2026-12-05): a
/// 4,096-GPU tree iteration's 2.1 M compact messages take 1.27 GB of heap per run, about
/// 600 B each beside the hosts' share (below); DCQCN's fluid adds 56 B a flow (its
/// reaction point's box, rates, marks, last CNP, bottleneck), rounded up to 64.
const FLOW_MESSAGE_BYTES: u64 = 704;
/// State per host at flow level beyond its ports and routes (counted apart): its NVLink
/// out and in as links, its life-cycle and pipeline state. Chosen against measurements:
/// examples/flow-training-16k.toml (3 compact messages a GPU) takes 99.5 MB of heap at
/// 16,384 GPUs and 492 MB at 65,536 (`fabricsim bench --flow-gpus N`), estimated 110 and
/// 481 MB with it; the tree iteration above, 1.27 GB, is estimated at 1.31 GB.
const FLOW_HOST_BYTES: u64 = 2048;
/// Flow level's events per message: its post, its drain, its completion, and its share of
/// the re-shares (measured 2 to 3 on the flow benchmark and a 4,096-GPU tree iteration,
/// 2026-12-05; 5 leaves room).
const FLOW_EVENTS_PER_MESSAGE: u64 = 5;
/// Fixed cost of the process (code, allocator, buffers).
const BASE_BYTES: u64 = 16 << 20;

/// What a run is expected to take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Estimate {
    /// The fabric and level the estimate is for.
    pub fabric: FabricKind,
    pub flow_level: bool,
    pub memory_bytes: u64,
    pub events: u64,
    /// Network packets the messages make (data, without retransmissions).
    pub packets: u64,
}

/// Estimates `scenario`'s run.
pub fn estimate(scenario: &Scenario) -> Result<Estimate, String> {
    let topo = scenario.build_topology()?;
    let hosts = topo.host_count() as u64;
    let switches = topo.switch_count() as u64;
    // Destination groups: the switches hosts hang off.
    let mut leaves: Vec<u32> = (0..topo.host_count())
        .map(|h| topo.port(topo.port(topo.host_port(HostId(h))).peer).node.0)
        .collect();
    leaves.sort_unstable();
    leaves.dedup();
    let groups = leaves.len() as u64;
    let ports = topo.ports().len() as u64;
    let (vls, buffer_per_port, mtu) = match scenario.fabric {
        FabricKind::Infiniband => {
            let ib = &scenario.ib;
            let vls = ib.virtual_lanes as u64;
            (vls, vls * ib.vl_buffer as u64, ib.mtu as u64)
        }
        FabricKind::Rocev2 => {
            let switches = topo.switch_count().max(1) as u64;
            (
                1,
                scenario.roce.switch_buffer / (ports / switches).max(1),
                scenario.roce.mtu as u64,
            )
        }
    };
    let flow_level = scenario.runs_at_flow_level().0;
    let work = count_work(scenario, &topo, mtu)?;
    let messages = if flow_level {
        work.compact_messages
    } else {
        work.messages
    };
    let packets = work.packets;
    let routes = switches
        .saturating_mul(groups)
        .saturating_add(hosts)
        .saturating_mul(ROUTE_BYTES);
    if flow_level {
        return Ok(Estimate {
            fabric: scenario.fabric,
            flow_level,
            memory_bytes: BASE_BYTES
                .saturating_add(routes)
                .saturating_add(messages.saturating_mul(FLOW_MESSAGE_BYTES))
                .saturating_add(hosts.saturating_mul(FLOW_HOST_BYTES))
                .saturating_add(ports.saturating_mul(PORT_VL_BYTES)),
            events: messages.saturating_mul(FLOW_EVENTS_PER_MESSAGE),
            packets,
        });
    }
    // Packets in flight: what the buffers can hold, at most every packet of the run.
    let in_flight = (ports.saturating_mul(buffer_per_port) / mtu).min(packets);
    let memory_bytes = BASE_BYTES
        .saturating_add(routes)
        .saturating_add(messages.saturating_mul(MESSAGE_BYTES))
        .saturating_add(ports.saturating_mul(vls).saturating_mul(PORT_VL_BYTES))
        .saturating_add(in_flight.saturating_mul(PACKET_BYTES));
    Ok(Estimate {
        fabric: scenario.fabric,
        flow_level,
        memory_bytes,
        events: work.events,
        packets,
    })
}

/// Packet-level events one core handles per second: `fabricsim bench` measures 7.0 to
/// 9.3 M events/s on one core of the development VM (BENCHMARKS.md); 6 M leaves room for
/// slower machines and denser runs. A project choice checked against those runs.
pub const PACKET_EVENTS_PER_CORE_SECOND: f64 = 6.0e6;

/// What each core beyond the first adds to a packet-level run split over threads: a
/// 512-GPU iteration ran at 9.1 to 11.8 M events/s on two cores against 7 M on one
/// (BENCHMARKS.md, 2026-12-04), so about 0.6 of a core. A project choice.
pub const PACKET_GAIN_PER_EXTRA_CORE: f64 = 0.6;

/// A packet-level run of `events` events: its estimated wall time on this machine's
/// cores, in seconds, and the cores counted. [`PACKET_EVENTS_PER_CORE_SECOND`] on the
/// first core, [`PACKET_GAIN_PER_EXTRA_CORE`] of it on each further one.
pub fn packet_wall_seconds(events: u64) -> (f64, usize) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let speed = 1.0 + PACKET_GAIN_PER_EXTRA_CORE * (cores - 1) as f64;
    (
        events as f64 / (PACKET_EVENTS_PER_CORE_SECOND * speed),
        cores,
    )
}

/// `runs` packet-level runs of `events` events each, run side by side as
/// `runner::run_all` does: their estimated wall time in seconds, and the cores counted.
/// Each run has the cores to itself when there are as many as runs; fewer cores share
/// out the runs' core-seconds, and no run is faster than alone on every core.
pub fn packet_runs_wall_seconds(events: u64, runs: usize) -> (f64, usize) {
    let (alone, cores) = packet_wall_seconds(events);
    let one_core = events as f64 / PACKET_EVENTS_PER_CORE_SECOND;
    let shared = one_core * runs.max(1) as f64 / cores as f64;
    (alone.max(shared), cores)
}

/// What a scenario's workload makes, counted from its compact expansion (one message per
/// edge of a pipelined collective), so that even a 16,384-GPU job is counted in
/// megabytes: the whole packet-level workload is never built.
struct Work {
    /// Messages at packet level: a compact edge stands for its pieces on the wire.
    messages: u64,
    /// Messages at flow level.
    compact_messages: u64,
    /// Network packets (data, without retransmissions): messages between servers, in
    /// MTU pieces of each piece on the wire. Transfers inside a server (NVLink, host data
    /// path stages) make none.
    packets: u64,
    /// Packet-level events: a transmission and an arrival per link of the packet's path
    /// (its static route; every minimal path is as long), on InfiniBand as many again for
    /// the flow-control packet that returns its credits over each link, and an
    /// acknowledgment (the built-in default cluster: 70.8 M estimated against 70.5 M
    /// measured on InfiniBand, 39.3 M against 40.1 M on RoCEv2).
    events: u64,
}

fn count_work(scenario: &Scenario, topo: &Topology, mtu: u64) -> Result<Work, String> {
    let workload = build_with(
        &scenario.traffic,
        scenario.seed,
        true,
        scenario.nccl.connections,
    );
    let routes = Routes::minimal(topo)?;
    let per_link = match scenario.fabric {
        FabricKind::Infiniband => 4,
        FabricKind::Rocev2 => 2,
    };
    let mut pieces_of = vec![1u64; workload.messages.len()];
    for &(i, p) in &workload.pipelined {
        pieces_of[i as usize] = p.pieces_on_wire().max(1);
    }
    let mut work = Work {
        messages: 0,
        compact_messages: workload.messages.len() as u64,
        packets: 0,
        events: 0,
    };
    for (m, &pieces) in workload.messages.iter().zip(&pieces_of) {
        work.messages = work.messages.saturating_add(pieces);
        if m.local.is_some() || topo.same_server(m.src, m.dst) {
            continue;
        }
        let packets = m
            .size
            .div_ceil(pieces)
            .div_ceil(mtu)
            .max(1)
            .saturating_mul(pieces);
        let links = static_path(topo, &routes, m.src, m.dst).len() as u64;
        work.packets = work.packets.saturating_add(packets);
        work.events = work
            .events
            .saturating_add(packets.saturating_mul(per_link * links + 1));
    }
    Ok(work)
}

/// The memory a run may plan for: `FABRICSIM_MEMORY` if set (a size such as "64GiB", for a
/// batch job's limit), else what the system can give now (Linux MemAvailable), if known.
pub fn memory_budget() -> Result<Option<u64>, String> {
    match std::env::var("FABRICSIM_MEMORY") {
        Ok(text) => parse_quantity(&text, Dimension::Size)
            .map(Some)
            .map_err(|m| format!("FABRICSIM_MEMORY = \"{text}\": {m}")),
        Err(_) => Ok(available_memory()),
    }
}

/// Memory the system can give this process now (Linux MemAvailable), if known.
fn available_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Cores that other processes are not keeping busy now: every core less the runnable
/// threads of others (Linux `procs_running`, the least of ten looks over 27 ms, less
/// this process's one running thread); every core where that is not known. A split run's
/// threads wait for each other at every window's end, so one that shares its core with a
/// busy neighbour loses a scheduler tick per window (issue 31 measured a 1,024-host
/// permutation at 25.5 s on two threads beside one busy process against 1.74 s on one).
pub fn idle_cores() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let running = || -> Option<usize> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let line = stat.lines().find(|l| l.starts_with("procs_running"))?;
        line.split_whitespace().nth(1)?.parse().ok()
    };
    let mut least: Option<usize> = None;
    for look in 0..10 {
        if look > 0 {
            std::thread::sleep(std::time::Duration::from_millis(3));
        }
        let Some(now) = running() else {
            return cores;
        };
        least = Some(least.map_or(now, |l| l.min(now)));
    }
    let others = least.map_or(0, |n| n.saturating_sub(1));
    cores.saturating_sub(others).max(1)
}

/// Refuses a run whose estimated memory exceeds what is available, naming what would fit:
/// flow level, where the scenario runs at packet level and flow level accepts it.
pub fn check_fits(scenario: &Scenario, e: &Estimate) -> Result<(), String> {
    let Some(free) = memory_budget()? else {
        return Ok(());
    };
    if e.memory_bytes <= free {
        return Ok(());
    }
    let mut flow = scenario.clone();
    let hint = match flow.set_level(Level::Flow) {
        Ok(()) if !e.flow_level => match estimate(&flow) {
            Ok(f) if f.memory_bytes <= free => format!(
                "; at flow level it needs about {} MB: give --level flow (or [simulation] level = \"flow\")",
                f.memory_bytes >> 20
            ),
            _ => String::new(),
        },
        _ => String::new(),
    };
    Err(format!(
        "scenario {} on {} at {} level: the run needs about {} MB and {} MB are available (FABRICSIM_MEMORY, or what the system has free){hint}; otherwise shrink it, or pass --force to run anyway",
        scenario.name,
        e.fabric.label(),
        e.level(),
        e.memory_bytes >> 20,
        free >> 20
    ))
}

impl Estimate {
    /// "flow" or "packet": the level the estimate is for.
    pub fn level(&self) -> &'static str {
        if self.flow_level {
            Level::Flow.name()
        } else {
            Level::Packet.name()
        }
    }

    /// The estimate as TOML comments, for `check`.
    pub fn comment(&self) -> String {
        format!(
            "# estimated run on {} at {} level: about {} MB of memory, {} packets, {} events\n",
            self.fabric.label(),
            self.level(),
            self.memory_bytes.div_ceil(1 << 20),
            self.packets,
            self.events
        )
    }
}

/// The level a scenario runs at, decided here rather than in `scenario` because `auto`
/// asks this module's estimate.
impl Scenario {
    /// Settles `auto` on the level it chooses, keeping why, so that a command whose
    /// steps each ask the level (memory check, threads, the run, its +1 us twin)
    /// estimates the scenario once; returns why, as `runs_at_flow_level` does. Packet
    /// and flow level stay as they are.
    pub fn settle_level(&mut self) -> Option<String> {
        self.settle_level_for(1)
    }

    /// As [`settle_level`](Self::settle_level), for a command that makes `runs` runs of
    /// this size (`fabricsim run`: [`Scenario::runs_made`]), which the budget must
    /// hold together.
    pub fn settle_level_for(&mut self, runs: usize) -> Option<String> {
        let (flow, why) = self.runs_at_flow_level_for(runs);
        if matches!(self.level, Level::Auto(_)) {
            self.level = if flow { Level::Flow } else { Level::Packet };
            self.level_reason = why.clone();
        }
        why
    }

    /// The scenario on InfiniBand and on RoCEv2 as `compare` runs it: at one level, so
    /// that like is compared with like. Under `auto` each fabric is settled on its own
    /// (each may have its own design); if either goes to flow level, both do, unless
    /// the other needs packets (then each keeps its own, and its reason says so). Under
    /// a budget, packet level must fit it with every run compare makes (a training
    /// job's +1 us run, a design's latencies at their ends), not only the main two.
    pub fn compared_fabrics(&self) -> [Scenario; 2] {
        let mut both = self.on_each_fabric();
        if !matches!(self.level, Level::Auto(_)) {
            return both;
        }
        for s in &mut both {
            s.settle_level();
        }
        if let Some(why) = self.comparison_beyond_budget(&both) {
            for s in both.iter_mut().filter(|s| packets_only(s).is_none()) {
                s.level = Level::Flow;
                s.level_reason = Some(why.clone());
            }
            return both;
        }
        let flow = both.iter().position(|s| s.level == Level::Flow);
        let Some(first) = flow else { return both };
        let why = both[first].level_reason.clone().unwrap_or_default();
        let name = both[first].fabric.label();
        for s in both.iter_mut().filter(|s| s.level == Level::Packet) {
            if packets_only(s).is_none() {
                s.level = Level::Flow;
                s.level_reason = Some(format!(
                    "{name}: {why}; compare runs both fabrics at flow level, to compare like with like"
                ));
            }
        }
        both
    }

    /// Runs `compare` makes on each fabric: the main run and the runs beside it (as
    /// `fabricsim run` makes them: a training job's +1 us run, each job alone, the run
    /// without failures), and one per end of each range that changes that fabric's run.
    pub fn compare_runs(&self) -> [usize; 2] {
        let made = self.runs_made();
        let adaptive = self.compare.adaptive.is_some();
        let ends = end_runs(&run_inputs(self), adaptive);
        let per = |c: usize| made + ends.iter().filter(|e| e.candidate == c).count();
        // The adaptive candidate runs on RoCEv2's design: its runs count as RoCEv2's.
        [per(0), per(1) + if adaptive { per(2) } else { 0 }]
    }

    /// Why packet level does not fit the budget for all of compare's runs, when both
    /// fabrics settled on packet level under `auto` with a budget and it does not.
    fn comparison_beyond_budget(&self, both: &[Scenario; 2]) -> Option<String> {
        let Level::Auto(Auto::Budget(budget)) = self.level else {
            return None;
        };
        if both.iter().any(|s| s.level != Level::Packet) {
            return None;
        }
        let runs = self.compare_runs();
        let mut total = 0.0;
        let mut cores = 1;
        for (s, n) in both.iter().zip(runs) {
            let (secs, c) = packet_wall_seconds(estimate(s).ok()?.events);
            total += secs * n as f64;
            cores = c;
        }
        let budget_s = budget.ps() as f64 / 1e12;
        let errs = flow_error_note(self.fabric);
        (total > budget_s).then(|| {
            format!(
                "simulation.level = \"auto\": compare's {} packet-level runs (the main runs, a training job's +1 us runs, each catalog latency at its ends) estimated at {} on this machine's {cores} cores, beyond the budget of {}: running at flow level{errs}",
                runs[0] + runs[1],
                human_seconds(total),
                human_seconds(budget_s)
            )
        })
    }

    /// Whether this scenario runs at flow level, and if `auto` chose, which and why (for
    /// standard error and the summary). `auto` keeps packet level where flow level would
    /// refuse, and where the estimate fails (the run then says why).
    pub fn runs_at_flow_level(&self) -> (bool, Option<String>) {
        self.runs_at_flow_level_for(1)
    }

    /// As [`runs_at_flow_level`](Self::runs_at_flow_level), with `runs` runs of this size
    /// to fit the budget together (they share the cores: see [`packet_runs_wall_seconds`]).
    fn runs_at_flow_level_for(&self, runs: usize) -> (bool, Option<String>) {
        let auto = "simulation.level = \"auto\"";
        let (flow, why) = match self.level {
            Level::Packet => return (false, self.level_reason.clone()),
            Level::Flow => return (true, self.level_reason.clone()),
            Level::Auto(Auto::AboveHosts(above)) => {
                let hosts = self.host_count() as u64;
                if hosts <= above {
                    (
                        false,
                        format!("{auto}: {hosts} hosts <= flow_above_hosts = {above}"),
                    )
                } else {
                    (
                        true,
                        format!("{auto}: {hosts} hosts > flow_above_hosts = {above}"),
                    )
                }
            }
            Level::Auto(Auto::Budget(budget)) => {
                let mut packet = self.clone();
                packet.level = Level::Packet;
                let Ok(e) = estimate(&packet) else {
                    return (false, None);
                };
                let (secs, cores) = packet_runs_wall_seconds(e.events, runs);
                let budget_s = budget.ps() as f64 / 1e12;
                let free = memory_budget().ok().flatten();
                let what = if runs > 1 {
                    format!("{runs} packet-level runs (the main run and the runs beside it: a training job's +1 us, each job alone, the run without failures)")
                } else {
                    "packet level".to_string()
                };
                let why = format!(
                    "{auto}: {what} estimated at {} on this machine's {cores} cores, {} the budget of {}",
                    human_seconds(secs),
                    if secs <= budget_s { "within" } else { "beyond" },
                    human_seconds(budget_s)
                );
                match free.filter(|&f| e.memory_bytes > f) {
                    Some(f) => (
                        true,
                        format!(
                            "{why}, but it needs {} MB of the {} MB available",
                            e.memory_bytes >> 20,
                            f >> 20
                        ),
                    ),
                    None => (secs > budget_s, why),
                }
            }
        };
        if !flow {
            return (false, Some(format!("{why}: running at packet level")));
        }
        if let Some(refused) = packets_only(self) {
            return (false, Some(format!("{why}, but packet level: {refused}")));
        }
        let unmodelled = flow_unmodelled(self)
            .map(|w| format!("; warning: {w}"))
            .unwrap_or_default();
        let errs = flow_error_note(self.fabric);
        (
            true,
            Some(format!("{why}: running at flow level{errs}{unmodelled}")),
        )
    }
}

/// Flow level's recorded error on `fabric` against packet level, as a note.
fn flow_error_note(fabric: FabricKind) -> String {
    recorded_range(fabric.name(), |_| true)
        .map(|(lo, hi)| {
            format!(
                " (flow level errs from {:+.0} % to {:+.0} % against packet level on examples/calibration)",
                lo * 100.0,
                hi * 100.0
            )
        })
        .unwrap_or_default()
}

/// Seconds as a person reads them: "40 s", "12 min", "3.5 h".
fn human_seconds(s: f64) -> String {
    if s < 120.0 {
        format!("{s:.0} s")
    } else if s < 7200.0 {
        format!("{:.0} min", s / 60.0)
    } else {
        format!("{:.1} h", s / 3600.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_tables_grow_with_switches_and_leaves_not_hosts() {
        let s = Scenario::parse(
            "[topology]\nkind = \"leaf-spine\"\nhosts = 65536\nleaves = 1024\nspines = 64\n[[traffic]]\nkind = \"flow\"\nsrc = 0\ndst = 1\nsize = 5\n",
            "huge",
        )
        .unwrap();
        let e = estimate(&s).unwrap();
        // 1,088 switches x 1,024 leaves x 12 B of routes (13 MB), 65,536 hosts, 139,264
        // ports x 256 B: far below the 35 GB a table per (node, host) took.
        assert!(e.memory_bytes < 100 << 20, "{e:?}");
        assert_eq!(e.packets, 1);
    }

    #[test]
    fn packets_count_each_message_in_mtu_pieces() {
        let s = Scenario::parse(
            "[[traffic]]\nkind = \"flow\"\nsrc = 0\ndst = 1\nsize = \"1MiB\"\n[[traffic]]\nkind = \"flow\"\nsrc = 1\ndst = 0\nsize = 4097\n",
            "two",
        )
        .unwrap();
        let e = estimate(&s).unwrap();
        assert_eq!(e.packets, 256 + 2);
        // Two links on one switch, each with a transmission and an arrival, and on
        // InfiniBand a credit packet back over each (two more), then the ACK: 9 events
        // per packet; 5 on RoCEv2.
        assert_eq!(e.events, 258 * 9);
        let roce = Scenario {
            fabric: FabricKind::Rocev2,
            ..s
        };
        assert_eq!(estimate(&roce).unwrap().events, 258 * 5);
        assert!(e.memory_bytes < 64 << 20, "{e:?}");
    }

    #[test]
    fn transfers_inside_a_server_make_no_packets() {
        let s = Scenario::parse(
            "[topology]\nkind = \"single-switch\"\nhosts = 16\ngpus_per_node = 8\n[[traffic]]\nkind = \"flow\"\nsrc = 0\ndst = 1\nsize = \"1MiB\"\n[[traffic]]\nkind = \"flow\"\nsrc = 0\ndst = 8\nsize = \"1MiB\"\n",
            "nvlink",
        )
        .unwrap();
        // Only the second flow leaves its server.
        assert_eq!(estimate(&s).unwrap().packets, 256);
    }
}
