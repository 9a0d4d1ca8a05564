//! What the fabrics share: the run loop over their event handlers, a link's frames in
//! flight, the ideal completion time of a message on an empty fabric, capture filters and
//! deadlock detection over a wait-for graph.

use crate::report::{Deadlock, DeadlockHop, FlowResult};
use crate::workload::{Dep, Local, Message, Workload};
use fabricsim_core::engine::EventQueue;
use fabricsim_core::pool::{Fifo, NextTime, Pool, Slot};
use fabricsim_core::prefetch::WORTH_ABOVE_BYTES;
use fabricsim_core::topology::{NodeKind, Nvlink, Port, Routes, Topology};
use fabricsim_core::units::{HostId, PortId, Time};

/// The frames in flight on one link, in arrival order: a FIFO of slots in the fabric's
/// frame pool, each stamped with its arrival time. Each frame has its own arrival event,
/// which its sender schedules, so that events' order does not depend on which thread
/// handles the far end.
#[derive(Clone, Copy, Debug, Default)]
pub struct Wire {
    frames: Fifo,
}

/// How many frame slots a packet model's pool may reach before its state (`state_bytes`
/// besides the pool) outgrows [`WORTH_ABOVE_BYTES`] and prefetching starts to pay.
pub fn prefetch_above_slots<F, N: NextTime>(state_bytes: usize) -> usize {
    WORTH_ABOVE_BYTES.saturating_sub(state_bytes) / Pool::<F, N>::slot_bytes()
}

impl Wire {
    /// Adds the frame in `slot`, which reaches the far end at `arrival` (arrivals never
    /// decrease), and schedules its own arrival event there with `tie`, the sender's:
    /// every frame on a wire has one, whichever thread handles the far end.
    pub fn carry<F, N: NextTime, E>(
        &mut self,
        pool: &mut Pool<F, N>,
        queue: &mut EventQueue<E>,
        slot: Slot,
        arrival: Time,
        tie: u64,
        event: E,
    ) {
        debug_assert!(self.frames.back().is_none_or(|s| pool.time(s) <= arrival));
        pool.push_back(&mut self.frames, slot, arrival);
        queue.schedule_tied(arrival, tie, event);
    }

    /// Removes the head at its arrival; returns its slot (still occupied).
    pub fn pop<F, N: NextTime>(&mut self, pool: &mut Pool<F, N>) -> Slot {
        pool.pop_front(&mut self.frames)
            .expect("an arrival event implies a frame on the wire")
    }

    /// The frame that arrives next, if any.
    #[inline(always)]
    pub fn head(&self) -> Option<Slot> {
        self.frames.front()
    }

    /// The frame that arrives last, if any.
    #[inline(always)]
    pub fn tail(&self) -> Option<Slot> {
        self.frames.back()
    }

    /// The frames in flight, head first.
    pub fn frames<'a, F, N: NextTime>(
        &self,
        pool: &'a Pool<F, N>,
    ) -> impl Iterator<Item = &'a F> + 'a {
        pool.iter(&self.frames)
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

/// Ideal completion of `m` on an empty fabric, over the links its packets cross on the
/// static route: the endpoints' fixed latencies, then the message's packets pipelined
/// through every link at that link's rate, each store-and-forward switch starting a packet
/// a switch latency after its last bit arrived, plus every link's propagation.
/// `frame_len(payload, first)` is a packet's link bytes.
pub fn ideal_fct(
    topo: &Topology,
    routes: &Routes,
    m: &Message,
    mtu: u32,
    endpoint_latency: Time,
    switch_latency: Time,
    frame_len: impl Fn(u32, bool) -> u64,
) -> Time {
    let links = static_path(topo, routes, m.src, m.dst);
    let train = PacketTrain::of(m.size, mtu, frame_len);
    endpoint_latency + pipeline_time(&links, switch_latency, &train)
}

/// The ports a packet from `src` to `dst` leaves by on the static route, host port first.
pub fn static_path(topo: &Topology, routes: &Routes, src: HostId, dst: HostId) -> Vec<Port> {
    let mut port = topo.host_port(src);
    let mut path = vec![*topo.port(port)];
    loop {
        let node = topo.port(topo.port(port).peer).node;
        if !matches!(topo.nodes()[node.index()], NodeKind::Switch { .. }) {
            return path;
        }
        port = routes.static_port(node, dst);
        path.push(*topo.port(port));
    }
}

/// A message's packets by link bytes: the first, `middle_count` of the same size, and
/// the last (none if the message is one packet).
#[derive(Clone, Copy, Debug)]
pub struct PacketTrain {
    pub first: u64,
    pub middle: u64,
    pub middle_count: u64,
    pub last: Option<u64>,
}

impl PacketTrain {
    /// The packets of a message of `size` bytes cut at `mtu`; `frame_len(payload, first)`
    /// is a packet's link bytes.
    pub fn of(size: u64, mtu: u32, frame_len: impl Fn(u32, bool) -> u64) -> Self {
        let packets = size.div_ceil(mtu as u64).max(1);
        let last_payload = (size - (packets - 1) * mtu as u64) as u32;
        PacketTrain {
            first: frame_len(if packets == 1 { last_payload } else { mtu }, true),
            middle: frame_len(mtu, false),
            middle_count: packets.saturating_sub(2),
            last: (packets > 1).then(|| frame_len(last_payload, false)),
        }
    }

    /// How many packets.
    pub fn packets(&self) -> u64 {
        1 + self.middle_count + self.last.map_or(0, |_| 1)
    }

    /// Their link bytes together.
    pub fn bytes(&self) -> u64 {
        self.first + self.middle_count * self.middle + self.last.unwrap_or(0)
    }
}

/// When the last bit of the train's last packet reaches the end of `links`, on links
/// otherwise empty: each link sends a packet once it has fully arrived over the previous
/// link (plus `switch_latency`) and the link has finished the packet before.
///
/// Exact, in closed form for the middle packets: with `G(k, 0)` the time link k finishes
/// the first packet, the m-th middle packet leaves link i at the longest chain through
/// the (link, packet) grid,
/// `max over k <= i of G(k, 0) + c(k) + (m - 1) max(c(k..=i)) + sum over l in k..i of
/// (d(l) + switch_latency + c(l + 1))`, where c is a link's time per middle packet and d
/// its propagation: every further packet of the same size adds the slowest link's time.
pub fn pipeline_time(links: &[Port], switch_latency: Time, train: &PacketTrain) -> Time {
    let send = |finish: &mut [Time], bytes: u64| {
        let mut ready = Time::ZERO;
        for (i, link) in links.iter().enumerate() {
            finish[i] = finish[i].max(ready) + link.rate.serialization(bytes);
            ready = finish[i] + link.delay + switch_latency;
        }
    };
    let mut finish = vec![Time::ZERO; links.len()];
    send(&mut finish, train.first);
    if train.middle_count > 0 {
        let m = train.middle_count;
        let c: Vec<Time> = links
            .iter()
            .map(|l| l.rate.serialization(train.middle))
            .collect();
        let first = finish.clone();
        for i in 0..links.len() {
            finish[i] = (0..=i)
                .map(|k| {
                    let slowest = c[k..=i].iter().max().expect("k <= i");
                    let descent: Time = (k..i)
                        .map(|l| links[l].delay + switch_latency + c[l + 1])
                        .fold(Time::ZERO, |a, b| a + b);
                    first[k] + c[k] + Time(slowest.ps() * (m - 1)) + descent
                })
                .max()
                .expect("at least one link");
        }
    }
    if let Some(last) = train.last {
        send(&mut finish, last);
    }
    let end = links.last().expect("a path has a link");
    finish[links.len() - 1] + end.delay
}

/// The ECMP hash of a packet at `switch`: a seeded mix (SplitMix64 finaliser) of the
/// 5-tuple fields that vary here (source and destination host, UDP source port; the
/// protocol and destination port 4791 are the same for all RoCEv2 traffic).
pub fn ecmp_hash(seed: u64, switch: u32, src: u32, dst: u32, sport: u16) -> u64 {
    let mut x = seed
        ^ (switch as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ ((src as u64) << 32 | dst as u64).wrapping_mul(0xBF58_476D_1CE4_E5B9)
        ^ (sport as u64).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 30;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The UDP source port of message `i`'s connection: RoCEv2 NICs vary it per QP so that
/// ECMP spreads connections (0xC000 and up, as the IANA dynamic range).
pub fn udp_source_port(i: u32) -> u16 {
    0xC000 | (i.wrapping_mul(2_654_435_761) >> 18) as u16
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

/// A snapshot of blocked queues for deadlock detection. Queues and buffers are numbered
/// by the fabric (e.g. egress port x VL, ingress port x VL).
#[derive(Clone, Debug, Default)]
pub struct WaitGraph {
    /// Per queue: the downstream buffer it waits on, or None if it is not blocked.
    pub waits_on: Vec<Option<usize>>,
    /// Per queue: how much of each buffer's contents it holds, as (buffer, amount).
    pub holds: Vec<Vec<(usize, u64)>>,
    /// Per buffer: its whole occupancy; 0 for a buffer that cannot block its upstream.
    pub occupancy: Vec<u64>,
}

impl WaitGraph {
    /// A deadlock, exactly: the largest set of blocked queues in which each waits on a
    /// buffer whose whole occupancy sits in queues of the set. Nothing in such a set can
    /// move again: each buffer drains only through blocked queues. Returns one cycle of
    /// the set (each queue followed by a queue holding part of the buffer it waits on),
    /// or None.
    pub fn find_deadlock(&self) -> Option<Vec<usize>> {
        let mut inside: Vec<bool> = self.waits_on.iter().map(Option::is_some).collect();
        let mut held = vec![0u64; self.occupancy.len()];
        loop {
            held.iter_mut().for_each(|h| *h = 0);
            for (q, _) in inside.iter().enumerate().filter(|(_, &i)| i) {
                for &(b, amount) in &self.holds[q] {
                    held[b] += amount;
                }
            }
            let mut changed = false;
            for (q, i) in inside.iter_mut().enumerate().filter(|(_, i)| **i) {
                let b = self.waits_on[q].expect("only blocked queues are inside");
                if self.occupancy[b] == 0 || held[b] != self.occupancy[b] {
                    *i = false;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        let mut path = vec![inside.iter().position(|&i| i)?];
        loop {
            let b = self.waits_on[*path.last().expect("non-empty")].expect("blocked");
            let next = (0..inside.len())
                .find(|&q| inside[q] && self.holds[q].iter().any(|&(hb, a)| hb == b && a > 0))
                .expect("a buffer of the set is held by queues of the set");
            if let Some(at) = path.iter().position(|&q| q == next) {
                return Some(path.split_off(at));
            }
            path.push(next);
        }
    }
}

/// Whether the directed graph of `edges` (pairs of node ids) has a cycle. Every deadlock
/// of blocked egresses contains a cycle of switches, each with an egress blocked toward
/// the next, so a fabric builds the exact `WaitGraph` (which walks every queued packet)
/// only when the switch-level graph of its blocked egresses has one. Sorts `edges`.
pub fn has_cycle(edges: &mut Vec<(u32, u32)>) -> bool {
    edges.sort_unstable();
    edges.dedup();
    let mut nodes: Vec<u32> = edges.iter().flat_map(|&(a, b)| [a, b]).collect();
    nodes.sort_unstable();
    nodes.dedup();
    let index = |n: u32| nodes.binary_search(&n).expect("a node of an edge");
    let successors = |n: u32| {
        let from = edges.partition_point(|&(a, _)| a < n);
        let to = edges.partition_point(|&(a, _)| a <= n);
        &edges[from..to]
    };
    // 0: not seen, 1: on the current path, 2: done.
    let mut state = vec![0u8; nodes.len()];
    for &root in &nodes {
        if state[index(root)] != 0 {
            continue;
        }
        // Depth-first, with each frame's next successor to try.
        let mut stack = vec![(root, 0usize)];
        state[index(root)] = 1;
        while let Some(&mut (n, ref mut next)) = stack.last_mut() {
            let out = successors(n);
            if let Some(&(_, m)) = out.get(*next) {
                *next += 1;
                match state[index(m)] {
                    1 => return true,
                    0 => {
                        state[index(m)] = 1;
                        stack.push((m, 0));
                    }
                    _ => {}
                }
            } else {
                state[index(n)] = 2;
                stack.pop();
            }
        }
    }
    false
}

/// Which messages wait for which (a workload's `after` lists), as counters: a message is
/// ready when every message it waits for has completed, at the latest completion plus
/// that dependency's delay.
#[derive(Clone, Debug, Default)]
pub struct Dependencies {
    waiting: Vec<u32>,
    ready_at: Vec<Time>,
    /// Dependents of message i, with their delays: `dependents[first[i]..first[i + 1]]`.
    first: Vec<u32>,
    dependents: Vec<(u32, Time)>,
}

impl Dependencies {
    pub fn new(after: &[Vec<Dep>]) -> Self {
        let n = after.len();
        let mut count = vec![0u32; n + 1];
        for deps in after {
            for d in deps {
                count[d.msg as usize + 1] += 1;
            }
        }
        for i in 0..n {
            count[i + 1] += count[i];
        }
        let mut fill = count.clone();
        let mut dependents = vec![(0, Time::ZERO); count[n] as usize];
        for (i, deps) in after.iter().enumerate() {
            for d in deps {
                dependents[fill[d.msg as usize] as usize] = (i as u32, d.delay);
                fill[d.msg as usize] += 1;
            }
        }
        Dependencies {
            waiting: after.iter().map(|d| d.len() as u32).collect(),
            ready_at: vec![Time::ZERO; n],
            first: count,
            dependents,
        }
    }

    /// Whether message `i` waits for nothing (any more).
    pub fn is_ready(&self, i: usize) -> bool {
        self.waiting[i] == 0
    }

    /// Message `i` completed at `at`: returns the messages that no longer wait, in index
    /// order, each with the time it may start.
    pub fn complete(&mut self, i: usize, at: Time) -> Vec<(u32, Time)> {
        let range = self.first[i] as usize..self.first[i + 1] as usize;
        let mut ready = Vec::new();
        for &(j, delay) in &self.dependents[range] {
            let j_ = j as usize;
            self.ready_at[j_] = self.ready_at[j_].max(at + delay);
            self.waiting[j_] -= 1;
            if self.waiting[j_] == 0 {
                ready.push((j, self.ready_at[j_]));
            }
        }
        ready
    }
}

/// Transfers inside servers at flow level: NVLink between GPUs, and the stages of the
/// hosts' data paths (PCIe copies, CPU copies).
///
/// The servers' NVLink domains at flow level (see `Nvlink`): a transfer occupies its
/// sender's NVLink transmit side and its receiver's receive side for bytes / rate, first
/// come first served, then lands after the latency. NVSwitch is non-blocking, so nothing
/// else contends.
#[derive(Clone, Debug)]
pub struct NvlinkDomains {
    nvlink: Nvlink,
    tx_free: Vec<Time>,
    rx_free: Vec<Time>,
    /// When each data-path resource is next free.
    resources: Vec<Time>,
}

impl NvlinkDomains {
    pub fn new(topo: &Topology) -> Self {
        let n = topo.host_count() as usize;
        NvlinkDomains {
            nvlink: topo.nvlink(),
            tx_free: vec![Time::ZERO; n],
            rx_free: vec![Time::ZERO; n],
            resources: Vec::new(),
        }
    }

    /// A transfer of `bytes` from `src` to `dst` posted at `now`: when it has landed.
    /// Local data-path stages (`Local`) take their own resource instead.
    pub fn transfer(&mut self, src: HostId, dst: HostId, bytes: u64, now: Time) -> Time {
        let start = now
            .max(self.tx_free[src.index()])
            .max(self.rx_free[dst.index()]);
        let end = start + self.nvlink.rate.serialization(bytes);
        self.tx_free[src.index()] = end;
        self.rx_free[dst.index()] = end;
        end + self.nvlink.latency
    }

    /// A transfer's time on idle links.
    pub fn ideal(&self, bytes: u64) -> Time {
        self.nvlink.rate.serialization(bytes) + self.nvlink.latency
    }

    /// A data-path stage of `bytes` posted at `now`: it holds its resource for
    /// bytes / rate, first come first served, and is done `latency` later.
    pub fn local(&mut self, stage: Local, bytes: u64, now: Time) -> Time {
        let r = stage.resource as usize;
        if self.resources.len() <= r {
            self.resources.resize(r + 1, Time::ZERO);
        }
        let start = now.max(self.resources[r]);
        let end = start + stage.rate.serialization(bytes);
        self.resources[r] = end;
        end + stage.latency
    }
}

/// What both fabrics track of a message beyond its transport state.
#[derive(Clone, Debug)]
pub struct Progress {
    /// When the message could start: its start time, or later once its dependencies
    /// completed.
    pub started: Time,
    /// When the receiver held every byte; None while unfinished.
    pub finish: Option<Time>,
    /// When the sender learnt it was complete.
    pub acked: Option<Time>,
    pub sent_bytes: u64,
    pub delivered_bytes: u64,
    /// The message before this one on its connection.
    pub follows: Option<u32>,
    /// Every packet has been handed to the wire at least once.
    pub injected: bool,
    /// A posted message waiting for this one to be injected.
    pub successor: Option<u32>,
    /// The message this one's connection moved on to.
    pub handed_to: Option<u32>,
}

impl Progress {
    pub fn new(start: Time, follows: Option<u32>) -> Self {
        Progress {
            started: start,
            finish: None,
            acked: None,
            sent_bytes: 0,
            delivered_bytes: 0,
            follows,
            injected: false,
            successor: None,
            handed_to: None,
        }
    }

    /// The message's outcome, with its ideal completion time.
    pub fn result(&self, msg: &Message, ideal: Time) -> FlowResult {
        FlowResult {
            finish: self.finish,
            acked: self.acked,
            delivered_bytes: self.delivered_bytes,
            start: self.started,
            ..FlowResult::new(msg, ideal)
        }
    }
}

/// A fabric's per-message state: the message and its progress.
pub trait Tracked {
    fn message(&self) -> &Message;
    fn progress(&self) -> &Progress;
    fn progress_mut(&mut self) -> &mut Progress;
}

/// Implements [`Tracked`] for a fabric's flow type holding its message in `msg` and its
/// progress in `life` (every fabric names them so).
macro_rules! tracked_by_fields {
    ($flow:ty) => {
        impl $crate::driver::Tracked for $flow {
            fn message(&self) -> &$crate::workload::Message {
                &self.msg
            }
            fn progress(&self) -> &$crate::driver::Progress {
                &self.life
            }
            fn progress_mut(&mut self) -> &mut $crate::driver::Progress {
                &mut self.life
            }
        }
    };
}
pub(crate) use tracked_by_fields;

/// The message now sending on `flow`'s connection: itself, or a later message it handed
/// the connection over to.
pub fn current_on_connection<F: Tracked>(flows: &[F], mut flow: u32) -> u32 {
    while let Some(next) = flows[flow as usize].progress().handed_to {
        flow = next;
    }
    flow
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
    pub fn flow_results(&self, ideal: impl Fn(&Message) -> Time) -> Vec<FlowResult>
    where
        F: Tracked,
    {
        self.flows
            .iter()
            .map(|f| f.progress().result(f.message(), ideal(f.message())))
            .collect()
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

/// The message life cycle both fabrics share: dependencies, transfers inside servers
/// (NVLink, data-path stages), completions. It says what to post when; the fabric
/// schedules its own events.
#[derive(Clone, Debug)]
pub struct Lifecycle {
    deps: Dependencies,
    local: NvlinkDomains,
    /// The NIC's posting latency (data-path stages inside a server have none).
    tx_latency: Time,
    /// A NIC's message rate limit: its messages start at least this far apart.
    nic_interval: Option<Time>,
    /// Per message, its sender's NIC if it goes through one (with a rate limit only).
    nic_of: Vec<Option<u32>>,
    /// Per host, when its NIC may start its next message.
    nic_next: Vec<Time>,
    /// Per message, the reduction or copy on its sender's GPU before it is posted
    /// (`Workload::prepared` at the GPU's memory bandwidth; empty when none is known).
    prep: Vec<Time>,
    /// Messages complete at both ends.
    pub completed: usize,
}

impl Lifecycle {
    pub fn new(workload: &Workload, topo: &Topology, tx_latency: Time) -> Self {
        let nic_of = match workload.message_interval {
            Some(_) => workload
                .messages
                .iter()
                .map(|m| (!Lifecycle::is_local(topo, m)).then_some(m.src.0))
                .collect(),
            None => Vec::new(),
        };
        let mut prep = Vec::new();
        if let (Some(memory), false) = (topo.nvlink().gpu_memory, workload.prepared.is_empty()) {
            prep = vec![Time::ZERO; workload.messages.len()];
            for &(i, passes) in &workload.prepared {
                let m = &workload.messages[i as usize];
                prep[i as usize] = memory.serialization(m.size * passes as u64);
            }
        }
        Lifecycle {
            deps: Dependencies::new(&workload.after),
            local: NvlinkDomains::new(topo),
            tx_latency,
            prep,
            nic_interval: workload.message_interval,
            nic_of,
            nic_next: vec![Time::ZERO; topo.host_count() as usize],
            completed: 0,
        }
    }

    /// When message `i`, ready to post at `at`, is posted: at once, or with a NIC message
    /// rate limit once its NIC's previous message started an interval before.
    fn nic_slot(&mut self, i: u32, at: Time) -> Time {
        match (
            self.nic_interval,
            self.nic_of.get(i as usize).copied().flatten(),
        ) {
            (Some(gap), Some(nic)) => {
                let next = &mut self.nic_next[nic as usize];
                let t = at.max(*next);
                *next = t + gap;
                t
            }
            _ => at,
        }
    }

    /// From a message's dependencies being met to its posting: the GPU's reduction or
    /// copy of its data, then the NIC's posting latency (data-path stages have none).
    fn post_delay(&self, i: u32, m: &Message) -> Time {
        let prep = self.prep.get(i as usize).copied().unwrap_or(Time::ZERO);
        if m.local.is_some() {
            prep
        } else {
            prep + self.tx_latency
        }
    }

    /// The messages that wait for nothing, with the time to post them (taking NIC
    /// message-rate slots in time order).
    pub fn initial_posts(&mut self, messages: &[Message]) -> Vec<(Time, u32)> {
        let mut posts: Vec<(Time, u32)> = messages
            .iter()
            .enumerate()
            .filter(|&(i, _)| self.deps.is_ready(i))
            .map(|(i, m)| (m.start + self.post_delay(i as u32, m), i as u32))
            .collect();
        if self.nic_interval.is_some() {
            posts.sort_unstable();
            for p in &mut posts {
                p.0 = self.nic_slot(p.1, p.0);
            }
        }
        posts
    }

    /// Message `flow` completed at its receiver at `at`: the messages that waited only
    /// for it, with the time to post them (once their dependency delays have passed, and
    /// not before their start).
    pub fn release<F: Tracked>(
        &mut self,
        flows: &mut [F],
        flow: u32,
        at: Time,
    ) -> Vec<(Time, u32)> {
        let ready = self.deps.complete(flow as usize, at);
        ready
            .into_iter()
            .map(|(j, ready)| {
                let f = &mut flows[j as usize];
                let started = f.message().start.max(ready);
                f.progress_mut().started = started;
                let post = started + self.post_delay(j, f.message());
                (self.nic_slot(j, post), j)
            })
            .collect()
    }

    /// The shortest time from a message completing to the posting of a dependent sent
    /// from another server, over every such dependency (`None` if there is none): how
    /// far ahead a part of a run split by servers sees the other parts' posts.
    /// `rx_latency` is how long after its last packet's arrival a network message
    /// completes.
    pub fn cross_server_slack(
        &self,
        workload: &Workload,
        topo: &Topology,
        rx_latency: Time,
    ) -> Option<Time> {
        let mut best: Option<Time> = None;
        for (j, deps) in workload.after.iter().enumerate() {
            let mj = &workload.messages[j];
            for d in deps {
                let mi = &workload.messages[d.msg as usize];
                if topo.same_server(mi.dst, mj.src) {
                    continue;
                }
                let done = if Lifecycle::is_local(topo, mi) {
                    Time::ZERO
                } else {
                    rx_latency
                };
                let slack = done + d.delay + self.post_delay(j as u32, mj);
                best = Some(best.map_or(slack, |b| b.min(slack)));
            }
        }
        best
    }

    /// Whether a message stays inside its server: NVLink or a data-path stage.
    pub fn is_local(topo: &Topology, m: &Message) -> bool {
        m.local.is_some() || topo.over_nvlink(m.src, m.dst)
    }

    /// Starts a transfer inside a server at `now`: when it lands, and the message that
    /// followed it on its connection and may now post. It is handed over at once.
    pub fn start_local<F: Tracked>(
        &mut self,
        flows: &mut [F],
        flow: u32,
        now: Time,
    ) -> (Time, Option<u32>) {
        let f = &mut flows[flow as usize];
        let m = *f.message();
        let done = match m.local {
            Some(stage) => self.local.local(stage, m.size, now),
            None => self.local.transfer(m.src, m.dst, m.size, now),
        };
        let p = f.progress_mut();
        p.injected = true;
        (done, p.successor.take())
    }

    /// A transfer inside a server landed at `now`: the message is complete at both ends.
    /// Returns what to post, as [`release`](Self::release).
    pub fn finish_local<F: Tracked>(
        &mut self,
        flows: &mut [F],
        flow: u32,
        now: Time,
    ) -> Vec<(Time, u32)> {
        let f = &mut flows[flow as usize];
        let size = f.message().size;
        let p = f.progress_mut();
        p.sent_bytes = size;
        p.delivered_bytes = size;
        p.finish = Some(now);
        p.acked = Some(now);
        self.completed += 1;
        self.release(flows, flow, now)
    }

    /// The ideal time of a message inside a server, if it is one.
    pub fn ideal_local(&self, topo: &Topology, m: &Message) -> Option<Time> {
        match m.local {
            Some(l) => Some(l.rate.serialization(m.size) + l.latency),
            None if topo.over_nvlink(m.src, m.dst) => {
                Some(self.tx_latency + self.local.ideal(m.size))
            }
            None => None,
        }
    }
}

/// The egress `port` as a hop of a reported deadlock cycle.
pub fn deadlock_hop(topo: &Topology, port: PortId) -> DeadlockHop {
    let spec = topo.port(port);
    DeadlockHop {
        node: spec.node.0,
        port: spec.local,
        peer_node: topo.port(spec.peer).node.0,
    }
}

/// Bits of a tie given to the creator's sequence number (the rest name the creator).
const SEQ_BITS: u32 = 40;

/// The ties of a packet model whose same-time events leave in (creator, the creator's
/// sequence) order, which does not depend on how a run is split over threads. The
/// creators are the ports (the port an event is handled at creates what its handler
/// schedules), then the set-up, the posts (whose tie is their message's index, whoever
/// released them) and the run-wide checks (last at their time).
#[derive(Clone, Debug)]
pub struct Ties {
    next: Vec<u64>,
}

impl Ties {
    /// Ties for a topology of `ports` ports; an error (naming the topology) if the tie's
    /// creator bits cannot name them all.
    pub fn new(ports: usize, model: &str) -> Result<Self, String> {
        let most = (1u64 << (64 - SEQ_BITS)) - 4;
        if ports as u64 > most {
            return Err(format!(
                "topology: {ports} ports; the {model} model orders same-time events by port and takes at most {most}"
            ));
        }
        Ok(Ties {
            next: vec![0; ports + 3],
        })
    }

    /// The creator of the events set up before the run.
    pub fn setup(&self) -> u32 {
        self.next.len() as u32 - 3
    }

    /// The creator of the run-wide checks (deadlock, rate sampling): last at their time.
    pub fn global(&self) -> u32 {
        self.next.len() as u32 - 1
    }

    /// Message `flow`'s post: its tie is the message's index, whoever released it.
    pub fn post(&self, flow: u32) -> u64 {
        ((self.next.len() as u64 - 2) << SEQ_BITS) | flow as u64
    }

    /// `creator`'s next tie.
    #[inline(always)]
    pub fn next(&mut self, creator: u32) -> u64 {
        let seq = &mut self.next[creator as usize];
        let tie = (creator as u64) << SEQ_BITS | *seq;
        *seq += 1;
        tie
    }
}

#[cfg(test)]
mod tests {
    use super::{has_cycle, pipeline_time, PacketTrain, WaitGraph};
    use fabricsim_core::topology::Port;
    use fabricsim_core::units::{BitRate, NodeId, PortId, Time};
    use proptest::prelude::*;

    /// Every packet stepped through every link: the definition `pipeline_time` shortens.
    fn stepped(links: &[Port], switch_latency: Time, sizes: &[u64]) -> Time {
        let mut finish = vec![Time::ZERO; links.len()];
        for &bytes in sizes {
            let mut ready = Time::ZERO;
            for (i, l) in links.iter().enumerate() {
                finish[i] = finish[i].max(ready) + l.rate.serialization(bytes);
                ready = finish[i] + l.delay + switch_latency;
            }
        }
        finish[links.len() - 1] + links[links.len() - 1].delay
    }

    fn link(gbps: u64, delay_ns: u64) -> Port {
        Port {
            node: NodeId(0),
            local: 0,
            peer: PortId(0),
            rate: BitRate::gbps(gbps),
            delay: Time::from_ns(delay_ns),
        }
    }

    #[test]
    fn cycles_are_found_and_chains_are_not() {
        assert!(has_cycle(&mut vec![(1, 2), (2, 3), (3, 1)]));
        assert!(has_cycle(&mut vec![(5, 5)]));
        assert!(has_cycle(&mut vec![(0, 1), (1, 0)]));
        // A tree of pauses toward an incast's root, and a diamond: no cycle.
        assert!(!has_cycle(&mut vec![
            (1, 0),
            (2, 0),
            (3, 1),
            (4, 1),
            (5, 2)
        ]));
        assert!(!has_cycle(&mut vec![(0, 1), (0, 2), (1, 3), (2, 3)]));
        assert!(!has_cycle(&mut Vec::new()));
        // A cycle reached only through a long chain.
        let mut chain: Vec<(u32, u32)> = (0..100).map(|i| (i, i + 1)).collect();
        assert!(!has_cycle(&mut chain.clone()));
        chain.push((100, 50));
        assert!(has_cycle(&mut chain));
    }

    #[test]
    fn one_link_is_serialisation_plus_propagation() {
        let train = PacketTrain {
            first: 4122,
            middle: 4122,
            middle_count: 8,
            last: Some(1000),
        };
        let t = pipeline_time(&[link(400, 25)], Time::from_ns(150), &train);
        // 10 packets back to back on one 400 Gb/s link (20 ps per byte), then 25 ns.
        assert_eq!(t.ps(), (9 * 4122 + 1000) * 20 + 25_000);
    }

    proptest! {
        #[test]
        fn pipelining_matches_stepping_every_packet(
            hops in prop::collection::vec((prop::sample::select(vec![25u64, 100, 200, 400, 800, 1600]), 0u64..2000), 1..7),
            first in 60u64..4200, middle in 60u64..4200, last in 60u64..4200,
            middle_count in 0u64..200, latency_ns in 0u64..1000,
        ) {
            let links: Vec<Port> = hops.iter().map(|&(g, d)| link(g, d)).collect();
            let train = PacketTrain { first, middle, middle_count, last: Some(last) };
            let mut sizes = vec![first];
            sizes.extend(std::iter::repeat_n(middle, middle_count as usize));
            sizes.push(last);
            let latency = Time::from_ns(latency_ns);
            prop_assert_eq!(pipeline_time(&links, latency, &train), stepped(&links, latency, &sizes));
        }
    }

    /// Three queues in a ring, each waiting on a buffer held by the next queue.
    fn ring(leak: bool) -> WaitGraph {
        let mut g = WaitGraph {
            waits_on: vec![Some(1), Some(2), Some(0), None],
            holds: vec![vec![(0, 10)], vec![(1, 10)], vec![(2, 10)], vec![]],
            occupancy: vec![10, 10, 10],
        };
        if leak {
            // Part of buffer 2 sits in queue 3, which is not blocked: it will drain.
            g.holds[3].push((2, 5));
            g.occupancy[2] = 15;
        }
        g
    }

    #[test]
    fn a_closed_ring_is_a_deadlock_and_a_leaking_one_is_not() {
        let cycle = ring(false).find_deadlock().expect("closed ring");
        assert_eq!(cycle.len(), 3);
        assert!(ring(true).find_deadlock().is_none());
    }

    #[test]
    fn a_chain_into_a_free_buffer_is_not_a_deadlock() {
        let g = WaitGraph {
            waits_on: vec![Some(1), Some(2)],
            holds: vec![vec![(0, 4)], vec![(1, 4)]],
            occupancy: vec![4, 4, 0],
        };
        assert!(g.find_deadlock().is_none());
    }
}
