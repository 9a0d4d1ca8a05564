//! InfiniBand congestion control at the source HCA (IBA vol. 1 annex A10).
//!
//! A BECN raises the flow's CCT index by `ccti_increase`, capped at `ccti_limit`; every
//! expiry of the free-running `ccti_timer` lowers it by one. The injection delay between
//! packets is `CCT[ccti]`. The table here is linear, `CCT[i] = i x cct_step`: the IBA leaves
//! table contents to the subnet manager, so the step is a tunable without a hardware
//! source. The timer is evaluated lazily, which is exact for a free-running timer.

use crate::units::Time;
use serde::Serialize;

/// Source-side parameters. Defaults are unverified (docs/REFERENCE.md section 3: "timer and
/// delay units are unverified"); the marking threshold lives with the switch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct CcParams {
    pub ccti_increase: u32,
    pub ccti_limit: u32,
    pub ccti_timer: Time,
    pub cct_step: Time,
}

impl Default for CcParams {
    fn default() -> Self {
        CcParams {
            // Increase 1 per BECN, as in the Mellanox OpenSM congestion-control examples (unverified).
            ccti_increase: 1,
            // 128-entry table (the IBA allows up to 16384 entries; unverified choice).
            ccti_limit: 127,
            // Unverified: short enough to recover within a few tens of microseconds.
            ccti_timer: Time::from_us(5),
            // Unverified: 10 ns of delay per index step.
            cct_step: Time::from_ns(10),
        }
    }
}

/// Per-flow congestion state at the source.
#[derive(Clone, Debug, Default)]
pub struct CcState {
    ccti: u32,
    evaluated_at: Time,
}

impl CcState {
    /// Applies the timer expiries between the last evaluation and `now`.
    fn advance(&mut self, now: Time, p: &CcParams) {
        let periods = now.ps() / p.ccti_timer.ps() - self.evaluated_at.ps() / p.ccti_timer.ps();
        self.ccti = self
            .ccti
            .saturating_sub(periods.min(u32::MAX as u64) as u32);
        self.evaluated_at = now;
    }

    /// Reacts to a BECN received at `now`.
    pub fn on_becn(&mut self, now: Time, p: &CcParams) {
        self.advance(now, p);
        self.ccti = (self.ccti + p.ccti_increase).min(p.ccti_limit);
    }

    /// The inter-packet injection delay at `now`.
    pub fn injection_delay(&mut self, now: Time, p: &CcParams) -> Time {
        self.advance(now, p);
        p.cct_step * self.ccti as u64
    }

    pub fn ccti(&self) -> u32 {
        self.ccti
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn becn_raises_and_timer_lowers() {
        let p = CcParams {
            ccti_increase: 2,
            ccti_limit: 5,
            ccti_timer: Time::from_us(1),
            cct_step: Time::from_ns(10),
        };
        let mut s = CcState::default();
        for _ in 0..4 {
            s.on_becn(Time::from_ns(100), &p);
        }
        assert_eq!(s.ccti(), 5, "capped at the limit");
        assert_eq!(s.injection_delay(Time::from_ns(999), &p), Time::from_ns(50));
        // Timer expiries at 1 us and 2 us.
        assert_eq!(
            s.injection_delay(Time::from_ns(2_500), &p),
            Time::from_ns(30)
        );
        assert_eq!(s.injection_delay(Time::from_us(100), &p), Time::ZERO);
    }
}
