//! What the RoCEv2 model carries: packets, PFC frames, the events, and captured frames.

use fabricsim_core::units::{PortId, Time};

/// What a packet is, for the handlers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Data,
    Ack,
    Nak,
    /// Selective repeat's NAK: the receiver placed a packet beyond its in-order prefix.
    Sack,
    Cnp,
}

/// Traffic classes at an egress: control (ACK, NAK, CNP) is served first.
pub(super) const DATA: usize = 0;

pub(super) const CONTROL: usize = 1;

/// A packet as the simulator carries it (no payload bytes).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Packet {
    pub(super) flow: u32,
    /// Data: position in the message. Ack: last packet covered. Nak and Sack: expected
    /// packet.
    pub(super) index: u32,
    pub(super) dst: u32,
    /// The host that sent it (a data packet's message source, a reply's message
    /// destination), and its connection's UDP source port: what ECMP hashes besides
    /// `dst`, carried so that forwarding never reads the flow.
    pub(super) src: u32,
    pub(super) sport: u16,
    /// Payload and link bytes (an MTU is at most [`MAX_MTU`]). A Sack, which has no
    /// payload, keeps here how far beyond `index` the packet it reports was
    /// ([`Packet::sack_offset`]).
    pub(super) payload: u16,
    pub(super) wire: u16,
    pub(super) kind: Kind,
    /// ECN Congestion Experienced.
    pub(super) ce: bool,
    /// The switch port the packet is bound for or came in by (see [`PacketPort`]).
    pub(super) port: PacketPort,
}

/// A packet's switch port, which means one of two things by where the packet is:
/// - on a link to a switch, the egress that switch forwards it by, routed when it was
///   sent (routing is a pure function of the switch and the packet's addresses, so the
///   arrival's prefetch can ask for the egress's lines from the frame);
/// - from its arrival at a switch to its departure, the port it entered by (for ingress
///   accounting).
///
/// The meaning is tagged in the top bit, and reading it as the other one is a bug that
/// debug builds catch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PacketPort(u32);

impl PacketPort {
    const INPUT: u32 = 1 << 31;
    /// Not yet routed: a packet leaving a NIC, before its first switch is known.
    pub(super) const UNROUTED: PacketPort = PacketPort(!Self::INPUT);
    /// The most ports a fabric may have, so that a port's index leaves the tag bit free.
    pub(super) const MAX_PORTS: usize = !Self::INPUT as usize;

    /// Bound for egress `out` of the next switch.
    pub(super) fn routed_to(out: PortId) -> Self {
        debug_assert!((out.0 as usize) < Self::MAX_PORTS);
        PacketPort(out.0)
    }

    /// Entered its switch by `input`.
    pub(super) fn entered_by(input: PortId) -> Self {
        debug_assert!((input.0 as usize) < Self::MAX_PORTS);
        PacketPort(input.0 | Self::INPUT)
    }

    /// The egress it was routed to (on a link to a switch).
    #[inline(always)]
    pub(super) fn egress(self) -> PortId {
        debug_assert!(
            self.0 & Self::INPUT == 0 && self != Self::UNROUTED,
            "{self:?} is not an egress"
        );
        PortId(self.0)
    }

    /// The port it entered its switch by (inside the switch).
    #[inline(always)]
    pub(super) fn input(self) -> PortId {
        debug_assert!(self.0 & Self::INPUT != 0, "{self:?} is not an input");
        PortId(self.0 & !Self::INPUT)
    }
}

/// The largest MTU the model takes, so that a frame's lengths fit 16 bits (RoCEv2 uses
/// 1024, 2048 or 4096).
pub(super) const MAX_MTU: u32 = 16384;

// A packet and a PFC frame share 28 bytes (the kind's spare values tell them apart).
const _: () = assert!(std::mem::size_of::<Frame>() == 28);

impl Packet {
    /// A Sack's `payload`: the reported packet's distance beyond the expected one (below
    /// 2^16, as IRN's cap keeps outstanding packets to the bandwidth-delay product,
    /// which `Reaction` clamps below 2^16).
    pub(super) fn sack_offset(expected: u32, arrived: u32) -> u16 {
        u16::try_from(arrived - expected).expect("IRN's cap bounds what is outstanding")
    }

    /// The packet a Sack reports placed.
    pub(super) fn sacked(&self) -> u32 {
        debug_assert_eq!(self.kind, Kind::Sack);
        self.index + self.payload as u32
    }

    pub(super) fn class(&self) -> usize {
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
    pub(super) fn packet(&self) -> &Packet {
        match self {
            Frame::Packet(pkt) => pkt,
            Frame::Pause { .. } => unreachable!("queues of packets hold no PFC frames"),
        }
    }

    pub(super) fn packet_mut(&mut self) -> &mut Packet {
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
    /// A failure's links go down or up, or the routes change around them.
    Failure {
        failure: u32,
        phase: crate::driver::failure::Phase,
    },
}

/// A frame as it left its port: packets as they leave their source NIC, PFC frames as
/// any port sends them. `bytes` is the Ethernet frame without FCS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CapturedFrame {
    pub time: Time,
    pub bytes: Vec<u8>,
}
