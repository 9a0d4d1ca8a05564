//! What the RoCEv2 model carries: packets, PFC frames, the events, and captured frames.

use fabricsim_core::units::Time;

/// What a packet is, for the handlers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Data,
    Ack,
    Nak,
    Cnp,
}

/// Traffic classes at an egress: control (ACK, NAK, CNP) is served first.
pub(super) const DATA: usize = 0;

pub(super) const CONTROL: usize = 1;

/// A packet as the simulator carries it (no payload bytes).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Packet {
    pub(super) flow: u32,
    /// Data: position in the message. Ack: last packet covered. Nak: expected packet.
    pub(super) index: u32,
    pub(super) dst: u32,
    /// The host that sent it (a data packet's message source, a reply's message
    /// destination), and its connection's UDP source port: what ECMP hashes besides
    /// `dst`, carried so that forwarding never reads the flow.
    pub(super) src: u32,
    pub(super) sport: u16,
    /// Payload and link bytes (an MTU is at most [`MAX_MTU`]).
    pub(super) payload: u16,
    pub(super) wire: u16,
    pub(super) kind: Kind,
    /// ECN Congestion Experienced.
    pub(super) ce: bool,
    /// On a link to a switch: the egress port that switch forwards it by, routed when it
    /// was sent (routing is a pure function of the switch and the packet's addresses, so
    /// the arrival's prefetch can ask for the egress's lines from the frame). From its
    /// arrival to its departure: the switch port it entered by (for ingress accounting).
    pub(super) port: u32,
}

/// The largest MTU the model takes, so that a frame's lengths fit 16 bits (RoCEv2 uses
/// 1024, 2048 or 4096).
pub(super) const MAX_MTU: u32 = 16384;

// A packet and a PFC frame share 28 bytes (the kind's spare values tell them apart).
const _: () = assert!(std::mem::size_of::<Frame>() == 28);

impl Packet {
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
}

/// A frame as it left its port: packets as they leave their source NIC, PFC frames as
/// any port sends them. `bytes` is the Ethernet frame without FCS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CapturedFrame {
    pub time: Time,
    pub bytes: Vec<u8>,
}
