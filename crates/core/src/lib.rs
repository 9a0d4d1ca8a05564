//! fabricsim-core: the bottom layers of fabricsim.
//!
//! Dependencies point down this list and never up:
//! - [`units`]: integer-picosecond time, bit rates, byte sizes, ids, quantity parsing;
//!   [`prefetch`]: a cache hint the packet models give one event ahead.
//! - [`wire`]: InfiniBand header layouts and sizes, CRCs, capture framing.
//! - [`proto`]: sans-IO protocol state machines (credit flow control, VL arbitration,
//!   the RC transport, IB congestion control). Each takes `now` and inputs and returns
//!   decisions; none knows about the engine.
//! - [`engine`]: the event queue keyed by (time, sequence).
//! - [`pool`]: frames in flight stored once, in slots, queued in intrusive FIFOs.
//! - [`topology`]: graphs, builders and routing tables as plain data.
//!
//! Nothing in this crate does I/O or reads a clock.

// Unsafe code only in `prefetch` (a cache hint intrinsic), allowed there.
#![deny(unsafe_code)]

pub mod clos;
pub mod engine;
pub mod pool;
#[allow(unsafe_code)]
pub mod prefetch;
pub mod proto;
pub mod topology;
pub mod units;
pub mod wire;
