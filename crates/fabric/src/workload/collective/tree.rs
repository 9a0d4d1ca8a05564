//! NCCL's trees: the double binary tree over the ranks or, node-aware, over the servers
//! with a chain inside each.

use super::graph::Graph;
use super::{by_server, share, Collective};
use crate::workload::Dep;

impl Graph<'_> {
    /// One of NCCL's two trees (`mirrored` the second), each carrying half the data:
    /// pieces reduce up to the root, then broadcast down, pipelined ([`TreeShape`]).
    /// Ranks wait for `ready[rank]` before their first send; returns, per rank, the
    /// messages whose arrival completes the all-reduce there.
    pub(super) fn tree(
        &mut self,
        bytes: u64,
        mirrored: bool,
        channel: usize,
        ready: &[Vec<Dep>],
    ) -> Vec<Vec<u32>> {
        let shape = TreeShape::new(self.c, mirrored, channel);
        let n = self.n();
        let mut done = vec![Vec::new(); n];
        if self.w.compact {
            // A piece climbs from the leaves to the root, then descends. The edge up from
            // each rank, then the edge down into it.
            let mut up = vec![None; n];
            let mut down = vec![None; n];
            for &r in shape.order.iter().skip(1).rev() {
                let parent = shape.parent[r].expect("not the root");
                let feeds: Vec<u32> = shape.children[r].iter().filter_map(|&c| up[c]).collect();
                let id = self.compact_edge(r, parent, bytes, &ready[r], &feeds);
                up[r] = Some(id);
                if shape.parent[parent].is_none() {
                    done[parent].push(id);
                }
            }
            for &r in shape.order.iter().skip(1) {
                let parent = shape.parent[r].expect("not the root");
                let feeds: Vec<u32> = match down[parent] {
                    Some(d) => vec![d],
                    None => shape.children[parent]
                        .iter()
                        .filter_map(|&c| up[c])
                        .collect(),
                };
                let id = self.compact_edge(parent, r, bytes, &ready[parent], &feeds);
                down[r] = Some(id);
                done[r].push(id);
            }
            return done;
        }
        let pieces = self.pieces(bytes);
        let root = shape.order[0];
        // Up: rank r sends piece p to its parent after its children's piece p.
        let mut up = vec![Vec::with_capacity(pieces as usize); n];
        // Down: the message that brought piece p to rank r.
        let mut down = vec![Vec::with_capacity(pieces as usize); n];
        for p in 0..pieces as usize {
            let size = share(bytes, pieces, p as u64);
            for &r in shape.order.iter().skip(1).rev() {
                let mut after: Vec<Dep> = shape.children[r]
                    .iter()
                    .map(|&c| Dep::from(up[c][p]))
                    .collect();
                if p == 0 {
                    after.extend(ready[r].iter().cloned());
                }
                let follows = p.checked_sub(1).map(|q| up[r][q]);
                let parent = shape.parent[r].expect("not the root");
                let id = self.send_deps(r, parent, size, after, follows);
                up[r].push(id);
            }
            for &r in shape.order.iter().skip(1) {
                let parent = shape.parent[r].expect("not the root");
                let mut after: Vec<Dep> = if parent == root {
                    shape.children[root]
                        .iter()
                        .map(|&c| Dep::from(up[c][p]))
                        .collect()
                } else {
                    vec![Dep::from(down[parent][p])]
                };
                if p == 0 && parent == root {
                    after.extend(ready[root].iter().cloned());
                }
                let follows = p.checked_sub(1).map(|q| down[r][q]);
                let id = self.send_deps(parent, r, size, after, follows);
                down[r].push(id);
            }
        }
        for r in 0..n {
            if r == root {
                done[r].extend(
                    shape.children[root]
                        .iter()
                        .filter_map(|&c| up[c].last().copied()),
                );
            } else {
                done[r].extend(down[r].last().copied());
            }
        }
        done
    }
}

/// The shape of one of NCCL's trees over a collective's ranks (rank indices).
///
/// On GPU servers whose ranks come server by server (`group` GPUs each, at least two
/// servers), NCCL's node-aware tree: a chain through each server's GPUs (NVLink), its
/// head (the channel's GPU, so that channels use every rail) linked to the heads of
/// other servers by a binary tree over the servers (heap layout: server j's parent is
/// (j - 1) / 2; the second tree over the servers in reverse order, so most leaves of one
/// are inner nodes of the other: NCCL's double binary tree). Otherwise the same binary
/// trees over the ranks themselves.
pub(super) struct TreeShape {
    /// Each rank's parent (None for the root).
    pub(super) parent: Vec<Option<usize>>,
    pub(super) children: Vec<Vec<usize>>,
    /// Every rank, each after its parent; the root first.
    pub(super) order: Vec<usize>,
}

impl TreeShape {
    fn new(c: &Collective, mirrored: bool, channel: usize) -> TreeShape {
        let n = c.ranks.len();
        let g = if by_server(&c.ranks, c.group) {
            c.group as usize
        } else {
            1
        };
        TreeShape::chained(n / g, g, mirrored, channel)
    }

    /// One of the two binary trees over `servers` units (indices 0 to servers - 1), as
    /// NCCL's double binary tree lays them out.
    pub(super) fn over(servers: usize, mirrored: bool) -> TreeShape {
        TreeShape::chained(servers, 1, mirrored, 0)
    }

    /// The tree over `servers` servers of `g` ranks each (ranks numbered server by
    /// server), a chain inside each headed by the channel's GPU.
    fn chained(servers: usize, g: usize, mirrored: bool, channel: usize) -> TreeShape {
        let n = servers * g;
        let server = |j: usize| if mirrored { servers - 1 - j } else { j };
        // Server s's GPUs in chain order, its head first.
        let chain =
            |s: usize| -> Vec<usize> { (0..g).map(|k| s * g + (channel + k) % g).collect() };
        let mut parent = vec![None; n];
        let mut order = Vec::with_capacity(n);
        for j in 0..servers {
            let members = chain(server(j));
            if j > 0 {
                parent[members[0]] = Some(chain(server((j - 1) / 2))[0]);
            }
            for k in 1..g {
                parent[members[k]] = Some(members[k - 1]);
            }
            order.extend(members);
        }
        let mut children = vec![Vec::new(); n];
        for &r in &order {
            if let Some(p) = parent[r] {
                children[p].push(r);
            }
        }
        TreeShape {
            parent,
            children,
            order,
        }
    }
}
