//! Failures on the InfiniBand fabric (see [`crate::driver::failure`]): ports going down
//! and up, and the new routes (SHIELD's or the subnet manager's). Nothing is lost: the
//! model has no transport retransmission, so a failed switch holds its packets until it
//! is back (a scenario gives such a failure an end).

use super::{Event, Simulation};
use crate::driver::failure::Phase;
use fabricsim_core::units::{HostId, PortId};

impl Simulation {
    /// Schedules every failure's instants as run-wide events.
    pub(super) fn schedule_failures(&mut self) {
        for (at, failure, phase) in self.failures.instants() {
            let tie = self.ties.next(self.ties.global());
            (self.state.queue).schedule_tied(at, tie, Event::Failure { failure, phase });
        }
    }

    pub(super) fn on_failure(&mut self, failure: u32, phase: Phase) {
        match phase {
            Phase::Down => {
                self.failures.set(failure, false);
            }
            Phase::Up => {
                for port in self.failures.set(failure, true) {
                    self.try_transmit(port);
                }
            }
            Phase::Reroute => {
                self.routes = self.failures.reroute(&self.topo);
                for port in self.failures.down_ports() {
                    if self.ports[port.index()].host.is_none() {
                        self.reroute_waiting(port);
                    }
                }
            }
        }
    }

    /// Moves the packets waiting at dead switch port `port` to the egress the new routes
    /// give, each on its VL, still holding its input's buffer, ready at once behind what
    /// matures there; those with no other egress stay.
    fn reroute_waiting(&mut self, port: PortId) {
        let now = self.state.queue.now();
        let node = self.ports[port.index()].link.node;
        for vl in 0..self.cfg.virtual_lanes {
            let at = self.vl_index(port, vl);
            for (slot, ready) in self.egress[at].drain(&mut self.frames) {
                let pkt = *self.frames.get(slot).packet();
                let out = self.route(node, HostId(pkt.dst));
                self.ports[port.index()].queued -= pkt.wire as u64;
                self.add_load(port, -(pkt.wire as i64));
                // Ready at once, behind what matures there (ready times rise in a queue).
                let (queue, when) = if out == port {
                    (at, ready)
                } else {
                    let q = self.vl_index(out, vl);
                    let last = self.egress[q].maturing.back();
                    (q, last.map_or(now, |s| now.max(self.frames.time(s))))
                };
                let input = pkt.input as usize;
                self.egress[queue].push(&mut self.frames, input, slot, when);
                self.count_queued(out, pkt.wire);
                if out != port {
                    self.try_transmit(out);
                }
            }
        }
    }
}
