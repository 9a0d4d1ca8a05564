//! Per-link packet simulations for flow-level runs of open-loop traffic: Parsimon's
//! decomposition (Zhao et al., "Scalable Tail Latency Estimation for Data Center
//! Networks", NSDI 2023), in place of the one-switch sharing probe.
//!
//! Open-loop traffic is messages that each start at a given time and wait for no other
//! (incasts, permutations, flow lists, background mixes). Flow level routes them as the
//! packet models do (the same ECMP hash of the same QP). Each port that two or more of
//! them may cross at the same time is then simulated on its own at packet level, with the
//! scenario's own fabric settings (PFC, ECN, DCQCN or credits), on a small topology that
//! keeps what decides its queue:
//! - the port's in-tree: the switch it leaves and every link and switch its messages
//!   cross before it, back to their sources' own links, each switch with its real number
//!   of ports (the shared buffer and PFC headroom are divided as there). Upstream queues
//!   of these messages form there as in the whole network (an oversubscribed leaf's
//!   uplinks pace an incast's senders); a link beyond the port's switch that one link no
//!   faster feeds cannot queue and is left out, its delay kept;
//! - behind the port, their destinations, on links no slower than the port (a
//!   destination's own link is its own simulation's business).
//!
//! A message that RoCEv2 sprays packet by packet is cut into equal parts, one on each of
//! its candidate paths (at most [`MAX_SPRAYED_PATHS`]), each coming from a source link
//! of its own at its share of the source's rate, and leaves its NIC whole; one that
//! adaptive routing steers by queues has no plan.
//!
//! Ports whose simulations are equal (a permutation's symmetric uplinks) are simulated
//! once. A message's FCT is its ideal FCT plus the largest delay beyond ideal any of its
//! ports' simulations gave it: the simulation of a message's last bottleneck already
//! holds the links that feed it, so adding the delays would count an upstream queue
//! twice (Parsimon adds them; on an incast across leaves adding overshoots by the
//! spines' share, measured in BENCHMARKS.md).
//!
//! A port's simulation sends its messages at their sources' line rate, but a message
//! that a port before it holds reaches it slower, and leaves the others there more room.
//! So the ports are simulated in rounds along the messages' paths (a port after every
//! simulated port its messages cross before it), and a message that flow level's own
//! water-filling held mostly at such an earlier port (`flow::Simulation::bottleneck_hops`)
//! comes to the later port in parts spread over the delay that port gave it
//! ([`LinkSim::shaped`]). A message held at the port or beyond comes at line rate as
//! before: what holds it there keeps the ports before from queueing (an incast's
//! uplinks). Measured in BENCHMARKS.md ("Held messages reach the next port late").

use crate::scenario::{FabricKind, Scenario};
use fabricsim_core::topology::{NodeKind, Routes, Topology};
use fabricsim_core::units::{BitRate, HostId, PortId, Time};
use fabricsim_fabric::flow::NetworkPath;
use fabricsim_fabric::report::RunReport;
use fabricsim_fabric::workload::{build, Traffic, Workload};
use fabricsim_fabric::{infiniband, rocev2, EventDriven};
use std::collections::BTreeMap;

mod in_tree;
use in_tree::{link_sim, Feed, MiniTopology};

/// The most packets the per-link simulations of one run may carry together (over the
/// distinct simulations): beyond it flow level keeps its max-min sharing with the
/// sharing probe, and says so. A project choice: about a minute on one core of this
/// machine (BENCHMARKS.md).
pub const PACKET_BUDGET: u64 = 40_000_000;

/// Whether every message of `w` starts at its own time and waits for none: what the
/// per-link decomposition takes (collectives and training jobs are closed loops, whose
/// messages start when others end).
pub fn open_loop(w: &Workload) -> bool {
    w.after.iter().all(Vec::is_empty)
        && w.follows.iter().all(Option::is_none)
        && w.collectives.is_empty()
        && w.trainings.is_empty()
        && w.sharp_groups.is_empty()
        && w.data_paths.is_empty()
        && w.pipelined.is_empty()
        && w.staged.is_empty()
        && w.prepared.is_empty()
        && w.message_interval.is_none()
}

/// A link's rate (bits per second) and one-way delay (picoseconds).
type Wire = (u64, u64);

/// One port's packet-level simulation, as a value: equal values give equal results.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct LinkSim {
    port: Wire,
    /// Ports of the switch the port leaves; 0 where it leaves a host (the messages' one
    /// source).
    from_ports: u32,
    /// Ports of the switch it reaches; 0 where it reaches a host (their one destination).
    to_ports: u32,
    /// The links into the switch it leaves that the messages come in on, each with what
    /// feeds it (none where it leaves a host).
    groups: Vec<Feed>,
    /// Behind a switch it reaches, each destination's link.
    dsts: Vec<Wire>,
    flows: Vec<LinkFlow>,
}

/// A message in a port's simulation: where it comes in and goes, and what it is.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct LinkFlow {
    /// The message (its place among the port's messages) it is, or is a part of.
    message: u32,
    /// The link into the port's switch it comes in on (its place in `groups`).
    group: u32,
    /// Its source among the sources of every group, depth first (`Feed::sources`).
    source: u32,
    dst: u32,
    size: u64,
    start: u64,
    sl: u8,
}

/// The per-link simulations a run needs: each simulated port's simulation with no
/// message shaped, the messages it holds (in its flows' order), and the rounds in which
/// the ports are simulated (a port after every port its messages cross before it).
pub struct Plan {
    units: Vec<Unit>,
    ports: Vec<PortSim>,
    rounds: Vec<Vec<usize>>,
    packets: u64,
    mtu: u32,
}

/// A simulated port of a [`Plan`].
struct PortSim {
    sim: LinkSim,
    /// The units it holds (indices into `Plan::units`), in its flows' order.
    units: Vec<u32>,
    /// For each unit, the simulated ports it crosses before this one: each as (its hop
    /// there, index into `Plan::ports`, the unit's place among that port's units).
    upstream: Vec<Vec<(usize, usize, usize)>>,
    /// For each unit, its hop at this port.
    hops: Vec<usize>,
}

/// What [`apply`] ran: distinct simulations, their packets, and how many of them held
/// messages shaped by their upstream delays.
#[derive(Clone, Copy, Debug, Default)]
pub struct Ran {
    pub sims: usize,
    pub packets: u64,
    pub shaped: usize,
}

impl Plan {
    /// Packets the simulations may carry at most: the distinct unshaped ones, and once
    /// more every port that may be simulated again with shaped messages.
    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// Ports simulated.
    pub fn ports(&self) -> usize {
        self.ports.len()
    }
}

/// What the per-link simulations hold of a network message: the message on its path,
/// or, where it is sprayed, one of the parts it is cut into, each on one of its
/// candidate paths ([`sprayed_paths`]) at its share of its source's rate.
#[derive(Clone, Debug)]
struct Unit {
    message: u32,
    path: Vec<PortId>,
    /// The first hop of `path` it is simulated at: 1 for a sprayed part, whose message
    /// leaves its NIC whole (a unit of its own there, on that one port).
    first_hop: usize,
    size: u64,
    /// The parts its message is cut into (1 where it keeps one path).
    share: u32,
}

/// The most parts a sprayed message is cut into: every candidate path of a two-tier
/// leaf-spine of up to 16 spines or a k=8 fat-tree (16 cores), a sample beyond. A
/// project choice: each part is a message of its own in the simulations.
pub const MAX_SPRAYED_PATHS: usize = 16;

/// The plan for `w`'s messages on their `paths` (flow level's, by message index). A
/// message that spreads over several paths is cut into parts on its candidate paths
/// where `sprayed` (per-packet spraying: each path takes an equal share of it, so each
/// part comes at that share of its source's rate); otherwise (adaptive routing, whose
/// paths follow queues) there is no plan.
pub fn plan(
    topo: &Topology,
    w: &Workload,
    paths: &[NetworkPath],
    mtu: u32,
    sprayed: bool,
) -> Option<Plan> {
    let mut units = Vec::new();
    let mut routes = None;
    for (i, p) in paths.iter().enumerate() {
        let msg = &w.messages[i];
        match p {
            NetworkPath::Local => {}
            NetworkPath::Spread if !sprayed => return None,
            NetworkPath::Spread => {
                let routes = match &mut routes {
                    Some(r) => r,
                    None => routes.insert(Routes::minimal(topo).ok()?),
                };
                let candidates = sprayed_paths(topo, routes, msg.src, msg.dst);
                let k = candidates
                    .len()
                    .min(msg.size.div_ceil(mtu as u64).max(1) as usize);
                units.push(Unit {
                    message: i as u32,
                    path: vec![topo.host_port(msg.src)],
                    first_hop: 0,
                    size: msg.size,
                    share: 1,
                });
                // Fewer parts than paths take paths in turn from one the message's index
                // picks, so that short messages spread as their packets would.
                let from = i % candidates.len();
                let paths = candidates.iter().cycle().skip(from).take(k);
                for (j, path) in paths.cloned().enumerate() {
                    units.push(Unit {
                        message: i as u32,
                        path,
                        first_hop: 1,
                        size: msg.size / k as u64 + u64::from((j as u64) < msg.size % k as u64),
                        share: k as u32,
                    });
                }
            }
            NetworkPath::Ports(ps) => units.push(Unit {
                message: i as u32,
                path: ps.clone(),
                first_hop: 0,
                size: msg.size,
                share: 1,
            }),
        }
    }
    let mut on_port: Vec<Vec<(u32, usize)>> = vec![Vec::new(); topo.ports().len()];
    for (u, unit) in units.iter().enumerate() {
        for (hop, port) in unit.path.iter().enumerate().skip(unit.first_hop) {
            on_port[port.0 as usize].push((u as u32, hop));
        }
    }
    let mut simulated = vec![usize::MAX; on_port.len()];
    let mut ports = Vec::new();
    for (p, flows) in on_port.iter().enumerate() {
        if !overlapping(topo, w, &units, flows) {
            continue;
        }
        simulated[p] = ports.len();
        ports.push(PortSim {
            sim: link_sim(topo, w, &units, PortId(p as u32), flows),
            units: flows.iter().map(|&(u, _)| u).collect(),
            upstream: Vec::new(),
            hops: flows.iter().map(|&(_, hop)| hop).collect(),
        });
    }
    // Each unit's simulated ports: (hop, port, its place among the port's units).
    let mut crossed: Vec<Vec<(usize, usize, usize)>> = vec![Vec::new(); units.len()];
    for (p, flows) in on_port.iter().enumerate() {
        let k = simulated[p];
        if k != usize::MAX {
            for (i, &(m, hop)) in flows.iter().enumerate() {
                crossed[m as usize].push((hop, k, i));
            }
        }
    }
    for (p, flows) in on_port.iter().enumerate() {
        let k = simulated[p];
        if k == usize::MAX {
            continue;
        }
        ports[k].upstream = flows
            .iter()
            .map(|&(m, hop)| {
                crossed[m as usize]
                    .iter()
                    .filter(|&&(h, _, _)| h < hop)
                    .map(|&(h, j, i)| (h, j, i))
                    .collect()
            })
            .collect();
    }
    let rounds = rounds(&ports);
    let mut distinct = BTreeMap::new();
    let mut packets = 0;
    for (k, port) in ports.iter().enumerate() {
        let carried = port.sim.packets(mtu);
        if distinct.insert(&port.sim, ()).is_none() {
            packets += carried;
        }
        if !rounds.first().is_some_and(|r| r.contains(&k)) {
            packets += carried;
        }
    }
    Some(Plan {
        units,
        ports,
        rounds,
        packets,
        mtu,
    })
}

/// The candidate paths from `src` to `dst` (each switch's ports on a shortest path to
/// `dst`, taken in every combination), at most [`MAX_SPRAYED_PATHS`]: where more would
/// follow, each path so far takes one candidate more, in turn.
fn sprayed_paths(topo: &Topology, routes: &Routes, src: HostId, dst: HostId) -> Vec<Vec<PortId>> {
    let mut paths = vec![vec![topo.host_port(src)]];
    loop {
        let mut next = Vec::new();
        let mut arrived = true;
        for (j, path) in paths.iter().enumerate() {
            let last = *path.last().expect("a path starts at its source");
            let node = topo.port(topo.port(last).peer).node;
            if matches!(topo.nodes()[node.index()], NodeKind::Host(_)) {
                next.push(path.clone());
                continue;
            }
            arrived = false;
            let candidates = routes.candidates(node, dst);
            let all = paths.len() * candidates.len() <= MAX_SPRAYED_PATHS;
            for (c, &port) in candidates.iter().enumerate() {
                if all || c == j % candidates.len() {
                    let mut longer = path.clone();
                    longer.push(port);
                    next.push(longer);
                }
            }
        }
        paths = next;
        if arrived {
            return paths;
        }
    }
}

/// The ports in rounds: the first holds every port whose messages cross no simulated
/// port before it, each later one the ports whose upstream ports are all in earlier
/// rounds. Ports on a cycle of such orders (none on up/down routes) stay in the first
/// round, simulated unshaped.
fn rounds(ports: &[PortSim]) -> Vec<Vec<usize>> {
    let mut round: Vec<Option<usize>> = vec![None; ports.len()];
    let mut rounds: Vec<Vec<usize>> = Vec::new();
    loop {
        let next: Vec<usize> = (0..ports.len())
            .filter(|&k| {
                round[k].is_none()
                    && ports[k]
                        .upstream
                        .iter()
                        .flatten()
                        .all(|&(_, j, _)| round[j].is_some())
            })
            .collect();
        if next.is_empty() {
            break;
        }
        for &k in &next {
            round[k] = Some(rounds.len());
        }
        rounds.push(next);
    }
    let cyclic: Vec<usize> = (0..ports.len()).filter(|&k| round[k].is_none()).collect();
    match rounds.first_mut() {
        Some(first) => {
            first.extend(cyclic);
            first.sort_unstable();
        }
        None if !cyclic.is_empty() => rounds.push(cyclic),
        None => {}
    }
    rounds
}

/// Whether two of the units crossing a port may be on it at once: each holds it from
/// its start for its bytes at its share of its path's slowest rate, plus its path's
/// delays and a microsecond a hop (generous: a port wrongly found busy only costs a
/// simulation).
fn overlapping(topo: &Topology, w: &Workload, units: &[Unit], flows: &[(u32, usize)]) -> bool {
    if flows.len() < 2 {
        return false;
    }
    let mut spans: Vec<(u64, u64)> = flows
        .iter()
        .map(|&(u, _)| {
            let unit = &units[u as usize];
            let msg = &w.messages[unit.message as usize];
            let slowest = unit
                .path
                .iter()
                .map(|&p| topo.port(p).rate)
                .min_by_key(|r| r.bps())
                .expect("a network path has ports");
            let delays: u64 = unit.path.iter().map(|&p| topo.port(p).delay.ps()).sum();
            let hold = slowest.serialization(unit.size).ps() * u64::from(unit.share)
                + delays
                + unit.path.len() as u64 * Time::from_us(1).ps();
            (msg.start.ps(), msg.start.ps() + hold)
        })
        .collect();
    spans.sort_unstable();
    let mut busy_until = 0;
    for (k, &(start, end)) in spans.iter().enumerate() {
        if k > 0 && start < busy_until {
            return true;
        }
        busy_until = busy_until.max(end);
    }
    false
}

impl LinkSim {
    /// The packets its messages make at `mtu`.
    fn packets(&self, mtu: u32) -> u64 {
        self.flows
            .iter()
            .map(|f| f.size.div_ceil(mtu as u64).max(1))
            .sum()
    }

    /// This simulation with each message that `held` (in its flows' order) says was held
    /// up before the port, behind a link into the port's switch from an upstream switch,
    /// sent in parts of [`PART`] (at most [`MAX_PARTS`]) spread evenly over its
    /// serialisation at its own link's rate plus that delay: what reaches the port is
    /// what the ports before it let through, as a steady stream of bursts (their
    /// simulations do not say when within the message they held it). Each part is a
    /// message of its own at packet level, so no reaction point carries the cuts of one
    /// part to the next.
    fn shaped(&self, held: &[Time]) -> LinkSim {
        let mut sim = self.clone();
        sim.flows.clear();
        let mut own = Vec::new();
        for g in &self.groups {
            g.sources(&mut own);
        }
        for (f, &held) in self.flows.iter().zip(held) {
            let upstream = self
                .groups
                .get(f.group as usize)
                .is_some_and(|g| g.upstream_ports > 0);
            if held == Time::ZERO || !upstream {
                sim.flows.push(f.clone());
                continue;
            }
            let span = BitRate(own[f.source as usize].0).serialization(f.size) + held;
            let parts = f.size.div_ceil(PART).clamp(1, MAX_PARTS);
            for k in 0..parts {
                let size = f.size / parts + u64::from(k < f.size % parts);
                sim.flows.push(LinkFlow {
                    size,
                    start: f.start + span.ps() / parts * k,
                    ..f.clone()
                });
            }
        }
        sim
    }

    /// Whether some message is sent in parts.
    fn is_shaped(&self) -> bool {
        self.flows
            .iter()
            .enumerate()
            .any(|(i, f)| f.message != i as u32)
    }

    /// Each flow's time from its start to its completion at packet level (zero unless
    /// `run`), and its ideal FCT, in its flows' order.
    fn run(&self, scenario: &Scenario, run: bool) -> Result<Vec<(Time, Time)>, String> {
        let MiniTopology {
            topo,
            sources,
            dsts,
        } = self.topology()?;
        let traffic: Vec<Traffic> = self
            .flows
            .iter()
            .map(|f| Traffic::Flow {
                src: sources[f.source as usize],
                dst: dsts[f.dst as usize],
                size: f.size,
                start: Time(f.start),
                sl: f.sl,
            })
            .collect();
        let workload = build(&traffic, scenario.seed);
        let report = packet_report(scenario, topo, &workload, run)?;
        report
            .flows
            .iter()
            .map(|r| match r.finish {
                Some(finish) => Ok((finish - r.start, r.ideal)),
                None if !run => Ok((Time::ZERO, r.ideal)),
                None => Err("a per-link simulation left a message unfinished".to_string()),
            })
            .collect()
    }

    /// Each message's delay beyond its ideal FCT at packet level, in `alone`'s flows'
    /// order: `alone` is this simulation with no message in parts (itself, or what
    /// [`LinkSim::shaped`] was given), whose ideals are the messages'. A message in parts
    /// completes with its last part.
    fn delays(&self, alone: &LinkSim, scenario: &Scenario) -> Result<Vec<Time>, String> {
        let ran = self.run(scenario, true)?;
        let ideals = if self.is_shaped() {
            alone.run(scenario, false)?
        } else {
            ran.clone()
        };
        let mut end: Vec<Option<(u64, Time)>> = vec![None; alone.flows.len()];
        for (f, &(took, _)) in self.flows.iter().zip(&ran) {
            let e = end[f.message as usize].get_or_insert((f.start, Time::ZERO));
            // Parts are listed in order of their starts, the first at the message's.
            e.1 = e.1.max(Time(f.start - e.0) + took);
        }
        Ok(end
            .iter()
            .zip(&ideals)
            .map(|(e, &(_, ideal))| e.map_or(Time::ZERO, |(_, end)| end.saturating_sub(ideal)))
            .collect())
    }
}

/// A held message's part in a shaped simulation, 64 KiB (a choice: small against the
/// messages that are held, large against a packet).
const PART: u64 = 64 << 10;
/// The most parts a held message is sent in.
const MAX_PARTS: u64 = 64;

/// `workload` on `topo` at packet level with the scenario's fabric and settings, to its
/// end if `run` (else as set up: every message's ideal FCT, nothing delivered).
fn packet_report(
    scenario: &Scenario,
    topo: Topology,
    workload: &Workload,
    run: bool,
) -> Result<RunReport, String> {
    Ok(match scenario.fabric {
        FabricKind::Rocev2 => {
            let cfg = rocev2::RoceConfig {
                seed: scenario.seed,
                ..scenario.roce.clone()
            };
            let mut sim = rocev2::Simulation::new(cfg, topo, workload, None)?;
            if run {
                sim.run();
            }
            sim.report()
        }
        FabricKind::Infiniband => {
            let mut sim = infiniband::Simulation::new(scenario.ib.clone(), topo, workload, None)?;
            if run {
                sim.run();
            }
            sim.report()
        }
    })
}

/// Runs the plan's simulations on up to `threads` threads, round by round, and sets each
/// network message's completion in `report` (flow level's) to its start, plus its ideal
/// FCT, plus the largest delay its ports' simulations gave it. After the first round a
/// port is simulated with each message that `bottlenecks` (flow level's hop of most
/// held bytes, by message) says is held before it shaped by the largest delay the
/// ports it crossed before gave it ([`LinkSim::shaped`]); a message held at this port
/// or beyond arrives unshaped, since what holds it there also keeps its upstream ports
/// from queueing (an incast's uplinks). The results do not depend on `threads`.
pub fn apply(
    plan: &Plan,
    scenario: &Scenario,
    bottlenecks: &[Option<usize>],
    threads: usize,
    report: &mut RunReport,
) -> Result<Ran, String> {
    let mut delays: Vec<Vec<Time>> = vec![Vec::new(); plan.ports.len()];
    let mut done: BTreeMap<LinkSim, Vec<Time>> = BTreeMap::new();
    let mut ran = Ran::default();
    for (r, round) in plan.rounds.iter().enumerate() {
        // What held each message before this port, where flow level holds it there.
        let held: Vec<Vec<Time>> = round
            .iter()
            .map(|&k| {
                let port = &plan.ports[k];
                port.upstream
                    .iter()
                    .zip(&port.units)
                    .zip(&port.hops)
                    .map(|((before, &u), &hop)| {
                        // A sprayed part's path is not flow level's, nor its bottleneck.
                        let unit = &plan.units[u as usize];
                        let Some(b) = bottlenecks
                            .get(unit.message as usize)
                            .copied()
                            .flatten()
                            .filter(|&b| b < hop && r > 0 && unit.share == 1)
                        else {
                            return Time::ZERO;
                        };
                        before
                            .iter()
                            .filter(|&&(h, _, _)| h == b)
                            .map(|&(_, j, i)| delays[j][i])
                            .max()
                            .unwrap_or(Time::ZERO)
                    })
                    .collect()
            })
            .collect();
        let sims: Vec<LinkSim> = round
            .iter()
            .zip(&held)
            .map(|(&k, held)| plan.ports[k].sim.shaped(held))
            .collect();
        let mut todo: Vec<(LinkSim, &LinkSim)> = Vec::new();
        for (sim, &k) in sims.iter().zip(round) {
            if !done.contains_key(sim) && !todo.iter().any(|(t, _)| t == sim) {
                todo.push((sim.clone(), &plan.ports[k].sim));
            }
        }
        let results = super::parallel_map(&todo, threads, |(s, alone)| s.delays(alone, scenario));
        for ((sim, _), result) in todo.into_iter().zip(results) {
            ran.sims += 1;
            ran.packets += sim.packets(plan.mtu);
            ran.shaped += usize::from(sim.is_shaped());
            done.insert(sim, result?);
        }
        for (&k, sim) in round.iter().zip(&sims) {
            delays[k] = done[sim].clone();
        }
    }
    let mut extra = vec![Time::ZERO; report.flows.len()];
    for (port, delays) in plan.ports.iter().zip(&delays) {
        for (&u, &d) in port.units.iter().zip(delays) {
            let m = plan.units[u as usize].message as usize;
            extra[m] = extra[m].max(d);
        }
    }
    let mut timed = vec![false; report.flows.len()];
    for unit in &plan.units {
        timed[unit.message as usize] = true;
    }
    for (i, r) in report.flows.iter_mut().enumerate() {
        if !timed[i] {
            continue;
        }
        let finish = r.start + r.ideal + extra[i];
        r.finish = Some(finish);
        r.acked = Some(finish);
    }
    if let Some(end) = report.flows.iter().filter_map(|r| r.finish).max() {
        report.sim_time = end;
    }
    Ok(ran)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A port behind two links into its switch: one from an upstream switch (two
    /// sources), one from a host.
    fn port_sim() -> LinkSim {
        let host = (400_000_000_000, 1_000_000);
        let source = Feed {
            link: host,
            upstream_ports: 0,
            feeds: Vec::new(),
        };
        let flow = |message, group, source, size| LinkFlow {
            message,
            group,
            source,
            dst: 0,
            size,
            start: 5_000_000,
            sl: 0,
        };
        LinkSim {
            port: host,
            from_ports: 8,
            to_ports: 0,
            groups: vec![
                Feed {
                    link: host,
                    upstream_ports: 8,
                    feeds: vec![source.clone(), source.clone()],
                },
                source,
            ],
            dsts: Vec::new(),
            flows: vec![
                flow(0, 0, 0, 1 << 20),
                flow(1, 0, 1, 100 << 10),
                flow(2, 1, 2, 1 << 20),
            ],
        }
    }

    #[test]
    fn a_held_message_comes_in_parts_spread_over_its_serialisation_and_delay() {
        let sim = port_sim();
        let held = Time::from_us(30);
        let shaped = sim.shaped(&[held, Time::ZERO, held]);
        assert!(shaped.is_shaped() && !sim.is_shaped());
        let parts: Vec<&LinkFlow> = shaped.flows.iter().filter(|f| f.message == 0).collect();
        assert_eq!(parts.len() as u64, (1u64 << 20) / PART);
        assert_eq!(parts.iter().map(|f| f.size).sum::<u64>(), 1 << 20);
        let span = BitRate(400_000_000_000).serialization(1 << 20) + held;
        let gap = span.ps() / parts.len() as u64;
        for (k, f) in parts.iter().enumerate() {
            assert_eq!(f.start, 5_000_000 + gap * k as u64);
            assert_eq!((f.group, f.source, f.dst), (0, 0, 0));
        }
        // Not held, or straight from its host (whose own port's simulation shares its
        // link): as it was.
        for m in [1, 2] {
            let same: Vec<&LinkFlow> = shaped.flows.iter().filter(|f| f.message == m).collect();
            assert_eq!(same, vec![&sim.flows[m as usize]]);
        }
    }

    #[test]
    fn a_ports_simulation_holds_its_messages_in_tree_back_to_their_sources() {
        // Hosts 4, 5 and 6 on leaf 1 of a 2-leaf, 2-spine leaf-spine send to host 0:
        // 4 and 5 through spine 0, 6 through spine 1.
        let rate = BitRate::gbps(400);
        let delay = Time::from_ns(25);
        let topo = Topology::leaf_spine(8, 2, 2, rate, rate, delay).unwrap();
        let (leaf0, leaf1, spine0, spine1) = (8, 9, 10, 11);
        let port = |from: u32, to: u32| -> PortId {
            let node = fabricsim_core::units::NodeId(from);
            *topo
                .node_ports(node)
                .iter()
                .find(|&&q| topo.port(topo.port(q).peer).node.0 == to)
                .expect("a link")
        };
        let via = |src: u32, spine: u32| {
            vec![
                topo.host_port(HostId(src)),
                port(leaf1, spine),
                port(spine, leaf0),
                port(leaf0, 0),
            ]
        };
        let paths = [via(4, spine0), via(5, spine0), via(6, spine1)];
        let traffic: Vec<Traffic> = [4, 5, 6]
            .map(|src| Traffic::Flow {
                src: HostId(src),
                dst: HostId(0),
                size: 1 << 20,
                start: Time::ZERO,
                sl: 0,
            })
            .to_vec();
        let w = build(&traffic, 1);
        let units: Vec<Unit> = paths
            .into_iter()
            .enumerate()
            .map(|(m, path)| Unit {
                message: m as u32,
                path,
                first_hop: 0,
                size: 1 << 20,
                share: 1,
            })
            .collect();
        let sim = link_sim(&topo, &w, &units, port(leaf0, 0), &[(0, 3), (1, 3), (2, 3)]);
        let host = (rate.bps(), delay.ps());
        let source = |wire| Feed {
            link: wire,
            upstream_ports: 0,
            feeds: Vec::new(),
        };
        // Spine 0's downlink is fed by leaf 1's uplink, which two sources feed: kept.
        // Spine 1's is fed by an uplink one host feeds at its rate: that uplink cannot
        // queue, so the host comes straight into spine 1, over both delays.
        assert_eq!(
            sim.groups,
            vec![
                Feed {
                    link: host,
                    upstream_ports: 2,
                    feeds: vec![Feed {
                        link: host,
                        upstream_ports: 6,
                        feeds: vec![source(host), source(host)],
                    }],
                },
                Feed {
                    link: host,
                    upstream_ports: 2,
                    feeds: vec![source((rate.bps(), 2 * delay.ps()))],
                },
            ]
        );
        let at: Vec<(u32, u32)> = sim.flows.iter().map(|f| (f.group, f.source)).collect();
        assert_eq!(at, vec![(0, 0), (0, 1), (1, 2)]);
        let mini = sim.topology().unwrap();
        assert_eq!(mini.sources.len(), 3);
        // Leaf 1 twice over (its real 6 ports, padded), a spine of 2 ports per group, the
        // port's leaf of 6: every switch keeps its real port count.
        let switches: Vec<usize> = (0..mini.topo.nodes().len() as u32)
            .map(fabricsim_core::units::NodeId)
            .filter(|&n| matches!(mini.topo.nodes()[n.index()], NodeKind::Switch { .. }))
            .map(|n| mini.topo.node_ports(n).len())
            .collect();
        assert_eq!(switches, vec![6, 2, 6, 2]);
    }

    #[test]
    fn a_sprayed_message_takes_every_candidate_path_up_to_the_most() {
        let rate = BitRate::gbps(400);
        let delay = Time::from_ns(25);
        // A 4-spine leaf-spine: one path per spine, leaf to leaf.
        let topo = Topology::leaf_spine(8, 2, 4, rate, rate, delay).unwrap();
        let routes = Routes::minimal(&topo).unwrap();
        let paths = sprayed_paths(&topo, &routes, HostId(0), HostId(7));
        assert_eq!(paths.len(), 4);
        let spines: BTreeMap<PortId, ()> = paths.iter().map(|p| (p[1], ())).collect();
        assert_eq!(spines.len(), 4, "each through its own spine");
        for p in &paths {
            assert_eq!(p.len(), 4);
            assert_eq!(p[0], topo.host_port(HostId(0)));
            assert_eq!(topo.port(p[3]).peer, topo.host_port(HostId(7)));
        }
        // A k=8 fat-tree across pods: 4 aggregation switches times 4 cores, all distinct.
        let topo = Topology::fat_tree(8, rate, delay).unwrap();
        let routes = Routes::minimal(&topo).unwrap();
        let paths = sprayed_paths(&topo, &routes, HostId(0), HostId(127));
        assert_eq!(paths.len(), MAX_SPRAYED_PATHS);
        let distinct: BTreeMap<Vec<PortId>, ()> = paths.iter().map(|p| (p.clone(), ())).collect();
        assert_eq!(distinct.len(), 16);
        // Within a leaf there is one path.
        assert_eq!(sprayed_paths(&topo, &routes, HostId(0), HostId(1)).len(), 1);
    }

    #[test]
    fn ports_are_simulated_after_the_ports_their_messages_cross_before() {
        let port = |upstream: Vec<Vec<(usize, usize, usize)>>| PortSim {
            sim: port_sim(),
            units: vec![0; upstream.len()],
            hops: vec![0; upstream.len()],
            upstream,
        };
        // 0 <- 2 <- 1, 3 alone; 4 and 5 each before the other (no order): the first round.
        let ports = vec![
            port(vec![vec![(1, 2, 0)]]),
            port(vec![vec![]]),
            port(vec![vec![(0, 1, 0)], vec![]]),
            port(vec![vec![]]),
            port(vec![vec![(1, 5, 0)]]),
            port(vec![vec![(1, 4, 0)]]),
        ];
        assert_eq!(rounds(&ports), vec![vec![1, 3, 4, 5], vec![2], vec![0]]);
    }
}
