//! The event queue: a calendar (bucketed timing wheel) keyed by (time, tie).
//!
//! Same-time events leave in the order of their ties, so a run is a pure function of its
//! inputs. [`EventQueue::schedule`] takes the tie from a counter (insertion order);
//! [`EventQueue::schedule_tied`] takes it from the caller, who can make it independent
//! of how many queues a run is split over (the RoCEv2 model's (creator, its sequence)).
//! Near-future events go into buckets of 2^`BUCKET_SHIFT` ps on a wheel of `WHEEL`
//! buckets. Each bucket is a singly linked list, newest first, threaded through one slab
//! of nodes; freed nodes are reused last-in first-out, so a new event is written to a
//! line that is still in cache, and scheduling touches only that node and the bucket's
//! head. (A `Vec` per bucket cost a cache miss per schedule on the reference benchmark: a
//! quarter of the run; appending at a list's tail cost another.) The bucket being drained
//! is copied into a small array of (time, tie, node) sorted by (time, tie), earliest last.
//! A bitmap of the non-empty buckets lets the wheel turn straight to the next one.
//! Events beyond the wheel's span wait in a binary heap and move onto the wheel as soon
//! as their bucket comes into the span, before any event can be scheduled straight into
//! that bucket. The queue is generic over the event type; the fabric owns the event enum.
//! Events that move (a fluid flow's drain, whose time changes at every re-share) are kept
//! apart, one per key, in an indexed heap ([`EventQueue::schedule_keyed`]): moving one
//! leaves nothing stale behind, and they leave in the same (time, tie) order as the rest.

use crate::units::Time;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Bucket width: 2^8 ps = 0.256 ns, about 7 events a bucket on the reference benchmark
/// (tuned by instruction and cache-miss counts under cachegrind, and wall time).
const BUCKET_SHIFT: u32 = 8;
/// Buckets on the wheel (a span of 4.2 us).
const WHEEL: usize = 1 << 14;
/// End of a list.
const NIL: u32 = u32::MAX;

/// A slab node: one pending event, or a free slot. Aligned so that a node never straddles
/// two cache lines (the models' events make it 32 bytes).
#[repr(align(32))]
struct Node<E> {
    time: Time,
    tie: u64,
    /// Next (earlier scheduled) node of the same bucket list, or next free node.
    next: u32,
    event: Option<E>,
}

fn bucket_of(t: Time) -> u64 {
    t.ps() >> BUCKET_SHIFT
}

/// A future-event list with deterministic tie breaking.
pub struct EventQueue<E> {
    nodes: Vec<Node<E>>,
    free: u32,
    /// Each bucket's newest node.
    wheel: Box<[u32; WHEEL]>,
    /// One bit per bucket of the wheel, set while its list is non-empty: turning the wheel
    /// jumps to the next non-empty bucket instead of visiting every empty one (a lone
    /// 400 Gb/s link has an event every 82 ns, 320 buckets apart).
    occupied: Box<[u64; WHEEL / 64]>,
    /// Absolute index of the bucket being drained; every wheel event lies in
    /// `[cursor, cursor + WHEEL)`.
    cursor: u64,
    /// Bucket `cursor` once taken off its list: (time, tie, node), sorted with the
    /// earliest (time, tie) last.
    current: Vec<(Time, u64, u32)>,
    on_wheel: usize,
    /// Events beyond the wheel's span, by (time, tie).
    far: BinaryHeap<Reverse<(Time, u64, u32)>>,
    /// Whether pops walk the coming bucket's list ([`walk_ahead`](Self::walk_ahead)).
    walking: bool,
    /// The next node of the next occupied bucket's list to request from memory, or NIL.
    /// Lists only grow at their head until drained, so the walk stays on live nodes;
    /// draining a bucket restarts it.
    walk: u32,
    /// Events scheduled by key ([`schedule_keyed`](Self::schedule_keyed)).
    keyed: Keyed<E>,
    /// The next tie [`schedule`](Self::schedule) gives.
    seq: u64,
    now: Time,
    /// The tie of the last popped event.
    now_tie: u64,
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
            nodes: Vec::new(),
            free: NIL,
            wheel: Box::new([NIL; WHEEL]),
            occupied: Box::new([0; WHEEL / 64]),
            cursor: 0,
            current: Vec::new(),
            on_wheel: 0,
            far: BinaryHeap::new(),
            walking: false,
            walk: NIL,
            keyed: Keyed::default(),
            seq: 0,
            now: Time::ZERO,
            now_tie: 0,
            popped: 0,
        }
    }

    /// Has each pop request one node of the next occupied bucket's list from memory.
    /// Draining a bucket follows its list node by node, and when the nodes outgrow the
    /// cache each is a miss that waits for the one before; walking the coming bucket one
    /// node a pop has its nodes cached by the time it is drained. For models whose state
    /// outgrows the cache; below that it only costs instructions. Never changes the order.
    pub fn walk_ahead(&mut self, on: bool) {
        self.walking = on;
    }

    /// The time of the last popped event (zero before the first).
    pub fn now(&self) -> Time {
        self.now
    }

    /// The tie of the last popped event (zero before the first).
    pub fn now_tie(&self) -> u64 {
        self.now_tie
    }

    /// Number of events popped so far.
    pub fn popped(&self) -> u64 {
        self.popped
    }

    pub fn len(&self) -> usize {
        self.on_wheel + self.far.len() + self.keyed.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Schedules `event` at `time`, after every event already scheduled for that time
    /// (its tie is a counter), which may lie before an event `peek_time` has already
    /// shown. Scheduling in the past is a model bug and panics.
    pub fn schedule(&mut self, time: Time, event: E) {
        let tie = self.seq;
        self.seq += 1;
        self.schedule_tied(time, tie, event);
    }

    /// Schedules `event` at `time` as `key`'s one pending keyed event, replacing the one
    /// it had (which then never leaves); its tie is the counter's, as with
    /// [`schedule`](Self::schedule). For events a model moves often: a moved event costs
    /// O(log n) of the keyed events pending and leaves nothing stale.
    pub fn schedule_keyed(&mut self, key: u32, time: Time, event: E) {
        assert!(
            time >= self.now,
            "event scheduled in the past: {time} < now {}",
            self.now
        );
        let tie = self.seq;
        self.seq += 1;
        self.keyed.set(key, time, tie, event);
    }

    /// Schedules `event` at `time` with the caller's `tie`: same-time events leave in
    /// increasing tie order. Ties must be unique among same-time events; a queue should
    /// not mix this with [`schedule`](Self::schedule) unless the caller keeps its ties
    /// apart from the counter's.
    #[inline(always)]
    pub fn schedule_tied(&mut self, time: Time, tie: u64, event: E) {
        assert!(
            time >= self.now,
            "event scheduled in the past: {time} < now {}",
            self.now
        );
        let node = self.alloc(time, tie, event);
        let b = bucket_of(time);
        if b >= self.cursor + WHEEL as u64
            || b < self.cursor
            || (b == self.cursor && !self.current.is_empty())
        {
            self.place_off_wheel(time, tie, node, b);
        } else {
            self.append(b, node);
        }
    }

    /// [`schedule_tied`](Self::schedule_tied)'s rarer places for `node`: beyond the
    /// wheel's span, or in the bucket being drained (or before it: a `peek_time` turned
    /// the wheel past `now` to the next event, and this one comes before it, so it is the
    /// earliest pending event, and `current` is where the earliest wait).
    #[inline(never)]
    fn place_off_wheel(&mut self, time: Time, tie: u64, node: u32, b: u64) {
        if b >= self.cursor + WHEEL as u64 {
            self.far.push(Reverse((time, tie, node)));
        } else {
            let at = self
                .current
                .partition_point(|&(t, k, _)| (t, k) > (time, tie));
            self.current.insert(at, (time, tie, node));
            self.on_wheel += 1;
        }
    }

    #[inline(always)]
    fn alloc(&mut self, time: Time, tie: u64, event: E) -> u32 {
        let node = Node {
            time,
            tie,
            next: NIL,
            event: Some(event),
        };
        if self.free != NIL {
            let i = self.free;
            let slot = &mut self.nodes[i as usize];
            self.free = slot.next;
            *slot = node;
            i
        } else {
            let i = u32::try_from(self.nodes.len()).expect("fewer than 2^32 pending events");
            self.nodes.push(node);
            i
        }
    }

    /// Adds `node` to bucket `b`'s list, as its newest.
    #[inline(always)]
    fn append(&mut self, b: u64, node: u32) {
        let slot = (b % WHEEL as u64) as usize;
        let head = &mut self.wheel[slot];
        self.nodes[node as usize].next = *head;
        *head = node;
        self.occupied[slot / 64] |= 1 << (slot % 64);
        self.on_wheel += 1;
    }

    /// How many buckets after `slot` the next non-empty one lies (there must be one).
    fn distance_to_next_occupied(&self, slot: usize) -> usize {
        let words = self.occupied.len();
        let first = slot / 64;
        // The rest of the first word, then whole words round the wheel, then the first
        // word's part before `slot`.
        let rest = self.occupied[first] & (u64::MAX << (slot % 64)) & !(1 << (slot % 64));
        if rest != 0 {
            return rest.trailing_zeros() as usize - slot % 64;
        }
        for k in 1..=words {
            let w = (first + k) % words;
            let bits = self.occupied[w];
            if bits != 0 {
                let at = w * 64 + bits.trailing_zeros() as usize;
                return (at + WHEEL - slot) % WHEEL;
            }
        }
        unreachable!("the wheel holds an event")
    }

    /// Makes `current` hold the earliest pending bucket, turning the wheel as needed;
    /// false if nothing is pending.
    fn settle(&mut self) -> bool {
        while self.current.is_empty() {
            let slot = (self.cursor % WHEEL as u64) as usize;
            let head = std::mem::replace(&mut self.wheel[slot], NIL);
            if head != NIL {
                self.occupied[slot / 64] &= !(1 << (slot % 64));
                let mut i = head;
                while i != NIL {
                    let n = &self.nodes[i as usize];
                    self.current.push((n.time, n.tie, i));
                    i = n.next;
                }
                // Descending (time, tie): the earliest last, where it pops first. The key
                // as one 128-bit number compares without branches (-3.7 % instructions on
                // a k=16 InfiniBand permutation, whose buckets hold about 50 events).
                self.current
                    .sort_unstable_by_key(|&(t, k, _)| Reverse((t.ps() as u128) << 64 | k as u128));
                if self.walking {
                    self.start_walk(slot);
                }
                return true;
            }
            if self.on_wheel == 0 {
                match self.far.peek() {
                    Some(Reverse((t, _, _))) => self.cursor = bucket_of(*t),
                    None => return false,
                }
            } else {
                // Far events enter only beyond the span, so none can land before the
                // next occupied bucket. (Most often, in a busy fabric, it is the next.)
                self.cursor += if self.wheel[(slot + 1) % WHEEL] != NIL {
                    1
                } else {
                    self.distance_to_next_occupied(slot) as u64
                };
            }
            while let Some(&Reverse((t, _, node))) = self.far.peek() {
                let b = bucket_of(t);
                if b >= self.cursor + WHEEL as u64 {
                    break;
                }
                self.far.pop();
                self.append(b, node);
            }
        }
        true
    }

    /// The earliest event on the wheel or beyond it, (time, tie, node), turning the wheel
    /// to it.
    fn next_on_wheel(&mut self) -> Option<(Time, u64, u32)> {
        if self.settle() {
            self.current.last().copied()
        } else {
            None
        }
    }

    /// The time of the next event, if any.
    pub fn peek_time(&mut self) -> Option<Time> {
        let keyed = self.keyed.peek().map(|(t, _)| t);
        let wheel = self.next_on_wheel().map(|(t, _, _)| t);
        match (wheel, keyed) {
            (Some(w), Some(k)) => Some(w.min(k)),
            (w, k) => w.or(k),
        }
    }

    /// The event `ahead` places after the next one to pop (0: the next), if it is already
    /// known without turning the wheel (it lies in the rest of the bucket being drained).
    /// For prefetching: a model can request the state a coming event will touch while it
    /// handles the current one.
    #[inline(always)]
    pub fn peek_ahead(&self, ahead: usize) -> Option<&E> {
        let i = self.current.len().checked_sub(ahead + 1)?;
        self.nodes[self.current[i].2 as usize].event.as_ref()
    }

    /// Removes the earliest event and advances `now` to its time.
    pub fn pop(&mut self) -> Option<(Time, E)> {
        self.pop_until(Time::MAX)
    }

    /// Removes the earliest event if it is due at or before `limit`, advancing `now` to
    /// its time; leaves the queue untouched otherwise.
    pub fn pop_until(&mut self, limit: Time) -> Option<(Time, E)> {
        let wheel = self.next_on_wheel();
        if let Some((time, tie)) = self.keyed.peek() {
            if wheel.is_none_or(|(t, k, _)| (time, tie) < (t, k)) {
                if time > limit {
                    return None;
                }
                self.now = time;
                self.now_tie = tie;
                self.popped += 1;
                return Some((time, self.keyed.pop()));
            }
        }
        let (time, tie, node) = wheel?;
        if time > limit {
            return None;
        }
        self.current.pop();
        self.on_wheel -= 1;
        let slot = &mut self.nodes[node as usize];
        let event = slot.event.take().expect("a pending node holds its event");
        slot.next = self.free;
        self.free = node;
        self.now = time;
        self.now_tie = tie;
        self.popped += 1;
        if self.walk != NIL {
            self.walk_one();
        }
        Some((time, event))
    }

    /// Starts the walk on the list of the next occupied bucket after `slot`, if any.
    #[inline(never)]
    fn start_walk(&mut self, slot: usize) {
        self.walk = NIL;
        if self.on_wheel > self.current.len() {
            let next = (slot + self.distance_to_next_occupied(slot)) % WHEEL;
            self.walk = self.wheel[next];
            crate::prefetch::prefetch(&self.nodes[self.walk as usize]);
        }
    }

    /// One step of the walk (see [`walk_ahead`](Self::walk_ahead)); out of line, so that
    /// a queue that does not walk pays only the test.
    #[inline(never)]
    fn walk_one(&mut self) {
        let next = self.nodes[self.walk as usize].next;
        if next != NIL {
            crate::prefetch::prefetch(&self.nodes[next as usize]);
        }
        self.walk = next;
    }
}

/// The keyed events: a binary min-heap on (time, tie) that knows each key's place in it.
struct Keyed<E> {
    heap: Vec<KeyedEvent<E>>,
    /// Each key's index in `heap`, or NIL.
    place: Vec<u32>,
}

struct KeyedEvent<E> {
    time: Time,
    tie: u64,
    key: u32,
    event: E,
}

impl<E> Default for Keyed<E> {
    fn default() -> Self {
        Keyed {
            heap: Vec::new(),
            place: Vec::new(),
        }
    }
}

impl<E> Keyed<E> {
    fn peek(&self) -> Option<(Time, u64)> {
        self.heap.first().map(|e| (e.time, e.tie))
    }

    /// Sets `key`'s event, in place of the one it had.
    fn set(&mut self, key: u32, time: Time, tie: u64, event: E) {
        let k = key as usize;
        if self.place.len() <= k {
            self.place.resize(k + 1, NIL);
        }
        let entry = KeyedEvent {
            time,
            tie,
            key,
            event,
        };
        match self.place[k] {
            NIL => {
                self.heap.push(entry);
                let at = self.heap.len() - 1;
                self.place[k] = at as u32;
                self.sift_up(at);
            }
            at => {
                self.heap[at as usize] = entry;
                let at = self.sift_up(at as usize);
                self.sift_down(at);
            }
        }
    }

    /// Removes the earliest (the heap must hold one).
    fn pop(&mut self) -> E {
        let last = self.heap.len() - 1;
        self.swap(0, last);
        let out = self.heap.pop().expect("a keyed event is pending");
        self.place[out.key as usize] = NIL;
        if !self.heap.is_empty() {
            self.sift_down(0);
        }
        out.event
    }

    fn before(&self, a: usize, b: usize) -> bool {
        let (x, y) = (&self.heap[a], &self.heap[b]);
        (x.time, x.tie) < (y.time, y.tie)
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        self.place[self.heap[a].key as usize] = a as u32;
        self.place[self.heap[b].key as usize] = b as u32;
    }

    /// Moves the entry at `at` up while it comes before its parent; returns where it is.
    fn sift_up(&mut self, mut at: usize) -> usize {
        while at > 0 {
            let parent = (at - 1) / 2;
            if !self.before(at, parent) {
                break;
            }
            self.swap(at, parent);
            at = parent;
        }
        at
    }

    fn sift_down(&mut self, mut at: usize) {
        loop {
            let (l, r) = (2 * at + 1, 2 * at + 2);
            let mut first = at;
            if l < self.heap.len() && self.before(l, first) {
                first = l;
            }
            if r < self.heap.len() && self.before(r, first) {
                first = r;
            }
            if first == at {
                return;
            }
            self.swap(at, first);
            at = first;
        }
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

    #[test]
    fn an_event_before_a_peeked_one_still_comes_first() {
        let mut q = EventQueue::new();
        q.schedule(Time::from_ns(100), 'b');
        // The peek turns the wheel to 100 ns; 20 ps is still in the future of `now` (0).
        assert_eq!(q.peek_time(), Some(Time::from_ns(100)));
        q.schedule(Time(20), 'a');
        q.schedule(Time(30), 'c');
        let order: Vec<(Time, char)> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(
            order,
            vec![(Time(20), 'a'), (Time(30), 'c'), (Time::from_ns(100), 'b')]
        );
    }

    proptest! {
        /// With the caller's ties, events leave in (time, tie) order whatever order they
        /// were scheduled in: two queues given the same events in different orders agree.
        #[test]
        fn tied_events_leave_by_time_then_tie(events in proptest::collection::vec((0u64..3, 0u64..1 << 34, 0u64..8), 1..300)) {
            let mut keyed: Vec<(Time, u64)> = Vec::new();
            for (i, &(scale, offset, tie)) in events.iter().enumerate() {
                let t = match scale { 0 => offset % 2048, 1 => offset % 8, _ => offset };
                keyed.push((Time(t), tie << 32 | i as u64));
            }
            let mut forward = EventQueue::new();
            for &(t, k) in &keyed {
                forward.schedule_tied(t, k, k);
            }
            let mut backward = EventQueue::new();
            for &(t, k) in keyed.iter().rev() {
                backward.schedule_tied(t, k, k);
            }
            let a: Vec<(Time, u64)> = std::iter::from_fn(|| forward.pop()).collect();
            let b: Vec<(Time, u64)> = std::iter::from_fn(|| backward.pop()).collect();
            keyed.sort();
            prop_assert_eq!(&a, &keyed);
            prop_assert_eq!(b, keyed);
        }

        /// Keyed events moved at random among plain ones leave as if each move had
        /// scheduled a new event and the one it replaced had been taken out: by (time,
        /// insertion), the replaced ones never.
        #[test]
        fn keyed_events_move_without_leaving_stale_ones(ops in proptest::collection::vec((0u64..3, 0u64..1 << 32, 0u32..6), 1..300)) {
            let mut q = EventQueue::new();
            // The reference: every pending event with its (time, insertion), and each key's.
            let mut pending: Vec<(Time, u64, Option<u32>)> = Vec::new();
            let mut out = Vec::new();
            for (id, (what, offset, key)) in ops.into_iter().enumerate() {
                let id = id as u64;
                let t = Time(q.now().ps() + offset % (1 << (8 * what + 8)));
                match what {
                    0 => {
                        q.schedule(t, id);
                        pending.push((t, id, None));
                    }
                    1 => {
                        q.schedule_keyed(key, t, id);
                        pending.retain(|&(_, _, k)| k != Some(key));
                        pending.push((t, id, Some(key)));
                    }
                    _ => {
                        let popped = q.pop();
                        pending.sort();
                        let expect = (!pending.is_empty()).then(|| pending.remove(0));
                        prop_assert_eq!(popped, expect.map(|(t, id, _)| (t, id)));
                        out.push(popped);
                    }
                }
                prop_assert_eq!(q.len(), pending.len());
            }
            pending.sort();
            let rest: Vec<(Time, u64)> = std::iter::from_fn(|| q.pop()).collect();
            prop_assert_eq!(rest, pending.iter().map(|&(t, id, _)| (t, id)).collect::<Vec<_>>());
        }

        /// Against a reference ordering by (time, insertion): any mix of near, same-bucket
        /// and far-future events, scheduled while popping and peeking, leaves in the same
        /// order, whether the queue walks ahead or not.
        #[test]
        fn matches_a_sorted_reference(ops in proptest::collection::vec((0u64..6, 0u64..1 << 40, 0u8..3), 1..400), walking in any::<bool>()) {
            let mut q = EventQueue::new();
            q.walk_ahead(walking);
            let mut reference: Vec<(Time, u64)> = Vec::new();
            let mut out = Vec::new();
            for (id, (scale, offset, action)) in ops.into_iter().enumerate() {
                let id = id as u64;
                // Scales 4 and 5 make many exact ties, near and beyond the wheel's span.
                let delta = match scale { 0 => offset % 4096, 1 => offset % 1_000_000, 2 => offset % (1 << 30), 3 => offset, 4 => (offset % 4) << 33, _ => offset % 3 };
                let t = Time(q.now().ps() + delta);
                q.schedule(t, id);
                reference.push((t, id));
                match action {
                    0 => out.push(q.pop().unwrap()),
                    // A peek may turn the wheel beyond `now`; later events may still come
                    // before the one it saw.
                    1 => prop_assert!(q.peek_time().is_some_and(|p| p >= q.now())),
                    _ => {}
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
