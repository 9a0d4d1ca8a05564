//! NCCL's choice of all-reduce algorithm, as its tuner makes it: NCCL 2.30.7,
//! src/graph/tuning.cc (`ncclTopoTuneModel`, `ncclTopoGetAlgoTime`), for the Simple
//! protocol on Hopper-class GPUs (docs/REFERENCE.md section 10).
//!
//! Each algorithm's time is `latency + bytes / algorithm bandwidth`, NCCL's own cost
//! model with its constants; the cheapest that fabricsim can run is chosen. What is
//! left out, and why:
//! - NVLS (one server) and NVLS-tree (several) are one candidate, `Nvls`, where the
//!   servers have NVLink SHARP (Hopper's NVSwitch and later) and the ranks fill whole
//!   servers; NCCL's graph search picks a per-channel speed from a list of steps, here
//!   the largest the NVLink and the NIC carry, unrounded;
//! - CollNet (SHARP) is a candidate only where asked (`[nccl] algorithm = "collnet"`):
//!   NCCL considers it only with its plugin and `NCCL_COLLNET_ENABLE=1`;
//! - the graph's `latencyInter` (the network's own latency NCCL may add) is taken as 0;
//! - bandwidths come from the simulated hardware: a GPU's own NIC across servers,
//!   NVLink inside one, with NCCL's two channels per NIC for the tree's per-channel cap.

use super::NVLS_EFFICIENCY;
use fabricsim_core::units::BitRate;

/// A candidate algorithm of NCCL's tuner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TunedAlgorithm {
    Ring,
    Tree,
    /// NCCL's CollNet Direct: SHARP in the InfiniBand switches.
    CollNet,
    /// NCCL's NVLS on one server, NVLS-tree on several (NVLink SHARP).
    Nvls,
}

impl TunedAlgorithm {
    pub fn name(self) -> &'static str {
        match self {
            TunedAlgorithm::Ring => "ring",
            TunedAlgorithm::Tree => "tree",
            TunedAlgorithm::CollNet => "collnet",
            TunedAlgorithm::Nvls => "nvls",
        }
    }
}

/// What the tuner sees of one all-reduce.
#[derive(Clone, Copy, Debug)]
pub struct TunerInput {
    /// Ranks (GPUs) in the communicator.
    pub ranks: u32,
    /// Servers they sit on (ranks / GPUs per server when they come server by server).
    pub nodes: u32,
    /// Bytes all-reduced per rank.
    pub bytes: u64,
    /// Each GPU's NIC.
    pub nic: BitRate,
    /// Each GPU's NVLink bandwidth to the others of its server (None: PCIe only).
    pub nvlink: Option<BitRate>,
    /// Whether the servers' NVSwitch has NVLink SHARP (and the ranks fill whole
    /// servers): NVLS is a candidate only then.
    pub nvls: bool,
}

/// NCCL's per-algorithm figures for Simple, in microseconds (tuning.cc's
/// `ncclTunerConstantsDefaults`): base latency, and the hardware latency per step over
/// NVLink, PCIe and the network.
struct Constants {
    base: f64,
    nvlink: f64,
    pci: f64,
    net: f64,
}

const RING: Constants = Constants {
    base: 8.4,
    nvlink: 3.4,
    pci: 5.7,
    net: 14.0,
};
const TREE: Constants = Constants {
    base: 8.4,
    nvlink: 4.0,
    pci: 4.0,
    net: 14.0,
};
const COLLNET_DIRECT: Constants = Constants {
    base: 0.0,
    nvlink: 3.7,
    pci: 3.7,
    net: 31.0,
};
/// NVLS's and NVLS-tree's hardware latency over NVLink, us (their base latency is 0;
/// NCCL's multi-node NVLS runs only with CollNet, so it is not a candidate across
/// servers).
const NVLS_NVLINK: f64 = 25.0;
/// NVLS-tree's network latency per tree level, us.
const NVLS_TREE_NET: f64 = 20.9;
/// Hopper's per-channel NVLS-tree bandwidth cap, GB/s, for 2 and 4 or more nodes
/// (`perChMaxNVLSTreeBws`; NVLS-tree does not run on one node).
const NVLS_TREE_MAX_PER_CHANNEL: [f64; 2] = [57.7, 45.5];

/// Hopper's per-channel tree bandwidth cap, GB/s, for 1, 2 and 4 or more nodes
/// (`perChMaxTreeBws`).
const TREE_MAX_PER_CHANNEL: [f64; 3] = [38.7, 41.4, 36.0];
/// NCCL's network overhead per inter-node ring step (`getNetOverhead`, x86), tripled
/// for Simple.
const NET_OVERHEAD: f64 = 1.0;
/// The ring's "plateau" latency factor for compute capability 8.0 and above.
const RING_PLATEAU: f64 = 1.4;
/// Channels per NIC NCCL opens (the tree's per-channel cap's multiplier, the ring's
/// plateau test); an assumption of this model: NCCL's graph search decides it per system.
const TREE_CHANNELS: f64 = 2.0;
/// `treeCorrectionFactor` for Simple, by log2(bytes / 64) from 0 to 23.
const TREE_CORRECTION: [f64; 24] = [
    0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.8, 0.7, 0.6, 0.6, 0.5, 0.5, 0.5, 0.5, 0.6, 0.7, 0.8, 0.7,
    0.7, 0.8, 0.9, 0.9, 0.9,
];

fn log2i(x: u64) -> u32 {
    if x == 0 {
        0
    } else {
        63 - x.leading_zeros()
    }
}

impl TunerInput {
    fn gbytes(r: BitRate) -> f64 {
        r.bps() as f64 / 8e9
    }

    /// Ranks per node.
    fn ppn(&self) -> u32 {
        (self.ranks / self.nodes.max(1)).max(1)
    }

    /// Hardware latency per step inside a server.
    fn intra(&self, c: &Constants) -> f64 {
        if self.nvlink.is_some() {
            c.nvlink
        } else {
            c.pci
        }
    }

    /// NCCL's per-rank bus bandwidth before the algorithm's refinements, GB/s
    /// (`nChannels x bwIntra` on one or two nodes, `nChannels x bwInter` beyond): NVLink
    /// inside a server; across servers every channel's ring or tree crosses each server
    /// once, so the server's NICs (one per GPU) carry a rank's bus traffic together.
    fn bus_bandwidth(&self) -> f64 {
        let nics = Self::gbytes(self.nic) * self.ppn() as f64;
        match self.nvlink {
            Some(l) if self.nodes <= 2 && self.ppn() > 1 => Self::gbytes(l),
            _ => nics,
        }
    }

    /// NCCL's channels: `TREE_CHANNELS` per NIC of a server.
    fn channels(&self) -> f64 {
        TREE_CHANNELS * self.ppn() as f64
    }

    /// NCCL's modelled time of `algorithm`, microseconds (None where it does not apply).
    pub fn time_us(&self, algorithm: TunedAlgorithm) -> Option<f64> {
        let (n, nodes, ppn) = (self.ranks as f64, self.nodes.max(1), self.ppn());
        let nsteps = 2.0 * (n - 1.0);
        let bytes = self.bytes as f64;
        let net_tree = TREE.net;
        let (latency, bandwidth) = match algorithm {
            TunedAlgorithm::Ring => {
                let bw = self.bus_bandwidth() * n / nsteps;
                let overhead = if nodes > 1 { 3.0 * NET_OVERHEAD } else { 0.0 };
                let intra = self.intra(&RING).max(overhead);
                let inter = if ppn == 1 { net_tree } else { RING.net };
                let inter_steps = if nodes == 1 {
                    0.0
                } else {
                    2.0 * (nodes as f64 - 1.0)
                };
                let mut lat = RING.base + (nsteps - inter_steps) * intra + inter_steps * inter;
                if nodes > 1 && self.bytes as f64 / (self.channels() * n) >= 64.0 {
                    lat *= RING_PLATEAU;
                }
                (lat, bw)
            }
            TunedAlgorithm::Tree => {
                let cap = self.channels() * TREE_MAX_PER_CHANNEL[(nodes.min(3) - 1) as usize];
                let mut bw = (self.bus_bandwidth() * 0.92).min(cap) * 0.5;
                let log = log2i(self.bytes >> 6) as usize;
                if log < 23 {
                    bw *= TREE_CORRECTION[log];
                }
                let lat = TREE.base
                    + 2.0
                        * ((ppn - 1) as f64 * self.intra(&TREE)
                            + log2i(nodes as u64) as f64 * net_tree);
                (lat, bw)
            }
            TunedAlgorithm::Nvls => self.nvls()?,
            TunedAlgorithm::CollNet => {
                if nodes < 2 {
                    return None;
                }
                let ppn = ppn as f64;
                // One NIC per GPU: NCCL's GPU/NIC factor is 1; Hopper's 0.85.
                let bw = self.bus_bandwidth() * 0.85 * 0.5;
                let lat = COLLNET_DIRECT.base
                    + 2.0
                        * ((ppn - 1.0).min(1.0) * self.intra(&COLLNET_DIRECT) + (ppn - 1.0) * 0.4)
                    + COLLNET_DIRECT.net;
                (lat, bw)
            }
        };
        Some(latency + bytes / (1000.0 * bandwidth))
    }

    /// NVLS's (latency, bandwidth): NCCL's NVLS on one server, its NVLS-tree on
    /// several. One channel per GPU (its heads), each at the speed the NVSwitch gives it
    /// (each GPU's NVLink carries every channel once and its own twice) and, across
    /// servers, its GPU's NIC; NVLS's efficiency, pipelining two operations, and NCCL's
    /// per-channel cap bound it inside servers.
    fn nvls(&self) -> Option<(f64, f64)> {
        let link = self.nvlink.filter(|_| self.nvls && self.ppn() > 1)?;
        let (n, nodes, ppn) = (self.ranks as f64, self.nodes.max(1), self.ppn() as f64);
        let mut speed = Self::gbytes(link) / (ppn + 1.0);
        if nodes > 1 {
            speed = speed.min(Self::gbytes(self.nic));
        }
        let (kept, took) = NVLS_EFFICIENCY;
        let intra = speed * kept as f64 / took as f64 * (ppn - 1.0) / ppn * 2.0;
        let (lat, per_channel) = if nodes == 1 {
            (NVLS_NVLINK, intra.min(speed))
        } else {
            let inter = speed * if nodes <= 2 { 2.0 } else { 1.0 };
            let cap = NVLS_TREE_MAX_PER_CHANNEL[usize::from(nodes > 2)];
            let lat = NVLS_NVLINK + 2.0 * log2i(nodes as u64) as f64 * NVLS_TREE_NET;
            (lat, intra.min(inter).min(cap))
        };
        Some((lat, ppn * per_channel * n / (2.0 * (n - 1.0))))
    }

    /// The cheapest of `candidates` by NCCL's model, with every candidate's time (us), in
    /// the order given; ties go to the first.
    pub fn choose(
        &self,
        candidates: &[TunedAlgorithm],
    ) -> (TunedAlgorithm, Vec<(TunedAlgorithm, f64)>) {
        let times: Vec<(TunedAlgorithm, f64)> = candidates
            .iter()
            .filter_map(|&a| self.time_us(a).map(|t| (a, t)))
            .collect();
        let best = times
            .iter()
            .fold(
                None,
                |best: Option<(TunedAlgorithm, f64)>, &(a, t)| match best {
                    Some((_, b)) if b <= t => best,
                    _ => Some((a, t)),
                },
            )
            .map_or(TunedAlgorithm::Ring, |(a, _)| a);
        (best, times)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(nodes: u32, bytes: u64) -> TunerInput {
        TunerInput {
            ranks: nodes * 8,
            nodes,
            bytes,
            nic: BitRate(400_000_000_000),
            nvlink: Some(BitRate(3_600_000_000_000)),
            nvls: true,
        }
    }

    /// NCCL's ring latency grows with every rank and tree latency with log2 of the
    /// nodes, so large messages on few nodes run rings and anything on hundreds of
    /// nodes runs trees.
    #[test]
    fn rings_on_few_nodes_trees_on_many() {
        let both = [TunedAlgorithm::Ring, TunedAlgorithm::Tree];
        assert_eq!(input(4, 4 << 30).choose(&both).0, TunedAlgorithm::Ring);
        assert_eq!(input(512, 64 << 20).choose(&both).0, TunedAlgorithm::Tree);
        assert_eq!(input(4, 4 << 10).choose(&both).0, TunedAlgorithm::Tree);
    }

    /// NVLS-tree by hand for 16 nodes of 8 H100s with 400G NICs: a channel per GPU at
    /// min(450 / 9, 50) = 50 GB/s, capped at Hopper's 45.5 per channel across 4 or more
    /// nodes (NVLS's 50 x 0.85 x 7/8 x 2 = 74.4 inside the server does not bind);
    /// latency 25 + 2 x log2(16) x 20.9 us. NCCL runs it for large buffers, the tree or
    /// ring for small ones, and nothing of it where the NVSwitch has no SHARP.
    #[test]
    fn nvls_tree_time_is_nccls_formula() {
        let i = input(16, 256 << 20);
        let bw = 8.0 * 45.5 * 128.0 / 254.0;
        let want = 25.0 + 8.0 * 20.9 + (256u64 << 20) as f64 / (1000.0 * bw);
        let got = i.time_us(TunedAlgorithm::Nvls).unwrap();
        assert!((got - want).abs() < 1e-6, "{got} vs {want}");
        let all = [
            TunedAlgorithm::Ring,
            TunedAlgorithm::Tree,
            TunedAlgorithm::Nvls,
        ];
        assert_eq!(i.choose(&all).0, TunedAlgorithm::Nvls);
        assert_eq!(input(16, 64 << 10).choose(&all).0, TunedAlgorithm::Tree);
        let without = TunerInput { nvls: false, ..i };
        assert_eq!(without.time_us(TunedAlgorithm::Nvls), None);
        // One server: NVLS's own latency, 8 channels at 450 / 9 GB/s.
        let one = TunerInput {
            ranks: 8,
            nodes: 1,
            ..i
        };
        let want = 25.0 + (256u64 << 20) as f64 / (1000.0 * 8.0 * 50.0 * 8.0 / 14.0);
        let got = one.time_us(TunedAlgorithm::Nvls).unwrap();
        assert!((got - want).abs() < 1e-6, "{got} vs {want}");
    }

    /// The ring's time by hand for 16 nodes of 8 GPUs: 254 steps, 30 across the
    /// network at 14 us, the rest at NVLink's 3.4 us, the plateau factor, and 256 MiB at
    /// eight NICs' 400 GB/s x 128 / 254.
    #[test]
    fn ring_time_is_nccls_formula() {
        let i = input(16, 256 << 20);
        let lat = (8.4 + (254.0 - 30.0) * 3.4 + 30.0 * 14.0) * 1.4;
        let bw = 400.0 * 128.0 / 254.0;
        let want = lat + (256u64 << 20) as f64 / (1000.0 * bw);
        let got = i.time_us(TunedAlgorithm::Ring).unwrap();
        assert!((got - want).abs() < 1e-6, "{got} vs {want}");
    }
}
