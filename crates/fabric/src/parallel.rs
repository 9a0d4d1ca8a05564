//! One packet-level run split over threads: a conservative parallel engine, shared by
//! the InfiniBand and RoCEv2 models ([`Splittable`]).
//!
//! The topology is cut into parts along servers (each server's hosts together, servers
//! in contiguous blocks, so a fat-tree splits along pods), each switch going with most
//! of its already placed neighbours (ties dealt round the parts). Every part keeps the
//! whole model but handles only the events of the ports it holds. Time advances in
//! windows of the model's lookahead, on a grid from zero (see
//! [`RunState::grid`](crate::driver::RunState)): whatever one part does to another
//! happens at least a lookahead later (a frame crossing a cut link arrives a link delay
//! plus a serialisation after it left; a completion posts a dependent in another server
//! a NIC latency later), so within a window the parts run alone, and at its end they hand
//! over frames and completions. The run-wide deadlock check (and RoCEv2's rate sample)
//! runs between windows, on every part's ports, at its own time.
//!
//! Results are identical for any number of parts: events are ordered by (time, creator,
//! the creator's sequence) ([`Ties`](crate::driver::Ties)), which does not depend on the
//! cut; the peak of packets in flight is found by merging the parts' changes in that
//! order; and a run ends at the grid line after its last completion, as it does on one
//! thread.

use crate::driver::BuildError;
use crate::driver::{grid_line_after, Merged, MessageFabric, RunState, Wire};
use crate::report::{Deadlock, DeadlockHop};
use fabricsim_core::engine::EventQueue;
use fabricsim_core::pool::{NextTime, Pool, Slot};
use fabricsim_core::topology::{NodeKind, Topology};
use fabricsim_core::units::{NodeId, PortId, Time};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// A frame leaving its port: in `slot`, on `port`'s link, reaching the far end `peer` at
/// `arrival`, with the sender's `tie`.
pub(crate) struct Departure {
    pub port: PortId,
    pub peer: PortId,
    pub slot: Slot,
    pub arrival: Time,
    pub tie: u64,
}

/// Sends a departing frame on: handed over to the part of a split run that holds its far
/// end if `part` does not (its slot is freed here), else carried on `wire` with its own
/// arrival `event` (so that its tie is the sender's whichever thread handles the far end).
pub(crate) fn depart<F: Copy, N: NextTime, E>(
    part: Option<&mut Part<F>>,
    wire: &mut Wire,
    frames: &mut Pool<F, N>,
    queue: &mut EventQueue<E>,
    d: Departure,
    event: E,
) {
    if let Some(part) = part {
        if !part.holds(d.peer.0) {
            let frame = frames.free(d.slot);
            part.hand_over(d.port.0, d.peer.index(), frame, d.arrival, d.tie);
            return;
        }
    }
    wire.carry(frames, queue, d.slot, d.arrival, d.tie, event);
}

/// What one part of a run split over threads hands another at the end of a window.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Crossing<F> {
    /// A frame put on `port`'s link, whose far end the other part holds; it arrives at
    /// `arrival`, and its arrival event has the sender's `tie`.
    Frame {
        port: u32,
        frame: F,
        arrival: Time,
        tie: u64,
    },
    /// A message completed at `at` (its dependents may be sent from the other part).
    Completed { flow: u32, at: Time },
}

/// A model's share of a run split over threads: the ports it holds, and what it hands the
/// coordinator at each window's end.
#[derive(Clone, Debug)]
pub(crate) struct Part<F> {
    pub me: u16,
    /// Each port's part.
    pub owner: Arc<[u16]>,
    /// What goes to each part by the window's end.
    pub outbox: Vec<Vec<Crossing<F>>>,
    /// Changes of the packets in flight, (time, tie of the event, change), in event
    /// order: the coordinator merges the parts' to find the run's peak.
    pub in_flight: Vec<(Time, u64, i64)>,
    /// The deadlock check asked for in this window (by a PAUSE arriving, or a credit
    /// stall).
    pub check_at: Option<Time>,
}

impl<F> Part<F> {
    /// Part `me` of `parts`, with each port's part in `owner`.
    pub fn new(me: usize, parts: usize, owner: Arc<[u16]>) -> Self {
        Part {
            me: me as u16,
            owner,
            outbox: (0..parts).map(|_| Vec::new()).collect(),
            in_flight: Vec::new(),
            check_at: None,
        }
    }

    /// Whether this part holds `port`.
    pub fn holds(&self, port: u32) -> bool {
        self.owner[port as usize] == self.me
    }

    /// Hands `frame`, sent on `port` and arriving at `peer` (the link's far end, which
    /// another part holds) at `arrival` with the sender's `tie`, to that part.
    pub fn hand_over(&mut self, port: u32, peer: usize, frame: F, arrival: Time, tie: u64) {
        self.outbox[self.owner[peer] as usize].push(Crossing::Frame {
            port,
            frame,
            arrival,
            tie,
        });
    }

    /// Tells every other part that message `flow` completed at `at` (they may send its
    /// dependents).
    pub fn tell_completed(&mut self, flow: u32, at: Time) {
        for (k, out) in self.outbox.iter_mut().enumerate() {
            if k != self.me as usize {
                out.push(Crossing::Completed { flow, at });
            }
        }
    }
}

/// Data packets in flight, and their peak so far.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct InFlight {
    pub count: u64,
    pub peak: u64,
}

impl InFlight {
    /// The packets in flight changed by `change`.
    pub fn add(&mut self, change: i64) {
        self.count = self.count.wrapping_add_signed(change);
        self.peak = self.peak.max(self.count);
    }

    /// The packets in flight changed by `change` at `queue`'s current event: counted
    /// here, or, in a part of a split run, logged for the coordinator, which merges the
    /// parts' changes in event order to find the run's peak.
    pub fn change<F, E>(&mut self, part: Option<&mut Part<F>>, queue: &EventQueue<E>, change: i64) {
        match part {
            None => self.add(change),
            Some(part) => part.in_flight.push((queue.now(), queue.now_tie(), change)),
        }
    }
}

/// What the coordinator of a split run saw, for [`Splittable::merge`].
#[derive(Clone, Debug)]
pub(crate) struct SplitEnd<S> {
    pub events: u64,
    /// Windows run.
    pub windows: u64,
    /// The time of the run's last event.
    pub now: Time,
    /// The data packets in flight at the end, and their peak.
    pub in_flight: InFlight,
    pub stop_at: Option<Time>,
    pub stopped_by_time: bool,
    pub deadlock: Option<Deadlock>,
    /// The periodic samples, in time and then flow order.
    pub samples: Vec<S>,
}

impl<S> SplitEnd<S> {
    /// Makes `state` (part 0's) the merged run's: no events left, and where and why the
    /// run ended as the coordinator saw it.
    pub fn close<E, F, C>(&mut self, state: &mut RunState<E, F, C>) {
        state.queue = EventQueue::new();
        state.stop_at = self.stop_at;
        state.stopped_by_time = self.stopped_by_time;
        state.deadlock = self.deadlock.take();
        state.merged = Some(Merged {
            events: self.events,
            now: self.now,
            windows: self.windows,
        });
    }
}

/// What the run-wide deadlock check found.
pub(crate) enum Check {
    /// A deadlock: the run stops.
    Deadlock(Vec<DeadlockHop>),
    /// None yet, but the check must run again an interval later.
    Again,
    /// Nothing to watch: the check stops until something asks for it again.
    Clear,
}

/// A packet model whose run can be split over threads: each part a whole model that
/// handles only its ports' events, hands over [`Crossing`]s and logs its [`Part`].
pub(crate) trait Splittable: MessageFabric + Sized + Send {
    /// A frame on a link.
    type Frame: Copy + Send;
    /// A periodic run-wide sample (RoCEv2's rates).
    type Sample: Send;
    /// What the deadlock check keeps from one run to the next.
    type CheckMemory: Default;

    /// This run's share of its split run, if it is a part of one.
    fn part(&self) -> Option<&Part<Self::Frame>>;
    /// This part's share of its split run.
    fn part_mut(&mut self) -> &mut Part<Self::Frame>;
    /// The run's lookahead, which is also its window grid.
    fn lookahead(&self) -> Time;
    /// The deadlock check's interval.
    fn deadlock_check_interval(&self) -> Time;
    /// The interval of the periodic samples, if the run takes them.
    fn sampling(&self) -> Option<Time>;
    /// Puts a frame another part sent on `port`'s link, arriving at `arrival`, its
    /// arrival event with the sender's `tie`.
    fn receive(&mut self, port: u32, frame: Self::Frame, arrival: Time, tie: u64);
    fn set_deadlock_check_pending(&mut self, pending: bool);
    /// The run-wide deadlock check at `now`, over every part's ports.
    fn check_deadlock(parts: &[&Self], now: Time, memory: &mut Self::CheckMemory) -> Check;
    /// The periodic samples at `now` of every part, in the order one thread takes them.
    fn take_samples(parts: &mut [&mut Self], now: Time) -> Vec<Self::Sample>;
    /// The parts, once every one has finished, as one run.
    fn merge(parts: Vec<Self>, end: SplitEnd<Self::Sample>) -> Self;

    fn message_count(&self) -> usize {
        self.state().flows.len()
    }

    /// Whether this run handles `port`'s events: always, unless it is a part of a split
    /// run that another part holds the port in.
    #[inline(always)]
    fn holds(&self, port: u32) -> bool {
        self.part().is_none_or(|p| p.holds(port))
    }

    /// Handles what another part handed over, then every event before `end`.
    fn run_window(&mut self, inbox: Vec<Crossing<Self::Frame>>, end: Time) {
        for c in inbox {
            self.accept(c);
        }
        while self.peek_time().is_some_and(|t| t < end) {
            self.handle_next();
        }
    }

    /// Takes in what another part handed over: at a window's start (its frames), or from
    /// the coordinator between windows (completions, so that the posts they release are
    /// known before it picks the next window).
    fn accept(&mut self, crossing: Crossing<Self::Frame>) {
        match crossing {
            Crossing::Frame {
                port,
                frame,
                arrival,
                tie,
            } => self.receive(port, frame, arrival, tie),
            Crossing::Completed { flow, at } => {
                let s = self.state_mut();
                let posts = s.lifecycle.release(&mut s.flows, flow, at);
                self.schedule_posts(posts);
            }
        }
    }

    /// The time of this part's next event, if any.
    fn peek_time(&mut self) -> Option<Time> {
        self.state_mut().queue.peek_time()
    }

    /// Events this part has handled.
    fn popped(&self) -> u64 {
        self.state().queue.popped()
    }

    /// The time of this part's last event.
    fn clock(&self) -> Time {
        self.state().queue.now()
    }

    /// Messages this part has completed (at their senders).
    fn completed(&self) -> usize {
        self.state().lifecycle.completed
    }
}

/// Each node's part, for `parts` parts: hosts by server in contiguous blocks of servers,
/// then switches nearest the hosts first, each to the part most of its placed neighbours
/// are in (ties dealt round the parts in switch order).
pub fn cut(topo: &Topology, parts: usize) -> Vec<u16> {
    let nodes = topo.nodes();
    let hosts = topo.host_count() as usize;
    let per_server = topo.gpus_per_node().max(1) as usize;
    let servers = hosts.div_ceil(per_server);
    let mut part: Vec<Option<u16>> = vec![None; nodes.len()];
    for (n, kind) in nodes.iter().enumerate() {
        if let NodeKind::Host(h) = kind {
            let server = h.index() / per_server;
            part[n] = Some((server * parts / servers) as u16);
        }
    }
    let neighbours = |n: usize| {
        topo.node_ports(NodeId(n as u32))
            .iter()
            .map(|&p| topo.port(topo.port(p).peer).node.index())
    };
    let mut dealt = 0usize;
    loop {
        // The switches next to a placed node, in order; placed together, as one tier.
        let tier: Vec<usize> = (0..nodes.len())
            .filter(|&n| part[n].is_none() && neighbours(n).any(|m| part[m].is_some()))
            .collect();
        if tier.is_empty() {
            break;
        }
        let placed: Vec<(usize, u16)> = tier
            .iter()
            .map(|&n| {
                let mut count = vec![0usize; parts];
                for m in neighbours(n) {
                    if let Some(k) = part[m] {
                        count[k as usize] += 1;
                    }
                }
                let most = *count.iter().max().expect("at least one part");
                let tied: Vec<usize> = (0..parts).filter(|&k| count[k] == most).collect();
                let k = if tied.len() == 1 {
                    tied[0]
                } else {
                    dealt += 1;
                    tied[(dealt - 1) % tied.len()]
                };
                (n, k as u16)
            })
            .collect();
        for (n, k) in placed {
            part[n] = Some(k);
        }
    }
    part.into_iter().map(|k| k.unwrap_or(0)).collect()
}

/// Spins before a barrier's waiter yields its core: a few microseconds, about what the
/// other threads of a dense run take to arrive (a waiter that yields sooner gives up
/// its core for a scheduler tick when another process wants it; one that spins longer
/// starves threads that share its core).
const SPINS: u32 = 256;

/// A barrier that spins briefly, then yields: a window's end costs about a microsecond
/// when every thread has a core.
struct SpinBarrier {
    threads: usize,
    arrived: AtomicUsize,
    generation: AtomicUsize,
}

impl SpinBarrier {
    fn new(threads: usize) -> Self {
        SpinBarrier {
            threads,
            arrived: AtomicUsize::new(0),
            generation: AtomicUsize::new(0),
        }
    }

    fn wait(&self) {
        let generation = self.generation.load(Ordering::Acquire);
        if self.arrived.fetch_add(1, Ordering::AcqRel) + 1 == self.threads {
            self.arrived.store(0, Ordering::Relaxed);
            self.generation.fetch_add(1, Ordering::Release);
            return;
        }
        let mut spins = 0u32;
        while self.generation.load(Ordering::Acquire) == generation {
            if spins < SPINS {
                std::hint::spin_loop();
                spins += 1;
            } else {
                std::thread::yield_now();
            }
        }
    }
}

/// A part, locked for its thread's window or the coordinator's step.
fn lock<M>(m: &Mutex<M>) -> MutexGuard<'_, M> {
    m.lock().expect("a part's thread panicked")
}

/// An inbox's crossings, leaving it empty.
fn take<F>(m: &Mutex<Vec<Crossing<F>>>) -> Vec<Crossing<F>> {
    std::mem::take(&mut *m.lock().expect("a part's thread panicked"))
}

/// What the coordinator keeps between windows.
struct Coordinator<M: Splittable> {
    grid: Time,
    stop_at: Option<Time>,
    messages: usize,
    check_interval: Time,
    /// The pending deadlock check's time.
    check_at: Option<Time>,
    /// The rate-sampling interval (rates recorded), and the next sample's time.
    sampling: Option<Time>,
    sample_at: Option<Time>,
    /// Which of the check and the sample, when both fall at one time, was scheduled
    /// first (and so runs first): their sequence numbers as one thread gives them.
    check_seq: u64,
    sample_seq: u64,
    next_seq: u64,
    samples: Vec<M::Sample>,
    /// What the deadlock check keeps between its runs.
    memory: M::CheckMemory,
    events_outside: u64,
    last_global: Time,
    in_flight: InFlight,
    drain_until: Option<Time>,
    deadlock: Option<Deadlock>,
    stopped_by_time: bool,
}

impl<M: Splittable> Coordinator<M> {
    /// The window step, with every part in hand: hands over what crossed and merges the
    /// packets in flight ([`Self::exchange`]), runs the run-wide events due at the
    /// window's end ([`Self::close_window`]); then picks the next window's end
    /// ([`Self::next_window`]), or finishes (None).
    fn step(
        &mut self,
        parts: &mut [&mut M],
        inboxes: &mut [Vec<Crossing<M::Frame>>],
        window_end: Option<Time>,
    ) -> Option<Time> {
        self.exchange(parts, inboxes);
        if let Some(end) = window_end {
            if self.close_window(parts, inboxes, end) {
                return None;
            }
        }
        for p in parts.iter_mut() {
            p.part_mut().check_at = None;
            p.set_deadlock_check_pending(self.check_at.is_some());
        }
        if let (None, Some(interval)) = (window_end, self.sampling) {
            // The first sample, scheduled before the run as on one thread.
            self.sample_at = (self.messages > 0).then_some(interval);
            self.sample_seq = self.take_seq();
        }
        self.next_window(parts, inboxes)
    }

    /// Hands over what crossed between parts (frames to the receiving part's inbox,
    /// completions applied at once) and merges the changes of packets in flight in
    /// event order.
    fn exchange(&mut self, parts: &mut [&mut M], inboxes: &mut [Vec<Crossing<M::Frame>>]) {
        let n = parts.len();
        let mut changes: Vec<(Time, u64, i64)> = Vec::new();
        for a in 0..n {
            let part = parts[a].part_mut();
            changes.append(&mut part.in_flight);
            let outbox = std::mem::take(&mut part.outbox);
            let mut emptied = Vec::with_capacity(n);
            for (b, mut out) in outbox.into_iter().enumerate() {
                for c in out.drain(..) {
                    match c {
                        Crossing::Frame { .. } => inboxes[b].push(c),
                        Crossing::Completed { .. } => parts[b].accept(c),
                    }
                }
                emptied.push(out);
            }
            parts[a].part_mut().outbox = emptied;
        }
        // Each part's changes are in event order; equal keys come from one event of one
        // part, whose order the stable sort keeps.
        changes.sort_by_key(|&(t, tie, _)| (t, tie));
        for (_, _, change) in changes {
            self.in_flight.add(change);
        }
    }

    /// At the end of the window ending at `end`: notes the last completion, takes new
    /// check requests and runs the deadlock check and rate sample due then, in the order
    /// they were scheduled. Returns whether the run stops (a deadlock).
    fn close_window(
        &mut self,
        parts: &mut [&mut M],
        inboxes: &[Vec<Crossing<M::Frame>>],
        end: Time,
    ) -> bool {
        let last = Time(end.ps() - 1);
        let completed: usize = parts.iter().map(|p| p.completed()).sum();
        if self.drain_until.is_none() && completed == self.messages {
            self.drain_until = Some(grid_line_after(last, self.grid));
        }
        // A check asked for in the window (only while none was pending) was scheduled by
        // an event before the run-wide ones due at its end.
        if self.check_at.is_none() {
            self.check_at = (parts.iter_mut())
                .filter_map(|p| p.part_mut().check_at)
                .min();
            if self.check_at.is_some() {
                self.check_seq = self.take_seq();
            }
        }
        let check_due = self.check_at == Some(last);
        let sample_due = self.sample_at == Some(last);
        let sample_first = sample_due && (!check_due || self.sample_seq < self.check_seq);
        if sample_first {
            self.run_sample(parts, inboxes, last);
        }
        if check_due && self.run_check(parts, last) {
            return true;
        }
        if sample_due && !sample_first {
            self.run_sample(parts, inboxes, last);
        }
        false
    }

    /// The next window's end: from the earliest pending event to the next grid line, the
    /// deadlock check, the rate sample, `stop_at` or the end of the drain, whichever is
    /// first; None if the run is over.
    fn next_window(
        &mut self,
        parts: &mut [&mut M],
        inboxes: &[Vec<Crossing<M::Frame>>],
    ) -> Option<Time> {
        let arrivals = inboxes.iter().flatten().filter_map(|c| match c {
            Crossing::Frame { arrival, .. } => Some(*arrival),
            Crossing::Completed { .. } => None,
        });
        let start = (parts.iter_mut())
            .filter_map(|p| p.peek_time())
            .chain(arrivals)
            .chain(self.check_at)
            .chain(self.sample_at)
            .min()?;
        if let Some(d) = self.drain_until {
            if start >= d && self.stop_at.is_none_or(|s| d.ps() - 1 < s.ps()) {
                return None;
            }
        }
        if let Some(stop) = self.stop_at {
            if start > stop {
                self.stopped_by_time = true;
                return None;
            }
        }
        let mut end = grid_line_after(start, self.grid);
        if let Some(d) = self.drain_until {
            end = end.min(d);
        }
        for t in [self.check_at, self.sample_at].into_iter().flatten() {
            end = end.min(Time(t.ps() + 1));
        }
        if let Some(stop) = self.stop_at {
            end = end.min(Time(stop.ps() + 1));
        }
        Some(end)
    }
}

/// Windows a split run looks at before judging whether splitting pays.
const TRIAL_WINDOWS: u64 = 1024;

/// How long (wall time) a split run may still give up: what it has done is lost when it
/// does, so this bounds the loss.
const TRIAL_WALL: std::time::Duration = std::time::Duration::from_secs(2);

/// How often, and after how long at the least, a split run on trial looks at how long
/// its threads waited for a core (a few scheduler ticks, so that one descheduling is not
/// taken for a busy machine).
const CROWDING_LOOK: Duration = Duration::from_millis(10);
const CROWDING_LEAST: Duration = Duration::from_millis(100);

/// The share of its threads' wall time a split run may spend runnable but waiting for a
/// core before one thread is taken to be faster: its threads wait for each other at
/// every window's end, so one descheduled thread stalls them all (issue 31: a 1,024-host
/// permutation took 25.5 s on two threads beside one busy process, 1.74 s on one).
/// Unverified beyond that case: at 0.2 a run beside a busy neighbour on a 2-core machine
/// gives up in its first tens of milliseconds, and an idle machine's runs never do
/// (BENCHMARKS.md).
const CROWDED_SHARE: f64 = 0.2;

/// How long this process's threads have waited for a core (Linux schedstat).
struct Crowding {
    threads: usize,
    since: std::time::Instant,
    waited_ns: u64,
    looked: std::time::Instant,
    /// Looks in a row that found the threads crowded.
    strikes: u32,
}

impl Crowding {
    /// Starts measuring; `None` where the waits are not known.
    fn start(threads: usize) -> Option<Crowding> {
        let now = std::time::Instant::now();
        Some(Crowding {
            threads,
            since: now,
            waited_ns: Self::run_queue_wait()?,
            looked: now,
            strikes: 0,
        })
    }

    /// Nanoseconds this process's threads have spent runnable but waiting for a core.
    fn run_queue_wait() -> Option<u64> {
        let mut total = 0u64;
        for task in std::fs::read_dir("/proc/self/task").ok()? {
            let stat = std::fs::read_to_string(task.ok()?.path().join("schedstat")).ok()?;
            total += stat.split_whitespace().nth(1)?.parse::<u64>().ok()?;
        }
        Some(total)
    }

    /// Whether, looking again at most every [`CROWDING_LOOK`], the threads have waited
    /// for a core more than [`CROWDED_SHARE`] of their time since the start, at three looks
    /// in a row (one busy moment of the machine is not a busy neighbour).
    fn crowded(&mut self) -> bool {
        let now = std::time::Instant::now();
        let elapsed = now - self.since;
        if now - self.looked < CROWDING_LOOK || elapsed < CROWDING_LEAST {
            return false;
        }
        self.looked = now;
        let Some(waited) = Self::run_queue_wait() else {
            return false;
        };
        let share = (waited.saturating_sub(self.waited_ns)) as f64
            / (elapsed.as_nanos() as f64 * self.threads as f64);
        self.strikes = if share > CROWDED_SHARE {
            self.strikes + 1
        } else {
            0
        };
        self.strikes >= 3
    }
}

/// Fewest events per window, on average over the trial, for a split run to go on: each
/// window costs two barriers and the coordinator's step, a few microseconds here. On this
/// 2-core machine a 2 MB permutation on a k=8 fat-tree (61 events a window) ran 0.10 s on
/// one thread and 0.06-0.09 s on two; a ring all-reduce over 128 GPUs in 16 servers (22)
/// 8.3 s and 11.2 s; a 127:1 incast (6) 0.08 s and 0.20 s (BENCHMARKS.md).
pub const MIN_EVENTS_PER_WINDOW: u64 = 40;

/// How a run is split: into `threads` parts, each on its own thread, ending by
/// `stop_at` if given, judged by `trial`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SplitRun {
    pub threads: usize,
    pub trial: Trial,
    pub stop_at: Option<Time>,
}

/// Runs a model split as `how` says, its parts built by `part` (each keeps the whole
/// state and handles the events of the ports its `Part` holds), and returns the run
/// merged into one, identical to the run on one thread; `None` if the trial gave up.
/// `progress` is called from time to time with the events so far and the simulated time.
pub(crate) fn run_split<M: Splittable>(
    topo: &Topology,
    how: SplitRun,
    progress: &mut dyn FnMut(u64, Time),
    part: impl Fn(Part<M::Frame>) -> Result<M, BuildError>,
) -> Result<Option<M>, BuildError> {
    let parts = parts(topo, how.threads, part)?;
    Ok(run(parts, how.stop_at, how.trial, progress))
}

/// How a split run decides whether to go on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trial {
    /// Split whatever the run's density.
    Always,
    /// Give up if, from [`TRIAL_WINDOWS`] windows on and within [`TRIAL_WALL`], the
    /// windows so far held fewer than [`MIN_EVENTS_PER_WINDOW`] events each on average, or
    /// if within [`TRIAL_WALL`] its threads waited for a core more than [`CROWDED_SHARE`]
    /// of their time (the caller then runs it on one thread; the results are the same).
    GiveUpIfSparse,
}

impl<M: Splittable> Coordinator<M> {
    /// [`Self::step`] at the end of the window ending at `end`, taking every part's
    /// lock and inbox and putting the inboxes back.
    fn step_locked(
        &mut self,
        cells: &[Mutex<M>],
        inboxes: &[Mutex<Vec<Crossing<M::Frame>>>],
        end: Time,
    ) -> Option<Time> {
        let mut guards: Vec<_> = cells.iter().map(lock).collect();
        let mut refs: Vec<&mut M> = guards.iter_mut().map(|g| &mut **g).collect();
        let mut boxes: Vec<Vec<Crossing<M::Frame>>> = inboxes.iter().map(take).collect();
        let next = self.step(&mut refs, &mut boxes, Some(end));
        for (m, b) in inboxes.iter().zip(boxes) {
            *m.lock().expect("a part's thread panicked") = b;
        }
        next
    }

    /// The finished parts merged into one run of `windows` windows.
    fn merge(self, mut parts: Vec<M>, windows: u64) -> M {
        let events: u64 = parts.iter().map(|p| p.popped()).sum::<u64>() + self.events_outside;
        let now = (parts.iter_mut().map(|p| p.clock()))
            .chain([self.last_global])
            .max()
            .unwrap_or(Time::ZERO);
        let end = SplitEnd {
            events,
            windows,
            now,
            in_flight: self.in_flight,
            stop_at: self.stop_at,
            stopped_by_time: self.stopped_by_time,
            deadlock: self.deadlock,
            samples: self.samples,
        };
        M::merge(parts, end)
    }

    /// The coordinator of a run whose parts are like `part`, before its first window.
    fn new(part: &M, stop_at: Option<Time>) -> Self {
        Coordinator {
            grid: part.lookahead(),
            stop_at,
            messages: part.message_count(),
            check_interval: part.deadlock_check_interval(),
            check_at: None,
            sampling: part.sampling(),
            sample_at: None,
            check_seq: 0,
            sample_seq: 0,
            next_seq: 0,
            samples: Vec::new(),
            memory: M::CheckMemory::default(),
            events_outside: 0,
            last_global: Time::ZERO,
            in_flight: InFlight::default(),
            drain_until: None,
            deadlock: None,
            stopped_by_time: false,
        }
    }

    /// The next sequence number of a run-wide event.
    fn take_seq(&mut self) -> u64 {
        self.next_seq += 1;
        self.next_seq
    }

    /// The deadlock check at `now` over every part; true if it found a deadlock (the run
    /// stops). It re-arms while any switch egress is paused.
    fn run_check(&mut self, parts: &mut [&mut M], now: Time) -> bool {
        self.check_at = None;
        self.events_outside += 1;
        self.last_global = now;
        let view: Vec<&M> = parts.iter().map(|p| &**p).collect();
        match M::check_deadlock(&view, now, &mut self.memory) {
            Check::Deadlock(cycle) => {
                self.deadlock = Some(Deadlock { at: now, cycle });
                return true;
            }
            Check::Again => {
                self.check_at = Some(now + self.check_interval);
                self.check_seq = self.take_seq();
            }
            Check::Clear => {}
        }
        false
    }

    /// The periodic rate sample at `now`: every part's messages on their NICs, in flow
    /// order. It re-arms while anything else is pending, as on one thread.
    fn run_sample(&mut self, parts: &mut [&mut M], inboxes: &[Vec<Crossing<M::Frame>>], now: Time) {
        self.sample_at = None;
        self.events_outside += 1;
        self.last_global = now;
        self.samples.extend(M::take_samples(parts, now));
        let pending = self.check_at.is_some()
            || inboxes.iter().any(|b| !b.is_empty())
            || parts.iter_mut().any(|p| p.peek_time().is_some());
        if pending {
            self.sample_at = Some(now + self.sampling.expect("sampling"));
            self.sample_seq = self.take_seq();
        }
    }
}

/// The part of a split run (or the run itself) that holds `port`, among `parts` (the
/// run's parts in order, or the run alone).
pub(crate) fn holder<'a, M: Splittable>(parts: &[&'a M], port: usize) -> &'a M {
    match parts[0].part() {
        Some(p) => parts[p.owner[port] as usize],
        None => parts[0],
    }
}

/// The `threads` parts of a run on `topo`, cut by [`cut`], each built by `build` from its
/// [`Part`].
fn parts<M: Splittable>(
    topo: &Topology,
    threads: usize,
    build: impl Fn(Part<M::Frame>) -> Result<M, BuildError>,
) -> Result<Vec<M>, BuildError> {
    let nodes = cut(topo, threads);
    let owner: Arc<[u16]> = topo.ports().iter().map(|p| nodes[p.node.index()]).collect();
    (0..threads)
        .map(|me| build(Part::new(me, threads, owner.clone())))
        .collect()
}

/// Runs `parts` (built by [`parts`]), one thread each, and returns the run merged into one, identical to the run on one thread; `None`
/// if `trial` gave up. `progress` is called from time to time with the events so far and
/// the simulated time.
fn run<M: Splittable>(
    parts: Vec<M>,
    stop_at: Option<Time>,
    trial: Trial,
    progress: &mut dyn FnMut(u64, Time),
) -> Option<M> {
    let threads = parts.len();
    let mut coordinator = Coordinator::new(&parts[0], stop_at);
    let cells: Vec<Mutex<M>> = parts.into_iter().map(Mutex::new).collect();
    let inboxes: Vec<Mutex<Vec<Crossing<M::Frame>>>> =
        (0..threads).map(|_| Mutex::new(Vec::new())).collect();
    let barrier = SpinBarrier::new(threads);
    let window_end = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let mut gave_up = false;
    let mut windows = 0u64;
    // The first window, from the parts' set-up events.
    let first = {
        let mut guards: Vec<_> = cells.iter().map(lock).collect();
        let mut refs: Vec<&mut M> = guards.iter_mut().map(|g| &mut **g).collect();
        let mut boxes: Vec<Vec<Crossing<M::Frame>>> = (0..threads).map(|_| Vec::new()).collect();
        coordinator.step(&mut refs, &mut boxes, None)
    };
    if let Some(end) = first {
        window_end.store(end.ps(), Ordering::Relaxed);
        std::thread::scope(|scope| {
            for k in 1..threads {
                let (cells, inboxes, barrier) = (&cells, &inboxes, &barrier);
                let (window_end, stop) = (&window_end, &stop);
                scope.spawn(move || loop {
                    barrier.wait();
                    if stop.load(Ordering::Acquire) {
                        break;
                    }
                    let end = Time(window_end.load(Ordering::Acquire));
                    lock(&cells[k]).run_window(take(&inboxes[k]), end);
                    barrier.wait();
                });
            }
            let started = std::time::Instant::now();
            let mut crowding = Crowding::start(threads);
            loop {
                barrier.wait();
                if stop.load(Ordering::Acquire) {
                    break;
                }
                let end = Time(window_end.load(Ordering::Acquire));
                lock(&cells[0]).run_window(take(&inboxes[0]), end);
                barrier.wait();
                let next = coordinator.step_locked(&cells, &inboxes, end);
                windows += 1;
                let on_trial = trial == Trial::GiveUpIfSparse && started.elapsed() < TRIAL_WALL;
                if windows.is_multiple_of(256) {
                    let events: u64 = cells.iter().map(|c| lock(c).popped()).sum();
                    progress(events + coordinator.events_outside, end);
                    let sparse = events < MIN_EVENTS_PER_WINDOW * windows;
                    if on_trial && windows >= TRIAL_WINDOWS && sparse {
                        gave_up = true;
                    }
                }
                if on_trial && crowding.as_mut().is_some_and(Crowding::crowded) {
                    gave_up = true;
                }
                match next {
                    Some(e) if !gave_up => window_end.store(e.ps(), Ordering::Release),
                    _ => stop.store(true, Ordering::Release),
                }
            }
        });
    }
    if gave_up {
        return None;
    }
    let parts: Vec<M> = cells
        .into_iter()
        .map(|m| m.into_inner().expect("a part's thread panicked"))
        .collect();
    Some(coordinator.merge(parts, windows))
}
