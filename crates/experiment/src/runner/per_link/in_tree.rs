//! A simulated port's in-tree: what of the network its simulation keeps (every link and
//! switch its units cross before it, back to their sources' own links), and the small
//! topology built from it.

use super::{LinkFlow, LinkSim, Unit, Wire};
use fabricsim_core::topology::{GraphLink, NodeKind, Topology};
use fabricsim_core::units::{BitRate, HostId, PortId, Time};
use fabricsim_fabric::workload::Workload;
use std::collections::BTreeMap;

/// A link into a switch of a port's simulation, and what feeds it: the links into the
/// switch it comes from that the port's messages come in on, back to their sources' own
/// links (the port's in-tree along its messages' paths).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Feed {
    pub(super) link: Wire,
    /// Ports of the switch it comes from; 0 where it is a source host's own link.
    pub(super) upstream_ports: u32,
    /// The links into that switch that feed it, in port order (none from a host).
    pub(super) feeds: Vec<Feed>,
}

impl Feed {
    /// The source hosts' own links behind it, depth first (its own where it is one).
    pub(super) fn sources(&self, out: &mut Vec<Wire>) {
        if self.feeds.is_empty() {
            out.push(self.link);
        }
        for f in &self.feeds {
            f.sources(out);
        }
    }
}

fn wire(topo: &Topology, p: PortId) -> Wire {
    let port = topo.port(p);
    (port.rate.bps(), port.delay.ps())
}

fn is_host(topo: &Topology, p: PortId) -> bool {
    matches!(topo.nodes()[topo.port(p).node.index()], NodeKind::Host(_))
}

/// Ports of the node that port `q` leaves.
fn ports_at(topo: &Topology, q: PortId) -> u32 {
    topo.node_ports(topo.port(q).node).len() as u32
}

/// A leaf of a port's in-tree: a unit's ports before the port's switch, the parts its
/// message is cut into (`Unit::share`), and for a part the unit itself: each part comes
/// from a source link of its own at its share of the source's rate (so that it is also
/// its ideal's rate), where whole messages from one source share its link.
type Leaf<'a> = (&'a [u32], u32, u32);

/// Port `p`'s simulation for the units `flows` (each with its hop at `p`).
pub(super) fn link_sim(
    topo: &Topology,
    w: &Workload,
    units: &[Unit],
    p: PortId,
    flows: &[(u32, usize)],
) -> LinkSim {
    let leaves_host = is_host(topo, p);
    let peer = topo.port(p).peer;
    let reaches_host = is_host(topo, peer);
    // Each unit's leaf (`Leaf`, owned): its ports before p, nearest first (none where p
    // leaves a host), its share, and for a part the unit.
    let keys: Vec<(Vec<u32>, u32, u32)> = flows
        .iter()
        .map(|&(u, hop)| {
            let unit = &units[u as usize];
            let before = unit.path[..hop].iter().rev().map(|q| q.0).collect();
            let part_of = if unit.share > 1 { u } else { u32::MAX };
            (before, unit.share, part_of)
        })
        .collect();
    // The in-tree's leaves: in sorted order they are its sources depth first, and their
    // first ports the links into p's switch in port order.
    let mut prefixes: BTreeMap<Leaf, ()> = BTreeMap::new();
    let mut ingress: BTreeMap<u32, ()> = BTreeMap::new();
    let mut dsts: BTreeMap<u32, ()> = BTreeMap::new();
    for (&(u, _), key) in flows.iter().zip(&keys) {
        if !leaves_host {
            ingress.insert(key.0[0], ());
            prefixes.insert((&key.0, key.1, key.2), ());
        }
        dsts.insert(w.messages[units[u as usize].message as usize].dst.0, ());
    }
    let slot = |map: &BTreeMap<u32, ()>, k: u32| map.range(..k).count() as u32;
    let link_flows = flows
        .iter()
        .zip(&keys)
        .enumerate()
        .map(|(i, (&(u, _), key))| {
            let unit = &units[u as usize];
            let msg = &w.messages[unit.message as usize];
            let (group, source) = if leaves_host {
                (0, 0)
            } else {
                let source = prefixes.range(..(key.0.as_slice(), key.1, key.2)).count() as u32;
                (slot(&ingress, key.0[0]), source)
            };
            LinkFlow {
                message: i as u32,
                group,
                source,
                dst: if reaches_host {
                    0
                } else {
                    slot(&dsts, msg.dst.0)
                },
                size: unit.size,
                start: msg.start.ps(),
                sl: msg.sl,
            }
        })
        .collect();
    let own = wire(topo, p);
    let leaves: Vec<Leaf> = prefixes.into_keys().collect();
    LinkSim {
        port: own,
        from_ports: if leaves_host { 0 } else { ports_at(topo, p) },
        to_ports: if reaches_host {
            0
        } else {
            ports_at(topo, peer)
        },
        groups: feeds(topo, &leaves, 0),
        dsts: if reaches_host {
            Vec::new()
        } else {
            dsts.keys()
                .map(|&h| {
                    let (rate, delay) = wire(topo, topo.host_port(HostId(h)));
                    (rate.max(own.0), delay)
                })
                .collect()
        },
        flows: link_flows,
    }
}

/// The feeds of the in-tree whose leaves are `prefixes` (sorted, each a message's ports
/// before a switch, nearest first), from their ports at `depth`: the links into the
/// switch `depth` hops back, in port order, each with the links that feed it in turn.
/// Beyond the links into the port's switch, a link fed by one link no faster cannot
/// queue: what feeds it comes straight on, over both delays.
fn feeds(topo: &Topology, prefixes: &[Leaf], depth: usize) -> Vec<Feed> {
    let mut out = Vec::new();
    let mut rest = prefixes;
    while let Some(first) = rest.first() {
        let q = first.0[depth];
        let n = rest.iter().take_while(|l| l.0[depth] == q).count();
        let (these, after) = rest.split_at(n);
        rest = after;
        let port = PortId(q);
        let link = wire(topo, port);
        if is_host(topo, port) {
            // A source's own link, once for its whole messages and once for each
            // sprayed part, at its share of it.
            for &(_, share, _) in these {
                out.push(Feed {
                    link: (link.0 / u64::from(share), link.1),
                    upstream_ports: 0,
                    feeds: Vec::new(),
                });
            }
            continue;
        }
        let mut behind = feeds(topo, these, depth + 1);
        out.push(match behind.as_slice() {
            [only] if depth > 0 && only.link.0 <= link.0 => {
                let mut only = behind.pop().expect("one feed");
                only.link.1 += link.1;
                only
            }
            _ => Feed {
                link,
                upstream_ports: ports_at(topo, port),
                feeds: behind,
            },
        });
    }
    out
}

/// A port's simulation's topology, with the host of each source (depth first, as
/// `LinkFlow::source` counts them) and of each destination slot.
pub(super) struct MiniTopology {
    pub(super) topo: Topology,
    pub(super) sources: Vec<HostId>,
    pub(super) dsts: Vec<HostId>,
}

/// A small graph being built: nodes (switch or host), links, and each node's degree.
#[derive(Default)]
struct Graph {
    switches: Vec<u32>,
    links: Vec<GraphLink>,
    degree: Vec<u32>,
    hosts: u32,
}

impl Graph {
    /// A new host node and its host number.
    fn host(&mut self) -> (u32, HostId) {
        self.degree.push(0);
        self.hosts += 1;
        (self.degree.len() as u32 - 1, HostId(self.hosts - 1))
    }

    fn switch(&mut self) -> u32 {
        self.degree.push(0);
        let n = self.degree.len() as u32 - 1;
        self.switches.push(n);
        n
    }

    fn link(&mut self, a: u32, b: u32, (rate, delay): Wire) {
        self.degree[a as usize] += 1;
        self.degree[b as usize] += 1;
        self.links.push(GraphLink {
            a,
            b,
            rate: BitRate(rate),
            delay: Time(delay),
        });
    }

    /// `feed` into `switch`, with what feeds it in turn, its source hosts added to
    /// `sources` depth first.
    fn feed(&mut self, switch: u32, feed: &Feed, sources: &mut Vec<HostId>) {
        if feed.upstream_ports == 0 {
            let (h, id) = self.host();
            self.link(h, switch, feed.link);
            sources.push(id);
            return;
        }
        let u = self.switch();
        self.link(u, switch, feed.link);
        for f in &feed.feeds {
            self.feed(u, f, sources);
        }
        self.pad(u, feed.upstream_ports, feed.feeds[0].link);
    }

    /// Idle hosts on `switch` until it has `ports` ports, on links like `like`.
    fn pad(&mut self, switch: u32, ports: u32, like: Wire) {
        while self.degree[switch as usize] < ports {
            let (h, _) = self.host();
            self.link(switch, h, like);
        }
    }
}

impl LinkSim {
    /// Its topology, the host of each source (depth first) and of each destination slot.
    pub(super) fn topology(&self) -> Result<MiniTopology, String> {
        let mut g = Graph::default();
        let (from, sources) = if self.from_ports == 0 {
            let (h, id) = g.host();
            (h, vec![id])
        } else {
            let a = g.switch();
            let mut sources = Vec::new();
            for group in &self.groups {
                g.feed(a, group, &mut sources);
            }
            (a, sources)
        };
        let dsts = if self.to_ports == 0 {
            let (h, id) = g.host();
            g.link(from, h, self.port);
            vec![id]
        } else {
            let b = g.switch();
            g.link(from, b, self.port);
            let hosts = self
                .dsts
                .iter()
                .map(|&d| {
                    let (h, id) = g.host();
                    g.link(b, h, d);
                    id
                })
                .collect();
            g.pad(b, self.to_ports, self.port);
            hosts
        };
        if self.from_ports > 0 {
            g.pad(from, self.from_ports, self.port);
        }
        let topo = Topology::from_graph(g.degree.len() as u32, &g.switches, &g.links)?;
        Ok(MiniTopology {
            topo,
            sources,
            dsts,
        })
    }
}
