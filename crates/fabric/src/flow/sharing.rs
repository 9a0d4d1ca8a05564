//! Max-min fair sharing (water-filling) over the connected component of the touched
//! links, once per instant.

use super::{part, Event, Simulation, NO_HOP, NO_RING};
use fabricsim_core::units::Time;
use std::collections::BinaryHeap;

impl Simulation {
    /// Marks the ports of `flow`'s path for the next re-share, due now.
    pub(super) fn touch(&mut self, flow: u32) {
        for &l in &self.state.flows[flow as usize].path {
            self.dirty.push(l);
        }
        if !self.reshare_due {
            self.reshare_due = true;
            let now = self.state.queue.now();
            self.state.queue.schedule(now, Event::Reshare);
        }
    }

    /// Max-min fair rates for the flows connected to the touched ports, and their new
    /// drain events. Progressive filling: the port with the smallest equal share fixes
    /// its open flows at that share, which leaves the other ports on their paths.
    pub(super) fn reshare(&mut self) {
        self.reshare_due = false;
        self.round += 1;
        let round = self.round;
        let now = self.state.queue.now();
        // The connected component: ports -> their flows -> those flows' ports, and a
        // bandwidth-bound ring edge's whole ring (its edges' rates bound each other:
        // [`super::ring_progress`]).
        let mut ports: Vec<u32> = Vec::new();
        let mut flows: Vec<u32> = Vec::new();
        let mut stack = std::mem::take(&mut self.dirty);
        while let Some(l) = stack.pop() {
            let link = &mut self.links[l as usize];
            if link.mark == round {
                continue;
            }
            link.mark = round;
            ports.push(l);
            for i in 0..self.links[l as usize].flows.len() {
                let f = self.links[l as usize].flows[i];
                if self.flow_mark[f as usize] != round {
                    self.flow_mark[f as usize] = round;
                    flows.push(f);
                    stack.extend(&self.state.flows[f as usize].path);
                    self.extend_with_ring(f, round, &mut stack);
                }
            }
        }
        // The rates before: a flow whose rate comes out the same keeps its drain event.
        let before: Vec<f64> = flows
            .iter()
            .map(|&f| self.state.flows[f as usize].rate)
            .collect();
        for &f in &flows {
            let fl = &mut self.state.flows[f as usize];
            let sent = (fl.rate * (now - fl.since).ps() as f64).clamp(0.0, fl.remaining);
            fl.remaining -= sent;
            fl.since = now;
            fl.rate = -1.0;
            self.note_sent(f, sent);
        }
        self.water_fill(&ports, &flows);
        // A ring's edges send what reaches them: each at most its ring's pace. Their
        // demand on each port follows, and with it the share congestion control leaves.
        if !self.cfg.sharing.is_empty() || self.cfg.dcqcn.is_some() {
            for _ in 0..PACE_ROUNDS {
                if !self.pace_rings(&flows) {
                    break;
                }
                self.refill(&ports, &flows);
            }
        }
        for _ in 0..PACE_ROUNDS {
            if !self.bind_rings(&flows, now) {
                break;
            }
            self.refill(&ports, &flows);
        }
        self.schedule_binds(&flows, now);
        self.note_greedy(&flows);
        self.note_overloads(&ports, now);
        self.note_offered(&ports, &flows);
        for (&f, &rate) in flows.iter().zip(&before) {
            let fl = &self.state.flows[f as usize];
            if fl.rate == rate {
                continue;
            }
            // A rate of (nearly) nothing drains never: after every other event (NaN and
            // infinity included, which `min` takes to `never`).
            let never = (u64::MAX / 4) as f64;
            let at = now + Time((fl.remaining / fl.rate).ceil().min(never) as u64);
            self.state
                .queue
                .schedule_keyed(f, at, Event::Drained { flow: f });
        }
    }

    /// Water-fills `flows` over `ports` again, their rates unset first: after a ring's
    /// pace or progress bound moved what some of them may take.
    fn refill(&mut self, ports: &[u32], flows: &[u32]) {
        for &f in flows {
            self.state.flows[f as usize].rate = -1.0;
        }
        self.water_fill(ports, flows);
    }

    /// Max-min fair rates for `flows` (every flow on `ports`, their rates unset), by
    /// progressive filling: every unfixed flow's rate rises alike, and the link whose
    /// open weight fills it first fixes its flows at that rate, or a flow's own cap
    /// (DCQCN's rate, [`Simulation::rate_cap`]) fixes it first. Each flow notes where it
    /// was fixed (`Flow::bottleneck`).
    fn water_fill(&mut self, ports: &[u32], flows: &[u32]) {
        // Each link's open weight: the fractions of their bytes its unfixed flows put on
        // it (1 each, unless a flow spreads over several paths).
        for &l in ports {
            let link = &mut self.links[l as usize];
            link.left = link.capacity * link.shared(&self.cfg);
            link.open = 0.0;
        }
        for &f in flows {
            let fl = &self.state.flows[f as usize];
            for (k, &l) in fl.path.iter().enumerate() {
                self.links[l as usize].open += fl.weight(k);
            }
        }
        let mut heap = BinaryHeap::new();
        for &l in ports {
            let link = &self.links[l as usize];
            if link.open > OPEN_EPSILON {
                heap.push(std::cmp::Reverse((
                    share_key(link.left, link.open),
                    LINK,
                    l,
                )));
            }
        }
        let dcqcn = self.cfg.dcqcn.is_some();
        for &f in flows {
            let ring = self.state.flows[f as usize].ring_cap;
            let cap = if dcqcn {
                self.rate_cap(f).min(ring)
            } else {
                ring
            };
            if cap.is_finite() {
                heap.push(std::cmp::Reverse((cap.to_bits(), CAP, f)));
            }
        }
        // A link's share rises as flows elsewhere are fixed (each at the lowest share there
        // is, at most its own), so a key in the heap is a lower bound of its link's share:
        // a link popped with a lower key than its share now goes back with it. Rounding
        // can lower a share by an ulp: the link then goes back at once, so that links fill
        // in the order of their shares now, ties by index, as if every change were pushed.
        while let Some(std::cmp::Reverse((key, kind, l))) = heap.pop() {
            if kind == CAP {
                if self.state.flows[l as usize].rate < 0.0 {
                    self.fix(l, f64::from_bits(key), NO_HOP, &mut heap);
                }
                continue;
            }
            let link = &self.links[l as usize];
            if link.open <= OPEN_EPSILON {
                continue;
            }
            let now_key = share_key(link.left, link.open);
            if now_key != key {
                heap.push(std::cmp::Reverse((now_key, LINK, l)));
                continue;
            }
            let share = link.left / link.open;
            for i in 0..self.links[l as usize].flows.len() {
                let f = self.links[l as usize].flows[i];
                if self.state.flows[f as usize].rate >= 0.0 {
                    continue;
                }
                let hop = self.state.flows[f as usize]
                    .path
                    .iter()
                    .position(|&x| x == l)
                    .map_or(NO_HOP, |k| k as u32);
                self.fix(f, share, hop, &mut heap);
            }
        }
    }

    /// Fixes `f`'s rate at `share` (at its path's `hop`), taking it from its links and
    /// re-queueing each whose share that lowers.
    fn fix(
        &mut self,
        f: u32,
        share: f64,
        hop: u32,
        heap: &mut BinaryHeap<std::cmp::Reverse<Fill>>,
    ) {
        let fl = &mut self.state.flows[f as usize];
        fl.rate = share;
        fl.bottleneck = hop;
        let fl = &self.state.flows[f as usize];
        for (k, &other) in fl.path.iter().enumerate() {
            let w = fl.weight(k);
            let o = &mut self.links[other as usize];
            let was = share_key(o.left, o.open);
            o.left = (o.left - share * w).max(0.0);
            o.open -= w;
            if k as u32 != hop && o.open > OPEN_EPSILON && share_key(o.left, o.open) < was {
                heap.push(std::cmp::Reverse((share_key(o.left, o.open), LINK, other)));
            }
        }
    }

    /// Sets each ring edge of `flows` to demand no more than its ring's pace (its
    /// slowest edge's rate now: a ring edge forwards what reached it), moving its ports'
    /// demand by the change. Returns whether any demand moved by more than 1 %.
    fn pace_rings(&mut self, flows: &[u32]) -> bool {
        let mut rings: Vec<u32> = flows
            .iter()
            .map(|&f| self.ring_of[f as usize])
            .filter(|&r| r != NO_RING)
            .collect();
        rings.sort_unstable();
        rings.dedup();
        let mut moved = false;
        for r in rings {
            let pace = self.rings[r as usize]
                .iter()
                .map(|&e| &self.state.flows[e as usize])
                .filter(|f| f.rate > 0.0 && f.remaining > 0.0)
                .map(|f| f.rate)
                .fold(f64::INFINITY, f64::min);
            if !pace.is_finite() {
                continue;
            }
            let pace_bps = (pace * 8e12) as u64;
            for i in 0..self.rings[r as usize].len() {
                let e = self.rings[r as usize][i];
                let sender = self.sender_bps(e);
                let f = &self.state.flows[e as usize];
                if sender == 0 || f.remaining <= 0.0 {
                    continue;
                }
                let (old, new) = (f.demand_bps, sender.min(pace_bps));
                if old.abs_diff(new) * 100 <= old {
                    continue;
                }
                moved = true;
                let f = &self.state.flows[e as usize];
                for (k, &l) in f.path.iter().enumerate() {
                    let w = f.weight(k);
                    let link = &mut self.links[l as usize];
                    link.demand_bps = link.demand_bps - part(old, w) + part(new, w);
                }
                self.state.flows[e as usize].demand_bps = new;
            }
        }
        moved
    }

    /// Notes, for each compact ring edge of `flows` that meets other flows, the share
    /// of them on its most crowded link that are not ring edges (`Flow::greedy`), and
    /// how many ring edges are there (`Flow::ring_crowd`).
    fn note_greedy(&mut self, flows: &[u32]) {
        for &f in flows {
            if self.ring_of[f as usize] == NO_RING {
                continue;
            }
            let crowded = self.state.flows[f as usize]
                .path
                .iter()
                .map(|&l| &self.links[l as usize])
                .filter(|link| !link.stage)
                .max_by_key(|link| link.flows.len());
            let Some(link) = crowded.filter(|link| link.flows.len() > 1) else {
                continue;
            };
            let greedy = link
                .flows
                .iter()
                .filter(|&&o| o != f && self.ring_of[o as usize] == NO_RING)
                .count();
            let flow = &mut self.state.flows[f as usize];
            flow.greedy = greedy as f64 / (link.flows.len() - 1) as f64;
            flow.ring_crowd = (link.flows.len() - greedy) as u32;
        }
    }

    /// Marks which of the re-shared `ports` are overloaded from `now` on: their flows'
    /// senders could send more than their line rate and their rates fill the share
    /// congestion control leaves them (see [`super::FlowConfig::queue_delay`]). A port
    /// keeps the time it became overloaded while it stays so. Without a measured queue
    /// (InfiniBand, RoCEv2 without its probe) there is nothing to note. Called right
    /// after the water-filling, whose `left` is then what the port's flows leave of it.
    fn note_overloads(&mut self, ports: &[u32], now: Time) {
        if self.cfg.sharing.is_empty() {
            return;
        }
        for &l in ports {
            let link = &mut self.links[l as usize];
            // What the water-filling left of its share: none when its flows fill it.
            let full = link.left <= link.capacity * 1e-9;
            let overloaded =
                !link.stage && link.load() > 1.0 && full && link.can_congest(&self.cfg);
            link.overloaded_since = match link.overloaded_since {
                Some(since) if overloaded => Some(since),
                _ if overloaded => Some(now),
                _ => None,
            };
        }
    }
}

/// A water-filling heap entry: (share key, [`LINK`] or [`CAP`], link or flow).
type Fill = (u64, u8, u32);
/// The entry is a link's share.
const LINK: u8 = 0;
/// The entry is a flow's own cap.
const CAP: u8 = 1;

/// Re-shares after rings' paces moved their demand, at most (each round moves a pace
/// less; two rarely change anything).
const PACE_ROUNDS: usize = 3;

/// An open weight below this is none left (what rounding leaves of whole flows taken
/// away in fractions).
const OPEN_EPSILON: f64 = 1e-9;

/// A water-filling share as an orderable key: positive floats order as their bits.
fn share_key(left: f64, open: f64) -> u64 {
    (left / open).to_bits()
}
