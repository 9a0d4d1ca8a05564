//! TIMELY's sender (Mittal et al., "TIMELY: RTT-based Congestion Control for the
//! Datacenter", SIGCOMM 2015), as the HPCC authors' ns-3 model runs it: once per RTT the
//! rate reacts to the RTT measured from NIC timestamps. Below T_low it grows additively;
//! above T_high it falls by beta x (1 - T_high / rtt); between them it follows the
//! smoothed RTT gradient (normalised by the minimum RTT): growing while the gradient is not
//! positive, falling by beta x gradient otherwise. Five increases in a row switch to
//! hyper-active increase.

use crate::units::{BitRate, Time};
use serde::Serialize;

/// TIMELY's parameters (docs/REFERENCE.md section 4; the ns-3 model's defaults).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TimelyParams {
    /// EWMA weight of the newest RTT difference (0.875).
    pub alpha: f64,
    /// Multiplicative decrease factor (0.8).
    pub beta: f64,
    pub t_low: Time,
    pub t_high: Time,
    /// The minimum RTT that normalises the gradient (ns-3 `TimelyMinRtt`, 20 us).
    pub min_rtt: Time,
    /// Additive and hyper-active increase (run.py: 10 and 50 Mb/s x line / 10 Gb/s).
    pub rate_ai: BitRate,
    pub rate_hai: BitRate,
    /// The rate never falls below this (1 Gb/s, run.py's `MIN_RATE`).
    pub min_rate: BitRate,
}

impl TimelyParams {
    /// The ns-3 model's defaults for a NIC of `line` rate.
    pub fn ns3(line: BitRate) -> Self {
        let scale = |m: u128| BitRate((m * 1_000_000 * line.bps() as u128 / 10_000_000_000) as u64);
        TimelyParams {
            alpha: 0.875,
            beta: 0.8,
            t_low: Time::from_us(50),
            t_high: Time::from_us(500),
            min_rtt: Time::from_us(20),
            rate_ai: scale(10),
            rate_hai: scale(50),
            min_rate: BitRate::gbps(1),
        }
    }
}

/// One connection's TIMELY state.
#[derive(Clone, Debug)]
pub struct Timely {
    line: BitRate,
    rate: BitRate,
    /// The smoothed RTT difference, picoseconds.
    rtt_diff: f64,
    last_rtt: Option<Time>,
    increases: u32,
    /// The next update waits for an ACK covering packets sent after this one.
    update_after: Option<u32>,
}

impl Timely {
    pub fn new(line: BitRate) -> Self {
        Timely {
            line,
            rate: line,
            rtt_diff: 0.0,
            last_rtt: None,
            increases: 0,
            update_after: None,
        }
    }

    pub fn rate(&self) -> BitRate {
        self.rate
    }

    /// An ACK covering packets below `acked` measured `rtt`; `sent` is how many packets
    /// the sender has injected. Returns whether the rate changed.
    pub fn on_ack(&mut self, rtt: Time, acked: u32, sent: u32, p: &TimelyParams) -> bool {
        if self.update_after.is_some_and(|after| acked <= after) {
            return false;
        }
        self.update_after = Some(sent);
        let Some(last) = self.last_rtt.replace(rtt) else {
            return false;
        };
        let before = self.rate;
        let new_diff = rtt.ps() as f64 - last.ps() as f64;
        self.rtt_diff = (1.0 - p.alpha) * self.rtt_diff + p.alpha * new_diff;
        let gradient = self.rtt_diff / p.min_rtt.ps() as f64;
        let cut = if rtt < p.t_low {
            None
        } else if rtt > p.t_high {
            Some(1.0 - p.beta * (1.0 - p.t_high.ps() as f64 / rtt.ps() as f64))
        } else if gradient <= 0.0 {
            None
        } else {
            Some((1.0 - p.beta * gradient).max(0.0))
        };
        self.rate = match cut {
            None => {
                let step = if self.increases < 5 {
                    p.rate_ai
                } else {
                    p.rate_hai
                };
                self.increases += 1;
                BitRate((self.rate.bps() + step.bps()).min(self.line.bps()))
            }
            Some(c) => {
                self.increases = 0;
                BitRate((self.rate.bps() as f64 * c) as u64).max(p.min_rate)
            }
        };
        self.rate != before
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: BitRate = BitRate::gbps(100);

    #[test]
    fn above_t_high_the_cut_follows_the_excess() {
        let p = TimelyParams::ns3(LINE);
        let mut t = Timely::new(LINE);
        t.on_ack(Time::from_us(600), 1, 10, &p);
        assert!(t.on_ack(Time::from_us(1000), 11, 20, &p));
        // 1 - 0.8 x (1 - 500/1000) = 0.6.
        assert!((t.rate().bps() as f64 - 60e9).abs() < 1e3, "{:?}", t.rate());
        assert!(
            !t.on_ack(Time::from_us(1000), 15, 22, &p),
            "one update per RTT"
        );
    }

    #[test]
    fn a_rising_rtt_between_the_thresholds_cuts_by_the_gradient() {
        let p = TimelyParams::ns3(LINE);
        let mut t = Timely::new(LINE);
        t.on_ack(Time::from_us(100), 1, 10, &p);
        t.on_ack(Time::from_us(102), 11, 20, &p);
        // diff 0.875 x 2 us; gradient 1.75 / 20 = 0.0875; cut 1 - 0.07 = 0.93.
        assert!((t.rate().bps() as f64 - 93e9).abs() < 1e3, "{:?}", t.rate());
    }

    #[test]
    fn under_t_low_it_climbs_additively_then_hyper_actively() {
        let p = TimelyParams::ns3(LINE);
        let mut t = Timely::new(LINE);
        t.rate = BitRate::gbps(10);
        t.on_ack(Time::from_us(10), 1, 1, &p);
        for i in 0..7 {
            t.on_ack(Time::from_us(10), 2 + i, 2 + i, &p);
        }
        let expected = 10e9 + 5.0 * p.rate_ai.bps() as f64 + 2.0 * p.rate_hai.bps() as f64;
        assert_eq!(t.rate().bps() as f64, expected);
    }
}
