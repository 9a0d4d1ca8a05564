//! The HCA's sending side: ACKs first, then queue pairs round-robin per VL, subject to VL arbitration, credits and congestion control's injection gap.

use super::super::config::IbConfig;
use super::super::sharp::SharpGroup;
use super::{Frame, Kind, Packet, Simulation};
use crate::driver::BuildError;
use crate::driver::{self, MessageFabric, Progress};
use crate::workload::Message;
use crate::workload::Workload;
use fabricsim_core::proto::ibcc::CcState;
use fabricsim_core::proto::rc::{RcReceiver, RcSender, Segment};
use fabricsim_core::topology::Topology;
use fabricsim_core::units::{HostId, PortId, Time};
use fabricsim_core::wire::ib::{self};
use std::collections::VecDeque;

/// Per-HCA send queues: ACKs first, then QPs round-robin, per VL.
#[derive(Clone, Debug, Default)]
pub(super) struct Hca {
    pub(super) acks: Vec<VecDeque<Packet>>,
    pub(super) qps: Vec<VecDeque<u32>>,
}

impl Hca {
    /// An HCA with nothing to send on any of its `vls` virtual lanes.
    pub(super) fn new(vls: usize) -> Hca {
        Hca {
            acks: vec![VecDeque::new(); vls],
            qps: vec![VecDeque::new(); vls],
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Flow {
    pub(super) msg: Message,
    pub(super) vl: u8,
    pub(super) sender: RcSender,
    pub(super) receiver: RcReceiver,
    pub(super) cc: CcState,
    pub(super) next_allowed: Time,
    /// The SHARP group this rank's buffer feeds.
    pub(super) sharp: Option<u32>,
    /// Life-cycle state shared with the other fabric.
    pub(super) life: Progress,
    /// The sender's HCA port: where its posts are handled.
    pub(super) nic_port: u32,
}

driver::tracked_by_fields!(Flow);

impl Simulation {
    /// Sends an HCA's next packet: a waiting ACK first, else the next QP's segment in
    /// round-robin order, subject to VL arbitration, credits and injection gaps; or waits.
    pub(super) fn serve_hca(&mut self, port: PortId, host: HostId, now: Time) {
        let hca = &self.hcas[host.index()];
        let p = &mut self.ports[port.index()];
        let flows = &self.state.flows;
        let mut blocked = false;
        let mut wake: Option<Time> = None;
        let tx_credit = &self.tx_credit[port.index() * self.cfg.virtual_lanes as usize..];
        // Position in the VL's QP list of the QP to serve, when no ACK is waiting.
        let mut chosen = 0;
        let vl = self.arbitration.pick(&mut p.arbiter, |vl| {
            let credit = &tx_credit[vl as usize];
            if let Some(ack) = hca.acks[vl as usize].front() {
                if credit.can_send(ack.blocks()) {
                    return true;
                }
                blocked = true;
                return false;
            }
            for (pos, &f) in hca.qps[vl as usize].iter().enumerate() {
                let flow = &flows[f as usize];
                if flow.next_allowed > now {
                    wake = Some(wake.map_or(flow.next_allowed, |w: Time| w.min(flow.next_allowed)));
                    continue;
                }
                let seg = flow.sender.peek().expect("queued QPs have data");
                if credit.can_send(ib::credit_blocks(ib::write_packet_len(
                    seg.payload,
                    seg.index == 0,
                ))) {
                    chosen = pos;
                    return true;
                }
                blocked = true;
                return false;
            }
            false
        });
        let Some(vl) = vl else {
            return self.wait(port, blocked, wake, now);
        };
        let hca = &mut self.hcas[host.index()];
        let (packet, handoff) = match hca.acks[vl as usize].pop_front() {
            Some(ack) => (ack, None),
            None => self.next_data_packet(port, host, vl, chosen, now),
        };
        if let Some((prev, next)) = handoff {
            self.inherit_connection(prev, next);
            let nvl = self.state.flows[next as usize].vl as usize;
            self.hcas[host.index()].qps[nvl].push_back(next);
        }
        self.ports[port.index()].arbiter.charge(packet.blocks());
        self.record(packet, now);
        self.ports[port.index()].releasing = None;
        let slot = self.frames.alloc(Frame::Packet(packet));
        self.transmit(port, slot, packet.wire);
    }

    /// The next segment of the QP at `chosen` in `host`'s list for `vl`, which goes to the
    /// back of the list if it has more; paced by the line and congestion control's
    /// injection gap. Also the message that follows on the connection, if this was the
    /// last segment of its predecessor.
    fn next_data_packet(
        &mut self,
        port: PortId,
        host: HostId,
        vl: u8,
        chosen: usize,
        now: Time,
    ) -> (Packet, Option<(u32, u32)>) {
        let qps = &mut self.hcas[host.index()].qps[vl as usize];
        let mut handoff = None;
        let f = qps.remove(chosen).expect("the arbiter saw this QP");
        let flow = &mut self.state.flows[f as usize];
        let seg: Segment = flow.sender.next_segment().expect("queued QPs have data");
        if flow.sender.has_more() {
            qps.push_back(f);
        } else if !flow.life.injected {
            flow.life.injected = true;
            handoff = flow.life.successor.take().map(|j| (f, j));
        }
        let wire = ib::write_packet_len(seg.payload, seg.index == 0) as u32;
        let gap = match &self.cfg.congestion_control {
            Some(cc) => flow.cc.injection_delay(now, &cc.source),
            None => Time::ZERO,
        };
        flow.next_allowed = now + self.ports[port.index()].serialization(wire) + gap;
        // SHARP buffers count as sent and delivered together, when the result is in.
        if flow.sharp.is_none() {
            flow.life.sent_bytes += seg.payload as u64;
        }
        let (kind, dst) = match flow.sharp {
            Some(g) => (Kind::SharpUp, g),
            None => (Kind::Data, flow.msg.dst.0),
        };
        self.count_in_flight(1);
        let packet = Packet {
            flow: f,
            index: seg.index,
            payload: seg.payload,
            wire,
            dst,
            kind,
            opcode: seg.opcode,
            vl,
            fecn: false,
            ack_req: seg.ack_req,
            input: 0,
        };
        (packet, handoff)
    }
}

/// A flow per message: its queue pair's sender and receiver on the VL its service
/// level maps to, and the SHARP group it feeds, if any.
pub(super) fn flows(cfg: &IbConfig, topo: &Topology, workload: &Workload) -> Vec<Flow> {
    let messages = &workload.messages;
    messages
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let sender = RcSender::new(m.size, cfg.mtu, cfg.ack_every);
            let receiver = RcReceiver::new(sender.packets(), cfg.ack_every);
            Flow {
                msg: *m,
                vl: cfg.sl_to_vl[m.sl as usize % 16],
                sender,
                receiver,
                cc: CcState::default(),
                next_allowed: Time::ZERO,
                sharp: workload
                    .sharp_groups
                    .iter()
                    .position(|r| r.contains(&(i as u32)))
                    .map(|g| g as u32),
                life: Progress::new(m.start, workload.follows[i]),
                nic_port: topo.host_port(m.src).0,
            }
        })
        .collect()
}

/// Each SHARP group's aggregation tree over the switches, for its ranks' chunks.
pub(super) fn sharp_groups(
    cfg: &IbConfig,
    topo: &Topology,
    workload: &Workload,
) -> Result<Vec<SharpGroup>, BuildError> {
    let messages = &workload.messages;
    workload
        .sharp_groups
        .iter()
        .map(|r| {
            let ranks: Vec<HostId> = messages[r.start as usize..r.end as usize]
                .iter()
                .map(|m| m.src)
                .collect();
            let chunks = RcSender::new(messages[r.start as usize].size, cfg.mtu, 1).packets();
            SharpGroup::build(topo, &ranks, r.clone(), chunks)
        })
        .collect()
}
