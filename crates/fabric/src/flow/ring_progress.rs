//! A ring's data dependency at flow level: an edge of a bandwidth-bound compact ring
//! runs at most one step ahead of the edge into its sender.
//!
//! At packet level (and in NCCL) a ring edge sends a step's piece only once the same
//! piece of the previous step has come in over the edge before it, so over its whole
//! life an edge's bytes sent never exceed the bytes its upstream edge delivered plus one
//! step's bytes (its first step needs nothing). Without that bound each compact edge
//! drains at its own fair rate: an edge cut by DCQCN or crowded on an uplink falls
//! behind while the others run ahead, feed the shared ports as if they had their data
//! (marking the slow edge further), and the collective ends when the slowest edge alone
//! is done, as if the ring's pace were each edge's average rather than, at every
//! instant, its slowest edge's.
//!
//! Here an edge whose upstream edge (`Simulation::ring_pred`) is a step behind it is
//! *bound*: the water-filling caps it at its upstream edge's rate (`Flow::ring_cap`),
//! and it feeds its ports no faster, so it sends what reaches it. A ring's edges are
//! re-shared together. An edge gaining on its upstream edge is re-shared when its lead
//! comes within half a packet of a step ([`Event::Bound`], keyed apart from the flows'
//! `Drained` events); a bound edge whose link's share
//! holds it below its upstream edge's rate runs free again. Latency-bound rings are
//! left to their pipeline plan ([`super::PipelinePlan`]), whose steps already wait on
//! the edge before.

use super::{Event, Simulation, NO_HOP, NO_RING};
use fabricsim_core::units::Time;

/// How close, in packets, an edge's lead on its upstream edge must come to a step to
/// count as a step. An edge gaining on its upstream edge is re-shared once half of that
/// is left, so that the water-filling's shifts between re-shares bind and free it
/// there without an event each time. Packet level's edges move whole packets, so this
/// is below its resolution, not a model parameter.
const LEAD_SLACK_PACKETS: f64 = 1.0;

impl Simulation {
    /// Whether `flow` is an edge of a compact ring its progress bound holds on: a ring
    /// bound by bandwidth (its steps' latency hidden behind its bytes).
    fn progress_bound(&self, flow: u32) -> bool {
        let f = &self.state.flows[flow as usize];
        self.ring_of[flow as usize] != NO_RING
            && f.pipeline.is_some_and(|p| !f.plan.latency_bound(p))
    }

    /// Wire bytes `flow` has sent by now, and one step's wire bytes of it.
    fn progress(&self, flow: u32, now: Time) -> (f64, f64) {
        let f = &self.state.flows[flow as usize];
        let wire = self.flow_wire(f) as f64;
        let left = (f.remaining - f.rate.max(0.0) * (now - f.since).ps() as f64).max(0.0);
        let steps = match f.pipeline {
            Some(super::Pipeline::Ring { steps, .. }) => steps.max(1) as f64,
            _ => 1.0,
        };
        (wire - left, wire / steps)
    }

    /// Adds to a re-share's `stack` the links of every edge of `flow`'s ring, once per
    /// re-share `round`, if its progress bound holds on it: a ring's edges are re-shared
    /// together.
    pub(super) fn extend_with_ring(&mut self, flow: u32, round: u32, stack: &mut Vec<u32>) {
        if !self.progress_bound(flow) {
            return;
        }
        let r = self.ring_of[flow as usize] as usize;
        if self.ring_round[r] == round {
            return;
        }
        self.ring_round[r] = round;
        for &e in &self.rings[r] {
            let f = &self.state.flows[e as usize];
            if f.remaining > 0.0 {
                stack.extend(&f.path);
            }
        }
    }

    /// The rings the progress bound holds on among those of `flows`, each once.
    fn bound_rings(&self, flows: &[u32]) -> Vec<u32> {
        let mut rings: Vec<u32> = flows
            .iter()
            .filter(|&&f| self.progress_bound(f))
            .map(|&f| self.ring_of[f as usize])
            .collect();
        rings.sort_unstable();
        rings.dedup();
        rings
    }

    /// Each of `members`' lead on its upstream edge, in wire bytes short of a step
    /// (infinite with no upstream edge sending).
    fn gaps(&self, members: &[u32], now: Time) -> Vec<f64> {
        members
            .iter()
            .map(|&e| {
                let pred = self.ring_pred[e as usize];
                if pred == NO_RING || self.state.flows[pred as usize].remaining <= 0.0 {
                    return f64::INFINITY;
                }
                let (done, step) = self.progress(e, now);
                let (ahead, _) = self.progress(pred, now);
                ahead + step - done
            })
            .collect()
    }

    /// The lead short of a step within which an edge counts as a step ahead, wire bytes.
    fn slack(&self) -> f64 {
        LEAD_SLACK_PACKETS * self.cfg.frame_len(self.cfg.mtu, false) as f64
    }

    /// After a water-filling of `flows`: caps each bound edge of their rings at its
    /// upstream edge's rate, walking each ring from an edge that runs free. A ring's
    /// edges are re-shared together ([`Self::extend_with_ring`]). Returns whether some
    /// edge's cap moved, so that the water-filling must run again.
    pub(super) fn bind_rings(&mut self, flows: &[u32], now: Time) -> bool {
        let mut moved = false;
        let slack = self.slack();
        for r in self.bound_rings(flows) {
            let members = std::mem::take(&mut self.rings[r as usize]);
            let n = members.len();
            let gap = self.gaps(&members, now);
            let within = |j: usize| gap[j] <= slack;
            // An edge's upstream edge is the next member: walk backwards from a free one.
            let Some(start) = (0..n).find(|&j| !within(j)) else {
                self.rings[r as usize] = members;
                continue;
            };
            let mut upstream_rate = self.state.flows[members[start] as usize].rate;
            for i in 1..=n {
                let j = (start + n - i) % n;
                let e = members[j];
                let f = &self.state.flows[e as usize];
                if f.remaining <= 0.0 {
                    upstream_rate = 0.0;
                    continue;
                }
                // Held by its cap at the last water-filling (at it, or below it by the
                // queue it feeds, which serves it a share of what it sends), its own
                // rate is at least that.
                let held = f.ring_cap.is_finite()
                    && (f.rate >= f.ring_cap * (1.0 - 1e-9) || f.bottleneck == NO_HOP);
                let own = if held { f64::INFINITY } else { f.rate };
                let bound = j != start && within(j) && own > upstream_rate;
                let cap = if bound { upstream_rate } else { f64::INFINITY };
                let f = &mut self.state.flows[e as usize];
                f.ring_bound = bound;
                if cap.is_finite() != f.ring_cap.is_finite()
                    || (cap.is_finite() && (cap - f.ring_cap).abs() > 1e-6 * cap)
                {
                    debug_assert_eq!(
                        self.flow_mark[e as usize], self.round,
                        "a ring's edges are re-shared together"
                    );
                    self.state.flows[e as usize].ring_cap = cap;
                    moved = true;
                }
                let f = &self.state.flows[e as usize];
                upstream_rate = if bound { cap } else { f.rate };
            }
            self.rings[r as usize] = members;
        }
        moved
    }

    /// After the last water-filling of a re-share of `flows`: when each free edge of
    /// their rings gaining on its upstream edge comes within half a slack of a step
    /// ahead of it (an [`Event::Bound`] then re-shares it).
    pub(super) fn schedule_binds(&mut self, flows: &[u32], now: Time) {
        let slack = self.slack();
        let keys = self.state.flows.len() as u32;
        for r in self.bound_rings(flows) {
            let members = std::mem::take(&mut self.rings[r as usize]);
            let gap = self.gaps(&members, now);
            for (j, &e) in members.iter().enumerate() {
                let f = &self.state.flows[e as usize];
                if f.ring_bound || !gap[j].is_finite() || gap[j] <= slack {
                    continue;
                }
                let pred = &self.state.flows[self.ring_pred[e as usize] as usize];
                let closing = f.rate - pred.rate.max(0.0);
                if closing <= f.rate * 1e-9 {
                    continue;
                }
                let at = ((gap[j] - slack / 2.0) / closing).ceil();
                if at < (u64::MAX / 4) as f64 {
                    let at = now + Time(at as u64);
                    self.state
                        .queue
                        .schedule_keyed(keys + e, at, Event::Bound { flow: e });
                }
            }
            self.rings[r as usize] = members;
        }
    }
}
