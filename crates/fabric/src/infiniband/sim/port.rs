//! A port's state: its transmitter and link, credits to release, and its report counters.

use crate::driver::Wire;
use fabricsim_core::proto::vlarb::ArbState;
use fabricsim_core::proto::vlarb::ArbTable;
use fabricsim_core::topology::Port;
use fabricsim_core::topology::{NodeKind, Topology};
use fabricsim_core::units::{HostId, PortId, Time};

/// Credits to return once a forwarded packet has left.
#[derive(Clone, Copy, Debug)]
pub(super) struct Release {
    pub(super) input: PortId,
    /// At most an MTU's blocks (4 KiB / 64 B plus headers).
    pub(super) blocks: u16,
    pub(super) vl: u8,
}

/// "No time": no wake-up pending, or no credit stall under way.
pub(super) const NEVER: Time = Time::MAX;

/// One port's state. `repr(C)` keeps the declared order so that the fields every packet
/// event touches fill exactly two cache lines (cache misses, not instructions, dominated
/// the reference benchmark under cachegrind). The port's switch egress queues live
/// apart, in `Simulation::egress`, and its report counters in `Simulation::counters`.
#[derive(Clone, Debug)]
#[repr(C, align(64))]
pub(super) struct PortState {
    // First line: the transmitter and the link.
    /// When the last frame put on the wire ends; flow-control packets only move this
    /// forward, so they take link time without an event of their own.
    pub(super) free_at: Time,
    pub(super) queued: u64,
    /// The topology's description of this port, copied here for locality.
    pub(super) link: Port,
    pub(super) generation: u32,
    pub(super) fc_pending: u16,
    /// A packet is being serialised (its end is the pending transmitter event).
    pub(super) busy: bool,
    pub(super) fc_sent_since_refresh: bool,
    pub(super) arbiter: ArbState,
    // Second line: wake-ups, credits to release, the wire and the packet counters.
    /// The pending transmitter wake-up, or `NEVER`.
    pub(super) wake_at: Time,
    /// Since when a ready packet has lacked credits, or `NEVER`.
    pub(super) stall_since: Time,
    /// The port's host, or `None` on a switch.
    pub(super) host: Option<HostId>,
    pub(super) releasing: Option<Release>,
    pub(super) wire: Wire,
    /// The link's whole picoseconds per byte, or 0 if the rate has none.
    pub(super) ps_per_byte: u32,
    pub(super) tx_bytes: u64,
    pub(super) tx_packets: u64,
}

// The hot fields fill two lines and no more.
const _: () = assert!(std::mem::size_of::<PortState>() == 128);

/// A port's report counters, kept apart from its state in one dense array: the peak is
/// compared at every packet queued and the credit packets counted at every one sent, and
/// as a third line of `PortState` each cost a cache miss at scale (a k=16 fat-tree's
/// counters take 200 KB, its port states 800 KB).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct PortCounters {
    pub(super) peak_queue: u64,
    pub(super) credit_packets: u64,
    pub(super) stall_total: Time,
    pub(super) fecn_marks: u64,
}

impl PortState {
    /// Time to serialise `bytes` on this port's link: a multiplication at the standard
    /// rates, the exact division otherwise (the same result either way).
    pub(super) fn serialization(&self, bytes: u32) -> Time {
        self.link
            .rate
            .serialization_by(self.ps_per_byte, bytes as u64)
    }
}

/// Every port's state, idle, its arbiter at the start of `arbitration`.
pub(super) fn port_states(topo: &Topology, arbitration: &ArbTable) -> Vec<PortState> {
    topo.ports()
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
        .collect()
}
