//! Collectives as message graphs, in the way NCCL runs them: each step is an RDMA WRITE
//! from one rank to another, posted once the data it carries has arrived (and, as on one
//! connection, after the sender's previous message to that peer). Congestion and
//! stragglers therefore delay everything downstream. Reductions are taken to be free
//! (GPU reduction kernels overlap the transfers).
//!
//! `size` follows nccl-tests: the buffer of all-reduce and broadcast, the whole output of
//! all-gather, the whole input of reduce-scatter, the send buffer of all-to-all.

use super::{Dep, Workload};
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
    /// NCCL's NVLS on GPU servers with NVSwitch: each GPU's slice reduced and multicast
    /// by the NVSwitch, and across servers all-reduced over double binary trees, one per
    /// rail (NCCL's NVLS-tree; all-reduce).
    Nvls,
}

impl CollectiveAlgorithm {
    pub const NAMES: [&'static str; 7] = [
        "ring",
        "tree",
        "halving-doubling",
        "hierarchical",
        "direct",
        "sharp",
        "nvls",
    ];
    const ALL: [CollectiveAlgorithm; 7] = [
        CollectiveAlgorithm::Ring,
        CollectiveAlgorithm::Tree,
        CollectiveAlgorithm::HalvingDoubling,
        CollectiveAlgorithm::Hierarchical,
        CollectiveAlgorithm::Direct,
        CollectiveAlgorithm::Sharp,
        CollectiveAlgorithm::Nvls,
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

/// Why a collective cannot run as given.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CollectiveError {
    #[error("{ranks} ranks: a collective needs at least 2")]
    TooFewRanks { ranks: usize },
    #[error("algorithm \"{algorithm}\" does not apply to op \"{op}\"")]
    Inapplicable {
        algorithm: &'static str,
        op: &'static str,
    },
    #[error("halving-doubling needs a power-of-two number of ranks, not {ranks}")]
    NotPowerOfTwo { ranks: usize },
    #[error("hierarchical needs several servers of several GPUs each: {ranks} ranks in servers of {group}")]
    Hierarchical { ranks: usize, group: usize },
    #[error("nvls needs whole servers of several GPUs each: {ranks} ranks in servers of {group}")]
    Nvls { ranks: usize, group: usize },
    #[error("root {root} is not a rank index (0 to {})", ranks - 1)]
    Root { root: u32, ranks: usize },
    #[error("channels and chunk must be at least 1")]
    NoChannelsOrChunk,
    #[error("protocol {protocol}: {algorithm} runs the Simple protocol only, as NCCL does")]
    SimpleOnly {
        algorithm: &'static str,
        protocol: &'static str,
    },
}

impl Collective {
    /// Checks that the algorithm applies to the op and the ranks.
    pub fn validate(&self) -> Result<(), CollectiveError> {
        use CollectiveAlgorithm as A;
        use CollectiveOp as O;
        let n = self.ranks.len();
        if n < 2 {
            return Err(CollectiveError::TooFewRanks { ranks: n });
        }
        let ok = match self.algorithm {
            A::Ring => self.op != O::AllToAll,
            A::Tree => self.op == O::AllReduce,
            A::HalvingDoubling => matches!(self.op, O::AllReduce | O::ReduceScatter | O::AllGather),
            A::Direct => self.op == O::AllToAll,
            A::Hierarchical | A::Sharp | A::Nvls => self.op == O::AllReduce,
        };
        if !ok {
            return Err(CollectiveError::Inapplicable {
                algorithm: self.algorithm.name(),
                op: self.op.name(),
            });
        }
        if self.algorithm == A::HalvingDoubling && !n.is_power_of_two() {
            return Err(CollectiveError::NotPowerOfTwo { ranks: n });
        }
        if self.algorithm == A::Hierarchical {
            let g = self.group as usize;
            if g < 2 || !n.is_multiple_of(g) || n / g < 2 {
                return Err(CollectiveError::Hierarchical { ranks: n, group: g });
            }
        }
        if self.algorithm == A::Nvls && !whole_servers(&self.ranks, self.group) {
            return Err(CollectiveError::Nvls {
                ranks: n,
                group: self.group as usize,
            });
        }
        if self.root as usize >= n {
            return Err(CollectiveError::Root {
                root: self.root,
                ranks: n,
            });
        }
        if self.channels == 0 || self.chunk == 0 {
            return Err(CollectiveError::NoChannelsOrChunk);
        }
        if matches!(self.algorithm, A::Sharp | A::Nvls) && self.protocol != NcclProtocol::Simple {
            return Err(CollectiveError::SimpleOnly {
                algorithm: self.algorithm.name(),
                protocol: self.protocol.name(),
            });
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
        let mut g = Graph::new(c, w, ch);
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
            (_, CollectiveAlgorithm::Nvls) => {
                g.nvls(bytes, &vec![Vec::new(); c.ranks.len()]);
            }
            (_, CollectiveAlgorithm::Hierarchical) => {
                g.hierarchical(bytes, &vec![Vec::new(); c.ranks.len()]);
            }
            _ => g.ring(bytes),
        }
    }
}

/// Appends an all-reduce (ring, tree, hierarchical or NVLS) whose ranks may start only when
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
        let mut g = Graph::new(c, w, ch);
        let last: Vec<Vec<u32>> = match c.algorithm {
            CollectiveAlgorithm::Hierarchical => g
                .hierarchical(bytes, ready)
                .into_iter()
                .map(|l| l.into_iter().collect())
                .collect(),
            CollectiveAlgorithm::Nvls => g.nvls(bytes, ready),
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

mod graph;
mod nvls;
#[cfg(test)]
mod tests;
mod tree;

use graph::Graph;

/// Whether `ranks` come server by server in servers of `group` GPUs (hosts numbered
/// server by server), with at least two servers.
pub fn by_server(ranks: &[HostId], group: u32) -> bool {
    whole_servers(ranks, group) && ranks.len() / group as usize >= 2
}

/// Whether `ranks` fill whole servers of `group` GPUs, one server after another (hosts
/// numbered server by server), with several GPUs per server.
pub fn whole_servers(ranks: &[HostId], group: u32) -> bool {
    let g = group as usize;
    g > 1
        && ranks.len().is_multiple_of(g)
        && ranks
            .chunks(g)
            .all(|s| s.iter().all(|h| h.0 / group == s[0].0 / group))
}
