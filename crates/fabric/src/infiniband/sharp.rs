//! SHARP (Scalable Hierarchical Aggregation and Reduction Protocol) aggregation trees: a
//! tree of switches rooted at the top tier. Each rank's HCA streams its buffer up to its
//! leaf switch; a switch that holds one chunk from every tree child sends the reduced
//! chunk to its parent; the root sends the result down, and every switch replicates it to
//! its children, so each rank sends its buffer once and receives the result once.
//!
//! Simplification (stated, not hidden): the switches' aggregation units take every
//! arriving chunk at once, returning its credits, and hold partial sums without limit;
//! real SHARP bounds them with its own flow control.

use crate::driver::BuildError;
use fabricsim_core::topology::{NodeKind, Topology};
use fabricsim_core::units::{HostId, NodeId, PortId};
use std::collections::VecDeque;
use std::ops::Range;

/// One aggregation group on its tree.
#[derive(Clone, Debug)]
pub(super) struct SharpGroup {
    /// Per topology node: the egress port toward the tree parent (None at the root and
    /// off the tree).
    pub up: Vec<Option<PortId>>,
    /// Per node: egress ports toward its tree children (switches and ranks' hosts).
    pub down: Vec<Vec<PortId>>,
    /// Per node: contributions received per chunk.
    arrived: Vec<Vec<u16>>,
    /// Per host: result chunks received, and the rank's flow.
    pub received: Vec<u32>,
    pub flow_of_host: Vec<Option<u32>>,
    pub chunks: u32,
    /// Links from the farthest rank's host up to the root.
    pub depth: u32,
}

impl SharpGroup {
    /// The tree over `ranks` (the hosts of `flows`, in order), for messages of `chunks`
    /// packets. The root is the lowest-numbered switch of the top tier; every switch hangs
    /// off its breadth-first parent toward the root.
    pub fn build(
        topo: &Topology,
        ranks: &[HostId],
        flows: Range<u32>,
        chunks: u32,
    ) -> Result<SharpGroup, BuildError> {
        let nodes = topo.nodes();
        let tier = |n: usize| match nodes[n] {
            NodeKind::Switch { tier } => Some(tier),
            NodeKind::Host(_) => None,
        };
        let root = (0..nodes.len())
            .filter(|&n| tier(n).is_some())
            .max_by_key(|&n| (tier(n), std::cmp::Reverse(n)))
            .ok_or(BuildError::SharpWithoutSwitches)?;
        let mut up = ports_toward(topo, root);
        let mut down: Vec<Vec<PortId>> = vec![Vec::new(); nodes.len()];
        let mut on_tree = vec![false; nodes.len()];
        let mut depth = 0;
        let mut flow_of_host = vec![None; topo.host_count() as usize];
        for (i, &h) in ranks.iter().enumerate() {
            flow_of_host[h.index()] = Some(flows.start + i as u32);
            let host_port = topo.host_port(h);
            let leaf_port = topo.port(host_port).peer;
            let leaf = topo.port(leaf_port).node.index();
            down[leaf].push(leaf_port);
            // Walk up to the root, adding each switch to its parent's children once.
            let mut n = leaf;
            while !on_tree[n] {
                on_tree[n] = true;
                let Some(p) = up[n] else {
                    if n != root {
                        return Err(BuildError::SharpUnreachable { host: h.0 });
                    }
                    break;
                };
                let parent_port = topo.port(p).peer;
                let parent = topo.port(parent_port).node.index();
                down[parent].push(parent_port);
                n = parent;
            }
            let mut links = 1;
            let mut m = leaf;
            while let Some(p) = up[m] {
                m = topo.port(topo.port(p).peer).node.index();
                links += 1;
            }
            depth = depth.max(links);
        }
        for (n, list) in down.iter_mut().enumerate() {
            if !on_tree[n] {
                up[n] = None;
            }
            list.sort_unstable();
        }
        Ok(SharpGroup {
            arrived: down
                .iter()
                .map(|d| {
                    if d.is_empty() {
                        Vec::new()
                    } else {
                        vec![0; chunks as usize]
                    }
                })
                .collect(),
            up,
            down,
            received: vec![0; topo.host_count() as usize],
            flow_of_host,
            chunks,
            depth,
        })
    }

    /// A contribution to chunk `c` reached switch `node`; true once every tree child of
    /// `node` has contributed it.
    pub fn contribute(&mut self, node: NodeId, c: u32) -> bool {
        let count = &mut self.arrived[node.index()][c as usize];
        *count += 1;
        *count as usize == self.down[node.index()].len()
    }
}

/// Each switch's port toward its parent on the breadth-first tree of switch-to-switch
/// links from `root` (None for the root, hosts and switches it does not reach).
fn ports_toward(topo: &Topology, root: usize) -> Vec<Option<PortId>> {
    let nodes = topo.nodes();
    let is_switch = |n: usize| matches!(nodes[n], NodeKind::Switch { .. });
    let mut up: Vec<Option<PortId>> = vec![None; nodes.len()];
    let mut seen = vec![false; nodes.len()];
    seen[root] = true;
    let mut queue = VecDeque::from([root]);
    while let Some(n) = queue.pop_front() {
        for &p in topo.node_ports(NodeId(n as u32)) {
            let peer = topo.port(topo.port(p).peer).node.index();
            if is_switch(peer) && !seen[peer] {
                seen[peer] = true;
                up[peer] = Some(topo.port(p).peer);
                queue.push_back(peer);
            }
        }
    }
    up
}
