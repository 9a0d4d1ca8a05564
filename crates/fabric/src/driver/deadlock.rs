//! Deadlock detection over a wait-for graph of queues and the buffers they wait on.

use crate::report::DeadlockHop;
use fabricsim_core::topology::Topology;
use fabricsim_core::units::PortId;

/// A snapshot of blocked queues for deadlock detection. Queues and buffers are numbered
/// by the fabric (e.g. egress port x VL, ingress port x VL).
#[derive(Clone, Debug, Default)]
pub struct WaitGraph {
    /// Per queue: the downstream buffer it waits on, or None if it is not blocked.
    pub waits_on: Vec<Option<usize>>,
    /// Per queue: how much of each buffer's contents it holds, as (buffer, amount).
    pub holds: Vec<Vec<(usize, u64)>>,
    /// Per buffer: its whole occupancy; 0 for a buffer that cannot block its upstream.
    pub occupancy: Vec<u64>,
}

impl WaitGraph {
    /// A deadlock, exactly: the largest set of blocked queues in which each waits on a
    /// buffer whose whole occupancy sits in queues of the set. Nothing in such a set can
    /// move again: each buffer drains only through blocked queues. Returns one cycle of
    /// the set (each queue followed by a queue holding part of the buffer it waits on),
    /// or None.
    pub fn find_deadlock(&self) -> Option<Vec<usize>> {
        let mut inside: Vec<bool> = self.waits_on.iter().map(Option::is_some).collect();
        let mut held = vec![0u64; self.occupancy.len()];
        loop {
            held.iter_mut().for_each(|h| *h = 0);
            for (q, _) in inside.iter().enumerate().filter(|(_, &i)| i) {
                for &(b, amount) in &self.holds[q] {
                    held[b] += amount;
                }
            }
            let mut changed = false;
            for (q, i) in inside.iter_mut().enumerate().filter(|(_, i)| **i) {
                let b = self.waits_on[q].expect("only blocked queues are inside");
                if self.occupancy[b] == 0 || held[b] != self.occupancy[b] {
                    *i = false;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        let mut path = vec![inside.iter().position(|&i| i)?];
        loop {
            let b = self.waits_on[*path.last().expect("non-empty")].expect("blocked");
            let next = (0..inside.len())
                .find(|&q| inside[q] && self.holds[q].iter().any(|&(hb, a)| hb == b && a > 0))
                .expect("a buffer of the set is held by queues of the set");
            if let Some(at) = path.iter().position(|&q| q == next) {
                return Some(path.split_off(at));
            }
            path.push(next);
        }
    }
}

/// Whether the directed graph of `edges` (pairs of node ids) has a cycle. Every deadlock
/// of blocked egresses contains a cycle of switches, each with an egress blocked toward
/// the next, so a fabric builds the exact `WaitGraph` (which walks every queued packet)
/// only when the switch-level graph of its blocked egresses has one. Sorts `edges`.
pub fn has_cycle(edges: &mut Vec<(u32, u32)>) -> bool {
    edges.sort_unstable();
    edges.dedup();
    let mut nodes: Vec<u32> = edges.iter().flat_map(|&(a, b)| [a, b]).collect();
    nodes.sort_unstable();
    nodes.dedup();
    let index = |n: u32| nodes.binary_search(&n).expect("a node of an edge");
    let successors = |n: u32| {
        let from = edges.partition_point(|&(a, _)| a < n);
        let to = edges.partition_point(|&(a, _)| a <= n);
        &edges[from..to]
    };
    // 0: not seen, 1: on the current path, 2: done.
    let mut state = vec![0u8; nodes.len()];
    for &root in &nodes {
        if state[index(root)] != 0 {
            continue;
        }
        // Depth-first, with each frame's next successor to try.
        let mut stack = vec![(root, 0usize)];
        state[index(root)] = 1;
        while let Some(&mut (n, ref mut next)) = stack.last_mut() {
            let out = successors(n);
            if let Some(&(_, m)) = out.get(*next) {
                *next += 1;
                match state[index(m)] {
                    1 => return true,
                    0 => {
                        state[index(m)] = 1;
                        stack.push((m, 0));
                    }
                    _ => {}
                }
            } else {
                state[index(n)] = 2;
                stack.pop();
            }
        }
    }
    false
}

/// The egress `port` as a hop of a reported deadlock cycle.
pub fn deadlock_hop(topo: &Topology, port: PortId) -> DeadlockHop {
    let spec = topo.port(port);
    DeadlockHop {
        node: spec.node.0,
        port: spec.local,
        peer_node: topo.port(spec.peer).node.0,
    }
}
