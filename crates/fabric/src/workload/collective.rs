//! Collectives as message graphs, in the way NCCL runs them: each step is an RDMA WRITE
//! from one rank to another, posted once the data it carries has arrived (and, as on one
//! connection, after the sender's previous message to that peer). Congestion and
//! stragglers therefore delay everything downstream. Reductions are taken to be free
//! (GPU reduction kernels overlap the transfers).
//!
//! `size` follows nccl-tests: the buffer of all-reduce and broadcast, the whole output of
//! all-gather, the whole input of reduce-scatter, the send buffer of all-to-all.

use super::{Dep, Message, Pipeline, Workload};
use fabricsim_core::units::{HostId, Time};
use std::collections::BTreeMap;

/// A collective operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CollectiveOp {
    AllReduce,
    ReduceScatter,
    AllGather,
    AllToAll,
    Broadcast,
}

impl CollectiveOp {
    pub const NAMES: [&'static str; 5] = [
        "all-reduce",
        "reduce-scatter",
        "all-gather",
        "all-to-all",
        "broadcast",
    ];
    const ALL: [CollectiveOp; 5] = [
        CollectiveOp::AllReduce,
        CollectiveOp::ReduceScatter,
        CollectiveOp::AllGather,
        CollectiveOp::AllToAll,
        CollectiveOp::Broadcast,
    ];

    pub fn parse(s: &str) -> Option<Self> {
        let i = Self::NAMES.iter().position(|n| *n == s)?;
        Some(Self::ALL[i])
    }

    pub fn name(self) -> &'static str {
        Self::NAMES[Self::ALL.iter().position(|o| *o == self).expect("listed")]
    }

    /// nccl-tests' bus-bandwidth factor for `n` ranks: busbw = algbw x factor
    /// (nccl-tests doc/PERFORMANCE.md).
    pub fn bus_factor(self, n: u32) -> f64 {
        let n = n as f64;
        match self {
            CollectiveOp::AllReduce => 2.0 * (n - 1.0) / n,
            CollectiveOp::ReduceScatter | CollectiveOp::AllGather | CollectiveOp::AllToAll => {
                (n - 1.0) / n
            }
            CollectiveOp::Broadcast => 1.0,
        }
    }

    /// The algorithm used when the scenario names none.
    pub fn default_algorithm(self) -> CollectiveAlgorithm {
        match self {
            CollectiveOp::AllToAll => CollectiveAlgorithm::Direct,
            _ => CollectiveAlgorithm::Ring,
        }
    }

    /// nccl-tests' redop column: "sum" for reductions, "none" otherwise.
    pub fn redop(self) -> &'static str {
        match self {
            CollectiveOp::AllReduce | CollectiveOp::ReduceScatter => "sum",
            _ => "none",
        }
    }
}

/// How a collective's data moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CollectiveAlgorithm {
    /// Ranks in a ring, each sending to the next (every op but all-to-all; broadcast is a
    /// pipelined chain from the root).
    Ring,
    /// NCCL's double binary tree: two trees, each carrying half the data, reduce up and
    /// broadcast down, pipelined in chunks (all-reduce).
    Tree,
    /// Recursive halving then doubling (Rabenseifner) over a power-of-two number of ranks
    /// (all-reduce, reduce-scatter, all-gather).
    HalvingDoubling,
    /// NCCL-style on GPU servers: reduce-scatter inside each server over NVLink, an
    /// all-reduce ring per rail across servers, all-gather inside each server (all-reduce).
    Hierarchical,
    /// Every rank sends to every other at once (all-to-all).
    Direct,
    /// In-network aggregation on InfiniBand switches (NVIDIA SHARP): each rank sends its
    /// buffer once up an aggregation tree of switches and receives the result once
    /// (all-reduce).
    Sharp,
}

impl CollectiveAlgorithm {
    pub const NAMES: [&'static str; 6] = [
        "ring",
        "tree",
        "halving-doubling",
        "hierarchical",
        "direct",
        "sharp",
    ];
    const ALL: [CollectiveAlgorithm; 6] = [
        CollectiveAlgorithm::Ring,
        CollectiveAlgorithm::Tree,
        CollectiveAlgorithm::HalvingDoubling,
        CollectiveAlgorithm::Hierarchical,
        CollectiveAlgorithm::Direct,
        CollectiveAlgorithm::Sharp,
    ];

    pub fn parse(s: &str) -> Option<Self> {
        let i = Self::NAMES.iter().position(|n| *n == s)?;
        Some(Self::ALL[i])
    }

    pub fn name(self) -> &'static str {
        Self::NAMES[Self::ALL.iter().position(|a| *a == self).expect("listed")]
    }
}

/// NCCL's pipelining unit for the Simple protocol: a 4 MiB buffer in 8 steps
/// (NCCL_BUFFSIZE and NCCL_STEPS defaults), so 512 KiB.
pub const DEFAULT_CHUNK: u64 = 512 << 10;

/// NCCL's wire protocols, as NCCL's src/include/device.h lays out their buffers: what a
/// step carries and how many bytes its data takes on the wire.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NcclProtocol {
    /// Data as is, flags in writes of their own (not counted here).
    #[default]
    Simple,
    /// 128-byte lines of 16 eight-byte elements, 15 of data and 1 flag
    /// (NCCL_LL128_LINEELEMS, NCCL_LL128_DATAELEMS).
    Ll128,
    /// 16-byte lines of two 4-byte data words, each with its 4-byte flag.
    Ll,
}

impl NcclProtocol {
    pub const NAMES: [&'static str; 3] = ["simple", "ll128", "ll"];
    const ALL: [NcclProtocol; 3] = [NcclProtocol::Simple, NcclProtocol::Ll128, NcclProtocol::Ll];

    pub fn parse(s: &str) -> Option<Self> {
        let i = Self::NAMES.iter().position(|n| *n == s)?;
        Some(Self::ALL[i])
    }

    pub fn name(self) -> &'static str {
        Self::NAMES[Self::ALL.iter().position(|p| *p == self).expect("listed")]
    }

    /// (data bytes, wire bytes) of one line.
    fn line(self) -> (u64, u64) {
        match self {
            NcclProtocol::Simple => (1, 1),
            NcclProtocol::Ll128 => (120, 128),
            NcclProtocol::Ll => (8, 16),
        }
    }

    /// The bytes `data` bytes take on the wire: whole lines.
    pub fn wire_bytes(self, data: u64) -> u64 {
        let (d, l) = self.line();
        data.div_ceil(d) * l
    }

    /// Data bytes per step: the protocol's default buffer over NCCL_STEPS (8), less its
    /// flags. Simple: 4 MiB / 8. LL128: 120 elements x 640 threads x 8 steps x 8 B =
    /// 4,915,200 B (NCCL_LL128_ELEMS_PER_THREAD, NCCL_LL128_MAX_NTHREADS), / 8 x 15/16 =
    /// 576,000 B. LL: 8 lines x 512 threads x 8 steps x 16 B = 512 KiB
    /// (NCCL_LL_LINES_PER_THREAD, NCCL_LL_MAX_NTHREADS), / 8 / 2 = 32 KiB.
    pub fn default_chunk(self) -> u64 {
        match self {
            NcclProtocol::Simple => DEFAULT_CHUNK,
            NcclProtocol::Ll128 => 576_000,
            NcclProtocol::Ll => 32 << 10,
        }
    }
}

/// A collective over `ranks` (hosts, in ring order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Collective {
    pub op: CollectiveOp,
    pub algorithm: CollectiveAlgorithm,
    pub ranks: Vec<HostId>,
    pub size: u64,
    pub start: Time,
    /// Independent copies of the algorithm, each carrying a share of the data on its own
    /// connections (NCCL channels).
    pub channels: u32,
    /// Pipelining unit of ring, tree and broadcast steps (data bytes).
    pub chunk: u64,
    /// The wire protocol: each message carries its data in the protocol's lines.
    pub protocol: NcclProtocol,
    pub sl: u8,
    /// Broadcast: the root, as an index into `ranks`.
    pub root: u32,
    /// Ranks per server (consecutive in `ranks`), for the hierarchical algorithm.
    pub group: u32,
}

impl Collective {
    /// Checks that the algorithm applies to the op and the ranks.
    pub fn validate(&self) -> Result<(), String> {
        use CollectiveAlgorithm as A;
        use CollectiveOp as O;
        let n = self.ranks.len();
        if n < 2 {
            return Err(format!("{n} ranks: a collective needs at least 2"));
        }
        let ok = match self.algorithm {
            A::Ring => self.op != O::AllToAll,
            A::Tree => self.op == O::AllReduce,
            A::HalvingDoubling => matches!(self.op, O::AllReduce | O::ReduceScatter | O::AllGather),
            A::Direct => self.op == O::AllToAll,
            A::Hierarchical | A::Sharp => self.op == O::AllReduce,
        };
        if !ok {
            return Err(format!(
                "algorithm \"{}\" does not apply to op \"{}\"",
                self.algorithm.name(),
                self.op.name()
            ));
        }
        if self.algorithm == A::HalvingDoubling && !n.is_power_of_two() {
            return Err(format!(
                "halving-doubling needs a power-of-two number of ranks, not {n}"
            ));
        }
        if self.algorithm == A::Hierarchical {
            let g = self.group as usize;
            if g < 2 || !n.is_multiple_of(g) || n / g < 2 {
                return Err(format!(
                    "hierarchical needs several servers of several GPUs each: {n} ranks in servers of {g}"
                ));
            }
        }
        if self.root as usize >= n {
            return Err(format!(
                "root {} is not a rank index (0 to {})",
                self.root,
                n - 1
            ));
        }
        if self.channels == 0 || self.chunk == 0 {
            return Err("channels and chunk must be at least 1".into());
        }
        if self.algorithm == A::Sharp && self.protocol != NcclProtocol::Simple {
            return Err(format!(
                "protocol {}: SHARP (NCCL's CollNet) runs the Simple protocol",
                self.protocol.name()
            ));
        }
        Ok(())
    }
}

/// `total` split into `parts` near-equal shares (the first `total % parts` one larger).
pub(crate) fn share(total: u64, parts: u64, i: u64) -> u64 {
    total / parts + u64::from(i < total % parts)
}

/// Appends the collective's messages to `w`, dependencies included.
pub(crate) fn expand(c: &Collective, w: &mut Workload) {
    for ch in 0..c.channels as u64 {
        let bytes = share(c.size, c.channels as u64, ch);
        let mut g = Graph { c, w };
        match (c.op, c.algorithm) {
            (CollectiveOp::AllToAll, _) => g.all_to_all(bytes),
            (CollectiveOp::Broadcast, _) => g.chain(bytes),
            (_, CollectiveAlgorithm::Tree) => {
                let none = vec![Vec::new(); c.ranks.len()];
                g.tree(share(bytes, 2, 0), false, ch as usize, &none);
                g.tree(share(bytes, 2, 1), true, ch as usize, &none);
            }
            (_, CollectiveAlgorithm::HalvingDoubling) => g.halving_doubling(bytes),
            (_, CollectiveAlgorithm::Sharp) => g.sharp(bytes),
            (_, CollectiveAlgorithm::Hierarchical) => {
                g.hierarchical(bytes, &vec![Vec::new(); c.ranks.len()]);
            }
            _ => g.ring(bytes),
        }
    }
}

/// Appends an all-reduce (ring, tree or hierarchical) whose ranks may start only when
/// `ready[rank]` is met (and after their compute delays there); returns, per rank, the
/// messages whose arrival completes the all-reduce there (one per channel).
pub(crate) fn expand_all_reduce_after(
    c: &Collective,
    w: &mut Workload,
    ready: &[Vec<Dep>],
) -> Vec<Vec<u32>> {
    let n = c.ranks.len();
    let mut done = vec![Vec::new(); n];
    for ch in 0..c.channels as u64 {
        let bytes = share(c.size, c.channels as u64, ch);
        let mut g = Graph { c, w };
        let last: Vec<Vec<u32>> = match c.algorithm {
            CollectiveAlgorithm::Hierarchical => g
                .hierarchical(bytes, ready)
                .into_iter()
                .map(|l| l.into_iter().collect())
                .collect(),
            CollectiveAlgorithm::Tree => {
                let mut a = g.tree(share(bytes, 2, 0), false, ch as usize, ready);
                let b = g.tree(share(bytes, 2, 1), true, ch as usize, ready);
                for (x, y) in a.iter_mut().zip(b) {
                    x.extend(y);
                }
                a
            }
            _ => {
                let members: Vec<usize> = (0..n).collect();
                g.ring_over(&members, bytes, 2 * (n - 1), n - 1, ready)
                    .into_iter()
                    .map(|l| l.into_iter().collect())
                    .collect()
            }
        };
        for (r, l) in last.into_iter().enumerate() {
            done[r].extend(l);
        }
    }
    done
}

/// Appends any collective whose ranks may start only when `ready[rank]` is met: the
/// messages that start it (those waiting for nothing else) get the rank's dependencies.
/// Returns, per rank, the last message it receives from each peer.
pub(crate) fn expand_after(c: &Collective, w: &mut Workload, ready: &[Vec<Dep>]) -> Vec<Vec<u32>> {
    let first = w.messages.len();
    expand(c, w);
    let rank_of = |h: HostId| c.ranks.iter().position(|&r| r == h).expect("a rank");
    let mut last: Vec<BTreeMap<usize, u32>> = vec![BTreeMap::new(); c.ranks.len()];
    for i in first..w.messages.len() {
        let m = w.messages[i];
        let (src, dst) = (rank_of(m.src), rank_of(m.dst));
        if w.after[i].is_empty() {
            w.after[i] = ready[src].clone();
        }
        last[dst].insert(src, i as u32);
    }
    last.into_iter()
        .map(|l| l.into_values().collect())
        .collect()
}

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
struct Graph<'a> {
    c: &'a Collective,
    w: &'a mut Workload,
}

impl Graph<'_> {
    fn n(&self) -> usize {
        self.c.ranks.len()
    }

    fn send(
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

    fn send_deps(
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
        self.w.push(m, after, follows)
    }

    /// Pieces a transfer of `bytes` is pipelined in.
    fn pieces(&self, bytes: u64) -> u64 {
        bytes.div_ceil(self.c.chunk).max(1)
    }

    /// Ring steps over all ranks: all-reduce is n-1 reduce-scatter steps then n-1
    /// all-gather steps, each moving one of n blocks to the next rank; reduce-scatter and
    /// all-gather are one phase.
    fn ring(&mut self, bytes: u64) {
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
    fn ring_over(
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
    fn compact_ring(
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
    fn compact_edge(
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
    fn hierarchical(&mut self, bytes: u64, initial: &[Vec<Dep>]) -> Vec<Option<u32>> {
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
    fn sharp(&mut self, bytes: u64) {
        let first = self.w.messages.len() as u32;
        for r in 0..self.n() {
            self.send(r, r, bytes, Vec::new(), None);
        }
        let end = self.w.messages.len() as u32;
        self.w.sharp_groups.push(first..end);
    }

    /// Broadcast as a pipelined chain from the root along the ring order.
    fn chain(&mut self, bytes: u64) {
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

    /// Every rank sends its `bytes / n` share to every other rank at once.
    fn all_to_all(&mut self, bytes: u64) {
        let n = self.n();
        for r in 0..n {
            for d in 1..n {
                let to = (r + d) % n;
                self.send(r, to, share(bytes, n as u64, to as u64), Vec::new(), None);
            }
        }
    }

    /// Recursive halving (reduce-scatter: at step k exchange half of what is left with the
    /// rank 2^(L-k-1) away) then recursive doubling (all-gather: the reverse). Each step
    /// waits for the previous step's data from the previous partner and for the rank's
    /// own previous send (the data it sends was reduced or gathered by then).
    fn halving_doubling(&mut self, bytes: u64) {
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

    /// One of NCCL's two trees (`mirrored` the second), each carrying half the data:
    /// pieces reduce up to the root, then broadcast down, pipelined ([`TreeShape`]).
    /// Ranks wait for `ready[rank]` before their first send; returns, per rank, the
    /// messages whose arrival completes the all-reduce there.
    fn tree(
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
struct TreeShape {
    /// Each rank's parent (None for the root).
    parent: Vec<Option<usize>>,
    children: Vec<Vec<usize>>,
    /// Every rank, each after its parent; the root first.
    order: Vec<usize>,
}

impl TreeShape {
    fn new(c: &Collective, mirrored: bool, channel: usize) -> TreeShape {
        let n = c.ranks.len();
        let g = if by_server(&c.ranks, c.group) {
            c.group as usize
        } else {
            1
        };
        let servers = n / g;
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

/// Whether `ranks` come server by server in servers of `group` GPUs (hosts numbered
/// server by server), with at least two servers.
pub fn by_server(ranks: &[HostId], group: u32) -> bool {
    let g = group as usize;
    g > 1
        && ranks.len().is_multiple_of(g)
        && ranks.len() / g >= 2
        && ranks
            .chunks(g)
            .all(|s| s.iter().all(|h| h.0 / group == s[0].0 / group))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes host `rank` receives in `w`.
    fn received_by(w: &Workload, rank: u32) -> u64 {
        w.messages
            .iter()
            .filter(|m| m.dst == HostId(rank))
            .map(|m| m.size)
            .sum()
    }

    fn collective(op: CollectiveOp, algorithm: CollectiveAlgorithm, n: u32) -> Collective {
        Collective {
            op,
            algorithm,
            ranks: (0..n).map(HostId).collect(),
            size: 8 << 20,
            start: Time::ZERO,
            channels: 1,
            chunk: 1 << 20,
            protocol: NcclProtocol::Simple,
            sl: 0,
            root: 0,
            group: 1,
        }
    }

    fn bytes_sent_by(w: &Workload, rank: u32) -> u64 {
        w.messages
            .iter()
            .filter(|m| m.src == HostId(rank))
            .map(|m| m.size)
            .sum()
    }

    #[test]
    fn each_rank_sends_what_the_bus_factor_says() {
        use CollectiveAlgorithm as A;
        use CollectiveOp as O;
        // busbw / algbw = bytes each rank sends / size, for the bandwidth-optimal algorithms.
        // Counted by hand for 8 ranks: all-reduce sends 7 of 8 blocks to reduce and 7 to
        // share (14/8 of the buffer); reduce-scatter, all-gather and all-to-all each send
        // 7 of 8 blocks once (7/8).
        for (op, alg, eighths) in [
            (O::AllReduce, A::Ring, 14.0),
            (O::ReduceScatter, A::Ring, 7.0),
            (O::AllGather, A::Ring, 7.0),
            (O::AllToAll, A::Direct, 7.0),
            (O::AllReduce, A::HalvingDoubling, 14.0),
            (O::ReduceScatter, A::HalvingDoubling, 7.0),
            (O::AllGather, A::HalvingDoubling, 7.0),
        ] {
            let c = collective(op, alg, 8);
            c.validate().unwrap();
            let mut w = Workload::default();
            expand(&c, &mut w);
            let expected = c.size as f64 * eighths / 8.0;
            assert_eq!(
                op.bus_factor(8),
                eighths / 8.0,
                "{op:?}: nccl-tests' factor"
            );
            for r in 0..8 {
                let sent = bytes_sent_by(&w, r) as f64;
                assert!(
                    (sent - expected).abs() <= 8.0,
                    "{op:?} {alg:?} rank {r}: {sent} vs {expected}"
                );
            }
        }
    }

    #[test]
    fn compact_rings_send_what_the_full_expansion_sends_in_one_message_per_edge() {
        use CollectiveAlgorithm as A;
        for (alg, group) in [(A::Ring, 1), (A::Hierarchical, 4)] {
            let mut c = collective(CollectiveOp::AllReduce, alg, 16);
            c.group = group;
            let mut full = Workload::default();
            expand(&c, &mut full);
            let mut compact = Workload {
                compact: true,
                ..Workload::default()
            };
            expand(&c, &mut compact);
            // Ring: one edge per rank; hierarchical: three rings per rank.
            let rings = if alg == A::Ring { 1 } else { 3 };
            assert_eq!(compact.messages.len(), 16 * rings, "{alg:?}");
            assert_eq!(compact.pipelined.len(), compact.messages.len());
            for r in 0..16 {
                let (a, b) = (bytes_sent_by(&full, r), bytes_sent_by(&compact, r));
                // To a byte per step: the compact edge carries the average block.
                assert!(a.abs_diff(b) <= 2 * 15, "{alg:?} rank {r}: {a} vs {b}");
            }
        }
    }

    #[test]
    fn compact_edges_are_fed_by_the_edges_that_bring_their_sender_the_data() {
        use CollectiveAlgorithm as A;
        for (alg, group) in [
            (A::Ring, 1),
            (A::Hierarchical, 4),
            (A::Tree, 4),
            (A::Tree, 1),
        ] {
            let mut c = collective(CollectiveOp::AllReduce, alg, 16);
            c.group = group;
            let mut w = Workload {
                compact: true,
                ..Workload::default()
            };
            expand(&c, &mut w);
            assert!(
                w.feeds.windows(2).all(|f| f[0].0 <= f[1].0),
                "{alg:?}: by edge"
            );
            for &(edge, up) in &w.feeds {
                let (e, u) = (w.messages[edge as usize], w.messages[up as usize]);
                assert_eq!(u.dst, e.src, "{alg:?}: {edge} fed by {up}");
            }
            for &(i, p) in &w.pipelined {
                let feeds = w.feeds.iter().filter(|f| f.0 == i).count();
                match p {
                    // A ring edge: the one edge into its sender.
                    Pipeline::Ring { .. } => assert_eq!(feeds, 1, "{alg:?}: ring edge {i}"),
                    // A tree edge: after its feeds; only edges up from leaves have none.
                    Pipeline::Chain { .. } => {
                        assert!(w.feeds.iter().all(|f| f.0 != i || f.1 < i));
                    }
                }
            }
            let unfed = w
                .pipelined
                .iter()
                .filter(|(i, _)| !w.feeds.iter().any(|f| f.0 == *i))
                .count();
            // Only the up edges of the two trees' leaves: a heap of 16 ranks has 8 leaves;
            // on 4 servers of 4, each server's chain ends in one.
            let leaves = match (alg, group) {
                (A::Tree, 1) => 2 * 8,
                (A::Tree, _) => 2 * 4,
                _ => 0,
            };
            assert_eq!(unfed, leaves, "{alg:?} over servers of {group}");
        }
    }

    #[test]
    fn dependencies_point_backwards_and_follow_the_data() {
        let c = collective(CollectiveOp::AllReduce, CollectiveAlgorithm::Ring, 4);
        let mut w = Workload::default();
        expand(&c, &mut w);
        for (i, deps) in w.after.iter().enumerate() {
            for d in deps.iter().map(|d| d.msg) {
                assert!((d as usize) < i, "message {i} waits for a later one");
                // A message waits for data that reached its sender.
                let (m, dep) = (w.messages[i], w.messages[d as usize]);
                assert_eq!(dep.dst, m.src, "{i} after {d}");
            }
            // It follows the sender's previous message to the same peer.
            if let Some(f) = w.follows[i] {
                let (m, prev) = (w.messages[i], w.messages[f as usize]);
                assert!((f as usize) < i && (prev.src, prev.dst) == (m.src, m.dst));
            }
        }
        // 2(n-1) steps x 4 ranks x 2 pieces of the 2 MiB block.
        assert_eq!(w.messages.len(), 6 * 4 * 2);
    }

    #[test]
    fn tree_and_broadcast_deliver_everything_to_everyone() {
        // Tree: every non-root position sends each tree's half up once and gets it down once.
        let c = collective(CollectiveOp::AllReduce, CollectiveAlgorithm::Tree, 6);
        let mut w = Workload::default();
        expand(&c, &mut w);
        let received: u64 = w
            .messages
            .iter()
            .filter(|m| m.dst == HostId(5))
            .map(|m| m.size)
            .sum();
        // Rank 5 is a leaf of the first tree (gets its half once) and the root of the
        // second (gets its two children's halves).
        assert_eq!(received, c.size / 2 + 2 * (c.size / 2));
        let b = collective(CollectiveOp::Broadcast, CollectiveAlgorithm::Ring, 5);
        let mut w = Workload::default();
        expand(&b, &mut w);
        for r in 1..5 {
            assert_eq!(received_by(&w, r), b.size);
        }
    }

    /// NCCL's node-aware tree on 4 servers of 4 GPUs: inside each server a chain (3 links
    /// each), across servers a binary tree (3 links): each tree moves its half up and down
    /// each of its 15 links once per channel, so 3 links of 15 cross servers, and each
    /// channel's trees are headed by another GPU, so 4 channels use every GPU's NIC.
    #[test]
    fn node_aware_trees_chain_inside_servers_and_use_every_rail_across_them() {
        let mut c = collective(CollectiveOp::AllReduce, CollectiveAlgorithm::Tree, 16);
        c.group = 4;
        c.channels = 4;
        let mut w = Workload::default();
        expand(&c, &mut w);
        let server = |h: HostId| h.0 / 4;
        let across: Vec<&Message> = w
            .messages
            .iter()
            .filter(|m| server(m.src) != server(m.dst))
            .collect();
        let total: u64 = w.messages.iter().map(|m| m.size).sum();
        let crossing: u64 = across.iter().map(|m| m.size).sum();
        // Per channel and tree: 15 links up and down carrying that tree's half.
        assert_eq!(total, 2 * 15 * c.size);
        assert_eq!(crossing, 2 * 3 * c.size);
        let mut nics: Vec<u32> = across.iter().map(|m| m.src.0 % 4).collect();
        nics.sort_unstable();
        nics.dedup();
        assert_eq!(
            nics,
            vec![0, 1, 2, 3],
            "every rail carries a channel's tree"
        );
        // Every rank receives each half of each channel's data at least once.
        for r in 0..16 {
            let got = received_by(&w, r);
            assert!(got >= c.size, "rank {r} got {got}");
        }
        // Ranks not in server order: the trees fall back to trees over the ranks.
        c.ranks.swap(0, 5);
        assert!(!by_server(&c.ranks, 4));
    }

    #[test]
    fn hierarchical_moves_a_share_per_rail_and_the_rest_over_nvlink() {
        let mut c = collective(
            CollectiveOp::AllReduce,
            CollectiveAlgorithm::Hierarchical,
            16,
        );
        c.group = 4;
        c.validate().unwrap();
        let mut w = Workload::default();
        expand(&c, &mut w);
        let server = |h: HostId| h.0 / 4;
        let (mut inter, mut intra) = (0u64, 0u64);
        for m in &w.messages {
            if server(m.src) == server(m.dst) {
                intra += m.size;
            } else {
                assert_eq!(
                    m.src.0 % 4,
                    m.dst.0 % 4,
                    "inter-server traffic stays on its rail"
                );
                inter += m.size;
            }
        }
        // Across servers: each of the 16 GPUs sends 2(N-1)/N of its S/g share, N = 4.
        assert_eq!(inter, 16 * (2 * 3 * (c.size / 4) / 4));
        // Inside: reduce-scatter and all-gather each send (g-1)/g of S per GPU.
        assert_eq!(intra, 16 * 2 * (3 * c.size / 4));
    }

    #[test]
    fn validation_names_what_does_not_apply() {
        let mut c = collective(CollectiveOp::AllToAll, CollectiveAlgorithm::Ring, 4);
        assert!(c.validate().unwrap_err().contains("does not apply"));
        c = collective(
            CollectiveOp::AllReduce,
            CollectiveAlgorithm::HalvingDoubling,
            6,
        );
        assert!(c.validate().unwrap_err().contains("power-of-two"));
    }
}
