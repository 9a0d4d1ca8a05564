//! The NIC's receiving side: data placed in order with ACKs, NAKs and CNPs, replies acknowledged at the sender, CNPs cutting its rate.

use super::reaction::Telemetry;
use super::{Kind, Packet, PacketPort, RateSample, Simulation};
use crate::driver::{self, MessageFabric};
use fabricsim_core::proto::rc::InOrderReceipt;
use fabricsim_core::units::{HostId, Time};
use fabricsim_core::wire::roce::{self};

impl Simulation {
    /// A packet reached host `h`'s NIC, with its telemetry if packets carry it.
    pub(super) fn deliver(&mut self, h: HostId, pkt: Packet, tel: Option<Telemetry>, now: Time) {
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
            Kind::Data => self.receive_data(h, pkt, tel, now),
            Kind::Ack | Kind::Nak | Kind::Sack => self.receive_reply(pkt, tel, now),
            Kind::Cnp => self.receive_cnp(pkt.flow, now),
        }
    }

    /// The receiver places a data packet in order (or discards it, or with selective
    /// repeat places it beyond its prefix), answering with an ACK, NAK or selective NAK as
    /// its queue pair asks (echoing the packet's telemetry), and with a CNP if it was
    /// marked; a message placed whole releases what depends on it.
    fn receive_data(&mut self, h: HostId, pkt: Packet, tel: Option<Telemetry>, now: Time) {
        let fid = pkt.flow;
        self.count_in_flight(-1);
        let cnp_interval = self.cfg.dcqcn.as_ref().map(|d| d.cnp_interval);
        let ack_len = roce::ack_frame_len(self.cfg.ip) as u32 + self.int_bytes();
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
            InOrderReceipt::Beyond { expected, arrived } => {
                flow.life.delivered_bytes += pkt.payload as u64;
                self.naks += 1;
                let mut sack = reply(Kind::Sack, expected, ack_len);
                sack.payload = Packet::sack_offset(expected, arrived);
                out[1] = Some(sack);
            }
        }
        let completed = flow.life.finish;
        let nic = &mut self.nics[h.index()];
        for reply in out.into_iter().flatten() {
            if let Some(t) = tel {
                // A CNP echoes nothing; ACKs and NAKs echo the packet they answer.
                nic.echo.push_back(if reply.kind == Kind::Cnp {
                    Telemetry::default()
                } else {
                    t
                });
            }
            nic.control.push_back(reply);
        }
        self.try_transmit(self.topo.host_port(h));
        if let (Some(at), true) = (completed, just_completed) {
            self.release_dependents(fid, at);
        }
    }

    /// The sender takes an ACK (or a NAK, which also rewinds it to the packet expected, or
    /// a selective NAK, which reports one packet placed and the holes below it); ACK-driven
    /// congestion control reacts to what it echoes.
    fn receive_reply(&mut self, pkt: Packet, tel: Option<Telemetry>, now: Time) {
        let fid = pkt.flow;
        let flow = &mut self.state.flows[fid as usize];
        let covered = if pkt.kind == Kind::Ack {
            Some(pkt.index)
        } else {
            pkt.index.checked_sub(1)
        };
        let before = flow.sender.acked();
        let done = match pkt.kind {
            Kind::Sack => flow.sender.on_selective_nak(pkt.index, pkt.sacked()),
            _ => covered.is_some_and(|i| flow.sender.on_ack(i)),
        };
        if done {
            flow.life.acked = Some(now);
            self.state.lifecycle.completed += 1;
        }
        let newly = flow.sender.acked() - before;
        if newly > 0 {
            flow.last_progress = now;
        }
        match pkt.kind {
            Kind::Nak => {
                flow.sender.rewind(pkt.index);
                self.requeue(fid);
            }
            Kind::Sack => self.requeue(fid),
            _ => {}
        }
        if let Some(t) = tel {
            self.on_feedback(fid, &t, newly, now);
        } else if self.reaction.is_some() && newly > 0 {
            // IRN's cap may have opened.
            let src = self.state.flows[fid as usize].msg.src;
            self.try_transmit(self.topo.host_port(src));
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
