//! The NIC's receiving side: data placed in order with ACKs, NAKs and CNPs, replies acknowledged at the sender, CNPs cutting its rate.

use super::{Kind, Packet, PacketPort, RateSample, Simulation};
use crate::driver::{self, MessageFabric};
use fabricsim_core::proto::rc::InOrderReceipt;
use fabricsim_core::units::{HostId, Time};
use fabricsim_core::wire::roce::{self};

impl Simulation {
    /// A packet reached host `h`'s NIC.
    pub(super) fn deliver(&mut self, h: HostId, pkt: Packet, now: Time) {
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
        match pkt.kind {
            Kind::Data => self.receive_data(h, pkt, now),
            Kind::Ack | Kind::Nak => self.receive_reply(pkt, now),
            Kind::Cnp => self.receive_cnp(pkt.flow, now),
        }
    }

    /// The receiver places a data packet in order (or discards it), answering with an ACK
    /// or NAK as its queue pair asks, and with a CNP if it was marked; a message placed
    /// whole releases what depends on it.
    fn receive_data(&mut self, h: HostId, pkt: Packet, now: Time) {
        let fid = pkt.flow;
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
            port: PacketPort::UNROUTED,
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

    /// The sender takes an ACK (or a NAK, which also rewinds it to the packet expected).
    fn receive_reply(&mut self, pkt: Packet, now: Time) {
        let fid = pkt.flow;
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

    /// DCQCN's reaction point cuts the rate of the connection's current message.
    fn receive_cnp(&mut self, fid: u32, now: Time) {
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
