//! What the InfiniBand model carries: packets, flow-control packets and the events.

use fabricsim_core::wire::ib::{self, Opcode};

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
    pub(super) flow: u32,
    /// Data: position in the message. Ack: last packet covered.
    pub(super) index: u32,
    pub(super) payload: u32,
    pub(super) wire: u32,
    pub(super) dst: u32,
    pub(super) kind: Kind,
    pub(super) opcode: Opcode,
    pub(super) vl: u8,
    pub(super) fecn: bool,
    /// Data: the sender asked for an ACK (the segment's AckReq bit).
    pub(super) ack_req: bool,
    /// At a switch egress: the input it entered by (the switch's local port index, or
    /// its last for packets it made itself); set when it is queued there.
    pub(super) input: u16,
}

impl Packet {
    pub(super) fn blocks(&self) -> u32 {
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
    pub(super) fn packet(&self) -> &Packet {
        match self {
            Frame::Packet(pkt) => pkt,
            Frame::Credit { .. } => unreachable!("queues of packets hold no credit frames"),
        }
    }

    pub(super) fn packet_mut(&mut self) -> &mut Packet {
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
    /// A failure's links go down or up, or the routes change around them.
    Failure {
        failure: u32,
        phase: crate::driver::failure::Phase,
    },
}
