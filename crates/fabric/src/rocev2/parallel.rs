//! One RoCEv2 run split over threads ([`crate::parallel`]): whether it can be, whether
//! it is worth it, and its parts.

use super::sim::Simulation;
use super::RoceConfig;
use crate::driver::BuildError;
use crate::driver::{link_lookahead, PacketTrain};
use crate::parallel::{self, SplitRun, MIN_EVENTS_PER_WINDOW};
use crate::workload::Workload;
use fabricsim_core::topology::{NodeKind, Topology};
use fabricsim_core::units::{HostId, Time};
use fabricsim_core::wire::roce;
use std::collections::{BTreeMap, VecDeque};

/// Why a run cannot be split over threads, if it cannot: what needs the whole run's
/// state at every event (the watchdog's cycle records, the NIC message rate's slots),
/// telemetry kept beside the frames, or a topology of one server.
pub fn why_not_split(
    cfg: &RoceConfig,
    topo: &Topology,
    workload: &Workload,
) -> Option<&'static str> {
    if cfg.watchdog.is_some() {
        Some("the PFC watchdog's cycle records are run-wide")
    } else if !cfg.failures.is_empty() {
        Some("a failure changes every switch's routes at one instant")
    } else if cfg.ack_cc.is_some() {
        Some("HPCC, Swift and TIMELY carry telemetry beside the frames, which a part does not hand over")
    } else if workload.message_interval.is_some() {
        Some("a NIC message rate orders posts run-wide")
    } else if topo.host_count() <= topo.gpus_per_node() {
        Some("it has one server")
    } else {
        None
    }
}

/// Events a data packet costs at each hop of its path, at most in practice: its
/// transmission and arrival and a switch's wake-up at its ready time, and as much again
/// for the ACK, CNP and PFC frames it causes. (Not a proven bound: the permutations and the
/// 127:1 incast of BENCHMARKS.md cost 2.8-3.3 a hop; 8 leaves room.)
const EVENTS_PER_HOP: f64 = 8.0;

/// A ceiling on a run's events per window, averaged over the whole run (`None` when the
/// messages into one receiver alone could fill [`MIN_EVENTS_PER_WINDOW`]): no receiver
/// takes data faster than its link delivers it, each data packet costs at most
/// [`EVENTS_PER_HOP`] at each hop, and windows are no longer than the links' lookahead.
/// A run that many senders share few receivers in (an incast) stays under
/// [`MIN_EVENTS_PER_WINDOW`] however fast its start is, so it is not worth a trial.
pub fn events_per_window_ceiling(
    cfg: &RoceConfig,
    topo: &Topology,
    workload: &Workload,
) -> Option<f64> {
    let window = link_lookahead(topo, roce::PFC_FRAME_WIRE_LEN as u64).ps() as f64;
    // Per receiver: its data packets and their link bytes, and its senders.
    let mut into: BTreeMap<HostId, (u64, u64, Vec<HostId>)> = BTreeMap::new();
    for m in workload.messages.iter().filter(|m| m.local.is_none()) {
        let train = PacketTrain::of(m.size, cfg.mtu, |payload, first| {
            roce::write_frame_len(cfg.ip, payload, first) as u64
        });
        let e = into.entry(m.dst).or_default();
        e.0 += train.packets();
        e.1 += train.bytes();
        e.2.push(m.src);
    }
    // Packets a receiver's link delivers per window, at most.
    let per_window = |dst: HostId, packets: u64, bytes: u64| {
        let rate = topo.port(topo.host_port(dst)).rate;
        let mean = (bytes / packets).max(1);
        window / rate.serialization(mean).ps().max(1) as f64
    };
    let mut ceiling = 0.0;
    for (&dst, (packets, bytes, senders)) in &into {
        let hops = hops_to(topo, dst);
        let farthest = (senders.iter())
            .map(|&s| hops[topo.port(topo.host_port(s)).node.index()])
            .max()
            .unwrap_or(0);
        ceiling += per_window(dst, *packets, *bytes) * EVENTS_PER_HOP * farthest as f64;
        if ceiling >= MIN_EVENTS_PER_WINDOW as f64 {
            return None;
        }
    }
    Some(ceiling)
}

/// Links on a shortest path from every node to host `dst`, through switches only
/// (`u32::MAX` where none).
fn hops_to(topo: &Topology, dst: HostId) -> Vec<u32> {
    let mut hops = vec![u32::MAX; topo.nodes().len()];
    let start = topo.port(topo.host_port(dst)).node;
    hops[start.index()] = 0;
    let mut queue = VecDeque::from([start]);
    while let Some(n) = queue.pop_front() {
        if n != start && !matches!(topo.nodes()[n.index()], NodeKind::Switch { .. }) {
            continue;
        }
        for &p in topo.node_ports(n) {
            let next = topo.port(topo.port(p).peer).node;
            if hops[next.index()] == u32::MAX {
                hops[next.index()] = hops[n.index()] + 1;
                queue.push_back(next);
            }
        }
    }
    hops
}

/// The scenario run split as `how` says ([`parallel::run_split`]).
pub fn run(
    cfg: RoceConfig,
    topo: Topology,
    workload: &Workload,
    how: SplitRun,
    progress: &mut dyn FnMut(u64, Time),
) -> Result<Option<Simulation>, BuildError> {
    parallel::run_split(&topo, how, progress, |part| {
        Simulation::new_part(cfg.clone(), topo.clone(), workload, part)
    })
}
