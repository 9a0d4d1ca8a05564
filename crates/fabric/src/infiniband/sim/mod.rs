//! The InfiniBand simulation: the run's state and its event loop. The rooms of the fabric
//! are the child modules: [`hca`] and [`delivery`] (the HCA sending and receiving),
//! [`switch`] (routing, FECN, VL arbitration, SHARP) with [`egress`] (its egress queues),
//! [`link`] (the transmitter and credit-based flow control), [`deadlock`] (credit loops),
//! with [`frame`] and [`port`] the state they share.

use super::config::IbConfig;
use super::sharp::SharpGroup;
use crate::driver::failure::Failures;
use crate::driver::BuildError;
use crate::driver::{self, Lifecycle, LifecycleEvent, MessageFabric, RunState, Ties};
use crate::parallel::{InFlight, Part, Splittable};
use crate::workload::Workload;
use fabricsim_core::engine::EventQueue;
use fabricsim_core::pool::Pool;
use fabricsim_core::prefetch::{prefetch, WORTH_ABOVE_BYTES};
use fabricsim_core::proto::credit::{CreditReceiver, CreditSender};
use fabricsim_core::proto::vlarb::{ArbEntry, ArbTable};
use fabricsim_core::topology::{Routes, Topology};
use fabricsim_core::units::{NodeId, PortId, Time};
use fabricsim_core::wire::ib::{self};

mod capture;
mod deadlock;
mod delivery;
mod egress;
mod failure;
mod frame;
mod hca;
mod link;
mod port;
mod report;
mod split;
mod switch;
#[cfg(test)]
mod tests;

pub use capture::Captured;
use egress::{egress_queues, EgressVl, NO_INPUT};
pub(crate) use frame::{Event, Frame, Kind, Packet};
pub(crate) use hca::Flow;
use hca::{flows, sharp_groups, Hca};
use port::{port_states, PortCounters, PortState, Release, NEVER};
pub use report::Audit;

/// A running InfiniBand fabric.
pub struct Simulation {
    cfg: IbConfig,
    topo: Topology,
    routes: Routes,
    /// The event queue, the flows and their life cycle, the stop and the capture.
    state: RunState<Event, Flow, Captured>,
    /// Every frame on a link or in a switch queue, stored once from its first transmission
    /// to its delivery.
    frames: Pool<Frame>,
    /// The pool size above which the model's state outgrows the cache and
    /// [`Simulation::prefetch_ahead`] asks for the coming events' state.
    prefetch_above_slots: usize,
    ports: Vec<PortState>,
    /// Switch egress queues at `port x VLs + vl` (empty on host ports).
    egress: Vec<EgressVl>,
    /// Send and receive credit state of each port's VLs, at `port x VLs + vl`: dense
    /// arrays (a few kilobytes) that stay in the first-level cache, where a small heap
    /// vector per port cost a miss per access.
    tx_credit: Vec<CreditSender>,
    rx_credit: Vec<CreditReceiver>,
    /// The VL arbitration table every port uses.
    arbitration: ArbTable,
    /// Adaptive routing's load measure per port (see [`Simulation::load`]), refreshed
    /// whenever one of its terms changes; kept apart from `ports` so that comparing a
    /// switch's candidate up-ports reads one or two cache lines, not one port each.
    loads: Vec<u64>,
    counters: Vec<PortCounters>,
    hcas: Vec<Hca>,
    sharp: Vec<SharpGroup>,
    fecn_marks: u64,
    becns: u64,
    duplicates: u64,
    buffer_overflows: u64,
    /// Data packets in flight, and their peak.
    in_flight: InFlight,
    deadlock_check_pending: bool,
    /// A closed set of blocked VLs seen at the last check, with its ports' packet counts.
    deadlock_suspect: Option<(Vec<usize>, Vec<u64>)>,
    /// Each event creator's next tie (see [`Ties`]).
    ties: Ties,
    /// The creator of what the current event's handler schedules: the port it is
    /// handled at (a link's far end for an arrival, a sender's HCA for a post).
    creator: u32,
    /// This run's share when it is split over threads (see [`crate::parallel`]).
    part: Option<Part<Frame>>,
    /// The run's lookahead (see [`driver::lookahead`]).
    lookahead: Time,
    /// Ports down and routed around (see [`crate::driver::failure`]).
    failures: Failures,
}

impl Simulation {
    /// Builds the fabric and posts every message at its start time. The configuration
    /// and messages must already be validated (hosts in range, sizes positive).
    pub fn new(
        cfg: IbConfig,
        topo: Topology,
        workload: &Workload,
        stop_at: Option<Time>,
    ) -> Result<Self, BuildError> {
        Self::build(cfg, topo, workload, stop_at, None)
    }

    /// Builds one part of a run split over threads: it keeps the whole state but handles
    /// only the events of the ports `part` holds. Its run ends where its coordinator says.
    pub(crate) fn new_part(
        cfg: IbConfig,
        topo: Topology,
        workload: &Workload,
        part: Part<Frame>,
    ) -> Result<Self, BuildError> {
        Self::build(cfg, topo, workload, None, Some(part))
    }

    fn build(
        cfg: IbConfig,
        topo: Topology,
        workload: &Workload,
        stop_at: Option<Time>,
        part: Option<Part<Frame>>,
    ) -> Result<Self, BuildError> {
        let routes = Routes::minimal(&topo)?;
        check_radix(&topo)?;
        let vls = cfg.virtual_lanes as usize;
        let blocks = cfg.vl_buffer / ib::CREDIT_BLOCK as u32;
        let arbitration = ArbTable::new(
            (cfg.vl_weights.iter().enumerate())
                .map(|(vl, &weight)| ArbEntry {
                    vl: vl as u8,
                    weight,
                })
                .collect(),
        );
        let egress = egress_queues(&topo, vls);
        let ports = port_states(&topo, &arbitration);
        let hcas = (0..topo.host_count()).map(|_| Hca::new(vls)).collect();
        let ties = Ties::new(ports.len(), "InfiniBand")?;
        let queue = EventQueue::new();
        let messages = &workload.messages;
        let mut lifecycle = Lifecycle::new(workload, &topo, cfg.hca_tx_latency);
        let initial = lifecycle.initial_posts(messages);
        let slack = lifecycle.cross_server_slack(workload, &topo, cfg.hca_rx_latency);
        let fc = ib::FLOW_CONTROL_PACKET_LEN as u64;
        let grid = driver::lookahead(&topo, fc, slack, cfg.deadlock_check);
        let sharp = sharp_groups(&cfg, &topo, workload)?;
        let flows = flows(&cfg, &topo, workload);
        let state_bytes = ports.len() * std::mem::size_of::<PortState>()
            + egress.len() * std::mem::size_of::<EgressVl>();
        let mut sim = Simulation {
            failures: cfg.failures.start(topo.ports().len()),
            cfg,
            topo,
            routes,
            state: RunState::new(
                queue,
                flows,
                lifecycle,
                stop_at,
                part.is_none().then_some(grid),
            ),
            frames: Pool::default(),
            prefetch_above_slots: driver::prefetch_above_slots::<Frame, ()>(state_bytes),
            loads: vec![0; ports.len()],
            counters: vec![PortCounters::default(); ports.len()],
            tx_credit: vec![CreditSender::new(blocks); ports.len() * vls],
            rx_credit: vec![CreditReceiver::new(blocks); ports.len() * vls],
            arbitration,
            ports,
            egress,
            hcas,
            sharp,
            fecn_marks: 0,
            becns: 0,
            duplicates: 0,
            buffer_overflows: 0,
            in_flight: InFlight::default(),
            deadlock_check_pending: false,
            deadlock_suspect: None,
            creator: ties.setup(),
            ties,
            part,
            lookahead: grid,
        };
        sim.schedule_credit_refreshes();
        sim.schedule_failures();
        // Where the ports and egress queues alone outgrow the cache, so do the event
        // queue's nodes: a dense fabric's drained bucket is a list of dozens of them.
        sim.state.queue.walk_ahead(state_bytes > WORTH_ABOVE_BYTES);
        <Simulation as MessageFabric>::schedule_posts(&mut sim, initial);
        Ok(sim)
    }

    /// Each port's first credit refresh: the ports' timers are not synchronised, so their
    /// phases spread over one period.
    fn schedule_credit_refreshes(&mut self) {
        let nports = self.ports.len() as u64;
        for p in 0..nports {
            if !self.holds(p as u32) {
                continue;
            }
            let phase = Time(self.cfg.credit_refresh.ps() * (p + 1) / nports.max(1));
            let tie = self.ties.next(p as u32);
            let event = Event::CreditRefresh { port: p as u32 };
            self.state.queue.schedule_tied(phase, tie, event);
        }
    }

    /// Schedules `event` at `at` as the current creator's next event.
    fn schedule(&mut self, at: Time, event: Event) {
        let tie = self.ties.next(self.creator);
        self.state.queue.schedule_tied(at, tie, event);
    }

    /// The port an event is handled at, which creates what its handler schedules.
    #[inline(always)]
    fn creator_of(&self, event: &Event) -> u32 {
        match *event {
            Event::Transmitter { port, .. } | Event::CreditRefresh { port } => port,
            Event::Arrival { port } => self.ports[port as usize].link.peer.0,
            Event::Post { flow } | Event::LocalDone { flow } => {
                self.state.flows[flow as usize].nic_port
            }
            Event::DeadlockCheck | Event::Failure { .. } => self.ties.global(),
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

    #[inline(always)]
    fn handle_event(&mut self) {
        let Some((_, event)) = self.state.next_event() else {
            return;
        };
        self.creator = self.creator_of(&event);
        self.prefetch_ahead();
        match event {
            Event::Transmitter { port, generation } => {
                let p = &mut self.ports[port as usize];
                if p.generation != generation {
                    return;
                }
                if p.busy {
                    p.busy = false;
                    let releasing = p.releasing.take();
                    self.add_load(PortId(port), -1);
                    if let Some(r) = releasing {
                        self.release(r);
                    }
                }
                self.ports[port as usize].wake_at = NEVER;
                self.try_transmit(PortId(port));
            }
            Event::Arrival { port } => self.arrive(PortId(port)),
            Event::CreditRefresh { port } => {
                let p = &mut self.ports[port as usize];
                if !p.fc_sent_since_refresh {
                    p.fc_pending = (1u16 << self.cfg.virtual_lanes) - 1;
                }
                p.fc_sent_since_refresh = false;
                let next = self.state.queue.now() + self.cfg.credit_refresh;
                self.schedule(next, Event::CreditRefresh { port });
                self.try_transmit(PortId(port));
            }
            Event::DeadlockCheck => self.check_deadlock(),
            Event::LocalDone { flow } => self.local_done(flow),
            Event::Post { flow } => self.post(flow),
            Event::Failure { failure, phase } => self.on_failure(failure, phase),
        }
    }

    /// Asks for the state the coming events will touch, in stages, so that their cache
    /// misses overlap the current event and each stage reads only lines an earlier stage
    /// asked for: for the third event ahead, both lines of its port and its first egress
    /// VL; for the second, the first packet maturing at that VL and the queue of the
    /// input whose turn it is; for the next, the frame at that input's head, or, if it is
    /// an arrival, the frame at the head of its link. (A large fabric makes hundreds of
    /// events per nanosecond of simulated time, so a packet's frame and queues have left
    /// the cache by the time it matures, 150 ns after it arrived, and again by its turn.)
    #[inline(always)]
    fn prefetch_ahead(&self) {
        if self.frames.slots() <= self.prefetch_above_slots {
            return;
        }
        let queue = &self.state.queue;
        if let Some(&Event::Transmitter { port, .. } | &Event::Arrival { port }) =
            queue.peek_ahead(2)
        {
            let p = &self.ports[port as usize];
            prefetch(p);
            prefetch(&p.wake_at);
            prefetch(&self.egress[port as usize * self.vls()]);
        }
        if let Some(&Event::Transmitter { port, .. }) = queue.peek_ahead(1) {
            self.egress[port as usize * self.vls()].prefetch_next(&self.frames);
        }
        match queue.peek_ahead(0) {
            Some(&Event::Arrival { port }) => {
                if let Some(slot) = self.ports[port as usize].wire.head() {
                    self.frames.prefetch(slot);
                }
            }
            Some(&Event::Transmitter { port, .. }) => {
                self.egress[port as usize * self.vls()].prefetch_turn(&self.frames);
            }
            _ => {}
        }
    }

    fn vls(&self) -> usize {
        self.cfg.virtual_lanes as usize
    }

    /// Index of `port`'s VL `vl` in the per-VL arrays.
    fn vl_index(&self, port: PortId, vl: u8) -> usize {
        port.index() * self.vls() + vl as usize
    }

    /// Data packets in flight changed by `change` (a part of a split run logs it for its
    /// coordinator, which finds the run's peak).
    fn count_in_flight(&mut self, change: i64) {
        (self.in_flight).change(self.part.as_mut(), &self.state.queue, change);
    }

    /// Bytes of simulator state per packet in flight: its slot in the frame pool
    /// (packets carry no payload bytes; per-port and per-flow state is not per packet).
    pub const fn bytes_per_packet_in_flight() -> usize {
        Pool::<Frame>::slot_bytes()
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
    type Capture = Captured;

    fn state(&self) -> &RunState<Event, Flow, Captured> {
        &self.state
    }
    fn state_mut(&mut self) -> &mut RunState<Event, Flow, Captured> {
        &mut self.state
    }
    fn topology(&self) -> &Topology {
        &self.topo
    }
    #[inline(always)]
    fn handle_next(&mut self) {
        self.handle_event();
    }

    /// BECNs for `prev` reach `next` from now on.
    fn inherit_connection(&mut self, prev: u32, next: u32) {
        let (cc, t) = {
            let p = &mut self.state.flows[prev as usize];
            p.life.handed_to = Some(next);
            (p.cc.clone(), p.next_allowed)
        };
        let n = &mut self.state.flows[next as usize];
        n.cc = cc;
        n.next_allowed = n.next_allowed.max(t);
    }

    /// The message joins its HCA's QP list for its VL.
    fn enqueue(&mut self, flow: u32) {
        let f = &self.state.flows[flow as usize];
        let (src, vl) = (f.msg.src, f.vl as usize);
        self.hcas[src.index()].qps[vl].push_back(flow);
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
                let tie = self.ties.post(flow);
                (self.state.queue).schedule_tied(t, tie, Event::Post { flow });
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

/// Refuses a switch with more ports than an input index can name ([`NO_INPUT`]).
fn check_radix(topo: &Topology) -> Result<(), BuildError> {
    let too_many = |n: usize| topo.node_ports(NodeId(n as u32)).len() + 1 >= NO_INPUT as usize;
    match (0..topo.nodes().len()).find(|&n| too_many(n)) {
        Some(n) => Err(BuildError::SwitchRadix {
            switch: n,
            ports: topo.node_ports(NodeId(n as u32)).len(),
            max: NO_INPUT as usize - 2,
        }),
        None => Ok(()),
    }
}
