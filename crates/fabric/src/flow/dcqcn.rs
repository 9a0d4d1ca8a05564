//! DCQCN as a fluid model, after Zhu et al., "ECN or Delay" (CoNEXT 2016), on the
//! flow-level network: RoCEv2's default congestion control run rather than probed.
//!
//! - Each switch egress holds a fluid queue: it grows by what its flows' senders feed it
//!   beyond its line rate and drains at its line rate, up to `FluidDcqcn::queue_cap`,
//!   where PFC pauses the senders (or, without PFC, the buffer is full).
//! - A flow's sender feeds every port up to its bottleneck (where the water-filling fixed
//!   its rate) at what it sends: its reaction point's rate, at most its ring's pace, its
//!   NIC's line rate split among the NIC's flows in proportion; past its bottleneck it
//!   carries its fair share.
//! - While a port holds a queue it sends at its line rate, shared max-min among its
//!   flows; a flow crossing no queue is held to its reaction point's rate.
//! - RED marks what leaves a queue above Kmin with its probability: in each step a
//!   seeded draw per flow says whether any of the packets it sent through the queue was
//!   marked (so that, as at packet level, some connections are cut more than others),
//!   and its receiver returns a CNP for a marked packet once `cnp_interval` has passed
//!   since its last (marks within the interval are lost, as at packet level). The
//!   marks reported are the expectation (probability times packets).
//! - Each connection's sender is the packet model's reaction point (`proto::dcqcn`, the
//!   same parameters): CNPs cut it, its timers and byte counter raise it again, and it
//!   passes along the connection from message to message.
//!
//! The fluid is stepped every [`TICK`] while some port holds or builds a queue or some
//! sender recovers below its line rate; nothing is stepped elsewhere. Left out: the
//! CNP's way back (it acts at once), PFC's pauses spreading upstream to other flows, and
//! a message's wait behind a queue it arrives at.

use super::{Simulation, NO_HOP};
use crate::flow::Event;
use crate::workload::Pipeline;
use fabricsim_core::proto::dcqcn::Dcqcn;
use fabricsim_core::proto::ecn::marking_draw;
use fabricsim_core::units::{BitRate, Time};

/// The fluid's time step, 0.4 us: a tenth of the 4 us between DCQCN's rate cuts and
/// CNPs at ConnectX's defaults, under its 1 us alpha period. A discretisation choice
/// (unverified: `fabricsim calibrate` measures the model it gives against packet level).
pub const TICK: Time = Time(400_000);

/// The shortest burst the fluid follows, 4 us (ten steps, and the period of DCQCN's
/// rate cuts at ConnectX's defaults): a latency-bound ring edge whose pieces each last
/// at least this long at its sender's line rate feeds its ports at that rate, since its
/// queues build within each piece (a 64-rank ring of 32 MiB across the leaves of a 2:1
/// leaf-spine sends 512 KiB pieces, 10.5 us at 400G, and at packet level queues 10.7 MB
/// on the uplinks ECMP crowds); shorter pieces are over before the fluid and DCQCN
/// follow them, and feed their ports at the ring's pace. A discretisation choice,
/// judged by the calibration suite (BENCHMARKS.md).
pub const RESOLVED_BURST: Time = Time(10 * TICK.0);

/// The stepping's state.
#[derive(Clone, Debug, Default)]
pub(super) struct FluidState {
    /// A step is scheduled.
    pub due: bool,
    /// The last step's time.
    pub last: Time,
    /// Ports holding or building a queue (each once: `Link::cc_hot`).
    pub links: Vec<u32>,
    /// Flows whose reaction point is below its line rate (each once: `Flow::cc_listed`).
    pub flows: Vec<u32>,
    /// Expected marked packets so far, and CNPs sent.
    pub marks: f64,
    pub cnps: u64,
    /// Marking draws made.
    pub draws: u64,
}

impl Simulation {
    /// What `flow`'s sender would send now, bytes per picosecond, before its NIC splits
    /// its line rate: its reaction point's rate, at most its ring's pace where its sender
    /// sends a piece at a time (a latency-bound ring or a chain: `burst_wire`) and each
    /// piece is over within [`RESOLVED_BURST`]; a ring bound by bandwidth sends each
    /// step's data at once, at its sender's rate, and so does one whose pieces last
    /// longer at that rate.
    fn wanted(&self, flow: u32) -> f64 {
        let f = &self.state.flows[flow as usize];
        let paced = f.demand_bps as f64 / 8e12;
        let line = self.sender_bps(flow) as f64 / 8e12;
        let resolved = |p: Pipeline| {
            let piece = self.flow_wire(f) as f64 / p.pieces_on_wire().max(1) as f64;
            piece >= line * RESOLVED_BURST.ps() as f64
        };
        let pace = match (f.pipeline, Self::piecewise(f)) {
            (Some(_), None) => line,
            (Some(_), Some(p)) if matches!(p, Pipeline::Ring { .. }) && resolved(p) => line,
            _ => paced,
        };
        let pace = pace.min(f.ring_cap);
        match &f.rp {
            Some(rp) => pace.min(rp.rate().bps() as f64 / 8e12),
            None => pace,
        }
    }

    /// The most `flow` may be given by the water-filling, bytes per picosecond: where
    /// ports on its path hold a queue, what it feeds them in proportion to their line
    /// rate over all they are fed (FIFO service), the least of them; elsewhere its
    /// reaction point's rate.
    pub(super) fn rate_cap(&self, flow: u32) -> f64 {
        let f = &self.state.flows[flow as usize];
        let served = f
            .path
            .iter()
            .map(|&l| &self.links[l as usize])
            .filter(|link| link.queue > 0.0 && link.offered > 0.0)
            .map(|link| link.capacity / link.offered)
            .fold(f64::INFINITY, f64::min);
        if served.is_finite() {
            return f.sent * served;
        }
        match &f.rp {
            Some(rp) => rp.rate().bps() as f64 / 8e12,
            None => f64::INFINITY,
        }
    }

    /// After a water-filling of `flows` over `ports`: what their senders feed each port,
    /// and the ports that hold or build a queue listed for stepping.
    pub(super) fn note_offered(&mut self, ports: &[u32], flows: &[u32]) {
        if self.cfg.dcqcn.is_none() {
            return;
        }
        for &l in ports {
            self.links[l as usize].offered = 0.0;
        }
        // What each NIC's flows want of it.
        for &f in flows {
            let want = self.wanted(f);
            let fl = &self.state.flows[f as usize];
            if let Some(&l) = fl.path.first() {
                if self.links[l as usize].host_egress {
                    self.links[l as usize].offered += want * fl.weight(0);
                }
            }
        }
        for &f in flows {
            let want = self.wanted(f);
            let fl = &self.state.flows[f as usize];
            let nic = match fl.path.first() {
                Some(&l) if self.links[l as usize].host_egress => {
                    let link = &self.links[l as usize];
                    (link.capacity / link.offered.max(f64::MIN_POSITIVE)).min(1.0)
                }
                _ => 1.0,
            };
            let (bottleneck, rate) = (fl.bottleneck, fl.rate);
            let path = std::mem::take(&mut self.state.flows[f as usize].path);
            for (k, &l) in path.iter().enumerate() {
                if self.links[l as usize].host_egress {
                    continue;
                }
                let upstream = bottleneck != NO_HOP && k as u32 <= bottleneck;
                let sent = if upstream { want * nic } else { rate };
                let w = self.state.flows[f as usize].weight(k);
                self.links[l as usize].offered += sent * w;
            }
            let fl = &mut self.state.flows[f as usize];
            fl.path = path;
            fl.sent = want * nic;
        }
        for &l in ports {
            let link = &mut self.links[l as usize];
            if link.host_egress {
                link.offered = 0.0;
                continue;
            }
            let building = link.offered > link.capacity * (1.0 + 1e-9);
            if !link.stage && link.line_bps > 0 && (building || link.queue > 0.0) && !link.cc_hot {
                link.cc_hot = true;
                self.fluid.links.push(l);
            }
        }
        self.schedule_step();
    }

    /// Schedules the next step if something is to step and none is due.
    fn schedule_step(&mut self) {
        if self.fluid.due || (self.fluid.links.is_empty() && self.fluid.flows.is_empty()) {
            return;
        }
        let now = self.state.queue.now();
        if self.fluid.links.is_empty() || now > self.fluid.last + TICK {
            // Nothing stepped since: the step starts now.
            self.fluid.last = now;
        }
        self.fluid.due = true;
        self.state.queue.schedule(now + TICK, Event::FluidStep);
    }

    /// One step of the fluid since the last: queues move, RED marks, receivers send
    /// CNPs, reaction points cut and recover; flows whose rate cap moved are re-shared.
    pub(super) fn fluid_step(&mut self) {
        self.fluid.due = false;
        let Some(cc) = self.cfg.dcqcn.clone() else {
            return;
        };
        let now = self.state.queue.now();
        let dt = (now - self.fluid.last).ps() as f64;
        self.fluid.last = now;
        let frame = self.cfg.frame_len(self.cfg.mtu, false) as f64;
        // Queues, and the marks on what left them.
        let links = std::mem::take(&mut self.fluid.links);
        let mut kept = Vec::with_capacity(links.len());
        for l in links {
            let link = &mut self.links[l as usize];
            let was = link.queue;
            let q = (was + (link.offered - link.capacity) * dt).clamp(0.0, cc.queue_cap);
            link.queue = q;
            if (was > 0.0) != (q > 0.0) {
                for i in 0..self.links[l as usize].flows.len() {
                    let f = self.links[l as usize].flows[i];
                    self.touch(f);
                }
            }
            let link = &self.links[l as usize];
            let p = cc.red_on(link.line_bps).probability(q as u64);
            if p > 0.0 {
                for &f in &link.flows {
                    let fl = &mut self.state.flows[f as usize];
                    let k = fl.path.iter().position(|&x| x == l).unwrap_or(0);
                    let packets = fl.rate * fl.weight(k) * dt / frame;
                    self.fluid.marks += p * packets;
                    // Whether any of them was marked: one seeded draw per flow and step.
                    self.fluid.draws += 1;
                    let u = marking_draw(cc.seed, f, self.fluid.draws);
                    if u < 1.0 - (1.0 - p).powf(packets) {
                        fl.marked = true;
                    }
                    if !fl.cc_listed {
                        fl.cc_listed = true;
                        self.fluid.flows.push(f);
                    }
                }
            }
            let link = &mut self.links[l as usize];
            if q > 0.0 || link.offered > link.capacity * (1.0 + 1e-9) {
                kept.push(l);
            } else {
                link.cc_hot = false;
            }
        }
        self.fluid.links = kept;
        // Receivers' CNPs and senders' reaction points.
        let flows = std::mem::take(&mut self.fluid.flows);
        let mut kept = Vec::with_capacity(flows.len());
        for f in flows {
            let line = BitRate(self.sender_bps(f));
            let fl = &mut self.state.flows[f as usize];
            let sending = fl.remaining > 0.0 && !fl.path.is_empty();
            if fl.last_cnp.is_some_and(|t| now < t + cc.cnp_interval) {
                fl.marked = false;
            } else if fl.marked {
                fl.marked = false;
                fl.last_cnp = Some(now);
                self.fluid.cnps += 1;
                let rp = fl.rp.get_or_insert_with(|| Box::new(Dcqcn::new(line)));
                rp.advance(now, &cc.params);
                rp.on_cnp(now, &cc.params);
            }
            let before = fl.cap_seen;
            if let Some(rp) = fl.rp.as_mut() {
                rp.advance(now, &cc.params);
                rp.on_sent((fl.rate * dt) as u64, &cc.params);
                fl.cap_seen = rp.rate().bps() as f64 / 8e12;
            }
            let recovering = fl.rp.as_ref().is_some_and(|rp| rp.rate() < line);
            if sending && (recovering || fl.marked) {
                kept.push(f);
            } else {
                fl.cc_listed = false;
            }
            if sending && (fl.cap_seen - before).abs() > 1e-3 * before.max(f64::MIN_POSITIVE) {
                self.touch(f);
            }
        }
        self.fluid.flows = kept;
        self.schedule_step();
    }

    /// DCQCN's marks and CNPs so far (expected marks rounded).
    pub(super) fn fluid_counts(&self) -> (u64, u64) {
        (self.fluid.marks.round() as u64, self.fluid.cnps)
    }

    /// `next` takes over `prev`'s connection: its reaction point and its last CNP.
    pub(super) fn hand_on_rate(&mut self, prev: u32, next: u32) {
        let (rp, last) = {
            let p = &mut self.state.flows[prev as usize];
            (p.rp.take(), p.last_cnp)
        };
        let n = &mut self.state.flows[next as usize];
        n.cap_seen = rp
            .as_ref()
            .map_or(f64::INFINITY, |r| r.rate().bps() as f64 / 8e12);
        n.rp = rp;
        n.last_cnp = last;
        if n.rp.is_some() && !n.cc_listed {
            n.cc_listed = true;
            self.fluid.flows.push(next);
        }
    }
}
