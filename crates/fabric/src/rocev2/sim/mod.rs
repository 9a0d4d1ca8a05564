//! The RoCEv2 simulation: the run's state and its event loop. The rooms of the fabric
//! are the child modules: [`nic`] and [`delivery`] (the NIC sending and receiving),
//! [`switch`] (admission, routing, ECN, egress choice), [`transmitter`] (the link and its
//! frame-end events), [`pfc`] (pause, watchdog, deadlock), with [`frame`] and [`port`]
//! the state they share.

use super::config::{LoadBalancing, RoceConfig, FLOWLET_ENTRIES};
use crate::driver::failure::Failures;
use crate::driver::BuildError;
use crate::driver::{self, Lifecycle, LifecycleEvent, MessageFabric, RunState, Ties};
use crate::parallel::{InFlight, Part, Splittable};
use crate::report::Deadlock;
use crate::workload::Workload;
use fabricsim_core::engine::EventQueue;
use fabricsim_core::pool::Pool;
use fabricsim_core::topology::{NodeKind, Routes, Topology};
use fabricsim_core::units::{HostId, PortId, Time};
use fabricsim_core::wire::roce::{self};

mod capture;
mod delivery;
mod failure;
mod frame;
mod nic;
mod pfc;
mod port;
mod prefetch;
mod rates;
mod reaction;
mod report;
mod split;
mod switch;
#[cfg(test)]
mod tests;
mod transmitter;

pub use frame::CapturedFrame;
pub(crate) use frame::{Event, Frame, Kind, Packet, PacketPort};
use frame::{CONTROL, DATA, MAX_MTU};
pub(crate) use nic::Flow;
use nic::{flows, Nic};
use port::{port_states, AfterEnd, PortState, NEVER};
pub use rates::RateSample;
use reaction::{Reaction, Telemetry};
pub use report::Audit;
use switch::{shared_buffers, Flowlet, SharedBuffer};

/// A running RoCEv2 fabric.
pub struct Simulation {
    cfg: RoceConfig,
    topo: Topology,
    routes: Routes,
    /// The event queue, the flows and their life cycle, the stop and the capture.
    state: RunState<Event, Flow, CapturedFrame>,
    /// Every frame on a link or in a switch egress queue; a packet keeps its slot from its
    /// NIC to its delivery, relinked from link to queue to link. A slot keeps its
    /// successor's time ([`Simulation::sendable_class`]).
    frames: Pool<Frame, Time>,
    /// The pool size above which the model's state outgrows the cache and
    /// [`Simulation::prefetch_ahead`] asks for the coming events' state.
    prefetch_above_slots: usize,
    /// The ports alone outgrow the cache: prefetch further ahead, and the route entries
    /// too (see [`Simulation::prefetch_ahead`]); the event queue walks ahead too
    /// ([`EventQueue::walk_ahead`]).
    prefetch_deep: bool,
    ports: Vec<PortState>,
    /// With HPCC, Swift or TIMELY: each frame slot's telemetry (see [`Telemetry`]),
    /// indexed by slot like the pool.
    telemetry: Vec<Telemetry>,
    /// The network's base RTT and what follows from it, when senders need it.
    reaction: Option<Reaction>,
    buffers: Vec<SharedBuffer>,
    /// Flowlet switching only: every switch's flowlet table, each
    /// [`FLOWLET_ENTRIES`] long, starting at `flowlet_base[node]`.
    flowlets: Vec<Flowlet>,
    flowlet_base: Vec<usize>,
    nics: Vec<Nic>,
    /// Each event creator's next tie (see [`Ties`]).
    ties: Ties,
    /// The creator of what the current event's handler schedules: the port it is
    /// handled at (a link's far end for an arrival, a sender's NIC for a post).
    creator: u32,
    /// The plain schedule only: the port whose frame end is being handled and that end's
    /// tie, which the wake-up it queues takes (see [`Self::schedule_plain_end`]).
    wake_tie: Option<(u32, u64)>,
    /// This run's share when it is split over threads.
    part: Option<Part<Frame>>,
    /// A part's tie of the event behind each of its rate cuts (`rates` holds them).
    rate_ties: Vec<u64>,
    /// See [`driver::lookahead`].
    lookahead: Time,
    drops: u64,
    lost_payload: u64,
    retransmitted: u64,
    cnps: u64,
    naks: u64,
    timeouts: u64,
    /// Data packets in flight, and their peak.
    in_flight: InFlight,
    rates: Vec<RateSample>,
    deadlock_check_pending: bool,
    /// Messages on a NIC (posted, not known to be acknowledged), for rate sampling.
    on_nic: Vec<u32>,
    /// Cycles left to the watchdog, with the trip count when each was recorded.
    pfc_cycles: Vec<Deadlock>,
    trips_at_last_cycle: u64,
    watchdog_trips: u64,
    /// Ports down and routed around (see [`crate::driver::failure`]).
    failures: Failures,
}

impl Simulation {
    /// Builds the fabric and posts every message at its start time. Configuration and
    /// messages must already be validated.
    pub fn new(
        cfg: RoceConfig,
        topo: Topology,
        workload: &Workload,
        stop_at: Option<Time>,
    ) -> Result<Self, BuildError> {
        Self::build(cfg, topo, workload, stop_at, None)
    }

    /// Builds one part of a run split over threads: it keeps the whole state but handles
    /// only the events of the ports `part` holds. Its run ends where its coordinator says.
    pub(crate) fn new_part(
        cfg: RoceConfig,
        topo: Topology,
        workload: &Workload,
        part: Part<Frame>,
    ) -> Result<Self, BuildError> {
        Self::build(cfg, topo, workload, None, Some(part))
    }

    fn build(
        cfg: RoceConfig,
        topo: Topology,
        workload: &Workload,
        stop_at: Option<Time>,
        part: Option<Part<Frame>>,
    ) -> Result<Self, BuildError> {
        check_fits(&cfg, &topo, workload)?;
        let routes = Routes::minimal(&topo)?;
        let ports = port_states(&cfg, &topo);
        let buffers = shared_buffers(&cfg, &topo, &ports)?;
        let ties = Ties::new(ports.len(), "RoCEv2")?;
        let messages = &workload.messages;
        let mut lifecycle = Lifecycle::new(workload, &topo, cfg.nic_tx_latency);
        let initial = lifecycle.initial_posts(messages);
        let slack = lifecycle.cross_server_slack(workload, &topo, cfg.nic_rx_latency);
        let pfc = roce::PFC_FRAME_WIRE_LEN as u64;
        let grid = driver::lookahead(&topo, pfc, slack, cfg.deadlock_check);
        let reaction = Reaction::new(&cfg, &topo, &routes, workload);
        let flows = flows(&cfg, &topo, workload, reaction.as_ref());
        let port_bytes = ports.len() * std::mem::size_of::<PortState>();
        let (flowlets, flowlet_base) = flowlet_tables(&cfg, &topo);
        let failures = cfg.failures.start(topo.ports().len());
        let mut sim = Simulation {
            failures,
            nics: vec![Nic::default(); topo.host_count() as usize],
            cfg,
            topo,
            routes,
            state: RunState::new(
                EventQueue::new(),
                flows,
                lifecycle,
                stop_at,
                part.is_none().then_some(grid),
            ),
            frames: Pool::default(),
            prefetch_above_slots: driver::prefetch_above_slots::<Frame, Time>(port_bytes),
            prefetch_deep: port_bytes > fabricsim_core::prefetch::WORTH_ABOVE_BYTES,
            ports,
            telemetry: Vec::new(),
            reaction,
            buffers,
            flowlets,
            flowlet_base,
            ties,
            creator: 0,
            wake_tie: None,
            part,
            rate_ties: Vec::new(),
            lookahead: grid,
            drops: 0,
            lost_payload: 0,
            retransmitted: 0,
            cnps: 0,
            naks: 0,
            timeouts: 0,
            in_flight: InFlight::default(),
            rates: Vec::new(),
            deadlock_check_pending: false,
            pfc_cycles: Vec::new(),
            trips_at_last_cycle: 0,
            on_nic: Vec::new(),
            watchdog_trips: 0,
        };
        sim.creator = sim.ties.setup();
        sim.state.queue.walk_ahead(sim.prefetch_deep);
        sim.schedule_pause_storms();
        sim.schedule_failures();
        if sim.cfg.record_rates && !messages.is_empty() && sim.part.is_none() {
            sim.schedule_global(sim.cfg.rate_sample, Event::SampleRates);
        }
        <Simulation as MessageFabric>::schedule_posts(&mut sim, initial);
        Ok(sim)
    }

    /// Schedules the NIC stalls of the configured pause storms this run (or part) holds.
    fn schedule_pause_storms(&mut self) {
        for storm in self.cfg.pause_storms.clone() {
            if !self.holds(self.topo.host_port(storm.host).0) {
                continue;
            }
            let host = storm.host.0;
            self.schedule(
                storm.start,
                Event::Stall {
                    host,
                    stalled: true,
                },
            );
            if let Some(end) = storm.end {
                self.schedule(
                    end,
                    Event::Stall {
                        host,
                        stalled: false,
                    },
                );
            }
        }
    }

    /// Schedules `event` at `at` as the current creator's next event.
    fn schedule(&mut self, at: Time, event: Event) {
        let tie = self.ties.next(self.creator);
        self.state.queue.schedule_tied(at, tie, event);
    }

    /// Schedules a run-wide check at `at`.
    fn schedule_global(&mut self, at: Time, event: Event) {
        let tie = self.ties.next(self.ties.global());
        self.state.queue.schedule_tied(at, tie, event);
    }

    /// The port an event is handled at, which creates what its handler schedules.
    #[inline(always)]
    fn creator_of(&self, event: &Event) -> u32 {
        match *event {
            Event::Transmitter { port, .. }
            | Event::PauseRefresh { port }
            | Event::Watchdog { port } => port,
            Event::Arrival { port } => self.ports[port as usize].link.peer.0,
            Event::Post { flow } | Event::Timeout { flow } | Event::LocalDone { flow } => {
                self.state.flows[flow as usize].nic_port
            }
            Event::Stall { host, .. } => self.topo.host_port(HostId(host)).0,
            Event::DeadlockCheck | Event::SampleRates | Event::Failure { .. } => self.ties.global(),
        }
    }

    pub fn now(&self) -> Time {
        self.state.now()
    }

    pub fn events(&self) -> u64 {
        self.state.events()
    }

    /// The windows a split run took (0 for a run on one thread).
    pub fn windows(&self) -> u64 {
        self.state.windows()
    }

    /// Payload bytes a flow's receiver has placed so far.
    pub fn flow_delivered(&self, flow: usize) -> u64 {
        self.state.flows[flow].life.delivered_bytes
    }

    /// Data bytes queued at a port's egress now.
    pub fn queued_data(&self, port: PortId) -> u64 {
        self.ports[port.index()].queued[DATA]
    }

    /// Data bytes at a port's egress ready to leave and waiting: the queue a switch
    /// reports (and HPCC's INT stamps), without the packets still inside its latency.
    pub fn waiting_data(&self, port: PortId) -> u64 {
        self.waiting(port, DATA, self.state.queue.now())
    }

    /// Every DCQCN rate cut and, every `rate_sample`, each active flow's pacing rate and
    /// sent rate, in time order.
    pub fn rate_samples(&self) -> &[RateSample] {
        &self.rates
    }

    #[inline(always)]
    fn handle_event(&mut self) {
        if let Some((now, event)) = self.state.next_event() {
            self.handle(now, event);
        }
    }

    #[inline(always)]
    fn handle(&mut self, now: Time, event: Event) {
        self.creator = self.creator_of(&event);
        self.prefetch_ahead();
        match event {
            Event::Transmitter { port, generation } => {
                let p = &mut self.ports[port as usize];
                if p.generation != generation {
                    return;
                }
                if p.busy && p.plain_end_waits != NEVER {
                    // The plain schedule's frame end that the deferred one would not queue.
                    self.wake_tie = Some((port, self.state.queue.now_tie()));
                    p.plain_end_waits = NEVER;
                }
                p.busy = false;
                p.wake_at = NEVER;
                p.wake_after_end = NEVER;
                self.try_transmit(PortId(port));
                self.wake_tie = None;
            }
            Event::Arrival { port } => self.arrive(PortId(port)),
            Event::Post { flow } => self.post(flow),
            Event::Timeout { flow } => self.on_timeout(flow, now),
            Event::PauseRefresh { port } => {
                let p = &mut self.ports[port as usize];
                if p.xoff && p.pause_refresh_at == now {
                    p.pfc_pending = Some(self.cfg.pause_quanta);
                    p.pause_refresh_at = NEVER;
                    self.try_transmit(PortId(port));
                }
            }
            Event::DeadlockCheck => self.check_deadlock(now),
            Event::LocalDone { flow } => self.local_done(flow),
            Event::Stall { host, stalled } => self.set_stalled(HostId(host), stalled),
            Event::Watchdog { port } => self.watchdog(PortId(port), now),
            Event::SampleRates => self.sample_rates(now),
            Event::Failure { failure, phase } => self.on_failure(failure, phase, now),
        }
    }

    /// Data packets in flight changed by `change` (a part of a split run logs it for its
    /// coordinator, which alone sees them all).
    fn count_in_flight(&mut self, change: i64) {
        (self.in_flight).change(self.part.as_mut(), &self.state.queue, change);
    }

    /// Counts a data packet lost at `port`.
    fn drop_data(&mut self, port: PortId, pkt: Packet) {
        self.drops += 1;
        self.lost_payload += pkt.payload as u64;
        self.count_in_flight(-1);
        self.ports[port.index()].drops += 1;
    }
}

impl LifecycleEvent for Event {
    fn post(flow: u32) -> Self {
        Event::Post { flow }
    }
    fn local_done(flow: u32) -> Self {
        Event::LocalDone { flow }
    }
}

impl MessageFabric for Simulation {
    type Event = Event;
    type Flow = Flow;
    type Capture = CapturedFrame;

    fn state(&self) -> &RunState<Event, Flow, CapturedFrame> {
        &self.state
    }
    fn state_mut(&mut self) -> &mut RunState<Event, Flow, CapturedFrame> {
        &mut self.state
    }
    fn topology(&self) -> &Topology {
        &self.topo
    }
    #[inline(always)]
    fn handle_next(&mut self) {
        self.handle_event();
    }

    /// The DCQCN state and pacing carry over; CNPs for `prev` reach `next` from now on.
    fn inherit_connection(&mut self, prev: u32, next: u32) {
        let (rp, cc, base, t) = {
            let p = &mut self.state.flows[prev as usize];
            p.life.handed_to = Some(next);
            let base = p.psn_base + p.sender.packets();
            (p.rp.clone(), p.cc.clone(), base, (p.last_tx, p.last_wire))
        };
        let n = &mut self.state.flows[next as usize];
        n.rp = rp;
        n.cc = cc;
        n.psn_base = base;
        (n.last_tx, n.last_wire) = t;
    }

    /// The message joins its NIC's round-robin list of QPs.
    fn enqueue(&mut self, flow: u32) {
        self.activate(flow, self.state.queue.now());
        let src = self.state.flows[flow as usize].msg.src;
        self.try_transmit(self.topo.host_port(src));
    }

    fn schedule_local_done(&mut self, at: Time, flow: u32) {
        self.schedule(at, Event::LocalDone { flow });
    }

    /// A post's tie is its message's index, so that it is the same whichever event (and
    /// whichever thread) released it.
    fn schedule_posts(&mut self, posts: Vec<(Time, u32)>) {
        for (t, flow) in posts {
            if self.holds(self.state.flows[flow as usize].nic_port) {
                self.state
                    .queue
                    .schedule_tied(t, self.ties.post(flow), Event::Post { flow });
            }
        }
    }

    /// A part of a split run tells the others, which may send the dependents.
    fn released(&mut self, flow: u32, at: Time) {
        if let Some(part) = &mut self.part {
            part.tell_completed(flow, at);
        }
    }
}

/// Every switch's flowlet table under flowlet switching (none otherwise), and where each
/// node's starts.
fn flowlet_tables(cfg: &RoceConfig, topo: &Topology) -> (Vec<Flowlet>, Vec<usize>) {
    if !matches!(cfg.load_balancing, LoadBalancing::Flowlet { .. }) {
        return (Vec::new(), Vec::new());
    }
    let mut base = Vec::with_capacity(topo.nodes().len());
    let mut next = 0;
    for kind in topo.nodes() {
        base.push(next);
        if matches!(kind, NodeKind::Switch { .. }) {
            next += FLOWLET_ENTRIES;
        }
    }
    (vec![Flowlet::default(); next], base)
}

/// Refuses what the model cannot hold: an MTU above [`MAX_MTU`], more ports than a
/// [`PacketPort`] can name, SHARP groups (InfiniBand's).
fn check_fits(cfg: &RoceConfig, topo: &Topology, workload: &Workload) -> Result<(), BuildError> {
    if cfg.mtu > MAX_MTU {
        return Err(BuildError::Mtu {
            mtu: cfg.mtu,
            max: MAX_MTU,
        });
    }
    if topo.ports().len() >= PacketPort::MAX_PORTS {
        return Err(BuildError::TooManyPorts {
            ports: topo.ports().len(),
            model: "RoCEv2",
            max: PacketPort::MAX_PORTS as u64 - 1,
        });
    }
    if !workload.sharp_groups.is_empty() {
        return Err(BuildError::SharpNeedsInfiniband);
    }
    Ok(())
}
