//! Prefetching the state the coming events will touch.

use super::{Event, Frame, Simulation, CONTROL, DATA};
use fabricsim_core::prefetch::prefetch;
use fabricsim_core::units::HostId;

impl Simulation {
    /// Asks for the state the coming events will touch, in stages, so that their cache
    /// misses overlap the current event and each stage reads only lines an earlier stage
    /// asked for. First the event's port (transmitter, queues, ingress); then the frame at
    /// its link's head (an arrival) or at its data queue's head (a transmitter). When the
    /// ports alone outgrow the cache (`prefetch_deep`) the stages are two events apart, so
    /// that each miss has two events' time to arrive; the second stage also asks for the
    /// ingress line of the port a frame arrives at, the control queue's head and the
    /// frame last put on a transmitter's link (the next frame links behind it); and a
    /// third, from the frame, asks for the egress an arriving packet was routed to, or
    /// for a departing packet's input port and the route entry it will be sent by.
    /// Otherwise they are one event apart and do no more (the extra hints' instructions
    /// would cost more than they save: the 127:1 incast's state mostly stays in the
    /// second-level cache).
    #[inline(always)]
    pub(super) fn prefetch_ahead(&self) {
        if self.frames.slots() <= self.prefetch_above_slots {
            return;
        }
        if self.prefetch_deep {
            self.prefetch_stages::<true>();
        } else {
            self.prefetch_stages::<false>();
        }
    }

    /// [`prefetch_ahead`](Self::prefetch_ahead)'s stages, compiled apart for each depth.
    #[inline(always)]
    pub(super) fn prefetch_stages<const DEEP: bool>(&self) {
        let queue = &self.state.queue;
        let (port_at, frame_at) = if DEEP { (4, 2) } else { (1, 0) };
        if let Some(&Event::Transmitter { port, .. } | &Event::Arrival { port }) =
            queue.peek_ahead(port_at)
        {
            let p = &self.ports[port as usize];
            prefetch(p);
            prefetch(&p.ingress);
            prefetch(&p.tx_bytes);
        }
        match queue.peek_ahead(frame_at) {
            Some(&Event::Arrival { port }) => {
                let p = &self.ports[port as usize];
                if let Some(slot) = p.wire.head() {
                    self.frames.prefetch(slot);
                }
                if DEEP {
                    let to = &self.ports[p.link.peer.index()];
                    if p.peer_switch().is_none() {
                        prefetch(to);
                    }
                    prefetch(&to.ingress);
                }
            }
            Some(&Event::Transmitter { port, .. }) => {
                // The egress's next packets (queued long before, so rarely still cached).
                let p = &self.ports[port as usize];
                if let Some(slot) = p.queues[DATA].front() {
                    self.frames.prefetch(slot);
                }
                if let (true, Some(slot)) = (DEEP, p.queues[CONTROL].front()) {
                    self.frames.prefetch(slot);
                }
                if let (true, Some(slot)) = (DEEP, p.wire.tail()) {
                    self.frames.prefetch(slot);
                }
            }
            _ => {}
        }
        if !DEEP {
            return;
        }
        match queue.peek_ahead(0) {
            Some(&Event::Arrival { port }) => {
                // The egress the packet was routed to when sent.
                let p = &self.ports[port as usize];
                if let (Some(slot), Some(_)) = (p.wire.head(), p.peer_switch()) {
                    if let Frame::Packet(pkt) = self.frames.get(slot) {
                        let out = &self.ports[pkt.port.egress().index()];
                        prefetch(out);
                        prefetch(&out.wake_at);
                    }
                }
            }
            Some(&Event::Transmitter { port, .. }) => {
                // The next data packet's input port (for its ingress accounting) and the
                // route entry it will be sent by.
                let p = &self.ports[port as usize];
                if let (Some(slot), None) = (p.queues[DATA].front(), p.host()) {
                    let pkt = self.frames.get(slot).packet();
                    prefetch(&self.ports[pkt.port.input().index()].ingress);
                    if let Some(node) = p.peer_switch() {
                        self.routes.prefetch(node, HostId(pkt.dst));
                    }
                }
            }
            _ => {}
        }
    }
}
