//! Swift's sender (Kumar et al., "Swift: Delay is Simple and Effective for Congestion
//! Control in the Datacenter", SIGCOMM 2020, Algorithm 1): a congestion window in packets,
//! additive increase while the measured delay is under its target, a multiplicative
//! decrease proportional to the excess at most once per RTT, and pacing when the window
//! falls below one packet.
//!
//! The target delay grows with the path's hops and shrinks with the window (flow-based
//! scaling, so that small windows, which contend with many others, tolerate more delay):
//! target = base + hops x per_hop + clamp(alpha / sqrt(cwnd) + beta, 0, fs_range), with alpha
//! and beta chosen so that the scaling is fs_range at `fs_min_cwnd` and 0 at `fs_max_cwnd`.

use crate::units::Time;
use serde::Serialize;

/// Swift's parameters. The algorithm and its parameter names are the paper's; the values
/// its deployment uses are not published in full, so each default says where it comes from.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SwiftParams {
    /// The fabric's base target delay (unverified: a few microseconds above the base RTT of
    /// a two- or three-tier 400G fabric; the paper's is tuned to its fabric).
    pub base_target: Time,
    /// Added per switch hop on the path (unverified; the paper scales by hops, value unstated).
    pub per_hop: Time,
    /// The most flow-based scaling adds (unverified: the paper's range is a few base targets;
    /// taken as 5 x `base_target`).
    pub fs_range: Time,
    /// Windows (packets) at which flow scaling is full and zero (unverified: 0.1 and 100).
    pub fs_min_cwnd: f64,
    pub fs_max_cwnd: f64,
    /// Additive increase, packets per RTT (1, the paper's Algorithm 1 as commonly run).
    pub ai: f64,
    /// Multiplicative decrease gain (0.8) and its largest single cut (0.5), as commonly
    /// reproduced from the paper (unverified against its text).
    pub beta: f64,
    pub max_mdf: f64,
    /// The window's floor and ceiling in packets (unverified: 0.001, and the ceiling
    /// given by the caller as the path's bandwidth-delay product).
    pub min_cwnd: f64,
}

impl SwiftParams {
    /// Defaults for a fabric whose largest base RTT is `base_rtt`.
    pub fn default_for(base_rtt: Time) -> Self {
        let base_target = base_rtt + Time::from_us(2);
        SwiftParams {
            base_target,
            per_hop: Time::from_ns(500),
            fs_range: base_target * 5,
            fs_min_cwnd: 0.1,
            fs_max_cwnd: 100.0,
            ai: 1.0,
            beta: 0.8,
            max_mdf: 0.5,
            min_cwnd: 0.001,
        }
    }

    /// The target delay for a window of `cwnd` packets on a path of `hops` switches.
    pub fn target(&self, cwnd: f64, hops: u32) -> Time {
        let range = self.fs_range.ps() as f64;
        let alpha = range / (1.0 / self.fs_min_cwnd.sqrt() - 1.0 / self.fs_max_cwnd.sqrt());
        let beta = -alpha / self.fs_max_cwnd.sqrt();
        let fs = (alpha / cwnd.max(1e-9).sqrt() + beta).clamp(0.0, range);
        self.base_target + self.per_hop * hops as u64 + Time(fs as u64)
    }
}

/// One connection's Swift state.
#[derive(Clone, Debug)]
pub struct Swift {
    /// The window in packets (may be below 1: then the sender paces).
    cwnd: f64,
    max_cwnd: f64,
    last_decrease: Option<Time>,
}

impl Swift {
    /// A connection starting with a window of `max_cwnd` packets (line rate for the
    /// path's bandwidth-delay product), which the window never exceeds.
    pub fn new(max_cwnd: f64) -> Self {
        Swift {
            cwnd: max_cwnd,
            max_cwnd,
            last_decrease: None,
        }
    }

    pub fn cwnd(&self) -> f64 {
        self.cwnd
    }

    /// An ACK for `acked` new packets measured `delay` on a path of `hops` switches, `rtt`
    /// being the latest RTT (a decrease waits that long after the previous one).
    pub fn on_ack(
        &mut self,
        now: Time,
        delay: Time,
        rtt: Time,
        hops: u32,
        acked: u32,
        p: &SwiftParams,
    ) {
        let target = p.target(self.cwnd, hops);
        if delay < target {
            let n = acked as f64;
            if self.cwnd >= 1.0 {
                self.cwnd += p.ai / self.cwnd * n;
            } else {
                self.cwnd += p.ai * n;
            }
        } else if self.last_decrease.is_none_or(|t| now >= t + rtt) {
            let excess = (delay - target).ps() as f64 / delay.ps().max(1) as f64;
            self.cwnd *= (1.0 - p.beta * excess).max(1.0 - p.max_mdf);
            self.last_decrease = Some(now);
        }
        self.cwnd = self.cwnd.clamp(p.min_cwnd, self.max_cwnd);
    }

    /// A retransmission timeout: the window collapses to its floor's multiple of one packet
    /// (Algorithm 1 on RTO: cwnd = min_cwnd after repeated timeouts; here at once).
    pub fn on_timeout(&mut self, now: Time, p: &SwiftParams) {
        self.cwnd = p.min_cwnd.max(1.0_f64.min(self.cwnd));
        self.last_decrease = Some(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flow_scaling_spans_its_range_between_its_windows() {
        let p = SwiftParams::default_for(Time::from_us(4));
        assert_eq!(p.target(100.0, 0), p.base_target);
        assert_eq!(p.target(1000.0, 0), p.base_target);
        let full = p.target(0.1, 0).ps() as i64 - (p.base_target + p.fs_range).ps() as i64;
        assert!(full.abs() <= 1, "{full}");
        assert_eq!(p.target(100.0, 3), p.base_target + p.per_hop * 3);
    }

    #[test]
    fn below_target_the_window_grows_by_ai_per_window_of_acks() {
        let p = SwiftParams::default_for(Time::from_us(4));
        let mut s = Swift::new(1000.0);
        s.cwnd = 10.0;
        for _ in 0..10 {
            s.on_ack(Time::ZERO, Time::from_us(1), Time::from_us(5), 2, 1, &p);
        }
        assert!((s.cwnd() - 11.0).abs() < 0.05, "{}", s.cwnd());
    }

    #[test]
    fn above_target_one_cut_per_rtt_in_proportion_to_the_excess() {
        let p = SwiftParams::default_for(Time::from_us(4));
        let mut s = Swift::new(100.0);
        let target = p.target(100.0, 0);
        let delay = target * 2;
        let rtt = Time::from_us(10);
        s.on_ack(Time::from_us(100), delay, rtt, 0, 1, &p);
        // Excess is half the delay: cut by 0.8 x 0.5 = 40 %.
        assert!((s.cwnd() - 60.0).abs() < 1e-9, "{}", s.cwnd());
        s.on_ack(Time::from_us(105), delay, rtt, 0, 1, &p);
        assert!(
            (s.cwnd() - 60.0).abs() < 1e-9,
            "no second cut within an RTT"
        );
        s.on_ack(Time::from_us(110), target * 100, rtt, 0, 1, &p);
        assert!(
            (s.cwnd() - 30.0).abs() < 1e-9,
            "a cut is at most max_mdf: {}",
            s.cwnd()
        );
    }
}
