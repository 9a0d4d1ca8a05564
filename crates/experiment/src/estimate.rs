//! A run's size before it starts: its peak memory and its events, estimated from the
//! scenario, so that `check` prints them and `run` refuses a run that would not fit in
//! memory. Estimates, not bounds: within a factor of a few (the per-item costs below are
//! the structures' sizes, rounded up; the events assume every packet crosses the longest
//! up-down path once and is acknowledged).

use crate::scenario::{FabricKind, Scenario};
use fabricsim_core::topology::NodeKind;
use fabricsim_core::units::{parse_quantity, Dimension, HostId};
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
/// entries and result.
const FLOW_MESSAGE_BYTES: u64 = 320;
/// Flow level's events per message: its post, a drain (and a few stale ones from
/// re-shares), its completion, and its share of the re-shares.
const FLOW_EVENTS_PER_MESSAGE: u64 = 5;
/// Fixed cost of the process (code, allocator, buffers).
const BASE_BYTES: u64 = 16 << 20;

/// What a run is expected to take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Estimate {
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
    let top_tier = topo
        .nodes()
        .iter()
        .filter_map(|n| match n {
            NodeKind::Switch { tier } => Some(*tier as u64),
            NodeKind::Host(_) => None,
        })
        .max()
        .unwrap_or(0);
    let hops = 2 * (top_tier + 1);
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
    let workload = build_with(&scenario.traffic, scenario.seed, flow_level);
    let messages = workload.messages.len() as u64;
    let packets: u64 = workload
        .messages
        .iter()
        .filter(|m| m.local.is_none() && m.src != m.dst)
        .map(|m| m.size.div_ceil(mtu).max(1))
        .sum();
    let routes = switches
        .saturating_mul(groups)
        .saturating_add(hosts)
        .saturating_mul(ROUTE_BYTES);
    if flow_level {
        return Ok(Estimate {
            memory_bytes: BASE_BYTES
                .saturating_add(routes)
                .saturating_add(messages.saturating_mul(FLOW_MESSAGE_BYTES))
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
    // A transmission and an arrival per link, an acknowledgment every few packets.
    let events = packets.saturating_mul(2 * hops + 1);
    Ok(Estimate {
        memory_bytes,
        events,
        packets,
    })
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

/// Refuses a run whose estimated memory exceeds what is available.
pub fn check_fits(scenario: &Scenario, e: &Estimate) -> Result<(), String> {
    match memory_budget()? {
        Some(free) if e.memory_bytes > free => Err(format!(
            "scenario {}: the run needs about {} MB and {} MB are available (FABRICSIM_MEMORY, or what the system has free); shrink it, or pass --force to run anyway",
            scenario.name,
            e.memory_bytes >> 20,
            free >> 20
        )),
        _ => Ok(()),
    }
}

impl Estimate {
    /// The estimate as TOML comments, for `check`.
    pub fn comment(&self) -> String {
        format!(
            "\n# estimated run: about {} MB of memory, {} packets, {} events\n",
            self.memory_bytes.div_ceil(1 << 20),
            self.packets,
            self.events
        )
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
        // Two hops each way on one switch: 5 events per packet.
        assert_eq!(e.events, 258 * 5);
        assert!(e.memory_bytes < 64 << 20, "{e:?}");
    }
}
