//! What flow level takes from a fabric's configuration: its packets' framing, latencies,
//! routing, and RoCEv2's measured sharing correction.

use fabricsim_core::units::Time;
use fabricsim_core::wire::{ib, roce};

/// Which fabric's packets the flows stand for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlowWire {
    Infiniband,
    Rocev2(roce::IpVersion),
}

/// How a flow's path is chosen at each switch (a compact collective edge of many pieces
/// under ECMP spreads as on a trunk: each piece is its own message with its own hash).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlowRouting {
    /// The d-mod-k static route.
    Static,
    /// InfiniBand adaptive routing, which the packet model does per packet, as perfect
    /// balance: at each hop a flow crosses the trunk of every candidate port of every
    /// switch its packets may reach there, shared as one link of their summed rate.
    Adaptive,
    /// RoCEv2's ECMP hash of the flow's 5-tuple, seeded as the packet model seeds it.
    Ecmp { seed: u64 },
}

/// What flow level takes from the fabric's configuration.
#[derive(Clone, Debug)]
pub struct FlowConfig {
    pub wire: FlowWire,
    pub mtu: u32,
    pub tx_latency: Time,
    pub rx_latency: Time,
    pub switch_latency: Time,
    pub routing: FlowRouting,
    /// The share of its line rate a port keeps when N flows cross it, as `(N, share)`
    /// points in increasing N (linear in log2 N between them, the last point's share
    /// beyond it); empty: the whole line rate. The experiment layer measures it at packet
    /// level (RoCEv2's congestion control cutting rates below the fair share).
    pub sharing: Vec<(u32, f64)>,
}

impl FlowConfig {
    /// The share of the line rate a port crossed by `n` flows keeps.
    pub(super) fn sharing_share(&self, n: usize) -> f64 {
        let n = n as f64;
        let Some(&(first, _)) = self.sharing.first() else {
            return 1.0;
        };
        if n < first as f64 {
            return 1.0;
        }
        for w in self.sharing.windows(2) {
            let ((a, ea), (b, eb)) = (w[0], w[1]);
            if n <= b as f64 {
                let x = (n.log2() - (a as f64).log2()) / ((b as f64).log2() - (a as f64).log2());
                return ea + (eb - ea) * x;
            }
        }
        self.sharing.last().expect("not empty").1
    }
}

impl FlowConfig {
    /// A packet's link bytes.
    pub(super) fn frame_len(&self, payload: u32, first: bool) -> u64 {
        match self.wire {
            FlowWire::Infiniband => ib::write_packet_len(payload, first) as u64,
            FlowWire::Rocev2(ip) => roce::write_frame_len(ip, payload, first) as u64,
        }
    }

    /// A message's link bytes: its packets, each with its headers.
    pub fn wire_bytes(&self, size: u64) -> u64 {
        let mtu = self.mtu as u64;
        let packets = size.div_ceil(mtu).max(1);
        let last = size - (packets - 1) * mtu;
        self.frame_len(if packets == 1 { last as u32 } else { self.mtu }, true)
            + self.frame_len(self.mtu, false) * packets.saturating_sub(2)
            + if packets > 1 {
                self.frame_len(last as u32, false)
            } else {
                0
            }
    }
}
