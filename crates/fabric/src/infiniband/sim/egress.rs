//! A switch egress VL's queues: packets maturing through the switch latency, then one FIFO per input served round-robin.

use super::{Frame, Packet, NEVER};
use fabricsim_core::pool::{Fifo, Pool, Slot};
use fabricsim_core::prefetch::prefetch;
use fabricsim_core::topology::{NodeKind, Topology};
use fabricsim_core::units::Time;

/// End of the round-robin list of an egress VL's ready inputs.
pub(super) const NO_INPUT: u16 = u16::MAX;

/// One input port's ready packets at an egress VL.
#[derive(Clone, Copy, Debug)]
pub(super) struct InputQueue {
    /// The packets whose switch latency has passed, in arrival order, in the frame pool.
    pub(super) packets: Fifo,
    /// The next input of the round-robin list, if this one is in it.
    pub(super) next_ready: u16,
}

/// One egress VL of a switch port: a FIFO per input port, ready inputs served round-robin
/// (unverified: the IBA leaves a switch's arbitration among inputs to the implementation;
/// round-robin gives each input an equal share, see docs/PARAMETERS.md).
/// A packet waits out the switch latency in the VL's one maturing FIFO, then moves to its
/// input's FIFO; so an arrival touches only the VL's first line and frames, and the input
/// queue's line is read when the packet matures, shortly before it is served (each
/// arrival at a large switch missed on it). The inputs and their round-robin list share
/// one small array, made when the first packet matures: an egress VL no packet ever uses
/// costs no per-input memory (a radix-R switch would otherwise hold R x R x VLs input
/// queues).
#[derive(Clone, Debug)]
#[repr(C, align(64))]
pub(super) struct EgressVl {
    /// When the front of `maturing` becomes ready, or `NEVER` if it is empty: the
    /// arbiter's look at this VL reads this line only, not the frames.
    pub(super) first_ready: Time,
    /// Packets still inside the switch latency, in the frame pool, each stamped with its
    /// ready time. Every packet waits the same latency, so arrival order is ready order
    /// and the front is the next due.
    pub(super) maturing: Fifo,
    /// The inputs with a ready head, in round-robin order: first and last.
    pub(super) rr_head: u16,
    pub(super) rr_tail: u16,
    /// How many inputs the switch has.
    pub(super) radix: u16,
    pub(super) bytes: u64,
    /// One queue per input port of the switch (and one for packets it makes itself), or
    /// none before the first packet matures.
    pub(super) inputs: Vec<InputQueue>,
}

// What an arrival and the arbiter read fills one line.
const _: () = assert!(std::mem::size_of::<EgressVl>() == 64);

impl EgressVl {
    pub(super) fn new(radix: u16) -> Self {
        EgressVl {
            first_ready: NEVER,
            maturing: Fifo::default(),
            rr_head: NO_INPUT,
            rr_tail: NO_INPUT,
            radix,
            bytes: 0,
            inputs: Vec::new(),
        }
    }

    /// Queues the packet in `slot` from `input`; it becomes ready at `ready`.
    #[inline(always)]
    pub(super) fn push(&mut self, frames: &mut Pool<Frame>, input: usize, slot: Slot, ready: Time) {
        let pkt = frames.get_mut(slot).packet_mut();
        pkt.input = input as u16;
        self.bytes += pkt.wire as u64;
        if frames.push_back(&mut self.maturing, slot, ready) {
            self.first_ready = ready;
        }
    }

    /// The per-input queues, made when the first packet matures.
    #[cold]
    #[inline(never)]
    pub(super) fn make_inputs(&mut self) {
        self.inputs = vec![
            InputQueue {
                packets: Fifo::default(),
                next_ready: NO_INPUT,
            };
            self.radix as usize
        ];
    }

    /// Moves every packet whose latency has passed by `now` to its input's queue.
    #[inline(always)]
    pub(super) fn mature(&mut self, frames: &mut Pool<Frame>, now: Time) {
        if self.first_ready <= now {
            self.mature_due(frames, now);
        }
    }

    pub(super) fn mature_due(&mut self, frames: &mut Pool<Frame>, now: Time) {
        if self.inputs.is_empty() {
            self.make_inputs();
        }
        while let Some(slot) = self.maturing.front() {
            let t = frames.time(slot);
            if t > now {
                self.first_ready = t;
                return;
            }
            frames.pop_front(&mut self.maturing);
            let input = frames.get(slot).packet().input;
            if frames.push_back(&mut self.inputs[input as usize].packets, slot, t) {
                self.join_round_robin(input);
            }
        }
        self.first_ready = NEVER;
    }

    /// Asks for the first maturing packet and the queue of the input whose turn it is
    /// (this VL's line must be cached: see `Simulation::prefetch_ahead`).
    #[inline(always)]
    pub(super) fn prefetch_next(&self, frames: &Pool<Frame>) {
        if let Some(slot) = self.maturing.front() {
            frames.prefetch(slot);
        }
        if let Some(q) = self.inputs.get(self.rr_head as usize) {
            prefetch(q);
        }
    }

    /// Asks for the packet at the head of the input whose turn it is (its queue must be
    /// cached: see [`prefetch_next`](Self::prefetch_next)).
    #[inline(always)]
    pub(super) fn prefetch_turn(&self, frames: &Pool<Frame>) {
        if let Some(slot) = self
            .inputs
            .get(self.rr_head as usize)
            .and_then(|q| q.packets.front())
        {
            frames.prefetch(slot);
        }
    }

    /// Blocks of the packets queued here, maturing or ready, by input.
    pub(super) fn blocks_by_input(&self, frames: &Pool<Frame>) -> Vec<u64> {
        let mut blocks = vec![0u64; self.radix as usize];
        for pkt in self.packets(frames) {
            blocks[pkt.input as usize] += pkt.blocks() as u64;
        }
        blocks
    }

    /// Every packet queued here: the ready ones by input, then the maturing ones.
    pub(super) fn packets<'a>(
        &'a self,
        frames: &'a Pool<Frame>,
    ) -> impl Iterator<Item = &'a Packet> + 'a {
        let ready = self.inputs.iter().flat_map(|q| frames.iter(&q.packets));
        ready.chain(frames.iter(&self.maturing)).map(Frame::packet)
    }

    /// Empties the VL: every packet (the ready ones input by input, then the maturing
    /// ones) with its ready time, for re-routing after a failure.
    pub(super) fn drain(&mut self, frames: &mut Pool<Frame>) -> Vec<(Slot, Time)> {
        let mut out = Vec::new();
        for q in &mut self.inputs {
            while let Some(slot) = frames.pop_front(&mut q.packets) {
                out.push((slot, frames.time(slot)));
            }
            q.next_ready = NO_INPUT;
        }
        while let Some(slot) = frames.pop_front(&mut self.maturing) {
            out.push((slot, frames.time(slot)));
        }
        (self.rr_head, self.rr_tail) = (NO_INPUT, NO_INPUT);
        self.first_ready = NEVER;
        self.bytes = 0;
        out
    }

    pub(super) fn join_round_robin(&mut self, input: u16) {
        self.inputs[input as usize].next_ready = NO_INPUT;
        match self.rr_tail {
            NO_INPUT => self.rr_head = input,
            tail => self.inputs[tail as usize].next_ready = input,
        }
        self.rr_tail = input;
    }

    /// The input whose turn it is, if any has a ready packet.
    pub(super) fn next_input(&self) -> Option<u16> {
        (self.rr_head != NO_INPUT).then_some(self.rr_head)
    }

    /// The ready packet at the head of `input`'s FIFO.
    pub(super) fn head(&self, input: u16) -> Slot {
        self.inputs[input as usize]
            .packets
            .front()
            .expect("ready inputs are non-empty")
    }

    /// Takes the packet of the input whose turn it is (there must be one); the input goes
    /// to the back of the round-robin list if it has another ready packet.
    pub(super) fn take(&mut self, frames: &mut Pool<Frame>) -> (u16, Slot) {
        let input = self.next_input().expect("the arbiter saw a ready input");
        let q = &mut self.inputs[input as usize];
        let slot = frames
            .pop_front(&mut q.packets)
            .expect("ready inputs are non-empty");
        let more = !q.packets.is_empty();
        self.rr_head = q.next_ready;
        if self.rr_head == NO_INPUT {
            self.rr_tail = NO_INPUT;
        }
        if more {
            self.join_round_robin(input);
        }
        self.bytes -= frames.get(slot).packet().wire as u64;
        (input, slot)
    }
}

/// Every port's egress VLs: a switch port's with one input per switch port, and one more
/// for packets the switch makes itself (SHARP); a host port's with none.
pub(super) fn egress_queues(topo: &Topology, vls: usize) -> Vec<EgressVl> {
    topo.ports()
        .iter()
        .flat_map(|p| {
            let inputs = match topo.nodes()[p.node.index()] {
                // One more input for packets the switch makes itself (SHARP).
                NodeKind::Switch { .. } => topo.node_ports(p.node).len() + 1,
                NodeKind::Host(_) => 0,
            };
            // Below NO_INPUT, which ends the round-robin list (checked above).
            std::iter::repeat_n(EgressVl::new(inputs as u16), vls)
        })
        .collect()
}
