//! A message's life cycle, the same on both fabrics: its dependencies, its post to the NIC, transfers inside a server, and its completion.

use crate::report::FlowResult;
use crate::workload::nvswitch_bytes;
use crate::workload::{Dep, Local, Message, NvSwitchOp, Stage, Workload};
use fabricsim_core::topology::{Nvlink, Topology};
use fabricsim_core::units::{HostId, Time};

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
/// else contends. An NVLink SHARP operation ([`NvSwitchOp`]) holds each GPU side it uses
/// for its bytes at NVLS's efficiency, each side first come first served on its own (the
/// switch streams the slice through; no side waits for the others to be free).
#[derive(Clone, Debug)]
pub struct NvlinkDomains {
    nvlink: Nvlink,
    gpus_per_node: u32,
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
            gpus_per_node: topo.gpus_per_node().max(1),
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

    /// An NVLink SHARP operation of `bytes` on `owner`'s server posted at `now`: when it
    /// has landed. A reduction holds every GPU's transmit side and the owner's receive
    /// side, a multicast the owner's transmit side and every GPU's receive side.
    pub fn nvswitch(&mut self, op: NvSwitchOp, owner: HostId, bytes: u64, now: Time) -> Time {
        let hold = self.nvlink.rate.serialization(nvswitch_bytes(bytes));
        let g = self.gpus_per_node;
        let server = (owner.0 / g * g) as usize..(owner.0 / g * g + g) as usize;
        let (all, one) = match op {
            NvSwitchOp::Reduce => (&mut self.tx_free, &mut self.rx_free),
            NvSwitchOp::Multicast => (&mut self.rx_free, &mut self.tx_free),
        };
        let mut end = hold_side(&mut one[owner.index()], now, hold);
        for free in &mut all[server] {
            end = end.max(hold_side(free, now, hold));
        }
        end + self.nvlink.latency
    }

    /// An NVLink SHARP operation's time on an idle server.
    pub fn nvswitch_ideal(&self, bytes: u64) -> Time {
        self.ideal(nvswitch_bytes(bytes))
    }

    /// A data-path stage of `bytes` posted at `now`: it holds its resource for
    /// bytes / rate, first come first served, and is done `latency` later.
    pub fn local(&mut self, stage: Stage, bytes: u64, now: Time) -> Time {
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

/// Holds a GPU's NVLink side, free at `free`, for `hold` from `now` on: when it is done.
fn hold_side(free: &mut Time, now: Time, hold: Time) -> Time {
    *free = now.max(*free) + hold;
    *free
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
        if matches!(m.local, Some(Local::Stage(_))) {
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
            Some(Local::Stage(stage)) => self.local.local(stage, m.size, now),
            Some(Local::NvSwitch(op)) => self.local.nvswitch(op, m.src, m.size, now),
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
            Some(Local::Stage(l)) => Some(l.rate.serialization(m.size) + l.latency),
            Some(Local::NvSwitch(_)) => Some(self.tx_latency + self.local.nvswitch_ideal(m.size)),
            None if topo.over_nvlink(m.src, m.dst) => {
                Some(self.tx_latency + self.local.ideal(m.size))
            }
            None => None,
        }
    }
}
