//! Traffic kinds turned into a [`Workload`]: messages, and the messages each must wait
//! for. Every random choice comes from a ChaCha generator seeded by the scenario seed and
//! the traffic entry's position, so adding an entry does not change the draws of the
//! others. Collectives expand into message graphs in [`collective`].

pub mod background;
pub mod chakra;
pub mod collective;
pub mod datapath;
pub mod training;
pub mod tuner;

pub use collective::{Collective, CollectiveAlgorithm, CollectiveError, CollectiveOp};
use fabricsim_core::units::{HostId, Time};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::ops::Range;
pub use training::{Training, TrainingError};

/// One RDMA WRITE from `src` to `dst`, or, with `local`, one stage of a host's data path
/// (a copy inside the sending or receiving server).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Message {
    pub src: HostId,
    pub dst: HostId,
    pub size: u64,
    pub start: Time,
    /// Service level; the fabric maps it to a VL.
    pub sl: u8,
    pub local: Option<Local>,
}

/// The queue pair a message is sent on. RoCEv2's UDP source port, which ECMP hashes, is
/// drawn from it ([`QueuePair::key`]), so every message on one QP takes one path for the
/// connection's whole life; InfiniBand's routes ignore it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueuePair {
    /// Its connection: for a collective a mix of its ranks, channel, sender and receiver
    /// (NCCL opens one connection per channel and peer, kept for the communicator's
    /// life); for any other message its number among the messages on their own QPs, in
    /// the order they were added (the same at packet and flow level, which differ only in
    /// how many messages a collective's connections carry).
    pub connection: u32,
    /// Which of the connection's QPs this is, from 0.
    pub index: u16,
    /// How many QPs the connection has (NCCL_IB_QPS_PER_CONNECTION).
    pub of: u16,
}

impl QueuePair {
    /// The `number`th message alone on its own connection.
    pub fn own(number: u32) -> QueuePair {
        QueuePair {
            connection: number,
            index: 0,
            of: 1,
        }
    }

    /// The QP's identity on the wire: the connection for its first QP, mixed with the
    /// index for the others.
    pub fn key(self) -> u32 {
        self.connection ^ u32::from(self.index).wrapping_mul(0x9E37_79B9)
    }

    /// Every QP of this one's connection.
    pub fn siblings(self) -> impl Iterator<Item = QueuePair> {
        (0..self.of).map(move |index| QueuePair { index, ..self })
    }
}

/// A transfer inside a server that is not a plain NVLink write between two GPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Local {
    /// A stage of a host's data path.
    Stage(Stage),
    /// NVLink SHARP on the server's NVSwitch (see [`NvSwitchOp`]); the message's `src`
    /// and `dst` are both the GPU that owns the slice.
    NvSwitch(NvSwitchOp),
}

/// A data-path stage: it holds `resource` (a PCIe link direction, a CPU, ...) for
/// bytes / `rate`, first come first served, and completes `latency` later.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stage {
    pub resource: u32,
    pub rate: fabricsim_core::units::BitRate,
    pub latency: Time,
}

/// NVLink SHARP's efficiency on Hopper, 17/20 (NCCL 2.30.7's `nvlsEfficiency`,
/// src/graph/tuning.cc): the share of NVLink's rate an NVSwitch reduction or multicast
/// moves data at. NCCL's own model constant: NVIDIA publishes no measurement of it.
pub const NVLS_EFFICIENCY: (u64, u64) = (17, 20);

/// The NVLink bytes an NVLink SHARP operation of `bytes` takes the time of.
pub fn nvswitch_bytes(bytes: u64) -> u64 {
    (bytes * NVLS_EFFICIENCY.1).div_ceil(NVLS_EFFICIENCY.0)
}

/// One NVLink SHARP operation of a slice's owner GPU on its server's NVSwitch (NCCL's
/// NVLS: `multimem.ld_reduce`, then `multimem.st`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NvSwitchOp {
    /// The switch reads the slice from every GPU of the server, reduces it and sends the
    /// sum to the owner: each GPU transmits the bytes, the owner receives them once.
    Reduce,
    /// The owner sends the slice once and the switch writes it to every GPU of the
    /// server: the owner transmits the bytes, each GPU receives them.
    Multicast,
}

/// At flow level, what one message of a compact collective stands for (see
/// [`Workload::compact`]): the model adds the pipeline's step latencies to the time its
/// bytes take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pipeline {
    /// A ring edge: `steps` steps of `pieces` pieces each, one after another on this
    /// connection; a step's piece leaves once the same piece of the previous step arrived
    /// from upstream and was reduced or copied: `passes` bytes of GPU memory traffic per
    /// piece byte over all steps (see [`Workload::prepared`]).
    Ring {
        steps: u32,
        pieces: u32,
        passes: u32,
    },
    /// An edge of a pipelined chain or tree of `pieces` pieces: each piece goes on once
    /// it came in over the edges that feed it ([`Workload::feeds`]).
    Chain { pieces: u32 },
}

impl Pipeline {
    /// Pieces the message is cut into on the wire.
    pub fn pieces_on_wire(self) -> u64 {
        match self {
            Pipeline::Ring { steps, pieces, .. } => steps as u64 * pieces as u64,
            Pipeline::Chain { pieces, .. } => pieces as u64,
        }
    }
}

/// A traffic entry after validation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Traffic {
    Flow {
        src: HostId,
        dst: HostId,
        size: u64,
        start: Time,
        sl: u8,
    },
    Incast {
        senders: Vec<HostId>,
        dst: HostId,
        size: u64,
        start: Time,
        sl: u8,
    },
    /// Every listed host sends `size` to another; nobody receives twice; nobody sends to
    /// itself (a uniformly drawn derangement).
    Permutation {
        hosts: Vec<HostId>,
        size: u64,
        start: Time,
        sl: u8,
    },
    /// Messages read from a file (an ns-3 flow file); `source` names it for reports.
    Listed {
        source: String,
        messages: Vec<Message>,
    },
    /// A collective over ranks, expanded into dependent messages.
    Collective(Collective),
    /// A data-parallel training job.
    Training(Training),
    /// Execution traces, one per rank (validated when the scenario was loaded).
    Chakra(chakra::ChakraJob),
    /// Flows from a flow-size distribution at a load, drawn with the run's seed.
    Background(background::Background),
}

impl Traffic {
    /// The same entry with every host `h` replaced by `to(h)` (a job's ranks written in
    /// its own numbering, placed on the cluster's hosts, and back).
    pub fn map_hosts(&self, to: impl Fn(HostId) -> HostId) -> Traffic {
        let all = |hs: &[HostId]| hs.iter().map(|&h| to(h)).collect::<Vec<_>>();
        let mut t = self.clone();
        match &mut t {
            Traffic::Flow { src, dst, .. } => (*src, *dst) = (to(*src), to(*dst)),
            Traffic::Incast { senders, dst, .. } => {
                *senders = all(senders);
                *dst = to(*dst);
            }
            Traffic::Permutation { hosts, .. } => *hosts = all(hosts),
            Traffic::Listed { messages, .. } => {
                for m in messages {
                    (m.src, m.dst) = (to(m.src), to(m.dst));
                }
            }
            Traffic::Collective(c) => c.ranks = all(&c.ranks),
            Traffic::Training(j) => j.ranks = all(&j.ranks),
            Traffic::Chakra(j) => j.ranks = all(&j.ranks),
            Traffic::Background(b) => b.hosts = all(&b.hosts),
        }
        t
    }
}

/// A dependency: wait for message `msg` to complete at its receiver, then `delay` more
/// (compute time, for training jobs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dep {
    pub msg: u32,
    pub delay: Time,
}

impl From<u32> for Dep {
    fn from(msg: u32) -> Self {
        Dep {
            msg,
            delay: Time::ZERO,
        }
    }
}

/// When a node is done: the latest of `offset` after the job's start and each dependency.
#[derive(Clone, Debug, Default)]
pub(crate) struct Frontier {
    pub offset: Time,
    pub deps: Vec<Dep>,
}

impl Frontier {
    pub(crate) fn join(&mut self, other: &Frontier) {
        self.offset = self.offset.max(other.offset);
        for d in &other.deps {
            match self.deps.iter_mut().find(|e| e.msg == d.msg) {
                Some(e) => e.delay = e.delay.max(d.delay),
                None => self.deps.push(*d),
            }
        }
    }

    pub(crate) fn delayed(mut self, t: Time) -> Frontier {
        self.offset += t;
        for d in &mut self.deps {
            d.delay += t;
        }
        self
    }

    pub(crate) fn on(msgs: &[u32]) -> Frontier {
        Frontier {
            offset: Time::ZERO,
            deps: msgs.iter().map(|&m| Dep::from(m)).collect(),
        }
    }
}

/// Messages and the order among them: message `i` is posted at its start, or once every
/// dependency in `after[i]` is met, whichever is later. A message
/// that `follows` another shares its connection (QP): it starts sending only once that
/// one has handed all its packets to the wire, as work requests on one QP do.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Workload {
    pub messages: Vec<Message>,
    pub after: Vec<Vec<Dep>>,
    pub follows: Vec<Option<u32>>,
    /// The collectives, each with the range of its messages.
    pub collectives: Vec<(Collective, Range<u32>)>,
    /// The training jobs, each with its iterations' ranges of messages.
    pub trainings: Vec<(Training, Vec<Range<u32>>)>,
    /// Each traffic entry's messages, in entry order.
    pub entries: Vec<Range<u32>>,
    /// SHARP aggregation groups: one message per rank, reduced in the switches.
    pub sharp_groups: Vec<Range<u32>>,
    /// Messages sent along host data paths (see [`datapath`]).
    pub data_paths: Vec<datapath::PathedMessage>,
    /// Collectives expand compactly, for flow level: a pipelined ring or chain becomes one
    /// message per edge carrying every step's bytes, listed in `pipelined`, instead of one
    /// message per step and piece. A 131,072-rank ring is then 131,072 messages.
    pub compact: bool,
    /// The compact messages, by index, in increasing order.
    pub pipelined: Vec<(u32, Pipeline)>,
    /// `(edge, upstream)`: a compact edge's pieces each wait for the same piece to
    /// arrive over `upstream` (a ring edge: the edge into its sender; a tree or chain
    /// edge: every edge that brings its sender the piece). By edge, in increasing order;
    /// a chain or tree edge's upstream edges come before it.
    pub feeds: Vec<(u32, u32)>,
    /// Compact messages that cross their hosts' data paths (flow level), by index, in
    /// increasing order: each streams through every stage's resource beside the network.
    pub staged: Vec<datapath::StagedMessage>,
    /// Messages whose sender first reduces or copies the data on its GPU, with the GPU
    /// memory traffic per byte (3: a reduction, 2: a copy), by index, in increasing
    /// order. Timed at the GPU's memory bandwidth (`Nvlink::gpu_memory`), if known.
    pub prepared: Vec<(u32, u8)>,
    /// Each NIC starts at most one message per this interval (`HostConfig`); None:
    /// unlimited.
    pub message_interval: Option<Time>,
    /// The queue pair each message is sent on, by index.
    pub qp: Vec<QueuePair>,
    /// How collectives connect (NCCL's QPs per connection and PXN).
    pub connections: Connections,
    /// Messages sent so far on each collective connection: the next one's QP is this
    /// count modulo the QPs per connection. Looked up, never iterated.
    sent_on: std::collections::HashMap<u32, u32>,
    /// Messages given their own QP so far ([`QueuePair::own`]).
    own_qps: u32,
}

impl Workload {
    /// Appends a message that waits for `after` and, on its connection, `follows`;
    /// returns its index.
    pub fn push(&mut self, m: Message, after: Vec<Dep>, follows: Option<u32>) -> u32 {
        let qp = QueuePair::own(self.own_qps);
        self.own_qps += 1;
        self.append(m, after, follows, qp)
    }

    fn append(&mut self, m: Message, after: Vec<Dep>, follows: Option<u32>, qp: QueuePair) -> u32 {
        let id = self.messages.len() as u32;
        self.messages.push(m);
        self.after.push(after);
        self.follows.push(follows);
        self.qp.push(qp);
        id
    }

    /// As [`Workload::push`], on `connection`'s next QP in turn.
    pub fn push_on(
        &mut self,
        connection: u32,
        m: Message,
        after: Vec<Dep>,
        follows: Option<u32>,
    ) -> u32 {
        let of = self.connections.qps_per_connection.max(1);
        let sent = self.sent_on.entry(connection).or_insert(0);
        let index = (*sent % u32::from(of)) as u16;
        *sent += 1;
        let qp = QueuePair {
            connection,
            index,
            of,
        };
        self.append(m, after, follows, qp)
    }
}

/// How collectives connect, as NCCL does (docs/REFERENCE.md section 10).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Connections {
    /// QPs per connection (NCCL_IB_QPS_PER_CONNECTION), taken in turn message by message
    /// (NCCL_IB_SPLIT_DATA_ON_QPS = 0).
    pub qps_per_connection: u16,
    /// PXN (NCCL_PXN_DISABLE = 0): all-to-all data for a GPU of another server and
    /// another rail goes first over NVLink to the GPU of its own server on the
    /// receiver's rail, which sends it from its NIC.
    pub pxn: bool,
}

impl Default for Connections {
    /// NCCL's defaults: one QP per connection, PXN on.
    fn default() -> Self {
        Connections {
            qps_per_connection: 1,
            pxn: true,
        }
    }
}

/// Expands traffic entries into a workload, in entry order, one message per step and
/// piece of every collective (packet level), connected as NCCL does by default.
pub fn build(traffic: &[Traffic], seed: u64) -> Workload {
    build_with(traffic, seed, false, Connections::default())
}

/// As [`build`], with collectives expanded compactly (flow level) if `compact`, and
/// connected as `connections` says.
pub fn build_with(
    traffic: &[Traffic],
    seed: u64,
    compact: bool,
    connections: Connections,
) -> Workload {
    let mut w = Workload {
        compact,
        connections,
        ..Workload::default()
    };
    for (i, t) in traffic.iter().enumerate() {
        let first = w.messages.len() as u32;
        match t {
            Traffic::Collective(c) => {
                collective::expand(c, &mut w);
                let end = w.messages.len() as u32;
                w.collectives.push((c.clone(), first..end));
            }
            Traffic::Training(job) => {
                let ranges = training::expand(job, &mut w);
                w.trainings.push((job.clone(), ranges));
            }
            Traffic::Chakra(job) => {
                let ran = chakra::expand(job, &mut w).expect("traces validated at load");
                w.collectives.extend(ran);
            }
            _ => expand_independent(t, i, seed, &mut w),
        }
        w.entries.push(first..w.messages.len() as u32);
    }
    w
}

/// Expands entry `i`, whose messages depend on nothing, each on its own queue pair.
fn expand_independent(t: &Traffic, i: usize, seed: u64, w: &mut Workload) {
    let out = &mut w.messages;
    let before = out.len();
    match t {
        Traffic::Flow {
            src,
            dst,
            size,
            start,
            sl,
        } => out.push(Message {
            src: *src,
            dst: *dst,
            size: *size,
            start: *start,
            sl: *sl,
            local: None,
        }),
        Traffic::Incast {
            senders,
            dst,
            size,
            start,
            sl,
        } => out.extend(senders.iter().map(|&src| Message {
            src,
            dst: *dst,
            size: *size,
            start: *start,
            sl: *sl,
            local: None,
        })),
        Traffic::Permutation {
            hosts,
            size,
            start,
            sl,
        } => {
            let mut rng = ChaCha8Rng::seed_from_u64(
                seed ^ (0x9E37_79B9_7F4A_7C15u64.wrapping_mul(i as u64 + 1)),
            );
            let targets = derangement(hosts, &mut rng);
            out.extend(hosts.iter().zip(targets).map(|(&src, dst)| Message {
                src,
                dst,
                size: *size,
                start: *start,
                sl: *sl,
                local: None,
            }));
        }
        Traffic::Listed { messages, .. } => out.extend_from_slice(messages),
        Traffic::Background(b) => out.extend(b.expand(&mut ChaCha8Rng::seed_from_u64(
            seed ^ (0xD1B5_4A32_D192_ED03u64.wrapping_mul(i as u64 + 1)),
        ))),
        Traffic::Collective(_) | Traffic::Training(_) | Traffic::Chakra(_) => {
            unreachable!("build_with expands these")
        }
    }
    let added = w.messages.len() - before;
    w.after.extend(std::iter::repeat_n(Vec::new(), added));
    w.follows.extend(std::iter::repeat_n(None, added));
    let own = w.own_qps;
    w.qp.extend((own..own + added as u32).map(QueuePair::own));
    w.own_qps += added as u32;
}

/// A uniformly random derangement of `hosts` by rejection (about e draws on average).
/// Callers guarantee at least two distinct hosts.
fn derangement(hosts: &[HostId], rng: &mut ChaCha8Rng) -> Vec<HostId> {
    let mut perm = hosts.to_vec();
    loop {
        perm.shuffle(rng);
        if perm.iter().zip(hosts).all(|(a, b)| a != b) {
            return perm;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permutation_is_a_seeded_derangement() {
        let hosts: Vec<HostId> = (0..16).map(HostId).collect();
        let t = [Traffic::Permutation {
            hosts: hosts.clone(),
            size: 10,
            start: Time::ZERO,
            sl: 0,
        }];
        let a = build(&t, 1).messages;
        assert_eq!(a, build(&t, 1).messages, "same seed, same pairs");
        assert_ne!(a, build(&t, 2).messages, "another seed draws other pairs");
        let mut dsts: Vec<u32> = a.iter().map(|m| m.dst.0).collect();
        assert!(a.iter().all(|m| m.src != m.dst));
        dsts.sort();
        assert_eq!(dsts, (0..16).collect::<Vec<_>>(), "nobody receives twice");
    }
}
