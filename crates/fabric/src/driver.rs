//! What the fabrics share: the run loop over their event handlers, a link's frames in
//! flight, and the ideal completion time of a message on an empty fabric.

use crate::workload::Message;
use fabricsim_core::topology::{Routes, Topology};
use fabricsim_core::units::Time;
use std::collections::VecDeque;

/// The frames in flight on one link, in arrival order. The link keeps one pending arrival
/// event, for its head: [`push`](Wire::push) says when to schedule it, and
/// [`pop`](Wire::pop) says when the next one is due.
#[derive(Clone, Debug)]
pub struct Wire<F> {
    frames: VecDeque<(Time, F)>,
}

impl<F> Default for Wire<F> {
    fn default() -> Self {
        Wire {
            frames: VecDeque::new(),
        }
    }
}

impl<F> Wire<F> {
    /// Adds a frame that reaches the far end at `arrival` (arrivals never decrease).
    /// Returns true when it is the head, whose arrival event the caller must schedule.
    pub fn push(&mut self, arrival: Time, frame: F) -> bool {
        debug_assert!(self.frames.back().is_none_or(|&(t, _)| t <= arrival));
        self.frames.push_back((arrival, frame));
        self.frames.len() == 1
    }

    /// Removes the head at its arrival; returns it and the arrival time of the new head,
    /// whose event the caller must schedule.
    pub fn pop(&mut self) -> (F, Option<Time>) {
        let (_, frame) = self
            .frames
            .pop_front()
            .expect("an arrival event implies a frame on the wire");
        (frame, self.frames.front().map(|&(t, _)| t))
    }

    /// The frames in flight, head first.
    pub fn frames(&self) -> impl Iterator<Item = &F> {
        self.frames.iter().map(|(_, f)| f)
    }

    /// Bytes of simulator state per frame in flight.
    pub const fn entry_bytes() -> usize {
        std::mem::size_of::<(Time, F)>()
    }
}

/// A simulation driven one event at a time.
pub trait EventDriven {
    /// Whether the run is over: all flows acknowledged, `stop_at` passed, or nothing left.
    fn is_finished(&self) -> bool;
    /// The time of the next event, if any.
    fn next_event_time(&mut self) -> Option<Time>;
    /// Handles the next event (or notes that `stop_at` was reached).
    fn pop_one(&mut self);

    /// Processes up to `max_events` events; returns true when the run is over.
    fn step(&mut self, max_events: u64) -> bool {
        for _ in 0..max_events {
            if self.is_finished() {
                return true;
            }
            self.pop_one();
        }
        self.is_finished()
    }

    /// Runs to the end.
    fn run(&mut self) {
        while !self.step(u64::MAX) {}
    }

    /// Processes every event at or before `t` (or until the run is over).
    fn run_until(&mut self, t: Time) {
        while !self.is_finished() && self.next_event_time().is_some_and(|next| next <= t) {
            self.pop_one();
        }
    }
}

/// Ideal completion of `m` on an empty fabric: the endpoints' fixed latencies,
/// propagation over every link, a switch latency per switch, the whole message serialised
/// once at the source's rate, and the last packet re-serialised at every
/// store-and-forward switch. `frame_len(payload, first)` is a packet's link bytes.
pub fn ideal_fct(
    topo: &Topology,
    routes: &Routes,
    m: &Message,
    mtu: u32,
    endpoint_latency: Time,
    switch_latency: Time,
    frame_len: impl Fn(u32, bool) -> u64,
) -> Time {
    let hops = routes.hops(m.src, m.dst) as u64;
    let spec = topo.port(topo.host_port(m.src));
    let packets = m.size.div_ceil(mtu as u64);
    let last_payload = (m.size - (packets - 1) * mtu as u64) as u32;
    let last = frame_len(last_payload, packets == 1);
    let total = if packets > 1 {
        frame_len(mtu, true) + (packets - 2) * frame_len(mtu, false) + last
    } else {
        last
    };
    endpoint_latency
        + spec.delay * hops
        + (switch_latency + spec.rate.serialization(last)) * (hops - 1)
        + spec.rate.serialization(total)
}

/// Which packets to keep for a capture.
#[derive(Clone, Debug, Default)]
pub struct CaptureFilter {
    /// Keep at most this many packets.
    pub limit: Option<u64>,
    /// Keep only these flows (indices into the message list); frames of no flow (PFC)
    /// are then left out.
    pub flows: Option<Vec<u32>>,
}

impl CaptureFilter {
    /// Whether to keep a packet of `flow` (None: a frame of no flow) when `kept` are
    /// already kept.
    pub fn wants(&self, flow: Option<u32>, kept: usize) -> bool {
        if self.limit.is_some_and(|l| kept as u64 >= l) {
            return false;
        }
        match (&self.flows, flow) {
            (None, _) => true,
            (Some(fs), Some(f)) => fs.contains(&f),
            (Some(_), None) => false,
        }
    }
}
