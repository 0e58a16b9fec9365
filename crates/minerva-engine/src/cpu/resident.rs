//! Weights copied out of the mapped file into anonymous memory on huge pages, where the system
//! has them (Linux with transparent huge pages on "always" or "madvise").
//!
//! Why: one token's products read every weight once, and a mapped file's 4 KiB pages cap
//! that read. On the development machine two threads stream a page-cached file's mapping at
//! 24–26 GB/s and the same bytes on huge pages at 28–31 GB/s; tinyllama Q4_0 decoded 15–21 %
//! faster from the copy (`benches/CPU.md`, section 4). The file's pages of each copied range
//! are released right after its copy, so the process still holds each weight once: peak RSS
//! is the weights plus the largest tensor, not twice the file.

use crate::cpu::quant::packed::{Turn, ROWS};
use memmap2::{Mmap, MmapOptions};
use std::ops::Range;

/// Tensors smaller than this stay in place: they are few bytes of the model, and a huge page
/// would be mostly empty.
const MIN_BYTES: usize = 1 << 20;

/// Whether weights are copied into huge pages here; read once.
pub fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        cfg!(target_os = "linux")
            && std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
                .is_ok_and(|s| !s.contains("[never]"))
    })
}

/// Bytes of a huge page (x86-64's and arm64's usual transparent huge page).
const HUGE: usize = 2 << 20;

/// A weight's bytes on huge pages: `len` bytes from `at` of an anonymous mapping, `at` on a
/// huge page's boundary so that every whole huge page of the bytes can be one.
pub struct Resident {
    map: Mmap,
    at: usize,
    len: usize,
}

impl std::ops::Deref for Resident {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.map[self.at..self.at + self.len]
    }
}

/// A copy of `map[range]` on huge pages (packed as `pack` says: a turn and the bytes per
/// row), with the mapping's whole pages inside `range` then released; None where the range
/// is small or the memory cannot be had (the caller then keeps the bytes in place).
pub fn copy(map: &Mmap, range: Range<usize>, pack: Option<(Turn, usize)>) -> Option<Resident> {
    use rayon::prelude::*;
    let src = map.get(range.clone())?;
    if src.len() < MIN_BYTES || !enabled() {
        return None;
    }
    // A huge page more than the bytes, so that they can start on a boundary: an anonymous
    // mapping starts on a small page's, and a 2.4 MB tensor at a random one held no whole
    // huge page four times in five (tinyllama Q4_K_M had 56 % of its weights on huge pages).
    // The pages before `at` are never touched, so they take no memory.
    let mut whole = MmapOptions::new().len(src.len() + HUGE).map_anon().ok()?;
    let at = (whole.as_ptr() as usize).next_multiple_of(HUGE) - whole.as_ptr() as usize;
    #[cfg(target_os = "linux")]
    {
        // Only advice: without it the copy still works, on small pages. Past the bytes'
        // last small page, none: the partly used huge page at the end would otherwise be
        // allocated whole.
        let _ = whole.advise(memmap2::Advice::HugePage);
        let end = at + src.len().next_multiple_of(4096);
        if end < whole.len() {
            let _ = whole.advise_range(memmap2::Advice::NoHugePage, end, whole.len() - end);
        }
    }
    let dst = &mut whole[at..at + src.len()];
    const CHUNK: usize = 4 << 20;
    match pack {
        Some((turn, row_bytes)) => {
            // Whole groups of rows to a chunk.
            let group = ROWS * row_bytes;
            let chunk = (CHUNK / group).max(1) * group;
            dst.par_chunks_mut(chunk)
                .zip(src.par_chunks(chunk))
                .for_each(|(d, s)| turn.pack(s, d, row_bytes));
        }
        None => dst
            .par_chunks_mut(CHUNK)
            .zip(src.par_chunks(CHUNK))
            .for_each(|(d, s)| d.copy_from_slice(s)),
    }
    release(map, range);
    Some(Resident {
        map: whole.make_read_only().ok()?,
        at,
        len: src.len(),
    })
}

/// Whether [`release`] lets pages go here.
pub fn releases() -> bool {
    cfg!(unix)
}

/// Drops the mapping's whole pages inside `range` from this process: the file stays in the
/// page cache, and a later read of them (metadata beside a tensor) faults them back in.
pub fn release(map: &Mmap, range: Range<usize>) {
    #[cfg(unix)]
    {
        const PAGE: usize = 4096;
        let base = map.as_ptr() as usize;
        let start = (base + range.start).next_multiple_of(PAGE) - base;
        let end = (base + range.end) / PAGE * PAGE - base;
        if end > start {
            // SAFETY: the mapping is a read-only map of a file, never written through: pages
            // dropped from it read back from the file unchanged. No slice into it is being
            // written, and the bytes behind live slices stay the file's.
            let _ = unsafe {
                map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, start, end - start)
            };
        }
    }
    #[cfg(not(unix))]
    let _ = (map, range);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_copy_holds_the_bytes_and_the_mapping_still_reads_them() {
        let len = 3 * MIN_BYTES + 12_345;
        let bytes: Vec<u8> = (0..len).map(|i| (i * 7 + i / 4093) as u8).collect();
        let mut file = tempfile::NamedTempFile::new().unwrap();
        file.write_all(&bytes).unwrap();
        // SAFETY: a temporary file of this test's own, not changed while mapped.
        let map = unsafe { Mmap::map(file.as_file()) }.unwrap();
        // A range that starts and ends inside pages, as tensors do.
        let range = 1_000..len - 3_000;
        match copy(&map, range.clone(), None) {
            Some(copied) => {
                assert!(copied[..] == bytes[range.clone()], "the copy's bytes");
                assert_eq!(copied.len(), range.len());
                assert_eq!(
                    copied.as_ptr() as usize % HUGE,
                    0,
                    "on a huge page's boundary"
                );
            }
            None => assert!(!enabled(), "no copy where huge pages are on"),
        }
        // The released pages read back from the file.
        assert!(
            map[..] == bytes[..],
            "the mapping after its pages were released"
        );
        assert!(
            copy(&map, 0..MIN_BYTES - 1, None).is_none(),
            "small ranges stay in place"
        );
    }
}
