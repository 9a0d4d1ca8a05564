//! HPCC's sender (Li et al., "HPCC: High Precision Congestion Control", SIGCOMM 2019), as
//! the authors' ns-3 model runs it by default (its `run.py --cc hp`: one rate for the whole
//! path, fast reaction on every ACK, `MI_THRESH 0`, `U_TARGET 0.95`, a window of the
//! network's bandwidth-delay product scaled by the rate).
//!
//! Every switch egress stamps an [`IntHop`] on each data packet as it leaves (time, bytes
//! the port has sent, bytes queued behind it, the link's rate); the receiver echoes the
//! stack in its ACK, and the sender estimates each hop's utilisation from two successive
//! stamps of the same hop:
//! u = txRate / B + min(qlen, previous qlen) / (B x T), T the base RTT. The most utilised
//! hop sets the rate: R = Rc / (U / eta) + R_AI once U >= eta (or after `max_stage`
//! additive steps), else Rc + R_AI. A full update (Rc moves) happens once per RTT, when an
//! ACK covers a packet sent after the last update; other ACKs react from Rc without moving it.

use crate::units::{BitRate, Time};
use serde::Serialize;

/// The most hops an INT stack holds (the ns-3 model's `IntHeader::maxHop`).
pub const MAX_HOPS: usize = 5;

/// Bytes the INT header adds to every data packet and ACK on the wire: the ns-3 model's
/// fixed header (a 2-byte hop count and 5 hops of 8 bytes), present whatever the path.
pub const INT_HEADER_BYTES: u32 = 42;

/// One switch egress's stamp.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IntHop {
    /// When the packet left the egress.
    pub time: Time,
    /// Bytes the egress had sent, this packet included.
    pub tx_bytes: u64,
    /// Bytes queued at the egress behind the packet.
    pub qlen: u64,
    /// The egress link's rate.
    pub rate: BitRate,
}

/// The stamps a packet collected, in path order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IntStack {
    hops: [IntHop; MAX_HOPS],
    len: u8,
}

impl IntStack {
    /// Adds a hop's stamp; a packet past [`MAX_HOPS`] switches carries no more (as in the
    /// ns-3 model).
    pub fn push(&mut self, hop: IntHop) {
        if (self.len as usize) < MAX_HOPS {
            self.hops[self.len as usize] = hop;
            self.len += 1;
        }
    }

    pub fn hops(&self) -> &[IntHop] {
        &self.hops[..self.len as usize]
    }
}

/// HPCC's parameters.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HpccParams {
    /// Target utilisation eta (ns-3 `U_TARGET`, run.py's default 95 %).
    pub eta: f64,
    /// Additive steps before a multiplicative one even below eta (ns-3 `MI_THRESH`,
    /// run.py's default 0: every update is multiplicative).
    pub max_stage: u32,
    /// Additive increase R_AI (run.py: 10 Mb/s x line rate / 25 Gb/s).
    pub rate_ai: BitRate,
    /// The rate never falls below this (ns-3 `MIN_RATE`, 1 Gb/s in run.py's configuration).
    pub min_rate: BitRate,
}

impl HpccParams {
    /// The ns-3 model's defaults for a NIC of `line` rate.
    pub fn ns3(line: BitRate) -> Self {
        HpccParams {
            eta: 0.95,
            max_stage: 0,
            rate_ai: BitRate((10_000_000u128 * line.bps() as u128 / 25_000_000_000) as u64),
            min_rate: BitRate::gbps(1),
        }
    }
}

/// One connection's HPCC state.
#[derive(Clone, Debug)]
pub struct Hpcc {
    line: BitRate,
    base_rtt: Time,
    /// The rate the sender paces at.
    rate: BitRate,
    /// The reference rate Rc, moved by full updates.
    reference: BitRate,
    stage: u32,
    /// The smoothed utilisation of the most utilised hop.
    utilisation: f64,
    /// A full update waits for an ACK covering packets sent after this one (None before
    /// the first ACK).
    update_after: Option<u32>,
    last: IntStack,
}

impl Hpcc {
    /// A connection starting at line rate, with `base_rtt` the network's base RTT (the
    /// ns-3 model's `GLOBAL_T 1`: the largest over host pairs).
    pub fn new(line: BitRate, base_rtt: Time) -> Self {
        Hpcc {
            line,
            base_rtt: base_rtt.max(Time(1)),
            rate: line,
            reference: line,
            stage: 0,
            utilisation: 0.0,
            update_after: None,
            last: IntStack::default(),
        }
    }

    pub fn rate(&self) -> BitRate {
        self.rate
    }

    /// The window in bytes: the bandwidth-delay product at line rate, scaled by the rate
    /// (ns-3 `VAR_WIN 1`), at least one byte.
    pub fn window(&self) -> u64 {
        let bdp = self.line.bps() as u128 * self.base_rtt.ps() as u128 / 8_000_000_000_000;
        ((bdp * self.rate.bps() as u128 / self.line.bps().max(1) as u128) as u64).max(1)
    }

    /// An ACK covering packets below `acked` arrived with `int`; `sent` is how many
    /// packets the sender has injected. Returns whether the rate changed.
    pub fn on_ack(&mut self, acked: u32, sent: u32, int: &IntStack, p: &HpccParams) -> bool {
        let Some(after) = self.update_after else {
            self.update_after = Some(sent);
            self.last = *int;
            return false;
        };
        let full = acked > after;
        let before = self.rate;
        let t = self.base_rtt.ps() as f64;
        let mut most: Option<(f64, u64)> = None;
        for (i, hop) in int.hops().iter().enumerate() {
            let Some(prev) = self.last.hops().get(i) else {
                continue;
            };
            if hop.time <= prev.time || hop.rate.bps() == 0 {
                continue;
            }
            let tau = (hop.time - prev.time).ps();
            let b = hop.rate.bps() as f64;
            let tx_rate =
                hop.tx_bytes.saturating_sub(prev.tx_bytes) as f64 * 8.0 * 1e12 / tau as f64;
            let queue = hop.qlen.min(prev.qlen) as f64 * 8.0 * 1e12 / (b * t);
            let u = tx_rate / b + queue;
            if most.is_none_or(|(m, _)| u > m) {
                most = Some((u, tau));
            }
        }
        self.last = *int;
        if let Some((u, tau)) = most {
            let dt = (tau as f64).min(t);
            self.utilisation = (self.utilisation * (t - dt) + u * dt) / t;
            let c = self.utilisation / p.eta;
            let (new, stage) = if c >= 1.0 || self.stage >= p.max_stage {
                (self.reference.bps() as f64 / c + p.rate_ai.bps() as f64, 0)
            } else {
                (
                    self.reference.bps() as f64 + p.rate_ai.bps() as f64,
                    self.stage + 1,
                )
            };
            let new = BitRate(new.clamp(p.min_rate.bps() as f64, self.line.bps() as f64) as u64);
            self.rate = new;
            if full {
                self.reference = new;
                self.stage = stage;
            }
        }
        if full {
            self.update_after = Some(sent.max(after));
        }
        self.rate != before
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: BitRate = BitRate::gbps(100);

    /// A stack of one hop that sent `bytes` more than `prev` over `dt` with `qlen` queued.
    fn stamp(prev: &IntHop, dt_ns: u64, bytes: u64, qlen: u64) -> IntHop {
        IntHop {
            time: prev.time + Time::from_ns(dt_ns),
            tx_bytes: prev.tx_bytes + bytes,
            qlen,
            rate: LINE,
        }
    }

    fn stack(h: IntHop) -> IntStack {
        let mut s = IntStack::default();
        s.push(h);
        s
    }

    #[test]
    fn the_window_is_the_bdp_scaled_by_the_rate() {
        let h = Hpcc::new(LINE, Time::from_us(8));
        assert_eq!(h.window(), 100_000);
    }

    #[test]
    fn a_saturated_hop_with_a_queue_cuts_to_eta_over_utilisation() {
        let p = HpccParams::ns3(LINE);
        let t = Time::from_us(8);
        let mut h = Hpcc::new(LINE, t);
        let h0 = IntHop {
            time: Time::from_us(1),
            tx_bytes: 0,
            qlen: 50_000,
            rate: LINE,
        };
        assert!(
            !h.on_ack(1, 10, &stack(h0), &p),
            "the first ACK only records"
        );
        // A full base RTT at line rate with 50 KB queued: u = 1 + 50 KB / BDP = 1.5.
        let h1 = stamp(&h0, 8_000, 100_000, 50_000);
        assert!(h.on_ack(11, 20, &stack(h1), &p));
        let expected = 100e9 / (1.5 / 0.95) + p.rate_ai.bps() as f64;
        assert!(
            (h.rate().bps() as f64 - expected).abs() < 1e3,
            "{:?}",
            h.rate()
        );
    }

    #[test]
    fn fast_reaction_moves_the_rate_but_not_the_reference() {
        let p = HpccParams::ns3(LINE);
        let mut h = Hpcc::new(LINE, Time::from_us(8));
        let h0 = IntHop {
            time: Time::from_us(1),
            tx_bytes: 0,
            qlen: 100_000,
            rate: LINE,
        };
        h.on_ack(1, 10, &stack(h0), &p);
        // Not past packet 10: a fast reaction from Rc = line rate.
        let h1 = stamp(&h0, 4_000, 50_000, 100_000);
        h.on_ack(5, 12, &stack(h1), &p);
        let fast = h.rate();
        assert!(fast < LINE);
        // Again within the RTT: still from Rc, so no compounding of cuts.
        let h2 = stamp(&h1, 4_000, 50_000, 100_000);
        h.on_ack(9, 14, &stack(h2), &p);
        assert!(h.rate() <= fast, "utilisation smoothed upward cuts no less");
        assert!(
            h.rate().bps() as f64 > fast.bps() as f64 * 0.5,
            "cut from Rc, not from the cut rate"
        );
    }

    #[test]
    fn an_idle_path_climbs_back_to_line_rate() {
        let p = HpccParams::ns3(LINE);
        let mut h = Hpcc::new(LINE, Time::from_us(8));
        let mut hop = IntHop {
            time: Time::from_us(1),
            tx_bytes: 0,
            qlen: 400_000,
            rate: LINE,
        };
        h.on_ack(1, 1, &stack(hop), &p);
        let mut acked = 2;
        for _ in 0..3 {
            hop = stamp(&hop, 8_000, 100_000, 400_000);
            h.on_ack(acked, acked + 1, &stack(hop), &p);
            acked += 2;
        }
        let low = h.rate();
        assert!(low.bps() < LINE.bps() / 2, "{low:?}");
        for _ in 0..200 {
            hop = stamp(&hop, 8_000, 10_000, 0);
            h.on_ack(acked, acked + 1, &stack(hop), &p);
            acked += 2;
        }
        assert_eq!(h.rate(), LINE);
    }
}
