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
//! Nothing drops, pauses or marks here: the lossless fabrics' fair share is what flow
//! level models. ACKs, credit updates and CNPs (under 1 % of the reverse links) are left
//! out.

use crate::driver::{self, Lifecycle, LifecycleEvent, MessageFabric, Progress, RunState};
use crate::report::{PortResult, RunReport};
use crate::workload::datapath::StagedMessage;
use crate::workload::{Local, Message, Pipeline, Workload};
use fabricsim_core::engine::EventQueue;
use fabricsim_core::topology::{NodeKind, Routes, Topology};
use fabricsim_core::units::{HostId, PortId, Time};
use fabricsim_core::wire::{ib, roce};
use std::collections::{BinaryHeap, HashMap};

/// Which fabric's packets the flows stand for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlowWire {
    Infiniband,
    Rocev2(roce::IpVersion),
}

/// How a flow's path is chosen at each switch (a compact collective edge of many pieces
/// under ECMP spreads as on a trunk: each piece is its own message with its own hash).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlowRouting {
    /// The d-mod-k static route.
    Static,
    /// InfiniBand adaptive routing, which the packet model does per packet, as perfect
    /// balance: at each hop a flow crosses the trunk of every candidate port of every
    /// switch its packets may reach there, shared as one link of their summed rate.
    Adaptive,
    /// RoCEv2's ECMP hash of the flow's 5-tuple, seeded as the packet model seeds it.
    Ecmp { seed: u64 },
}

/// What flow level takes from the fabric's configuration.
#[derive(Clone, Debug)]
pub struct FlowConfig {
    pub wire: FlowWire,
    pub mtu: u32,
    pub tx_latency: Time,
    pub rx_latency: Time,
    pub switch_latency: Time,
    pub routing: FlowRouting,
    /// The share of its line rate a port keeps when N flows cross it, as `(N, share)`
    /// points in increasing N (linear in log2 N between them, the last point's share
    /// beyond it); empty: the whole line rate. The experiment layer measures it at packet
    /// level (RoCEv2's congestion control cutting rates below the fair share).
    pub sharing: Vec<(u32, f64)>,
}

impl FlowConfig {
    /// The share of the line rate a port crossed by `n` flows keeps.
    fn sharing_share(&self, n: usize) -> f64 {
        let n = n as f64;
        let Some(&(first, _)) = self.sharing.first() else {
            return 1.0;
        };
        if n < first as f64 {
            return 1.0;
        }
        for w in self.sharing.windows(2) {
            let ((a, ea), (b, eb)) = (w[0], w[1]);
            if n <= b as f64 {
                let x = (n.log2() - (a as f64).log2()) / ((b as f64).log2() - (a as f64).log2());
                return ea + (eb - ea) * x;
            }
        }
        self.sharing.last().expect("not empty").1
    }
}

impl FlowConfig {
    /// A packet's link bytes.
    fn frame_len(&self, payload: u32, first: bool) -> u64 {
        match self.wire {
            FlowWire::Infiniband => ib::write_packet_len(payload, first) as u64,
            FlowWire::Rocev2(ip) => roce::write_frame_len(ip, payload, first) as u64,
        }
    }

    /// A message's link bytes: its packets, each with its headers.
    pub fn wire_bytes(&self, size: u64) -> u64 {
        let mtu = self.mtu as u64;
        let packets = size.div_ceil(mtu).max(1);
        let last = size - (packets - 1) * mtu;
        self.frame_len(if packets == 1 { last as u32 } else { self.mtu }, true)
            + self.frame_len(self.mtu, false) * packets.saturating_sub(2)
            + if packets > 1 {
                self.frame_len(last as u32, false)
            } else {
                0
            }
    }
}

/// One message at flow level.
#[derive(Clone, Debug)]
pub(crate) struct Flow {
    msg: Message,
    life: Progress,
    pipeline: Option<Pipeline>,
    /// Its data-path stages (a compact edge at flow level), streamed beside the network.
    staged: Option<StagedMessage>,
    /// The links it crosses, host port first (planned when the model is built).
    path: Vec<u32>,
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
    /// Bumped at every re-share: a `Drained` event of an older epoch is stale.
    epoch: u32,
}

driver::tracked_by_fields!(Flow);

#[derive(Clone, Copy, Debug)]
pub(crate) enum Event {
    Post {
        flow: u32,
    },
    LocalDone {
        flow: u32,
    },
    /// The flow's last byte left its sender, if its epoch is still current.
    Drained {
        flow: u32,
        epoch: u32,
    },
    /// The flow's last byte reached its receiver.
    Finished {
        flow: u32,
    },
    /// A compact chain or tree edge's first piece has reached its sender: it starts.
    Enter {
        flow: u32,
    },
    /// Re-share the ports touched since the last re-share.
    Reshare,
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
    /// The flows crossing it now, in the order they started.
    flows: Vec<u32>,
    /// Compact chain or tree edges across it released together by their feed's
    /// completion, while their completions are set: their last pieces cross it together.
    released: u32,
    tx_bytes: u64,
    tx_packets: u64,
    /// Water-filling scratch: capacity left and flows not yet fixed.
    left: f64,
    open: u32,
    /// The re-share that last visited it.
    mark: u32,
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
    /// The most flows that shared one port at once (a trunk's flows over its ports).
    peak_sharing: u32,
    /// A compact chain or tree edge's feeds (`Workload::feeds`), and each edge's chain
    /// or tree edges it feeds.
    feeds: Vec<Vec<u32>>,
    fed: Vec<Vec<u32>>,
}

impl Simulation {
    /// Builds the model; errors if some host cannot reach another.
    pub fn new(
        cfg: FlowConfig,
        topo: Topology,
        workload: &Workload,
        stop_at: Option<Time>,
    ) -> Result<Self, String> {
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
                path: Vec::new(),
                remaining: 0.0,
                rate: 0.0,
                since: Time::ZERO,
                posted: Time::ZERO,
                epoch: 0,
                plan: PipelinePlan::default(),
                held: None,
            })
            .collect();
        let links = topo
            .ports()
            .iter()
            .map(|p| Link {
                capacity: p.rate.bps() as f64 / 8e12,
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
            state: RunState {
                queue,
                flows,
                lifecycle,
                stop_at,
                stopped_by_time: false,
                deadlock: None,
                capture: None,
                grid: None,
                drain_until: None,
                drained: false,
                merged: None,
            },
            links,
            dirty: Vec::new(),
            reshare_due: false,
            round: 0,
            sharp_depth,
            trunks: HashMap::new(),
            trunk_paths: HashMap::new(),
            resources: HashMap::new(),
            nvlinks: HashMap::new(),
            peak_sharing: 0,
            feeds: Vec::new(),
            fed: Vec::new(),
            topo,
        };
        sim.plan_paths()?;
        sim.plan_pipelines(&workload.feeds);
        Ok(sim)
    }

    /// Every network message's path, decided up front (routing here depends on nothing
    /// that changes during the run). Refuses routes whose buffer dependencies form a
    /// cycle: a deadlock can form there, and only packet level shows whether it does.
    fn plan_paths(&mut self) -> Result<(), String> {
        let mut edges = Vec::new();
        for i in 0..self.state.flows.len() {
            let m = self.state.flows[i].msg;
            if Lifecycle::is_local(&self.topo, &m) {
                if self.state.flows[i].pipeline.is_some() && m.local.is_none() {
                    self.state.flows[i].path =
                        vec![self.nvlink(m.src, false), self.nvlink(m.dst, true)];
                }
                continue;
            }
            let mut path = self.path(i as u32);
            edges.extend(path.windows(2).map(|w| (w[0], w[1])));
            if let Some(st) = self.state.flows[i].staged.take() {
                path.extend(st.stages.iter().map(|l| self.resource(l)));
                self.state.flows[i].staged = Some(st);
            }
            self.state.flows[i].path = path;
        }
        if driver::has_cycle(&mut edges) {
            return Err("the routes' buffer dependencies form a cycle: a PFC deadlock or credit loop can form, which flow level cannot show; run this scenario at packet level".into());
        }
        Ok(())
    }

    /// Every compact edge's [`PipelinePlan`]: its piece's nominal time, and how long
    /// the pieces it forwards take to reach it from the pipeline's start, walking its
    /// feeds (`Workload::feeds`) back at each edge's own step time. A ring's edge waits
    /// on the `steps - 1` edges before it around the ring (a flat ring's NVLink and
    /// network edges alternate on that walk); a tree or chain edge on its slowest
    /// upstream path.
    fn plan_pipelines(&mut self, feeds: &[(u32, u32)]) {
        let n = self.state.flows.len();
        let mut upstream: Vec<Vec<u32>> = vec![Vec::new(); n];
        for &(edge, up) in feeds {
            upstream[edge as usize].push(up);
        }
        // Each edge's step: a piece's ideal time on it, after the sender's reduction.
        let mut step = vec![Time::ZERO; n];
        for (i, f) in self.state.flows.iter().enumerate() {
            let Some(p) = f.pipeline else { continue };
            let piece = Message {
                size: f.msg.size / p.pieces_on_wire().max(1),
                ..f.msg
            };
            step[i] = self.ideal_fct(&piece) + self.step_prep(p, piece.size);
        }
        let mut ahead: Vec<Option<Time>> = vec![None; n];
        for i in 0..n {
            let ahead_i = match self.state.flows[i].pipeline {
                None => continue,
                Some(Pipeline::Ring { steps, .. }) => {
                    if ahead[i].is_none() {
                        plan_ring(i as u32, steps, &upstream, &step, &mut ahead);
                    }
                    ahead[i].expect("planned with its ring")
                }
                Some(Pipeline::Chain { .. }) => upstream[i]
                    .iter()
                    .map(|&u| {
                        let before =
                            ahead[u as usize].expect("a chain edge's feeds come before it");
                        before + step[u as usize]
                    })
                    .max()
                    .unwrap_or(Time::ZERO),
            };
            ahead[i] = Some(ahead_i);
            let p = self.state.flows[i].pipeline.expect("compact");
            let nominal = Time(self.nominal_drain(i as u32).ps() / p.pieces_on_wire().max(1));
            self.state.flows[i].plan = PipelinePlan {
                nominal,
                ahead: ahead_i,
                step: step[i],
            };
        }
        self.fed = vec![Vec::new(); n];
        for (i, f) in self.state.flows.iter().enumerate() {
            if !matches!(f.pipeline, Some(Pipeline::Chain { .. })) {
                upstream[i].clear();
            }
            for &u in &upstream[i] {
                self.fed[u as usize].push(i as u32);
            }
        }
        self.feeds = upstream;
    }

    /// A compact chain or tree edge waits, once posted, until its first piece can have
    /// reached its sender: it enters the network (or NVLink) only then, and shares the
    /// links only while it sends.
    fn post_after_feeds(&mut self, flow: u32) {
        let f = &self.state.flows[flow as usize];
        if matches!(f.pipeline, Some(Pipeline::Chain { .. })) && f.plan.ahead > Time::ZERO {
            let at = self.state.queue.now() + f.plan.ahead;
            self.state.queue.schedule(at, Event::Enter { flow });
        } else {
            self.post(flow);
        }
    }

    /// Completes `flow` at `done` or, for a compact chain or tree edge, no earlier than
    /// its last piece can have come in over each feed and gone on (the feed's completion
    /// plus its own step, at the share its links would give it now): held until every
    /// feed has completed.
    fn complete(&mut self, flow: u32, done: Time) {
        let mut at = done;
        let feeds = &self.feeds[flow as usize];
        if !feeds.is_empty() {
            let mut last = Time::ZERO;
            for &f in feeds {
                match self.state.flows[f as usize].life.finish {
                    Some(t) => last = last.max(t),
                    None => {
                        self.state.flows[flow as usize].held = Some(done);
                        return;
                    }
                }
            }
            at = at.max(last + self.state.flows[flow as usize].plan.step + self.piece_delay(flow));
        }
        // A message with links went through `drained`; one without, through NVLink's turns.
        let event = if self.state.flows[flow as usize].path.is_empty() {
            Event::LocalDone { flow }
        } else {
            Event::Finished { flow }
        };
        self.state.queue.schedule(at, event);
    }

    /// How much longer than nominal one of a compact edge's pieces would take now, at an
    /// equal share of each of its links with the flows crossing it.
    fn piece_delay(&self, flow: u32) -> Time {
        let f = &self.state.flows[flow as usize];
        let Some(p) = f.pipeline else {
            return Time::ZERO;
        };
        let piece = self.flow_wire(f) as f64 / p.pieces_on_wire().max(1) as f64;
        let rate = f
            .path
            .iter()
            .map(|&l| {
                let link = &self.links[l as usize];
                let others =
                    link.flows.iter().filter(|&&o| o != flow).count() + link.released as usize;
                let ports = link.members.len().max(1);
                let share = if link.stage {
                    1.0
                } else {
                    self.cfg.sharing_share((others + 1).div_ceil(ports))
                };
                link.capacity * share / (others + 1) as f64
            })
            .fold(f64::INFINITY, f64::min);
        if !rate.is_finite() {
            return Time::ZERO;
        }
        Time((piece / rate).ceil() as u64).saturating_sub(f.plan.nominal)
    }

    /// `flow` completed: the edges it feeds that were held for it may complete.
    /// Those released together send their last pieces together: each counts the others
    /// on its links.
    fn release_held(&mut self, flow: u32) {
        let fed = std::mem::take(&mut self.fed[flow as usize]);
        let released: Vec<u32> = fed
            .iter()
            .copied()
            .filter(|&e| self.state.flows[e as usize].held.is_some())
            .collect();
        self.count_released(&released, 1);
        for &e in &released {
            let done = self.state.flows[e as usize].held.take().expect("held");
            self.count_released(&[e], -1);
            self.complete(e, done);
            self.count_released(&[e], 1);
        }
        self.count_released(&released, -1);
        self.fed[flow as usize] = fed;
    }

    /// Adds `by` to the released count of each link of `edges`.
    fn count_released(&mut self, edges: &[u32], by: i32) {
        for &e in edges {
            for &l in &self.state.flows[e as usize].path {
                let link = &mut self.links[l as usize];
                link.released = link.released.checked_add_signed(by).expect("counted once");
            }
        }
    }

    /// A compact edge's transfer time alone on idle links: at its path's slowest port,
    /// or over NVLink.
    fn nominal_drain(&self, flow: u32) -> Time {
        let f = &self.state.flows[flow as usize];
        if Lifecycle::is_local(&self.topo, &f.msg) {
            return self
                .state
                .lifecycle
                .ideal_local(&self.topo, &f.msg)
                .expect("a local message")
                .saturating_sub(self.cfg.tx_latency)
                .saturating_sub(self.topo.nvlink().latency);
        }
        let slowest = f
            .path
            .iter()
            .filter(|&&p| (p as usize) < self.topo.ports().len())
            .map(|&p| self.topo.port(PortId(p)).rate)
            .min_by_key(|r| r.bps())
            .expect("a path has a port");
        slowest.serialization(self.flow_wire(f))
    }

    /// Events handled so far.
    pub fn events(&self) -> u64 {
        self.state.queue.popped()
    }

    /// The share of its line rate a port crossed by `n` flows keeps (see
    /// [`FlowConfig::sharing`]); None without a sharing correction.
    pub fn port_share(&self, n: usize) -> Option<f64> {
        (!self.cfg.sharing.is_empty()).then(|| self.cfg.sharing_share(n))
    }

    /// The most flows that shared one port at once.
    pub fn peak_sharing(&self) -> u32 {
        self.peak_sharing
    }

    /// The simulated clock.
    pub fn now(&self) -> Time {
        self.state.queue.now()
    }

    /// The ports a message from `src` to `dst` crosses, host port first. A SHARP
    /// contribution (`src == dst`) crosses its host's link up and down: the switches
    /// reduce, so each tree link carries the buffer once.
    fn path(&mut self, flow: u32) -> Vec<u32> {
        let m = self.state.flows[flow as usize].msg;
        let first = self.topo.host_port(m.src);
        if m.src == m.dst {
            return vec![first.0, self.topo.port(first).peer.0];
        }
        // A compact edge under ECMP stands for many messages, each hashed on its own
        // UDP source port: their spread is even over the candidates, as a trunk.
        let spread = matches!(self.cfg.routing, FlowRouting::Ecmp { .. })
            && self.state.flows[flow as usize]
                .pipeline
                .is_some_and(|p| p.pieces_on_wire() > 1);
        if self.cfg.routing == FlowRouting::Adaptive || spread {
            return self.trunk_path(m.src, m.dst);
        }
        let mut path = vec![first.0];
        let mut port = first;
        loop {
            let node = self.topo.port(self.topo.port(port).peer).node;
            if !matches!(self.topo.nodes()[node.index()], NodeKind::Switch { .. }) {
                return path;
            }
            let cands = self.routes.candidates(node, m.dst);
            port = match self.cfg.routing {
                _ if cands.len() == 1 => cands[0],
                FlowRouting::Static => self.routes.static_port(node, m.dst),
                FlowRouting::Ecmp { seed } => {
                    let sport = driver::udp_source_port(flow);
                    let h = driver::ecmp_hash(seed, node.0, m.src.0, m.dst.0, sport);
                    cands[(h % cands.len() as u64) as usize]
                }
                FlowRouting::Adaptive => unreachable!("adaptive paths are trunk paths"),
            };
            path.push(port.0);
        }
    }

    /// The links a flow crosses under adaptive routing: its host port, then at each hop
    /// the trunk of the candidate ports of every switch its packets may have reached,
    /// then its receiver's port.
    fn trunk_path(&mut self, src: HostId, dst: HostId) -> Vec<u32> {
        let first = self.topo.host_port(src);
        let leaf = self.topo.port(self.topo.port(first).peer).node;
        let last = self.topo.port(self.topo.host_port(dst)).peer;
        let dst_leaf = self.topo.port(last).node;
        let key = (leaf.0, dst_leaf.0);
        if !self.trunk_paths.contains_key(&key) {
            let mut middle = Vec::new();
            let mut frontier = vec![leaf];
            while frontier != [dst_leaf] {
                let mut ports: Vec<u32> = frontier
                    .iter()
                    .flat_map(|&n| self.routes.candidates(n, dst).iter().map(|p| p.0))
                    .collect();
                ports.sort_unstable();
                ports.dedup();
                frontier = ports
                    .iter()
                    .map(|&p| self.topo.port(self.topo.port(PortId(p)).peer).node)
                    .collect();
                frontier.sort_unstable();
                frontier.dedup();
                middle.push(self.trunk(ports));
            }
            self.trunk_paths.insert(key, middle);
        }
        let mut path = vec![first.0];
        path.extend(&self.trunk_paths[&key]);
        path.push(last.0);
        path
    }

    /// The link standing for a data-path stage's resource (a PCIe direction, a CPU): its
    /// rate in the network's wire bytes (full packets), so a flow's bytes count alike on
    /// both.
    fn resource(&mut self, stage: &Local) -> u32 {
        if let Some(&l) = self.resources.get(&stage.resource) {
            return l;
        }
        let id = self.links.len() as u32;
        let mtu = self.cfg.mtu;
        let wire_per_byte = self.cfg.frame_len(mtu, false) as f64 / mtu as f64;
        self.links.push(Link {
            capacity: stage.rate.bps() as f64 / 8e12 * wire_per_byte,
            stage: true,
            ..Link::default()
        });
        self.resources.insert(stage.resource, id);
        id
    }

    /// The link standing for a GPU's NVLink out (or, `into`, in), in payload bytes: a
    /// compact edge inside a server stands for many pieces interleaved with others on
    /// its GPUs' NVLink, so it shares it fairly, as network flows share ports (a plain
    /// message there takes its turn, as at packet level).
    fn nvlink(&mut self, gpu: HostId, into: bool) -> u32 {
        let key = (gpu.0, into);
        if let Some(&l) = self.nvlinks.get(&key) {
            return l;
        }
        let id = self.links.len() as u32;
        self.links.push(Link {
            capacity: self.topo.nvlink().rate.bps() as f64 / 8e12,
            stage: true,
            ..Link::default()
        });
        self.nvlinks.insert(key, id);
        id
    }

    /// The link standing for `ports`: the port itself, or their trunk.
    fn trunk(&mut self, ports: Vec<u32>) -> u32 {
        if let [one] = ports[..] {
            return one;
        }
        if let Some(&t) = self.trunks.get(&ports) {
            return t;
        }
        let id = self.links.len() as u32;
        self.links.push(Link {
            capacity: ports.iter().map(|&p| self.links[p as usize].capacity).sum(),
            members: ports.clone(),
            ..Link::default()
        });
        self.trunks.insert(ports, id);
        id
    }

    /// Ideal completion of a message on an empty fabric, as the packet-level fabrics
    /// compute it.
    fn ideal_fct(&self, m: &Message) -> Time {
        if let Some(t) = self.state.lifecycle.ideal_local(&self.topo, m) {
            return t;
        }
        if m.src == m.dst {
            let port = self.topo.port(self.topo.host_port(m.src));
            let packet = self.cfg.frame_len(self.cfg.mtu, false);
            return self.cfg.tx_latency
                + self.cfg.rx_latency
                + port.rate.serialization(self.cfg.wire_bytes(m.size))
                + (port.delay + self.cfg.switch_latency + port.rate.serialization(packet))
                    * (2 * self.sharp_depth as u64);
        }
        driver::ideal_fct(
            &self.topo,
            &self.routes,
            m,
            self.cfg.mtu,
            self.cfg.tx_latency + self.cfg.rx_latency,
            self.cfg.switch_latency,
            |payload, first| self.cfg.frame_len(payload, first),
        )
    }

    /// From the moment a message's last byte leaves its sender to its completion at the
    /// receiver, on its path: the ideal time less the posting latency and the whole
    /// message at the path's slowest port.
    fn lead(&self, m: &Message, path: &[u32]) -> Time {
        if Lifecycle::is_local(&self.topo, m) {
            return self.topo.nvlink().latency;
        }
        let slowest = path
            .iter()
            .filter(|&&p| (p as usize) < self.topo.ports().len())
            .map(|&p| self.topo.port(PortId(p)).rate)
            .min_by_key(|r| r.bps())
            .expect("a path has a port");
        let wire = slowest.serialization(self.cfg.wire_bytes(m.size));
        self.ideal_fct(m)
            .saturating_sub(self.cfg.tx_latency)
            .saturating_sub(wire)
    }

    /// Marks the ports of `flow`'s path for the next re-share, due now.
    fn touch(&mut self, flow: u32) {
        for &l in &self.state.flows[flow as usize].path {
            self.dirty.push(l);
        }
        if !self.reshare_due {
            self.reshare_due = true;
            let now = self.state.queue.now();
            self.state.queue.schedule(now, Event::Reshare);
        }
    }

    /// Max-min fair rates for the flows connected to the touched ports, and their new
    /// drain events. Progressive filling: the port with the smallest equal share fixes
    /// its open flows at that share, which leaves the other ports on their paths.
    fn reshare(&mut self) {
        self.reshare_due = false;
        self.round += 1;
        let round = self.round;
        let now = self.state.queue.now();
        // The connected component: ports -> their flows -> those flows' ports.
        let mut ports: Vec<u32> = Vec::new();
        let mut flows: Vec<u32> = Vec::new();
        let mut stack = std::mem::take(&mut self.dirty);
        while let Some(l) = stack.pop() {
            let link = &mut self.links[l as usize];
            if link.mark == round {
                continue;
            }
            link.mark = round;
            ports.push(l);
            for &f in &link.flows {
                if self.flow_mark[f as usize] != round {
                    self.flow_mark[f as usize] = round;
                    flows.push(f);
                    stack.extend(&self.state.flows[f as usize].path);
                }
            }
        }
        // The rates before: a flow whose rate comes out the same keeps its drain event.
        let before: Vec<f64> = flows
            .iter()
            .map(|&f| self.state.flows[f as usize].rate)
            .collect();
        for &f in &flows {
            let fl = &mut self.state.flows[f as usize];
            fl.remaining = (fl.remaining - fl.rate * (now - fl.since).ps() as f64).max(0.0);
            fl.since = now;
            fl.rate = -1.0;
        }
        let mut heap = BinaryHeap::new();
        for &l in &ports {
            let link = &mut self.links[l as usize];
            let per_port = link.flows.len().div_ceil(link.members.len().max(1));
            link.left = if link.stage {
                link.capacity
            } else {
                link.capacity * self.cfg.sharing_share(per_port)
            };
            link.open = link.flows.len() as u32;
            if link.open > 0 {
                heap.push(std::cmp::Reverse((share_key(link.left, link.open), l)));
            }
        }
        while let Some(std::cmp::Reverse((key, l))) = heap.pop() {
            let link = &self.links[l as usize];
            if link.open == 0 || share_key(link.left, link.open) != key {
                continue;
            }
            let share = link.left / link.open as f64;
            let members = link.flows.clone();
            for f in members {
                if self.state.flows[f as usize].rate >= 0.0 {
                    continue;
                }
                self.state.flows[f as usize].rate = share;
                for &other in &self.state.flows[f as usize].path {
                    let o = &mut self.links[other as usize];
                    o.left = (o.left - share).max(0.0);
                    o.open -= 1;
                    if o.open > 0 && other != l {
                        heap.push(std::cmp::Reverse((share_key(o.left, o.open), other)));
                    }
                }
            }
        }
        for (&f, &rate) in flows.iter().zip(&before) {
            let fl = &mut self.state.flows[f as usize];
            if fl.rate == rate {
                continue;
            }
            fl.epoch += 1;
            let ps = (fl.remaining / fl.rate).ceil();
            let at = now
                + Time(if ps.is_finite() {
                    ps as u64
                } else {
                    u64::MAX / 4
                });
            let epoch = fl.epoch;
            self.state
                .queue
                .schedule(at, Event::Drained { flow: f, epoch });
        }
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

    /// A ring step's reduction or copy of one `piece` on the GPU, on average over the
    /// ring's steps (none without a GPU memory bandwidth).
    fn step_prep(&self, p: Pipeline, piece: u64) -> Time {
        match (p, self.topo.nvlink().gpu_memory) {
            (Pipeline::Ring { steps, passes, .. }, Some(memory)) if steps > 1 => {
                Time(memory.serialization(piece * passes as u64).ps() / (steps as u64 - 1))
            }
            _ => Time::ZERO,
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
        let wire = self.flow_wire(&self.state.flows[flow as usize]);
        for &l in &path {
            let link = &mut self.links[l as usize];
            link.flows.retain(|&f| f != flow);
            link.tx_bytes += wire;
            link.tx_packets += packets * piece.div_ceil(self.cfg.mtu as u64).max(1);
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
        let done = fill
            + match pipeline {
                None => now + self.lead(&m, &path),
                Some(p) => {
                    let piece_msg = Message { size: piece, ..m };
                    now + self.lead(&piece_msg, &path) + plan.wait(p, drain)
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

    /// Everything measured, for the experiment layer. Flow level has no queues, pauses,
    /// marks or drops to report: those counters are zero.
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
        RunReport {
            sim_time: self.state.sim_time(),
            events: self.events(),
            flows: self.state.flow_results(|m| self.ideal_fct(m)),
            ports,
            drops: 0,
            retransmitted_packets: 0,
            congestion_marks: 0,
            congestion_notifications: 0,
            duplicates: 0,
            buffer_overflows: 0,
            peak_packets_in_flight: 0,
            stopped_by_time: self.state.stopped_by_time,
            pfc_pause_frames: 0,
            naks: 0,
            timeouts: 0,
            watchdog_trips: 0,
            deadlock: None,
            pfc_cycles: Vec::new(),
        }
    }
}

/// A water-filling share as an orderable key: positive floats order as their bits.
fn share_key(left: f64, open: u32) -> u64 {
    (left / open as f64).to_bits()
}

/// Sets `ahead` for every edge of the ring `edge` is on: the sum of the steps of the
/// `steps - 1` edges before it (following the feeds, round the ring as often as it
/// takes).
fn plan_ring(
    edge: u32,
    steps: u32,
    upstream: &[Vec<u32>],
    step: &[Time],
    ahead: &mut [Option<Time>],
) {
    let mut ring = vec![edge];
    loop {
        let last = *ring.last().expect("not empty") as usize;
        let &[up] = upstream[last].as_slice() else {
            panic!("a ring edge has one feed");
        };
        if up == edge {
            break;
        }
        ring.push(up);
    }
    let len = ring.len();
    let total: u64 = ring.iter().map(|&e| step[e as usize].ps()).sum();
    // prefix[j]: the steps of ring[0..j], round the ring twice.
    let mut prefix = vec![0u64; 2 * len + 1];
    for j in 0..2 * len {
        prefix[j + 1] = prefix[j] + step[ring[j % len] as usize].ps();
    }
    let before = steps.saturating_sub(1) as usize;
    let (rounds, rest) = ((before / len) as u64, before % len);
    for (j, &e) in ring.iter().enumerate() {
        let window = prefix[j + 1 + rest] - prefix[j + 1];
        ahead[e as usize] = Some(Time(rounds * total + window));
    }
}

/// A compact edge's pipeline at nominal rates: a piece's time on its own (`nominal`),
/// and `ahead`, from the pipeline's start until the first piece it must wait for
/// arrives: a ring edge's last step's, a chain or tree edge's first (see
/// `Simulation::plan_pipelines`).
#[derive(Clone, Copy, Debug, Default)]
struct PipelinePlan {
    nominal: Time,
    ahead: Time,
    /// A piece's ideal time on the edge, after its sender's reduction.
    step: Time,
}

impl PipelinePlan {
    /// What the pipeline adds to the edge's drain time (`drain`: from its posting to its
    /// last byte leaving, at the rates it got).
    ///
    /// A ring of K steps of P pieces, each of time t = drain / (K P): piece p of step k
    /// leaves at the later of the edge's previous piece and the same piece of step k-1
    /// arriving from upstream, so the last leaves at
    /// max(K P t, ahead + (K - 1)(t - nominal) + P t) - t: the edge is either busy
    /// throughout or waits on the ring's latency (its own pieces slower than nominal
    /// delay each step). A chain or tree edge enters only once its first piece is in
    /// (`Simulation::post_after_feeds`) and ends no earlier than its feeds allow
    /// (`Simulation::complete`): nothing to add.
    fn wait(self, p: Pipeline, drain: Time) -> Time {
        match p {
            Pipeline::Ring { steps, pieces, .. } => {
                let t = Time(drain.ps() / p.pieces_on_wire().max(1));
                let latency_bound = self.ahead
                    + self.slower(p, drain) * (steps.max(1) as u64 - 1)
                    + t * pieces as u64;
                latency_bound.saturating_sub(drain)
            }
            Pipeline::Chain { .. } => Time::ZERO,
        }
    }

    /// How much longer than nominal each piece took, at the edge's `drain`.
    fn slower(self, p: Pipeline, drain: Time) -> Time {
        Time(drain.ps() / p.pieces_on_wire().max(1)).saturating_sub(self.nominal)
    }
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
            Event::Drained { flow, epoch } => {
                if self.state.flows[flow as usize].epoch == epoch {
                    self.drained(flow);
                }
            }
            Event::Finished { flow } => {
                self.finished(flow);
                self.release_held(flow);
            }
            Event::Reshare => self.reshare(),
        }
    }

    fn inherit_connection(&mut self, prev: u32, next: u32) {
        self.state.flows[prev as usize].life.handed_to = Some(next);
    }

    /// The message becomes a flow on its path, shared at the next re-share.
    fn enqueue(&mut self, flow: u32) {
        let path = std::mem::take(&mut self.state.flows[flow as usize].path);
        let wire = self.flow_wire(&self.state.flows[flow as usize]);
        let now = self.state.queue.now();
        for &l in &path {
            let link = &mut self.links[l as usize];
            link.flows.push(flow);
            if !link.stage {
                let ports = link.members.len().max(1);
                self.peak_sharing = self
                    .peak_sharing
                    .max(link.flows.len().div_ceil(ports) as u32);
            }
        }
        let f = &mut self.state.flows[flow as usize];
        f.remaining = wire as f64;
        f.path = path;
        f.since = now;
        f.posted = now;
        f.rate = 0.0;
        self.touch(flow);
    }

    /// A transfer inside a server, as on the packet-level fabrics; a compact ring inside
    /// a server (NVLink) also waits out its steps' latencies.
    fn post_local(&mut self, flow: u32) {
        if !self.state.flows[flow as usize].path.is_empty() {
            return self.enqueue(flow);
        }
        let f = &self.state.flows[flow as usize];
        let pipeline = f.pipeline.filter(|_| f.msg.local.is_none());
        let plan = f.plan;
        let s = &mut self.state;
        let now = s.queue.now();
        let (mut done, next) = s.lifecycle.start_local(&mut s.flows, flow, now);
        if let Some(p) = pipeline {
            // The last byte leaves an NVLink latency before it lands.
            let drain = (done - now).saturating_sub(self.topo.nvlink().latency);
            done += plan.wait(p, drain);
        }
        self.complete(flow, done);
        if let Some(next) = next {
            self.post(next);
        }
    }
}
