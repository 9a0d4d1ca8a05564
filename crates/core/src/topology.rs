//! Topologies as plain data: nodes, bidirectional links (each end a directed port), the
//! builders for single-switch, leaf-spine and k-ary fat-tree fabrics, and minimal
//! up/down routing tables.
//!
//! Hosts are numbered 0.. in builder order (leaf-major, or pod/edge-major in a fat-tree),
//! which is the order traffic specifications use.

use crate::units::{BitRate, HostId, NodeId, PortId, Time};
use std::collections::{BTreeMap, HashMap, VecDeque};

/// Why a topology cannot be built or routed: a sentence naming the offending values.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TopologyError {
    #[error("hosts = {hosts}: a single-switch topology needs at least 2 hosts")]
    SingleSwitchHosts { hosts: u32 },
    #[error("leaves = {leaves}, spines = {spines}: both must be at least 1")]
    LeafSpineSwitches { leaves: u32, spines: u32 },
    #[error("hosts = {hosts}: need at least 2 hosts and one per leaf ({leaves} leaves)")]
    LeafSpineHosts { hosts: u32, leaves: u32 },
    #[error("k = {k}: a fat-tree needs an even k between 2 and 64")]
    FatTreeK { k: u32 },
    #[error("switch id {switch} is not a node (the file has nodes 0 to {})", nodes.saturating_sub(1))]
    SwitchNotANode { switch: u32, nodes: u32 },
    #[error("switch id {switch} is listed twice")]
    SwitchTwice { switch: u32 },
    #[error("link {link} ({a} {b}): node {end} does not exist (the file has nodes 0 to {})", nodes.saturating_sub(1))]
    LinkEndMissing {
        link: usize,
        a: u32,
        b: u32,
        end: u32,
        nodes: u32,
    },
    #[error("link {link} ({node} {node}): a link needs two nodes")]
    LinkToItself { link: usize, node: u32 },
    #[error("link {link} ({a} {b}): joins two hosts; hosts must hang off switches")]
    LinkBetweenHosts { link: usize, a: u32, b: u32 },
    #[error("host node {host} has {links} links; a host needs exactly one (one NIC port)")]
    HostLinks { host: usize, links: u32 },
    #[error("the topology needs at least 2 hosts")]
    TooFewHosts,
    #[error("nodes = {servers}, gpus_per_node = {gpus}, spines = {spines}: need at least 2 nodes, 1 GPU and 1 spine")]
    RailShape {
        servers: u32,
        gpus: u32,
        spines: u32,
    },
    #[error("gpus_per_node = {gpus}: must divide the {hosts} hosts")]
    GpusPerNode { gpus: u32, hosts: u32 },
    #[error("host {host} cannot reach host {from}: the topology is not connected")]
    NotConnected { host: usize, from: u32 },
}

/// For callers that report errors as sentences.
impl From<TopologyError> for String {
    fn from(e: TopologyError) -> String {
        e.to_string()
    }
}

/// What a node is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeKind {
    Host(HostId),
    /// A switch; `tier` 0 is next to hosts (edge/leaf), 1 above it, and so on.
    Switch {
        tier: u8,
    },
}

/// One directed end of a link: this end's transmitter sends to `peer`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Port {
    pub node: NodeId,
    /// Index of this port among its node's ports.
    pub local: u16,
    pub peer: PortId,
    pub rate: BitRate,
    pub delay: Time,
}

/// One link of a graph topology (see [`Topology::from_graph`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GraphLink {
    pub a: u32,
    pub b: u32,
    pub rate: BitRate,
    pub delay: Time,
}

/// A built topology: nodes, their ports, and which node each host is.
#[derive(Clone, Debug)]
pub struct Topology {
    nodes: Vec<NodeKind>,
    node_ports: Vec<Vec<PortId>>,
    ports: Vec<Port>,
    hosts: Vec<NodeId>,
    /// GPUs (hosts, each with its own NIC) per server: hosts `g*k .. g*(k+1)` share server
    /// k and its NVLink domain.
    gpus_per_node: u32,
    nvlink: Nvlink,
}

/// A server's GPUs as transfers see them: their NVLink domain (NVSwitch class,
/// non-blocking), with per-GPU bandwidth each way and the latency of a transfer, and each
/// GPU's memory bandwidth, which a collective's reductions and copies between steps take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Nvlink {
    pub rate: BitRate,
    pub latency: Time,
    /// None: reductions and copies are free (no GPU named).
    pub gpu_memory: Option<BitRate>,
}

impl Default for Nvlink {
    /// H100 SXM: NVLink 4, 18 links, 900 GB/s both ways, so 450 GB/s per direction per GPU
    /// (NVIDIA H100 datasheet). Latency 500 ns: unverified, a placeholder for NVSwitch
    /// hops and the copy engine's start.
    fn default() -> Self {
        Nvlink {
            rate: BitRate(450 * 8_000_000_000),
            latency: Time::from_ns(500),
            gpu_memory: None,
        }
    }
}

impl Topology {
    /// A topology with no node yet, for the builders.
    pub(crate) fn empty() -> Self {
        Topology {
            nodes: Vec::new(),
            node_ports: Vec::new(),
            ports: Vec::new(),
            hosts: Vec::new(),
            gpus_per_node: 1,
            nvlink: Nvlink::default(),
        }
    }

    pub(crate) fn add_host(&mut self) -> NodeId {
        let id = NodeId(self.nodes.len() as u32);
        self.nodes
            .push(NodeKind::Host(HostId(self.hosts.len() as u32)));
        self.node_ports.push(Vec::new());
        self.hosts.push(id);
        id
    }

    pub(crate) fn add_switch(&mut self, tier: u8) -> NodeId {
        let id = NodeId(self.nodes.len() as u32);
        self.nodes.push(NodeKind::Switch { tier });
        self.node_ports.push(Vec::new());
        id
    }

    /// Adds a full-duplex link of `rate` with one-way propagation `delay`.
    pub fn connect(&mut self, a: NodeId, b: NodeId, rate: BitRate, delay: Time) {
        let pa = PortId(self.ports.len() as u32);
        let pb = PortId(pa.0 + 1);
        for (node, peer) in [(a, pb), (b, pa)] {
            let local = self.node_ports[node.index()].len() as u16;
            self.ports.push(Port {
                node,
                local,
                peer,
                rate,
                delay,
            });
            let id = PortId(self.ports.len() as u32 - 1);
            self.node_ports[node.index()].push(id);
        }
    }

    /// `hosts` hosts on one switch.
    pub fn single_switch(
        hosts: u32,
        rate: BitRate,
        delay: Time,
    ) -> Result<Topology, TopologyError> {
        if hosts < 2 {
            return Err(TopologyError::SingleSwitchHosts { hosts });
        }
        let mut t = Topology::empty();
        let hs: Vec<NodeId> = (0..hosts).map(|_| t.add_host()).collect();
        let sw = t.add_switch(0);
        for h in hs {
            t.connect(h, sw, rate, delay);
        }
        Ok(t)
    }

    /// A two-tier leaf-spine: `hosts` spread evenly over `leaves` (the first
    /// `hosts % leaves` leaves get one more), every leaf linked to every spine at
    /// `uplink_rate`.
    pub fn leaf_spine(
        hosts: u32,
        leaves: u32,
        spines: u32,
        rate: BitRate,
        uplink_rate: BitRate,
        delay: Time,
    ) -> Result<Topology, TopologyError> {
        if leaves == 0 || spines == 0 {
            return Err(TopologyError::LeafSpineSwitches { leaves, spines });
        }
        if hosts < 2 || hosts < leaves {
            return Err(TopologyError::LeafSpineHosts { hosts, leaves });
        }
        let mut t = Topology::empty();
        let hs: Vec<NodeId> = (0..hosts).map(|_| t.add_host()).collect();
        let ls: Vec<NodeId> = (0..leaves).map(|_| t.add_switch(0)).collect();
        let ss: Vec<NodeId> = (0..spines).map(|_| t.add_switch(1)).collect();
        let (base, extra) = (hosts / leaves, hosts % leaves);
        let mut next = 0usize;
        for (i, &leaf) in ls.iter().enumerate() {
            let count = base + u32::from((i as u32) < extra);
            for _ in 0..count {
                t.connect(hs[next], leaf, rate, delay);
                next += 1;
            }
        }
        for &leaf in &ls {
            for &spine in &ss {
                t.connect(leaf, spine, uplink_rate, delay);
            }
        }
        Ok(t)
    }

    /// A three-tier k-ary fat-tree (Al-Fares et al. 2008): k pods of k/2 edge and k/2
    /// aggregation switches, (k/2)^2 cores, k^3/4 hosts; non-blocking.
    pub fn fat_tree(k: u32, rate: BitRate, delay: Time) -> Result<Topology, TopologyError> {
        if k < 2 || !k.is_multiple_of(2) || k > 64 {
            return Err(TopologyError::FatTreeK { k });
        }
        let half = k / 2;
        let mut t = Topology::empty();
        let hs: Vec<NodeId> = (0..k * half * half).map(|_| t.add_host()).collect();
        let edges: Vec<NodeId> = (0..k * half).map(|_| t.add_switch(0)).collect();
        let aggs: Vec<NodeId> = (0..k * half).map(|_| t.add_switch(1)).collect();
        let cores: Vec<NodeId> = (0..half * half).map(|_| t.add_switch(2)).collect();
        for (i, &h) in hs.iter().enumerate() {
            t.connect(h, edges[i / half as usize], rate, delay);
        }
        for pod in 0..k {
            for e in 0..half {
                for a in 0..half {
                    t.connect(
                        edges[(pod * half + e) as usize],
                        aggs[(pod * half + a) as usize],
                        rate,
                        delay,
                    );
                }
            }
        }
        for pod in 0..k {
            for a in 0..half {
                for c in 0..half {
                    t.connect(
                        aggs[(pod * half + a) as usize],
                        cores[(a * half + c) as usize],
                        rate,
                        delay,
                    );
                }
            }
        }
        Ok(t)
    }

    /// A topology given as a graph, as the ns-3 RDMA model's topology files describe it:
    /// node `i` becomes `NodeId(i)`; the nodes not in `switches` are hosts, numbered in
    /// node order. A switch next to a host is tier 0, any other tier 1 (for d-mod-k).
    /// Each host needs exactly one link, to a switch (one NIC port per host).
    pub fn from_graph(
        nodes: u32,
        switches: &[u32],
        links: &[GraphLink],
    ) -> Result<Topology, TopologyError> {
        let mut is_switch = vec![false; nodes as usize];
        for &s in switches {
            let slot = is_switch
                .get_mut(s as usize)
                .ok_or(TopologyError::SwitchNotANode { switch: s, nodes })?;
            if *slot {
                return Err(TopologyError::SwitchTwice { switch: s });
            }
            *slot = true;
        }
        let mut degree = vec![0u32; nodes as usize];
        let mut near_host = vec![false; nodes as usize];
        for (i, l) in links.iter().enumerate() {
            for end in [l.a, l.b] {
                if end >= nodes {
                    return Err(TopologyError::LinkEndMissing {
                        link: i,
                        a: l.a,
                        b: l.b,
                        end,
                        nodes,
                    });
                }
            }
            if l.a == l.b {
                return Err(TopologyError::LinkToItself { link: i, node: l.a });
            }
            let (sa, sb) = (is_switch[l.a as usize], is_switch[l.b as usize]);
            if !sa && !sb {
                return Err(TopologyError::LinkBetweenHosts {
                    link: i,
                    a: l.a,
                    b: l.b,
                });
            }
            degree[l.a as usize] += 1;
            degree[l.b as usize] += 1;
            near_host[l.a as usize] |= !sb;
            near_host[l.b as usize] |= !sa;
        }
        if let Some(h) = (0..nodes as usize).find(|&n| !is_switch[n] && degree[n] != 1) {
            return Err(TopologyError::HostLinks {
                host: h,
                links: degree[h],
            });
        }
        if is_switch.iter().filter(|s| !**s).count() < 2 {
            return Err(TopologyError::TooFewHosts);
        }
        let mut t = Topology::empty();
        for n in 0..nodes as usize {
            if is_switch[n] {
                t.add_switch(u8::from(!near_host[n]));
            } else {
                t.add_host();
            }
        }
        for l in links {
            t.connect(NodeId(l.a), NodeId(l.b), l.rate, l.delay);
        }
        Ok(t)
    }

    /// A rail-optimized fabric of `servers` servers with `gpus` GPUs each: GPU g of every
    /// server hangs off rail leaf g, and every rail leaf links to every spine at
    /// `uplink_rate`. Hosts are numbered server-major (host = server x gpus + g).
    pub fn rail_optimized(
        servers: u32,
        gpus: u32,
        spines: u32,
        rate: BitRate,
        uplink_rate: BitRate,
        delay: Time,
    ) -> Result<Topology, TopologyError> {
        if servers < 2 || gpus == 0 || spines == 0 {
            return Err(TopologyError::RailShape {
                servers,
                gpus,
                spines,
            });
        }
        let mut t = Topology::empty();
        let hs: Vec<NodeId> = (0..servers * gpus).map(|_| t.add_host()).collect();
        let rails: Vec<NodeId> = (0..gpus).map(|_| t.add_switch(0)).collect();
        let ss: Vec<NodeId> = (0..spines).map(|_| t.add_switch(1)).collect();
        for (h, &host) in hs.iter().enumerate() {
            t.connect(host, rails[h % gpus as usize], rate, delay);
        }
        for &rail in &rails {
            for &spine in &ss {
                t.connect(rail, spine, uplink_rate, delay);
            }
        }
        t.gpus_per_node = gpus;
        Ok(t)
    }

    /// Groups hosts into servers of `gpus` consecutive hosts (an NVLink domain each).
    pub fn set_gpus_per_node(&mut self, gpus: u32) -> Result<(), TopologyError> {
        if gpus == 0 || !self.host_count().is_multiple_of(gpus) {
            return Err(TopologyError::GpusPerNode {
                gpus,
                hosts: self.host_count(),
            });
        }
        self.gpus_per_node = gpus;
        Ok(())
    }

    pub fn gpus_per_node(&self) -> u32 {
        self.gpus_per_node
    }

    pub fn set_nvlink(&mut self, nvlink: Nvlink) {
        self.nvlink = nvlink;
    }

    pub fn nvlink(&self) -> Nvlink {
        self.nvlink
    }

    /// Whether a message from `a` to `b` goes over NVLink (GPUs of one server) rather than
    /// through the NICs.
    pub fn over_nvlink(&self, a: HostId, b: HostId) -> bool {
        self.gpus_per_node > 1 && self.same_server(a, b)
    }

    /// Whether two hosts are GPUs of the same server.
    pub fn same_server(&self, a: HostId, b: HostId) -> bool {
        a.0 / self.gpus_per_node == b.0 / self.gpus_per_node
    }

    pub fn nodes(&self) -> &[NodeKind] {
        &self.nodes
    }
    pub fn ports(&self) -> &[Port] {
        &self.ports
    }
    pub fn port(&self, p: PortId) -> &Port {
        &self.ports[p.index()]
    }
    pub fn node_ports(&self, n: NodeId) -> &[PortId] {
        &self.node_ports[n.index()]
    }
    pub fn host_count(&self) -> u32 {
        self.hosts.len() as u32
    }
    /// The node of host `h`.
    pub fn host_node(&self, h: HostId) -> NodeId {
        self.hosts[h.index()]
    }
    /// The one port of host `h` (hosts have a single NIC port).
    pub fn host_port(&self, h: HostId) -> PortId {
        self.node_ports[self.hosts[h.index()].index()][0]
    }
    pub fn switch_count(&self) -> usize {
        self.nodes
            .iter()
            .filter(|k| matches!(k, NodeKind::Switch { .. }))
            .count()
    }
    /// Hop distances (links) from host `h` to every node, by breadth-first search.
    pub fn distances_from(&self, h: HostId) -> Vec<u32> {
        let mut dist = vec![u32::MAX; self.nodes.len()];
        let start = self.hosts[h.index()];
        dist[start.index()] = 0;
        let mut queue = VecDeque::from([start]);
        while let Some(n) = queue.pop_front() {
            for &p in &self.node_ports[n.index()] {
                let next = self.ports[self.ports[p.index()].peer.index()].node;
                if dist[next.index()] == u32::MAX {
                    dist[next.index()] = dist[n.index()] + 1;
                    queue.push_back(next);
                }
            }
        }
        dist
    }
}

/// Minimal-path forwarding: for every (switch, destination host), the ports on a shortest
/// path, and the static choice among them.
///
/// Every host hangs off one switch, so the shortest paths from a switch to any host of
/// another switch E are its shortest paths to E: the tables are kept per (switch,
/// destination switch), and only the last hop (a switch to its own host) is per host.
/// That keeps them switches x leaves in size, not nodes x hosts: 2.5 MB instead of 115 MB
/// on a k=24 fat-tree, and a routed packet reads a line that is likely in cache.
#[derive(Clone, Debug)]
pub struct Routes {
    /// Per node, its rank among switches (`NO_SWITCH` for hosts).
    switch_rank: Vec<u32>,
    /// Per host: its switch's rank among switches with hosts (the destination group), its
    /// switch's node, and that switch's port toward it.
    group: Vec<u32>,
    attached: Vec<NodeId>,
    down_port: Vec<PortId>,
    groups: usize,
    /// Per (switch rank, destination group): the candidates and which d-mod-k rule picks
    /// among them.
    routes: Vec<Route>,
    /// Per (rule, host): the d-mod-k choice `(d / stride) % len` of each distinct (len,
    /// stride) rule, precomputed so that routing a packet divides nothing.
    choices: Vec<u16>,
    hosts: usize,
    /// Candidate lists; a switch's destinations with the same list share one copy.
    pool: Vec<PortId>,
}

const NO_SWITCH: u32 = u32::MAX;

/// One (switch, destination group) entry: `pool[start..start + len]`; the static choice
/// for host `d` is `start + choices[rule x hosts + d]`.
#[derive(Clone, Copy, Debug, Default)]
struct Route {
    start: u32,
    len: u32,
    rule: u32,
}

impl Routes {
    /// Builds tables for every switch. In a fat-tree or leaf-spine the shortest paths are
    /// exactly the up/down paths. The static choice is d-mod-k: a switch at tier `t` with
    /// `n` candidate ports picks `(dst / n^t) mod n`, so destinations spread evenly.
    /// Errors if some host cannot reach another.
    pub fn minimal(topo: &Topology) -> Result<Routes, TopologyError> {
        Routes::build(topo, None)
    }

    /// Tables for the topology without the links whose ports `dead` marks (indexed by
    /// port; both directions of a failed link): shortest paths around them, as a subnet
    /// manager or routing protocol recomputes them after a failure. Where a switch has no
    /// path left to a destination, it keeps its paths of the whole topology (its traffic
    /// waits at the dead port until the link is back).
    pub fn avoiding(topo: &Topology, dead: &[bool]) -> Routes {
        Routes::build(topo, Some(dead))
            .expect("only the whole topology is checked for connectivity")
    }

    fn build(topo: &Topology, dead: Option<&[bool]>) -> Result<Routes, TopologyError> {
        let hosts = topo.host_count() as usize;
        let nodes = topo.nodes();
        let mut switch_rank = vec![NO_SWITCH; nodes.len()];
        let mut switches = Vec::new();
        for (n, kind) in nodes.iter().enumerate() {
            if let NodeKind::Switch { tier } = *kind {
                switch_rank[n] = switches.len() as u32;
                switches.push((NodeId(n as u32), tier));
            }
        }
        let attached: Vec<NodeId> = (0..hosts)
            .map(|h| {
                topo.port(topo.port(topo.host_port(HostId(h as u32))).peer)
                    .node
            })
            .collect();
        let down_port: Vec<PortId> = (0..hosts)
            .map(|h| topo.port(topo.host_port(HostId(h as u32))).peer)
            .collect();
        // Destination groups: the switches with hosts, in order of their first host.
        let mut group_of_switch = vec![NO_SWITCH; nodes.len()];
        let mut leaders = Vec::new();
        let group: Vec<u32> = (0..hosts)
            .map(|h| {
                let e = attached[h].index();
                if group_of_switch[e] == NO_SWITCH {
                    group_of_switch[e] = leaders.len() as u32;
                    leaders.push(HostId(h as u32));
                }
                group_of_switch[e]
            })
            .collect();
        let groups = leaders.len();
        let mut routes = vec![Route::default(); switches.len() * groups];
        let mut pool = Vec::new();
        // Candidate lists by content, looked up without allocating; never iterated.
        let mut shared: HashMap<Vec<PortId>, u32> = HashMap::new();
        let mut rules: BTreeMap<(usize, usize), u32> = BTreeMap::new();
        let mut dist = vec![u32::MAX; nodes.len()];
        let mut queue = VecDeque::new();
        let mut list: Vec<PortId> = Vec::new();
        // Each port's far node, and which nodes are switches: the loops below read them
        // groups x switch ports times.
        let peer_node: Vec<u32> = topo
            .ports()
            .iter()
            .map(|p| topo.port(p.peer).node.0)
            .collect();
        let is_switch: Vec<bool> = nodes
            .iter()
            .map(|k| matches!(k, NodeKind::Switch { .. }))
            .collect();
        let alive = |p: PortId| dead.is_none_or(|d| !d[p.index()]);
        let mut whole = vec![u32::MAX; nodes.len()];
        for (g, &leader) in leaders.iter().enumerate() {
            let from = attached[leader.index()];
            Routes::switch_distances(
                topo, &peer_node, &is_switch, from, &mut dist, &mut queue, dead,
            );
            if dead.is_some() {
                Routes::switch_distances(
                    topo, &peer_node, &is_switch, from, &mut whole, &mut queue, None,
                );
            }
            // Links go both ways: if the first group reaches every host, all do.
            if let Some(h) = (0..hosts)
                .take(if g == 0 && dead.is_none() { hosts } else { 0 })
                .find(|&h| dist[attached[h].index()] == u32::MAX)
            {
                return Err(TopologyError::NotConnected {
                    host: h,
                    from: leader.0,
                });
            }
            for (rank, &(n, tier)) in switches.iter().enumerate() {
                if n == attached[leader.index()] {
                    continue; // The last hop is per host: `down_port`.
                }
                list.clear();
                let here = dist[n.index()];
                list.extend(topo.node_ports(n).iter().copied().filter(|&p| {
                    alive(p) && dist[peer_node[p.index()] as usize].wrapping_add(1) == here
                }));
                if list.is_empty() && dead.is_some() {
                    let here = whole[n.index()];
                    list.extend(
                        topo.node_ports(n).iter().copied().filter(|&p| {
                            whole[peer_node[p.index()] as usize].wrapping_add(1) == here
                        }),
                    );
                }
                let len = list.len();
                let start = match shared.get(list.as_slice()) {
                    Some(&start) => start,
                    None => {
                        pool.extend_from_slice(&list);
                        let start = (pool.len() - len) as u32;
                        shared.insert(list.clone(), start);
                        start
                    }
                };
                let stride = len.checked_pow(tier as u32).unwrap_or(usize::MAX).max(1);
                let next = rules.len() as u32;
                let rule = *rules.entry((len, stride)).or_insert(next);
                routes[rank * groups + g] = Route {
                    start,
                    len: len as u32,
                    rule,
                };
            }
        }
        let mut choices = vec![0u16; rules.len() * hosts];
        for (&(len, stride), &rule) in &rules {
            for d in 0..hosts {
                choices[rule as usize * hosts + d] = ((d / stride) % len) as u16;
            }
        }
        Ok(Routes {
            switch_rank,
            group,
            attached,
            down_port,
            groups,
            routes,
            choices,
            hosts,
            pool,
        })
    }

    /// Hop distances from switch `from` to every switch, through switches only (hosts
    /// never forward) and live links (`dead` marks the others), into `dist` (`u32::MAX`:
    /// unreachable; hosts stay unreachable).
    fn switch_distances(
        topo: &Topology,
        peer_node: &[u32],
        is_switch: &[bool],
        from: NodeId,
        dist: &mut [u32],
        queue: &mut VecDeque<NodeId>,
        dead: Option<&[bool]>,
    ) {
        dist.fill(u32::MAX);
        dist[from.index()] = 0;
        queue.push_back(from);
        while let Some(n) = queue.pop_front() {
            let d = dist[n.index()] + 1;
            for &p in topo.node_ports(n) {
                let next = peer_node[p.index()] as usize;
                let alive = dead.is_none_or(|d| !d[p.index()]);
                if alive && dist[next] == u32::MAX && is_switch[next] {
                    dist[next] = d;
                    queue.push_back(NodeId(next as u32));
                }
            }
        }
    }

    /// The entry of `switch` toward `dst`, or `None` on `dst`'s own switch.
    #[inline(always)]
    fn route(&self, switch: NodeId, dst: HostId) -> Option<Route> {
        if self.attached[dst.index()] == switch {
            return None;
        }
        Some(self.routes[self.entry(switch, dst)])
    }

    /// Where the entry of `switch` toward `dst` lies in the table.
    #[inline(always)]
    fn entry(&self, switch: NodeId, dst: HostId) -> usize {
        let rank = self.switch_rank[switch.index()] as usize;
        rank * self.groups + self.group[dst.index()] as usize
    }

    /// Asks for the entry [`candidates`](Self::candidates) reads for (`switch`, `dst`)
    /// ahead of its use (see [`crate::prefetch`]): the table outgrows the caches at scale.
    #[inline(always)]
    pub fn prefetch(&self, switch: NodeId, dst: HostId) {
        if let Some(r) = self.routes.get(self.entry(switch, dst)) {
            crate::prefetch::prefetch(r);
        }
    }

    /// Ports of `switch` on a shortest path to host `dst`.
    #[inline(always)]
    pub fn candidates(&self, switch: NodeId, dst: HostId) -> &[PortId] {
        match self.route(switch, dst) {
            Some(r) => &self.pool[r.start as usize..(r.start + r.len) as usize],
            None => std::slice::from_ref(&self.down_port[dst.index()]),
        }
    }

    /// The static (d-mod-k) choice of `switch` toward host `dst`.
    #[inline(always)]
    pub fn static_port(&self, switch: NodeId, dst: HostId) -> PortId {
        match self.route(switch, dst) {
            Some(r) => {
                let choice = self.choices[r.rule as usize * self.hosts + dst.index()];
                self.pool[r.start as usize + choice as usize]
            }
            None => self.down_port[dst.index()],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fat_tree_sizes() {
        let t = Topology::fat_tree(8, BitRate::gbps(400), Time::from_ns(25)).unwrap();
        assert_eq!(t.host_count(), 128);
        assert_eq!(t.switch_count(), 80);
        // Every switch has k ports.
        for (n, kind) in t.nodes().iter().enumerate() {
            if matches!(kind, NodeKind::Switch { .. }) {
                assert_eq!(t.node_ports(NodeId(n as u32)).len(), 8);
            }
        }
    }

    #[test]
    fn fat_tree_static_routes_are_minimal_and_spread() {
        let t = Topology::fat_tree(4, BitRate::gbps(100), Time::from_ns(10)).unwrap();
        let r = Routes::minimal(&t).unwrap();
        // Edge switch of host 0: two up-candidates toward a remote pod; hosts 8 and 9
        // (same remote edge) go up different ports.
        let edge = t.port(t.port(t.host_port(HostId(0))).peer).node;
        assert_eq!(r.candidates(edge, HostId(8)).len(), 2);
        assert_ne!(
            r.static_port(edge, HostId(8)),
            r.static_port(edge, HostId(9))
        );
        // Toward a local host there is one way down.
        assert_eq!(
            r.candidates(edge, HostId(1)),
            &[t.port(t.host_port(HostId(1))).peer]
        );
    }

    #[test]
    fn graph_topology_keeps_node_ids_and_numbers_hosts_in_order() {
        let link = |a, b| GraphLink {
            a,
            b,
            rate: BitRate::gbps(100),
            delay: Time::from_ns(1),
        };
        // Switches 1 and 3 in a line; hosts 0, 2, 4.
        let links = [link(0, 1), link(1, 3), link(2, 1), link(3, 4)];
        let t = Topology::from_graph(5, &[1, 3], &links).unwrap();
        assert_eq!(t.host_count(), 3);
        assert_eq!(t.host_node(HostId(1)), NodeId(2));
        assert_eq!(t.nodes()[1], NodeKind::Switch { tier: 0 });
        assert!(Routes::minimal(&t).is_ok());
        let between = Topology::from_graph(5, &[1, 3], &[link(0, 2)]).unwrap_err();
        assert_eq!(
            between,
            TopologyError::LinkBetweenHosts {
                link: 0,
                a: 0,
                b: 2
            }
        );
        assert!(between.to_string().contains("two hosts"), "{between}");
        let unlinked = Topology::from_graph(5, &[1, 3], &links[..3]).unwrap_err();
        assert_eq!(unlinked, TopologyError::HostLinks { host: 4, links: 0 });
        assert!(unlinked.to_string().contains("host node 4 has 0 links"));
        let stray = Topology::from_graph(5, &[7], &links).unwrap_err();
        assert_eq!(
            stray,
            TopologyError::SwitchNotANode {
                switch: 7,
                nodes: 5
            }
        );
        assert_eq!(
            stray.to_string(),
            "switch id 7 is not a node (the file has nodes 0 to 4)"
        );
    }

    /// The tables kept per destination switch give, for every (switch, host), exactly the
    /// ports on a shortest path to that host and its d-mod-k choice, as computed from
    /// the host's own distances.
    #[test]
    fn routes_per_destination_switch_equal_the_per_host_definition() {
        let r = BitRate::gbps(100);
        let topologies = [
            Topology::fat_tree(4, r, Time::ZERO).unwrap(),
            Topology::leaf_spine(10, 4, 3, r, r, Time::ZERO).unwrap(),
            Topology::rail_optimized(3, 4, 2, r, r, Time::ZERO).unwrap(),
        ];
        for t in &topologies {
            let routes = Routes::minimal(t).unwrap();
            for d in 0..t.host_count() {
                let dist = t.distances_from(HostId(d));
                for (n, kind) in t.nodes().iter().enumerate() {
                    let NodeKind::Switch { tier } = *kind else {
                        continue;
                    };
                    let want: Vec<PortId> = t
                        .node_ports(NodeId(n as u32))
                        .iter()
                        .copied()
                        .filter(|&p| dist[t.port(t.port(p).peer).node.index()] + 1 == dist[n])
                        .collect();
                    let got = routes.candidates(NodeId(n as u32), HostId(d));
                    assert_eq!(got, want.as_slice(), "switch {n} to host {d}");
                    let stride = want.len().pow(tier as u32).max(1) as u32;
                    let choice = want[((d / stride) % want.len() as u32) as usize];
                    assert_eq!(routes.static_port(NodeId(n as u32), HostId(d)), choice);
                }
            }
        }
    }

    #[test]
    fn rail_optimized_puts_each_gpu_on_its_rail() {
        let t =
            Topology::rail_optimized(4, 8, 2, BitRate::gbps(400), BitRate::gbps(400), Time::ZERO)
                .unwrap();
        assert_eq!(t.host_count(), 32);
        let leaf = |h: u32| t.port(t.port(t.host_port(HostId(h))).peer).node;
        // GPU 3 of servers 0 and 2 share rail 3's leaf; GPUs 3 and 4 of one server do not.
        assert_eq!(leaf(3), leaf(2 * 8 + 3));
        assert_ne!(leaf(3), leaf(4));
        assert!(t.same_server(HostId(8), HostId(15)) && !t.same_server(HostId(7), HostId(8)));
        let hops = |a: u32, b: u32| t.distances_from(HostId(a))[t.host_node(HostId(b)).index()];
        assert_eq!(hops(3, 11), 2, "same rail: through the rail leaf");
        assert_eq!(hops(3, 12), 4, "other rail: up to a spine");
    }

    #[test]
    fn routes_avoiding_a_dead_uplink_go_around_it_and_keep_unreachable_paths() {
        // 2 leaves of 2 hosts, 2 spines.
        let t = Topology::leaf_spine(4, 2, 2, BitRate::gbps(100), BitRate::gbps(100), Time::ZERO)
            .unwrap();
        let leaf = |h: u32| t.port(t.port(t.host_port(HostId(h))).peer).node;
        let (leaf0, leaf1) = (leaf(0), leaf(2));
        let to_spine = |from: NodeId| -> Vec<PortId> {
            t.node_ports(from)
                .iter()
                .copied()
                .filter(|&p| {
                    matches!(
                        t.nodes()[t.port(t.port(p).peer).node.index()],
                        NodeKind::Switch { .. }
                    )
                })
                .collect()
        };
        let up = to_spine(leaf0);
        let whole = Routes::minimal(&t).unwrap();
        assert_eq!(whole.candidates(leaf0, HostId(2)), &up[..]);
        let mut dead = vec![false; t.ports().len()];
        dead[up[0].index()] = true;
        dead[t.port(up[0]).peer.index()] = true;
        let around = Routes::avoiding(&t, &dead);
        assert_eq!(around.candidates(leaf0, HostId(2)), &up[1..]);
        // Leaf 1 reaches leaf 0's hosts through the live spine only.
        let spine1 = t.port(t.port(up[1]).peer).node;
        let via: Vec<NodeId> = around
            .candidates(leaf1, HostId(0))
            .iter()
            .map(|&p| t.port(t.port(p).peer).node)
            .collect();
        assert_eq!(via, vec![spine1]);
        // Leaf 0 cut off from both spines keeps its paths: nothing is left to choose.
        dead[up[1].index()] = true;
        dead[t.port(up[1]).peer.index()] = true;
        let cut = Routes::avoiding(&t, &dead);
        assert_eq!(cut.candidates(leaf0, HostId(2)), &up[..]);
    }

    #[test]
    fn leaf_spine_spreads_hosts() {
        let t = Topology::leaf_spine(10, 4, 2, BitRate::gbps(100), BitRate::gbps(200), Time::ZERO)
            .unwrap();
        assert_eq!(t.host_count(), 10);
        let leaf_hosts: Vec<usize> = t
            .nodes()
            .iter()
            .enumerate()
            .filter(|(_, k)| **k == NodeKind::Switch { tier: 0 })
            .map(|(n, _)| t.node_ports(NodeId(n as u32)).len() - 2)
            .collect();
        assert_eq!(leaf_hosts, vec![3, 3, 2, 2]);
        assert!(
            Topology::leaf_spine(3, 4, 1, BitRate::gbps(1), BitRate::gbps(1), Time::ZERO).is_err()
        );
    }
}
