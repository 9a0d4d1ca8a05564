//! The link and its credit-based flow control: the transmitter, frames arriving at the far end, credits sent, received and released.

use super::{Event, Frame, Release, Simulation, NEVER};
use crate::parallel::{self, Departure};
use fabricsim_core::pool::Slot;
use fabricsim_core::proto::credit::CreditSender;
use fabricsim_core::units::{PortId, Time};
use fabricsim_core::wire::ib::{self};

impl Simulation {
    /// Frees the input-buffer credits of a packet that has left this switch.
    pub(super) fn release(&mut self, r: Release) {
        let q = self.vl_index(r.input, r.vl);
        self.rx_credit[q].on_free(r.blocks as u32);
        self.ports[r.input.index()].fc_pending |= 1 << r.vl;
        self.try_transmit(r.input);
    }

    /// Starts the port's next frame if its transmitter is free; otherwise or if nothing is
    /// sendable, arranges to be woken when something becomes ready.
    #[inline(always)]
    pub(super) fn try_transmit(&mut self, port: PortId) {
        if self.failures.is_down(port) {
            return; // Its failure's end calls again.
        }
        if !self.ports[port.index()].busy {
            self.start_next(port);
        }
    }

    /// [`Simulation::try_transmit`] on an idle transmitter.
    pub(super) fn start_next(&mut self, port: PortId) {
        let now = self.state.queue.now();
        let vls = self.vls();
        while self.ports[port.index()].fc_pending != 0 {
            let p = &mut self.ports[port.index()];
            let vl = p.fc_pending.trailing_zeros() as u8;
            p.fc_pending &= !(1 << vl);
            p.fc_sent_since_refresh = true;
            self.counters[port.index()].credit_packets += 1;
            let frame = self.frames.alloc(Frame::Credit {
                vl,
                fctbs: self.tx_credit[port.index() * vls + vl as usize].fctbs() as u16,
                fccl: self.rx_credit[port.index() * vls + vl as usize].fccl() as u16,
            });
            self.transmit(port, frame, ib::FLOW_CONTROL_PACKET_LEN as u32);
        }
        match self.ports[port.index()].host {
            None => self.serve_switch(port, now),
            Some(h) => self.serve_hca(port, h, now),
        }
    }

    /// Nothing can be sent now: notes a credit stall if `blocked` (a ready packet lacks
    /// credits) and arranges to be woken at `wake`, when the earliest packet not yet
    /// ready becomes ready.
    pub(super) fn wait(&mut self, port: PortId, blocked: bool, wake: Option<Time>, now: Time) {
        let p = &mut self.ports[port.index()];
        if blocked && p.stall_since == NEVER {
            p.stall_since = now;
            if !self.deadlock_check_pending {
                let at = now + self.cfg.deadlock_check;
                match &mut self.part {
                    None => self.schedule_check(at),
                    Some(part) => {
                        self.deadlock_check_pending = true;
                        part.check_at = Some(at);
                    }
                }
            }
        }
        let p = &mut self.ports[port.index()];
        if let Some(t) = wake {
            if t < p.wake_at {
                p.generation += 1;
                p.wake_at = t;
                let generation = p.generation;
                self.schedule(
                    t,
                    Event::Transmitter {
                        port: port.0,
                        generation,
                    },
                );
            }
        }
    }

    /// Puts a frame on the wire after whatever is already being serialised. A packet
    /// holds the transmitter until its end event; a flow-control packet only pushes
    /// `free_at` forward.
    pub(super) fn transmit(&mut self, port: PortId, slot: Slot, bytes: u32) {
        let now = self.state.queue.now();
        let frame = *self.frames.get(slot);
        let p = &mut self.ports[port.index()];
        let spec = p.link;
        let end = p.free_at.max(now) + p.serialization(bytes);
        p.free_at = end;
        p.tx_bytes += bytes as u64;
        let arrival = end + spec.delay;
        if let Frame::Packet(pkt) = frame {
            p.busy = true;
            p.wake_at = NEVER;
            p.generation += 1;
            if p.stall_since != NEVER {
                self.counters[port.index()].stall_total += now - p.stall_since;
                p.stall_since = NEVER;
            }
            p.tx_packets += 1;
            let generation = p.generation;
            self.add_load(port, 1);
            self.update_tx_credit(port, pkt.vl, |c| c.on_send(pkt.blocks()));
            self.schedule(
                end,
                Event::Transmitter {
                    port: port.0,
                    generation,
                },
            );
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

    /// The head of `port`'s link reaches the peer port.
    pub(super) fn arrive(&mut self, port: PortId) {
        let now = self.state.queue.now();
        let p = &mut self.ports[port.index()];
        let slot = p.wire.pop(&mut self.frames);
        let to = p.link.peer;
        match *self.frames.get(slot) {
            Frame::Credit { vl, fctbs, fccl } => {
                self.frames.free(slot);
                let q = self.vl_index(to, vl);
                self.rx_credit[q].on_fctbs(fctbs as u32);
                self.update_tx_credit(to, vl, |c| c.on_limit(fccl as u32));
                self.try_transmit(to);
            }
            Frame::Packet(pkt) => {
                let credit = self.vl_index(to, pkt.vl);
                if self.rx_credit[credit].on_receive(pkt.blocks()).is_err() {
                    self.buffer_overflows += 1;
                }
                let q = &self.ports[to.index()];
                match q.host {
                    None => {
                        let node = q.link.node;
                        self.forward(node, to, slot, now)
                    }
                    Some(h) => {
                        self.frames.free(slot);
                        self.rx_credit[credit].on_free(pkt.blocks());
                        self.ports[to.index()].fc_pending |= 1 << pkt.vl;
                        self.deliver(h, pkt, now);
                        self.try_transmit(to);
                    }
                }
            }
        }
    }

    /// Applies `change` to the port's send credits on `vl`, keeping its
    /// load current.
    pub(super) fn update_tx_credit(
        &mut self,
        port: PortId,
        vl: u8,
        change: impl FnOnce(&mut CreditSender),
    ) {
        let window = self.cfg.vl_buffer as u64 / ib::CREDIT_BLOCK as u64;
        let c = &mut self.tx_credit[port.index() * self.cfg.virtual_lanes as usize + vl as usize];
        let before = window.saturating_sub(c.available() as u64);
        change(c);
        let after = window.saturating_sub(c.available() as u64);
        self.add_load(
            port,
            (after as i64 - before as i64) * ib::CREDIT_BLOCK as i64,
        );
    }
}
