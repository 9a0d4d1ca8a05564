//! What a run measured: the conservation audit, ideal completion times and the report.

use super::{Frame, Kind, Packet, Simulation};
use crate::driver::{self};
use crate::report::{PortResult, RunReport};
use crate::workload::Message;
use fabricsim_core::units::{PortId, Time};
use fabricsim_core::wire::roce::{self};

/// Conservation checks at one instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Audit {
    /// Payload bytes put on the wire by senders, retransmissions included.
    pub sent_payload: u64,
    /// Payload bytes placed by receivers (each byte once).
    pub delivered_payload: u64,
    /// Payload bytes dropped by switches or discarded by receivers (out of sequence,
    /// duplicates).
    pub lost_payload: u64,
    pub in_flight_payload: u64,
    /// Frames holding a pool slot but found on no link and in no queue (a leak).
    pub lost_frames: u64,
}

impl Simulation {
    /// Conservation at this instant, by walking every queue and link (of a run on one
    /// thread: a merged split run keeps its counters, not its frames).
    pub fn audit(&self) -> Audit {
        let mut in_flight = 0u64;
        let mut queued_frames = 0u64;
        let mut count = |pkt: &Packet| {
            if pkt.kind == Kind::Data {
                in_flight += pkt.payload as u64;
            }
        };
        for p in &self.ports {
            for f in p.wire.frames(&self.frames) {
                queued_frames += 1;
                if let Frame::Packet(pkt) = f {
                    count(pkt);
                }
            }
            for q in &p.queues {
                for f in self.frames.iter(q) {
                    queued_frames += 1;
                    count(f.packet());
                }
            }
        }
        let (sent_payload, delivered_payload) = self.state.payload_totals();
        Audit {
            sent_payload,
            delivered_payload,
            lost_payload: self.lost_payload,
            in_flight_payload: in_flight,
            lost_frames: self.frames.live() as u64 - queued_frames,
        }
    }

    /// Ideal completion of a message on an empty fabric (as for InfiniBand: NIC
    /// latencies, propagation, a switch latency and a store-and-forward re-serialisation of
    /// the last packet per switch, and the whole message serialised once).
    pub(super) fn ideal_fct(&self, m: &Message) -> Time {
        if let Some(t) = self.state.lifecycle.ideal_local(&self.topo, m) {
            return t;
        }
        let ip = self.cfg.ip;
        driver::ideal_fct(
            &self.topo,
            &self.routes,
            m,
            self.cfg.mtu,
            self.cfg.nic_tx_latency + self.cfg.nic_rx_latency,
            self.cfg.switch_latency,
            |payload, first| roce::write_frame_len(ip, payload, first) as u64,
        )
    }

    /// Everything measured, for the experiment layer.
    pub fn report(&self) -> RunReport {
        let now = self.state.end_time();
        let ports = self
            .ports
            .iter()
            .enumerate()
            .map(|(i, p)| PortResult {
                tx_bytes: p.tx_bytes,
                tx_packets: p.tx_packets,
                peak_queue_bytes: p.peak_queue,
                peak_input_bytes: p.peak_ingress,
                pause_frames: p.pause_frames,
                paused: p.paused_total
                    + p.paused_since
                        .map_or(Time::ZERO, |s| p.paused_until.min(now).saturating_sub(s)),
                drops: p.drops,
                ecn_marks: p.ecn_marks,
                ..PortResult::new(&self.topo, PortId(i as u32))
            })
            .collect();
        RunReport {
            drops: self.drops,
            retransmitted_packets: self.retransmitted,
            congestion_marks: self.ports.iter().map(|p| p.ecn_marks).sum(),
            congestion_notifications: self.cnps,
            peak_packets_in_flight: self.in_flight.peak,
            peak_reorder_packets: (self.state.flows.iter())
                .map(|f| f.receiver.peak_ahead() as u64)
                .max()
                .unwrap_or(0),
            pfc_pause_frames: self.ports.iter().map(|p| p.pause_frames).sum(),
            naks: self.naks,
            timeouts: self.timeouts,
            watchdog_trips: self.watchdog_trips,
            pfc_cycles: self.pfc_cycles.clone(),
            ..self.state.report(ports, |m| self.ideal_fct(m))
        }
    }
}
