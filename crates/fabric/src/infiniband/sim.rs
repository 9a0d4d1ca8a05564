//! The InfiniBand simulation: state arenas, the event enum and its handlers.

use super::config::IbConfig;
use super::sharp::SharpGroup;
use crate::driver::{
    self, deadlock_hop, CaptureFilter, Lifecycle, LifecycleEvent, MessageFabric, Progress,
    RunState, Ties, WaitGraph, Wire,
};
use crate::parallel::{self, Check, InFlight, Part, SplitEnd, Splittable};
use crate::report::{Deadlock, PortResult, RunReport};
use crate::workload::{Message, Workload};
use fabricsim_core::engine::EventQueue;
use fabricsim_core::pool::{Fifo, Pool, Slot};
use fabricsim_core::prefetch::{prefetch, WORTH_ABOVE_BYTES};
use fabricsim_core::proto::credit::{CreditReceiver, CreditSender};
use fabricsim_core::proto::ibcc::CcState;
use fabricsim_core::proto::rc::{RcReceiver, RcSender, Segment, PSN_MASK};
use fabricsim_core::proto::vlarb::{ArbEntry, ArbState, ArbTable};
use fabricsim_core::topology::{NodeKind, Port, Routes, Topology};
use fabricsim_core::units::{HostId, NodeId, PortId, Time};
use fabricsim_core::wire::ib::{self, Aeth, Opcode, PacketRepr, Reth, DEFAULT_PKEY};
use std::collections::VecDeque;

/// What a packet is, for the handlers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Data,
    Ack,
    /// A BECN returned to the source (an ACK-format packet with the BECN bit); it
    /// acknowledges nothing: its index is the ACK sent beside it, or 0 if none was due.
    Becn,
    /// SHARP: a chunk of a rank's buffer, or a partial sum, going up the aggregation tree
    /// of group `dst`.
    SharpUp,
    /// SHARP: a chunk of the result going down the tree of group `dst`.
    SharpDown,
}

/// A packet as the simulator carries it (28 bytes; no payload bytes are held).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Packet {
    flow: u32,
    /// Data: position in the message. Ack: last packet covered.
    index: u32,
    payload: u32,
    wire: u32,
    dst: u32,
    kind: Kind,
    opcode: Opcode,
    vl: u8,
    fecn: bool,
    /// Data: the sender asked for an ACK (the segment's AckReq bit).
    ack_req: bool,
    /// At a switch egress: the input it entered by (the switch's local port index, or
    /// its last for packets it made itself); set when it is queued there.
    input: u16,
}

impl Packet {
    fn blocks(&self) -> u32 {
        ib::credit_blocks(self.wire as usize)
    }
}

/// What crosses a link.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Frame {
    Packet(Packet),
    /// A flow-control packet: this end's FCTBS as transmitter and FCCL as receiver.
    Credit {
        vl: u8,
        fctbs: u16,
        fccl: u16,
    },
}

impl Frame {
    /// The packet in a frame known to be one (switch egress queues hold only packets).
    fn packet(&self) -> &Packet {
        match self {
            Frame::Packet(pkt) => pkt,
            Frame::Credit { .. } => unreachable!("queues of packets hold no credit frames"),
        }
    }

    fn packet_mut(&mut self) -> &mut Packet {
        match self {
            Frame::Packet(pkt) => pkt,
            Frame::Credit { .. } => unreachable!("queues of packets hold no credit frames"),
        }
    }
}

/// The closed event set.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Event {
    /// The port's transmitter finished a frame, or a queued packet became ready.
    Transmitter { port: u32, generation: u32 },
    /// The head of the port's link FIFO reaches the peer.
    Arrival { port: u32 },
    /// Unconditional flow-control refresh on the port.
    CreditRefresh { port: u32 },
    /// A flow's WRITE is posted to its HCA.
    Post { flow: u32 },
    /// A transfer inside a server (NVLink, or a PCIe or CPU stage of a data path) landed.
    LocalDone { flow: u32 },
    /// Look for a credit-loop deadlock.
    DeadlockCheck,
}

/// End of the round-robin list of an egress VL's ready inputs.
const NO_INPUT: u16 = u16::MAX;

/// One input port's ready packets at an egress VL.
#[derive(Clone, Copy, Debug)]
struct InputQueue {
    /// The packets whose switch latency has passed, in arrival order, in the frame pool.
    packets: Fifo,
    /// The next input of the round-robin list, if this one is in it.
    next_ready: u16,
}

/// One egress VL of a switch port: a FIFO per input port, ready inputs served round-robin
/// (unverified: the IBA leaves a switch's arbitration among inputs to the implementation;
/// round-robin gives each input an equal share, see docs/PARAMETERS.md).
/// A packet waits out the switch latency in the VL's one maturing FIFO, then moves to its
/// input's FIFO; so an arrival touches only the VL's first line and frames, and the input
/// queue's line is read when the packet matures, shortly before it is served (each
/// arrival at a large switch missed on it). The inputs and their round-robin list share
/// one small array, made when the first packet matures: an egress VL no packet ever uses
/// costs no per-input memory (a radix-R switch would otherwise hold R x R x VLs input
/// queues).
#[derive(Clone, Debug)]
#[repr(C, align(64))]
struct EgressVl {
    /// When the front of `maturing` becomes ready, or `NEVER` if it is empty: the
    /// arbiter's look at this VL reads this line only, not the frames.
    first_ready: Time,
    /// Packets still inside the switch latency, in the frame pool, each stamped with its
    /// ready time. Every packet waits the same latency, so arrival order is ready order
    /// and the front is the next due.
    maturing: Fifo,
    /// The inputs with a ready head, in round-robin order: first and last.
    rr_head: u16,
    rr_tail: u16,
    /// How many inputs the switch has.
    radix: u16,
    bytes: u64,
    /// One queue per input port of the switch (and one for packets it makes itself), or
    /// none before the first packet matures.
    inputs: Vec<InputQueue>,
}

// What an arrival and the arbiter read fills one line.
const _: () = assert!(std::mem::size_of::<EgressVl>() == 64);

impl EgressVl {
    fn new(radix: u16) -> Self {
        EgressVl {
            first_ready: NEVER,
            maturing: Fifo::default(),
            rr_head: NO_INPUT,
            rr_tail: NO_INPUT,
            radix,
            bytes: 0,
            inputs: Vec::new(),
        }
    }

    /// Queues the packet in `slot` from `input`; it becomes ready at `ready`.
    #[inline(always)]
    fn push(&mut self, frames: &mut Pool<Frame>, input: usize, slot: Slot, ready: Time) {
        let pkt = frames.get_mut(slot).packet_mut();
        pkt.input = input as u16;
        self.bytes += pkt.wire as u64;
        if frames.push_back(&mut self.maturing, slot, ready) {
            self.first_ready = ready;
        }
    }

    /// The per-input queues, made when the first packet matures.
    #[cold]
    #[inline(never)]
    fn make_inputs(&mut self) {
        self.inputs = vec![
            InputQueue {
                packets: Fifo::default(),
                next_ready: NO_INPUT,
            };
            self.radix as usize
        ];
    }

    /// Moves every packet whose latency has passed by `now` to its input's queue.
    #[inline(always)]
    fn mature(&mut self, frames: &mut Pool<Frame>, now: Time) {
        if self.first_ready <= now {
            self.mature_due(frames, now);
        }
    }

    fn mature_due(&mut self, frames: &mut Pool<Frame>, now: Time) {
        if self.inputs.is_empty() {
            self.make_inputs();
        }
        while let Some(slot) = self.maturing.front() {
            let t = frames.time(slot);
            if t > now {
                self.first_ready = t;
                return;
            }
            frames.pop_front(&mut self.maturing);
            let input = frames.get(slot).packet().input;
            if frames.push_back(&mut self.inputs[input as usize].packets, slot, t) {
                self.join_round_robin(input);
            }
        }
        self.first_ready = NEVER;
    }

    /// Asks for the first maturing packet and the queue of the input whose turn it is
    /// (this VL's line must be cached: see `Simulation::prefetch_ahead`).
    #[inline(always)]
    fn prefetch_next(&self, frames: &Pool<Frame>) {
        if let Some(slot) = self.maturing.front() {
            frames.prefetch(slot);
        }
        if let Some(q) = self.inputs.get(self.rr_head as usize) {
            prefetch(q);
        }
    }

    /// Asks for the packet at the head of the input whose turn it is (its queue must be
    /// cached: see [`prefetch_next`](Self::prefetch_next)).
    #[inline(always)]
    fn prefetch_turn(&self, frames: &Pool<Frame>) {
        if let Some(slot) = self
            .inputs
            .get(self.rr_head as usize)
            .and_then(|q| q.packets.front())
        {
            frames.prefetch(slot);
        }
    }

    /// Blocks of the packets queued here, maturing or ready, by input.
    fn blocks_by_input(&self, frames: &Pool<Frame>) -> Vec<u64> {
        let mut blocks = vec![0u64; self.radix as usize];
        for pkt in self.packets(frames) {
            blocks[pkt.input as usize] += pkt.blocks() as u64;
        }
        blocks
    }

    /// Every packet queued here: the ready ones by input, then the maturing ones.
    fn packets<'a>(&'a self, frames: &'a Pool<Frame>) -> impl Iterator<Item = &'a Packet> + 'a {
        let ready = self.inputs.iter().flat_map(|q| frames.iter(&q.packets));
        ready.chain(frames.iter(&self.maturing)).map(Frame::packet)
    }

    fn join_round_robin(&mut self, input: u16) {
        self.inputs[input as usize].next_ready = NO_INPUT;
        match self.rr_tail {
            NO_INPUT => self.rr_head = input,
            tail => self.inputs[tail as usize].next_ready = input,
        }
        self.rr_tail = input;
    }

    /// The input whose turn it is, if any has a ready packet.
    fn next_input(&self) -> Option<u16> {
        (self.rr_head != NO_INPUT).then_some(self.rr_head)
    }

    /// The ready packet at the head of `input`'s FIFO.
    fn head(&self, input: u16) -> Slot {
        self.inputs[input as usize]
            .packets
            .front()
            .expect("ready inputs are non-empty")
    }

    /// Takes the packet of the input whose turn it is (there must be one); the input goes
    /// to the back of the round-robin list if it has another ready packet.
    fn take(&mut self, frames: &mut Pool<Frame>) -> (u16, Slot) {
        let input = self.next_input().expect("the arbiter saw a ready input");
        let q = &mut self.inputs[input as usize];
        let slot = frames
            .pop_front(&mut q.packets)
            .expect("ready inputs are non-empty");
        let more = !q.packets.is_empty();
        self.rr_head = q.next_ready;
        if self.rr_head == NO_INPUT {
            self.rr_tail = NO_INPUT;
        }
        if more {
            self.join_round_robin(input);
        }
        self.bytes -= frames.get(slot).packet().wire as u64;
        (input, slot)
    }
}

/// Credits to return once a forwarded packet has left.
#[derive(Clone, Copy, Debug)]
struct Release {
    input: PortId,
    /// At most an MTU's blocks (4 KiB / 64 B plus headers).
    blocks: u16,
    vl: u8,
}

/// "No time": no wake-up pending, or no credit stall under way.
const NEVER: Time = Time::MAX;

/// One port's state. `repr(C)` keeps the declared order so that the fields every packet
/// event touches fill exactly two cache lines (cache misses, not instructions, dominated
/// the reference benchmark under cachegrind). The port's switch egress queues live
/// apart, in `Simulation::egress`, and its report counters in `Simulation::counters`.
#[derive(Clone, Debug)]
#[repr(C, align(64))]
struct PortState {
    // First line: the transmitter and the link.
    /// When the last frame put on the wire ends; flow-control packets only move this
    /// forward, so they take link time without an event of their own.
    free_at: Time,
    queued: u64,
    /// The topology's description of this port, copied here for locality.
    link: Port,
    generation: u32,
    fc_pending: u16,
    /// A packet is being serialised (its end is the pending transmitter event).
    busy: bool,
    fc_sent_since_refresh: bool,
    arbiter: ArbState,
    // Second line: wake-ups, credits to release, the wire and the packet counters.
    /// The pending transmitter wake-up, or `NEVER`.
    wake_at: Time,
    /// Since when a ready packet has lacked credits, or `NEVER`.
    stall_since: Time,
    /// The port's host, or `None` on a switch.
    host: Option<HostId>,
    releasing: Option<Release>,
    wire: Wire,
    /// The link's whole picoseconds per byte, or 0 if the rate has none.
    ps_per_byte: u32,
    tx_bytes: u64,
    tx_packets: u64,
}

// The hot fields fill two lines and no more.
const _: () = assert!(std::mem::size_of::<PortState>() == 128);

/// A port's report counters, kept apart from its state in one dense array: the peak is
/// compared at every packet queued and the credit packets counted at every one sent, and
/// as a third line of `PortState` each cost a cache miss at scale (a k=16 fat-tree's
/// counters take 200 KB, its port states 800 KB).
#[derive(Clone, Copy, Debug, Default)]
struct PortCounters {
    peak_queue: u64,
    credit_packets: u64,
    stall_total: Time,
    fecn_marks: u64,
}

impl PortState {
    /// Time to serialise `bytes` on this port's link: a multiplication at the standard
    /// rates, the exact division otherwise (the same result either way).
    fn serialization(&self, bytes: u32) -> Time {
        self.link
            .rate
            .serialization_by(self.ps_per_byte, bytes as u64)
    }
}

/// Per-HCA send queues: ACKs first, then QPs round-robin, per VL.
#[derive(Clone, Debug, Default)]
struct Hca {
    acks: Vec<VecDeque<Packet>>,
    qps: Vec<VecDeque<u32>>,
}

#[derive(Clone, Debug)]
pub(crate) struct Flow {
    msg: Message,
    vl: u8,
    sender: RcSender,
    receiver: RcReceiver,
    cc: CcState,
    next_allowed: Time,
    /// The SHARP group this rank's buffer feeds.
    sharp: Option<u32>,
    /// Life-cycle state shared with the other fabric.
    life: Progress,
    /// The sender's HCA port: where its posts are handled.
    nic_port: u32,
}

driver::tracked_by_fields!(Flow);

/// A packet as it left its source HCA.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Captured {
    pub time: Time,
    pub repr: PacketRepr,
}

/// Conservation and buffer checks at one instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Audit {
    pub sent_payload: u64,
    pub delivered_payload: u64,
    pub in_flight_payload: u64,
    pub packets_in_flight: u64,
    /// Whether any input buffer ever held more than its size.
    pub buffer_overflows: u64,
    /// Frames holding a pool slot but found on no link and in no queue (a leak).
    pub lost_frames: u64,
}

/// A running InfiniBand fabric.
pub struct Simulation {
    cfg: IbConfig,
    topo: Topology,
    routes: Routes,
    /// The event queue, the flows and their life cycle, the stop and the capture.
    state: RunState<Event, Flow, Captured>,
    /// Every frame on a link or in a switch queue, stored once from its first transmission
    /// to its delivery.
    frames: Pool<Frame>,
    /// The pool size above which the model's state outgrows the cache and
    /// [`Simulation::prefetch_ahead`] asks for the coming events' state.
    prefetch_above_slots: usize,
    ports: Vec<PortState>,
    /// Switch egress queues at `port x VLs + vl` (empty on host ports).
    egress: Vec<EgressVl>,
    /// Send and receive credit state of each port's VLs, at `port x VLs + vl`: dense
    /// arrays (a few kilobytes) that stay in the first-level cache, where a small heap
    /// vector per port cost a miss per access.
    tx_credit: Vec<CreditSender>,
    rx_credit: Vec<CreditReceiver>,
    /// The VL arbitration table every port uses.
    arbitration: ArbTable,
    /// Adaptive routing's load measure per port (see [`Simulation::load`]), refreshed
    /// whenever one of its terms changes; kept apart from `ports` so that comparing a
    /// switch's candidate up-ports reads one or two cache lines, not one port each.
    loads: Vec<u64>,
    counters: Vec<PortCounters>,
    hcas: Vec<Hca>,
    sharp: Vec<SharpGroup>,
    fecn_marks: u64,
    becns: u64,
    duplicates: u64,
    buffer_overflows: u64,
    /// Data packets in flight, and their peak.
    in_flight: InFlight,
    deadlock_check_pending: bool,
    /// A closed set of blocked VLs seen at the last check, with its ports' packet counts.
    deadlock_suspect: Option<(Vec<usize>, Vec<u64>)>,
    /// Each event creator's next tie (see [`Ties`]).
    ties: Ties,
    /// The creator of what the current event's handler schedules: the port it is
    /// handled at (a link's far end for an arrival, a sender's HCA for a post).
    creator: u32,
    /// This run's share when it is split over threads (see [`crate::parallel`]).
    part: Option<Part<Frame>>,
    /// The run's lookahead (see [`driver::lookahead`]).
    lookahead: Time,
}

impl Simulation {
    /// Builds the fabric and posts every message at its start time. The configuration
    /// and messages must already be validated (hosts in range, sizes positive).
    pub fn new(
        cfg: IbConfig,
        topo: Topology,
        workload: &Workload,
        stop_at: Option<Time>,
    ) -> Result<Self, String> {
        Self::build(cfg, topo, workload, stop_at, None)
    }

    /// Builds one part of a run split over threads: it keeps the whole state but handles
    /// only the events of the ports `part` holds. Its run ends where its coordinator says.
    pub(crate) fn new_part(
        cfg: IbConfig,
        topo: Topology,
        workload: &Workload,
        part: Part<Frame>,
    ) -> Result<Self, String> {
        Self::build(cfg, topo, workload, None, Some(part))
    }

    fn build(
        cfg: IbConfig,
        topo: Topology,
        workload: &Workload,
        stop_at: Option<Time>,
        part: Option<Part<Frame>>,
    ) -> Result<Self, String> {
        let routes = Routes::minimal(&topo)?;
        if let Some(n) = (0..topo.nodes().len())
            .find(|&n| topo.node_ports(NodeId(n as u32)).len() + 1 >= NO_INPUT as usize)
        {
            return Err(format!(
                "switch {n} has {} ports; the InfiniBand model takes switches of up to {} ports",
                topo.node_ports(NodeId(n as u32)).len(),
                NO_INPUT - 2
            ));
        }
        let vls = cfg.virtual_lanes as usize;
        let blocks = cfg.vl_buffer / ib::CREDIT_BLOCK as u32;
        let arbitration = ArbTable::new(
            cfg.vl_weights
                .iter()
                .enumerate()
                .map(|(vl, &weight)| ArbEntry {
                    vl: vl as u8,
                    weight,
                })
                .collect(),
        );
        let egress: Vec<EgressVl> = topo
            .ports()
            .iter()
            .flat_map(|p| {
                let inputs = match topo.nodes()[p.node.index()] {
                    // One more input for packets the switch makes itself (SHARP).
                    NodeKind::Switch { .. } => topo.node_ports(p.node).len() + 1,
                    NodeKind::Host(_) => 0,
                };
                // Below NO_INPUT, which ends the round-robin list (checked above).
                std::iter::repeat_n(EgressVl::new(inputs as u16), vls)
            })
            .collect();
        let ports: Vec<PortState> = topo
            .ports()
            .iter()
            .map(|p| {
                let host = match topo.nodes()[p.node.index()] {
                    NodeKind::Host(h) => Some(h),
                    NodeKind::Switch { .. } => None,
                };
                PortState {
                    link: *p,
                    ps_per_byte: p.rate.whole_ps_per_byte().unwrap_or(0),
                    host,
                    busy: false,
                    free_at: Time::ZERO,
                    generation: 0,
                    wake_at: NEVER,
                    wire: Wire::default(),
                    fc_pending: 0,
                    fc_sent_since_refresh: false,
                    releasing: None,
                    arbiter: arbitration.start(),
                    queued: 0,
                    stall_since: NEVER,
                    tx_bytes: 0,
                    tx_packets: 0,
                }
            })
            .collect();
        let hcas = (0..topo.host_count())
            .map(|_| Hca {
                acks: vec![VecDeque::new(); vls],
                qps: vec![VecDeque::new(); vls],
            })
            .collect();
        let mut ties = Ties::new(ports.len(), "InfiniBand")?;
        let mut queue = EventQueue::new();
        let messages = &workload.messages;
        let mut lifecycle = Lifecycle::new(workload, &topo, cfg.hca_tx_latency);
        let initial = lifecycle.initial_posts(messages);
        let slack = lifecycle.cross_server_slack(workload, &topo, cfg.hca_rx_latency);
        let fc = ib::FLOW_CONTROL_PACKET_LEN as u64;
        let grid = driver::lookahead(&topo, fc, slack, cfg.deadlock_check);
        let sharp = workload
            .sharp_groups
            .iter()
            .map(|r| {
                let ranks: Vec<HostId> = messages[r.start as usize..r.end as usize]
                    .iter()
                    .map(|m| m.src)
                    .collect();
                let chunks = RcSender::new(messages[r.start as usize].size, cfg.mtu, 1).packets();
                SharpGroup::build(&topo, &ranks, r.clone(), chunks)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let flows = messages
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let sender = RcSender::new(m.size, cfg.mtu, cfg.ack_every);
                let receiver = RcReceiver::new(sender.packets(), cfg.ack_every);
                Flow {
                    msg: *m,
                    vl: cfg.sl_to_vl[m.sl as usize % 16],
                    sender,
                    receiver,
                    cc: CcState::default(),
                    next_allowed: Time::ZERO,
                    sharp: workload
                        .sharp_groups
                        .iter()
                        .position(|r| r.contains(&(i as u32)))
                        .map(|g| g as u32),
                    life: Progress::new(m.start, workload.follows[i]),
                    nic_port: topo.host_port(m.src).0,
                }
            })
            .collect();
        // Ports' refresh timers are not synchronised: spread their phases over one period.
        let nports = topo.ports().len() as u64;
        for p in 0..nports {
            if part.as_ref().is_some_and(|part| !part.holds(p as u32)) {
                continue;
            }
            let phase = Time(cfg.credit_refresh.ps() * (p + 1) / nports.max(1));
            let tie = ties.next(p as u32);
            queue.schedule_tied(phase, tie, Event::CreditRefresh { port: p as u32 });
        }
        let state_bytes = ports.len() * std::mem::size_of::<PortState>()
            + egress.len() * std::mem::size_of::<EgressVl>();
        let mut sim = Simulation {
            cfg,
            topo,
            routes,
            state: RunState::new(
                queue,
                flows,
                lifecycle,
                stop_at,
                part.is_none().then_some(grid),
            ),
            frames: Pool::default(),
            prefetch_above_slots: driver::prefetch_above_slots::<Frame, ()>(state_bytes),
            loads: vec![0; ports.len()],
            counters: vec![PortCounters::default(); ports.len()],
            tx_credit: vec![CreditSender::new(blocks); ports.len() * vls],
            rx_credit: vec![CreditReceiver::new(blocks); ports.len() * vls],
            arbitration,
            ports,
            egress,
            hcas,
            sharp,
            fecn_marks: 0,
            becns: 0,
            duplicates: 0,
            buffer_overflows: 0,
            in_flight: InFlight::default(),
            deadlock_check_pending: false,
            deadlock_suspect: None,
            creator: ties.setup(),
            ties,
            part,
            lookahead: grid,
        };
        // Where the ports and egress queues alone outgrow the cache, so do the event
        // queue's nodes: a dense fabric's drained bucket is a list of dozens of them.
        sim.state.queue.walk_ahead(state_bytes > WORTH_ABOVE_BYTES);
        <Simulation as MessageFabric>::schedule_posts(&mut sim, initial);
        Ok(sim)
    }

    /// Schedules `event` at `at` as the current creator's next event.
    fn schedule(&mut self, at: Time, event: Event) {
        let tie = self.ties.next(self.creator);
        self.state.queue.schedule_tied(at, tie, event);
    }

    /// The port an event is handled at, which creates what its handler schedules.
    #[inline(always)]
    fn creator_of(&self, event: &Event) -> u32 {
        match *event {
            Event::Transmitter { port, .. } | Event::CreditRefresh { port } => port,
            Event::Arrival { port } => self.ports[port as usize].link.peer.0,
            Event::Post { flow } | Event::LocalDone { flow } => {
                self.state.flows[flow as usize].nic_port
            }
            Event::DeadlockCheck => self.ties.global(),
        }
    }

    /// Keeps the packets `filter` selects, as they leave their source HCA.
    pub fn capture(&mut self, filter: CaptureFilter) {
        self.state.capture = Some((filter, Vec::new()));
    }

    /// The captured packets, in transmission order.
    pub fn captured(&self) -> &[Captured] {
        self.state.captured()
    }

    pub fn now(&self) -> Time {
        self.state.now()
    }

    pub fn events(&self) -> u64 {
        self.state.events()
    }

    /// The windows a split run took (0 for a run on one thread).
    pub fn windows(&self) -> u64 {
        self.state.windows()
    }

    #[inline(always)]
    fn handle_event(&mut self) {
        let Some((_, event)) = self.state.next_event() else {
            return;
        };
        self.creator = self.creator_of(&event);
        self.prefetch_ahead();
        match event {
            Event::Transmitter { port, generation } => {
                let p = &mut self.ports[port as usize];
                if p.generation != generation {
                    return;
                }
                if p.busy {
                    p.busy = false;
                    let releasing = p.releasing.take();
                    self.add_load(PortId(port), -1);
                    if let Some(r) = releasing {
                        self.release(r);
                    }
                }
                self.ports[port as usize].wake_at = NEVER;
                self.try_transmit(PortId(port));
            }
            Event::Arrival { port } => self.arrive(PortId(port)),
            Event::CreditRefresh { port } => {
                let p = &mut self.ports[port as usize];
                if !p.fc_sent_since_refresh {
                    p.fc_pending = (1u16 << self.cfg.virtual_lanes) - 1;
                }
                p.fc_sent_since_refresh = false;
                let next = self.state.queue.now() + self.cfg.credit_refresh;
                self.schedule(next, Event::CreditRefresh { port });
                self.try_transmit(PortId(port));
            }
            Event::DeadlockCheck => self.check_deadlock(),
            Event::LocalDone { flow } => self.local_done(flow),
            Event::Post { flow } => self.post(flow),
        }
    }

    /// Asks for the state the coming events will touch, in stages, so that their cache
    /// misses overlap the current event and each stage reads only lines an earlier stage
    /// asked for: for the third event ahead, both lines of its port and its first egress
    /// VL; for the second, the first packet maturing at that VL and the queue of the
    /// input whose turn it is; for the next, the frame at that input's head, or, if it is
    /// an arrival, the frame at the head of its link. (A large fabric makes hundreds of
    /// events per nanosecond of simulated time, so a packet's frame and queues have left
    /// the cache by the time it matures, 150 ns after it arrived, and again by its turn.)
    #[inline(always)]
    fn prefetch_ahead(&self) {
        if self.frames.slots() <= self.prefetch_above_slots {
            return;
        }
        let queue = &self.state.queue;
        if let Some(&Event::Transmitter { port, .. } | &Event::Arrival { port }) =
            queue.peek_ahead(2)
        {
            let p = &self.ports[port as usize];
            prefetch(p);
            prefetch(&p.wake_at);
            prefetch(&self.egress[port as usize * self.vls()]);
        }
        if let Some(&Event::Transmitter { port, .. }) = queue.peek_ahead(1) {
            self.egress[port as usize * self.vls()].prefetch_next(&self.frames);
        }
        match queue.peek_ahead(0) {
            Some(&Event::Arrival { port }) => {
                if let Some(slot) = self.ports[port as usize].wire.head() {
                    self.frames.prefetch(slot);
                }
            }
            Some(&Event::Transmitter { port, .. }) => {
                self.egress[port as usize * self.vls()].prefetch_turn(&self.frames);
            }
            _ => {}
        }
    }

    /// Schedules the run-wide deadlock check at `at`.
    fn schedule_check(&mut self, at: Time) {
        self.deadlock_check_pending = true;
        let tie = self.ties.next(self.ties.global());
        (self.state.queue).schedule_tied(at, tie, Event::DeadlockCheck);
    }

    /// The periodic deadlock check, while any port waits for credits.
    fn check_deadlock(&mut self) {
        self.deadlock_check_pending = false;
        let now = self.state.queue.now();
        let mut suspect = self.deadlock_suspect.take();
        let check = Self::judge(&[self], &mut suspect);
        self.deadlock_suspect = suspect;
        match check {
            Check::Deadlock(cycle) => self.state.deadlock = Some(Deadlock { at: now, cycle }),
            Check::Again => self.schedule_check(now + self.cfg.deadlock_check),
            Check::Clear => {}
        }
    }

    /// The deadlock check over the run made of `parts` (this run's parts in
    /// order, or this run alone): a credit loop seen twice in a row with no packet sent
    /// from its ports in between is a deadlock; otherwise the check goes on while a loop
    /// is suspected or any port waits for credits. `suspect` is the loop seen last, with
    /// its ports' packet counts.
    fn judge(parts: &[&Simulation], suspect: &mut Option<(Vec<usize>, Vec<u64>)>) -> Check {
        let first = parts[0];
        let vls = first.vls();
        match Self::find_deadlock(parts) {
            Some(cycle) => {
                let sent: Vec<u64> = cycle
                    .iter()
                    .map(|&q| parallel::holder(parts, q / vls).ports[q / vls].tx_packets)
                    .collect();
                if suspect
                    .as_ref()
                    .is_some_and(|(c, s)| *c == cycle && *s == sent)
                {
                    let hops = cycle
                        .iter()
                        .map(|&q| deadlock_hop(&first.topo, PortId((q / vls) as u32)))
                        .collect();
                    return Check::Deadlock(hops);
                }
                *suspect = Some((cycle, sent));
            }
            None => *suspect = None,
        }
        let stalled = (0..first.ports.len())
            .any(|i| parallel::holder(parts, i).ports[i].stall_since != NEVER);
        if suspect.is_some() || stalled {
            Check::Again
        } else {
            Check::Clear
        }
    }

    fn vls(&self) -> usize {
        self.cfg.virtual_lanes as usize
    }

    /// Index of `port`'s VL `vl` in the per-VL arrays.
    fn vl_index(&self, port: PortId, vl: u8) -> usize {
        port.index() * self.vls() + vl as usize
    }

    /// A credit loop (see [`WaitGraph::find_deadlock`]): queue and buffer `port x VLs +
    /// vl`; a switch-to-switch egress VL whose next packet lacks credits waits on its
    /// peer's input buffer, whose blocks sit in the egress VLs its packets were queued at.
    /// Returns the cycle as queue numbers.
    fn find_deadlock(parts: &[&Simulation]) -> Option<Vec<usize>> {
        let first = parts[0];
        let (topo, vls, n) = (&first.topo, first.vls(), first.ports.len());
        let is_switch = |port: PortId| {
            matches!(
                topo.nodes()[topo.port(port).node.index()],
                NodeKind::Switch { .. }
            )
        };
        // A switch-to-switch egress VL whose ready packet lacks credits.
        let blocked = |i: usize, vl: usize| {
            let s = parallel::holder(parts, i);
            let p = &s.ports[i];
            if p.host.is_some() || !is_switch(p.link.peer) {
                return false;
            }
            let e = &s.egress[i * vls + vl];
            e.next_input().is_some_and(|input| {
                let front = s.frames.get(e.head(input)).packet();
                !s.tx_credit[i * vls + vl].can_send(front.blocks())
            })
        };
        let mut edges: Vec<(u32, u32)> = (0..n)
            .filter(|&i| (0..vls).any(|vl| blocked(i, vl)))
            .map(|i| {
                let link = first.ports[i].link;
                (link.node.0, topo.port(link.peer).node.0)
            })
            .collect();
        if !driver::has_cycle(&mut edges) {
            return None;
        }
        let mut g = WaitGraph {
            waits_on: vec![None; n * vls],
            holds: vec![Vec::new(); n * vls],
            occupancy: (0..n * vls)
                .map(|q| parallel::holder(parts, q / vls).rx_credit[q].used() as u64)
                .collect(),
        };
        for i in 0..n {
            let s = parallel::holder(parts, i);
            let port = PortId(i as u32);
            let peer = s.ports[i].link.peer;
            let inputs = topo.node_ports(topo.port(port).node);
            for (vl, e) in s.egress[i * vls..(i + 1) * vls].iter().enumerate() {
                if !blocked(i, vl) {
                    continue;
                }
                let q = i * vls + vl;
                g.waits_on[q] = Some(peer.index() * vls + vl);
                for (input, blocks) in inputs.iter().zip(e.blocks_by_input(&s.frames)) {
                    if blocks > 0 {
                        g.holds[q].push((input.index() * vls + vl, blocks));
                    }
                }
            }
        }
        g.find_deadlock()
    }

    /// Data packets in flight changed by `change` (a part of a split run logs it for its
    /// coordinator, which finds the run's peak).
    fn count_in_flight(&mut self, change: i64) {
        (self.in_flight).change(self.part.as_mut(), &self.state.queue, change);
    }

    /// Frees the input-buffer credits of a packet that has left this switch.
    fn release(&mut self, r: Release) {
        let q = self.vl_index(r.input, r.vl);
        self.rx_credit[q].on_free(r.blocks as u32);
        self.ports[r.input.index()].fc_pending |= 1 << r.vl;
        self.try_transmit(r.input);
    }

    /// Starts the port's next frame if its transmitter is free; otherwise or if nothing is
    /// sendable, arranges to be woken when something becomes ready.
    #[inline(always)]
    fn try_transmit(&mut self, port: PortId) {
        if !self.ports[port.index()].busy {
            self.start_next(port);
        }
    }

    /// [`Simulation::try_transmit`] on an idle transmitter.
    fn start_next(&mut self, port: PortId) {
        let now = self.state.queue.now();
        let vls = self.vls();
        while self.ports[port.index()].fc_pending != 0 {
            let p = &mut self.ports[port.index()];
            let vl = p.fc_pending.trailing_zeros() as u8;
            p.fc_pending &= !(1 << vl);
            p.fc_sent_since_refresh = true;
            self.counters[port.index()].credit_packets += 1;
            let frame = self.frames.alloc(Frame::Credit {
                vl,
                fctbs: self.tx_credit[port.index() * vls + vl as usize].fctbs() as u16,
                fccl: self.rx_credit[port.index() * vls + vl as usize].fccl() as u16,
            });
            self.transmit(port, frame, ib::FLOW_CONTROL_PACKET_LEN as u32);
        }
        match self.ports[port.index()].host {
            None => self.serve_switch(port, now),
            Some(h) => self.serve_hca(port, h, now),
        }
    }

    /// Nothing can be sent now: notes a credit stall if `blocked` (a ready packet lacks
    /// credits) and arranges to be woken at `wake`, when the earliest packet not yet
    /// ready becomes ready.
    fn wait(&mut self, port: PortId, blocked: bool, wake: Option<Time>, now: Time) {
        let p = &mut self.ports[port.index()];
        if blocked && p.stall_since == NEVER {
            p.stall_since = now;
            if !self.deadlock_check_pending {
                let at = now + self.cfg.deadlock_check;
                match &mut self.part {
                    None => self.schedule_check(at),
                    Some(part) => {
                        self.deadlock_check_pending = true;
                        part.check_at = Some(at);
                    }
                }
            }
        }
        let p = &mut self.ports[port.index()];
        if let Some(t) = wake {
            if t < p.wake_at {
                p.generation += 1;
                p.wake_at = t;
                let generation = p.generation;
                self.schedule(
                    t,
                    Event::Transmitter {
                        port: port.0,
                        generation,
                    },
                );
            }
        }
    }

    /// Puts a frame on the wire after whatever is already being serialised. A packet
    /// holds the transmitter until its end event; a flow-control packet only pushes
    /// `free_at` forward.
    fn transmit(&mut self, port: PortId, slot: Slot, bytes: u32) {
        let now = self.state.queue.now();
        let frame = *self.frames.get(slot);
        let p = &mut self.ports[port.index()];
        let spec = p.link;
        let end = p.free_at.max(now) + p.serialization(bytes);
        p.free_at = end;
        p.tx_bytes += bytes as u64;
        let arrival = end + spec.delay;
        if let Frame::Packet(pkt) = frame {
            p.busy = true;
            p.wake_at = NEVER;
            p.generation += 1;
            if p.stall_since != NEVER {
                self.counters[port.index()].stall_total += now - p.stall_since;
                p.stall_since = NEVER;
            }
            p.tx_packets += 1;
            let generation = p.generation;
            self.add_load(port, 1);
            self.update_tx_credit(port, pkt.vl, |c| c.on_send(pkt.blocks()));
            self.schedule(
                end,
                Event::Transmitter {
                    port: port.0,
                    generation,
                },
            );
        }
        // Every frame has its own arrival event, created here, so that its tie is the
        // sender's whichever thread handles the far end.
        let tie = self.ties.next(self.creator);
        if let Some(part) = &mut self.part {
            if !part.holds(spec.peer.0) {
                let frame = self.frames.free(slot);
                part.hand_over(port.0, spec.peer.index(), frame, arrival, tie);
                return;
            }
        }
        let event = Event::Arrival { port: port.0 };
        let (frames, queue) = (&mut self.frames, &mut self.state.queue);
        (self.ports[port.index()].wire).carry(frames, queue, slot, arrival, tie, event);
    }

    /// Sends a switch egress port's next packet, chosen by VL arbitration and then
    /// round-robin over the inputs with a ready head, or waits.
    fn serve_switch(&mut self, port: PortId, now: Time) {
        let p = &mut self.ports[port.index()];
        let mut blocked = false;
        let mut wake: Option<Time> = None;
        let vls = self.cfg.virtual_lanes as usize;
        let egress = &mut self.egress[port.index() * vls..(port.index() + 1) * vls];
        let tx_credit = &self.tx_credit[port.index() * vls..];
        let frames = &mut self.frames;
        let vl = self.arbitration.pick(&mut p.arbiter, |vl| {
            let e = &mut egress[vl as usize];
            e.mature(frames, now);
            match e.next_input() {
                Some(input) => {
                    let pkt = frames.get(e.head(input)).packet();
                    if tx_credit[vl as usize].can_send(pkt.blocks()) {
                        return true;
                    }
                    blocked = true;
                }
                None => {
                    if e.first_ready != NEVER {
                        wake = Some(wake.map_or(e.first_ready, |w: Time| w.min(e.first_ready)));
                    }
                }
            }
            false
        });
        let Some(vl) = vl else {
            return self.wait(port, blocked, wake, now);
        };
        let (input, slot) = egress[vl as usize].take(&mut self.frames);
        let pkt = *self.frames.get(slot).packet();
        p.queued -= pkt.wire as u64;
        self.loads[port.index()] -= pkt.wire as u64;
        p.arbiter.charge(pkt.blocks());
        // Packets the switch made itself (the last input) hold no input buffer.
        p.releasing = self
            .topo
            .node_ports(p.link.node)
            .get(input as usize)
            .map(|&input_port| Release {
                input: input_port,
                vl,
                blocks: pkt.blocks() as u16,
            });
        self.transmit(port, slot, pkt.wire);
    }

    /// Sends an HCA's next packet: a waiting ACK first, else the next QP's segment in
    /// round-robin order, subject to VL arbitration, credits and injection gaps; or waits.
    fn serve_hca(&mut self, port: PortId, host: HostId, now: Time) {
        let hca = &self.hcas[host.index()];
        let p = &mut self.ports[port.index()];
        let flows = &self.state.flows;
        let mut blocked = false;
        let mut wake: Option<Time> = None;
        let tx_credit = &self.tx_credit[port.index() * self.cfg.virtual_lanes as usize..];
        // Position in the VL's QP list of the QP to serve, when no ACK is waiting.
        let mut chosen = 0;
        let vl = self.arbitration.pick(&mut p.arbiter, |vl| {
            let credit = &tx_credit[vl as usize];
            if let Some(ack) = hca.acks[vl as usize].front() {
                if credit.can_send(ack.blocks()) {
                    return true;
                }
                blocked = true;
                return false;
            }
            for (pos, &f) in hca.qps[vl as usize].iter().enumerate() {
                let flow = &flows[f as usize];
                if flow.next_allowed > now {
                    wake = Some(wake.map_or(flow.next_allowed, |w: Time| w.min(flow.next_allowed)));
                    continue;
                }
                let seg = flow.sender.peek().expect("queued QPs have data");
                if credit.can_send(ib::credit_blocks(ib::write_packet_len(
                    seg.payload,
                    seg.index == 0,
                ))) {
                    chosen = pos;
                    return true;
                }
                blocked = true;
                return false;
            }
            false
        });
        let Some(vl) = vl else {
            return self.wait(port, blocked, wake, now);
        };
        let hca = &mut self.hcas[host.index()];
        let mut handoff = None;
        let packet = if let Some(ack) = hca.acks[vl as usize].pop_front() {
            ack
        } else {
            let qps = &mut hca.qps[vl as usize];
            let f = qps.remove(chosen).expect("the arbiter saw this QP");
            let flow = &mut self.state.flows[f as usize];
            let seg: Segment = flow.sender.next_segment().expect("queued QPs have data");
            if flow.sender.has_more() {
                qps.push_back(f);
            } else if !flow.life.injected {
                flow.life.injected = true;
                handoff = flow.life.successor.take().map(|j| (f, j));
            }
            let wire = ib::write_packet_len(seg.payload, seg.index == 0) as u32;
            let gap = match &self.cfg.congestion_control {
                Some(cc) => flow.cc.injection_delay(now, &cc.source),
                None => Time::ZERO,
            };
            flow.next_allowed = now + self.ports[port.index()].serialization(wire) + gap;
            // SHARP buffers count as sent and delivered together, when the result is in.
            if flow.sharp.is_none() {
                flow.life.sent_bytes += seg.payload as u64;
            }
            let (kind, dst) = match flow.sharp {
                Some(g) => (Kind::SharpUp, g),
                None => (Kind::Data, flow.msg.dst.0),
            };
            self.count_in_flight(1);
            Packet {
                flow: f,
                index: seg.index,
                payload: seg.payload,
                wire,
                dst,
                kind,
                opcode: seg.opcode,
                vl,
                fecn: false,
                ack_req: seg.ack_req,
                input: 0,
            }
        };
        if let Some((prev, next)) = handoff {
            self.inherit_connection(prev, next);
            let nvl = self.state.flows[next as usize].vl as usize;
            self.hcas[host.index()].qps[nvl].push_back(next);
        }
        self.ports[port.index()].arbiter.charge(packet.blocks());
        self.record(packet, now);
        self.ports[port.index()].releasing = None;
        let slot = self.frames.alloc(Frame::Packet(packet));
        self.transmit(port, slot, packet.wire);
    }

    /// Adds a packet leaving its source HCA to the capture, if it is selected.
    fn record(&mut self, pkt: Packet, now: Time) {
        let Some((filter, out)) = &mut self.state.capture else {
            return;
        };
        if !filter.wants(Some(pkt.flow), out.len()) {
            return;
        }
        let flow = &self.state.flows[pkt.flow as usize];
        let (src, dst) = match pkt.kind {
            Kind::Data | Kind::SharpUp | Kind::SharpDown => (flow.msg.src, flow.msg.dst),
            Kind::Ack | Kind::Becn => (flow.msg.dst, flow.msg.src),
        };
        let psn = pkt.index & PSN_MASK;
        let repr = PacketRepr {
            vl: pkt.vl,
            sl: flow.msg.sl,
            dlid: lid(dst),
            slid: lid(src),
            opcode: pkt.opcode,
            pkey: DEFAULT_PKEY,
            fecn: pkt.fecn,
            becn: pkt.kind == Kind::Becn,
            // QP numbers: the flow's QP is 0x100 + flow at both ends (QP0/1 are reserved).
            dest_qp: 0x100 + pkt.flow,
            ack_req: pkt.ack_req,
            psn,
            reth: pkt.opcode.has_reth().then_some(Reth {
                virtual_address: 0x1_0000_0000,
                rkey: 0x100 + pkt.flow,
                dma_length: flow.msg.size.min(u32::MAX as u64) as u32,
            }),
            aeth: pkt.opcode.has_aeth().then_some(Aeth {
                syndrome: 0,
                msn: 0,
            }),
            payload_len: pkt.payload,
        };
        debug_assert_eq!(repr.wire_len() as u32, pkt.wire);
        out.push(Captured { time: now, repr });
    }

    /// The head of `port`'s link reaches the peer port.
    fn arrive(&mut self, port: PortId) {
        let now = self.state.queue.now();
        let p = &mut self.ports[port.index()];
        let slot = p.wire.pop(&mut self.frames);
        let to = p.link.peer;
        match *self.frames.get(slot) {
            Frame::Credit { vl, fctbs, fccl } => {
                self.frames.free(slot);
                let q = self.vl_index(to, vl);
                self.rx_credit[q].on_fctbs(fctbs as u32);
                self.update_tx_credit(to, vl, |c| c.on_limit(fccl as u32));
                self.try_transmit(to);
            }
            Frame::Packet(pkt) => {
                let credit = self.vl_index(to, pkt.vl);
                if self.rx_credit[credit].on_receive(pkt.blocks()).is_err() {
                    self.buffer_overflows += 1;
                }
                let q = &self.ports[to.index()];
                match q.host {
                    None => {
                        let node = q.link.node;
                        self.forward(node, to, slot, now)
                    }
                    Some(h) => {
                        self.frames.free(slot);
                        self.rx_credit[credit].on_free(pkt.blocks());
                        self.ports[to.index()].fc_pending |= 1 << pkt.vl;
                        self.deliver(h, pkt, now);
                        self.try_transmit(to);
                    }
                }
            }
        }
    }

    /// A SHARP packet reached switch `node` on `input`: the aggregation unit takes it
    /// (returning its credits), and sends on what is complete: a reduced chunk to the
    /// parent, or at the root the result down, or (going down) copies to every child.
    fn sharp_at_switch(&mut self, node: NodeId, input: PortId, pkt: Packet, now: Time) {
        let q = self.vl_index(input, pkt.vl);
        self.rx_credit[q].on_free(pkt.blocks());
        self.ports[input.index()].fc_pending |= 1 << pkt.vl;
        self.try_transmit(input);
        self.count_in_flight(-1);
        let g = &mut self.sharp[pkt.dst as usize];
        let outs: Vec<(PortId, Kind)> = match pkt.kind {
            Kind::SharpUp if !g.contribute(node, pkt.index) => Vec::new(),
            Kind::SharpUp => match g.up[node.index()] {
                Some(p) => vec![(p, Kind::SharpUp)],
                None => g.down[node.index()]
                    .iter()
                    .map(|&p| (p, Kind::SharpDown))
                    .collect(),
            },
            _ => g.down[node.index()]
                .iter()
                .map(|&p| (p, Kind::SharpDown))
                .collect(),
        };
        for (out, kind) in outs {
            self.enqueue_generated(out, Packet { kind, ..pkt }, now);
        }
    }

    /// The egress of switch `node` towards `dst`: the static route's port, or with
    /// adaptive routing the least loaded candidate (the static one on a tie).
    #[inline(always)]
    fn route(&self, node: NodeId, dst: HostId) -> PortId {
        let preferred = self.routes.static_port(node, dst);
        if !self.cfg.adaptive_routing {
            return preferred;
        }
        let mut best = preferred;
        let mut best_load = self.load(preferred);
        for &c in self.routes.candidates(node, dst) {
            let load = self.load(c);
            if load < best_load {
                best = c;
                best_load = load;
            }
        }
        best
    }

    /// Queues a packet the switch made itself at egress `out`, after the switch latency.
    fn enqueue_generated(&mut self, out: PortId, pkt: Packet, now: Time) {
        self.count_in_flight(1);
        let queue = self.vl_index(out, pkt.vl);
        let e = &mut self.egress[queue];
        let local = e.radix as usize - 1;
        let slot = self.frames.alloc(Frame::Packet(pkt));
        e.push(&mut self.frames, local, slot, now + self.cfg.switch_latency);
        self.count_queued(out, pkt.wire);
        self.try_transmit(out);
    }

    /// Counts `bytes` more queued at egress `out`: its peak, and adaptive routing's load.
    fn count_queued(&mut self, out: PortId, bytes: u32) {
        let o = &mut self.ports[out.index()];
        o.queued += bytes as u64;
        let c = &mut self.counters[out.index()];
        c.peak_queue = c.peak_queue.max(o.queued);
        self.add_load(out, bytes as i64);
    }

    /// Routes the packet in `slot`, which arrived at switch `node` on `input`, into an
    /// egress queue.
    fn forward(&mut self, node: NodeId, input: PortId, slot: Slot, now: Time) {
        let pkt = *self.frames.get(slot).packet();
        if matches!(pkt.kind, Kind::SharpUp | Kind::SharpDown) {
            self.frames.free(slot);
            self.sharp_at_switch(node, input, pkt, now);
            return;
        }
        let out = self.route(node, HostId(pkt.dst));
        let local = self.ports[input.index()].link.local as usize;
        let ready = now + self.cfg.switch_latency;
        let queue = self.vl_index(out, pkt.vl);
        let e = &mut self.egress[queue];
        if let Some(cc) = &self.cfg.congestion_control {
            if pkt.kind == Kind::Data && e.bytes >= cc.fecn_threshold {
                if let Frame::Packet(p) = self.frames.get_mut(slot) {
                    p.fecn = true;
                }
                self.fecn_marks += 1;
                self.counters[out.index()].fecn_marks += 1;
            }
        }
        e.push(&mut self.frames, local, slot, ready);
        self.count_queued(out, pkt.wire);
        self.try_transmit(out);
    }

    /// Adaptive routing's load measure: bytes queued for the port, plus the bytes its
    /// credits say sit unreturned in the downstream buffer (the switch's view of
    /// congestion beyond the link), plus one if the transmitter is busy. Unverified: NVIDIA
    /// documents that Quantum adaptive routing picks a less loaded port but not its metric;
    /// this one decides how well a permutation spreads (docs/PARAMETERS.md).
    fn load(&self, port: PortId) -> u64 {
        self.loads[port.index()]
    }

    /// Adds a change of the port's queue, transmitter or send credits to its load.
    fn add_load(&mut self, port: PortId, delta: i64) {
        let load = &mut self.loads[port.index()];
        *load = load.wrapping_add_signed(delta);
    }

    /// Applies `change` to the port's send credits on `vl`, keeping its
    /// load current.
    fn update_tx_credit(&mut self, port: PortId, vl: u8, change: impl FnOnce(&mut CreditSender)) {
        let window = self.cfg.vl_buffer as u64 / ib::CREDIT_BLOCK as u64;
        let c = &mut self.tx_credit[port.index() * self.cfg.virtual_lanes as usize + vl as usize];
        let before = window.saturating_sub(c.available() as u64);
        change(c);
        let after = window.saturating_sub(c.available() as u64);
        self.add_load(
            port,
            (after as i64 - before as i64) * ib::CREDIT_BLOCK as i64,
        );
    }

    /// A packet reached host `h`.
    fn deliver(&mut self, h: HostId, pkt: Packet, now: Time) {
        if pkt.kind == Kind::SharpDown {
            self.count_in_flight(-1);
            let g = &mut self.sharp[pkt.dst as usize];
            g.received[h.index()] += 1;
            if g.received[h.index()] == g.chunks {
                let fid = g.flow_of_host[h.index()].expect("a rank of the group");
                let at = now + self.cfg.hca_rx_latency;
                let f = &mut self.state.flows[fid as usize];
                f.life.sent_bytes = f.msg.size;
                f.life.delivered_bytes = f.msg.size;
                f.life.finish = Some(at);
                f.life.acked = Some(now);
                self.state.lifecycle.completed += 1;
                self.state.note_completion();
                self.release_dependents(fid, at);
            }
            return;
        }
        if pkt.kind == Kind::Data {
            self.count_in_flight(-1);
        }
        let flow = &mut self.state.flows[pkt.flow as usize];
        match pkt.kind {
            Kind::Data => {
                let receipt = flow.receiver.on_data(pkt.index);
                if receipt.duplicate {
                    self.duplicates += 1;
                    return;
                }
                flow.life.delivered_bytes += pkt.payload as u64;
                if receipt.complete {
                    flow.life.finish = Some(now + self.cfg.hca_rx_latency);
                }
                let cc_on = self.cfg.congestion_control.is_some();
                let reply = |kind: Kind, index: u32| Packet {
                    flow: pkt.flow,
                    index,
                    payload: 0,
                    wire: ib::ACK_LEN as u32,
                    dst: flow.msg.src.0,
                    kind,
                    opcode: Opcode::Acknowledge,
                    vl: pkt.vl,
                    fecn: false,
                    ack_req: false,
                    input: 0,
                };
                let hca = &mut self.hcas[h.index()];
                if pkt.fecn && cc_on {
                    self.becns += 1;
                    hca.acks[pkt.vl as usize]
                        .push_back(reply(Kind::Becn, receipt.ack.unwrap_or(0)));
                }
                if let Some(index) = receipt.ack {
                    hca.acks[pkt.vl as usize].push_back(reply(Kind::Ack, index));
                }
                if receipt.complete {
                    self.release_dependents(pkt.flow, now + self.cfg.hca_rx_latency);
                }
            }
            Kind::Ack | Kind::Becn => {
                if pkt.kind == Kind::Becn {
                    let current = driver::current_on_connection(&self.state.flows, pkt.flow);
                    if let Some(cc) = &self.cfg.congestion_control {
                        self.state.flows[current as usize]
                            .cc
                            .on_becn(now, &cc.source);
                    }
                }
                let flow = &mut self.state.flows[pkt.flow as usize];
                // A BECN acknowledges nothing (its ACK, if one was due, travels beside it).
                if pkt.kind == Kind::Ack && flow.sender.on_ack(pkt.index) {
                    flow.life.acked = Some(now);
                    self.state.lifecycle.completed += 1;
                    self.state.note_completion();
                }
            }
            Kind::SharpUp | Kind::SharpDown => {
                unreachable!("SHARP packets end at switches or above")
            }
        }
    }

    /// Bytes of simulator state per packet in flight: its slot in the frame pool
    /// (packets carry no payload bytes; per-port and per-flow state is not per packet).
    pub const fn bytes_per_packet_in_flight() -> usize {
        Pool::<Frame>::slot_bytes()
    }

    /// Payload bytes a flow's receiver holds so far.
    pub fn flow_delivered(&self, flow: usize) -> u64 {
        self.state.flows[flow].life.delivered_bytes
    }

    /// Conservation and buffer checks, computed by walking every queue and link (of a run
    /// on one thread: a merged split run keeps its counters, not its frames).
    pub fn audit(&self) -> Audit {
        let mut in_flight = 0u64;
        let mut packets = 0u64;
        let mut queued_frames = 0u64;
        let mut count = |pkt: &Packet| {
            if pkt.kind == Kind::Data {
                in_flight += pkt.payload as u64;
                packets += 1;
            }
        };
        for p in &self.ports {
            for f in p.wire.frames(&self.frames) {
                queued_frames += 1;
                if let Frame::Packet(pkt) = f {
                    count(pkt);
                }
            }
        }
        for pkt in self.egress.iter().flat_map(|e| e.packets(&self.frames)) {
            queued_frames += 1;
            count(pkt);
        }
        Audit {
            sent_payload: self.state.flows.iter().map(|f| f.life.sent_bytes).sum(),
            delivered_payload: self
                .state
                .flows
                .iter()
                .map(|f| f.life.delivered_bytes)
                .sum(),
            in_flight_payload: in_flight,
            packets_in_flight: packets,
            buffer_overflows: self.buffer_overflows(),
            lost_frames: self.frames.live() as u64 - queued_frames,
        }
    }

    /// Packets that found their input buffer full, plus the buffers that ever held more
    /// than their size.
    fn buffer_overflows(&self) -> u64 {
        let over = self.rx_credit.iter().filter(|c| c.peak() > c.capacity());
        self.buffer_overflows + over.count() as u64
    }

    /// Ideal completion of a message on an empty fabric: HCA latencies, propagation over
    /// every link, a switch latency per switch, the whole message serialised once at the
    /// host rate, and the last packet re-serialised at every store-and-forward switch.
    fn ideal_fct(&self, m: &Message) -> Time {
        if let Some(t) = self.state.lifecycle.ideal_local(&self.topo, m) {
            return t;
        }
        if m.src == m.dst {
            // SHARP: up the tree and down again, the buffer serialised once.
            let depth = self.sharp.iter().map(|g| g.depth).max().unwrap_or(1) as u64;
            let rate = self.topo.port(self.topo.host_port(m.src)).rate;
            let packet = ib::write_packet_len(self.cfg.mtu, false) as u64;
            let packets = m.size.div_ceil(self.cfg.mtu as u64).max(1);
            return self.cfg.hca_tx_latency
                + self.cfg.hca_rx_latency
                + rate.serialization(packets * packet)
                + (self.topo.port(self.topo.host_port(m.src)).delay
                    + self.cfg.switch_latency
                    + rate.serialization(packet))
                    * (2 * depth);
        }
        driver::ideal_fct(
            &self.topo,
            &self.routes,
            m,
            self.cfg.mtu,
            self.cfg.hca_tx_latency + self.cfg.hca_rx_latency,
            self.cfg.switch_latency,
            |payload, first| ib::write_packet_len(payload, first) as u64,
        )
    }

    /// Everything measured, for the experiment layer.
    pub fn report(&self) -> RunReport {
        let flows = self.state.flow_results(|m| self.ideal_fct(m));
        let ports = self
            .ports
            .iter()
            .enumerate()
            .map(|(i, p)| PortResult {
                tx_bytes: p.tx_bytes,
                tx_packets: p.tx_packets,
                peak_queue_bytes: self.counters[i].peak_queue,
                peak_input_bytes: self.rx_credit[i * self.vls()..(i + 1) * self.vls()]
                    .iter()
                    .map(|c| c.peak() as u64 * ib::CREDIT_BLOCK as u64)
                    .max()
                    .unwrap_or(0),
                credit_stall: self.counters[i].stall_total
                    + if p.stall_since == NEVER {
                        Time::ZERO
                    } else {
                        self.state.end_time() - p.stall_since
                    },
                credit_packets: self.counters[i].credit_packets,
                ecn_marks: self.counters[i].fecn_marks,
                ..PortResult::new(&self.topo, PortId(i as u32))
            })
            .collect();
        RunReport {
            sim_time: self.state.sim_time(),
            events: self.events(),
            flows,
            ports,
            drops: 0,
            retransmitted_packets: 0,
            congestion_marks: self.fecn_marks,
            congestion_notifications: self.becns,
            duplicates: self.duplicates,
            buffer_overflows: self.buffer_overflows(),
            peak_packets_in_flight: self.in_flight.peak,
            stopped_by_time: self.state.stopped_by_time,
            pfc_pause_frames: 0,
            naks: 0,
            timeouts: 0,
            watchdog_trips: 0,
            deadlock: self.state.deadlock.clone(),
            pfc_cycles: Vec::new(),
        }
    }
}

/// LIDs: host h has LID h + 1 (LID 0 is reserved).
fn lid(h: HostId) -> u16 {
    (h.0 + 1) as u16
}

impl LifecycleEvent for Event {
    fn post(flow: u32) -> Self {
        Event::Post { flow }
    }
    fn local_done(flow: u32) -> Self {
        Event::LocalDone { flow }
    }
}

impl Splittable for Simulation {
    type Frame = Frame;
    type Sample = ();
    type CheckMemory = Option<(Vec<usize>, Vec<u64>)>;

    fn part(&self) -> Option<&Part<Frame>> {
        self.part.as_ref()
    }

    fn part_mut(&mut self) -> &mut Part<Frame> {
        self.part.as_mut().expect("a part")
    }

    /// The lookahead of this run, and its window grid (see [`driver::lookahead`]).
    fn lookahead(&self) -> Time {
        self.lookahead
    }

    fn deadlock_check_interval(&self) -> Time {
        self.cfg.deadlock_check
    }

    fn sampling(&self) -> Option<Time> {
        None
    }

    fn receive(&mut self, port: u32, frame: Frame, arrival: Time, tie: u64) {
        let slot = self.frames.alloc(frame);
        let event = Event::Arrival { port };
        let (frames, queue) = (&mut self.frames, &mut self.state.queue);
        (self.ports[port as usize].wire).carry(frames, queue, slot, arrival, tie, event);
    }

    fn set_deadlock_check_pending(&mut self, pending: bool) {
        self.deadlock_check_pending = pending;
    }

    fn check_deadlock(parts: &[&Self], _: Time, suspect: &mut Self::CheckMemory) -> Check {
        Self::judge(parts, suspect)
    }

    fn take_samples(_: &mut [&mut Self], _: Time) -> Vec<()> {
        Vec::new()
    }

    /// Each port (its state, egress VLs, credits and load) and each message end from
    /// the part that holds them (a message's receiver side from its receiver's part),
    /// counters summed; `end` is what the coordinator saw.
    fn merge(mut parts: Vec<Simulation>, mut end: SplitEnd<()>) -> Simulation {
        let owner = parts[0].part.as_ref().expect("a part").owner.clone();
        let vls = parts[0].vls();
        let from = |i: usize| &parts[owner[i] as usize];
        let ports: Vec<PortState> = (0..owner.len()).map(|i| from(i).ports[i].clone()).collect();
        let per_vl = |q: usize| from(q / vls);
        let egress: Vec<EgressVl> = (0..owner.len() * vls)
            .map(|q| per_vl(q).egress[q].clone())
            .collect();
        let tx_credit = (0..owner.len() * vls)
            .map(|q| per_vl(q).tx_credit[q].clone())
            .collect();
        let rx_credit = (0..owner.len() * vls)
            .map(|q| per_vl(q).rx_credit[q].clone())
            .collect();
        let loads = (0..owner.len()).map(|i| from(i).loads[i]).collect();
        let counters = (0..owner.len()).map(|i| from(i).counters[i]).collect();
        let topo = &parts[0].topo;
        let hcas = (0..topo.host_count())
            .map(|h| from(topo.host_port(HostId(h)).index()).hcas[h as usize].clone())
            .collect();
        let flows: Vec<Flow> = (parts[0].state.flows.iter().enumerate())
            .map(|(i, f)| {
                let receiver = &from(topo.host_port(f.msg.dst).index()).state.flows[i];
                let mut flow = from(f.nic_port as usize).state.flows[i].clone();
                flow.receiver = receiver.receiver.clone();
                flow.life.finish = receiver.life.finish;
                flow.life.delivered_bytes = receiver.life.delivered_bytes;
                flow
            })
            .collect();
        let sum = |count: fn(&Simulation) -> u64| parts.iter().map(count).sum::<u64>();
        let fecn_marks = sum(|p| p.fecn_marks);
        let becns = sum(|p| p.becns);
        let duplicates = sum(|p| p.duplicates);
        let buffer_overflows = sum(|p| p.buffer_overflows);
        let completed = sum(|p| p.state.lifecycle.completed as u64) as usize;
        // Part 0 becomes the run: its own state replaced by the merged one, with no
        // frames or events left (a merged run is over).
        let mut merged = parts.swap_remove(0);
        merged.ports = ports;
        merged.egress = egress;
        merged.tx_credit = tx_credit;
        merged.rx_credit = rx_credit;
        merged.loads = loads;
        merged.counters = counters;
        merged.hcas = hcas;
        merged.state.flows = flows;
        merged.fecn_marks = fecn_marks;
        merged.becns = becns;
        merged.duplicates = duplicates;
        merged.buffer_overflows = buffer_overflows;
        merged.state.lifecycle.completed = completed;
        merged.frames = Pool::default();
        merged.part = None;
        merged.in_flight = end.in_flight;
        end.close(&mut merged.state);
        merged
    }
}

impl MessageFabric for Simulation {
    type Event = Event;
    type Flow = Flow;
    type Capture = Captured;

    fn state(&self) -> &RunState<Event, Flow, Captured> {
        &self.state
    }
    fn state_mut(&mut self) -> &mut RunState<Event, Flow, Captured> {
        &mut self.state
    }
    fn topology(&self) -> &Topology {
        &self.topo
    }
    #[inline(always)]
    fn handle_next(&mut self) {
        self.handle_event();
    }

    /// BECNs for `prev` reach `next` from now on.
    fn inherit_connection(&mut self, prev: u32, next: u32) {
        let (cc, t) = {
            let p = &mut self.state.flows[prev as usize];
            p.life.handed_to = Some(next);
            (p.cc.clone(), p.next_allowed)
        };
        let n = &mut self.state.flows[next as usize];
        n.cc = cc;
        n.next_allowed = n.next_allowed.max(t);
    }

    /// The message joins its HCA's QP list for its VL.
    fn enqueue(&mut self, flow: u32) {
        let f = &self.state.flows[flow as usize];
        let (src, vl) = (f.msg.src, f.vl as usize);
        self.hcas[src.index()].qps[vl].push_back(flow);
        self.try_transmit(self.topo.host_port(src));
    }

    fn schedule_local_done(&mut self, at: Time, flow: u32) {
        self.schedule(at, Event::LocalDone { flow });
    }

    /// A post's tie is its message's index, so that it is the same whichever event (and
    /// whichever thread) released it.
    fn schedule_posts(&mut self, posts: Vec<(Time, u32)>) {
        for (t, flow) in posts {
            if self.holds(self.state.flows[flow as usize].nic_port) {
                let tie = self.ties.post(flow);
                (self.state.queue).schedule_tied(t, tie, Event::Post { flow });
            }
        }
    }

    /// A part of a split run tells the others, which may send the dependents.
    fn released(&mut self, flow: u32, at: Time) {
        if let Some(part) = &mut self.part {
            part.tell_completed(flow, at);
        }
    }
}
