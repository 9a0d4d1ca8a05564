//! The link: a port's transmitter choosing and serialising frames, its frame-end events, and frames arriving at the far end.

use super::{AfterEnd, Event, Frame, PacketPort, Simulation, CONTROL, DATA, NEVER};
use crate::parallel::{self, Departure};
use fabricsim_core::pool::Slot;
use fabricsim_core::proto::pfc::pause_duration;
use fabricsim_core::units::{PortId, Time};
use fabricsim_core::wire::roce::{self};

impl Simulation {
    /// Starts the port's next frame if its transmitter is free; otherwise arranges to be
    /// woken when something becomes sendable.
    pub(super) fn try_transmit(&mut self, port: PortId) {
        if self.failures.is_down(port) {
            return; // Its failure's end calls again.
        }
        let now = self.state.queue.now();
        let p = &mut self.ports[port.index()];
        if p.busy {
            if self.cfg.plain_schedule {
                return self.replan_plain_end(port, now);
            }
            if p.wake_at == NEVER {
                return;
            }
            if self.foresee_deferred_end(port, now) {
                return;
            }
            let p = &mut self.ports[port.index()];
            p.busy = false;
            p.wake_at = std::mem::replace(&mut p.wake_after_end, NEVER);
        }
        let p = &mut self.ports[port.index()];
        if let Some(quanta) = p.pfc_pending.take() {
            p.pause_frames += 1;
            if quanta > 0 && p.xoff {
                // Refresh at half the pause so the upstream never resumes early (unverified:
                // switches re-send XOFF before the quanta run out; when is not documented).
                let rate = p.link.rate;
                let at = now + Time(pause_duration(quanta, rate).ps() / 2);
                p.pause_refresh_at = at;
                self.schedule(at, Event::PauseRefresh { port: port.0 });
            }
            let slot = self.frames.alloc(Frame::Pause { quanta });
            self.transmit(port, slot, roce::PFC_FRAME_WIRE_LEN as u32);
            return;
        }
        let choice = match self.ports[port.index()].host() {
            None => self.pick_switch(port, now),
            Some(h) => self.pick_nic(port, h, now),
        };
        match choice {
            Ok(slot) => {
                let wire = self.frames.get(slot).packet().wire;
                self.transmit(port, slot, wire.into());
            }
            Err(Some(t)) => {
                let p = &mut self.ports[port.index()];
                if t < p.wake_at {
                    p.generation += 1;
                    p.wake_at = t;
                    let generation = p.generation;
                    let event = Event::Transmitter {
                        port: port.0,
                        generation,
                    };
                    match self.wake_tie {
                        Some((at, tie)) if at == port.0 => {
                            self.wake_tie = None;
                            self.state.queue.schedule_tied(t, tie, event);
                        }
                        _ => self.schedule(t, event),
                    }
                }
            }
            Err(None) => {}
        }
    }

    /// A busy `port` whose frame's end event was deferred: whether that end is still to
    /// come (then handled here). Returns false if the end has passed.
    fn foresee_deferred_end(&mut self, port: PortId, now: Time) -> bool {
        // The frame's end event was deferred. If it is still to come, what it will find
        // is foreseen again: if that is now something sendable by its end, it is queued,
        // in its own place; if something becomes sendable sooner than the wake-up queued
        // for after it, that wake-up is queued anew (the old one goes stale). If the end
        // has passed, it found nothing sendable, so the transmitter has been idle since,
        // waiting for the wake-up queued for it if any.
        let p = &self.ports[port.index()];
        let (end, tie) = (p.wake_at, p.end_tie);
        if p.deferred_end_to_come(now, self.state.queue.now_tie()) {
            let at = match self.after_end(port, end, None) {
                AfterEnd::Sendable => end,
                AfterEnd::Wake(at) => at,
                AfterEnd::Idle => return true,
            };
            let p = &mut self.ports[port.index()];
            if at >= p.wake_after_end {
                return true;
            }
            if at == end {
                p.wake_at = NEVER;
                p.wake_after_end = NEVER;
            } else {
                p.wake_after_end = at;
            }
            p.generation += 1;
            let generation = p.generation;
            self.schedule_frame_end(port, at, tie, generation);
            return true;
        }
        false
    }

    /// Puts the frame in `slot` on the wire; the transmitter is busy until its last bit
    /// leaves.
    pub(super) fn transmit(&mut self, port: PortId, slot: Slot, bytes: u32) {
        let now = self.state.queue.now();
        if self.state.capture.is_some() {
            let frame = *self.frames.get(slot);
            self.record(port, &frame, now);
        }
        let p = &mut self.ports[port.index()];
        let spec = p.link;
        let end = now + spec.rate.serialization_by(p.ps_per_byte, bytes as u64);
        p.busy = true;
        p.wake_at = NEVER;
        p.generation += 1;
        p.tx_bytes += bytes as u64;
        let peer_switch = p.peer_switch();
        // A switch sends only packets it took from its egress queues (and PFC frames).
        let popped = match self.frames.get(slot) {
            Frame::Packet(pkt) => {
                p.tx_packets += 1;
                p.host().is_none().then_some((pkt.class(), slot))
            }
            Frame::Pause { .. } => None,
        };
        let arrival = end + spec.delay;
        let generation = p.generation;
        if let Some((DATA, sent)) = popped {
            self.stamp_hop(port, sent, now);
        }
        if let (Some(node), Frame::Packet(pkt)) = (peer_switch, self.frames.get(slot)) {
            let out = self.route(node, pkt);
            self.frames.get_mut(slot).packet_mut().port = PacketPort::routed_to(out);
        }
        // All that can make something sendable sooner than the queues already say (a
        // packet queued, a PFC frame to send, a PAUSE received) calls `try_transmit`, so
        // unless that happens first, what the end event will find is known now. If it will
        // find nothing sendable, the event is deferred with its tie kept (a tenth of the
        // incast's events), and if the queues hold something sendable later (a packet
        // still in the switch latency, data paused), its wake-up is queued straight away,
        // with the end event's tie, in place of the end event (15 % of a permutation's
        // events). This is the one place the event order departs from one event per frame
        // end: the wake-up's tie is drawn when the frame starts, not when it ends.
        let tie = self.ties.next(self.creator);
        if self.cfg.plain_schedule {
            self.schedule_plain_end(port, end, tie, generation, popped);
        } else {
            self.defer_frame_end(port, end, tie, generation, popped);
        }
        let (peer, tie) = (spec.peer, self.ties.next(self.creator));
        let leaving = Departure {
            port,
            peer,
            slot,
            arrival,
            tie,
        };
        let (frames, queue) = (&mut self.frames, &mut self.state.queue);
        let wire = &mut self.ports[port.index()].wire;
        let event = Event::Arrival { port: port.0 };
        parallel::depart(self.part.as_mut(), wire, frames, queue, leaving, event);
    }

    /// Queues the end of `port`'s frame at `end` as foreseen (see [`Self::transmit`]): the
    /// end event if it will find something sendable; else, in its place and with its tie,
    /// the wake-up for when something will be, if anything.
    fn defer_frame_end(
        &mut self,
        port: PortId,
        end: Time,
        tie: u64,
        generation: u32,
        popped: Option<(usize, Slot)>,
    ) {
        match self.after_end(port, end, popped) {
            AfterEnd::Sendable => self.schedule_frame_end(port, end, tie, generation),
            AfterEnd::Wake(at) => {
                let p = &mut self.ports[port.index()];
                p.wake_at = end;
                p.end_tie = tie;
                p.wake_after_end = at;
                self.schedule_frame_end(port, at, tie, generation);
            }
            AfterEnd::Idle => {
                let p = &mut self.ports[port.index()];
                p.wake_at = end;
                p.end_tie = tie;
            }
        }
    }

    /// The plain schedule's end event of `port`'s frame (see [`RoceConfig::plain_schedule`]):
    /// always queued at `end`. What the deferred schedule foresees is noted only so that a
    /// wake-up the end event queues takes the tie the deferred one would have.
    ///
    /// [`RoceConfig::plain_schedule`]: crate::rocev2::RoceConfig::plain_schedule
    fn schedule_plain_end(
        &mut self,
        port: PortId,
        end: Time,
        tie: u64,
        generation: u32,
        popped: Option<(usize, Slot)>,
    ) {
        let waits = !matches!(self.after_end(port, end, popped), AfterEnd::Sendable);
        let p = &mut self.ports[port.index()];
        p.plain_end_waits = if waits { end } else { NEVER };
        p.end_tie = tie;
        self.schedule_frame_end(port, end, tie, generation);
    }

    /// The plain schedule, busy: something may have become sendable; if the frame's end
    /// (always still to come while the port is busy) will now find it, its wake-up will no
    /// longer take its tie.
    fn replan_plain_end(&mut self, port: PortId, now: Time) {
        let p = &self.ports[port.index()];
        let (end, tie) = (p.plain_end_waits, p.end_tie);
        if end == NEVER {
            return;
        }
        debug_assert!(
            (end, tie) > (now, self.state.queue.now_tie()),
            "a busy port's end is to come"
        );
        if let AfterEnd::Sendable = self.after_end(port, end, None) {
            self.ports[port.index()].plain_end_waits = NEVER;
        }
    }

    /// Queues the end event of `port`'s frame, with the tie it took when the frame started.
    pub(super) fn schedule_frame_end(
        &mut self,
        port: PortId,
        end: Time,
        tie: u64,
        generation: u32,
    ) {
        let event = Event::Transmitter {
            port: port.0,
            generation,
        };
        self.state.queue.schedule_tied(end, tie, event);
    }

    /// What `port`'s transmitter will find when its frame ends at `end`, if nothing calls
    /// [`try_transmit`](Self::try_transmit) before: on a switch egress the choice
    /// [`pick_switch`](Self::pick_switch) will make ([`sendable_class`](Self::sendable_class),
    /// `popped` as there); a NIC, whose pacing and queue pairs change by themselves, is
    /// `Sendable` whenever it has work.
    pub(super) fn after_end(
        &self,
        port: PortId,
        end: Time,
        popped: Option<(usize, Slot)>,
    ) -> AfterEnd {
        let p = &self.ports[port.index()];
        if p.pfc_pending.is_some() {
            return AfterEnd::Sendable;
        }
        if let Some(h) = p.host() {
            let nic = &self.nics[h.index()];
            return if nic.control.is_empty() && nic.qps.is_empty() {
                AfterEnd::Idle
            } else {
                AfterEnd::Sendable
            };
        }
        match self.sendable_class(port, end, p.paused_until > end, popped) {
            Ok(_) => AfterEnd::Sendable,
            Err(Some(at)) => AfterEnd::Wake(at),
            Err(None) => AfterEnd::Idle,
        }
    }

    /// The class a switch egress can send from at `at`: control first, then data unless
    /// `paused`. Err(when something queued becomes sendable), or Err(None) if nothing is
    /// queued. `popped`: the class and slot of the packet just taken from one of its
    /// queues, whose entry gives that queue's new front's time (the front's own line is
    /// likely out of cache).
    pub(super) fn sendable_class(
        &self,
        port: PortId,
        at: Time,
        paused: bool,
        popped: Option<(usize, Slot)>,
    ) -> Result<usize, Option<Time>> {
        let p = &self.ports[port.index()];
        let mut wake: Option<Time> = None;
        for class in [CONTROL, DATA] {
            let Some(front) = p.queues[class].front() else {
                continue;
            };
            let ready = match popped {
                _ if class == DATA && paused => p.paused_until,
                Some((c, slot)) if c == class => {
                    let next = self.frames.next_time(slot);
                    next.expect("a popped slot links its queue's front")
                }
                _ => self.frames.time(front),
            };
            if ready <= at {
                return Ok(class);
            }
            wake = Some(wake.map_or(ready, |w| w.min(ready)));
        }
        Err(wake)
    }

    /// The head of `port`'s link reaches the peer port.
    pub(super) fn arrive(&mut self, port: PortId) {
        let now = self.state.queue.now();
        let p = &mut self.ports[port.index()];
        let slot = p.wire.pop(&mut self.frames);
        let frame = *self.frames.get(slot);
        let to = p.link.peer;
        let peer_switch = p.peer_switch();
        match frame {
            Frame::Pause { quanta } => {
                self.frames.free(slot);
                let rate = self.ports[to.index()].link.rate;
                let at_switch = peer_switch.is_some();
                let q = &mut self.ports[to.index()];
                if q.pfc_ignored_until > now {
                    return;
                }
                if at_switch && quanta > 0 {
                    if let (Some(wd), false) = (self.cfg.watchdog, q.watchdog_pending) {
                        q.watchdog_pending = true;
                        let since = if q.paused_until > now {
                            q.paused_since.unwrap_or(now)
                        } else {
                            now
                        };
                        let at = (since + wd.timeout).max(now);
                        self.schedule(at, Event::Watchdog { port: to.0 });
                    }
                    if !self.deadlock_check_pending {
                        self.deadlock_check_pending = true;
                        let at = now + self.cfg.deadlock_check;
                        match &mut self.part {
                            None => self.schedule_global(at, Event::DeadlockCheck),
                            Some(part) => part.check_at = Some(at),
                        }
                    }
                }
                let q = &mut self.ports[to.index()];
                if q.paused_until <= now {
                    if let Some(s) = q.paused_since.take() {
                        q.paused_total += q.paused_until.max(s) - s;
                    }
                    if quanta > 0 {
                        q.paused_since = Some(now);
                    }
                } else if quanta == 0 {
                    if let Some(s) = q.paused_since.take() {
                        q.paused_total += now - s;
                    }
                }
                q.paused_until = now + pause_duration(quanta, rate);
                self.try_transmit(to);
            }
            // (A packet entering a switch reads only the ingress line of the port it
            // enters by.)
            Frame::Packet(pkt) => match peer_switch {
                Some(node) => self.forward(node, to, slot, pkt, now),
                None => {
                    let h = self.ports[to.index()].host().expect("a host's port");
                    let tel = self.telemetry_of(slot);
                    self.frames.free(slot);
                    self.deliver(h, pkt, tel, now)
                }
            },
        }
    }
}
