//! A global allocator that counts the heap in use and its peak once asked to
//! ([`start_counting`]), so that `fabricsim bench` can report measured memory rather than
//! a page-granular RSS; other commands pay one relaxed load per allocation.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering};

/// The system allocator, counting after [`start_counting`].
pub struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
/// Bytes allocated and not freed since counting started (negative when more was freed
/// than allocated since: blocks from before).
static IN_USE: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);

/// Starts counting allocations (for the rest of the process).
pub fn start_counting() {
    COUNTING.store(true, Ordering::Relaxed);
}

fn grew(bytes: usize) {
    if COUNTING.load(Ordering::Relaxed) {
        let now = IN_USE.fetch_add(bytes as isize, Ordering::Relaxed) + bytes as isize;
        PEAK.fetch_max(now, Ordering::Relaxed);
    }
}

fn shrank(bytes: usize) {
    if COUNTING.load(Ordering::Relaxed) {
        IN_USE.fetch_sub(bytes as isize, Ordering::Relaxed);
    }
}

// SAFETY: every call is forwarded unchanged to `System`; the counters only observe sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        shrank(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            shrank(layout.size());
            grew(new_size);
        }
        p
    }
}

/// Heap bytes allocated and not yet freed since counting started.
pub fn in_use() -> isize {
    IN_USE.load(Ordering::Relaxed)
}

/// The most heap in use since the last [`reset_peak`].
pub fn peak() -> isize {
    PEAK.load(Ordering::Relaxed)
}

/// Starts a new peak measurement from the heap in use now.
pub fn reset_peak() {
    PEAK.store(in_use(), Ordering::Relaxed);
}
