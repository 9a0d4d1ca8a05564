//! A run split over threads: the parts' hand-overs, their checks and samples, and their merge into one run.

use super::{Event, Flow, Frame, PortState, RateSample, Simulation};
use crate::parallel::{Check, Part, SplitEnd, Splittable};
use fabricsim_core::pool::Pool;
use fabricsim_core::units::Time;

impl Splittable for Simulation {
    type Frame = Frame;
    type Sample = RateSample;
    type CheckMemory = ();

    fn part(&self) -> Option<&Part<Frame>> {
        self.part.as_ref()
    }

    fn part_mut(&mut self) -> &mut Part<Frame> {
        self.part.as_mut().expect("a part")
    }

    /// The lookahead of this run, and its window grid (see [`driver::lookahead`]).
    fn lookahead(&self) -> Time {
        self.lookahead
    }

    fn deadlock_check_interval(&self) -> Time {
        self.cfg.deadlock_check
    }

    /// The rate-sampling interval, if rates are recorded.
    fn sampling(&self) -> Option<Time> {
        self.cfg.record_rates.then_some(self.cfg.rate_sample)
    }

    fn receive(&mut self, port: u32, frame: Frame, arrival: Time, tie: u64) {
        let slot = self.frames.alloc(frame);
        let event = Event::Arrival { port };
        let (frames, queue) = (&mut self.frames, &mut self.state.queue);
        (self.ports[port as usize].wire).carry(frames, queue, slot, arrival, tie, event);
    }

    fn set_deadlock_check_pending(&mut self, pending: bool) {
        self.deadlock_check_pending = pending;
    }

    /// A deadlock stops the run; the check goes on while any switch egress is paused.
    fn check_deadlock(parts: &[&Self], now: Time, _: &mut ()) -> Check {
        if let Some(cycle) = Self::find_deadlock(parts, now) {
            Check::Deadlock(cycle)
        } else if Self::any_switch_paused(parts, now) {
            Check::Again
        } else {
            Check::Clear
        }
    }

    /// Every part's messages on their NICs, in flow order (a part keeps only its rate
    /// cuts, whose ties it knows).
    fn take_samples(parts: &mut [&mut Self], now: Time) -> Vec<RateSample> {
        let mut taken = Vec::new();
        for p in parts.iter_mut() {
            let from = p.rates.len();
            p.sample_on_nic(now);
            taken.extend(p.rates.split_off(from));
        }
        taken.sort_by_key(|r| r.flow);
        taken
    }

    /// The run's parts, once every one has finished, as one run: each port and each
    /// message end from the part that holds them (a message's receiver side from its
    /// receiver's part), counters summed; `end` is what the coordinator saw.
    fn merge(mut parts: Vec<Simulation>, mut end: SplitEnd<RateSample>) -> Simulation {
        let owner = parts[0].part.as_ref().expect("a part").owner.clone();
        let ports: Vec<PortState> = (0..owner.len())
            .map(|i| parts[owner[i] as usize].ports[i].clone())
            .collect();
        let flows: Vec<Flow> = (parts[0].state.flows.iter().enumerate())
            .map(|(i, f)| {
                let dst = parts[0].topo.host_port(f.msg.dst).index();
                let receiver = &parts[owner[dst] as usize].state.flows[i];
                let mut flow = parts[owner[f.nic_port as usize] as usize].state.flows[i].clone();
                flow.receiver = receiver.receiver.clone();
                flow.last_cnp = receiver.last_cnp;
                flow.life.finish = receiver.life.finish;
                flow.life.delivered_bytes = receiver.life.delivered_bytes;
                flow
            })
            .collect();
        // Rate records in the order one thread makes them: by time, a time's cuts in the
        // order of their events, then that time's periodic samples (a run-wide event,
        // last at its time) in flow order.
        let mut rates: Vec<(Time, u64, RateSample)> = Vec::new();
        for p in &parts {
            rates.extend(
                p.rates
                    .iter()
                    .zip(&p.rate_ties)
                    .map(|(r, &t)| (r.time, t, *r)),
            );
        }
        rates.extend(end.samples.iter().map(|r| (r.time, u64::MAX, *r)));
        rates.sort_by_key(|&(t, tie, _)| (t, tie));
        let sum = |count: fn(&Simulation) -> u64| parts.iter().map(count).sum::<u64>();
        let drops = sum(|p| p.drops);
        let lost_payload = sum(|p| p.lost_payload);
        let retransmitted = sum(|p| p.retransmitted);
        let cnps = sum(|p| p.cnps);
        let naks = sum(|p| p.naks);
        let timeouts = sum(|p| p.timeouts);
        let completed = sum(|p| p.state.lifecycle.completed as u64) as usize;
        // Part 0 becomes the run: its own state replaced by the merged one, with no
        // frames or events left (a merged run is over).
        let mut merged = parts.swap_remove(0);
        merged.drops = drops;
        merged.lost_payload = lost_payload;
        merged.retransmitted = retransmitted;
        merged.cnps = cnps;
        merged.naks = naks;
        merged.timeouts = timeouts;
        merged.state.lifecycle.completed = completed;
        merged.ports = ports;
        merged.state.flows = flows;
        merged.rates = rates.into_iter().map(|(.., r)| r).collect();
        merged.frames = Pool::default();
        merged.part = None;
        merged.in_flight = end.in_flight;
        end.close(&mut merged.state);
        merged
    }
}
