//! Frames in flight, each stored once in a slot of one shared pool and queued in
//! intrusive FIFOs that link slots by index.
//!
//! A packet is written once, when it is made, and moves from queue to queue (a link, a
//! switch's egress queue, the next link) by relinking its slot, never by copying. Freed
//! slots are reused last-in first-out, so the memory a run touches stays close to the
//! frames actually in flight and the next frame goes to a line that is still in cache. (A
//! ring buffer per link and per egress input cost a second-level cache miss on most
//! packets of the reference benchmark: each ring cycles through its peak capacity, and
//! together they outgrew the cache.)

use crate::units::Time;

/// End of a list.
const NIL: u32 = u32::MAX;

/// A handle to an occupied slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot(u32);

impl Slot {
    /// The slot's position in its pool: stable while the slot is occupied, so that a model
    /// may keep side data for its frames in an array beside the pool.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// A FIFO of slots: the head and the tail of a list threaded through the pool. It holds
/// no storage of its own, so a queue costs eight bytes however long it grows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fifo {
    head: u32,
    tail: u32,
}

impl Default for Fifo {
    fn default() -> Self {
        Fifo {
            head: NIL,
            tail: NIL,
        }
    }
}

impl Fifo {
    pub fn is_empty(&self) -> bool {
        self.head == NIL
    }

    /// The oldest slot, if any.
    pub fn front(&self) -> Option<Slot> {
        (self.head != NIL).then_some(Slot(self.head))
    }

    /// The newest slot, if any.
    pub fn back(&self) -> Option<Slot> {
        (self.tail != NIL).then_some(Slot(self.tail))
    }
}

/// What an entry keeps of the time of the slot after it in its queue: nothing (`()`), or
/// that time (`Time`), for a model that wants a queue's new front's time at a pop without
/// reading the front's entry (8 more bytes a slot).
pub trait NextTime: Copy + Default + std::fmt::Debug {
    fn set(&mut self, time: Time);
}

impl NextTime for () {
    fn set(&mut self, _: Time) {}
}

impl NextTime for Time {
    fn set(&mut self, time: Time) {
        *self = time;
    }
}

#[derive(Clone, Debug)]
struct Entry<T, N> {
    /// The time the slot's frame is due at the front of its current queue (a link's
    /// arrival time, say); set on every push.
    time: Time,
    /// The next slot of the same FIFO, or of the free list.
    next: u32,
    /// The `time` of the next slot of the same FIFO, if kept (see [`NextTime`]).
    next_time: N,
    item: T,
}

/// Slots holding items of type `T`, and the FIFOs threaded through them; `N` says whether
/// a slot keeps its successor's time ([`NextTime`]).
#[derive(Clone, Debug)]
pub struct Pool<T, N: NextTime = ()> {
    entries: Vec<Entry<T, N>>,
    free: u32,
    live: usize,
}

impl<T, N: NextTime> Default for Pool<T, N> {
    fn default() -> Self {
        Pool {
            entries: Vec::new(),
            free: NIL,
            live: 0,
        }
    }
}

impl<T, N: NextTime> Pool<T, N> {
    /// Stores `item` in a free slot (the most recently freed one), in no queue yet.
    pub fn alloc(&mut self, item: T) -> Slot {
        self.live += 1;
        let entry = Entry {
            time: Time::ZERO,
            next: NIL,
            next_time: N::default(),
            item,
        };
        if self.free != NIL {
            let i = self.free;
            let e = &mut self.entries[i as usize];
            self.free = e.next;
            *e = entry;
            Slot(i)
        } else {
            let i = u32::try_from(self.entries.len()).expect("fewer than 2^32 frames in flight");
            self.entries.push(entry);
            Slot(i)
        }
    }

    /// Empties `slot`, which must be in no queue, and returns its item.
    pub fn free(&mut self, slot: Slot) -> T
    where
        T: Copy,
    {
        self.live -= 1;
        let e = &mut self.entries[slot.0 as usize];
        e.next = self.free;
        self.free = slot.0;
        e.item
    }

    /// Asks the processor for `slot`'s entry ahead of its use (see [`crate::prefetch`]).
    #[inline(always)]
    pub fn prefetch(&self, slot: Slot) {
        crate::prefetch::prefetch(&self.entries[slot.0 as usize]);
    }

    pub fn get(&self, slot: Slot) -> &T {
        &self.entries[slot.0 as usize].item
    }

    pub fn get_mut(&mut self, slot: Slot) -> &mut T {
        &mut self.entries[slot.0 as usize].item
    }

    /// The time `slot` was last pushed with.
    pub fn time(&self, slot: Slot) -> Time {
        self.entries[slot.0 as usize].time
    }

    /// Appends `slot` (in no queue) to `q`, stamped `time`. Returns true if `q` was empty.
    pub fn push_back(&mut self, q: &mut Fifo, slot: Slot, time: Time) -> bool {
        let e = &mut self.entries[slot.0 as usize];
        e.time = time;
        e.next = NIL;
        let was_empty = q.tail == NIL;
        if was_empty {
            q.head = slot.0;
        } else {
            let tail = &mut self.entries[q.tail as usize];
            tail.next = slot.0;
            tail.next_time.set(time);
        }
        q.tail = slot.0;
        was_empty
    }

    /// Unlinks and returns the oldest slot of `q`; the slot stays occupied.
    pub fn pop_front(&mut self, q: &mut Fifo) -> Option<Slot> {
        let head = q.front()?;
        let next = self.entries[head.0 as usize].next;
        q.head = next;
        if next == NIL {
            q.tail = NIL;
        }
        Some(head)
    }

    /// The items of `q`, oldest first.
    pub fn iter<'a>(&'a self, q: &Fifo) -> impl Iterator<Item = &'a T> + 'a {
        self.iter_timed(q).map(|(_, item)| item)
    }

    /// The items of `q` with the times they were pushed with, oldest first.
    pub fn iter_timed<'a>(&'a self, q: &Fifo) -> impl Iterator<Item = (Time, &'a T)> + 'a {
        let mut i = q.head;
        std::iter::from_fn(move || {
            (i != NIL).then(|| {
                let e = &self.entries[i as usize];
                i = e.next;
                (e.time, &e.item)
            })
        })
    }

    /// Slots ever made: the peak of occupied slots so far.
    pub fn slots(&self) -> usize {
        self.entries.len()
    }

    /// Occupied slots.
    pub fn live(&self) -> usize {
        self.live
    }

    /// Bytes of pool memory per occupied slot.
    pub const fn slot_bytes() -> usize {
        std::mem::size_of::<Entry<T, N>>()
    }
}

impl<T> Pool<T, Time> {
    /// The time of the slot that followed `slot` in its queue when `slot` was popped by
    /// [`pop_front`](Self::pop_front), its queue's new front (None if `slot` was the
    /// last), read from `slot`'s own entry; valid until `slot` is pushed or freed.
    pub fn next_time(&self, slot: Slot) -> Option<Time> {
        let e = &self.entries[slot.0 as usize];
        (e.next != NIL).then_some(e.next_time)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::VecDeque;

    proptest! {
        /// Against one `VecDeque` per queue: any mix of pushes of new items, moves of a
        /// queue's head to another queue, and frees keeps every queue's order and every
        /// item, and reuses freed slots before growing.
        #[test]
        fn queues_match_a_reference(ops in proptest::collection::vec((0u8..3, 0usize..4, 0usize..4), 1..300)) {
            let mut pool = Pool::<u32, Time>::default();
            let mut queues = [Fifo::default(); 4];
            let mut reference: [VecDeque<u32>; 4] = Default::default();
            let mut peak = 0;
            for (n, (op, a, b)) in ops.into_iter().enumerate() {
                let n = n as u32;
                match op {
                    0 => {
                        let s = pool.alloc(n);
                        let was_empty = pool.push_back(&mut queues[a], s, Time(n as u64));
                        prop_assert_eq!(was_empty, reference[a].is_empty());
                        reference[a].push_back(n);
                    }
                    1 => {
                        let got = pool.pop_front(&mut queues[a]);
                        prop_assert_eq!(got.map(|s| *pool.get(s)), reference[a].pop_front());
                        // The popped slot knows its queue's new front's time.
                        let front = queues[a].front().map(|f| pool.time(f));
                        prop_assert_eq!(got.and_then(|s| pool.next_time(s)), got.and(front));
                        if let Some(s) = got {
                            pool.push_back(&mut queues[b], s, Time(1000 + n as u64));
                            reference[b].push_back(*pool.get(s));
                        }
                    }
                    _ => {
                        let got = pool.pop_front(&mut queues[a]).map(|s| pool.free(s));
                        prop_assert_eq!(got, reference[a].pop_front());
                    }
                }
                let held: usize = reference.iter().map(|q| q.len()).sum();
                prop_assert_eq!(pool.live(), held);
                peak = peak.max(held);
                prop_assert_eq!(pool.entries.len(), peak, "freed slots are reused first");
                for (q, r) in queues.iter().zip(&reference) {
                    prop_assert!(pool.iter(q).copied().eq(r.iter().copied()));
                    prop_assert_eq!(q.is_empty(), r.is_empty());
                }
            }
        }
    }
}
