//! A compact collective edge's pipeline: planned along its feeds at nominal rates, and
//! timed as it runs (see the module comment of `flow`).

use super::{Event, Flow, Simulation, NO_RING};
use crate::driver::{Lifecycle, MessageFabric};
use crate::workload::{Message, Pipeline};
use fabricsim_core::units::{PortId, Time};

impl Simulation {
    /// Every compact edge's [`PipelinePlan`]: its piece's nominal time, and how long
    /// the pieces it forwards take to reach it from the pipeline's start, walking its
    /// feeds (`Workload::feeds`) back at each edge's own step time. A ring's edge waits
    /// on the `steps - 1` edges before it around the ring (a flat ring's NVLink and
    /// network edges alternate on that walk); a tree or chain edge on its slowest
    /// upstream path.
    pub(super) fn plan_pipelines(&mut self, feeds: &[(u32, u32)]) {
        let n = self.state.flows.len();
        let mut upstream: Vec<Vec<u32>> = vec![Vec::new(); n];
        for &(edge, up) in feeds {
            upstream[edge as usize].push(up);
        }
        // Each edge's step: a piece's ideal time on it, after the sender's reduction.
        let mut step = vec![Time::ZERO; n];
        for (i, f) in self.state.flows.iter().enumerate() {
            let Some(p) = f.pipeline else { continue };
            let piece = Message {
                size: f.msg.size / p.pieces_on_wire().max(1),
                ..f.msg
            };
            step[i] = self.ideal_fct(&piece) + self.step_prep(p, piece.size);
        }
        let mut ahead: Vec<Option<Time>> = vec![None; n];
        for i in 0..n {
            let ahead_i = match self.state.flows[i].pipeline {
                None => continue,
                Some(Pipeline::Ring { steps, .. }) => {
                    if ahead[i].is_none() {
                        plan_ring(i as u32, steps, &upstream, &step, &mut ahead);
                    }
                    ahead[i].expect("planned with its ring")
                }
                Some(Pipeline::Chain { .. }) => upstream[i]
                    .iter()
                    .map(|&u| {
                        let before =
                            ahead[u as usize].expect("a chain edge's feeds come before it");
                        before + step[u as usize]
                    })
                    .max()
                    .unwrap_or(Time::ZERO),
            };
            ahead[i] = Some(ahead_i);
            let p = self.state.flows[i].pipeline.expect("compact");
            let nominal = Time(self.nominal_drain(i as u32).ps() / p.pieces_on_wire().max(1));
            self.state.flows[i].plan = PipelinePlan {
                nominal,
                ahead: ahead_i,
                step: step[i],
            };
        }
        self.find_rings(&upstream);
        self.fed = vec![Vec::new(); n];
        for (i, f) in self.state.flows.iter().enumerate() {
            if !matches!(f.pipeline, Some(Pipeline::Chain { .. })) {
                upstream[i].clear();
            }
            for &u in &upstream[i] {
                self.fed[u as usize].push(i as u32);
            }
        }
        self.feeds = upstream;
    }

    /// Each compact ring edge's ring: the edges met walking its feeds (`upstream`, the
    /// edge into its sender) until the walk closes.
    fn find_rings(&mut self, upstream: &[Vec<u32>]) {
        let n = self.state.flows.len();
        let is_ring = |f: &Flow| matches!(f.pipeline, Some(Pipeline::Ring { .. }));
        self.ring_of = vec![NO_RING; n];
        self.ring_pred = vec![NO_RING; n];
        self.rings.clear();
        for i in 0..n {
            if !is_ring(&self.state.flows[i]) || self.ring_of[i] != NO_RING {
                continue;
            }
            let id = self.rings.len() as u32;
            let mut members = Vec::new();
            let mut e = i;
            while self.ring_of[e] == NO_RING && is_ring(&self.state.flows[e]) {
                self.ring_of[e] = id;
                members.push(e as u32);
                match upstream[e].first() {
                    Some(&u) => e = u as usize,
                    None => break,
                }
            }
            for (j, &m) in members.iter().enumerate() {
                self.ring_pred[m as usize] = match members.get(j + 1) {
                    Some(&next) => next,
                    None if self.ring_of[e] == id && e as u32 != m => e as u32,
                    None => NO_RING,
                };
            }
            self.rings.push(members);
        }
        self.ring_round = vec![0; self.rings.len()];
        self.ring_unposted = self.rings.iter().map(|r| r.len() as u32).collect();
        self.ring_held = vec![Vec::new(); self.rings.len()];
    }

    /// A compact chain or tree edge waits, once posted, until its first piece can have
    /// reached its sender: it enters the network (or NVLink) only then, and shares the
    /// links only while it sends. A compact ring edge waits until every edge of its ring
    /// is posted: past its first step each piece it sends comes round the whole ring, so
    /// an edge whose connection is still busy with an earlier collective holds its ring
    /// back (two buckets' rings on the same connections do not run at their own paces).
    pub(super) fn post_after_feeds(&mut self, flow: u32) {
        let ring = self.ring_of[flow as usize];
        if ring != NO_RING {
            let r = ring as usize;
            self.ring_unposted[r] -= 1;
            if self.ring_unposted[r] > 0 {
                self.ring_held[r].push(flow);
                return;
            }
            for e in std::mem::take(&mut self.ring_held[r]) {
                self.post(e);
            }
        }
        let f = &self.state.flows[flow as usize];
        if matches!(f.pipeline, Some(Pipeline::Chain { .. })) && f.plan.ahead > Time::ZERO {
            let at = self.state.queue.now() + f.plan.ahead;
            self.state.queue.schedule(at, Event::Enter { flow });
        } else {
            self.post(flow);
        }
    }

    /// Completes a drained `flow` at `done` or, for a compact chain or tree edge, no
    /// earlier than its last piece can have come in over each feed and gone on (the
    /// feed's completion plus its own step, at the share its links would give it now):
    /// held until every feed has completed.
    pub(super) fn complete(&mut self, flow: u32, done: Time) {
        let mut at = done;
        let feeds = &self.feeds[flow as usize];
        if !feeds.is_empty() {
            let mut last = Time::ZERO;
            for &f in feeds {
                match self.state.flows[f as usize].life.finish {
                    Some(t) => last = last.max(t),
                    None => {
                        self.state.flows[flow as usize].held = Some(done);
                        return;
                    }
                }
            }
            at = at.max(last + self.state.flows[flow as usize].plan.step + self.piece_delay(flow));
        }
        self.state.queue.schedule(at, Event::Finished { flow });
    }

    /// How much longer than nominal one of a compact edge's pieces would take now, at an
    /// equal share of each of its links with the flows crossing it.
    fn piece_delay(&self, flow: u32) -> Time {
        let f = &self.state.flows[flow as usize];
        let Some(p) = f.pipeline else {
            return Time::ZERO;
        };
        let piece = self.flow_wire(f) as f64 / p.pieces_on_wire().max(1) as f64;
        let rate = f
            .path
            .iter()
            .enumerate()
            .map(|(k, &l)| {
                let link = &self.links[l as usize];
                let others =
                    link.flows.iter().filter(|&&o| o != flow).count() + link.released as usize;
                link.capacity * link.share(&self.cfg) / (others + 1) as f64 / f.weight(k)
            })
            .fold(f64::INFINITY, f64::min);
        if !rate.is_finite() {
            return Time::ZERO;
        }
        Time((piece / rate).ceil() as u64).saturating_sub(f.plan.nominal)
    }

    /// `flow` completed: the edges it feeds that were held for it may complete.
    /// Those released together send their last pieces together: each counts the others
    /// on its links.
    pub(super) fn release_held(&mut self, flow: u32) {
        let fed = std::mem::take(&mut self.fed[flow as usize]);
        let released: Vec<u32> = fed
            .iter()
            .copied()
            .filter(|&e| self.state.flows[e as usize].held.is_some())
            .collect();
        self.count_released(&released, 1);
        for &e in &released {
            let done = self.state.flows[e as usize].held.take().expect("held");
            self.count_released(&[e], -1);
            self.complete(e, done);
            self.count_released(&[e], 1);
        }
        self.count_released(&released, -1);
        self.fed[flow as usize] = fed;
    }

    /// Adds `by` to the released count of each link of `edges`.
    fn count_released(&mut self, edges: &[u32], by: i32) {
        for &e in edges {
            for &l in &self.state.flows[e as usize].path {
                let link = &mut self.links[l as usize];
                link.released = link.released.checked_add_signed(by).expect("counted once");
            }
        }
    }

    /// A compact edge's transfer time alone on idle links: at its path's slowest port,
    /// or over NVLink.
    fn nominal_drain(&self, flow: u32) -> Time {
        let f = &self.state.flows[flow as usize];
        if Lifecycle::is_local(&self.topo, &f.msg) {
            return self
                .state
                .lifecycle
                .ideal_local(&self.topo, &f.msg)
                .expect("a local message")
                .saturating_sub(self.cfg.tx_latency)
                .saturating_sub(self.topo.nvlink().latency);
        }
        let slowest = f
            .path
            .iter()
            .filter(|&&p| (p as usize) < self.topo.ports().len())
            .map(|&p| self.topo.port(PortId(p)).rate)
            .min_by_key(|r| r.bps())
            .expect("a path has a port");
        slowest.serialization(self.flow_wire(f))
    }

    /// A ring step's reduction or copy of one `piece` on the GPU, on average over the
    /// ring's steps (none without a GPU memory bandwidth).
    fn step_prep(&self, p: Pipeline, piece: u64) -> Time {
        match (p, self.topo.nvlink().gpu_memory) {
            (Pipeline::Ring { steps, passes, .. }, Some(memory)) if steps > 1 => {
                Time(memory.serialization(piece * passes as u64).ps() / (steps as u64 - 1))
            }
            _ => Time::ZERO,
        }
    }
}

/// Sets `ahead` for every edge of the ring `edge` is on: the sum of the steps of the
/// `steps - 1` edges before it (following the feeds, round the ring as often as it
/// takes).
fn plan_ring(
    edge: u32,
    steps: u32,
    upstream: &[Vec<u32>],
    step: &[Time],
    ahead: &mut [Option<Time>],
) {
    let mut ring = vec![edge];
    loop {
        let last = *ring.last().expect("not empty") as usize;
        let &[up] = upstream[last].as_slice() else {
            panic!("a ring edge has one feed");
        };
        if up == edge {
            break;
        }
        ring.push(up);
    }
    let len = ring.len();
    let total: u64 = ring.iter().map(|&e| step[e as usize].ps()).sum();
    // prefix[j]: the steps of ring[0..j], round the ring twice.
    let mut prefix = vec![0u64; 2 * len + 1];
    for j in 0..2 * len {
        prefix[j + 1] = prefix[j] + step[ring[j % len] as usize].ps();
    }
    let before = steps.saturating_sub(1) as usize;
    let (rounds, rest) = ((before / len) as u64, before % len);
    for (j, &e) in ring.iter().enumerate() {
        let window = prefix[j + 1 + rest] - prefix[j + 1];
        ahead[e as usize] = Some(Time(rounds * total + window));
    }
}

/// A compact edge's pipeline at nominal rates: a piece's time on its own (`nominal`),
/// and `ahead`, from the pipeline's start until the first piece it must wait for
/// arrives: a ring edge's last step's, a chain or tree edge's first (see
/// `Simulation::plan_pipelines`).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct PipelinePlan {
    nominal: Time,
    ahead: Time,
    /// A piece's ideal time on the edge, after its sender's reduction.
    step: Time,
}

impl PipelinePlan {
    /// What the pipeline adds to the edge's drain time (`drain`: from its posting to its
    /// last byte leaving, at the rates it got).
    ///
    /// A ring of K steps of P pieces, each of time t = drain / (K P): piece p of step k
    /// leaves at the later of the edge's previous piece and the same piece of step k-1
    /// arriving from upstream, so the last leaves at
    /// max(K P t, ahead + (K - 1) d + P t) - t: the edge is either busy throughout or
    /// waits on the ring's latency, each step later by d. Its pieces' delay t - nominal
    /// comes from the flows sharing its links: the `greedy` share of them on its most
    /// crowded link (not edges of rings), and the `rings` edges of rings there, itself
    /// among them (`Flow::ring_crowd`). The greedy share sends whenever it can, and delays
    /// every step. The rest are rings' edges, which send in bursts between their own
    /// latencies as this edge does, so their bytes partly fit into the time this edge
    /// idles each step: [`multiplexed_step`]. A chain or tree edge enters only once its
    /// first piece is in (`Simulation::post_after_feeds`) and ends no earlier than its
    /// feeds allow (`Simulation::complete`): nothing to add.
    pub(super) fn wait(self, p: Pipeline, drain: Time, greedy: f64, rings: u32) -> Time {
        match p {
            Pipeline::Ring { steps, pieces, .. } => {
                let t = Time(drain.ps() / p.pieces_on_wire().max(1));
                let slower = self.slower(p, drain).ps() as f64;
                let busy = (self.nominal * pieces as u64).ps() as f64;
                let idle = self.step.ps() as f64 - busy;
                let greedy = greedy.clamp(0.0, 1.0);
                // What the other rings' edges alone would add to a step at an equal share.
                let by_rings = slower * (1.0 - greedy);
                let ring_delay = if idle > 0.0 && by_rings > 0.0 {
                    multiplexed_step(rings.max(1), busy, busy + by_rings, idle) - (busy + idle)
                } else {
                    (by_rings - idle.max(0.0)).max(0.0)
                };
                let delay = slower * greedy + ring_delay.max(0.0);
                let latency_bound =
                    self.ahead + Time(delay as u64) * (steps.max(1) as u64 - 1) + t * pieces as u64;
                latency_bound.saturating_sub(drain)
            }
            Pipeline::Chain { .. } => Time::ZERO,
        }
    }

    /// Whether the ring's latency, not the edge's bytes, bounds it at nominal rates
    /// (the second term of [`Self::wait`]'s max the larger, with no delay).
    pub(super) fn latency_bound(self, p: Pipeline) -> bool {
        let Pipeline::Ring { pieces, .. } = p else {
            return false;
        };
        let on_wire = p.pieces_on_wire().max(1);
        self.ahead + self.nominal * pieces as u64 > self.nominal * on_wire
    }

    /// A piece's time from its posting to its completion: its step, slower by what the
    /// edge's `drain` showed.
    pub(super) fn piece_time(self, p: Pipeline, drain: Time) -> Time {
        self.step + self.slower(p, drain)
    }

    /// How much longer than nominal each piece took, at the edge's `drain`.
    fn slower(self, p: Pipeline, drain: Time) -> Time {
        Time(drain.ps() / p.pieces_on_wire().max(1)).saturating_sub(self.nominal)
    }
}

/// A ring step's time where `n` ring edges like this one share a link, each sending a
/// step's bytes in `busy` alone and waiting `idle` (the ring's latency) between steps,
/// and `shared` is a step's bytes' time at an equal share of the link with all `n`
/// sending at once (so the link holds m = n busy / shared of them at their line rate).
///
/// The edges start in lockstep (all sending together, then all waiting: a step of
/// idle + shared) and drift towards perfect interleaving (max(busy + idle, shared)): on
/// two 32-rank rings of 4 MiB at packet level, an edge's step falls from 6.9 to about
/// 5.4 us over the collective's 62 steps (BENCHMARKS.md). Their phases are taken as
/// independent, between the two: at any moment an edge sends with probability
/// a = 1 - idle / S, S the step, and the link passes min(m, N) edges' worth of line
/// rate with N ~ Binomial(n, a), as bursty on-off sources are multiplexed. Over a step
/// the link passes the n edges' bytes, S E[min(m, N)] = n busy, solved for S by
/// bisection. The solution is perfect interleaving where m >= n (the link never full)
/// or idle = 0 (always sending). A model choice, chosen by its error on the calibration
/// suite (the two-ring cases there), not derived.
pub(super) fn multiplexed_step(n: u32, busy: f64, shared: f64, idle: f64) -> f64 {
    let m = n as f64 * busy / shared;
    let perfect = (busy + idle).max(shared);
    if m >= n as f64 || idle <= 0.0 {
        return perfect;
    }
    let passed = |s: f64| expected_min(n, 1.0 - idle / s, m) * s;
    let target = n as f64 * busy;
    // At the lockstep bound E[min(m, N)] >= m E[N] / n = m a, so the link passes at
    // least n busy there: the solution lies between the bounds.
    let (mut lo, mut hi) = (perfect, idle + shared);
    for _ in 0..60 {
        let mid = 0.5 * (lo + hi);
        if passed(mid) < target {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    hi
}

/// E[min(m, N)] for N ~ Binomial(n, a).
fn expected_min(n: u32, a: f64, m: f64) -> f64 {
    let a = a.clamp(0.0, 1.0);
    if a >= 1.0 {
        return m.min(n as f64);
    }
    // ln P(N = k), built up from ln P(N = 0) = n ln(1 - a) by the ratio of successive
    // terms (in logarithms, so that a large n does not underflow the first terms).
    let ratio = (a / (1.0 - a)).ln();
    let mut ln_pk = n as f64 * (1.0 - a).ln();
    let mut sum = 0.0;
    for k in 0..=n {
        sum += ln_pk.exp() * m.min(k as f64);
        ln_pk += ratio + ((n - k) as f64 / (k + 1) as f64).ln();
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::{expected_min, multiplexed_step};

    /// E[min(m, N)] by the binomial coefficients directly.
    fn by_coefficients(n: u32, a: f64, m: f64) -> f64 {
        let mut choose = 1.0;
        let mut sum = 0.0;
        for k in 0..=n {
            sum += choose * a.powi(k as i32) * (1.0 - a).powi((n - k) as i32) * m.min(k as f64);
            choose *= (n - k) as f64 / (k + 1) as f64;
        }
        sum
    }

    #[test]
    fn expected_min_is_the_binomial_expectation_and_holds_at_large_n() {
        for (n, a, m) in [(1, 0.3, 0.5), (4, 0.7, 2.0), (7, 0.55, 3.5), (16, 0.2, 4.0)] {
            let (got, want) = (expected_min(n, a, m), by_coefficients(n, a, m));
            assert!((got - want).abs() < 1e-12, "{n} {a} {m}: {got} {want}");
        }
        // Where the link never fills, min(m, N) = N, whose mean is n a: (1 - a)^n
        // underflows at n = 3000, its logarithm does not.
        let got = expected_min(3000, 0.6, 3000.0);
        assert!((got - 1800.0).abs() < 1e-6, "{got}");
        assert_eq!(expected_min(5, 1.0, 2.5), 2.5);
        assert_eq!(expected_min(5, 0.0, 2.5), 0.0);
    }

    #[test]
    fn a_multiplexed_step_lies_between_perfect_interleaving_and_lockstep_and_passes_the_bytes() {
        let (busy, idle) = (2.65, 1.7);
        // A link that holds every edge at line rate (m >= n), or edges that never wait:
        // the perfectly interleaved step.
        assert_eq!(multiplexed_step(4, busy, busy, idle), busy + idle);
        assert_eq!(multiplexed_step(4, busy, 2.0 * busy, 0.0), 2.0 * busy);
        for (n, m) in [
            (2_u32, 1.0),
            (4, 2.0),
            (4, 3.0),
            (8, 2.0),
            (16, 4.0),
            (5, 1.5),
        ] {
            let shared = n as f64 * busy / m;
            let s = multiplexed_step(n, busy, shared, idle);
            let (perfect, lockstep) = ((busy + idle).max(shared), idle + shared);
            assert!(
                perfect <= s && s <= lockstep,
                "{n} {m}: {perfect} {s} {lockstep}"
            );
            // Over a step the link passes the edges' bytes: S E[min(m, N)] = n busy.
            let passed = s * expected_min(n, 1.0 - idle / s, m);
            assert!(
                (passed / (n as f64 * busy) - 1.0).abs() < 1e-9,
                "{n} {m}: {passed}"
            );
        }
        // Two edges on a link that holds one at line rate collide whenever both send.
        let s = multiplexed_step(2, busy, 2.0 * busy, idle);
        assert!(s > 2.0 * busy + 0.05, "{s}");
    }
}
