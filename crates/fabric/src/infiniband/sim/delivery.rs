//! The HCA's receiving side: data placed with ACKs and BECNs, replies acknowledged at the sender, SHARP results delivered.

use super::{Kind, Packet, Simulation};
use crate::driver::{self, MessageFabric};
use fabricsim_core::units::{HostId, Time};
use fabricsim_core::wire::ib::{self, Opcode};

impl Simulation {
    /// A packet reached host `h`.
    pub(super) fn deliver(&mut self, h: HostId, pkt: Packet, now: Time) {
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
}
