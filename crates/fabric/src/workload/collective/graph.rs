//! The message graph of one channel of a collective: rings (flat, compact and
//! hierarchical), chains, all-to-all and halving-doubling.

use super::{share, Collective, CollectiveOp};
use crate::workload::{Dep, Message, Pipeline, Workload};

/// GPU memory traffic per byte a ring step's piece takes before it is forwarded: the
/// block received at step k - 1 is reduced into the rank's own (two reads, one write)
/// while step k - 1 was one of the first `reducing`, else copied (a read and a write).
fn passes(k: usize, reducing: usize) -> u8 {
    if k - 1 < reducing {
        3
    } else {
        2
    }
}

/// Builds one channel's messages.
pub(super) struct Graph<'a> {
    pub(super) c: &'a Collective,
    pub(super) w: &'a mut Workload,
    /// A mix of the channel and the communicator's ranks: what its connections' ids
    /// are mixed from.
    connection_seed: u64,
}

impl<'a> Graph<'a> {
    /// The graph of `c`'s channel `channel`, appended to `w`.
    pub(super) fn new(c: &'a Collective, w: &'a mut Workload, channel: u64) -> Graph<'a> {
        let mut x = 0xC0FF_EE00u64 ^ channel;
        for r in &c.ranks {
            x = (x ^ u64::from(r.0)).wrapping_mul(0x100_0000_01B3);
        }
        Graph {
            c,
            w,
            connection_seed: x,
        }
    }
}

impl Graph<'_> {
    pub(super) fn n(&self) -> usize {
        self.c.ranks.len()
    }

    pub(super) fn send(
        &mut self,
        from: usize,
        to: usize,
        size: u64,
        after: Vec<u32>,
        follows: Option<u32>,
    ) -> u32 {
        let deps = after.into_iter().map(Dep::from).collect();
        self.send_deps(from, to, size, deps, follows)
    }

    pub(super) fn send_deps(
        &mut self,
        from: usize,
        to: usize,
        size: u64,
        after: Vec<Dep>,
        follows: Option<u32>,
    ) -> u32 {
        let m = Message {
            src: self.c.ranks[from],
            dst: self.c.ranks[to],
            size: self.c.protocol.wire_bytes(size),
            start: self.c.start,
            sl: self.c.sl,
            local: None,
        };
        let connection = self.connection(from, to);
        self.w.push_on(connection, m, after, follows)
    }

    /// The connection from rank `from` to rank `to` on this channel: one per channel and
    /// peer of the communicator (its ranks), as NCCL opens them.
    pub(super) fn connection(&self, from: usize, to: usize) -> u32 {
        let pair = (u64::from(self.c.ranks[from].0) << 32) | u64::from(self.c.ranks[to].0);
        let x = (self.connection_seed ^ pair.wrapping_mul(0x9E37_79B9_7F4A_7C15))
            .wrapping_mul(0xBF58_476D_1CE4_E5B9);
        (x ^ (x >> 31)) as u32
    }

    /// Pieces a transfer of `bytes` is pipelined in.
    pub(super) fn pieces(&self, bytes: u64) -> u64 {
        bytes.div_ceil(self.c.chunk).max(1)
    }

    /// Ring steps over all ranks: all-reduce is n-1 reduce-scatter steps then n-1
    /// all-gather steps, each moving one of n blocks to the next rank; reduce-scatter and
    /// all-gather are one phase.
    pub(super) fn ring(&mut self, bytes: u64) {
        let n = self.n();
        let steps = match self.c.op {
            CollectiveOp::AllReduce => 2 * (n - 1),
            _ => n - 1,
        };
        let reducing = match self.c.op {
            CollectiveOp::AllReduce | CollectiveOp::ReduceScatter => n - 1,
            _ => 0,
        };
        let members: Vec<usize> = (0..n).collect();
        self.ring_over(&members, bytes, steps, reducing, &vec![Vec::new(); n]);
    }

    /// A ring of `steps` steps over `members` (rank indices, in ring order) moving
    /// `bytes` in as many blocks as members. A member's first send waits for
    /// `ready[i]` (its data); piece p of step k waits for piece p of step k-1 to reach the
    /// member, and follows the member's previous piece on its connection. The first
    /// `reducing` steps deliver data the receiver reduces into its own before forwarding
    /// it; later steps' data is copied (`Workload::prepared`). Returns, per member, the
    /// last message it received.
    pub(super) fn ring_over(
        &mut self,
        members: &[usize],
        bytes: u64,
        steps: usize,
        reducing: usize,
        ready: &[Vec<Dep>],
    ) -> Vec<Option<u32>> {
        let m = members.len();
        let blocks = m as u64;
        let pieces = self.pieces(bytes.div_ceil(blocks));
        if self.w.compact {
            return self.compact_ring(members, bytes, steps, pieces, reducing, ready);
        }
        let mut prev: Vec<Vec<u32>> = Vec::new();
        let mut last_own: Vec<Option<u32>> = vec![None; m];
        for k in 0..steps {
            let mut now: Vec<Vec<u32>> = vec![Vec::with_capacity(pieces as usize); m];
            for i in 0..m {
                // The block member i forwards at step k (only its size matters here).
                let block = ((i + m * 2 - k % m) % m) as u64;
                let size = share(bytes, blocks, block);
                for p in 0..pieces {
                    let after = if k > 0 {
                        vec![Dep::from(prev[(i + m - 1) % m][p as usize])]
                    } else {
                        ready[i].clone()
                    };
                    let (from, to) = (members[i], members[(i + 1) % m]);
                    let id = self.send_deps(from, to, share(size, pieces, p), after, last_own[i]);
                    if k > 0 {
                        self.w.prepared.push((id, passes(k, reducing)));
                    }
                    last_own[i] = Some(id);
                    now[i].push(id);
                }
            }
            prev = now;
        }
        (0..m)
            .map(|i| prev.get((i + m - 1) % m).and_then(|v| v.last().copied()))
            .collect()
    }

    /// The compact ring (flow level): each member sends one message to the next,
    /// carrying its `steps` blocks of `bytes / members` (to a byte per step), once both
    /// ends are ready; the pipeline's step latencies are left to the model
    /// ([`Pipeline::Ring`]). Returns, per member, the message it receives.
    pub(super) fn compact_ring(
        &mut self,
        members: &[usize],
        bytes: u64,
        steps: usize,
        pieces: u64,
        reducing: usize,
        ready: &[Vec<Dep>],
    ) -> Vec<Option<u32>> {
        let m = members.len();
        let data = (steps as u128 * bytes as u128 / m as u128) as u64;
        let pipeline = Pipeline::Ring {
            steps: steps as u32,
            pieces: pieces as u32,
            passes: (1..steps).map(|k| passes(k, reducing) as u32).sum(),
        };
        let mut received = vec![None; m];
        for i in 0..m {
            let next = (i + 1) % m;
            let mut after = ready[i].clone();
            after.extend(ready[next].iter().filter(|d| !ready[i].contains(d)));
            let id = self.send_deps(members[i], members[next], data, after, None);
            self.w.pipelined.push((id, pipeline));
            received[next] = Some(id);
        }
        for i in 0..m {
            let edge = received[(i + 1) % m].expect("every member sends");
            let upstream = received[i].expect("every member receives");
            self.w.feeds.push((edge, upstream));
        }
        received
    }

    /// A compact chain or tree edge (flow level): the whole transfer in one message
    /// ([`Pipeline::Chain`]), fed by `upstream`, the edges that bring `from` each piece
    /// (see [`Workload::feeds`]).
    pub(super) fn compact_edge(
        &mut self,
        from: usize,
        to: usize,
        bytes: u64,
        after: &[Dep],
        upstream: &[u32],
    ) -> u32 {
        let pieces = self.pieces(bytes) as u32;
        let id = self.send_deps(from, to, bytes, after.to_vec(), None);
        self.w.pipelined.push((id, Pipeline::Chain { pieces }));
        self.w.feeds.extend(upstream.iter().map(|&u| (id, u)));
        id
    }

    /// NCCL-style hierarchical all-reduce over servers of `group` consecutive ranks: a
    /// reduce-scatter ring inside each server (NVLink), then per local GPU index an
    /// all-reduce ring across servers (one rail each) on that GPU's share, then an
    /// all-gather ring inside each server.
    pub(super) fn hierarchical(&mut self, bytes: u64, initial: &[Vec<Dep>]) -> Vec<Option<u32>> {
        let (n, g) = (self.n(), self.c.group as usize);
        let servers = n / g;
        let local = |s: usize| -> Vec<usize> { (s * g..(s + 1) * g).collect() };
        let deps = |last: Option<u32>| -> Vec<Dep> { last.into_iter().map(Dep::from).collect() };
        let mut ready: Vec<Option<u32>> = vec![None; n];
        for s in 0..servers {
            let starts: Vec<Vec<Dep>> = local(s).iter().map(|&r| initial[r].clone()).collect();
            let got = self.ring_over(&local(s), bytes, g - 1, g - 1, &starts);
            // After the reduce-scatter, GPU i holds the reduced block i+1 (mod g); its
            // size is the share carried across servers.
            for (i, last) in got.into_iter().enumerate() {
                ready[s * g + i] = last;
            }
        }
        for l in 0..g {
            let members: Vec<usize> = (0..servers).map(|s| s * g + l).collect();
            let starts: Vec<Vec<Dep>> = members.iter().map(|&r| deps(ready[r])).collect();
            let share_bytes = share(bytes, g as u64, ((l + 1) % g) as u64);
            let got = self.ring_over(
                &members,
                share_bytes,
                2 * (servers - 1),
                servers - 1,
                &starts,
            );
            for (j, last) in got.into_iter().enumerate() {
                ready[members[j]] = last.or(ready[members[j]]);
            }
        }
        let mut done = vec![None; n];
        for s in 0..servers {
            let starts: Vec<Vec<Dep>> = local(s).iter().map(|&r| deps(ready[r])).collect();
            let got = self.ring_over(&local(s), bytes, g - 1, 0, &starts);
            for (i, last) in got.into_iter().enumerate() {
                done[s * g + i] = last;
            }
        }
        done
    }

    /// SHARP: one message per rank carrying its buffer into the switches' aggregation tree
    /// (source and destination are the rank itself: the fabric routes it up the tree and
    /// the result back down), registered as one aggregation group.
    pub(super) fn sharp(&mut self, bytes: u64) {
        let first = self.w.messages.len() as u32;
        for r in 0..self.n() {
            self.send(r, r, bytes, Vec::new(), None);
        }
        let end = self.w.messages.len() as u32;
        self.w.sharp_groups.push(first..end);
    }

    /// Broadcast as a pipelined chain from the root along the ring order.
    pub(super) fn chain(&mut self, bytes: u64) {
        let n = self.n();
        let root = self.c.root as usize;
        if self.w.compact {
            let mut upstream = None;
            for hop in 0..n - 1 {
                let (from, to) = ((root + hop) % n, (root + hop + 1) % n);
                let feeds: Vec<u32> = upstream.into_iter().collect();
                upstream = Some(self.compact_edge(from, to, bytes, &[], &feeds));
            }
            return;
        }
        let pieces = self.pieces(bytes);
        let mut prev: Vec<u32> = Vec::new();
        for hop in 0..n - 1 {
            let (from, to) = ((root + hop) % n, (root + hop + 1) % n);
            let mut now = Vec::with_capacity(pieces as usize);
            for p in 0..pieces {
                let after = if hop > 0 {
                    vec![prev[p as usize]]
                } else {
                    Vec::new()
                };
                let follows = now.last().copied();
                now.push(self.send(from, to, share(bytes, pieces, p), after, follows));
            }
            prev = now;
        }
    }

    /// Every rank sends its `bytes / n` share to every other rank at once. With PXN on
    /// servers of `group` ranks, a share for another server's GPU on another rail goes
    /// first over NVLink to the sender's server's GPU on that rail, which sends it on from
    /// its own NIC when it has come in.
    pub(super) fn all_to_all(&mut self, bytes: u64) {
        let (n, g) = (self.n(), self.c.group as usize);
        let pxn = self.w.connections.pxn && g > 1 && n.is_multiple_of(g);
        for r in 0..n {
            for d in 1..n {
                let to = (r + d) % n;
                let size = share(bytes, n as u64, to as u64);
                let relay = r - r % g + to % g;
                if pxn && r / g != to / g && relay != r {
                    let hop = self.send(r, relay, size, Vec::new(), None);
                    self.send(relay, to, size, vec![hop], None);
                } else {
                    self.send(r, to, size, Vec::new(), None);
                }
            }
        }
    }

    /// Recursive halving (reduce-scatter: at step k exchange half of what is left with the
    /// rank 2^(L-k-1) away) then recursive doubling (all-gather: the reverse). Each step
    /// waits for the previous step's data from the previous partner and for the rank's
    /// own previous send (the data it sends was reduced or gathered by then).
    pub(super) fn halving_doubling(&mut self, bytes: u64) {
        let n = self.n();
        let levels = n.trailing_zeros() as usize;
        let blocks = n as u64;
        let span = |count: u64| count * (bytes / blocks) + count.min(bytes % blocks);
        // (partner distance, blocks sent) per step.
        let mut steps: Vec<(usize, u64)> = Vec::new();
        if self.c.op != CollectiveOp::AllGather {
            steps.extend((0..levels).map(|k| (n >> (k + 1), (n >> (k + 1)) as u64)));
        }
        if self.c.op != CollectiveOp::ReduceScatter {
            steps.extend((0..levels).map(|k| (1 << k, 1u64 << k)));
        }
        let mut prev: Vec<u32> = Vec::new();
        let mut prev_distance = 0;
        for (distance, count) in steps {
            let now: Vec<u32> = (0..n)
                .map(|r| {
                    let mut after = Vec::with_capacity(2);
                    if !prev.is_empty() {
                        after.push(prev[r ^ prev_distance]);
                        after.push(prev[r]);
                    }
                    self.send(r, r ^ distance, span(count), after, None)
                })
                .collect();
            prev = now;
            prev_distance = distance;
        }
    }
}
