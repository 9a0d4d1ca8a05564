//! The sender's congestion control when ACKs drive it (HPCC, Swift, TIMELY), and the
//! telemetry its packets carry: each data packet's NIC timestamp, the switches it crossed
//! and, with HPCC, every switch egress's INT stamp, echoed by the ACK it triggers. Also the
//! limits on what a sender keeps outstanding: the window of HPCC and Swift, IRN's cap.

use super::{Simulation, CONTROL, DATA};
use crate::driver;
use crate::rocev2::config::{AckCc, LossRecovery, RoceConfig};
use crate::workload::Workload;
use fabricsim_core::pool::Slot;
use fabricsim_core::proto::hpcc::{Hpcc, IntHop, IntStack};
use fabricsim_core::proto::swift::{Swift, SwiftParams};
use fabricsim_core::proto::timely::Timely;
use fabricsim_core::topology::{Routes, Topology};
use fabricsim_core::units::{BitRate, HostId, PortId, Time};
use fabricsim_core::wire::roce;
use std::collections::BTreeSet;

/// What a data packet carries for its sender's congestion control, and its ACK echoes.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Telemetry {
    /// When it left the sender's NIC (the NIC's hardware timestamp).
    pub(super) sent: Time,
    /// Switches it crossed (what Swift scales its target by).
    pub(super) switches: u8,
    /// HPCC only: the switch egresses' stamps.
    pub(super) int: IntStack,
}

/// A connection's ACK-driven congestion control.
#[derive(Clone, Debug)]
pub(super) enum AckControl {
    Hpcc(Hpcc),
    /// Swift's window, and the latest RTT (which paces a window below one packet).
    Swift {
        cc: Swift,
        rtt: Time,
    },
    Timely(Timely),
}

/// What the run's senders share: the network's base RTT and what follows from it.
#[derive(Clone, Debug)]
pub(super) struct Reaction {
    /// The largest base RTT between the hosts the workload connects (the ns-3 model's
    /// `GLOBAL_T 1`): data one way and an ACK back, with no queueing.
    pub(super) base_rtt: Time,
    /// Swift's parameters for this network.
    pub(super) swift: Option<SwiftParams>,
    /// IRN's cap on outstanding packets: the bandwidth-delay product at the NICs' fastest
    /// line rate (selective repeat only).
    pub(super) cap_packets: Option<u32>,
}

impl Reaction {
    /// The base RTT and what follows from it, if the configuration needs them.
    pub(super) fn new(
        cfg: &RoceConfig,
        topo: &Topology,
        routes: &Routes,
        workload: &Workload,
    ) -> Option<Reaction> {
        if !cfg.needs_base_rtt() {
            return None;
        }
        let wire = roce::write_frame_len(cfg.ip, cfg.mtu, false) as u64;
        let pairs: BTreeSet<(u32, u32)> = (workload.messages.iter())
            .filter(|m| m.src != m.dst)
            .map(|m| (m.src.0, m.dst.0))
            .collect();
        let mut base_rtt = Time::ZERO;
        for (src, dst) in pairs {
            let path = driver::static_path(topo, routes, HostId(src), HostId(dst));
            let switches = path.len().saturating_sub(1) as u64;
            let links: Time = (path.iter())
                .map(|l| l.delay * 2 + l.rate.serialization(wire))
                .fold(Time::ZERO, |a, b| a + b);
            base_rtt = base_rtt.max(links + cfg.switch_latency * (2 * switches));
        }
        let line = (0..topo.host_count())
            .map(|h| topo.port(topo.host_port(HostId(h))).rate)
            .max_by_key(|r| r.bps())
            .unwrap_or(BitRate::gbps(400));
        let swift = match &cfg.ack_cc {
            Some(AckCc::Swift { base_target }) => {
                let mut p = SwiftParams::default_for(base_rtt);
                if let Some(t) = base_target {
                    p.base_target = *t;
                    p.fs_range = *t * 5;
                }
                Some(p)
            }
            _ => None,
        };
        let cap_packets = (cfg.loss_recovery == LossRecovery::SelectiveRepeat).then(|| {
            let bdp = line.bps() as u128 * base_rtt.ps() as u128 / 8_000_000_000_000;
            (bdp.div_ceil(cfg.mtu as u128) as u32).clamp(1, u16::MAX as u32)
        });
        Some(Reaction {
            base_rtt,
            swift,
            cap_packets,
        })
    }

    /// A new connection's control on a NIC of `line` rate.
    pub(super) fn control(&self, cc: &AckCc, line: BitRate, mtu: u32) -> AckControl {
        match cc {
            AckCc::Hpcc(_) => AckControl::Hpcc(Hpcc::new(line, self.base_rtt)),
            AckCc::Swift { .. } => {
                let bdp = line.bps() as f64 * self.base_rtt.as_secs_f64() / 8.0;
                AckControl::Swift {
                    cc: Swift::new((bdp / mtu as f64).max(1.0)),
                    rtt: self.base_rtt,
                }
            }
            AckCc::Timely(_) => AckControl::Timely(Timely::new(line)),
        }
    }
}

impl AckControl {
    /// The pacing rate on a NIC of `line` rate, for frames of `wire` bytes.
    pub(super) fn rate(&self, line: BitRate, wire: u32) -> BitRate {
        match self {
            AckControl::Hpcc(h) => h.rate(),
            AckControl::Timely(t) => t.rate(),
            AckControl::Swift { cc, rtt } if cc.cwnd() < 1.0 => {
                // Below one packet, one packet per rtt / cwnd.
                let bits = wire as f64 * 8.0 * cc.cwnd() / rtt.as_secs_f64().max(1e-12);
                BitRate((bits as u64).clamp(1, line.bps()))
            }
            AckControl::Swift { .. } => line,
        }
    }

    /// The most bytes the connection may have outstanding, if it keeps a window.
    pub(super) fn window(&self, mtu: u32) -> Option<u64> {
        match self {
            AckControl::Hpcc(h) => Some(h.window()),
            AckControl::Swift { cc, .. } => Some((cc.cwnd().max(1.0) * mtu as f64) as u64),
            AckControl::Timely(_) => None,
        }
    }
}

impl Simulation {
    /// Whether telemetry rides on packets.
    fn carries_telemetry(&self) -> bool {
        self.cfg.ack_cc.is_some()
    }

    /// The data packet in `slot` leaves its NIC now.
    pub(super) fn stamp_departure(&mut self, slot: Slot, now: Time) {
        if self.carries_telemetry() {
            *self.telemetry_at(slot) = Telemetry {
                sent: now,
                ..Telemetry::default()
            };
        }
    }

    /// The data packet in `slot` leaves switch egress `port` now: HPCC's INT stamp (time,
    /// bytes the port has sent with this packet, bytes still queued, the link's rate).
    pub(super) fn stamp_hop(&mut self, port: PortId, slot: Slot, now: Time) {
        if !self.carries_telemetry() {
            return;
        }
        let hpcc = matches!(self.cfg.ack_cc, Some(AckCc::Hpcc(_)));
        if !hpcc {
            let t = self.telemetry_at(slot);
            t.switches = t.switches.saturating_add(1);
            return;
        }
        let p = &self.ports[port.index()];
        let hop = IntHop {
            time: now,
            tx_bytes: p.tx_bytes,
            qlen: self.waiting(port, DATA, now) + self.waiting(port, CONTROL, now),
            rate: p.link.rate,
        };
        let t = self.telemetry_at(slot);
        t.switches = t.switches.saturating_add(1);
        t.int.push(hop);
    }

    /// Bytes of `class` waiting at egress `port` as the switch counts its queue: packets
    /// ready to leave, not those still crossing the switch (its latency), whose bytes
    /// would read as a standing queue of latency x rate. Ready times rise along each FIFO,
    /// so the walk stops at the first packet not ready (HPCC keeps these queues short).
    pub(super) fn waiting(&self, port: PortId, class: usize, now: Time) -> u64 {
        (self
            .frames
            .iter_timed(&self.ports[port.index()].queues[class]))
        .take_while(|(ready, _)| *ready <= now)
        .map(|(_, f)| f.packet().wire as u64)
        .sum()
    }

    /// The telemetry of the packet in `slot` (grown with the pool).
    pub(super) fn telemetry_at(&mut self, slot: Slot) -> &mut Telemetry {
        let i = slot.index();
        if i >= self.telemetry.len() {
            self.telemetry.resize(i + 1, Telemetry::default());
        }
        &mut self.telemetry[i]
    }

    /// What the packet in `slot` carried, before its slot is freed.
    pub(super) fn telemetry_of(&self, slot: Slot) -> Option<Telemetry> {
        self.carries_telemetry().then(|| {
            self.telemetry
                .get(slot.index())
                .copied()
                .unwrap_or_default()
        })
    }

    /// An ACK of message `fid` echoed `t`; `newly` packets were acknowledged by it. The
    /// connection's current message reacts, in the connection's packet numbering.
    pub(super) fn on_feedback(&mut self, fid: u32, t: &Telemetry, newly: u32, now: Time) {
        let Some(cc) = &self.cfg.ack_cc else { return };
        let (acked, base) = {
            let f = &self.state.flows[fid as usize];
            (f.sender.acked(), f.psn_base)
        };
        let cur = driver::current_on_connection(&self.state.flows, fid);
        let f = &mut self.state.flows[cur as usize];
        let sent = f.psn_base + f.sender.sent();
        let rtt = now.saturating_sub(t.sent);
        let Some(control) = f.cc.as_deref_mut() else {
            return;
        };
        match (control, cc) {
            (AckControl::Hpcc(h), AckCc::Hpcc(p)) => {
                h.on_ack(base + acked, sent, &t.int, p);
            }
            (AckControl::Timely(tm), AckCc::Timely(p)) => {
                tm.on_ack(rtt, base + acked, sent, p);
            }
            (AckControl::Swift { cc, rtt: last }, AckCc::Swift { .. }) => {
                let p = self.reaction.as_ref().and_then(|r| r.swift.as_ref());
                let p = p.expect("Swift's parameters are set with Swift");
                cc.on_ack(now, rtt, rtt, t.switches as u32, newly, p);
                *last = rtt;
            }
            _ => unreachable!("a connection's control is the configured one"),
        }
        let src = f.msg.src;
        self.try_transmit(self.topo.host_port(src));
    }

    /// A retransmission timeout: Swift collapses its window.
    pub(super) fn on_timeout_feedback(&mut self, fid: u32, now: Time) {
        let p = self.reaction.as_ref().and_then(|r| r.swift.as_ref());
        if let (Some(AckControl::Swift { cc, .. }), Some(p)) =
            (self.state.flows[fid as usize].cc.as_deref_mut(), p)
        {
            cc.on_timeout(now, p);
        }
    }

    /// Whether `flow` may send its next packet: a new packet only while its window (HPCC,
    /// Swift) and IRN's cap allow; a hole resent always.
    pub(super) fn may_send(&self, flow: u32) -> bool {
        let f = &self.state.flows[flow as usize];
        if !f.sender.next_is_new() {
            return true;
        }
        let outstanding = f.sender.outstanding();
        let cap = self.reaction.as_ref().and_then(|r| r.cap_packets);
        if cap.is_some_and(|c| outstanding >= c) {
            return false;
        }
        match f.cc.as_deref().and_then(|c| c.window(self.cfg.mtu)) {
            Some(w) => (outstanding as u64) * (self.cfg.mtu as u64) < w,
            None => true,
        }
    }
}
