//! DCQCN reaction point (the sender's rate machine; Zhu et al., SIGCOMM 2015).
//!
//! Sans-IO and lazy: the alpha and rate-increase timers are not events. Whoever holds the
//! state calls [`Dcqcn::advance`] with the current time before reading the rate or
//! applying a CNP, and every timer expiry up to then is applied in time order, exactly as
//! if each had fired. When the flow is back at line rate the remaining expiries are
//! applied in closed form, so a long idle gap costs O(1).

use crate::units::{BitRate, Time};
use serde::Serialize;

/// DCQCN parameters (docs/REFERENCE.md section 4 names the three presets).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DcqcnParams {
    /// Alpha gain g.
    pub g: f64,
    /// Alpha decays by (1 - g) at the end of every period without a CNP (K).
    pub alpha_period: Time,
    /// Rate-increase timer.
    pub increase_period: Time,
    /// Rate-increase byte counter (None: timer only, as the ns-3 model and firmware run).
    pub byte_counter: Option<u64>,
    /// F: increase steps of fast recovery before additive increase.
    pub fast_recovery_steps: u32,
    /// Additive increase of the target rate.
    pub rate_ai: BitRate,
    /// Hyper increase of the target rate.
    pub rate_hai: BitRate,
    /// The rate never falls below this.
    pub min_rate: BitRate,
    /// At most one rate cut per this period (0: every CNP cuts, as in the paper).
    pub rate_decrease_period: Time,
    /// Whether every cut sets the target rate to the current rate (the paper), or only a
    /// cut that follows a timer-driven increase (the HPCC ns-3 model with
    /// CLAMP_TARGET_RATE 0, and ConnectX's clamp_tgt_rate 0 /
    /// clamp_tgt_rate_after_time_inc 1 defaults). Without the clamp, back-to-back cuts
    /// keep the pre-congestion target, and fast recovery returns to it.
    pub clamp_target_always: bool,
}

/// A named parameter set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DcqcnPreset {
    /// The paper: g 1/256, K 55 us, timer 55 us, byte counter 10 MB, F 5, R_AI 40 Mb/s.
    Paper,
    /// The HPCC authors' ns-3 model: alpha period 1 us, decrease period 4 us, timer 300 us,
    /// R_AI 5 Mb/s and R_HAI 50 Mb/s scaled by rate/25G, min rate 1 Gb/s.
    HpccNs3,
    /// ConnectX firmware defaults: rpg_time_reset 300 us, rate_reduce_monitor_period 4 us,
    /// rpg_ai_rate 5 Mb/s, rpg_hai_rate 50 Mb/s, rpg_gd 11, rpg_min_dec_fac 50 %,
    /// dce_tcp_g 1019, dce_tcp_rtt 1 us.
    Connectx,
}

impl DcqcnPreset {
    pub const NAMES: [&'static str; 3] = ["paper", "hpcc-ns3", "connectx"];

    pub fn parse(s: &str) -> Option<DcqcnPreset> {
        match s {
            "paper" => Some(DcqcnPreset::Paper),
            "hpcc-ns3" => Some(DcqcnPreset::HpccNs3),
            "connectx" => Some(DcqcnPreset::Connectx),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            DcqcnPreset::Paper => "paper",
            DcqcnPreset::HpccNs3 => "hpcc-ns3",
            DcqcnPreset::Connectx => "connectx",
        }
    }

    /// The preset's parameters for a NIC of `line` rate.
    pub fn params(self, line: BitRate) -> DcqcnParams {
        let mbps = |m: u64| BitRate(m * 1_000_000);
        match self {
            DcqcnPreset::Paper => DcqcnParams {
                g: 1.0 / 256.0,
                alpha_period: Time::from_us(55),
                increase_period: Time::from_us(55),
                byte_counter: Some(10_000_000),
                fast_recovery_steps: 5,
                rate_ai: mbps(40),
                // Unverified: the paper's hyper-increase step is taken as 10 x R_AI.
                rate_hai: mbps(400),
                // Unverified: the paper gives no floor; 0.1 % of line keeps pacing finite.
                min_rate: BitRate(line.bps() / 1000),
                rate_decrease_period: Time::ZERO,
                clamp_target_always: true,
            },
            DcqcnPreset::HpccNs3 => {
                // In u128: m Mb/s x a 400G line rate overflows u64.
                let scale = |m: u64| {
                    BitRate((m as u128 * 1_000_000 * line.bps() as u128 / 25_000_000_000) as u64)
                };
                DcqcnParams {
                    // Unverified: the HPCC configuration's EWMA gain of 1/256.
                    g: 1.0 / 256.0,
                    alpha_period: Time::from_us(1),
                    increase_period: Time::from_us(300),
                    byte_counter: None,
                    // Unverified: the HPCC configuration's FAST_RECOVERY_TIMES of 1.
                    fast_recovery_steps: 1,
                    rate_ai: scale(5),
                    rate_hai: scale(50),
                    min_rate: mbps(1000),
                    rate_decrease_period: Time::from_us(4),
                    // Unverified: the HPCC configuration's CLAMP_TARGET_RATE 0.
                    clamp_target_always: false,
                }
            }
            DcqcnPreset::Connectx => DcqcnParams {
                // dce_tcp_g = 1019: with a CNP in the period alpha = (1019/1024) alpha +
                // 5/1024, without one alpha = (1019/1024) alpha, so g = 5/1024 (NVIDIA DOCA
                // "DCQCN CC Parameters"). rpg_gd = 11 is the alpha-to-rate-cut shift: with
                // 10-bit alpha, a cut of alpha/2, as in the paper.
                g: 5.0 / 1024.0,
                // dce_tcp_rtt = 1 us: the alpha update period (same source).
                alpha_period: Time::from_us(1),
                increase_period: Time::from_us(300),
                // Unverified: rpg_byte_reset 32767 x 64 B.
                byte_counter: Some(32_767 * 64),
                // rpg_threshold 1 (unverified).
                fast_recovery_steps: 1,
                rate_ai: mbps(5),
                rate_hai: mbps(50),
                // Unverified: rpg_min_rate 1 Mb/s.
                min_rate: mbps(1),
                rate_decrease_period: Time::from_us(4),
                // clamp_tgt_rate 0, clamp_tgt_rate_after_time_inc 1 (unverified defaults).
                clamp_target_always: false,
            },
        }
    }
}

/// One queue pair's reaction point.
#[derive(Clone, Debug)]
pub struct Dcqcn {
    line: f64,
    /// Current rate RC, bits per second.
    rc: f64,
    /// Target rate RT.
    rt: f64,
    alpha: f64,
    timer_stage: u32,
    byte_stage: u32,
    bytes: u64,
    next_alpha: Time,
    next_increase: Time,
    cnp_in_period: bool,
    last_decrease: Option<Time>,
    /// Whether a CNP has ever arrived (until then the flow runs at line rate, timers idle).
    engaged: bool,
}

impl Dcqcn {
    /// A QP starting at line rate with alpha = 1.
    pub fn new(line: BitRate) -> Self {
        let line = line.bps() as f64;
        Dcqcn {
            line,
            rc: line,
            rt: line,
            alpha: 1.0,
            timer_stage: 0,
            byte_stage: 0,
            bytes: 0,
            next_alpha: Time::MAX,
            next_increase: Time::MAX,
            cnp_in_period: false,
            last_decrease: None,
            engaged: false,
        }
    }

    /// The current sending rate.
    pub fn rate(&self) -> BitRate {
        BitRate(self.rc as u64)
    }

    /// When the rate may next rise by the timer (None at line rate or before any CNP).
    pub fn next_increase(&self) -> Option<Time> {
        (self.engaged && self.rc < self.line).then_some(self.next_increase)
    }

    pub fn alpha(&self) -> f64 {
        self.alpha
    }

    /// Applies every timer expiry at or before `now`.
    pub fn advance(&mut self, now: Time, p: &DcqcnParams) {
        while self.engaged {
            let at_line = self.rc >= self.line && self.rt >= self.line;
            if at_line && self.next_alpha <= now && self.next_increase <= now {
                self.fast_forward(now, p);
                return;
            }
            let t = self.next_alpha.min(self.next_increase);
            if t > now {
                return;
            }
            if self.next_alpha == t {
                if !self.cnp_in_period {
                    self.alpha *= 1.0 - p.g;
                }
                self.cnp_in_period = false;
                self.next_alpha = t + p.alpha_period;
            } else {
                self.timer_stage = self.timer_stage.saturating_add(1);
                self.increase(p);
                self.next_increase = t + p.increase_period;
            }
        }
    }

    /// At line rate increases change nothing: apply the pending expiries in closed form.
    fn fast_forward(&mut self, now: Time, p: &DcqcnParams) {
        let periods = |next: Time, period: Time| (now - next).ps() / period.ps().max(1) + 1;
        let n = periods(self.next_alpha, p.alpha_period);
        let decays = n - u64::from(self.cnp_in_period);
        self.alpha *= (1.0 - p.g).powf(decays as f64);
        self.cnp_in_period = false;
        self.next_alpha += Time(n * p.alpha_period.ps());
        let m = periods(self.next_increase, p.increase_period);
        self.timer_stage = self
            .timer_stage
            .saturating_add(m.min(u32::MAX as u64) as u32);
        self.next_increase += Time(m * p.increase_period.ps());
    }

    /// A CNP arrived at `now` (call [`advance`](Self::advance) first). Returns whether the
    /// rate was cut (at most once per `rate_decrease_period`).
    pub fn on_cnp(&mut self, now: Time, p: &DcqcnParams) -> bool {
        if !self.engaged {
            self.engaged = true;
            self.next_alpha = now + p.alpha_period;
        }
        self.cnp_in_period = true;
        if self
            .last_decrease
            .is_some_and(|t| now < t + p.rate_decrease_period)
        {
            return false;
        }
        self.last_decrease = Some(now);
        if p.clamp_target_always || self.timer_stage > 0 {
            self.rt = self.rc;
        }
        self.rc = (self.rc * (1.0 - self.alpha / 2.0)).max(p.min_rate.bps() as f64);
        self.alpha = (1.0 - p.g) * self.alpha + p.g;
        self.timer_stage = 0;
        self.byte_stage = 0;
        self.bytes = 0;
        self.next_increase = now + p.increase_period;
        true
    }

    /// `bytes` more were sent; the byte counter may trigger increases.
    pub fn on_sent(&mut self, bytes: u64, p: &DcqcnParams) {
        let Some(b) = p.byte_counter else { return };
        if !self.engaged {
            return;
        }
        self.bytes += bytes;
        while self.bytes >= b {
            self.bytes -= b;
            self.byte_stage = self.byte_stage.saturating_add(1);
            self.increase(p);
        }
    }

    /// One increase step: fast recovery while max(T, BC) <= F, hyper increase when
    /// min(T, BC) > F, additive otherwise; then RC moves halfway to RT.
    fn increase(&mut self, p: &DcqcnParams) {
        let f = p.fast_recovery_steps;
        let (lo, hi) = if p.byte_counter.is_some() {
            (
                self.timer_stage.min(self.byte_stage),
                self.timer_stage.max(self.byte_stage),
            )
        } else {
            (self.timer_stage, self.timer_stage)
        };
        if hi <= f {
            // fast recovery: RT unchanged
        } else if lo > f {
            self.rt += (lo - f) as f64 * p.rate_hai.bps() as f64;
        } else {
            self.rt += p.rate_ai.bps() as f64;
        }
        self.rt = self.rt.min(self.line);
        self.rc = ((self.rt + self.rc) / 2.0).min(self.line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> DcqcnParams {
        DcqcnPreset::Paper.params(BitRate::gbps(100))
    }

    #[test]
    fn cnp_halves_at_alpha_one_then_recovers_halfway() {
        let p = params();
        let mut d = Dcqcn::new(BitRate::gbps(100));
        assert!(d.on_cnp(Time::from_us(10), &p));
        assert_eq!(d.rate(), BitRate::gbps(50));
        // One increase-timer expiry later: fast recovery, RC = (RT + RC) / 2 = 75 Gb/s.
        d.advance(Time::from_us(65), &p);
        assert_eq!(d.rate(), BitRate::gbps(75));
        // Alpha: (1-g) x 1 + g = 1 after the CNP; the period holding the CNP does not
        // decay it; the next period, without a CNP, decays it once.
        assert_eq!(d.alpha(), 1.0);
        d.advance(Time::from_us(120), &p);
        assert!((d.alpha() - (1.0 - p.g)).abs() < 1e-12);
    }

    #[test]
    fn returns_to_line_rate_and_fast_forwards() {
        let p = params();
        let mut d = Dcqcn::new(BitRate::gbps(100));
        d.on_cnp(Time::ZERO, &p);
        d.advance(Time::from_us(100_000), &p);
        assert_eq!(d.rate(), BitRate::gbps(100));
        // 100 ms / 55 us = 1818 alpha periods: alpha ~ (1-g)^1817 x 1.
        assert!(d.alpha() < 0.01);
    }

    #[test]
    fn without_the_clamp_back_to_back_cuts_keep_the_target() {
        let p = DcqcnPreset::Connectx.params(BitRate::gbps(100));
        let mut d = Dcqcn::new(BitRate::gbps(100));
        d.on_cnp(Time::from_us(1), &p);
        d.advance(Time::from_us(5), &p);
        d.on_cnp(Time::from_us(5), &p);
        assert!(d.rate() < BitRate::gbps(30));
        // No timer increase in between: the target is still line rate, and one timer
        // expiry (300 us) of fast recovery brings the rate halfway back to it.
        let before = d.rate().bps() as f64;
        d.advance(Time::from_us(306), &p);
        let after = d.rate().bps() as f64;
        assert!(
            (after - (before + 100e9) / 2.0).abs() < 1e6,
            "{before} -> {after}"
        );
        // After that timer increase, the next cut clamps the target to the rate.
        d.on_cnp(Time::from_us(310), &p);
        d.advance(Time::from_us(611), &p);
        assert!(d.rate().bps() as f64 <= after);
    }

    #[test]
    fn decrease_period_limits_cuts() {
        let p = DcqcnPreset::HpccNs3.params(BitRate::gbps(100));
        let mut d = Dcqcn::new(BitRate::gbps(100));
        assert!(d.on_cnp(Time::from_us(1), &p));
        assert!(!d.on_cnp(Time::from_us(2), &p));
        d.advance(Time::from_us(5), &p);
        assert!(d.on_cnp(Time::from_us(5), &p));
    }

    /// The ns-3 preset's steps scale with the line rate from 25 Gb/s, without overflow
    /// at 400G and above (5 and 50 Mb/s at 25G).
    #[test]
    fn hpcc_ns3_steps_scale_with_the_line_rate() {
        for gbps in [25u64, 100, 400, 800, 1600] {
            let p = DcqcnPreset::HpccNs3.params(BitRate::gbps(gbps));
            assert_eq!(p.rate_ai.bps(), 5_000_000 * gbps / 25);
            assert_eq!(p.rate_hai.bps(), 50_000_000 * gbps / 25);
        }
    }
}
