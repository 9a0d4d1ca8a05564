//! A hint to the processor that memory is about to be read.
//!
//! The packet models know which state the next event will touch (its port, its egress
//! queues) one event ahead; asking for those lines early overlaps their cache misses with
//! the current event's work. A hint never changes a result.

/// Asks for the cache line holding `value` to be brought into the first-level cache. A
/// no-op on targets without a prefetch instruction.
#[inline(always)]
pub fn prefetch<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: the instruction needs SSE, which every x86_64 processor has; it is a
        // hint that cannot fault and changes no memory, and the address is a live
        // reference's.
        unsafe { _mm_prefetch::<_MM_HINT_T0>((value as *const T).cast::<i8>()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}

/// Bytes of model state below which prefetching does not pay: the second-level cache of
/// the machine fabricsim is measured on (1 MiB per core on this AMD EPYC; BENCHMARKS.md).
/// Below it the state stays cached and the hints only cost instructions (+8.7 % on the
/// reference benchmark, whose state is a few hundred kilobytes).
pub const WORTH_ABOVE_BYTES: usize = 1 << 20;
