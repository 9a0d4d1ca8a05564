//! Rate samples: each DCQCN cut, and every active flow's rates at a fixed interval.

use super::{Event, Simulation};
use fabricsim_core::units::{BitRate, Time};

/// One sample of a flow's rates: at every DCQCN cut, and every `rate_sample` interval
/// while the flow is active.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateSample {
    pub time: Time,
    pub flow: u32,
    /// The pacing rate: DCQCN's (or HPCC's, Swift's, TIMELY's) current rate, or the line
    /// rate without congestion control.
    pub rate: BitRate,
    /// Periodic samples: payload sent over the interval just ended. None at a cut.
    pub sent: Option<BitRate>,
}

impl Simulation {
    /// Records every posted, unfinished NIC flow's pacing rate and its payload sent since the
    /// last sample; re-arms while anything else is pending (so sampling never keeps a
    /// finished run alive).
    pub(super) fn sample_rates(&mut self, now: Time) {
        self.sample_on_nic(now);
        if !self.state.queue.is_empty() {
            self.schedule_global(now + self.cfg.rate_sample, Event::SampleRates);
        }
    }

    /// The rate samples at `now` of the messages on this run's (or part's) NICs, in flow
    /// order, appended to its rates.
    pub(super) fn sample_on_nic(&mut self, now: Time) {
        let interval = self.cfg.rate_sample;
        let flows = &self.state.flows;
        // Messages leave the NIC when acknowledged; the rest are sampled in flow order.
        self.on_nic
            .retain(|&f| flows[f as usize].life.acked.is_none());
        self.on_nic.sort_unstable();
        for &i in &self.on_nic {
            let f = &mut self.state.flows[i as usize];
            let line = self.topo.port(self.topo.host_port(f.msg.src)).rate;
            let rate = f.rate(&self.cfg, line, now);
            let bits = (f.life.sent_bytes - f.sampled_bytes) as u128 * 8 * 1_000_000_000_000;
            f.sampled_bytes = f.life.sent_bytes;
            self.rates.push(RateSample {
                time: now,
                flow: i,
                rate,
                sent: Some(BitRate((bits / interval.ps() as u128) as u64)),
            });
        }
    }
}
