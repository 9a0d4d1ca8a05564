//! Failures on the RoCEv2 fabric (see [`crate::driver::failure`]): ports going down and
//! up, the routing protocol's new routes, and a failed switch losing what it held (the
//! senders' go-back-N or selective repeat recovers it).

use super::{Event, Simulation, CONTROL, DATA};
use crate::driver::failure::Phase;
use fabricsim_core::pool::Slot;
use fabricsim_core::units::{NodeId, PortId, Time};

impl Simulation {
    /// Schedules every failure's instants as run-wide events.
    pub(super) fn schedule_failures(&mut self) {
        for (at, failure, phase) in self.failures.instants() {
            self.schedule_global(at, Event::Failure { failure, phase });
        }
    }

    pub(super) fn on_failure(&mut self, failure: u32, phase: Phase, now: Time) {
        match phase {
            Phase::Down => {
                self.failures.set(failure, false);
                if let Some(switch) = self.failures.list[failure as usize].switch {
                    self.lose_what_switch_holds(switch);
                }
            }
            Phase::Up => {
                for port in self.failures.set(failure, true) {
                    self.try_transmit(port);
                }
            }
            Phase::Reroute => {
                self.routes = self.failures.reroute(&self.topo);
                for port in self.failures.down_ports() {
                    if self.ports[port.index()].host().is_none() {
                        self.reroute_waiting(port, now);
                    }
                }
            }
        }
    }

    /// Moves the packets waiting at dead switch port `port` to the egress the new routes
    /// give, ready at once at the back of its queue; those with no other egress stay, in
    /// order.
    fn reroute_waiting(&mut self, port: PortId, now: Time) {
        let node = self.ports[port.index()].node;
        for class in [CONTROL, DATA] {
            let mut waiting: Vec<(Slot, Time)> = Vec::new();
            while let Some(slot) = self
                .frames
                .pop_front(&mut self.ports[port.index()].queues[class])
            {
                waiting.push((slot, self.frames.time(slot)));
            }
            for (slot, ready) in waiting {
                let pkt = *self.frames.get(slot).packet();
                let out = self.route(node, &pkt);
                self.ports[port.index()].queued[class] -= pkt.wire as u64;
                let o = &mut self.ports[out.index()];
                // Ready at once, behind what is queued there (ready times rise in a queue).
                let at = match o.queues[class].back() {
                    _ if out == port => ready,
                    Some(last) => now.max(self.frames.time(last)),
                    None => now,
                };
                self.frames.push_back(&mut o.queues[class], slot, at);
                o.queued[class] += pkt.wire as u64;
                o.peak_queue = o.peak_queue.max(o.queued[DATA] + o.queued[CONTROL]);
                if out != port {
                    self.try_transmit(out);
                }
            }
        }
    }

    /// A failed switch loses every packet in its egress queues: data is counted as
    /// dropped (its ingress bytes freed), replies are simply gone.
    fn lose_what_switch_holds(&mut self, switch: NodeId) {
        for port in self.topo.node_ports(switch).to_vec() {
            for class in [CONTROL, DATA] {
                while let Some(slot) = self
                    .frames
                    .pop_front(&mut self.ports[port.index()].queues[class])
                {
                    let pkt = *self.frames.get(slot).packet();
                    self.frames.free(slot);
                    self.ports[port.index()].queued[class] -= pkt.wire as u64;
                    if class == DATA {
                        self.leave_ingress(pkt);
                        self.drop_data(port, pkt);
                    }
                }
            }
        }
    }
}
