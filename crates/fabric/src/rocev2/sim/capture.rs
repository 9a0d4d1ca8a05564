//! Frames as they leave their ports, for pcap: the headers a packet carries on the wire.

use super::{CapturedFrame, Frame, Kind, Packet, Simulation};
use crate::driver::CaptureFilter;
use fabricsim_core::proto::rc::PSN_MASK;
use fabricsim_core::units::{PortId, Time};
use fabricsim_core::wire::ib::{Aeth, Opcode, Reth};
use fabricsim_core::wire::roce::{self, RoceRepr};

impl Simulation {
    /// Keeps the frames `filter` selects (see [`CapturedFrame`]).
    pub fn capture(&mut self, filter: CaptureFilter) {
        self.state.capture = Some((filter, Vec::new()));
    }

    /// The captured frames, in transmission order.
    pub fn captured(&self) -> &[CapturedFrame] {
        self.state.captured()
    }

    /// Adds a frame leaving `port` to the capture, if it is selected.
    pub(super) fn record(&mut self, port: PortId, frame: &Frame, now: Time) {
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
                // HPCC's INT header takes link time but is not written (`--pcap` refuses
                // HPCC; a capture inside a test still records the rest).
                let int = if pkt.kind == Kind::Cnp {
                    0
                } else {
                    self.int_bytes()
                };
                debug_assert_eq!(
                    bytes.len() + roce::FCS_LEN + roce::PREAMBLE_IFG_LEN + int as usize,
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
    pub(super) fn repr(&self, pkt: &Packet) -> RoceRepr {
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
            // IRN's selective NAK is a NAK on the wire (its reported PSN rides in an
            // extension header that the capture leaves out).
            Kind::Nak | Kind::Sack => (
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
            // A Sack keeps its reported offset in `payload`; it carries no data.
            payload_len: if pkt.kind == Kind::Data {
                pkt.payload.into()
            } else {
                0
            },
        }
    }
}
