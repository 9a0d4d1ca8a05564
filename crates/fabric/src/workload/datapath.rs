//! Host data paths: what a GPU buffer crosses before and after the network.
//!
//! - `gpudirect`: the NIC reads GPU memory over PCIe (peer to peer through the PCIe
//!   switch) and the receiving NIC writes GPU memory.
//! - `rdma`: the GPU copies the buffer to registered host memory (up the PCIe switch's
//!   uplink), the NIC reads it from there; mirrored at the receiver.
//! - `cpu-staged`: as `rdma`, plus a CPU copy into (and out of) the NIC's buffers, with a
//!   per-message CPU overhead.
//!
//! Each message is cut into chunks; every chunk passes the stages in order, each stage a
//! transfer that holds one resource (a PCIe link direction, a PCIe switch uplink
//! direction, a server's CPU) first come first served, so messages that share a resource
//! take turns chunk by chunk and a long message runs at its slowest stage. A stage's
//! latency is a start cost, paid by a message's first chunk. The network
//! stage is the fabric itself, one RDMA WRITE per chunk on one connection.

use super::{Dep, Local, Message, Stage, Workload};
use fabricsim_core::units::{BitRate, Time};
use std::ops::Range;

/// How GPU data reaches the NIC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataPath {
    CpuStaged,
    Rdma,
    GpuDirect,
}

impl DataPath {
    pub const NAMES: [&'static str; 3] = ["cpu-staged", "rdma", "gpudirect"];

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "cpu-staged" => DataPath::CpuStaged,
            "rdma" => DataPath::Rdma,
            "gpudirect" => DataPath::GpuDirect,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            DataPath::CpuStaged => "cpu-staged",
            DataPath::Rdma => "rdma",
            DataPath::GpuDirect => "gpudirect",
        }
    }
}

/// A NIC generation's host side and fastest port, from NVIDIA's ConnectX adapter user
/// manuals (the specifications tables): ConnectX-5 Ex PCIe Gen4 x16, 100 Gb/s (EDR);
/// ConnectX-6 Gen4 x16, 200 Gb/s (HDR); ConnectX-7 Gen5 x16, 400 Gb/s (NDR);
/// ConnectX-8 SuperNIC Gen6 x16, 800 Gb/s (XDR).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NicModel {
    pub name: &'static str,
    pub pcie_generation: u32,
    pub pcie_lanes: u32,
    pub max_rate: BitRate,
}

/// The NIC generations `[host] nic` names.
pub const NICS: [NicModel; 4] = [
    NicModel {
        name: "connectx-5",
        pcie_generation: 4,
        pcie_lanes: 16,
        max_rate: BitRate::gbps(100),
    },
    NicModel {
        name: "connectx-6",
        pcie_generation: 4,
        pcie_lanes: 16,
        max_rate: BitRate::gbps(200),
    },
    NicModel {
        name: "connectx-7",
        pcie_generation: 5,
        pcie_lanes: 16,
        max_rate: BitRate::gbps(400),
    },
    NicModel {
        name: "connectx-8",
        pcie_generation: 6,
        pcie_lanes: 16,
        max_rate: BitRate::gbps(800),
    },
];

/// Default PCIe maximum payload size: 256 B, the common server setting (unverified: the
/// platform and the devices negotiate it; `[host] pcie_max_payload` sets it).
pub const DEFAULT_MAX_PAYLOAD: u32 = 256;

/// PCIe data rate per direction: `generation`'s transfer rate per lane x lanes x line
/// encoding (PCI-SIG: 8, 16, 32, 64 GT/s for generations 3 to 6; 128b/130b up to 5), x
/// the share of each transaction-layer packet that is payload, with `max_payload` bytes
/// of data per packet. Generations 3 to 5 add 26 B per packet (4 B framing token, 2 B
/// sequence number, a 4-DW 16 B header, 4 B LCRC: PCI Express Base Specification,
/// Physical and Data Link layers); generation 6's FLIT mode carries 236 TLP bytes in
/// each 256 B flit (the rest DLLP, CRC and FEC) and adds the 16 B header per packet.
/// DLLPs (ACK and flow-control updates) are not counted: a few per cent more.
pub fn pcie_rate(generation: u32, lanes: u32, max_payload: u32) -> Option<BitRate> {
    let gts: u128 = match generation {
        3 => 8,
        4 => 16,
        5 => 32,
        6 => 64,
        _ => return None,
    };
    let raw = gts * 1_000_000_000 * lanes as u128;
    let mps = max_payload as u128;
    let rate = if generation < 6 {
        raw * 128 / 130 * mps / (mps + 26)
    } else {
        raw * 236 / 256 * mps / (mps + 16)
    };
    Some(BitRate(rate as u64))
}

impl Default for HostConfig {
    fn default() -> Self {
        let pcie = pcie_rate(5, 16, DEFAULT_MAX_PAYLOAD).expect("a generation");
        HostConfig {
            data_path: DataPath::GpuDirect,
            overrides: Vec::new(),
            nic: None,
            message_interval: None,
            pcie_generation: 5,
            pcie_lanes: 16,
            pcie_max_payload: DEFAULT_MAX_PAYLOAD,
            pcie,
            uplink: pcie,
            // Unverified placeholders, scenario parameters: a DMA stage's start 1 us, a
            // copy-engine copy's launch 5 us, 2 us of CPU work per message, one core's
            // memcpy at 12 GB/s.
            pcie_latency: Time::from_us(1),
            copy_latency: Time::from_us(5),
            cpu_overhead: Time::from_us(2),
            cpu_copy: BitRate(12 * 8_000_000_000),
            // Unverified: DGX H100-style boards, two GPUs and their NICs per PCIe switch.
            gpus_per_pcie_switch: 2,
            // 8 channels of DDR5-4800 (JEDEC: 38.4 GB/s each).
            host_memory: BitRate(8 * 384 * 800_000_000),
            chunk: 512 << 10,
        }
    }
}

/// The endpoint model of every server (see each field for its source).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostConfig {
    pub data_path: DataPath,
    /// Per-server overrides: (server, path).
    pub overrides: Vec<(u32, DataPath)>,
    /// The PCIe links' generation, lanes and maximum payload, and their data rate each
    /// direction ([`pcie_rate`]): one link per GPU or NIC to its PCIe switch.
    /// The NIC generation named (`[host] nic`), whose PCIe link is the default.
    pub nic: Option<NicModel>,
    pub pcie_generation: u32,
    pub pcie_lanes: u32,
    pub pcie_max_payload: u32,
    pub pcie: BitRate,
    /// A PCIe switch's uplink to the CPU, each direction.
    pub uplink: BitRate,
    /// Latency of a DMA stage (unverified: a PCIe round trip and the engine's start).
    pub pcie_latency: Time,
    /// GPUs (each with its NIC) behind one PCIe switch.
    pub gpus_per_pcie_switch: u32,
    pub host_memory: BitRate,
    /// One CPU core's memcpy rate.
    pub cpu_copy: BitRate,
    /// CPU work per message (posting, staging buffer bookkeeping).
    pub cpu_overhead: Time,
    /// Start of a GPU copy-engine copy (cudaMemcpyAsync launch).
    pub copy_latency: Time,
    /// Pipelining unit of the data path. Default 512 KiB, NCCL's Simple-protocol slot
    /// (NCCL_BUFFSIZE 4 MiB over NCCL_STEPS 8) taken for the staging copies too
    /// (unverified for the CPU-staged and host-memory paths).
    pub chunk: u64,
    /// The NIC's message rate limit, as the time between two messages' starts on one NIC
    /// (`[host] nic_message_rate`); None: unlimited. Unverified and off by default: I
    /// found no published message rate for RDMA WRITEs on ConnectX-6 to -8.
    pub message_interval: Option<Time>,
}

impl HostConfig {
    fn path_of(&self, server: u32) -> DataPath {
        self.overrides
            .iter()
            .rev()
            .find(|(s, _)| *s == server)
            .map_or(self.data_path, |&(_, p)| p)
    }
}

/// One logical message on its data path: per chunk, the chain of messages (stages in
/// order, the network in the middle), and the stages' names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathedMessage {
    pub chunks: Vec<Vec<u32>>,
    pub stages: Vec<&'static str>,
}

/// A compact message (flow level) that crosses its hosts' data paths: it streams through
/// every stage's resource at once, in `chunk`-byte pieces, beside the network.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StagedMessage {
    pub msg: u32,
    /// The sender's stages, then the receiver's (the network between them).
    pub stages: Vec<Stage>,
    pub chunk: u64,
}

/// A stage: its name and the transfer it makes (None: the network).
type Named = (&'static str, Option<Stage>);

/// Resource numbering: per host h (GPU h with NIC h), its links' directions; per PCIe
/// switch its uplink's directions; per server its CPU.
struct Resources {
    hosts: u32,
}

impl Resources {
    fn id(&self, kind: u32, index: u32) -> u32 {
        kind * self.hosts + index
    }
}

const NIC_TO_DEVICE: u32 = 0; // NIC link, toward the NIC (DMA reads)
const NIC_FROM_DEVICE: u32 = 1; // NIC link, from the NIC (DMA writes)
const UPLINK_UP: u32 = 2; // PCIe switch to CPU
const UPLINK_DOWN: u32 = 3; // CPU to PCIe switch
const CPU: u32 = 4;

fn stages(
    h: &HostConfig,
    r: &Resources,
    host: u32,
    gpus_per_node: u32,
    sending: bool,
) -> Vec<Named> {
    let server = host / gpus_per_node;
    let switch = host / h.gpus_per_pcie_switch.max(1);
    let copy_rate = BitRate(h.pcie.bps().min(h.uplink.bps()).min(h.host_memory.bps()));
    let local = |kind: u32, index: u32, rate: BitRate, latency: Time| Stage {
        resource: r.id(kind, index),
        rate,
        latency,
    };
    let gpu_to_host = (
        "GPU to host memory copy",
        Some(local(UPLINK_UP, switch, copy_rate, h.copy_latency)),
    );
    let host_to_gpu = (
        "host to GPU memory copy",
        Some(local(UPLINK_DOWN, switch, copy_rate, h.copy_latency)),
    );
    let cpu = |name| {
        (
            name,
            Some(local(
                CPU,
                server,
                BitRate(h.cpu_copy.bps().min(h.host_memory.bps())),
                h.cpu_overhead,
            )),
        )
    };
    let nic_reads_host = (
        "NIC reads host memory",
        Some(local(UPLINK_DOWN, switch, copy_rate, h.pcie_latency)),
    );
    let nic_writes_host = (
        "NIC writes host memory",
        Some(local(UPLINK_UP, switch, copy_rate, h.pcie_latency)),
    );
    match (h.path_of(server), sending) {
        (DataPath::GpuDirect, true) => vec![(
            "NIC reads GPU memory",
            Some(local(NIC_TO_DEVICE, host, h.pcie, h.pcie_latency)),
        )],
        (DataPath::GpuDirect, false) => vec![(
            "NIC writes GPU memory",
            Some(local(NIC_FROM_DEVICE, host, h.pcie, h.pcie_latency)),
        )],
        (DataPath::Rdma, true) => vec![gpu_to_host, nic_reads_host],
        (DataPath::Rdma, false) => vec![nic_writes_host, host_to_gpu],
        (DataPath::CpuStaged, true) => vec![
            gpu_to_host,
            cpu("CPU copy into the NIC buffer"),
            nic_reads_host,
        ],
        (DataPath::CpuStaged, false) => vec![
            nic_writes_host,
            cpu("CPU copy out of the NIC buffer"),
            host_to_gpu,
        ],
    }
}

/// Rewrites `w` so every network message between servers crosses its hosts' data paths.
/// Messages inside a server (NVLink), SHARP contributions and data-path stages stay as
/// they are; an edge of a compact collective (flow level) stays whole, its stages listed
/// in `staged`. Dependencies, connection order and every recorded range follow.
pub fn apply(w: &mut Workload, h: &HostConfig, hosts: u32, gpus_per_node: u32) {
    let r = Resources { hosts };
    let old = std::mem::take(w);
    let gpn = gpus_per_node.max(1);
    // New index range of each old message, and the message that completes it.
    let mut block: Vec<Range<u32>> = Vec::with_capacity(old.messages.len());
    let mut last: Vec<u32> = Vec::with_capacity(old.messages.len());
    let mut last_net: Vec<u32> = Vec::with_capacity(old.messages.len());
    let mut pathed = Vec::new();
    let mut pipelined = old.pipelined.iter().peekable();
    let mut prepared = old.prepared.iter().peekable();
    for (i, m) in old.messages.iter().enumerate() {
        // A compact collective's edge (flow level) stays whole: its pipeline and its
        // data-path stages are the flow model's to time.
        let compact = pipelined.next_if(|(j, _)| *j as usize == i);
        // A reduction or copy before sending: before the first stage of the message's
        // first chunk (its GPU holds the data until then).
        if let Some(&(_, passes)) = prepared.next_if(|(j, _)| *j as usize == i) {
            w.prepared.push((w.messages.len() as u32, passes));
        }
        let start = w.messages.len() as u32;
        let deps: Vec<Dep> = old.after[i]
            .iter()
            .map(|d| Dep {
                msg: last[d.msg as usize],
                delay: d.delay,
            })
            .collect();
        let follows = old.follows[i].map(|f| last_net[f as usize]);
        let plain = m.local.is_some() || m.src == m.dst || m.src.0 / gpn == m.dst.0 / gpn;
        if plain || compact.is_some() {
            let id = w.push(*m, deps, follows);
            w.qp[id as usize] = old.qp[i];
            if let Some((_, p)) = compact {
                w.pipelined.push((id, *p));
            }
            if compact.is_some() && !plain {
                let mut stages = stages(h, &r, m.src.0, gpn, true);
                stages.extend(self::stages(h, &r, m.dst.0, gpn, false));
                w.staged.push(StagedMessage {
                    msg: id,
                    stages: stages.into_iter().filter_map(|(_, l)| l).collect(),
                    chunk: h.chunk,
                });
            }
            block.push(start..id + 1);
            last.push(id);
            last_net.push(id);
            continue;
        }
        let mut path = stages(h, &r, m.src.0, gpn, true);
        let tx = path.len();
        path.push(("network", None));
        path.extend(stages(h, &r, m.dst.0, gpn, false));
        let chunks = m.size.div_ceil(h.chunk).max(1);
        let mut previous: Option<Vec<u32>> = None;
        let mut all = Vec::with_capacity(chunks as usize);
        for c in 0..chunks {
            let size = m.size / chunks + u64::from(c < m.size % chunks);
            let mut chain: Vec<u32> = Vec::with_capacity(path.len());
            for (k, (_, local)) in path.iter().enumerate() {
                let mut after: Vec<Dep> = match chain.last() {
                    Some(&p) => vec![Dep::from(p)],
                    None => deps.clone(),
                };
                // One chunk at a time per stage: wait for the previous chunk there.
                if let Some(prev) = &previous {
                    if k != tx {
                        after.push(Dep::from(prev[k]));
                    }
                }
                let mut local = *local;
                // A stage's start cost (copy launch, DMA start, the CPU's per-message work)
                // falls on the first chunk; later chunks stream behind it.
                if let (Some(l), true) = (&mut local, c > 0) {
                    l.latency = Time::ZERO;
                }
                let (src, dst) = match local {
                    Some(_) if k < tx => (m.src, m.src),
                    Some(_) => (m.dst, m.dst),
                    None => (m.src, m.dst),
                };
                let follow = if k == tx {
                    previous
                        .as_ref()
                        .map(|p| p[k])
                        .or(if c == 0 { follows } else { None })
                } else {
                    None
                };
                let id = w.push(
                    Message {
                        src,
                        dst,
                        size,
                        local: local.map(Local::Stage),
                        ..*m
                    },
                    after,
                    follow,
                );
                if k == tx {
                    w.qp[id as usize] = old.qp[i];
                }
                chain.push(id);
            }
            all.push(chain.clone());
            previous = Some(chain);
        }
        let end = w.messages.len() as u32;
        block.push(start..end);
        last_net.push(all[all.len() - 1][tx]);
        last.push(end - 1);
        pathed.push(PathedMessage {
            chunks: all,
            stages: path.iter().map(|(n, _)| *n).collect(),
        });
    }
    let remap = |r: &Range<u32>| -> Range<u32> {
        if r.is_empty() {
            return r.clone();
        }
        block[r.start as usize].start..block[r.end as usize - 1].end
    };
    w.collectives = old
        .collectives
        .iter()
        .map(|(c, rg)| (c.clone(), remap(rg)))
        .collect();
    w.trainings = old
        .trainings
        .iter()
        .map(|(t, rs)| (t.clone(), rs.iter().map(&remap).collect()))
        .collect();
    w.sharp_groups = old.sharp_groups.iter().map(&remap).collect();
    // Compact edges stay whole: each is the last message of its block.
    w.feeds = old
        .feeds
        .iter()
        .map(|&(e, up)| (last[e as usize], last[up as usize]))
        .collect();
    w.data_paths = pathed;
    w.compact = old.compact;
    w.connections = old.connections;
    w.message_interval = h.message_interval;
}
