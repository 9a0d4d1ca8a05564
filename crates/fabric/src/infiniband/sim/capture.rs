//! Packets as they leave their source HCA, for pcap.

use super::{Kind, Packet, Simulation};
use crate::driver::CaptureFilter;
use fabricsim_core::proto::rc::PSN_MASK;
use fabricsim_core::units::{HostId, Time};
use fabricsim_core::wire::ib::{Aeth, PacketRepr, Reth, DEFAULT_PKEY};

/// A packet as it left its source HCA.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Captured {
    pub time: Time,
    pub repr: PacketRepr,
}

/// LIDs: host h has LID h + 1 (LID 0 is reserved).
pub(super) fn lid(h: HostId) -> u16 {
    (h.0 + 1) as u16
}

impl Simulation {
    /// Keeps the packets `filter` selects, as they leave their source HCA.
    pub fn capture(&mut self, filter: CaptureFilter) {
        self.state.capture = Some((filter, Vec::new()));
    }

    /// The captured packets, in transmission order.
    pub fn captured(&self) -> &[Captured] {
        self.state.captured()
    }

    /// Adds a packet leaving its source HCA to the capture, if it is selected.
    pub(super) fn record(&mut self, pkt: Packet, now: Time) {
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
}
