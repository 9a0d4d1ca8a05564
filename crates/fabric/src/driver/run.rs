//! The run loop the packet-level fabrics share: their run state, the trait their event handlers implement, and the lookahead that splits a run over threads.

use super::{CaptureFilter, Lifecycle, Tracked};
use crate::report::{Deadlock, FlowResult, PortResult, RunReport};
use crate::workload::Message;
use fabricsim_core::engine::EventQueue;
use fabricsim_core::topology::Topology;
use fabricsim_core::units::Time;

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

/// The events a fabric schedules for the message life cycle.
pub(crate) trait LifecycleEvent {
    /// A message is posted to its sender.
    fn post(flow: u32) -> Self;
    /// A transfer inside a server landed.
    fn local_done(flow: u32) -> Self;
}

/// What every fabric simulation keeps besides its own model: the event queue, the
/// messages' flows and their life cycle, when and why the run stops, and the capture.
pub(crate) struct RunState<E, F, C> {
    pub queue: EventQueue<E>,
    pub flows: Vec<F>,
    pub lifecycle: Lifecycle,
    pub stop_at: Option<Time>,
    /// Events were left when `stop_at` was reached.
    pub stopped_by_time: bool,
    /// A deadlock that stopped the run.
    pub deadlock: Option<Deadlock>,
    /// What to capture, and what has been.
    pub capture: Option<(CaptureFilter, Vec<C>)>,
    /// A fabric that can split a run over threads cuts time into windows of this length
    /// from zero; its run ends at the first window line after its last completion (every
    /// event before the line is handled), so that it ends alike on any number of threads.
    /// `None`: the run ends at the event that completes its last message.
    pub grid: Option<Time>,
    /// The window line the run ends at, once every message has completed.
    pub drain_until: Option<Time>,
    /// Every event before `drain_until` has been handled.
    pub drained: bool,
    /// A run split over threads once its parts are merged: its events, its last event's
    /// time and its windows (the merged run has no queue of its own).
    pub merged: Option<Merged>,
}

/// What a split run's coordinator counted, kept by the merged run.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Merged {
    pub events: u64,
    pub now: Time,
    pub windows: u64,
}

/// The lookahead of a packet-level run split over threads, which is also its window grid
/// ([`RunState::grid`]): a frame sent at t reaches the far end of its link no sooner than
/// the link's delay plus the serialisation of the model's smallest frame,
/// `smallest_frame` bytes, after t; a completion posts a dependent sent from another
/// server no sooner than [`Lifecycle::cross_server_slack`] later (`slack`); a blocked
/// queue (a PAUSE arriving, a credit stall) schedules the deadlock check
/// `deadlock_check` later. At least 1 ps.
pub fn lookahead(
    topo: &Topology,
    smallest_frame: u64,
    slack: Option<Time>,
    deadlock_check: Time,
) -> Time {
    ([link_lookahead(topo, smallest_frame)].into_iter())
        .chain(slack)
        .chain([deadlock_check])
        .min()
        .unwrap_or(Time::MAX)
        .max(Time(1))
}

/// The links' part of [`lookahead`]: the smallest link delay plus the serialisation of
/// `smallest_frame` bytes (`Time::MAX` without links).
pub fn link_lookahead(topo: &Topology, smallest_frame: u64) -> Time {
    (topo.ports().iter())
        .map(|p| {
            let per_byte = p.rate.whole_ps_per_byte().unwrap_or(0);
            p.delay + p.rate.serialization_by(per_byte, smallest_frame)
        })
        .min()
        .unwrap_or(Time::MAX)
}

/// The first line of a grid of `grid` after `t`.
pub fn grid_line_after(t: Time, grid: Time) -> Time {
    Time((t.ps() / grid.ps() + 1) * grid.ps())
}

impl<E, F, C> RunState<E, F, C> {
    /// A run about to start: its queue (the first posts scheduled), its messages, their
    /// life cycle, where it stops, and its lookahead grid (None on one thread).
    pub fn new(
        queue: EventQueue<E>,
        flows: Vec<F>,
        lifecycle: Lifecycle,
        stop_at: Option<Time>,
        grid: Option<Time>,
    ) -> Self {
        RunState {
            queue,
            flows,
            lifecycle,
            stop_at,
            stopped_by_time: false,
            deadlock: None,
            capture: None,
            grid,
            drain_until: None,
            drained: false,
            merged: None,
        }
    }

    /// The next event due by `stop_at` (and, once every message has completed on a
    /// fabric with a lookahead grid, before the grid's next line); `None` once none is,
    /// noting why.
    #[inline(always)]
    pub fn next_event(&mut self) -> Option<(Time, E)> {
        let stop = self.stop_at.unwrap_or(Time::MAX);
        let limit = match self.drain_until {
            None => stop,
            Some(d) => stop.min(Time(d.ps() - 1)),
        };
        let next = self.queue.pop_until(limit);
        if next.is_none() {
            self.note_end(stop);
        }
        next
    }

    /// Nothing was left before `stop` (or the drain's end): why the run ends.
    #[cold]
    fn note_end(&mut self, stop: Time) {
        match self.drain_until {
            Some(d) if d.ps() - 1 < stop.ps() => self.drained = true,
            _ => self.stopped_by_time = !self.queue.is_empty(),
        }
    }

    /// A message completed now: on a fabric with a lookahead grid, the last one starts
    /// the drain to the grid's next line.
    pub fn note_completion(&mut self) {
        if let (Some(grid), None) = (self.grid, self.drain_until) {
            if self.lifecycle.completed == self.flows.len() {
                self.drain_until = Some(grid_line_after(self.queue.now(), grid));
            }
        }
    }

    /// Every message's outcome, with its ideal completion time.
    fn flow_results(&self, ideal: impl Fn(&Message) -> Time) -> Vec<FlowResult>
    where
        F: Tracked,
    {
        self.flows
            .iter()
            .map(|f| f.progress().result(f.message(), ideal(f.message())))
            .collect()
    }

    /// The report's run-wide part: simulated time, events, every message's outcome (with
    /// its ideal completion time), `ports`, why the run ended; every counter a fabric
    /// keeps is zero, for it to fill in.
    pub fn report(&self, ports: Vec<PortResult>, ideal: impl Fn(&Message) -> Time) -> RunReport
    where
        F: Tracked,
    {
        RunReport {
            sim_time: self.sim_time(),
            events: self.events(),
            flows: self.flow_results(ideal),
            ports,
            drops: 0,
            retransmitted_packets: 0,
            congestion_marks: 0,
            congestion_notifications: 0,
            duplicates: 0,
            buffer_overflows: 0,
            peak_packets_in_flight: 0,
            peak_reorder_packets: 0,
            stopped_by_time: self.stopped_by_time,
            pfc_pause_frames: 0,
            naks: 0,
            timeouts: 0,
            watchdog_trips: 0,
            deadlock: self.deadlock.clone(),
            pfc_cycles: Vec::new(),
        }
    }

    /// The time of the run's last event.
    pub fn now(&self) -> Time {
        self.merged.map_or(self.queue.now(), |m| m.now)
    }

    /// The events the run has handled.
    pub fn events(&self) -> u64 {
        self.merged.map_or(self.queue.popped(), |m| m.events)
    }

    /// The windows a split run took (0 for a run on one thread).
    pub fn windows(&self) -> u64 {
        self.merged.map_or(0, |m| m.windows)
    }

    /// Where the run's clock stands: `stop_at` if the run was stopped there, else its
    /// last event.
    pub fn end_time(&self) -> Time {
        match self.stop_at {
            Some(t) if self.stopped_by_time => t,
            _ => self.now(),
        }
    }

    /// Payload bytes every sender has put on the wire (retransmissions included) and every
    /// receiver has placed, for the fabrics' conservation audits.
    pub fn payload_totals(&self) -> (u64, u64)
    where
        F: Tracked,
    {
        let sent = self.flows.iter().map(|f| f.progress().sent_bytes).sum();
        let delivered = self
            .flows
            .iter()
            .map(|f| f.progress().delivered_bytes)
            .sum();
        (sent, delivered)
    }

    /// How much simulated time the run covers: its end, or the last completion if later
    /// (a receiver's completion comes its HCA latency after the last packet's event).
    pub fn sim_time(&self) -> Time
    where
        F: Tracked,
    {
        self.flows
            .iter()
            .filter_map(|f| f.progress().finish)
            .fold(self.end_time(), Time::max)
    }

    /// The captured records, in order.
    pub fn captured(&self) -> &[C] {
        self.capture
            .as_ref()
            .map(|(_, c)| c.as_slice())
            .unwrap_or(&[])
    }
}

/// A fabric simulation as the message life cycle and the run loop see it. The fabric
/// supplies its shared state, its sender's queueing and its event handling; the provided
/// methods (posting after dependencies and along connections, transfers inside servers,
/// releasing dependents) are the same on both fabrics, and so is the run loop
/// ([`EventDriven`]).
pub(crate) trait MessageFabric {
    type Event: LifecycleEvent;
    type Flow: Tracked;
    type Capture;

    fn state(&self) -> &RunState<Self::Event, Self::Flow, Self::Capture>;
    fn state_mut(&mut self) -> &mut RunState<Self::Event, Self::Flow, Self::Capture>;
    fn topology(&self) -> &Topology;
    /// Handles the next event (or notes that `stop_at` was reached).
    fn handle_next(&mut self);
    /// `next` continues `prev`'s connection: `prev` records the hand-over (`handed_to`),
    /// `next` takes over the sender's congestion-control and pacing state.
    fn inherit_connection(&mut self, prev: u32, next: u32);
    /// A posted network message joins its sender's send queue.
    fn enqueue(&mut self, flow: u32);

    /// Schedules a transfer inside a server landing (by default in insertion order).
    fn schedule_local_done(&mut self, at: Time, flow: u32) {
        self.state_mut()
            .queue
            .schedule(at, Self::Event::local_done(flow));
    }

    /// Schedules each `(time, message)` post (by default in insertion order).
    fn schedule_posts(&mut self, posts: Vec<(Time, u32)>) {
        schedule_posts(&mut self.state_mut().queue, posts);
    }

    /// Message `flow` completed at `at` and its dependents here were released; a fabric
    /// split over threads tells the other parts. By default nothing.
    fn released(&mut self, _flow: u32, _at: Time) {}

    /// A posted message: it waits while the one before it on its connection has not handed
    /// all its packets to the wire (that one posts it when it has); it goes at flow level
    /// if it stays inside its server; otherwise it joins its sender's queue.
    fn post(&mut self, flow: u32) {
        let flows = &mut self.state_mut().flows;
        if let Some(prev) = flows[flow as usize].progress().follows {
            let p = flows[prev as usize].progress_mut();
            if !p.injected {
                p.successor = Some(flow);
                return;
            }
            self.inherit_connection(prev, flow);
        }
        let m = *self.state().flows[flow as usize].message();
        if Lifecycle::is_local(self.topology(), &m) {
            self.post_local(flow);
        } else {
            self.enqueue(flow);
        }
    }

    /// A message inside a server (NVLink, or a data-path stage) goes at flow level; the
    /// message following it on its connection may post at once.
    fn post_local(&mut self, flow: u32) {
        let s = self.state_mut();
        let now = s.queue.now();
        let (done, next) = s.lifecycle.start_local(&mut s.flows, flow, now);
        self.schedule_local_done(done, flow);
        if let Some(next) = next {
            self.post(next);
        }
    }

    /// A transfer inside a server landed.
    fn local_done(&mut self, flow: u32) {
        let s = self.state_mut();
        let now = s.queue.now();
        let posts = s.lifecycle.finish_local(&mut s.flows, flow, now);
        s.note_completion();
        self.schedule_posts(posts);
        self.released(flow, now);
    }

    /// A message completed at its receiver at `at`: posts what waited for it.
    fn release_dependents(&mut self, flow: u32, at: Time) {
        let s = self.state_mut();
        let posts = s.lifecycle.release(&mut s.flows, flow, at);
        self.schedule_posts(posts);
        self.released(flow, at);
    }
}

/// Schedules each `(time, message)` post.
pub(crate) fn schedule_posts<E: LifecycleEvent>(
    queue: &mut EventQueue<E>,
    posts: Vec<(Time, u32)>,
) {
    for (t, flow) in posts {
        queue.schedule(t, E::post(flow));
    }
}

impl<T: MessageFabric> EventDriven for T {
    fn is_finished(&self) -> bool {
        let s = self.state();
        (s.lifecycle.completed == s.flows.len() && (s.grid.is_none() || s.drained))
            || s.stopped_by_time
            || s.deadlock.is_some()
            || s.queue.is_empty()
    }

    fn next_event_time(&mut self) -> Option<Time> {
        self.state_mut().queue.peek_time()
    }

    fn pop_one(&mut self) {
        self.handle_next();
    }
}
