//! NCCL's NVLS all-reduce (NVLink SHARP): on one server NCCL's NVLS, across servers its
//! NVLS-tree.
//!
//! Each GPU of a server owns a slice of the buffer (NCCL's NVLS channels, one head per
//! GPU). Inside a server the NVSwitch reduces each slice for its owner and multicasts the
//! result back ([`NvSwitchOp`]): per GPU the NVLink carries the buffer plus a slice each
//! way, and the GPUs reduce nothing. Across servers the owners of one slice, one per
//! server and so on one rail, all-reduce their sums over NCCL's double binary tree (two
//! trees, each carrying half the slice), before each multicasts the result.

use super::graph::Graph;
use super::share;
use super::tree::TreeShape;
use crate::workload::{Dep, Local, Message, NvSwitchOp, Pipeline};

impl Graph<'_> {
    /// One channel's NVLS all-reduce of `bytes`; a server's reductions wait for
    /// `ready[rank]` of each of its ranks. Returns, per rank, the multicasts whose
    /// arrival completes the all-reduce there.
    pub(super) fn nvls(&mut self, bytes: u64, ready: &[Vec<Dep>]) -> Vec<Vec<u32>> {
        let (n, g) = (self.n(), self.c.group as usize);
        let servers = n / g;
        // A server's reductions read every GPU's buffer: they wait for all its ranks.
        let server_ready: Vec<Vec<Dep>> = (0..servers)
            .map(|s| {
                let mut all: Vec<Dep> = Vec::new();
                for d in ready[s * g..(s + 1) * g].iter().flatten() {
                    if !all.contains(d) {
                        all.push(*d);
                    }
                }
                all
            })
            .collect();
        let mut done = vec![Vec::new(); n];
        let halves = if servers > 1 { 2 } else { 1 };
        for owner in 0..g {
            let slice = share(bytes, g as u64, owner as u64);
            // The slice's owner in each server.
            let owners: Vec<usize> = (0..servers).map(|s| s * g + owner).collect();
            for half in 0..halves {
                let part = share(slice, halves, half);
                let shape = TreeShape::over(servers, half == 1);
                let got = if self.w.compact {
                    self.compact_nvls_tree(&shape, &owners, part, &server_ready)
                } else {
                    self.nvls_tree(&shape, &owners, part, &server_ready)
                };
                for (s, multicast) in got.into_iter().enumerate() {
                    for d in &mut done[s * g..(s + 1) * g] {
                        d.push(multicast);
                    }
                }
            }
        }
        done
    }

    /// One tree of one slice (its owner in server s is rank `at[s]`), in pieces: each
    /// server's reduction, the sums up the tree, the result down, each server's
    /// multicast. Returns each server's last multicast.
    fn nvls_tree(
        &mut self,
        shape: &TreeShape,
        at: &[usize],
        bytes: u64,
        ready: &[Vec<Dep>],
    ) -> Vec<u32> {
        let servers = at.len();
        let pieces = self.pieces(bytes);
        let mut reduced: Vec<Option<u32>> = vec![None; servers];
        let mut up: Vec<Option<u32>> = vec![None; servers];
        let mut down: Vec<Option<u32>> = vec![None; servers];
        let mut cast: Vec<Option<u32>> = vec![None; servers];
        for p in 0..pieces {
            let size = share(bytes, pieces, p);
            // A channel's operations on the NVSwitch go one piece at a time: each waits
            // for its previous one to land (NCCL's channel works through its pieces in
            // turn), so the server's channels share the NVSwitch as they run.
            let after_own = |s: usize, own: Option<u32>| match own {
                Some(o) => vec![Dep::from(o)],
                None => ready[s].clone(),
            };
            for (s, r) in reduced.iter_mut().enumerate() {
                let after = after_own(s, *r);
                *r = Some(self.nvswitch(at[s], NvSwitchOp::Reduce, size, after));
            }
            // The sums a server has once its children's have come in.
            let summed = |s: usize, up: &[Option<u32>], reduced: &[Option<u32>]| -> Vec<Dep> {
                let mut after = vec![Dep::from(reduced[s].expect("reduced"))];
                after.extend(
                    shape.children[s]
                        .iter()
                        .map(|&c| Dep::from(up[c].expect("sent"))),
                );
                after
            };
            for &s in shape.order.iter().skip(1).rev() {
                let parent = shape.parent[s].expect("not the root");
                let after = summed(s, &up, &reduced);
                up[s] = Some(self.send_deps(at[s], at[parent], size, after, up[s]));
            }
            for &s in &shape.order {
                let result = match shape.parent[s] {
                    None => summed(s, &up, &reduced),
                    Some(parent) => {
                        // The root's children take the root's sum, the others what came
                        // down to their parent.
                        let after = match down[parent] {
                            Some(d) => vec![Dep::from(d)],
                            None => summed(parent, &up, &reduced),
                        };
                        let d = self.send_deps(at[parent], at[s], size, after, down[s]);
                        down[s] = Some(d);
                        vec![Dep::from(d)]
                    }
                };
                let mut after = result;
                after.extend(cast[s].map(Dep::from));
                cast[s] = Some(self.nvswitch(at[s], NvSwitchOp::Multicast, size, after));
            }
        }
        cast.into_iter().map(|c| c.expect("a piece")).collect()
    }

    /// The same tree at flow level: each step one compact edge of the whole part, fed by
    /// the edges that bring it each piece. Returns each server's multicast.
    fn compact_nvls_tree(
        &mut self,
        shape: &TreeShape,
        at: &[usize],
        bytes: u64,
        ready: &[Vec<Dep>],
    ) -> Vec<u32> {
        let servers = at.len();
        let pieces = self.pieces(bytes) as u32;
        let mut reduced = vec![0u32; servers];
        for (s, r) in reduced.iter_mut().enumerate() {
            let id = self.nvswitch(at[s], NvSwitchOp::Reduce, bytes, ready[s].clone());
            self.w.pipelined.push((id, Pipeline::Chain { pieces }));
            *r = id;
        }
        let mut up = vec![None; servers];
        let sums = |s: usize, up: &[Option<u32>]| -> Vec<u32> {
            let mut feeds = vec![reduced[s]];
            feeds.extend(shape.children[s].iter().filter_map(|&c| up[c]));
            feeds
        };
        for &s in shape.order.iter().skip(1).rev() {
            let parent = shape.parent[s].expect("not the root");
            let feeds = sums(s, &up);
            up[s] = Some(self.compact_edge(at[s], at[parent], bytes, &ready[s], &feeds));
        }
        let mut down: Vec<Option<u32>> = vec![None; servers];
        let mut cast = vec![0u32; servers];
        for &s in &shape.order {
            let result = match shape.parent[s] {
                None => sums(s, &up),
                Some(parent) => {
                    let feeds = match down[parent] {
                        Some(d) => vec![d],
                        None => sums(parent, &up),
                    };
                    let d = self.compact_edge(at[parent], at[s], bytes, &ready[parent], &feeds);
                    down[s] = Some(d);
                    vec![d]
                }
            };
            let id = self.nvswitch(at[s], NvSwitchOp::Multicast, bytes, ready[s].clone());
            self.w.pipelined.push((id, Pipeline::Chain { pieces }));
            self.w.feeds.extend(result.iter().map(|&u| (id, u)));
            cast[s] = id;
        }
        cast
    }

    /// An NVLink SHARP operation of rank `owner`'s slice on its server's NVSwitch.
    fn nvswitch(&mut self, owner: usize, op: NvSwitchOp, size: u64, after: Vec<Dep>) -> u32 {
        let gpu = self.c.ranks[owner];
        let m = Message {
            src: gpu,
            dst: gpu,
            size,
            start: self.c.start,
            sl: self.c.sl,
            local: Some(Local::NvSwitch(op)),
        };
        let connection = self.connection(owner, owner);
        self.w.push_on(connection, m, after, None)
    }
}
