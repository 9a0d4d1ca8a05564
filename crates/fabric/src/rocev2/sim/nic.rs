//! The NIC's sending side: queue pairs served round-robin, DCQCN pacing, and loss recovery by timeout.

use super::reaction::{AckControl, Reaction, Telemetry};
use super::{Event, Frame, Kind, Packet, PacketPort, Simulation};
use crate::driver::{self, MessageFabric, Progress};
use crate::rocev2::config::{AckCc, LossRecovery, RoceConfig};
use crate::workload::Message;
use crate::workload::Workload;
use fabricsim_core::pool::Slot;
use fabricsim_core::proto::dcqcn::Dcqcn;
use fabricsim_core::proto::rc::{RcSender, RoceReceiver};
use fabricsim_core::topology::Topology;
use fabricsim_core::units::{BitRate, HostId, PortId, Time};
use fabricsim_core::wire::roce::{self};
use std::collections::VecDeque;

#[derive(Clone, Debug, Default)]
pub(super) struct Nic {
    /// ACK, NAK and CNP to send, ahead of data.
    pub(super) control: VecDeque<Packet>,
    /// With telemetry: what each of `control`'s packets echoes, in the same order.
    pub(super) echo: VecDeque<Telemetry>,
    /// QPs with data to send, served round-robin.
    pub(super) qps: VecDeque<u32>,
    /// The receive pipeline is stalled (pause storm): arrivals are dropped.
    pub(super) stalled: bool,
}

#[derive(Clone, Debug)]
pub(crate) struct Flow {
    pub(super) msg: Message,
    /// UDP source port: the ECMP entropy of this QP.
    pub(super) udp_sport: u16,
    pub(super) sender: RcSender,
    pub(super) receiver: RoceReceiver,
    pub(super) rp: Dcqcn,
    /// HPCC, Swift or TIMELY, if configured in place of DCQCN.
    pub(super) cc: Option<Box<AckControl>>,
    /// Packets sent on this message's connection by the messages before it: the
    /// connection's packet numbering, which ACK-driven control counts in.
    pub(super) psn_base: u32,
    /// When the last packet started, and its link bytes: the pacing state.
    pub(super) last_tx: Time,
    pub(super) last_wire: u32,
    pub(super) queued: bool,
    pub(super) last_cnp: Option<Time>,
    /// When the acknowledged prefix last grew (or sending began).
    pub(super) last_progress: Time,
    pub(super) timer_armed: bool,
    /// `sent_bytes` at the last rate sample.
    pub(super) sampled_bytes: u64,
    /// Life-cycle state shared with the other fabric.
    pub(super) life: Progress,
    /// The sender's NIC port: where its posts and timeouts are handled.
    pub(super) nic_port: u32,
}

driver::tracked_by_fields!(Flow);

impl Flow {
    /// The rate the flow is paced at on a NIC of `line` rate: DCQCN's (its timers
    /// brought up to `now`), HPCC's, Swift's or TIMELY's, or the line rate without
    /// congestion control.
    pub(super) fn rate(&mut self, cfg: &RoceConfig, line: BitRate, now: Time) -> BitRate {
        match (&cfg.dcqcn, self.cc.as_deref()) {
            (Some(d), _) => {
                self.rp.advance(now, &d.params);
                self.rp.rate().min(line)
            }
            (None, Some(c)) => c.rate(line, self.last_wire).min(line),
            (None, None) => line,
        }
    }
}

impl Simulation {
    pub(super) fn on_timeout(&mut self, flow: u32, now: Time) {
        let f = &mut self.state.flows[flow as usize];
        f.timer_armed = false;
        if f.life.acked.is_some() || f.sender.sent() == f.sender.acked() {
            return;
        }
        let rto = self.cfg.rto(f.sender.outstanding());
        let due = f.last_progress + rto;
        if now < due {
            self.arm_timeout(flow, due);
            return;
        }
        // No progress for a whole timeout: go back to the first unacknowledged packet.
        self.timeouts += 1;
        let acked = f.sender.acked();
        f.sender.rewind(acked);
        f.last_progress = now;
        self.on_timeout_feedback(flow, now);
        self.requeue(flow);
        self.arm_timeout(flow, now + rto);
    }

    /// Arms `flow`'s retransmission timer for `at`.
    pub(super) fn arm_timeout(&mut self, flow: u32, at: Time) {
        self.state.flows[flow as usize].timer_armed = true;
        self.schedule(at, Event::Timeout { flow });
    }

    /// Puts a flow with data to send back on its NIC's round-robin list, and tells the
    /// NIC (a flow still listed but held by its window or cap may have become sendable).
    pub(super) fn requeue(&mut self, flow: u32) {
        let f = &mut self.state.flows[flow as usize];
        if !f.sender.has_more() {
            return;
        }
        let src = f.msg.src;
        if !f.queued {
            f.queued = true;
            self.nics[src.index()].qps.push_back(flow);
        }
        self.try_transmit(self.topo.host_port(src));
    }

    /// Pacing of `flow` on a NIC port of `line` rate: its next packet may start one
    /// serialisation time of its last packet, at its current rate ([`Flow::rate`]), after
    /// that packet started. Returns when, and when to look again if that is later than
    /// `now` (the rate rises at the reaction point's next timer, so the wait may shorten).
    pub(super) fn pacing(&mut self, flow: u32, line: BitRate, now: Time) -> (Time, Time) {
        let f = &mut self.state.flows[flow as usize];
        let rate = f.rate(&self.cfg, line, now);
        let allowed = f.last_tx + rate.serialization(f.last_wire as u64);
        let look = f.rp.next_increase().map_or(allowed, |t| t.min(allowed));
        (allowed, look)
    }

    /// A NIC: control first, then data from paced QPs round-robin unless paused.
    pub(super) fn pick_nic(
        &mut self,
        port: PortId,
        host: HostId,
        now: Time,
    ) -> Result<Slot, Option<Time>> {
        if let Some(pkt) = self.nics[host.index()].control.pop_front() {
            let slot = self.frames.alloc(Frame::Packet(pkt));
            if let Some(t) = self.nics[host.index()].echo.pop_front() {
                *self.telemetry_at(slot) = t;
            }
            return Ok(slot);
        }
        if self.data_paused(port, now) {
            let until = self.ports[port.index()].paused_until;
            let has_data = !self.nics[host.index()].qps.is_empty();
            return Err(has_data.then_some(until));
        }
        let rate = self.ports[port.index()].link.rate;
        let pos = self.sendable_qp(host, rate, now)?;
        Ok(self.send_segment(host, pos, now))
    }

    /// The position in `host`'s QP list of the first QP whose window and pacing let it
    /// send now on a link of `rate`; else when pacing lets the first of them send (None:
    /// every window is full).
    fn sendable_qp(
        &mut self,
        host: HostId,
        rate: BitRate,
        now: Time,
    ) -> Result<usize, Option<Time>> {
        let mut wake: Option<Time> = None;
        for pos in 0..self.nics[host.index()].qps.len() {
            let f = self.nics[host.index()].qps[pos];
            if !self.may_send(f) {
                // Its window or cap is full: an ACK reopens it (`on_feedback`, `requeue`).
                continue;
            }
            let (allowed, look) = self.pacing(f, rate, now);
            if allowed <= now {
                return Ok(pos);
            }
            wake = Some(wake.map_or(look, |w| w.min(look)));
        }
        Err(wake)
    }

    /// Sends the next segment of the QP at `pos` in `host`'s list, which may send now:
    /// its frame, with its sender, rate control, timer and hand-over brought up to date.
    fn send_segment(&mut self, host: HostId, pos: usize, now: Time) -> Slot {
        let int_bytes = self.int_bytes();
        let nic = &mut self.nics[host.index()];
        let f = nic.qps.remove(pos).expect("chosen from the list");
        let flow = &mut self.state.flows[f as usize];
        let seg = flow.sender.peek().expect("queued QPs have data");
        let retransmission = flow.sender.is_retransmission(seg.index);
        flow.sender.next_segment();
        let mut handoff = None;
        if flow.sender.has_more() {
            nic.qps.push_back(f);
        } else {
            flow.queued = false;
            if !flow.life.injected {
                flow.life.injected = true;
                handoff = flow.life.successor.take();
            }
        }
        if flow.sender.sent() == seg.index + 1 && seg.index == flow.sender.acked() {
            flow.last_progress = now;
        }
        let wire =
            roce::write_frame_len(self.cfg.ip, seg.payload, seg.index == 0) as u32 + int_bytes;
        if let Some(d) = &self.cfg.dcqcn {
            flow.rp.advance(now, &d.params);
            flow.rp.on_sent(wire as u64, &d.params);
        }
        flow.last_tx = now;
        flow.last_wire = wire;
        flow.life.sent_bytes += seg.payload as u64;
        if retransmission {
            self.retransmitted += 1;
        }
        let arm = !flow.timer_armed;
        let outstanding = flow.sender.outstanding();
        let (src, dst, sport) = (flow.msg.src.0, flow.msg.dst.0, flow.udp_sport);
        self.count_in_flight(1);
        if arm {
            self.arm_timeout(f, now + self.cfg.rto(outstanding));
        }
        if let Some(next) = handoff {
            self.inherit_connection(f, next);
            self.activate(next, now);
        }
        let slot = self.frames.alloc(Frame::Packet(Packet {
            flow: f,
            index: seg.index,
            dst,
            src,
            sport,
            payload: seg.payload as u16,
            wire: wire as u16,
            kind: Kind::Data,
            ce: false,
            port: PacketPort::UNROUTED,
        }));
        self.stamp_departure(slot, now);
        slot
    }

    /// Bytes HPCC's INT header adds to data packets and ACKs (none without HPCC).
    pub(super) fn int_bytes(&self) -> u32 {
        match self.cfg.ack_cc {
            Some(AckCc::Hpcc(_)) => fabricsim_core::proto::hpcc::INT_HEADER_BYTES,
            _ => 0,
        }
    }

    /// Puts a message on its NIC's round-robin list.
    pub(super) fn activate(&mut self, flow: u32, now: Time) {
        let f = &mut self.state.flows[flow as usize];
        if !f.queued && f.life.sent_bytes == 0 {
            self.on_nic.push(flow);
        }
        f.queued = true;
        f.last_progress = now;
        let src = f.msg.src;
        self.nics[src.index()].qps.push_back(flow);
    }
}

/// A flow per message: its queue pair's sender and receiver (go-back-N or selective
/// repeat), its ECMP entropy and its congestion control (DCQCN's reaction point, or HPCC,
/// Swift or TIMELY) at its NIC's line rate.
pub(super) fn flows(
    cfg: &RoceConfig,
    topo: &Topology,
    workload: &Workload,
    reaction: Option<&Reaction>,
) -> Vec<Flow> {
    let selective = cfg.loss_recovery == LossRecovery::SelectiveRepeat;
    workload
        .messages
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let mut sender = RcSender::new(m.size, cfg.mtu, cfg.ack_every);
            let receiver = if selective {
                sender = sender.selective();
                RoceReceiver::selective(sender.packets(), cfg.ack_every)
            } else {
                RoceReceiver::new(
                    sender.packets(),
                    cfg.ack_every,
                    cfg.load_balancing.places_out_of_order(),
                )
            };
            let nic_port = topo.host_port(m.src);
            let line = topo.port(nic_port).rate;
            let cc = (cfg.ack_cc.as_ref())
                .zip(reaction)
                .map(|(cc, r)| Box::new(r.control(cc, line, cfg.mtu)));
            Flow {
                msg: *m,
                udp_sport: driver::udp_source_port(workload.qp[i].key()),
                sender,
                receiver,
                rp: Dcqcn::new(line),
                cc,
                psn_base: 0,
                last_tx: Time::ZERO,
                last_wire: 0,
                queued: false,
                last_cnp: None,
                last_progress: Time::ZERO,
                timer_armed: false,
                sampled_bytes: 0,
                life: Progress::new(m.start, workload.follows[i]),
                nic_port: nic_port.0,
            }
        })
        .collect()
}
