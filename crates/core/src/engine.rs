//! The event queue: a calendar (bucketed timing wheel) keyed by (time, sequence).
//!
//! Same-time events leave in insertion order, so a run is a pure function of its inputs.
//! Near-future events go into buckets of 2^`BUCKET_SHIFT` ps on a wheel of `WHEEL`
//! buckets; the bucket being drained is kept sorted, later ones are sorted when reached.
//! Events beyond the wheel's span wait in a binary heap and move onto the wheel as it
//! turns. Profiling showed a plain binary heap spending 40 % of a fat-tree run in `pop`;
//! the wheel makes both operations O(1) on average for the simulator's short horizons.
//! The queue is generic over the event type; the fabric owns the closed event enum.

use crate::units::Time;
use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

/// Bucket width: 2^9 ps = 0.512 ns, about 14 events a bucket on the reference benchmark
/// (tuned by instruction and cache-miss counts under cachegrind, and wall time).
const BUCKET_SHIFT: u32 = 9;
/// Buckets on the wheel (a span of 4.2 us).
const WHEEL: usize = 1 << 13;

struct Entry<E> {
    /// Time in the high 64 bits, sequence in the low: one integer compare orders both.
    key: u128,
    event: E,
}

impl<E> Entry<E> {
    fn new(time: Time, seq: u64, event: E) -> Self {
        Entry {
            key: ((time.ps() as u128) << 64) | seq as u128,
            event,
        }
    }
    fn key(&self) -> u128 {
        self.key
    }
    fn time(&self) -> Time {
        Time((self.key >> 64) as u64)
    }
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}
impl<E> Eq for Entry<E> {}
impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<E> Ord for Entry<E> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key().cmp(&other.key())
    }
}

fn bucket_of(t: Time) -> u64 {
    t.ps() >> BUCKET_SHIFT
}

/// A future-event list with deterministic tie breaking.
pub struct EventQueue<E> {
    wheel: Vec<Vec<Entry<E>>>,
    /// Absolute index of the bucket being drained; every wheel entry lies in
    /// `[cursor, cursor + WHEEL)`, and bucket `cursor` is sorted with the earliest last.
    cursor: u64,
    on_wheel: usize,
    far: BinaryHeap<Reverse<Entry<E>>>,
    next_seq: u64,
    now: Time,
    popped: u64,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E> EventQueue<E> {
    pub fn new() -> Self {
        EventQueue {
            wheel: (0..WHEEL).map(|_| Vec::new()).collect(),
            cursor: 0,
            on_wheel: 0,
            far: BinaryHeap::new(),
            next_seq: 0,
            now: Time::ZERO,
            popped: 0,
        }
    }

    /// The time of the last popped event (zero before the first).
    pub fn now(&self) -> Time {
        self.now
    }

    /// Number of events popped so far.
    pub fn popped(&self) -> u64 {
        self.popped
    }

    pub fn len(&self) -> usize {
        self.on_wheel + self.far.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Schedules `event` at `time`. Scheduling in the past is a model bug and panics.
    pub fn schedule(&mut self, time: Time, event: E) {
        assert!(
            time >= self.now,
            "event scheduled in the past: {time} < now {}",
            self.now
        );
        let entry = Entry::new(time, self.next_seq, event);
        self.next_seq += 1;
        self.place(entry);
    }

    fn place(&mut self, entry: Entry<E>) {
        let b = bucket_of(entry.time());
        if b >= self.cursor + WHEEL as u64 {
            self.far.push(Reverse(entry));
            return;
        }
        let slot = &mut self.wheel[(b % WHEEL as u64) as usize];
        if b == self.cursor {
            // Keep the current bucket sorted, earliest last.
            let key = entry.key();
            let at = slot.partition_point(|e| e.key() > key);
            slot.insert(at, entry);
        } else {
            slot.push(entry);
        }
        self.on_wheel += 1;
    }

    /// Turns the wheel to the next non-empty bucket and sorts it; false if none.
    fn settle(&mut self) -> bool {
        loop {
            if !self.wheel[(self.cursor % WHEEL as u64) as usize].is_empty() {
                return true;
            }
            // A bucket that once held a burst keeps its capacity; give large ones back so
            // memory stays proportional to the events pending, not to past bursts.
            let drained = &mut self.wheel[(self.cursor % WHEEL as u64) as usize];
            if drained.capacity() > 256 {
                drained.shrink_to(16);
            }
            if self.on_wheel == 0 {
                match self.far.peek() {
                    Some(Reverse(e)) => self.cursor = bucket_of(e.time()),
                    None => return false,
                }
            } else {
                self.cursor += 1;
            }
            while let Some(Reverse(e)) = self.far.peek() {
                if bucket_of(e.time()) >= self.cursor + WHEEL as u64 {
                    break;
                }
                let Reverse(e) = self.far.pop().expect("peeked");
                let slot = &mut self.wheel[(bucket_of(e.time()) % WHEEL as u64) as usize];
                slot.push(e);
                self.on_wheel += 1;
            }
            let slot = &mut self.wheel[(self.cursor % WHEEL as u64) as usize];
            slot.sort_unstable_by_key(|e| Reverse(e.key()));
        }
    }

    /// The time of the next event, if any.
    pub fn peek_time(&mut self) -> Option<Time> {
        if !self.settle() {
            return None;
        }
        self.wheel[(self.cursor % WHEEL as u64) as usize]
            .last()
            .map(|e| e.time())
    }

    /// Removes the earliest event and advances `now` to its time.
    pub fn pop(&mut self) -> Option<(Time, E)> {
        self.pop_until(Time::MAX)
    }

    /// Removes the earliest event if it is due at or before `limit`, advancing `now` to
    /// its time; leaves the queue untouched otherwise.
    pub fn pop_until(&mut self, limit: Time) -> Option<(Time, E)> {
        if !self.settle() {
            return None;
        }
        let slot = &self.wheel[(self.cursor % WHEEL as u64) as usize];
        if slot.last().expect("settled on a non-empty bucket").time() > limit {
            return None;
        }
        let entry = self.wheel[(self.cursor % WHEEL as u64) as usize]
            .pop()
            .expect("settled on a non-empty bucket");
        self.on_wheel -= 1;
        let time = entry.time();
        self.now = time;
        self.popped += 1;
        Some((time, entry.event))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn same_time_events_keep_insertion_order() {
        let mut q = EventQueue::new();
        q.schedule(Time(5), 'b');
        q.schedule(Time(1), 'a');
        q.schedule(Time(5), 'c');
        q.schedule(Time(5), 'd');
        let order: Vec<char> = std::iter::from_fn(|| q.pop().map(|(_, e)| e)).collect();
        assert_eq!(order, vec!['a', 'b', 'c', 'd']);
        assert_eq!(q.now(), Time(5));
        assert_eq!(q.popped(), 4);
    }

    #[test]
    #[should_panic(expected = "in the past")]
    fn scheduling_in_the_past_panics() {
        let mut q = EventQueue::new();
        q.schedule(Time(10), ());
        q.pop();
        q.schedule(Time(9), ());
    }

    proptest! {
        /// Against a reference ordering by (time, insertion): any mix of near, same-bucket
        /// and far-future events, scheduled while popping, leaves in the same order.
        #[test]
        fn matches_a_sorted_reference(ops in proptest::collection::vec((0u64..4, 0u64..1 << 40, any::<bool>()), 1..400)) {
            let mut q = EventQueue::new();
            let mut reference: Vec<(Time, u64)> = Vec::new();
            let mut out = Vec::new();
            for (id, (scale, offset, pop)) in ops.into_iter().enumerate() {
                let id = id as u64;
                let delta = match scale { 0 => offset % 4096, 1 => offset % 1_000_000, 2 => offset % (1 << 30), _ => offset };
                let t = Time(q.now().ps() + delta);
                q.schedule(t, id);
                reference.push((t, id));
                if pop {
                    out.push(q.pop().unwrap());
                }
            }
            while let Some(e) = q.pop() {
                out.push(e);
            }
            // Replaying pops: each pop takes the smallest (time, id) among those scheduled so far,
            // and since times never precede `now`, the output must be sorted.
            let mut sorted = out.clone();
            sorted.sort();
            prop_assert_eq!(&out, &sorted);
            reference.sort();
            prop_assert_eq!(out, reference);
        }
    }
}
