//! A port's state: its transmitter and link, its egress queues, its ingress accounting and its PFC episodes.

use crate::driver::Wire;
use crate::rocev2::config::RoceConfig;
use fabricsim_core::pool::Fifo;
use fabricsim_core::proto::ecn::RedParams;
use fabricsim_core::topology::Port;
use fabricsim_core::topology::{NodeKind, Topology};
use fabricsim_core::units::{HostId, NodeId, Time};

/// One port's state. `repr(C)` keeps the declared order: what every packet event reads
/// (the link, the transmitter, the egress queues) comes first, then the ingress
/// accounting a departing packet updates at its input port, then what only PFC episodes
/// and reports touch. (Random accesses to ports dominate at scale: a k=16 permutation
/// has 300 k packets in flight and its state outgrows the second-level cache.)
#[derive(Clone, Debug)]
#[repr(C, align(64))]
pub(super) struct PortState {
    // First line: the transmitter and the link.
    /// The topology's description of this port, copied here for locality.
    pub(super) link: Port,
    /// The port's host, or `NONE` on a switch (see [`host`](Self::host)).
    pub(super) host_index: u32,
    /// The switch at the link's far end, or `NONE` if a host is there (see
    /// [`peer_switch`](Self::peer_switch)).
    pub(super) peer_switch_index: u32,
    pub(super) wire: Wire,
    /// The link's whole picoseconds per byte, or 0 if its rate has none.
    pub(super) ps_per_byte: u32,
    pub(super) generation: u32,
    /// A PAUSE (Some(quanta)) or RESUME (Some(0)) waiting to go out on this port.
    pub(super) pfc_pending: Option<u16>,
    /// A frame is being serialised, until its end event (or its deferred end: `wake_at`).
    pub(super) busy: bool,
    // Second line: the egress queues.
    /// Idle: the pending transmitter wake-up, or `NEVER`. Busy: the frame's end if its
    /// event is deferred (see [`Simulation::transmit`]), `NEVER` once it is queued.
    pub(super) wake_at: Time,
    /// Egress FIFOs per class in the frame pool, each packet stamped with the time it is
    /// ready to leave; ready times rise in FIFO order.
    pub(super) queues: [Fifo; 2],
    pub(super) queued: [u64; 2],
    /// PFC as a transmitter: data is paused until this time by the peer's PAUSE.
    pub(super) paused_until: Time,
    pub(super) tx_bytes: u64,
    pub(super) peak_queue: u64,
    // Third line: the ingress (switch ports): bytes held, the part in headroom, XOFF.
    pub(super) ingress: u64,
    pub(super) headroom_used: u64,
    /// Busy with a deferred end: the wake-up already queued for when the transmitter next
    /// has something sendable (see [`Simulation::transmit`]), or `NEVER`.
    pub(super) wake_after_end: Time,
    pub(super) peak_ingress: u64,
    /// When the XOFF refresh is due, or `NEVER`.
    pub(super) pause_refresh_at: Time,
    pub(super) tx_packets: u64,
    /// The tie of the frame end event deferred to `wake_at`.
    pub(super) end_tie: u64,
    pub(super) xoff: bool,
    /// The port's node (`link.node`), here for a departing packet's ingress accounting,
    /// which then reads no other line of its input port.
    pub(super) node: NodeId,
    // Rarely touched: ECN marking, PFC episodes, report counters.
    pub(super) red: Option<RedParams>,
    /// Marking draws made here (see [`marking_draw`]).
    pub(super) ecn_draws: u64,
    pub(super) paused_since: Option<Time>,
    pub(super) paused_total: Time,
    /// The watchdog tripped: PAUSE is ignored and data dropped here until this time.
    pub(super) pfc_ignored_until: Time,
    pub(super) watchdog_pending: bool,
    pub(super) pause_frames: u64,
    pub(super) drops: u64,
    pub(super) ecn_marks: u64,
    /// PFC headroom of this ingress (read only once the shared buffer is over threshold).
    pub(super) headroom: u64,
    /// The plain schedule only: busy with a frame whose end, at this time, was foreseen to
    /// find nothing sendable, so that the wake-up it queues takes its tie (as the deferred
    /// schedule's does); `NEVER` otherwise.
    pub(super) plain_end_waits: Time,
}

// The egress fields start the second line and the ingress fields the third.
const _: () = assert!(std::mem::offset_of!(PortState, wake_at) == 64);

const _: () = assert!(std::mem::offset_of!(PortState, ingress) == 128);

const _: () = assert!(std::mem::offset_of!(PortState, red) == 192);

/// What a transmitter will find when its frame ends ([`Simulation::after_end`]).
pub(super) enum AfterEnd {
    /// Something to send.
    Sendable,
    /// Nothing sendable until this time.
    Wake(Time),
    /// Nothing queued.
    Idle,
}

/// "No time": no transmitter wake-up pending.
pub(super) const NEVER: Time = Time::MAX;

/// "No node": a packed `Option` of a node or host index (in `PortState`'s first line).
pub(super) const NONE: u32 = u32::MAX;

impl PortState {
    /// The port's host, or `None` on a switch.
    #[inline(always)]
    pub(super) fn host(&self) -> Option<HostId> {
        (self.host_index != NONE).then_some(HostId(self.host_index))
    }

    /// The switch at the link's far end, or `None` if a host is there: a packet sent here
    /// is routed for it when sent ([`Packet::port`]).
    #[inline(always)]
    pub(super) fn peer_switch(&self) -> Option<NodeId> {
        (self.peer_switch_index != NONE).then_some(NodeId(self.peer_switch_index))
    }

    /// Busy with a deferred end (`wake_at`, `end_tie`): whether that end still comes
    /// after the event at (`now`, `now_tie`).
    pub(super) fn deferred_end_to_come(&self, now: Time, now_tie: u64) -> bool {
        (self.wake_at, self.end_tie) > (now, now_tie)
    }

    pub(super) fn new(
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
            plain_end_waits: NEVER,
        }
    }
}

/// Every port's state: a switch port's PFC headroom and ECN marking from the
/// configuration at its link's rate.
pub(super) fn port_states(cfg: &RoceConfig, topo: &Topology) -> Vec<PortState> {
    topo.ports()
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
        .collect()
}
