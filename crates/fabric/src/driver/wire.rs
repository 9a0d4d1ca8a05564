//! A link's frames in flight.

use fabricsim_core::engine::EventQueue;
use fabricsim_core::pool::{Fifo, NextTime, Pool, Slot};
use fabricsim_core::prefetch::WORTH_ABOVE_BYTES;
use fabricsim_core::units::Time;

/// The frames in flight on one link, in arrival order: a FIFO of slots in the fabric's
/// frame pool, each stamped with its arrival time. Each frame has its own arrival event,
/// which its sender schedules, so that events' order does not depend on which thread
/// handles the far end.
#[derive(Clone, Copy, Debug, Default)]
pub struct Wire {
    frames: Fifo,
}

/// How many frame slots a packet model's pool may reach before its state (`state_bytes`
/// besides the pool) outgrows [`WORTH_ABOVE_BYTES`] and prefetching starts to pay.
pub fn prefetch_above_slots<F, N: NextTime>(state_bytes: usize) -> usize {
    WORTH_ABOVE_BYTES.saturating_sub(state_bytes) / Pool::<F, N>::slot_bytes()
}

impl Wire {
    /// Adds the frame in `slot`, which reaches the far end at `arrival` (arrivals never
    /// decrease), and schedules its own arrival event there with `tie`, the sender's:
    /// every frame on a wire has one, whichever thread handles the far end.
    pub fn carry<F, N: NextTime, E>(
        &mut self,
        pool: &mut Pool<F, N>,
        queue: &mut EventQueue<E>,
        slot: Slot,
        arrival: Time,
        tie: u64,
        event: E,
    ) {
        debug_assert!(self.frames.back().is_none_or(|s| pool.time(s) <= arrival));
        pool.push_back(&mut self.frames, slot, arrival);
        queue.schedule_tied(arrival, tie, event);
    }

    /// Removes the head at its arrival; returns its slot (still occupied).
    pub fn pop<F, N: NextTime>(&mut self, pool: &mut Pool<F, N>) -> Slot {
        pool.pop_front(&mut self.frames)
            .expect("an arrival event implies a frame on the wire")
    }

    /// The frame that arrives next, if any.
    #[inline(always)]
    pub fn head(&self) -> Option<Slot> {
        self.frames.front()
    }

    /// The frame that arrives last, if any.
    #[inline(always)]
    pub fn tail(&self) -> Option<Slot> {
        self.frames.back()
    }

    /// The frames in flight, head first.
    pub fn frames<'a, F, N: NextTime>(
        &self,
        pool: &'a Pool<F, N>,
    ) -> impl Iterator<Item = &'a F> + 'a {
        pool.iter(&self.frames)
    }
}
