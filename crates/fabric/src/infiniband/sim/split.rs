//! A run split over threads: the parts' hand-overs and checks, and their merge into one run.

use super::{EgressVl, Event, Flow, Frame, PortState, Simulation};
use crate::parallel::{Check, Part, SplitEnd, Splittable};
use fabricsim_core::pool::Pool;
use fabricsim_core::units::{HostId, Time};

impl Splittable for Simulation {
    type Frame = Frame;
    type Sample = ();
    type CheckMemory = Option<(Vec<usize>, Vec<u64>)>;

    fn part(&self) -> Option<&Part<Frame>> {
        self.part.as_ref()
    }

    fn part_mut(&mut self) -> &mut Part<Frame> {
        self.part.as_mut().expect("a part")
    }

    /// The lookahead of this run, and its window grid (see [`driver::lookahead`]).
    fn lookahead(&self) -> Time {
        self.lookahead
    }

    fn deadlock_check_interval(&self) -> Time {
        self.cfg.deadlock_check
    }

    fn sampling(&self) -> Option<Time> {
        None
    }

    fn receive(&mut self, port: u32, frame: Frame, arrival: Time, tie: u64) {
        let slot = self.frames.alloc(frame);
        let event = Event::Arrival { port };
        let (frames, queue) = (&mut self.frames, &mut self.state.queue);
        (self.ports[port as usize].wire).carry(frames, queue, slot, arrival, tie, event);
    }

    fn set_deadlock_check_pending(&mut self, pending: bool) {
        self.deadlock_check_pending = pending;
    }

    fn check_deadlock(parts: &[&Self], _: Time, suspect: &mut Self::CheckMemory) -> Check {
        Self::judge(parts, suspect)
    }

    fn take_samples(_: &mut [&mut Self], _: Time) -> Vec<()> {
        Vec::new()
    }

    /// Each port (its state, egress VLs, credits and load) and each message end from
    /// the part that holds them (a message's receiver side from its receiver's part),
    /// counters summed; `end` is what the coordinator saw.
    fn merge(mut parts: Vec<Simulation>, mut end: SplitEnd<()>) -> Simulation {
        let owner = parts[0].part.as_ref().expect("a part").owner.clone();
        let vls = parts[0].vls();
        let from = |i: usize| &parts[owner[i] as usize];
        let ports: Vec<PortState> = (0..owner.len()).map(|i| from(i).ports[i].clone()).collect();
        let per_vl = |q: usize| from(q / vls);
        let egress: Vec<EgressVl> = (0..owner.len() * vls)
            .map(|q| per_vl(q).egress[q].clone())
            .collect();
        let tx_credit = (0..owner.len() * vls)
            .map(|q| per_vl(q).tx_credit[q].clone())
            .collect();
        let rx_credit = (0..owner.len() * vls)
            .map(|q| per_vl(q).rx_credit[q].clone())
            .collect();
        let loads = (0..owner.len()).map(|i| from(i).loads[i]).collect();
        let counters = (0..owner.len()).map(|i| from(i).counters[i]).collect();
        let topo = &parts[0].topo;
        let hcas = (0..topo.host_count())
            .map(|h| from(topo.host_port(HostId(h)).index()).hcas[h as usize].clone())
            .collect();
        let flows: Vec<Flow> = (parts[0].state.flows.iter().enumerate())
            .map(|(i, f)| {
                let receiver = &from(topo.host_port(f.msg.dst).index()).state.flows[i];
                let mut flow = from(f.nic_port as usize).state.flows[i].clone();
                flow.receiver = receiver.receiver.clone();
                flow.life.finish = receiver.life.finish;
                flow.life.delivered_bytes = receiver.life.delivered_bytes;
                flow
            })
            .collect();
        let sum = |count: fn(&Simulation) -> u64| parts.iter().map(count).sum::<u64>();
        let fecn_marks = sum(|p| p.fecn_marks);
        let becns = sum(|p| p.becns);
        let duplicates = sum(|p| p.duplicates);
        let buffer_overflows = sum(|p| p.buffer_overflows);
        let completed = sum(|p| p.state.lifecycle.completed as u64) as usize;
        // Part 0 becomes the run: its own state replaced by the merged one, with no
        // frames or events left (a merged run is over).
        let mut merged = parts.swap_remove(0);
        merged.ports = ports;
        merged.egress = egress;
        merged.tx_credit = tx_credit;
        merged.rx_credit = rx_credit;
        merged.loads = loads;
        merged.counters = counters;
        merged.hcas = hcas;
        merged.state.flows = flows;
        merged.fecn_marks = fecn_marks;
        merged.becns = becns;
        merged.duplicates = duplicates;
        merged.buffer_overflows = buffer_overflows;
        merged.state.lifecycle.completed = completed;
        merged.frames = Pool::default();
        merged.part = None;
        merged.in_flight = end.in_flight;
        end.close(&mut merged.state);
        merged
    }
}
