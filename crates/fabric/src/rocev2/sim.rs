//! The RoCEv2 simulation: state arenas, the event enum and its handlers.

use super::config::RoceConfig;
use crate::driver::{
    self, deadlock_hop, CaptureFilter, Lifecycle, LifecycleEvent, MessageFabric, Progress,
    RunState, Ties, WaitGraph, Wire,
};
use crate::parallel::{self, Check, InFlight, Part, SplitEnd, Splittable};
use crate::report::{Deadlock, DeadlockHop, PortResult, RunReport};
use crate::workload::{Message, Workload};
use fabricsim_core::engine::EventQueue;
use fabricsim_core::pool::{Fifo, Pool, Slot};
use fabricsim_core::prefetch::prefetch;
use fabricsim_core::proto::dcqcn::Dcqcn;
use fabricsim_core::proto::ecn::{marking_draw, RedParams};
use fabricsim_core::proto::pfc::{pause_duration, RESUME_OFFSET};
use fabricsim_core::proto::rc::PSN_MASK;
use fabricsim_core::proto::rc::{InOrderReceipt, InOrderReceiver, RcSender};
use fabricsim_core::topology::{NodeKind, Port, Routes, Topology};
use fabricsim_core::units::{BitRate, HostId, NodeId, PortId, Time};
use fabricsim_core::wire::ib::{Aeth, Opcode, Reth};
use fabricsim_core::wire::roce::{self, RoceRepr};
use std::collections::VecDeque;

/// What a packet is, for the handlers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Data,
    Ack,
    Nak,
    Cnp,
}

/// Traffic classes at an egress: control (ACK, NAK, CNP) is served first.
const DATA: usize = 0;
const CONTROL: usize = 1;

/// A packet as the simulator carries it (no payload bytes).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Packet {
    flow: u32,
    /// Data: position in the message. Ack: last packet covered. Nak: expected packet.
    index: u32,
    dst: u32,
    /// The host that sent it (a data packet's message source, a reply's message
    /// destination), and its connection's UDP source port: what ECMP hashes besides
    /// `dst`, carried so that forwarding never reads the flow.
    src: u32,
    sport: u16,
    /// Payload and link bytes (an MTU is at most [`MAX_MTU`]).
    payload: u16,
    wire: u16,
    kind: Kind,
    /// ECN Congestion Experienced.
    ce: bool,
    /// On a link to a switch: the egress port that switch forwards it by, routed when it
    /// was sent (routing is a pure function of the switch and the packet's addresses, so
    /// the arrival's prefetch can ask for the egress's lines from the frame). From its
    /// arrival to its departure: the switch port it entered by (for ingress accounting).
    port: u32,
}

/// The largest MTU the model takes, so that a frame's lengths fit 16 bits (RoCEv2 uses
/// 1024, 2048 or 4096).
const MAX_MTU: u32 = 16384;

// A packet and a PFC frame share 28 bytes (the kind's spare values tell them apart).
const _: () = assert!(std::mem::size_of::<Frame>() == 28);

impl Packet {
    fn class(&self) -> usize {
        if self.kind == Kind::Data {
            DATA
        } else {
            CONTROL
        }
    }
}

/// What crosses a link.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Frame {
    Packet(Packet),
    /// A PFC frame for the data priority; 0 quanta resumes.
    Pause {
        quanta: u16,
    },
}

impl Frame {
    /// The packet in a frame known to be one (egress queues hold only packets).
    fn packet(&self) -> &Packet {
        match self {
            Frame::Packet(pkt) => pkt,
            Frame::Pause { .. } => unreachable!("queues of packets hold no PFC frames"),
        }
    }

    fn packet_mut(&mut self) -> &mut Packet {
        match self {
            Frame::Packet(pkt) => pkt,
            Frame::Pause { .. } => unreachable!("queues of packets hold no PFC frames"),
        }
    }
}

/// The closed event set.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Event {
    /// The port's transmitter finished a frame, or a queued packet became sendable.
    Transmitter { port: u32, generation: u32 },
    /// The head of the port's link FIFO reaches the peer.
    Arrival { port: u32 },
    /// A flow's WRITE is posted to its NIC.
    Post { flow: u32 },
    /// A flow's retransmission timer.
    Timeout { flow: u32 },
    /// Re-send PAUSE on an ingress that is still congested (or a stalled NIC).
    PauseRefresh { port: u32 },
    /// A transfer inside a server (NVLink, or a PCIe or CPU stage of a data path) landed.
    LocalDone { flow: u32 },
    /// Look for a deadlock in the wait-for graph of paused queues.
    DeadlockCheck,
    /// A NIC's receive pipeline stalls (pause storm) or recovers.
    Stall { host: u32, stalled: bool },
    /// The PFC watchdog looks at a paused switch egress.
    Watchdog { port: u32 },
    /// Sample every active flow's rates.
    SampleRates,
}

/// One port's state. `repr(C)` keeps the declared order: what every packet event reads
/// (the link, the transmitter, the egress queues) comes first, then the ingress
/// accounting a departing packet updates at its input port, then what only PFC episodes
/// and reports touch. (Random accesses to ports dominate at scale: a k=16 permutation
/// has 300 k packets in flight and its state outgrows the second-level cache.)
#[derive(Clone, Debug)]
#[repr(C, align(64))]
struct PortState {
    // First line: the transmitter and the link.
    /// The topology's description of this port, copied here for locality.
    link: Port,
    /// The port's host, or `NONE` on a switch (see [`host`](Self::host)).
    host_index: u32,
    /// The switch at the link's far end, or `NONE` if a host is there (see
    /// [`peer_switch`](Self::peer_switch)).
    peer_switch_index: u32,
    wire: Wire,
    /// The link's whole picoseconds per byte, or 0 if its rate has none.
    ps_per_byte: u32,
    generation: u32,
    /// A PAUSE (Some(quanta)) or RESUME (Some(0)) waiting to go out on this port.
    pfc_pending: Option<u16>,
    /// A frame is being serialised, until its end event (or its deferred end: `wake_at`).
    busy: bool,
    // Second line: the egress queues.
    /// Idle: the pending transmitter wake-up, or `NEVER`. Busy: the frame's end if its
    /// event is deferred (see [`Simulation::transmit`]), `NEVER` once it is queued.
    wake_at: Time,
    /// Egress FIFOs per class in the frame pool, each packet stamped with the time it is
    /// ready to leave; ready times rise in FIFO order.
    queues: [Fifo; 2],
    queued: [u64; 2],
    /// PFC as a transmitter: data is paused until this time by the peer's PAUSE.
    paused_until: Time,
    tx_bytes: u64,
    peak_queue: u64,
    // Third line: the ingress (switch ports): bytes held, the part in headroom, XOFF.
    ingress: u64,
    headroom_used: u64,
    /// Busy with a deferred end: the wake-up already queued for when the transmitter next
    /// has something sendable (see [`Simulation::transmit`]), or `NEVER`.
    wake_after_end: Time,
    peak_ingress: u64,
    /// When the XOFF refresh is due, or `NEVER`.
    pause_refresh_at: Time,
    tx_packets: u64,
    /// The tie of the frame end event deferred to `wake_at`.
    end_tie: u64,
    xoff: bool,
    /// The port's node (`link.node`), here for a departing packet's ingress accounting,
    /// which then reads no other line of its input port.
    node: NodeId,
    // Rarely touched: ECN marking, PFC episodes, report counters.
    red: Option<RedParams>,
    /// Marking draws made here (see [`marking_draw`]).
    ecn_draws: u64,
    paused_since: Option<Time>,
    paused_total: Time,
    /// The watchdog tripped: PAUSE is ignored and data dropped here until this time.
    pfc_ignored_until: Time,
    watchdog_pending: bool,
    pause_frames: u64,
    drops: u64,
    ecn_marks: u64,
    /// PFC headroom of this ingress (read only once the shared buffer is over threshold).
    headroom: u64,
}

// The egress fields start the second line and the ingress fields the third.
const _: () = assert!(std::mem::offset_of!(PortState, wake_at) == 64);
const _: () = assert!(std::mem::offset_of!(PortState, ingress) == 128);
const _: () = assert!(std::mem::offset_of!(PortState, red) == 192);

/// What a transmitter will find when its frame ends ([`Simulation::after_end`]).
enum AfterEnd {
    /// Something to send.
    Sendable,
    /// Nothing sendable until this time.
    Wake(Time),
    /// Nothing queued.
    Idle,
}

/// "No time": no transmitter wake-up pending.
const NEVER: Time = Time::MAX;

/// "No node": a packed `Option` of a node or host index (in `PortState`'s first line).
const NONE: u32 = u32::MAX;

impl PortState {
    /// The port's host, or `None` on a switch.
    #[inline(always)]
    fn host(&self) -> Option<HostId> {
        (self.host_index != NONE).then_some(HostId(self.host_index))
    }

    /// The switch at the link's far end, or `None` if a host is there: a packet sent here
    /// is routed for it when sent ([`Packet::port`]).
    #[inline(always)]
    fn peer_switch(&self) -> Option<NodeId> {
        (self.peer_switch_index != NONE).then_some(NodeId(self.peer_switch_index))
    }

    /// Busy with a deferred end (`wake_at`, `end_tie`): whether that end still comes
    /// after the event at (`now`, `now_tie`).
    fn deferred_end_to_come(&self, now: Time, now_tie: u64) -> bool {
        (self.wake_at, self.end_tie) > (now, now_tie)
    }

    fn new(
        link: Port,
        host: Option<HostId>,
        peer_switch: Option<NodeId>,
        headroom: u64,
        red: Option<RedParams>,
    ) -> Self {
        PortState {
            link,
            host_index: host.map_or(NONE, |h| h.0),
            node: link.node,
            peer_switch_index: peer_switch.map_or(NONE, |n| n.0),
            wire: Wire::default(),
            ps_per_byte: link.rate.whole_ps_per_byte().unwrap_or(0),
            generation: 0,
            busy: false,
            wake_at: NEVER,
            wake_after_end: NEVER,
            queues: [Fifo::default(); 2],
            queued: [0; 2],
            paused_until: Time::ZERO,
            pfc_pending: None,
            tx_bytes: 0,
            tx_packets: 0,
            ingress: 0,
            headroom_used: 0,
            headroom,
            xoff: false,
            pause_refresh_at: NEVER,
            end_tie: 0,
            red,
            ecn_draws: 0,
            peak_queue: 0,
            peak_ingress: 0,
            paused_since: None,
            paused_total: Time::ZERO,
            pfc_ignored_until: Time::ZERO,
            watchdog_pending: false,
            pause_frames: 0,
            drops: 0,
            ecn_marks: 0,
        }
    }
}

/// A switch's shared buffer (docs/REFERENCE.md section 4, as in the HPCC ns-3 model).
#[derive(Clone, Debug, Default)]
struct SharedBuffer {
    /// Bytes in the shared pool, all ingress queues together.
    used: u64,
    /// Buffer left for sharing once headroom and reserves are set aside.
    pool: u64,
}

#[derive(Clone, Debug, Default)]
struct Nic {
    /// ACK, NAK and CNP to send, ahead of data.
    control: VecDeque<Packet>,
    /// QPs with data to send, served round-robin.
    qps: VecDeque<u32>,
    /// The receive pipeline is stalled (pause storm): arrivals are dropped.
    stalled: bool,
}

#[derive(Clone, Debug)]
pub(crate) struct Flow {
    msg: Message,
    /// UDP source port: the ECMP entropy of this QP.
    udp_sport: u16,
    sender: RcSender,
    receiver: InOrderReceiver,
    rp: Dcqcn,
    /// When the last packet started, and its link bytes: the pacing state.
    last_tx: Time,
    last_wire: u32,
    queued: bool,
    last_cnp: Option<Time>,
    /// When the acknowledged prefix last grew (or sending began).
    last_progress: Time,
    timer_armed: bool,
    /// `sent_bytes` at the last rate sample.
    sampled_bytes: u64,
    /// Life-cycle state shared with the other fabric.
    life: Progress,
    /// The sender's NIC port: where its posts and timeouts are handled.
    nic_port: u32,
}

driver::tracked_by_fields!(Flow);

/// A frame as it left its port: packets as they leave their source NIC, PFC frames as
/// any port sends them. `bytes` is the Ethernet frame without FCS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CapturedFrame {
    pub time: Time,
    pub bytes: Vec<u8>,
}

/// One sample of a flow's rates: at every DCQCN cut, and every `rate_sample` interval
/// while the flow is active.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateSample {
    pub time: Time,
    pub flow: u32,
    /// The pacing rate: DCQCN's current rate, or the line rate without DCQCN.
    pub rate: BitRate,
    /// Periodic samples: payload sent over the interval just ended. None at a cut.
    pub sent: Option<BitRate>,
}

/// Conservation checks at one instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Audit {
    /// Payload bytes put on the wire by senders, retransmissions included.
    pub sent_payload: u64,
    /// Payload bytes placed by receivers (each byte once).
    pub delivered_payload: u64,
    /// Payload bytes dropped by switches or discarded by receivers (out of sequence,
    /// duplicates).
    pub lost_payload: u64,
    pub in_flight_payload: u64,
    /// Frames holding a pool slot but found on no link and in no queue (a leak).
    pub lost_frames: u64,
}

/// A running RoCEv2 fabric.
pub struct Simulation {
    cfg: RoceConfig,
    topo: Topology,
    routes: Routes,
    /// The event queue, the flows and their life cycle, the stop and the capture.
    state: RunState<Event, Flow, CapturedFrame>,
    /// Every frame on a link or in a switch egress queue; a packet keeps its slot from its
    /// NIC to its delivery, relinked from link to queue to link. A slot keeps its
    /// successor's time ([`Simulation::sendable_class`]).
    frames: Pool<Frame, Time>,
    /// The pool size above which the model's state outgrows the cache and
    /// [`Simulation::prefetch_ahead`] asks for the coming events' state.
    prefetch_above_slots: usize,
    /// The ports alone outgrow the cache: prefetch further ahead, and the route entries
    /// too (see [`Simulation::prefetch_ahead`]); the event queue walks ahead too
    /// ([`EventQueue::walk_ahead`]).
    prefetch_deep: bool,
    ports: Vec<PortState>,
    buffers: Vec<SharedBuffer>,
    nics: Vec<Nic>,
    /// Each event creator's next tie (see [`Ties`]).
    ties: Ties,
    /// The creator of what the current event's handler schedules: the port it is
    /// handled at (a link's far end for an arrival, a sender's NIC for a post).
    creator: u32,
    /// This run's share when it is split over threads.
    part: Option<Part<Frame>>,
    /// A part's tie of the event behind each of its rate cuts (`rates` holds them).
    rate_ties: Vec<u64>,
    /// See [`driver::lookahead`].
    lookahead: Time,
    drops: u64,
    lost_payload: u64,
    retransmitted: u64,
    cnps: u64,
    naks: u64,
    timeouts: u64,
    /// Data packets in flight, and their peak.
    in_flight: InFlight,
    rates: Vec<RateSample>,
    deadlock_check_pending: bool,
    /// Messages on a NIC (posted, not known to be acknowledged), for rate sampling.
    on_nic: Vec<u32>,
    /// Cycles left to the watchdog, with the trip count when each was recorded.
    pfc_cycles: Vec<Deadlock>,
    trips_at_last_cycle: u64,
    watchdog_trips: u64,
}

impl Simulation {
    /// Builds the fabric and posts every message at its start time. Configuration and
    /// messages must already be validated.
    pub fn new(
        cfg: RoceConfig,
        topo: Topology,
        workload: &Workload,
        stop_at: Option<Time>,
    ) -> Result<Self, String> {
        Self::build(cfg, topo, workload, stop_at, None)
    }

    /// Builds one part of a run split over threads: it keeps the whole state but handles
    /// only the events of the ports `part` holds. Its run ends where its coordinator says.
    pub(crate) fn new_part(
        cfg: RoceConfig,
        topo: Topology,
        workload: &Workload,
        part: Part<Frame>,
    ) -> Result<Self, String> {
        Self::build(cfg, topo, workload, None, Some(part))
    }

    fn build(
        cfg: RoceConfig,
        topo: Topology,
        workload: &Workload,
        stop_at: Option<Time>,
        part: Option<Part<Frame>>,
    ) -> Result<Self, String> {
        if cfg.mtu > MAX_MTU {
            return Err(format!(
                "fabric.mtu = {}: the RoCEv2 model takes MTUs up to {MAX_MTU}",
                cfg.mtu
            ));
        }
        let routes = Routes::minimal(&topo)?;
        let mut buffers = vec![SharedBuffer::default(); topo.nodes().len()];
        let ports: Vec<PortState> = topo
            .ports()
            .iter()
            .map(|p| {
                let host = match topo.nodes()[p.node.index()] {
                    NodeKind::Host(h) => Some(h),
                    NodeKind::Switch { .. } => None,
                };
                let is_switch = host.is_none();
                let headroom = if is_switch && cfg.pfc {
                    cfg.headroom_for(p.rate)
                } else {
                    0
                };
                let red = if is_switch {
                    cfg.ecn.as_ref().map(|e| e.for_rate(p.rate))
                } else {
                    None
                };
                let far = topo.port(p.peer).node;
                let peer_switch = match topo.nodes()[far.index()] {
                    NodeKind::Host(_) => None,
                    NodeKind::Switch { .. } => Some(far),
                };
                PortState::new(*p, host, peer_switch, headroom, red)
            })
            .collect();
        for (n, kind) in topo.nodes().iter().enumerate() {
            if let NodeKind::Switch { .. } = kind {
                let set_aside: u64 = topo
                    .node_ports(NodeId(n as u32))
                    .iter()
                    .map(|&p| ports[p.index()].headroom + cfg.reserve)
                    .sum();
                if set_aside >= cfg.switch_buffer {
                    return Err(format!(
                        "fabric.rocev2.switch_buffer = {} B: switch {n} sets aside {set_aside} B of headroom and reserve, leaving no shared buffer",
                        cfg.switch_buffer
                    ));
                }
                buffers[n].pool = cfg.switch_buffer - set_aside;
            }
        }
        if !workload.sharp_groups.is_empty() {
            return Err(
                "algorithm \"sharp\": SHARP in-network aggregation needs InfiniBand switches"
                    .into(),
            );
        }
        let ties = Ties::new(ports.len(), "RoCEv2")?;
        let messages = &workload.messages;
        let mut lifecycle = Lifecycle::new(workload, &topo, cfg.nic_tx_latency);
        let initial = lifecycle.initial_posts(messages);
        let slack = lifecycle.cross_server_slack(workload, &topo, cfg.nic_rx_latency);
        let pfc = roce::PFC_FRAME_WIRE_LEN as u64;
        let grid = driver::lookahead(&topo, pfc, slack, cfg.deadlock_check);
        let flows = messages
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let sender = RcSender::new(m.size, cfg.mtu, cfg.ack_every);
                let receiver = InOrderReceiver::new(sender.packets(), cfg.ack_every);
                let nic_port = topo.host_port(m.src);
                let line = topo.port(nic_port).rate;
                Flow {
                    msg: *m,
                    udp_sport: driver::udp_source_port(i as u32),
                    sender,
                    receiver,
                    rp: Dcqcn::new(line),
                    last_tx: Time::ZERO,
                    last_wire: 0,
                    queued: false,
                    last_cnp: None,
                    last_progress: Time::ZERO,
                    timer_armed: false,
                    sampled_bytes: 0,
                    life: Progress::new(m.start, workload.follows[i]),
                    nic_port: nic_port.0,
                }
            })
            .collect();
        let port_bytes = ports.len() * std::mem::size_of::<PortState>();
        let mut sim = Simulation {
            nics: vec![Nic::default(); topo.host_count() as usize],
            cfg,
            topo,
            routes,
            state: RunState::new(
                EventQueue::new(),
                flows,
                lifecycle,
                stop_at,
                part.is_none().then_some(grid),
            ),
            frames: Pool::default(),
            prefetch_above_slots: driver::prefetch_above_slots::<Frame, Time>(port_bytes),
            prefetch_deep: port_bytes > fabricsim_core::prefetch::WORTH_ABOVE_BYTES,
            ports,
            buffers,
            ties,
            creator: 0,
            part,
            rate_ties: Vec::new(),
            lookahead: grid,
            drops: 0,
            lost_payload: 0,
            retransmitted: 0,
            cnps: 0,
            naks: 0,
            timeouts: 0,
            in_flight: InFlight::default(),
            rates: Vec::new(),
            deadlock_check_pending: false,
            pfc_cycles: Vec::new(),
            trips_at_last_cycle: 0,
            on_nic: Vec::new(),
            watchdog_trips: 0,
        };
        sim.creator = sim.ties.setup();
        sim.state.queue.walk_ahead(sim.prefetch_deep);
        for storm in sim.cfg.pause_storms.clone() {
            if !sim.holds(sim.topo.host_port(storm.host).0) {
                continue;
            }
            let host = storm.host.0;
            sim.schedule(
                storm.start,
                Event::Stall {
                    host,
                    stalled: true,
                },
            );
            if let Some(end) = storm.end {
                sim.schedule(
                    end,
                    Event::Stall {
                        host,
                        stalled: false,
                    },
                );
            }
        }
        if sim.cfg.record_rates && !messages.is_empty() && sim.part.is_none() {
            sim.schedule_global(sim.cfg.rate_sample, Event::SampleRates);
        }
        <Simulation as MessageFabric>::schedule_posts(&mut sim, initial);
        Ok(sim)
    }

    /// Schedules `event` at `at` as the current creator's next event.
    fn schedule(&mut self, at: Time, event: Event) {
        let tie = self.ties.next(self.creator);
        self.state.queue.schedule_tied(at, tie, event);
    }

    /// Schedules a run-wide check at `at`.
    fn schedule_global(&mut self, at: Time, event: Event) {
        let tie = self.ties.next(self.ties.global());
        self.state.queue.schedule_tied(at, tie, event);
    }

    /// The port an event is handled at, which creates what its handler schedules.
    #[inline(always)]
    fn creator_of(&self, event: &Event) -> u32 {
        match *event {
            Event::Transmitter { port, .. }
            | Event::PauseRefresh { port }
            | Event::Watchdog { port } => port,
            Event::Arrival { port } => self.ports[port as usize].link.peer.0,
            Event::Post { flow } | Event::Timeout { flow } | Event::LocalDone { flow } => {
                self.state.flows[flow as usize].nic_port
            }
            Event::Stall { host, .. } => self.topo.host_port(HostId(host)).0,
            Event::DeadlockCheck | Event::SampleRates => self.ties.global(),
        }
    }

    /// Keeps the frames `filter` selects (see [`CapturedFrame`]).
    pub fn capture(&mut self, filter: CaptureFilter) {
        self.state.capture = Some((filter, Vec::new()));
    }

    /// The captured frames, in transmission order.
    pub fn captured(&self) -> &[CapturedFrame] {
        self.state.captured()
    }

    /// Adds a frame leaving `port` to the capture, if it is selected.
    fn record(&mut self, port: PortId, frame: &Frame, now: Time) {
        let Some((filter, out)) = &self.state.capture else {
            return;
        };
        let (spec, host) = {
            let p = &self.ports[port.index()];
            (p.link, p.host().map(|h| h.0))
        };
        let bytes = match frame {
            Frame::Pause { quanta } if filter.wants(None, out.len()) => {
                roce::pfc_frame(roce::port_mac(host, spec.node.0, spec.local), *quanta)
            }
            Frame::Packet(pkt) if host.is_some() && filter.wants(Some(pkt.flow), out.len()) => {
                let bytes = self.repr(pkt).emit();
                debug_assert_eq!(
                    bytes.len() + roce::FCS_LEN + roce::PREAMBLE_IFG_LEN,
                    pkt.wire as usize
                );
                bytes
            }
            _ => return,
        };
        if let Some((_, out)) = &mut self.state.capture {
            out.push(CapturedFrame { time: now, bytes });
        }
    }

    /// The headers of a packet as its source NIC sends it.
    fn repr(&self, pkt: &Packet) -> RoceRepr {
        let flow = &self.state.flows[pkt.flow as usize];
        let (src, dst) = match pkt.kind {
            Kind::Data => (flow.msg.src.0, flow.msg.dst.0),
            _ => (flow.msg.dst.0, flow.msg.src.0),
        };
        let count = flow.sender.packets();
        let last = pkt.index + 1 == count;
        let (opcode, aeth) = match pkt.kind {
            Kind::Data => (Opcode::rdma_write(pkt.index, count) as u8, None),
            Kind::Ack => (
                Opcode::Acknowledge as u8,
                Some(Aeth {
                    syndrome: 0,
                    msn: 0,
                }),
            ),
            Kind::Nak => (
                Opcode::Acknowledge as u8,
                Some(Aeth {
                    syndrome: roce::NAK_PSN_SEQUENCE_ERROR,
                    msn: 0,
                }),
            ),
            Kind::Cnp => (roce::OPCODE_CNP, None),
        };
        RoceRepr {
            ip: self.cfg.ip,
            src_host: src,
            dst_host: dst,
            udp_sport: flow.udp_sport,
            dscp: if pkt.kind == Kind::Cnp {
                roce::CNP_DSCP
            } else {
                roce::DATA_DSCP
            },
            // Data leaves ECN-capable (ECT(0)); switches may mark it CE later.
            ecn: if pkt.kind == Kind::Data { 2 } else { 0 },
            opcode,
            becn: pkt.kind == Kind::Cnp,
            // QP numbers: the flow's QP is 0x100 + flow at both ends (QP0/1 are reserved).
            dest_qp: 0x100 + pkt.flow,
            ack_req: pkt.kind == Kind::Data
                && (last || (pkt.index + 1).is_multiple_of(self.cfg.ack_every)),
            psn: if pkt.kind == Kind::Cnp {
                0
            } else {
                pkt.index & PSN_MASK
            },
            reth: (pkt.kind == Kind::Data && pkt.index == 0).then_some(Reth {
                virtual_address: 0x1_0000_0000,
                rkey: 0x100 + pkt.flow,
                dma_length: flow.msg.size.min(u32::MAX as u64) as u32,
            }),
            aeth,
            cnp: pkt.kind == Kind::Cnp,
            payload_len: pkt.payload.into(),
        }
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

    /// Payload bytes a flow's receiver has placed so far.
    pub fn flow_delivered(&self, flow: usize) -> u64 {
        self.state.flows[flow].life.delivered_bytes
    }

    /// Data bytes queued at a port's egress now.
    pub fn queued_data(&self, port: PortId) -> u64 {
        self.ports[port.index()].queued[DATA]
    }

    /// Every DCQCN rate cut and, every `rate_sample`, each active flow's pacing rate and
    /// sent rate, in time order.
    pub fn rate_samples(&self) -> &[RateSample] {
        &self.rates
    }

    /// Asks for the state the coming events will touch, in stages, so that their cache
    /// misses overlap the current event and each stage reads only lines an earlier stage
    /// asked for. First the event's port (transmitter, queues, ingress); then the frame at
    /// its link's head (an arrival) or at its data queue's head (a transmitter). When the
    /// ports alone outgrow the cache (`prefetch_deep`) the stages are two events apart, so
    /// that each miss has two events' time to arrive; the second stage also asks for the
    /// ingress line of the port a frame arrives at, the control queue's head and the
    /// frame last put on a transmitter's link (the next frame links behind it); and a
    /// third, from the frame, asks for the egress an arriving packet was routed to, or
    /// for a departing packet's input port and the route entry it will be sent by.
    /// Otherwise they are one event apart and do no more (the extra hints' instructions
    /// would cost more than they save: the 127:1 incast's state mostly stays in the
    /// second-level cache).
    #[inline(always)]
    fn prefetch_ahead(&self) {
        if self.frames.slots() <= self.prefetch_above_slots {
            return;
        }
        if self.prefetch_deep {
            self.prefetch_stages::<true>();
        } else {
            self.prefetch_stages::<false>();
        }
    }

    /// [`prefetch_ahead`](Self::prefetch_ahead)'s stages, compiled apart for each depth.
    #[inline(always)]
    fn prefetch_stages<const DEEP: bool>(&self) {
        let queue = &self.state.queue;
        let (port_at, frame_at) = if DEEP { (4, 2) } else { (1, 0) };
        if let Some(&Event::Transmitter { port, .. } | &Event::Arrival { port }) =
            queue.peek_ahead(port_at)
        {
            let p = &self.ports[port as usize];
            prefetch(p);
            prefetch(&p.ingress);
            prefetch(&p.tx_bytes);
        }
        match queue.peek_ahead(frame_at) {
            Some(&Event::Arrival { port }) => {
                let p = &self.ports[port as usize];
                if let Some(slot) = p.wire.head() {
                    self.frames.prefetch(slot);
                }
                if DEEP {
                    let to = &self.ports[p.link.peer.index()];
                    if p.peer_switch().is_none() {
                        prefetch(to);
                    }
                    prefetch(&to.ingress);
                }
            }
            Some(&Event::Transmitter { port, .. }) => {
                // The egress's next packets (queued long before, so rarely still cached).
                let p = &self.ports[port as usize];
                if let Some(slot) = p.queues[DATA].front() {
                    self.frames.prefetch(slot);
                }
                if let (true, Some(slot)) = (DEEP, p.queues[CONTROL].front()) {
                    self.frames.prefetch(slot);
                }
                if let (true, Some(slot)) = (DEEP, p.wire.tail()) {
                    self.frames.prefetch(slot);
                }
            }
            _ => {}
        }
        if !DEEP {
            return;
        }
        match queue.peek_ahead(0) {
            Some(&Event::Arrival { port }) => {
                // The egress the packet was routed to when sent.
                let p = &self.ports[port as usize];
                if let (Some(slot), Some(_)) = (p.wire.head(), p.peer_switch()) {
                    if let Frame::Packet(pkt) = self.frames.get(slot) {
                        let out = &self.ports[pkt.port as usize];
                        prefetch(out);
                        prefetch(&out.wake_at);
                    }
                }
            }
            Some(&Event::Transmitter { port, .. }) => {
                // The next data packet's input port (for its ingress accounting) and the
                // route entry it will be sent by.
                let p = &self.ports[port as usize];
                if let (Some(slot), None) = (p.queues[DATA].front(), p.host()) {
                    let pkt = self.frames.get(slot).packet();
                    prefetch(&self.ports[pkt.port as usize].ingress);
                    if let Some(node) = p.peer_switch() {
                        self.routes.prefetch(node, HostId(pkt.dst));
                    }
                }
            }
            _ => {}
        }
    }

    #[inline(always)]
    fn handle_event(&mut self) {
        if let Some((now, event)) = self.state.next_event() {
            self.handle(now, event);
        }
    }

    #[inline(always)]
    fn handle(&mut self, now: Time, event: Event) {
        self.creator = self.creator_of(&event);
        self.prefetch_ahead();
        match event {
            Event::Transmitter { port, generation } => {
                let p = &mut self.ports[port as usize];
                if p.generation != generation {
                    return;
                }
                p.busy = false;
                p.wake_at = NEVER;
                p.wake_after_end = NEVER;
                self.try_transmit(PortId(port));
            }
            Event::Arrival { port } => self.arrive(PortId(port)),
            Event::Post { flow } => self.post(flow),
            Event::Timeout { flow } => self.on_timeout(flow, now),
            Event::PauseRefresh { port } => {
                let p = &mut self.ports[port as usize];
                if p.xoff && p.pause_refresh_at == now {
                    p.pfc_pending = Some(self.cfg.pause_quanta);
                    p.pause_refresh_at = NEVER;
                    self.try_transmit(PortId(port));
                }
            }
            Event::DeadlockCheck => self.check_deadlock(now),
            Event::LocalDone { flow } => self.local_done(flow),
            Event::Stall { host, stalled } => self.set_stalled(HostId(host), stalled),
            Event::Watchdog { port } => self.watchdog(PortId(port), now),
            Event::SampleRates => self.sample_rates(now),
        }
    }

    /// Records every posted, unfinished NIC flow's pacing rate and its payload sent since the
    /// last sample; re-arms while anything else is pending (so sampling never keeps a
    /// finished run alive).
    fn sample_rates(&mut self, now: Time) {
        self.sample_on_nic(now);
        if !self.state.queue.is_empty() {
            self.schedule_global(now + self.cfg.rate_sample, Event::SampleRates);
        }
    }

    /// The rate samples at `now` of the messages on this run's (or part's) NICs, in flow
    /// order, appended to its rates.
    fn sample_on_nic(&mut self, now: Time) {
        let interval = self.cfg.rate_sample;
        let flows = &self.state.flows;
        // Messages leave the NIC when acknowledged; the rest are sampled in flow order.
        self.on_nic
            .retain(|&f| flows[f as usize].life.acked.is_none());
        self.on_nic.sort_unstable();
        for &i in &self.on_nic {
            let f = &mut self.state.flows[i as usize];
            let line = self.topo.port(self.topo.host_port(f.msg.src)).rate;
            let rate = match &self.cfg.dcqcn {
                Some(d) => {
                    f.rp.advance(now, &d.params);
                    f.rp.rate().min(line)
                }
                None => line,
            };
            let bits = (f.life.sent_bytes - f.sampled_bytes) as u128 * 8 * 1_000_000_000_000;
            f.sampled_bytes = f.life.sent_bytes;
            self.rates.push(RateSample {
                time: now,
                flow: i,
                rate,
                sent: Some(BitRate((bits / interval.ps() as u128) as u64)),
            });
        }
    }

    /// A NIC's receiver stalls (it pauses its switch port, refreshing without end, and
    /// drops what still arrives) or recovers (it sends RESUME).
    fn set_stalled(&mut self, host: HostId, stalled: bool) {
        self.nics[host.index()].stalled = stalled;
        let port = self.topo.host_port(host);
        let p = &mut self.ports[port.index()];
        p.xoff = stalled;
        p.pause_refresh_at = NEVER;
        p.pfc_pending = Some(if stalled { self.cfg.pause_quanta } else { 0 });
        self.try_transmit(port);
    }

    /// The watchdog's look at a switch egress: trips if the egress has been paused without
    /// a break for the whole timeout while holding data.
    fn watchdog(&mut self, port: PortId, now: Time) {
        let Some(wd) = self.cfg.watchdog else { return };
        let p = &mut self.ports[port.index()];
        p.watchdog_pending = false;
        let Some(since) = p.paused_since.filter(|_| p.paused_until > now) else {
            return;
        };
        if now < since + wd.timeout {
            p.watchdog_pending = true;
            self.schedule(since + wd.timeout, Event::Watchdog { port: port.0 });
            return;
        }
        if p.queues[DATA].is_empty() {
            return;
        }
        let mut flushed = Vec::new();
        while let Some(slot) = self.frames.pop_front(&mut p.queues[DATA]) {
            flushed.push(*self.frames.free(slot).packet());
        }
        self.watchdog_trips += 1;
        p.paused_total += now - since;
        p.paused_since = None;
        p.paused_until = now;
        p.pfc_ignored_until = now + wd.restore;
        p.queued[DATA] = 0;
        for pkt in flushed {
            self.drop_data(port, pkt);
            self.leave_ingress(pkt);
        }
        self.try_transmit(port);
    }

    /// Data packets in flight changed by `change` (a part of a split run logs it for its
    /// coordinator, which alone sees them all).
    fn count_in_flight(&mut self, change: i64) {
        (self.in_flight).change(self.part.as_mut(), &self.state.queue, change);
    }

    /// Counts a data packet lost at `port`.
    fn drop_data(&mut self, port: PortId, pkt: Packet) {
        self.drops += 1;
        self.lost_payload += pkt.payload as u64;
        self.count_in_flight(-1);
        self.ports[port.index()].drops += 1;
    }

    fn on_timeout(&mut self, flow: u32, now: Time) {
        let rto = self.cfg.rto();
        let f = &mut self.state.flows[flow as usize];
        f.timer_armed = false;
        if f.life.acked.is_some() || f.sender.sent() == f.sender.acked() {
            return;
        }
        let due = f.last_progress + rto;
        if now < due {
            self.arm_timeout(flow, due);
            return;
        }
        // No progress for a whole timeout: go back to the first unacknowledged packet.
        self.timeouts += 1;
        let acked = f.sender.acked();
        f.sender.rewind(acked);
        f.last_progress = now;
        self.requeue(flow);
        self.arm_timeout(flow, now + rto);
    }

    /// Arms `flow`'s retransmission timer for `at`.
    fn arm_timeout(&mut self, flow: u32, at: Time) {
        self.state.flows[flow as usize].timer_armed = true;
        self.schedule(at, Event::Timeout { flow });
    }

    /// Puts a flow with data to send back on its NIC's round-robin list.
    fn requeue(&mut self, flow: u32) {
        let f = &mut self.state.flows[flow as usize];
        if !f.queued && f.sender.has_more() {
            f.queued = true;
            let src = f.msg.src;
            self.nics[src.index()].qps.push_back(flow);
            self.try_transmit(self.topo.host_port(src));
        }
    }

    /// Starts the port's next frame if its transmitter is free; otherwise arranges to be
    /// woken when something becomes sendable.
    fn try_transmit(&mut self, port: PortId) {
        let now = self.state.queue.now();
        let p = &mut self.ports[port.index()];
        if p.busy {
            if p.wake_at == NEVER {
                return;
            }
            // The frame's end event was deferred. If it is still to come, what it will find
            // is foreseen again: if that is now something sendable by its end, it is queued,
            // in its own place; if something becomes sendable sooner than the wake-up queued
            // for after it, that wake-up is queued anew (the old one goes stale). If the end
            // has passed, it found nothing sendable, so the transmitter has been idle since,
            // waiting for the wake-up queued for it if any.
            let (end, tie) = (p.wake_at, p.end_tie);
            if p.deferred_end_to_come(now, self.state.queue.now_tie()) {
                let at = match self.after_end(port, end, None) {
                    AfterEnd::Sendable => end,
                    AfterEnd::Wake(at) => at,
                    AfterEnd::Idle => return,
                };
                let p = &mut self.ports[port.index()];
                if at >= p.wake_after_end {
                    return;
                }
                if at == end {
                    p.wake_at = NEVER;
                    p.wake_after_end = NEVER;
                } else {
                    p.wake_after_end = at;
                }
                p.generation += 1;
                let generation = p.generation;
                self.schedule_frame_end(port, at, tie, generation);
                return;
            }
            p.busy = false;
            p.wake_at = std::mem::replace(&mut p.wake_after_end, NEVER);
        }
        if let Some(quanta) = p.pfc_pending.take() {
            p.pause_frames += 1;
            if quanta > 0 && p.xoff {
                // Refresh at half the pause so the upstream never resumes early (unverified:
                // switches re-send XOFF before the quanta run out; when is not documented).
                let rate = p.link.rate;
                let at = now + Time(pause_duration(quanta, rate).ps() / 2);
                p.pause_refresh_at = at;
                self.schedule(at, Event::PauseRefresh { port: port.0 });
            }
            let slot = self.frames.alloc(Frame::Pause { quanta });
            self.transmit(port, slot, roce::PFC_FRAME_WIRE_LEN as u32);
            return;
        }
        let choice = match self.ports[port.index()].host() {
            None => self.pick_switch(port, now),
            Some(h) => self.pick_nic(port, h, now),
        };
        match choice {
            Ok(slot) => {
                let wire = self.frames.get(slot).packet().wire;
                self.transmit(port, slot, wire.into());
            }
            Err(Some(t)) => {
                let p = &mut self.ports[port.index()];
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
            Err(None) => {}
        }
    }

    /// Puts the frame in `slot` on the wire; the transmitter is busy until its last bit
    /// leaves.
    fn transmit(&mut self, port: PortId, slot: Slot, bytes: u32) {
        let now = self.state.queue.now();
        if self.state.capture.is_some() {
            let frame = *self.frames.get(slot);
            self.record(port, &frame, now);
        }
        let p = &mut self.ports[port.index()];
        let spec = p.link;
        let end = now + spec.rate.serialization_by(p.ps_per_byte, bytes as u64);
        p.busy = true;
        p.wake_at = NEVER;
        p.generation += 1;
        p.tx_bytes += bytes as u64;
        let peer_switch = p.peer_switch();
        // A switch sends only packets it took from its egress queues (and PFC frames).
        let popped = match self.frames.get(slot) {
            Frame::Packet(pkt) => {
                p.tx_packets += 1;
                p.host().is_none().then_some((pkt.class(), slot))
            }
            Frame::Pause { .. } => None,
        };
        let arrival = end + spec.delay;
        let generation = p.generation;
        if let (Some(node), Frame::Packet(pkt)) = (peer_switch, self.frames.get(slot)) {
            let out = self.route(node, pkt);
            self.frames.get_mut(slot).packet_mut().port = out.0;
        }
        // All that can make something sendable sooner than the queues already say (a
        // packet queued, a PFC frame to send, a PAUSE received) calls `try_transmit`, so
        // unless that happens first, what the end event will find is known now. If it will
        // find nothing sendable, the event is deferred with its tie kept (a tenth of the
        // incast's events), and if the queues hold something sendable later (a packet
        // still in the switch latency, data paused), its wake-up is queued straight away,
        // with the end event's tie, in place of the end event (15 % of a permutation's
        // events). This is the one place the event order departs from one event per frame
        // end: the wake-up's tie is drawn when the frame starts, not when it ends.
        let tie = self.ties.next(self.creator);
        match self.after_end(port, end, popped) {
            AfterEnd::Sendable => self.schedule_frame_end(port, end, tie, generation),
            AfterEnd::Wake(at) => {
                let p = &mut self.ports[port.index()];
                p.wake_at = end;
                p.end_tie = tie;
                p.wake_after_end = at;
                self.schedule_frame_end(port, at, tie, generation);
            }
            AfterEnd::Idle => {
                let p = &mut self.ports[port.index()];
                p.wake_at = end;
                p.end_tie = tie;
            }
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

    /// Queues the end event of `port`'s frame, with the tie it took when the frame started.
    fn schedule_frame_end(&mut self, port: PortId, end: Time, tie: u64, generation: u32) {
        let event = Event::Transmitter {
            port: port.0,
            generation,
        };
        self.state.queue.schedule_tied(end, tie, event);
    }

    /// What `port`'s transmitter will find when its frame ends at `end`, if nothing calls
    /// [`try_transmit`](Self::try_transmit) before: on a switch egress the choice
    /// [`pick_switch`](Self::pick_switch) will make ([`sendable_class`](Self::sendable_class),
    /// `popped` as there); a NIC, whose pacing and queue pairs change by themselves, is
    /// `Sendable` whenever it has work.
    fn after_end(&self, port: PortId, end: Time, popped: Option<(usize, Slot)>) -> AfterEnd {
        let p = &self.ports[port.index()];
        if p.pfc_pending.is_some() {
            return AfterEnd::Sendable;
        }
        if let Some(h) = p.host() {
            let nic = &self.nics[h.index()];
            return if nic.control.is_empty() && nic.qps.is_empty() {
                AfterEnd::Idle
            } else {
                AfterEnd::Sendable
            };
        }
        match self.sendable_class(port, end, p.paused_until > end, popped) {
            Ok(_) => AfterEnd::Sendable,
            Err(Some(at)) => AfterEnd::Wake(at),
            Err(None) => AfterEnd::Idle,
        }
    }

    /// The class a switch egress can send from at `at`: control first, then data unless
    /// `paused`. Err(when something queued becomes sendable), or Err(None) if nothing is
    /// queued. `popped`: the class and slot of the packet just taken from one of its
    /// queues, whose entry gives that queue's new front's time (the front's own line is
    /// likely out of cache).
    fn sendable_class(
        &self,
        port: PortId,
        at: Time,
        paused: bool,
        popped: Option<(usize, Slot)>,
    ) -> Result<usize, Option<Time>> {
        let p = &self.ports[port.index()];
        let mut wake: Option<Time> = None;
        for class in [CONTROL, DATA] {
            let Some(front) = p.queues[class].front() else {
                continue;
            };
            let ready = match popped {
                _ if class == DATA && paused => p.paused_until,
                Some((c, slot)) if c == class => {
                    let next = self.frames.next_time(slot);
                    next.expect("a popped slot links its queue's front")
                }
                _ => self.frames.time(front),
            };
            if ready <= at {
                return Ok(class);
            }
            wake = Some(wake.map_or(ready, |w| w.min(ready)));
        }
        Err(wake)
    }

    /// Whether data on this port is paused by the peer at `now`, settling paused time.
    fn data_paused(&mut self, port: PortId, now: Time) -> bool {
        let p = &mut self.ports[port.index()];
        if p.paused_until > now {
            return true;
        }
        if let Some(s) = p.paused_since.take() {
            p.paused_total += p.paused_until.max(s) - s;
        }
        false
    }

    /// A switch egress: control first, then data unless paused. Err(wake) if nothing.
    fn pick_switch(&mut self, port: PortId, now: Time) -> Result<Slot, Option<Time>> {
        let paused = self.data_paused(port, now);
        let class = self.sendable_class(port, now, paused, None)?;
        let p = &mut self.ports[port.index()];
        let slot = self.frames.pop_front(&mut p.queues[class]);
        let slot = slot.expect("front exists");
        let pkt = self.frames.get_mut(slot).packet_mut();
        if class == DATA {
            if let Some(red) = &p.red {
                let prob = red.probability(p.queued[DATA]);
                if prob > 0.0 && !pkt.ce {
                    let u = marking_draw(self.cfg.seed, port.0, p.ecn_draws);
                    p.ecn_draws += 1;
                    if u < prob {
                        pkt.ce = true;
                        p.ecn_marks += 1;
                    }
                }
            }
        }
        p.queued[class] -= pkt.wire as u64;
        if class == DATA {
            let pkt = *pkt;
            self.leave_ingress(pkt);
        }
        Ok(slot)
    }

    /// A data packet left its switch: free its ingress bytes and resume the upstream when
    /// the ingress has drained below the threshold.
    fn leave_ingress(&mut self, pkt: Packet) {
        let input = pkt.port as usize;
        let node = self.ports[input].node.index();
        let bytes = pkt.wire as u64;
        let reserve = self.cfg.reserve;
        let q = &mut self.ports[input];
        let from_headroom = bytes.min(q.headroom_used);
        q.headroom_used -= from_headroom;
        let rest = bytes - from_headroom;
        let shared_before = q.ingress.saturating_sub(reserve);
        q.ingress -= rest;
        let shared_after = q.ingress.saturating_sub(reserve);
        self.buffers[node].used -= shared_before - shared_after;
        if self.cfg.pfc && q.xoff && q.headroom_used == 0 {
            let threshold = self.threshold(node);
            let q = &mut self.ports[input];
            if shared_after == 0 || shared_after + RESUME_OFFSET <= threshold {
                q.xoff = false;
                q.pause_refresh_at = NEVER;
                q.pfc_pending = Some(0);
                self.try_transmit(PortId(input as u32));
            }
        }
    }

    /// The dynamic threshold of switch `node`: free shared buffer x alpha.
    fn threshold(&self, node: usize) -> u64 {
        let b = &self.buffers[node];
        b.pool.saturating_sub(b.used) >> self.cfg.alpha_shift
    }

    /// Pacing of `flow` on a NIC port of `line` rate: its next packet may start one
    /// serialisation time of its last packet, at the current DCQCN rate, after that packet
    /// started. Returns when, and when to look again if that is later than `now` (the
    /// rate rises at the reaction point's next timer, so the wait may shorten).
    fn pacing(&mut self, flow: u32, line: BitRate, now: Time) -> (Time, Time) {
        let f = &mut self.state.flows[flow as usize];
        let rate = match &self.cfg.dcqcn {
            Some(d) => {
                f.rp.advance(now, &d.params);
                f.rp.rate().min(line)
            }
            None => line,
        };
        let allowed = f.last_tx + rate.serialization(f.last_wire as u64);
        let look = f.rp.next_increase().map_or(allowed, |t| t.min(allowed));
        (allowed, look)
    }

    /// A NIC: control first, then data from paced QPs round-robin unless paused.
    fn pick_nic(&mut self, port: PortId, host: HostId, now: Time) -> Result<Slot, Option<Time>> {
        if let Some(pkt) = self.nics[host.index()].control.pop_front() {
            return Ok(self.frames.alloc(Frame::Packet(pkt)));
        }
        if self.data_paused(port, now) {
            let until = self.ports[port.index()].paused_until;
            let has_data = !self.nics[host.index()].qps.is_empty();
            return Err(has_data.then_some(until));
        }
        let rate = self.ports[port.index()].link.rate;
        let mut wake: Option<Time> = None;
        let mut chosen = None;
        for pos in 0..self.nics[host.index()].qps.len() {
            let f = self.nics[host.index()].qps[pos];
            let (allowed, look) = self.pacing(f, rate, now);
            if allowed <= now {
                chosen = Some(pos);
                break;
            }
            wake = Some(wake.map_or(look, |w| w.min(look)));
        }
        let Some(pos) = chosen else {
            return Err(wake);
        };
        let nic = &mut self.nics[host.index()];
        let f = nic.qps.remove(pos).expect("chosen from the list");
        let flow = &mut self.state.flows[f as usize];
        let retransmission = flow.sender.is_retransmission(flow.sender.sent());
        let seg = flow.sender.next_segment().expect("queued QPs have data");
        let mut handoff = None;
        if flow.sender.has_more() {
            nic.qps.push_back(f);
        } else {
            flow.queued = false;
            if !flow.life.injected {
                flow.life.injected = true;
                handoff = flow.life.successor.take();
            }
        }
        if flow.sender.sent() == seg.index + 1 && seg.index == flow.sender.acked() {
            flow.last_progress = now;
        }
        let wire = roce::write_frame_len(self.cfg.ip, seg.payload, seg.index == 0) as u32;
        if let Some(d) = &self.cfg.dcqcn {
            flow.rp.advance(now, &d.params);
            flow.rp.on_sent(wire as u64, &d.params);
        }
        flow.last_tx = now;
        flow.last_wire = wire;
        flow.life.sent_bytes += seg.payload as u64;
        if retransmission {
            self.retransmitted += 1;
        }
        let arm = !flow.timer_armed;
        let (src, dst, sport) = (flow.msg.src.0, flow.msg.dst.0, flow.udp_sport);
        self.count_in_flight(1);
        if arm {
            self.arm_timeout(f, now + self.cfg.rto());
        }
        if let Some(next) = handoff {
            self.inherit_connection(f, next);
            self.activate(next, now);
        }
        Ok(self.frames.alloc(Frame::Packet(Packet {
            flow: f,
            index: seg.index,
            dst,
            src,
            sport,
            payload: seg.payload as u16,
            wire: wire as u16,
            kind: Kind::Data,
            ce: false,
            port: u32::MAX,
        })))
    }

    /// The head of `port`'s link reaches the peer port.
    fn arrive(&mut self, port: PortId) {
        let now = self.state.queue.now();
        let p = &mut self.ports[port.index()];
        let slot = p.wire.pop(&mut self.frames);
        let frame = *self.frames.get(slot);
        let to = p.link.peer;
        let peer_switch = p.peer_switch();
        match frame {
            Frame::Pause { quanta } => {
                self.frames.free(slot);
                let rate = self.ports[to.index()].link.rate;
                let at_switch = peer_switch.is_some();
                let q = &mut self.ports[to.index()];
                if q.pfc_ignored_until > now {
                    return;
                }
                if at_switch && quanta > 0 {
                    if let (Some(wd), false) = (self.cfg.watchdog, q.watchdog_pending) {
                        q.watchdog_pending = true;
                        let since = if q.paused_until > now {
                            q.paused_since.unwrap_or(now)
                        } else {
                            now
                        };
                        let at = (since + wd.timeout).max(now);
                        self.schedule(at, Event::Watchdog { port: to.0 });
                    }
                    if !self.deadlock_check_pending {
                        self.deadlock_check_pending = true;
                        let at = now + self.cfg.deadlock_check;
                        match &mut self.part {
                            None => self.schedule_global(at, Event::DeadlockCheck),
                            Some(part) => part.check_at = Some(at),
                        }
                    }
                }
                let q = &mut self.ports[to.index()];
                if q.paused_until <= now {
                    if let Some(s) = q.paused_since.take() {
                        q.paused_total += q.paused_until.max(s) - s;
                    }
                    if quanta > 0 {
                        q.paused_since = Some(now);
                    }
                } else if quanta == 0 {
                    if let Some(s) = q.paused_since.take() {
                        q.paused_total += now - s;
                    }
                }
                q.paused_until = now + pause_duration(quanta, rate);
                self.try_transmit(to);
            }
            // (A packet entering a switch reads only the ingress line of the port it
            // enters by.)
            Frame::Packet(pkt) => match peer_switch {
                Some(node) => self.forward(node, to, slot, pkt, now),
                None => {
                    let h = self.ports[to.index()].host().expect("a host's port");
                    self.frames.free(slot);
                    self.deliver(h, pkt, now)
                }
            },
        }
    }

    /// A packet (`pkt`, held in `slot`) entered switch `node` by `input`: admit it to the
    /// buffer (or drop it) and queue its slot at the egress it was routed to when sent.
    fn forward(&mut self, node: NodeId, input: PortId, slot: Slot, mut pkt: Packet, now: Time) {
        let out = PortId(pkt.port);
        if pkt.kind == Kind::Data {
            // (Only the watchdog sets `pfc_ignored_until`, in a line packets do not
            // otherwise touch.)
            let dropped_at =
                if self.cfg.watchdog.is_some() && self.ports[out.index()].pfc_ignored_until > now {
                    // The watchdog discards data for an egress it has taken out of PFC.
                    Some(out)
                } else if !self.admit(node, input, pkt.wire as u64) {
                    Some(input)
                } else {
                    None
                };
            if let Some(at) = dropped_at {
                self.frames.free(slot);
                self.drop_data(at, pkt);
                return;
            }
        }
        pkt.port = input.0;
        *self.frames.get_mut(slot).packet_mut() = pkt;
        let ready = now + self.cfg.switch_latency;
        let o = &mut self.ports[out.index()];
        let class = pkt.class();
        // Behind a packet of its class it cannot be sendable sooner than that one, so the
        // transmitter's plans stand unless they fall due now: its frame's end has passed,
        // or its wake-up is this instant's (later in the tie order).
        let plans_stand = !o.queues[class].is_empty()
            && if o.busy {
                o.wake_at == NEVER || o.deferred_end_to_come(now, self.state.queue.now_tie())
            } else {
                o.wake_at > now && o.wake_at != NEVER
            };
        self.frames.push_back(&mut o.queues[class], slot, ready);
        o.queued[class] += pkt.wire as u64;
        o.peak_queue = o.peak_queue.max(o.queued[DATA] + o.queued[CONTROL]);
        if !plans_stand {
            self.try_transmit(out);
        }
    }

    /// The egress of switch `node` for `pkt`: the one shortest-path port, or ECMP's choice.
    fn route(&self, node: NodeId, pkt: &Packet) -> PortId {
        let dst = HostId(pkt.dst);
        let cands = self.routes.candidates(node, dst);
        if cands.len() == 1 {
            cands[0]
        } else {
            // Data and its replies hash the same 5-tuple fields, ordered by direction.
            let h = driver::ecmp_hash(self.cfg.seed, node.0, pkt.src, pkt.dst, pkt.sport);
            cands[(h % cands.len() as u64) as usize]
        }
    }

    /// Ingress admission of a data packet of `bytes` on `input` of switch `node`: reserve
    /// first, then the shared pool up to the dynamic threshold, then (with PFC) headroom.
    /// Sends PAUSE upstream once headroom is touched or the threshold is reached.
    fn admit(&mut self, node: NodeId, input: PortId, bytes: u64) -> bool {
        let n = node.index();
        let threshold = self.threshold(n);
        let reserve = self.cfg.reserve;
        let q = &mut self.ports[input.index()];
        let shared_now = q.ingress.saturating_sub(reserve);
        let shared_after = (q.ingress + bytes).saturating_sub(reserve);
        let to_shared = shared_after - shared_now;
        if to_shared > 0 && shared_after > threshold {
            // Over the threshold: headroom takes it, if there is room.
            if q.headroom_used + bytes > q.headroom {
                return false;
            }
            q.headroom_used += bytes;
        } else {
            q.ingress += bytes;
            self.buffers[n].used += to_shared;
        }
        let q = &mut self.ports[input.index()];
        q.peak_ingress = q.peak_ingress.max(q.ingress + q.headroom_used);
        if self.cfg.pfc && !q.xoff {
            let shared = q.ingress.saturating_sub(reserve);
            if q.headroom_used > 0 || shared >= self.threshold(n) {
                let q = &mut self.ports[input.index()];
                q.xoff = true;
                q.pfc_pending = Some(self.cfg.pause_quanta);
                self.try_transmit(input);
            }
        }
        true
    }

    /// Puts a message on its NIC's round-robin list.
    fn activate(&mut self, flow: u32, now: Time) {
        let f = &mut self.state.flows[flow as usize];
        if !f.queued && f.life.sent_bytes == 0 {
            self.on_nic.push(flow);
        }
        f.queued = true;
        f.last_progress = now;
        let src = f.msg.src;
        self.nics[src.index()].qps.push_back(flow);
    }

    /// A packet reached host `h`'s NIC.
    fn deliver(&mut self, h: HostId, pkt: Packet, now: Time) {
        if self.nics[h.index()].stalled {
            let port = self.topo.host_port(h);
            if pkt.kind == Kind::Data {
                self.drop_data(port, pkt);
            } else {
                self.drops += 1;
                self.ports[port.index()].drops += 1;
            }
            return;
        }
        let fid = pkt.flow;
        match pkt.kind {
            Kind::Data => {
                self.count_in_flight(-1);
                let cnp_interval = self.cfg.dcqcn.as_ref().map(|d| d.cnp_interval);
                let ack_len = roce::ack_frame_len(self.cfg.ip) as u32;
                let flow = &mut self.state.flows[fid as usize];
                let reply = |kind: Kind, index: u32, wire: u32| Packet {
                    flow: fid,
                    index,
                    dst: flow.msg.src.0,
                    src: flow.msg.dst.0,
                    sport: flow.udp_sport,
                    payload: 0,
                    wire: wire as u16,
                    kind,
                    ce: false,
                    port: u32::MAX,
                };
                let mut out: [Option<Packet>; 2] = [None, None];
                let mut just_completed = false;
                // NP: a CE mark earns a CNP, at most one per flow per interval.
                if let (true, Some(interval)) = (pkt.ce, cnp_interval) {
                    if flow.last_cnp.is_none_or(|t| now >= t + interval) {
                        flow.last_cnp = Some(now);
                        self.cnps += 1;
                        out[0] = Some(reply(Kind::Cnp, 0, roce::cnp_frame_len(self.cfg.ip) as u32));
                    }
                }
                match flow.receiver.on_data(pkt.index) {
                    InOrderReceipt::Accepted { ack, complete } => {
                        flow.life.delivered_bytes += pkt.payload as u64;
                        if complete {
                            flow.life.finish = Some(now + self.cfg.nic_rx_latency);
                            just_completed = true;
                        }
                        out[1] = ack.map(|i| reply(Kind::Ack, i, ack_len));
                    }
                    InOrderReceipt::OutOfSequence { nak } => {
                        self.lost_payload += pkt.payload as u64;
                        if nak.is_some() {
                            self.naks += 1;
                        }
                        out[1] = nak.map(|i| reply(Kind::Nak, i, ack_len));
                    }
                    InOrderReceipt::Duplicate { ack } => {
                        self.lost_payload += pkt.payload as u64;
                        out[1] = ack.map(|i| reply(Kind::Ack, i, ack_len));
                    }
                }
                let completed = flow.life.finish;
                let nic = &mut self.nics[h.index()];
                nic.control.extend(out.into_iter().flatten());
                self.try_transmit(self.topo.host_port(h));
                if let (Some(at), true) = (completed, just_completed) {
                    self.release_dependents(fid, at);
                }
            }
            Kind::Ack | Kind::Nak => {
                let flow = &mut self.state.flows[fid as usize];
                let covered = if pkt.kind == Kind::Ack {
                    Some(pkt.index)
                } else {
                    pkt.index.checked_sub(1)
                };
                let before = flow.sender.acked();
                if let Some(i) = covered {
                    if flow.sender.on_ack(i) {
                        flow.life.acked = Some(now);
                        self.state.lifecycle.completed += 1;
                    }
                }
                if flow.sender.acked() > before {
                    flow.last_progress = now;
                }
                if pkt.kind == Kind::Nak {
                    flow.sender.rewind(pkt.index);
                    self.requeue(fid);
                }
                self.state.note_completion();
            }
            Kind::Cnp => {
                let fid = driver::current_on_connection(&self.state.flows, fid);
                let Some(d) = &self.cfg.dcqcn else { return };
                let flow = &mut self.state.flows[fid as usize];
                flow.rp.advance(now, &d.params);
                if flow.rp.on_cnp(now, &d.params) && self.cfg.record_rates {
                    if self.part.is_some() {
                        self.rate_ties.push(self.state.queue.now_tie());
                    }
                    self.rates.push(RateSample {
                        time: now,
                        flow: fid,
                        rate: flow.rp.rate(),
                        sent: None,
                    });
                }
            }
        }
    }

    /// The periodic deadlock check, while any switch egress is paused.
    /// With the PFC watchdog on, a cycle is not permanent: it is recorded (once until the
    /// watchdog next trips, or until another cycle forms) and the run goes on; without
    /// it, the cycle is a deadlock and stops the run.
    fn check_deadlock(&mut self, now: Time) {
        self.deadlock_check_pending = false;
        if let Some(cycle) = Self::find_deadlock(&[self], now) {
            if self.cfg.watchdog.is_none() {
                self.state.deadlock = Some(Deadlock { at: now, cycle });
                return;
            }
            let seen = self.pfc_cycles.last().is_some_and(|d| d.cycle == cycle)
                && self.trips_at_last_cycle == self.watchdog_trips;
            if !seen {
                self.pfc_cycles.push(Deadlock { at: now, cycle });
                self.trips_at_last_cycle = self.watchdog_trips;
            }
        }
        if Self::any_switch_paused(&[self], now) {
            self.deadlock_check_pending = true;
            self.schedule_global(now + self.cfg.deadlock_check, Event::DeadlockCheck);
        }
    }

    /// Whether any switch egress of the run made of `parts` is paused at `now`.
    pub(crate) fn any_switch_paused(parts: &[&Simulation], now: Time) -> bool {
        (0..parts[0].ports.len()).any(|i| {
            let p = &parallel::holder(parts, i).ports[i];
            p.paused_until > now && p.host().is_none()
        })
    }

    /// A deadlock among paused switch-to-switch egresses holding data (see
    /// [`WaitGraph::find_deadlock`]) in the run made of `parts`: each waits on its peer's
    /// ingress, which blocks it while in XOFF; an ingress's bytes sit in the egresses its
    /// packets were queued at.
    pub(crate) fn find_deadlock(parts: &[&Simulation], now: Time) -> Option<Vec<DeadlockHop>> {
        let first = parts[0];
        let n = first.ports.len();
        let blocked = |i: usize| {
            let p = &parallel::holder(parts, i).ports[i];
            p.paused_until > now
                && !p.queues[DATA].is_empty()
                && p.host().is_none()
                && p.peer_switch().is_some()
        };
        let mut edges: Vec<(u32, u32)> = (0..n)
            .filter(|&i| blocked(i))
            .map(|i| {
                let link = first.ports[i].link;
                (link.node.0, first.ports[link.peer.index()].link.node.0)
            })
            .collect();
        if !driver::has_cycle(&mut edges) {
            return None;
        }
        let mut g = WaitGraph {
            waits_on: vec![None; n],
            holds: vec![Vec::new(); n],
            occupancy: (0..n)
                .map(|i| {
                    let q = &parallel::holder(parts, i).ports[i];
                    if q.xoff {
                        q.ingress + q.headroom_used
                    } else {
                        0
                    }
                })
                .collect(),
        };
        for i in 0..n {
            if blocked(i) {
                let s = parallel::holder(parts, i);
                let p = &s.ports[i];
                g.waits_on[i] = Some(p.link.peer.index());
                for pkt in s.frames.iter(&p.queues[DATA]).map(Frame::packet) {
                    g.holds[i].push((pkt.port as usize, pkt.wire as u64));
                }
            }
        }
        let cycle = g.find_deadlock()?;
        Some(
            cycle
                .into_iter()
                .map(|e| deadlock_hop(&first.topo, PortId(e as u32)))
                .collect(),
        )
    }

    /// Conservation at this instant, by walking every queue and link (of a run on one
    /// thread: a merged split run keeps its counters, not its frames).
    pub fn audit(&self) -> Audit {
        let mut in_flight = 0u64;
        let mut queued_frames = 0u64;
        let mut count = |pkt: &Packet| {
            if pkt.kind == Kind::Data {
                in_flight += pkt.payload as u64;
            }
        };
        for p in &self.ports {
            for f in p.wire.frames(&self.frames) {
                queued_frames += 1;
                if let Frame::Packet(pkt) = f {
                    count(pkt);
                }
            }
            for q in &p.queues {
                for f in self.frames.iter(q) {
                    queued_frames += 1;
                    count(f.packet());
                }
            }
        }
        Audit {
            sent_payload: self.state.flows.iter().map(|f| f.life.sent_bytes).sum(),
            delivered_payload: self
                .state
                .flows
                .iter()
                .map(|f| f.life.delivered_bytes)
                .sum(),
            lost_payload: self.lost_payload,
            in_flight_payload: in_flight,
            lost_frames: self.frames.live() as u64 - queued_frames,
        }
    }

    /// Ideal completion of a message on an empty fabric (as for InfiniBand: NIC
    /// latencies, propagation, a switch latency and a store-and-forward re-serialisation of
    /// the last packet per switch, and the whole message serialised once).
    fn ideal_fct(&self, m: &Message) -> Time {
        if let Some(t) = self.state.lifecycle.ideal_local(&self.topo, m) {
            return t;
        }
        let ip = self.cfg.ip;
        driver::ideal_fct(
            &self.topo,
            &self.routes,
            m,
            self.cfg.mtu,
            self.cfg.nic_tx_latency + self.cfg.nic_rx_latency,
            self.cfg.switch_latency,
            |payload, first| roce::write_frame_len(ip, payload, first) as u64,
        )
    }

    /// Everything measured, for the experiment layer.
    pub fn report(&self) -> RunReport {
        let now = self.state.end_time();
        let flows = self.state.flow_results(|m| self.ideal_fct(m));
        let ports = self
            .ports
            .iter()
            .enumerate()
            .map(|(i, p)| PortResult {
                tx_bytes: p.tx_bytes,
                tx_packets: p.tx_packets,
                peak_queue_bytes: p.peak_queue,
                peak_input_bytes: p.peak_ingress,
                pause_frames: p.pause_frames,
                paused: p.paused_total
                    + p.paused_since
                        .map_or(Time::ZERO, |s| p.paused_until.min(now).saturating_sub(s)),
                drops: p.drops,
                ecn_marks: p.ecn_marks,
                ..PortResult::new(&self.topo, PortId(i as u32))
            })
            .collect();
        RunReport {
            sim_time: self.state.sim_time(),
            events: self.events(),
            flows,
            ports,
            drops: self.drops,
            retransmitted_packets: self.retransmitted,
            congestion_marks: self.ports.iter().map(|p| p.ecn_marks).sum(),
            congestion_notifications: self.cnps,
            duplicates: 0,
            buffer_overflows: 0,
            peak_packets_in_flight: self.in_flight.peak,
            stopped_by_time: self.state.stopped_by_time,
            pfc_pause_frames: self.ports.iter().map(|p| p.pause_frames).sum(),
            naks: self.naks,
            timeouts: self.timeouts,
            watchdog_trips: self.watchdog_trips,
            deadlock: self.state.deadlock.clone(),
            pfc_cycles: self.pfc_cycles.clone(),
        }
    }
}

impl Splittable for Simulation {
    type Frame = Frame;
    type Sample = RateSample;
    type CheckMemory = ();

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

    /// The rate-sampling interval, if rates are recorded.
    fn sampling(&self) -> Option<Time> {
        self.cfg.record_rates.then_some(self.cfg.rate_sample)
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

    /// A deadlock stops the run; the check goes on while any switch egress is paused.
    fn check_deadlock(parts: &[&Self], now: Time, _: &mut ()) -> Check {
        if let Some(cycle) = Self::find_deadlock(parts, now) {
            Check::Deadlock(cycle)
        } else if Self::any_switch_paused(parts, now) {
            Check::Again
        } else {
            Check::Clear
        }
    }

    /// Every part's messages on their NICs, in flow order (a part keeps only its rate
    /// cuts, whose ties it knows).
    fn take_samples(parts: &mut [&mut Self], now: Time) -> Vec<RateSample> {
        let mut taken = Vec::new();
        for p in parts.iter_mut() {
            let from = p.rates.len();
            p.sample_on_nic(now);
            taken.extend(p.rates.split_off(from));
        }
        taken.sort_by_key(|r| r.flow);
        taken
    }

    /// The run's parts, once every one has finished, as one run: each port and each
    /// message end from the part that holds them (a message's receiver side from its
    /// receiver's part), counters summed; `end` is what the coordinator saw.
    fn merge(mut parts: Vec<Simulation>, mut end: SplitEnd<RateSample>) -> Simulation {
        let owner = parts[0].part.as_ref().expect("a part").owner.clone();
        let ports: Vec<PortState> = (0..owner.len())
            .map(|i| parts[owner[i] as usize].ports[i].clone())
            .collect();
        let flows: Vec<Flow> = (parts[0].state.flows.iter().enumerate())
            .map(|(i, f)| {
                let dst = parts[0].topo.host_port(f.msg.dst).index();
                let receiver = &parts[owner[dst] as usize].state.flows[i];
                let mut flow = parts[owner[f.nic_port as usize] as usize].state.flows[i].clone();
                flow.receiver = receiver.receiver.clone();
                flow.last_cnp = receiver.last_cnp;
                flow.life.finish = receiver.life.finish;
                flow.life.delivered_bytes = receiver.life.delivered_bytes;
                flow
            })
            .collect();
        // Rate records in the order one thread makes them: by time, a time's cuts in the
        // order of their events, then that time's periodic samples (a run-wide event,
        // last at its time) in flow order.
        let mut rates: Vec<(Time, u64, RateSample)> = Vec::new();
        for p in &parts {
            rates.extend(
                p.rates
                    .iter()
                    .zip(&p.rate_ties)
                    .map(|(r, &t)| (r.time, t, *r)),
            );
        }
        rates.extend(end.samples.iter().map(|r| (r.time, u64::MAX, *r)));
        rates.sort_by_key(|&(t, tie, _)| (t, tie));
        let sum = |count: fn(&Simulation) -> u64| parts.iter().map(count).sum::<u64>();
        let drops = sum(|p| p.drops);
        let lost_payload = sum(|p| p.lost_payload);
        let retransmitted = sum(|p| p.retransmitted);
        let cnps = sum(|p| p.cnps);
        let naks = sum(|p| p.naks);
        let timeouts = sum(|p| p.timeouts);
        let completed = sum(|p| p.state.lifecycle.completed as u64) as usize;
        // Part 0 becomes the run: its own state replaced by the merged one, with no
        // frames or events left (a merged run is over).
        let mut merged = parts.swap_remove(0);
        merged.drops = drops;
        merged.lost_payload = lost_payload;
        merged.retransmitted = retransmitted;
        merged.cnps = cnps;
        merged.naks = naks;
        merged.timeouts = timeouts;
        merged.state.lifecycle.completed = completed;
        merged.ports = ports;
        merged.state.flows = flows;
        merged.rates = rates.into_iter().map(|(.., r)| r).collect();
        merged.frames = Pool::default();
        merged.part = None;
        merged.in_flight = end.in_flight;
        end.close(&mut merged.state);
        merged
    }
}

impl LifecycleEvent for Event {
    fn post(flow: u32) -> Self {
        Event::Post { flow }
    }
    fn local_done(flow: u32) -> Self {
        Event::LocalDone { flow }
    }
}

impl MessageFabric for Simulation {
    type Event = Event;
    type Flow = Flow;
    type Capture = CapturedFrame;

    fn state(&self) -> &RunState<Event, Flow, CapturedFrame> {
        &self.state
    }
    fn state_mut(&mut self) -> &mut RunState<Event, Flow, CapturedFrame> {
        &mut self.state
    }
    fn topology(&self) -> &Topology {
        &self.topo
    }
    #[inline(always)]
    fn handle_next(&mut self) {
        self.handle_event();
    }

    /// The DCQCN state and pacing carry over; CNPs for `prev` reach `next` from now on.
    fn inherit_connection(&mut self, prev: u32, next: u32) {
        let (rp, t) = {
            let p = &mut self.state.flows[prev as usize];
            p.life.handed_to = Some(next);
            (p.rp.clone(), (p.last_tx, p.last_wire))
        };
        let n = &mut self.state.flows[next as usize];
        n.rp = rp;
        (n.last_tx, n.last_wire) = t;
    }

    /// The message joins its NIC's round-robin list of QPs.
    fn enqueue(&mut self, flow: u32) {
        self.activate(flow, self.state.queue.now());
        let src = self.state.flows[flow as usize].msg.src;
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
                self.state
                    .queue
                    .schedule_tied(t, self.ties.post(flow), Event::Post { flow });
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
