//! A global allocator for the harness's binaries: it refuses (and records) any single
//! allocation over [`LIMIT`] and tracks the bytes live, so a case that asks for more memory
//! than any fixture model could need is caught instead of taking the machine with it.
//!
//! A refused allocation returns null: `try_reserve` turns that into an error, a blind
//! allocation aborts the process, which the supervisor catches and saves.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// The largest single allocation a case may make: the fixtures are a few MB.
pub const LIMIT: usize = 1 << 30;

pub struct Guarded;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static REFUSED: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Guarded {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() > LIMIT {
            REFUSED.fetch_max(layout.size(), Relaxed);
            return std::ptr::null_mut();
        }
        // SAFETY: forwarded unchanged to the system allocator.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let live = LIVE.fetch_add(layout.size(), Relaxed) + layout.size();
            PEAK.fetch_max(live, Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Relaxed);
        // SAFETY: `ptr` came from `alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > LIMIT {
            REFUSED.fetch_max(new_size, Relaxed);
            return std::ptr::null_mut();
        }
        // SAFETY: forwarded unchanged to the system allocator.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_sub(layout.size(), Relaxed);
            let live = LIVE.fetch_add(new_size, Relaxed) + new_size;
            PEAK.fetch_max(live, Relaxed);
        }
        p
    }
}

/// What one case did to memory: the largest refused request and the peak live bytes.
#[derive(Debug, Clone, Copy, Default)]
pub struct Watch {
    pub refused: usize,
    pub peak: usize,
}

/// Starts watching a case: resets the refusal record and the peak to the bytes live now.
pub fn start() {
    REFUSED.store(0, Relaxed);
    PEAK.store(LIVE.load(Relaxed), Relaxed);
}

pub fn read() -> Watch {
    Watch {
        refused: REFUSED.load(Relaxed),
        peak: PEAK.load(Relaxed),
    }
}
