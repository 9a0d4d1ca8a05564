//! Paths, planned up front: each message's ports (static, ECMP or adaptive trunks), the
//! links standing for data-path resources and NVLink, and the ideal and fixed latencies
//! measured along them.

use super::{FlowRouting, Link, Simulation};
use crate::driver::BuildError;
use crate::driver::{self, Lifecycle};
use crate::workload::QueuePair;
use crate::workload::{Local, Message, NvSwitchOp, Stage, NVLS_EFFICIENCY};
use fabricsim_core::topology::NodeKind;
use fabricsim_core::units::{HostId, PortId, Time};

impl Simulation {
    /// Every network message's path, decided up front (routing here depends on nothing
    /// that changes during the run). Refuses routes whose buffer dependencies form a
    /// cycle: a deadlock can form there, and only packet level shows whether it does.
    pub(super) fn plan_paths(&mut self) -> Result<(), BuildError> {
        let mut edges = Vec::new();
        for i in 0..self.state.flows.len() {
            let m = self.state.flows[i].msg;
            if Lifecycle::is_local(&self.topo, &m) {
                if self.state.flows[i].pipeline.is_some() {
                    match m.local {
                        None => {
                            self.state.flows[i].path =
                                vec![self.nvlink(m.src, false), self.nvlink(m.dst, true)];
                        }
                        Some(Local::NvSwitch(op)) => self.nvswitch_path(i, op, m.src),
                        Some(Local::Stage(_)) => {}
                    }
                }
                continue;
            }
            let (mut path, weights) = self.path(i as u32, &mut edges);
            if let Some(st) = self.state.flows[i].staged.take() {
                path.extend(st.stages.iter().map(|l| self.resource(l)));
                self.state.flows[i].staged = Some(st);
            }
            let f = &mut self.state.flows[i];
            f.path = path;
            f.weights = weights;
            if !f.weights.is_empty() {
                f.weights.resize(f.path.len(), 1.0);
            }
        }
        if driver::has_cycle(&mut edges) {
            return Err(BuildError::FlowCycle);
        }
        Ok(())
    }

    /// Each message's network path as the ports it crosses, host port first
    /// ([`NetworkPath::Ports`]); a transfer inside a server is [`NetworkPath::Local`], and
    /// one whose bytes spread over several paths (adaptive routing's trunks, spraying, a
    /// compact edge's QPs) is [`NetworkPath::Spread`]. By message index.
    pub fn network_paths(&self) -> Vec<NetworkPath> {
        let ports = self.topo.ports().len() as u32;
        self.state
            .flows
            .iter()
            .map(|f| {
                if Lifecycle::is_local(&self.topo, &f.msg) {
                    NetworkPath::Local
                } else if f.weights.is_empty() && f.path.iter().all(|&l| l < ports) {
                    NetworkPath::Ports(f.path.iter().map(|&l| PortId(l)).collect())
                } else {
                    NetworkPath::Spread
                }
            })
            .collect()
    }

    /// The ports a message from `src` to `dst` crosses, host port first, and the
    /// fraction of its bytes each carries (empty: all of them on each); the consecutive
    /// ports of every path it takes are added to `edges`. A SHARP contribution
    /// (`src == dst`) crosses its host's link up and down: the switches reduce, so each
    /// tree link carries the buffer once.
    fn path(&mut self, flow: u32, edges: &mut Vec<(u32, u32)>) -> (Vec<u32>, Vec<f64>) {
        let f = &self.state.flows[flow as usize];
        let (m, qp, compact) = (f.msg, f.qp, f.pipeline.is_some());
        let first = self.topo.host_port(m.src);
        if m.src == m.dst {
            return (vec![first.0, self.topo.port(first).peer.0], Vec::new());
        }
        let seed = match self.cfg.routing {
            FlowRouting::Adaptive => {
                let path = self.trunk_path(m.src, m.dst);
                edges.extend(path.windows(2).map(|w| (w[0], w[1])));
                return (path, Vec::new());
            }
            FlowRouting::Spray => return self.sprayed_path(m.src, m.dst, edges),
            FlowRouting::Static => None,
            FlowRouting::Ecmp { seed } => Some(seed),
        };
        // A compact edge's pieces take its connection's QPs in turn; a message its own QP.
        let qps: Vec<QueuePair> = if compact {
            qp.siblings().collect()
        } else {
            vec![qp]
        };
        let mut ports: Vec<(u32, u32)> = Vec::new();
        for q in &qps {
            let path = self.hashed_path(m.src, m.dst, seed, q.key());
            edges.extend(path.windows(2).map(|w| (w[0], w[1])));
            for p in path {
                match ports.iter_mut().find(|(x, _)| *x == p) {
                    Some((_, n)) => *n += 1,
                    None => ports.push((p, 1)),
                }
            }
        }
        let weights = if ports.iter().all(|&(_, n)| n as usize == qps.len()) {
            Vec::new()
        } else {
            let of = qps.len() as f64;
            ports.iter().map(|&(_, n)| n as f64 / of).collect()
        };
        (ports.into_iter().map(|(p, _)| p).collect(), weights)
    }

    /// One path from `src` to `dst`: the static route, or with `seed` ECMP's hash of the
    /// QP `key`'s UDP source port at each switch, as the packet model hashes it.
    fn hashed_path(&self, src: HostId, dst: HostId, seed: Option<u64>, key: u32) -> Vec<u32> {
        let first = self.topo.host_port(src);
        let mut path = vec![first.0];
        let mut port = first;
        loop {
            let node = self.topo.port(self.topo.port(port).peer).node;
            if !matches!(self.topo.nodes()[node.index()], NodeKind::Switch { .. }) {
                return path;
            }
            let cands = self.routes.candidates(node, dst);
            port = match seed {
                _ if cands.len() == 1 => cands[0],
                None => self.routes.static_port(node, dst),
                Some(seed) => {
                    let sport = driver::udp_source_port(key);
                    let h = driver::ecmp_hash(seed, node.0, src.0, dst.0, sport);
                    cands[(h % cands.len() as u64) as usize]
                }
            };
            path.push(port.0);
        }
    }

    /// The ports a sprayed flow crosses and the fraction of its bytes on each: at every
    /// switch its packets reach, each candidate port takes an equal part of what arrives
    /// there.
    fn sprayed_path(
        &self,
        src: HostId,
        dst: HostId,
        edges: &mut Vec<(u32, u32)>,
    ) -> (Vec<u32>, Vec<f64>) {
        let first = self.topo.host_port(src);
        let (mut path, mut weights) = (vec![first.0], vec![1.0]);
        // The switches reached at this hop, with the fraction of the bytes reaching each,
        // and the ports that brought it there.
        let mut frontier = vec![(self.topo.port(first).peer, 1.0, vec![first.0])];
        while !frontier.is_empty() {
            let mut next: Vec<(PortId, f64, Vec<u32>)> = Vec::new();
            for (entered, share, from) in &frontier {
                let node = self.topo.port(*entered).node;
                if !matches!(self.topo.nodes()[node.index()], NodeKind::Switch { .. }) {
                    continue;
                }
                let cands = self.routes.candidates(node, dst);
                for &c in cands {
                    let part = share / cands.len() as f64;
                    edges.extend(from.iter().map(|&f| (f, c.0)));
                    path.push(c.0);
                    weights.push(part);
                    let peer = self.topo.port(c).peer;
                    match next
                        .iter_mut()
                        .find(|(p, _, _)| self.topo.port(*p).node == self.topo.port(peer).node)
                    {
                        Some((_, s, f)) => {
                            *s += part;
                            f.push(c.0);
                        }
                        None => next.push((peer, part, vec![c.0])),
                    }
                }
            }
            frontier = next;
        }
        if weights.iter().all(|&w| w == 1.0) {
            weights.clear();
        }
        (path, weights)
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
    fn resource(&mut self, stage: &Stage) -> u32 {
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

    /// A compact NVLink SHARP edge's links: every GPU's NVLink out of `owner`'s server
    /// and the owner's in for a reduction, the owner's out and every GPU's in for a
    /// multicast; each byte takes 1 / NVLS's efficiency of each.
    fn nvswitch_path(&mut self, flow: usize, op: NvSwitchOp, owner: HostId) {
        let g = self.topo.gpus_per_node().max(1);
        let first = owner.0 / g * g;
        let into_all = op == NvSwitchOp::Multicast;
        let mut path = vec![self.nvlink(owner, !into_all)];
        for h in first..first + g {
            path.push(self.nvlink(HostId(h), into_all));
        }
        let (kept, took) = NVLS_EFFICIENCY;
        let f = &mut self.state.flows[flow];
        f.weights = vec![took as f64 / kept as f64; path.len()];
        f.path = path;
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
            line_bps: ports.iter().map(|&p| self.links[p as usize].line_bps).sum(),
            members: ports.clone(),
            ..Link::default()
        });
        self.trunks.insert(ports, id);
        id
    }

    /// Ideal completion of a message on an empty fabric, as the packet-level fabrics
    /// compute it.
    pub(super) fn ideal_fct(&self, m: &Message) -> Time {
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
    pub(super) fn lead(&self, m: &Message, path: &[u32]) -> Time {
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
}

/// Where a message's bytes go at flow level (see [`Simulation::network_paths`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NetworkPath {
    Local,
    Ports(Vec<PortId>),
    Spread,
}
