//! What a run measured: the conservation audit, ideal completion times and the report.

use super::{Frame, Kind, Packet, Simulation, NEVER};
use crate::driver::{self};
use crate::report::{PortResult, RunReport};
use crate::workload::Message;
use fabricsim_core::units::{PortId, Time};
use fabricsim_core::wire::ib::{self};

/// Conservation and buffer checks at one instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Audit {
    pub sent_payload: u64,
    pub delivered_payload: u64,
    pub in_flight_payload: u64,
    pub packets_in_flight: u64,
    /// Whether any input buffer ever held more than its size.
    pub buffer_overflows: u64,
    /// Frames holding a pool slot but found on no link and in no queue (a leak).
    pub lost_frames: u64,
}

impl Simulation {
    /// Payload bytes a flow's receiver holds so far.
    pub fn flow_delivered(&self, flow: usize) -> u64 {
        self.state.flows[flow].life.delivered_bytes
    }

    /// Conservation and buffer checks, computed by walking every queue and link (of a run
    /// on one thread: a merged split run keeps its counters, not its frames).
    pub fn audit(&self) -> Audit {
        let mut in_flight = 0u64;
        let mut packets = 0u64;
        let mut queued_frames = 0u64;
        let mut count = |pkt: &Packet| {
            if pkt.kind == Kind::Data {
                in_flight += pkt.payload as u64;
                packets += 1;
            }
        };
        for p in &self.ports {
            for f in p.wire.frames(&self.frames) {
                queued_frames += 1;
                if let Frame::Packet(pkt) = f {
                    count(pkt);
                }
            }
        }
        for pkt in self.egress.iter().flat_map(|e| e.packets(&self.frames)) {
            queued_frames += 1;
            count(pkt);
        }
        let (sent_payload, delivered_payload) = self.state.payload_totals();
        Audit {
            sent_payload,
            delivered_payload,
            in_flight_payload: in_flight,
            packets_in_flight: packets,
            buffer_overflows: self.buffer_overflows(),
            lost_frames: self.frames.live() as u64 - queued_frames,
        }
    }

    /// Packets that found their input buffer full, plus the buffers that ever held more
    /// than their size.
    pub(super) fn buffer_overflows(&self) -> u64 {
        let over = self.rx_credit.iter().filter(|c| c.peak() > c.capacity());
        self.buffer_overflows + over.count() as u64
    }

    /// Ideal completion of a message on an empty fabric: HCA latencies, propagation over
    /// every link, a switch latency per switch, the whole message serialised once at the
    /// host rate, and the last packet re-serialised at every store-and-forward switch.
    pub(super) fn ideal_fct(&self, m: &Message) -> Time {
        if let Some(t) = self.state.lifecycle.ideal_local(&self.topo, m) {
            return t;
        }
        if m.src == m.dst {
            // SHARP: up the tree and down again, the buffer serialised once.
            let depth = self.sharp.iter().map(|g| g.depth).max().unwrap_or(1) as u64;
            let rate = self.topo.port(self.topo.host_port(m.src)).rate;
            let packet = ib::write_packet_len(self.cfg.mtu, false) as u64;
            let packets = m.size.div_ceil(self.cfg.mtu as u64).max(1);
            return self.cfg.hca_tx_latency
                + self.cfg.hca_rx_latency
                + rate.serialization(packets * packet)
                + (self.topo.port(self.topo.host_port(m.src)).delay
                    + self.cfg.switch_latency
                    + rate.serialization(packet))
                    * (2 * depth);
        }
        driver::ideal_fct(
            &self.topo,
            &self.routes,
            m,
            self.cfg.mtu,
            self.cfg.hca_tx_latency + self.cfg.hca_rx_latency,
            self.cfg.switch_latency,
            |payload, first| ib::write_packet_len(payload, first) as u64,
        )
    }

    /// Everything measured, for the experiment layer.
    pub fn report(&self) -> RunReport {
        let ports = self
            .ports
            .iter()
            .enumerate()
            .map(|(i, p)| PortResult {
                tx_bytes: p.tx_bytes,
                tx_packets: p.tx_packets,
                peak_queue_bytes: self.counters[i].peak_queue,
                peak_input_bytes: self.rx_credit[i * self.vls()..(i + 1) * self.vls()]
                    .iter()
                    .map(|c| c.peak() as u64 * ib::CREDIT_BLOCK as u64)
                    .max()
                    .unwrap_or(0),
                credit_stall: self.counters[i].stall_total
                    + if p.stall_since == NEVER {
                        Time::ZERO
                    } else {
                        self.state.end_time() - p.stall_since
                    },
                credit_packets: self.counters[i].credit_packets,
                ecn_marks: self.counters[i].fecn_marks,
                ..PortResult::new(&self.topo, PortId(i as u32))
            })
            .collect();
        RunReport {
            congestion_marks: self.fecn_marks,
            congestion_notifications: self.becns,
            duplicates: self.duplicates,
            buffer_overflows: self.buffer_overflows(),
            peak_packets_in_flight: self.in_flight.peak,
            ..self.state.report(ports, |m| self.ideal_fct(m))
        }
    }
}
