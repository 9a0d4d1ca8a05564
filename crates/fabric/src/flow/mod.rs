//! Flow level: the same workloads, topologies and reports as the packet-level fabrics,
//! with messages as fluid flows instead of packets.
//!
//! - Every network message crossing the fabric is a flow over the ports its packets
//!   would take (the static d-mod-k route, ECMP's hash of the same 5-tuple as the RoCEv2
//!   model, or for adaptive routing the least-loaded candidate at each hop when it
//!   starts). Its size is its wire bytes: every packet's headers, as the wire layer
//!   frames them.
//! - Flows share each port's line rate max-min fairly (water-filling). A flow starting
//!   or draining re-shares only the ports its connected component of flows touches,
//!   once per instant however many changed then.
//! - A flow's completion is when its bytes have drained at its fair rate, plus its path's
//!   fixed latency: the ideal completion time less its serialisation at the bottleneck,
//!   so a flow alone on the fabric completes exactly at its ideal time.
//! - A compact collective edge ([`Pipeline`]) stands for its pieces: its wait is walked
//!   along the edges that feed it (`Workload::feeds`), each at its own step time
//!   (NVLink or network), so the critical path is the packet models' (a ring edge waits
//!   on the steps of the edges before it round the ring; a tree edge enters once its
//!   first piece is in and ends no earlier than its last can have come in and gone on).
//!   Compact edges inside a server share each GPU's NVLink fairly, as flows.
//! - Other transfers inside servers (NVLink, data-path stages) and dependencies go
//!   through the same [`Lifecycle`] as the packet-level fabrics.
//!
//! - On RoCEv2, a port whose flows' senders overdrive it holds a queue: a message
//!   arriving there waits behind it (FIFO, where max-min sharing alone would serve it at
//!   once), by what packet level measured on an incast probe with the scenario's own
//!   settings ([`FlowConfig::queue_delay`]). InfiniBand's queues are not modelled here.
//!
//! - On RoCEv2 with DCQCN, closed-loop traffic (collectives, training) runs DCQCN as a
//!   fluid instead ([`dcqcn`]): queues, RED's marks and CNPs, each connection's reaction
//!   point.
//!
//! Nothing drops or pauses here: the lossless fabrics' fair share, and DCQCN's rates, are
//! what flow level models. ACKs, credit updates and the CNPs' way back (under 1 % of the
//! reverse links) are left out.

mod config;
mod dcqcn;
mod paths;
mod pipeline;
mod ring_progress;
mod sharing;

use crate::driver::BuildError;
pub use config::{FlowConfig, FlowRouting, FlowWire, FluidDcqcn, Onset, Sharing, QUEUE_QUANTILES};
pub use dcqcn::TICK as DCQCN_TICK;
pub use paths::NetworkPath;
use pipeline::PipelinePlan;

use crate::driver::{self, Lifecycle, LifecycleEvent, MessageFabric, Progress, RunState};
use crate::report::{PortResult, RunReport};
use crate::workload::datapath::StagedMessage;
use crate::workload::{Message, Pipeline, QueuePair, Workload};
use fabricsim_core::engine::EventQueue;
use fabricsim_core::topology::{NodeKind, Routes, Topology};
use fabricsim_core::units::{PortId, Time};
use std::collections::HashMap;

/// One message at flow level.
#[derive(Clone, Debug)]
pub(crate) struct Flow {
    msg: Message,
    life: Progress,
    pipeline: Option<Pipeline>,
    /// Its data-path stages (a compact edge at flow level), streamed beside the network.
    staged: Option<StagedMessage>,
    /// The queue pair it is sent on (ECMP hashes its UDP source port).
    qp: QueuePair,
    /// The links it crosses, host port first (planned when the model is built), each
    /// once.
    path: Vec<u32>,
    /// The fraction of its bytes each link of `path` carries (spread over several paths:
    /// its QPs' or spraying's); empty when every link carries them all.
    weights: Vec<f64>,
    /// Wire bytes not yet sent, as of `since`.
    remaining: f64,
    /// Its fair share, bytes per picosecond.
    rate: f64,
    since: Time,
    /// When it was posted to its sender.
    posted: Time,
    /// A compact edge's pipeline, planned at nominal rates (see [`PipelinePlan`]).
    plan: PipelinePlan,
    /// A compact chain or tree edge's completion, held until its feeds complete.
    held: Option<Time>,
    /// A compact edge's piece's time from its posting to its completion: its step at
    /// nominal rates, slower by what its drain showed.
    piece_time: Time,
    /// What its sender could send now, bits per second, as its links count it: its NIC's
    /// line rate, or for a ring's edge at most the ring's pace (it forwards what reaches
    /// it).
    demand_bps: u64,
    /// The queues it met on arriving at its ports (RoCEv2's measured queueing, see
    /// [`FlowConfig::queue_delay`]): its completion comes that much later.
    queued: Time,
    /// A compact ring edge: the share of the flows it last met on its links that send
    /// greedily (not edges of rings; see [`PipelinePlan::wait`]), 1 until it meets any.
    greedy: f64,
    /// A compact ring edge: how many edges of rings (itself among them) it last met on
    /// its most crowded link, 1 until it meets any (see [`PipelinePlan::wait`]).
    ring_crowd: u32,
    /// DCQCN's reaction point of its connection once a CNP has reached it (before, the
    /// sender runs at line rate), handed on along the connection ([`dcqcn`]).
    rp: Option<Box<fabricsim_core::proto::dcqcn::Dcqcn>>,
    /// The reaction point's rate when last stepped, bytes per picosecond.
    cap_seen: f64,
    /// What its sender sends now (its reaction point's rate, its ring's pace, its NIC's
    /// share), bytes per picosecond, as the last re-share saw it.
    sent: f64,
    /// Whether a marked packet reached its receiver since its last CNP could go, and
    /// when that CNP went.
    marked: bool,
    last_cnp: Option<Time>,
    /// Where on its path the water-filling fixed its rate, or [`NO_HOP`]: at its
    /// reaction point's rate.
    bottleneck: u32,
    /// Whether the fluid's step lists it.
    cc_listed: bool,
    /// A bandwidth-bound compact ring edge a step ahead of the edge into its sender: that
    /// edge's rate, which it may not exceed ([`ring_progress`]); else infinite.
    ring_cap: f64,
    /// Whether the last re-share found it so bound.
    ring_bound: bool,
}

driver::tracked_by_fields!(Flow);

impl Flow {
    /// The fraction of its bytes the `k`-th link of its path carries.
    fn weight(&self, k: usize) -> f64 {
        self.weights.get(k).copied().unwrap_or(1.0)
    }
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum Event {
    Post {
        flow: u32,
    },
    LocalDone {
        flow: u32,
    },
    /// The flow's last byte left its sender (keyed by the flow: each re-share that
    /// changes its rate moves it).
    Drained {
        flow: u32,
    },
    /// The flow's last byte reached its receiver.
    Finished {
        flow: u32,
    },
    /// A compact ring edge's lead on the edge into its sender reaches a step: it is
    /// bound to that edge's rate ([`ring_progress`]).
    Bound {
        flow: u32,
    },
    /// A compact chain or tree edge's first piece has reached its sender: it starts.
    Enter {
        flow: u32,
    },
    /// Re-share the ports touched since the last re-share.
    Reshare,
    /// Step DCQCN's fluid ([`dcqcn`]).
    FluidStep,
}

impl LifecycleEvent for Event {
    fn post(flow: u32) -> Self {
        Event::Post { flow }
    }
    fn local_done(flow: u32) -> Self {
        Event::LocalDone { flow }
    }
}

/// An egress port, or a trunk of ports (adaptive routing), as flows share it.
#[derive(Clone, Debug, Default)]
struct Link {
    /// A trunk's ports (empty for a port): its bytes are spread over them.
    members: Vec<u32>,
    /// A data-path resource (a PCIe direction, a CPU), not a network port: no
    /// congestion control acts on it.
    stage: bool,
    /// Line rate, bytes per picosecond.
    capacity: f64,
    /// A port's or trunk's line rate, bits per second (0 for a data-path resource or
    /// NVLink).
    line_bps: u64,
    /// What the senders of the flows crossing it could send, bits per second (a ring's
    /// edges at most at their ring's pace).
    demand_bps: u64,
    /// What they could send at their NICs' line rates, as they do when they start:
    /// what congestion control's first cuts answer.
    line_demand_bps: u64,
    /// The flows' wire bytes, whole.
    flow_bytes: u64,
    /// The wire bytes its flows' senders may send at once: a message's whole, a compact
    /// edge's piece (the rest follows as its feeds deliver).
    burst_bytes: u64,
    /// The flows crossing it now, in the order they started.
    flows: Vec<u32>,
    /// Compact chain or tree edges across it released together by their feed's
    /// completion, while their completions are set: their last pieces cross it together.
    released: u32,
    tx_bytes: u64,
    tx_packets: u64,
    /// Water-filling scratch: capacity left, and the weight of the flows not yet fixed
    /// (the fractions of their bytes they put here).
    left: f64,
    open: f64,
    /// The re-share that last visited it.
    mark: u32,
    /// Its last share (see [`Link::shared`]) with the demands and bytes it was for.
    share_memo: Option<((u64, u64, u64, u64), f64)>,
    /// Since when its flows' senders have overdriven it while it runs full (a load above
    /// 1 and their rates summing to its share): its queue has been building since then.
    overloaded_since: Option<Time>,
    /// A host's egress: its NIC serves its flows in turn, holding no queue ([`dcqcn`]).
    host_egress: bool,
    /// DCQCN's fluid queue, bytes, and what its flows' senders feed it, bytes per
    /// picosecond ([`dcqcn`]); whether the fluid's step lists it.
    queue: f64,
    offered: f64,
    cc_hot: bool,
}

impl Link {
    /// What its flows' senders could send, in units of its line rate (0 off the network).
    fn load(&self) -> f64 {
        if self.line_bps == 0 {
            return 0.0;
        }
        self.demand_bps as f64 / self.line_bps as f64
    }

    /// What its flows' senders could send at their line rates, in units of its own.
    fn line_load(&self) -> f64 {
        if self.line_bps == 0 {
            return 0.0;
        }
        self.line_demand_bps as f64 / self.line_bps as f64
    }

    /// The share of its line rate congestion control leaves it (see [`Sharing`]): its
    /// flows' whole bytes at line rate are what the transient is weighed against; the
    /// transient answers the load at line rate, the steady share the load now.
    fn share(&self, cfg: &FlowConfig) -> f64 {
        if self.stage || cfg.dcqcn.is_some() || !self.can_congest(cfg) {
            return 1.0;
        }
        let fair = self.flow_bytes as f64 / self.capacity;
        cfg.sharing_share(self.load(), self.line_load(), fair)
    }

    /// [`Self::share`], kept while its demands and flows' bytes stand: every re-share
    /// asks it of every port in its component, and interpolating it takes logarithms.
    fn shared(&mut self, cfg: &FlowConfig) -> f64 {
        let inputs = (
            self.demand_bps,
            self.line_demand_bps,
            self.flow_bytes,
            self.burst_bytes,
        );
        match self.share_memo {
            Some((of, share)) if of == inputs => share,
            _ => {
                let share = self.share(cfg);
                self.share_memo = Some((inputs, share));
                share
            }
        }
    }

    /// Whether its flows can build the queue at which congestion control acts
    /// ([`FlowConfig::onset`]; always without one): senders starting at their line rates
    /// fill it at `line_load - 1` times its rate while their bursts last, so its queue
    /// peaks near `1 - 1 / line_load` of their bursts' bytes.
    fn can_congest(&self, cfg: &FlowConfig) -> bool {
        let Some(onset) = cfg.onset else {
            return true;
        };
        let load = self.line_load();
        load > 1.0 && (1.0 - 1.0 / load) * self.burst_bytes as f64 >= onset.on(self.line_bps)
    }

    /// The queueing delay a message arriving now meets here, with its `draw` (see
    /// [`FlowConfig::queue_delay`]).
    fn queue_delay(&self, cfg: &FlowConfig, now: Time, draw: u64) -> Time {
        match self.overloaded_since {
            Some(since) if !self.stage => cfg.queue_delay(self.load(), now - since, draw),
            _ => Time::ZERO,
        }
    }
}

/// The flow-level simulation of one workload on one topology.
pub struct Simulation {
    cfg: FlowConfig,
    topo: Topology,
    routes: Routes,
    state: RunState<Event, Flow, ()>,
    links: Vec<Link>,
    /// Ports touched since the last re-share.
    dirty: Vec<u32>,
    reshare_due: bool,
    /// Visit marks of the current re-share, per flow.
    flow_mark: Vec<u32>,
    round: u32,
    /// Links up a SHARP aggregation tree (its switch tiers).
    sharp_depth: u32,
    /// Adaptive routing: the trunk link of each set of ports, and the trunks between
    /// each (source switch, destination switch). Looked up, never iterated.
    trunks: HashMap<Vec<u32>, u32>,
    trunk_paths: HashMap<(u32, u32), Vec<u32>>,
    /// The link standing for each data-path resource. Looked up, never iterated.
    resources: HashMap<u32, u32>,
    /// The link standing for each GPU's NVLink out and in. Looked up, never iterated.
    nvlinks: HashMap<(u32, bool), u32>,
    /// The highest load a port (or trunk) carried: what its flows' senders could send,
    /// in units of its line rate (see [`Sharing`]).
    peak_load: f64,
    /// A compact chain or tree edge's feeds (`Workload::feeds`), and each edge's chain
    /// or tree edges it feeds.
    feeds: Vec<Vec<u32>>,
    fed: Vec<Vec<u32>>,
    /// Each compact ring edge's ring (an index into `rings`), else [`NO_RING`]; each
    /// ring's edges.
    ring_of: Vec<u32>,
    rings: Vec<Vec<u32>>,
    /// Each compact ring edge's upstream edge (the edge into its sender, the next of its
    /// ring's members), else [`NO_RING`].
    ring_pred: Vec<u32>,
    /// The re-share that last took in each ring's edges.
    ring_round: Vec<u32>,
    /// Each ring's edges not yet posted, and those posted and held until they are (see
    /// `Simulation::post_after_feeds`).
    ring_unposted: Vec<u32>,
    ring_held: Vec<Vec<u32>>,
    /// DCQCN's fluid ([`dcqcn`]).
    fluid: dcqcn::FluidState,
    /// Once asked for ([`Simulation::track_bottlenecks`]): per flow, the wire bytes it
    /// sent while fixed at each hop of its path.
    bottleneck_bytes: Option<Vec<Vec<f64>>>,
}

/// No ring: a flow that is not a compact ring's edge.
const NO_RING: u32 = u32::MAX;

/// No hop of a path: a flow held to its reaction point's rate.
const NO_HOP: u32 = u32::MAX;

impl Simulation {
    /// Builds the model; errors if some host cannot reach another.
    pub fn new(
        cfg: FlowConfig,
        topo: Topology,
        workload: &Workload,
        stop_at: Option<Time>,
    ) -> Result<Self, BuildError> {
        let routes = Routes::minimal(&topo)?;
        let mut pipelined = workload.pipelined.iter().peekable();
        let mut staged = workload.staged.iter().peekable();
        let flows: Vec<Flow> = workload
            .messages
            .iter()
            .enumerate()
            .map(|(i, m)| Flow {
                msg: *m,
                life: Progress::new(m.start, workload.follows[i]),
                pipeline: pipelined
                    .next_if(|(j, _)| *j as usize == i)
                    .map(|(_, p)| *p),
                staged: staged.next_if(|st| st.msg as usize == i).cloned(),
                qp: workload.qp[i],
                path: Vec::new(),
                weights: Vec::new(),
                remaining: 0.0,
                rate: 0.0,
                since: Time::ZERO,
                posted: Time::ZERO,
                plan: PipelinePlan::default(),
                held: None,
                piece_time: Time::ZERO,
                queued: Time::ZERO,
                demand_bps: 0,
                greedy: 1.0,
                ring_crowd: 1,
                rp: None,
                cap_seen: f64::INFINITY,
                sent: 0.0,
                marked: false,
                last_cnp: None,
                bottleneck: NO_HOP,
                cc_listed: false,
                ring_cap: f64::INFINITY,
                ring_bound: false,
            })
            .collect();
        let links = topo
            .ports()
            .iter()
            .map(|p| Link {
                capacity: p.rate.bps() as f64 / 8e12,
                line_bps: p.rate.bps(),
                host_egress: matches!(topo.nodes()[p.node.index()], NodeKind::Host(_)),
                ..Link::default()
            })
            .collect();
        let mut lifecycle = Lifecycle::new(workload, &topo, cfg.tx_latency);
        let mut queue = EventQueue::new();
        driver::schedule_posts(&mut queue, lifecycle.initial_posts(&workload.messages));
        let sharp_depth = topo
            .nodes()
            .iter()
            .filter_map(|k| match k {
                NodeKind::Switch { tier } => Some(*tier as u32 + 1),
                NodeKind::Host(_) => None,
            })
            .max()
            .unwrap_or(1);
        let mut sim = Simulation {
            cfg,
            routes,
            flow_mark: vec![0; flows.len()],
            state: RunState::new(queue, flows, lifecycle, stop_at, None),
            links,
            dirty: Vec::new(),
            reshare_due: false,
            round: 0,
            sharp_depth,
            trunks: HashMap::new(),
            trunk_paths: HashMap::new(),
            resources: HashMap::new(),
            nvlinks: HashMap::new(),
            peak_load: 0.0,
            feeds: Vec::new(),
            fed: Vec::new(),
            ring_of: Vec::new(),
            rings: Vec::new(),
            ring_pred: Vec::new(),
            ring_round: Vec::new(),
            ring_unposted: Vec::new(),
            ring_held: Vec::new(),
            fluid: dcqcn::FluidState::default(),
            bottleneck_bytes: None,
            topo,
        };
        sim.plan_paths()?;
        sim.plan_pipelines(&workload.feeds);
        Ok(sim)
    }

    /// Counts, from now on, the bytes each flow sends while fixed at each hop of its
    /// path (see [`Simulation::bottleneck_hops`]).
    pub fn track_bottlenecks(&mut self) {
        self.bottleneck_bytes = Some(vec![Vec::new(); self.state.flows.len()]);
    }

    /// Per message: the hop of its path (host port 0) at which the water-filling held
    /// it for most of its bytes, None if never held at one; empty if not tracked.
    pub fn bottleneck_hops(&self) -> Vec<Option<usize>> {
        let Some(bytes) = &self.bottleneck_bytes else {
            return Vec::new();
        };
        bytes
            .iter()
            .map(|hops| {
                let most = hops.iter().copied().fold(0.0, f64::max);
                (most > 0.0).then(|| hops.iter().position(|&b| b == most).expect("the most"))
            })
            .collect()
    }

    /// Counts `bytes` that `flow` sent at its current bottleneck, if tracked.
    fn note_sent(&mut self, flow: u32, bytes: f64) {
        let hop = self.state.flows[flow as usize].bottleneck as usize;
        if let Some(t) = &mut self.bottleneck_bytes {
            let hops = &mut t[flow as usize];
            if hop != NO_HOP as usize && bytes > 0.0 {
                if hops.len() <= hop {
                    hops.resize(hop + 1, 0.0);
                }
                hops[hop] += bytes;
            }
        }
    }

    /// What it takes from the fabric's configuration.
    pub fn config(&self) -> &FlowConfig {
        &self.cfg
    }

    /// Events handled so far.
    pub fn events(&self) -> u64 {
        self.state.queue.popped()
    }

    /// How a port under `load` is shared (see [`FlowConfig::sharing`]); None without a
    /// sharing correction or below a load of 1.
    pub fn sharing_at(&self, load: f64) -> Option<Sharing> {
        self.cfg.sharing_at(load)
    }

    /// Sets how congestion control shares an overloaded port (see
    /// [`FlowConfig::sharing`]), before the run starts.
    pub fn set_sharing(&mut self, sharing: Vec<Sharing>) {
        self.cfg.sharing = sharing;
    }

    /// How congestion control shares an overloaded port, by load (empty: the line rate).
    pub fn sharing(&self) -> &[Sharing] {
        &self.cfg.sharing
    }

    /// The highest load a port carried, in units of its line rate.
    pub fn peak_load(&self) -> f64 {
        self.peak_load
    }

    /// What a flow's sender can send, bits per second: its first port's line rate (0 for
    /// a flow inside a server, which loads no network port).
    pub(super) fn sender_bps(&self, flow: u32) -> u64 {
        match self.state.flows[flow as usize].path.first() {
            Some(&p) if (p as usize) < self.topo.ports().len() => {
                self.topo.port(PortId(p)).rate.bps()
            }
            _ => 0,
        }
    }

    /// The simulated clock.
    pub fn now(&self) -> Time {
        self.state.queue.now()
    }

    /// Of `f`'s `wire` bytes ([`Self::flow_wire`]), those its sender may send at once (see
    /// [`Link::burst_bytes`]): a compact edge's piece, but a whole ring edge where its ring
    /// is bound by bandwidth rather than latency (its sender then always has the next
    /// pieces in hand).
    fn burst_wire(f: &Flow, wire: u64) -> u64 {
        match Self::piecewise(f) {
            Some(p) => wire / p.pieces_on_wire().max(1),
            None => wire,
        }
    }

    /// A compact edge whose sender sends one piece at a time (a latency-bound ring's
    /// edge, or a chain's), its pipeline; None for a message or an edge whose sender has
    /// its next pieces in hand.
    fn piecewise(f: &Flow) -> Option<Pipeline> {
        f.pipeline
            .filter(|&p| f.plan.latency_bound(p) || matches!(p, Pipeline::Chain { .. }))
    }

    /// A flow's link bytes: its message's packets, or a compact edge's pieces' packets.
    fn flow_wire(&self, f: &Flow) -> u64 {
        if Lifecycle::is_local(&self.topo, &f.msg) {
            return f.msg.size;
        }
        match f.pipeline {
            Some(p) => {
                let pieces = p.pieces_on_wire().max(1);
                pieces * self.cfg.wire_bytes(f.msg.size / pieces)
            }
            None => self.cfg.wire_bytes(f.msg.size),
        }
    }

    /// The flow's last byte left: it leaves its ports, its connection's next message
    /// may post, and it completes a path latency (and its pipeline's steps) later.
    fn drained(&mut self, flow: u32) {
        let now = self.state.queue.now();
        self.touch(flow);
        let (m, path, pipeline, posted) = {
            let f = &self.state.flows[flow as usize];
            (f.msg, f.path.clone(), f.pipeline, f.posted)
        };
        let packets = match pipeline {
            Some(p) => p.pieces_on_wire(),
            None => 1,
        };
        let piece = m.size / packets;
        let last = self.state.flows[flow as usize].remaining;
        self.note_sent(flow, last);
        let wire = self.flow_wire(&self.state.flows[flow as usize]);
        let burst = Self::burst_wire(&self.state.flows[flow as usize], wire);
        let demand = self.state.flows[flow as usize].demand_bps;
        let sender = self.sender_bps(flow);
        let packets = packets * piece.div_ceil(self.cfg.mtu as u64).max(1);
        for (k, &l) in path.iter().enumerate() {
            let w = self.state.flows[flow as usize].weight(k);
            let link = &mut self.links[l as usize];
            link.flows.retain(|&f| f != flow);
            link.demand_bps -= part(demand, w);
            link.line_demand_bps -= part(sender, w);
            link.flow_bytes -= part(wire, w);
            link.burst_bytes -= part(burst, w);
            link.tx_bytes += part(wire, w);
            link.tx_packets += part(packets, w);
        }
        // The first chunk passes every data-path stage, each with its start cost, before
        // the stream behind it fills them.
        let fill = self.state.flows[flow as usize]
            .staged
            .as_ref()
            .map(|st| {
                st.stages
                    .iter()
                    .map(|l| l.latency + l.rate.serialization(st.chunk.min(m.size)))
                    .fold(Time::ZERO, |a, b| a + b)
            })
            .unwrap_or(Time::ZERO);
        let f = &mut self.state.flows[flow as usize];
        let plan = f.plan;
        f.remaining = 0.0;
        f.life.sent_bytes = m.size;
        f.life.injected = true;
        let successor = f.life.successor.take();
        let drain = now - posted;
        if let Some(p) = pipeline {
            f.piece_time = plan.piece_time(p, drain);
        }
        let done = fill
            + self.state.flows[flow as usize].queued
            + match pipeline {
                None => now + self.lead(&m, &path),
                Some(p) => {
                    let piece_msg = Message { size: piece, ..m };
                    let f = &self.state.flows[flow as usize];
                    now + self.lead(&piece_msg, &path) + plan.wait(p, drain, f.greedy, f.ring_crowd)
                }
            };
        self.complete(flow, done);
        if let Some(next) = successor {
            self.post(next);
        }
    }

    fn finished(&mut self, flow: u32) {
        let now = self.state.queue.now();
        let f = &mut self.state.flows[flow as usize];
        f.life.finish = Some(now);
        f.life.acked = Some(now);
        f.life.delivered_bytes = f.msg.size;
        self.state.lifecycle.completed += 1;
        self.release_dependents(flow, now);
    }

    /// Everything measured, for the experiment layer. Flow level has no pauses or drops
    /// to report, nor a packet queue's peak; DCQCN's fluid gives its marks (expected) and
    /// CNPs.
    pub fn report(&self) -> RunReport {
        let mut ports: Vec<PortResult> = (0..self.topo.ports().len())
            .map(|i| PortResult {
                tx_bytes: self.links[i].tx_bytes,
                tx_packets: self.links[i].tx_packets,
                ..PortResult::new(&self.topo, PortId(i as u32))
            })
            .collect();
        // A trunk's bytes, spread evenly over its ports (the first ones take the rest).
        for trunk in self.links[ports.len()..]
            .iter()
            .filter(|l| !l.members.is_empty())
        {
            let n = trunk.members.len() as u64;
            for (k, &p) in trunk.members.iter().enumerate() {
                let r = &mut ports[p as usize];
                r.tx_bytes += trunk.tx_bytes / n + u64::from((k as u64) < trunk.tx_bytes % n);
                r.tx_packets += trunk.tx_packets / n + u64::from((k as u64) < trunk.tx_packets % n);
            }
        }
        let mut report = self.state.report(ports, |m| self.ideal_fct(m));
        (report.congestion_marks, report.congestion_notifications) = self.fluid_counts();
        for (r, f) in report.flows.iter_mut().zip(&self.state.flows) {
            if let Some(p) = f.pipeline {
                r.pieces = p.pieces_on_wire().max(1);
                r.piece_fct = r.finish.map(|_| f.piece_time);
            }
        }
        report
    }
}

/// `w` of `amount` (a flow's fraction on one of its links), the same every time it is
/// asked, so what is added on entering is what is taken away on leaving.
pub(super) fn part(amount: u64, w: f64) -> u64 {
    if w == 1.0 {
        amount
    } else {
        (amount as f64 * w).round() as u64
    }
}

/// Which quantile of a port's measured queue a flow meets at its `hop`: a fixed mix of
/// the two, so every run draws alike.
fn queue_draw(flow: u32, hop: usize) -> u64 {
    fabricsim_core::proto::ecn::splitmix64((flow as u64) << 8 | hop as u64)
}

impl MessageFabric for Simulation {
    type Event = Event;
    type Flow = Flow;
    type Capture = ();

    fn state(&self) -> &RunState<Event, Flow, ()> {
        &self.state
    }
    fn state_mut(&mut self) -> &mut RunState<Event, Flow, ()> {
        &mut self.state
    }
    fn topology(&self) -> &Topology {
        &self.topo
    }

    fn handle_next(&mut self) {
        let Some((_, event)) = self.state.next_event() else {
            return;
        };
        match event {
            Event::Post { flow } => self.post_after_feeds(flow),
            Event::Enter { flow } => self.post(flow),
            Event::LocalDone { flow } => {
                self.local_done(flow);
                self.release_held(flow);
            }
            Event::Drained { flow } => self.drained(flow),
            Event::Finished { flow } => {
                self.finished(flow);
                self.release_held(flow);
            }
            Event::Reshare => self.reshare(),
            Event::FluidStep => self.fluid_step(),
            Event::Bound { flow } => self.touch(flow),
        }
    }

    fn inherit_connection(&mut self, prev: u32, next: u32) {
        self.state.flows[prev as usize].life.handed_to = Some(next);
        self.hand_on_rate(prev, next);
    }

    /// The message becomes a flow on its path, shared at the next re-share.
    fn enqueue(&mut self, flow: u32) {
        let sender = self.sender_bps(flow);
        self.state.flows[flow as usize].demand_bps = sender;
        let path = std::mem::take(&mut self.state.flows[flow as usize].path);
        let wire = self.flow_wire(&self.state.flows[flow as usize]);
        let burst = Self::burst_wire(&self.state.flows[flow as usize], wire);
        let now = self.state.queue.now();
        let mut queued = Time::ZERO;
        for (hop, &l) in path.iter().enumerate() {
            let w = self.state.flows[flow as usize].weight(hop);
            let link = &mut self.links[l as usize];
            let delay = link.queue_delay(&self.cfg, now, queue_draw(flow, hop));
            queued += Time((delay.ps() as f64 * w) as u64);
            link.flows.push(flow);
            link.demand_bps += part(sender, w);
            link.line_demand_bps += part(sender, w);
            link.flow_bytes += part(wire, w);
            link.burst_bytes += part(burst, w);
            if !link.stage {
                self.peak_load = self.peak_load.max(link.load());
            }
        }
        let f = &mut self.state.flows[flow as usize];
        f.remaining = wire as f64;
        f.path = path;
        f.since = now;
        f.posted = now;
        f.rate = 0.0;
        f.queued = queued;
        self.touch(flow);
    }

    /// A compact edge inside a server shares its GPUs' NVLink as a flow; any other
    /// transfer inside a server takes its turn, as on the packet-level fabrics.
    fn post_local(&mut self, flow: u32) {
        if !self.state.flows[flow as usize].path.is_empty() {
            return self.enqueue(flow);
        }
        // A plain message: compact edges inside a server have NVLink links (`plan_paths`).
        let s = &mut self.state;
        let now = s.queue.now();
        let (done, next) = s.lifecycle.start_local(&mut s.flows, flow, now);
        s.queue.schedule(done, Event::LocalDone { flow });
        if let Some(next) = next {
            self.post(next);
        }
    }
}
