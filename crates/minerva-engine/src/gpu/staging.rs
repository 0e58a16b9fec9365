//! Weights on their way to the device: a ring of two host-visible buffers, written in turn
//! (by every core) and copied on the queue into the weights' own buffers. A load holds at
//! most [`STAGING_LIMIT`] in host-visible memory, the ring's pages are faulted in and zeroed
//! once rather than once per tensor, and the device's copy of one half overlaps the writing
//! of the other.

use super::error::{GpuError, GpuResult};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The most bytes of weights staged for upload at once: two halves of half as much.
pub(crate) const STAGING_LIMIT: u64 = 256 << 20;
/// A half's first size; it doubles each time it fills, up to half the limit, so a small
/// model maps little more than it needs, and a large one waits on few small halves.
const FIRST_HALF: u64 = 32 << 20;
/// Offsets into a mapped buffer must be multiples of this (wgpu's `MAP_ALIGNMENT`).
const ALIGN: u64 = wgpu::MAP_ALIGNMENT;

struct Half {
    buf: Option<wgpu::Buffer>,
    size: u64,
    used: u64,
    mapped: bool,
    /// Whether it filled up before its last hand-over: the next use doubles it.
    grow: bool,
    /// The submission that copies its bytes out, which a rewrite must wait for.
    last: Option<wgpu::SubmissionIndex>,
}

/// The ring and the copies recorded from it since the last hand-over.
pub(crate) struct Staging {
    halves: [Half; 2],
    cur: usize,
    copies: Option<wgpu::CommandEncoder>,
    /// A half's first size and its largest.
    first: u64,
    most: u64,
}

impl Default for Staging {
    fn default() -> Self {
        Staging::with_sizes(FIRST_HALF, STAGING_LIMIT / 2)
    }
}

impl Staging {
    /// A ring whose halves start at `first` bytes and grow to `most` (multiples of 8).
    pub fn with_sizes(first: u64, most: u64) -> Staging {
        let half = || Half {
            buf: None,
            size: 0,
            used: 0,
            mapped: false,
            grow: true,
            last: None,
        };
        Staging {
            halves: [half(), half()],
            cur: 0,
            copies: None,
            first: first.min(most),
            most,
        }
    }

    /// Writes `bytes` into `dst` from offset 0, then zeros up to `size` (a multiple of 4,
    /// at least `bytes.len()`), through the ring: the copies reach the queue at the next
    /// [`Staging::hand_over`].
    pub fn write(
        &mut self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        dst: &wgpu::Buffer,
        bytes: &[u8],
        size: u64,
    ) -> GpuResult<()> {
        debug_assert!(size.is_multiple_of(4) && size >= bytes.len() as u64);
        let mut at = 0u64;
        while at < size {
            self.ready(device)?;
            let half = &mut self.halves[self.cur];
            // A full half is handed over as soon as it fills, so a ready one has room.
            let n = (half.size - half.used).min(size - at);
            debug_assert!(n > 0 && n.is_multiple_of(4));
            let buf = half.buf.as_ref().expect("a ready half has its buffer");
            {
                let mut view = buf
                    .slice(half.used..half.used + n)
                    .get_mapped_range_mut()
                    .map_err(|e| GpuError::OutOfMemory(format!("staging: {e}")))?;
                let (from, to) = (at as usize, (at + n) as usize);
                let data = &bytes[from.min(bytes.len())..to.min(bytes.len())];
                let mut piece = view.slice(..);
                copy_parallel(piece.slice(..data.len()), data);
                piece.slice(data.len()..).fill(0);
            }
            let copies = self.copies.get_or_insert_with(|| {
                device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
                    label: Some("weights"),
                })
            });
            copies.copy_buffer_to_buffer(buf, half.used, dst, at, n);
            half.used = (half.used + n).next_multiple_of(ALIGN);
            at += n;
            if half.used >= half.size {
                self.hand_over(queue);
            }
        }
        Ok(())
    }

    /// Submits the copies recorded so far and moves to the other half; none recorded, none
    /// submitted.
    fn hand_over(&mut self, queue: &wgpu::Queue) {
        let Some(copies) = self.copies.take() else {
            return;
        };
        let half = &mut self.halves[self.cur];
        if let Some(buf) = &half.buf {
            buf.unmap();
        }
        half.mapped = false;
        half.grow = half.used >= half.size;
        half.used = 0;
        half.last = Some(queue.submit([copies.finish()]));
        self.cur ^= 1;
    }

    /// Hands the recorded copies over and lets the ring's buffers go (once the device is done
    /// with them): where host-visible memory is device memory (resizable BAR), the ring would
    /// otherwise hold up to the limit of it for good. A later load makes it again.
    pub fn release(&mut self, queue: &wgpu::Queue) {
        self.hand_over(queue);
        *self = Staging::with_sizes(self.first, self.most);
    }

    /// Makes the current half writable: made (or remade larger), or mapped again once the
    /// device has copied its last bytes out.
    fn ready(&mut self, device: &wgpu::Device) -> GpuResult<()> {
        let (first, most) = (self.first, self.most);
        let half = &mut self.halves[self.cur];
        if half.mapped {
            return Ok(());
        }
        if half.grow && half.size < most {
            half.size = (half.size * 2).clamp(first, most);
            // The old buffer is freed once the copies that read it are done.
            half.buf = Some(device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("staging"),
                size: half.size,
                usage: wgpu::BufferUsages::MAP_WRITE | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: true,
            }));
        } else {
            let buf = half.buf.as_ref().expect("a used half has its buffer");
            let done = Arc::new(AtomicBool::new(false));
            let flag = done.clone();
            buf.slice(..).map_async(wgpu::MapMode::Write, move |r| {
                // A failed map leaves the flag down; the wait below then reports the device.
                flag.store(r.is_ok(), Ordering::Release);
            });
            let wait = |index: Option<wgpu::SubmissionIndex>| {
                device
                    .poll(wgpu::PollType::Wait {
                        submission_index: index,
                        timeout: None,
                    })
                    .map_err(|e| GpuError::DeviceLost(e.to_string()))
            };
            wait(half.last.take())?;
            if !done.load(Ordering::Acquire) {
                // The callback runs in a poll after its submission: at worst, the next one.
                wait(None)?;
            }
            if !done.load(Ordering::Acquire) {
                return Err(GpuError::DeviceLost(
                    "staging buffer could not be mapped".into(),
                ));
            }
        }
        half.mapped = true;
        half.grow = false;
        Ok(())
    }
}

/// Copies a large tensor in chunks across threads: one core's copy (and the page faults of
/// the file's mapping behind it) is what a load waits for.
fn copy_parallel(mut dst: wgpu::WriteOnly<'_, [u8]>, src: &[u8]) {
    use rayon::prelude::*;
    const CHUNK: usize = 4 << 20;
    if src.len() <= CHUNK || dst.len() < src.len() {
        dst.copy_from_slice(src);
        return;
    }
    // An address, so that the closure can cross threads.
    let base = dst.as_raw_ptr().cast::<u8>().as_ptr() as usize;
    src.par_chunks(CHUNK).enumerate().for_each(|(i, s)| {
        // SAFETY: `dst` is mapped, writable and at least `src.len()` bytes long until this
        // returns, and each chunk writes its own disjoint range of it.
        unsafe {
            std::ptr::copy_nonoverlapping(s.as_ptr(), (base as *mut u8).add(i * CHUNK), s.len())
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::{GpuContext, GpuOptions};

    /// A small ring (halves of 16 to 64 KiB) through which tensors of odd sizes, some larger
    /// than a half, pass many times round: halves are made, grown, handed over full and
    /// mapped again, and every byte lands, each buffer's tail zeroed.
    #[test]
    fn a_small_ring_wraps_and_every_byte_lands() {
        let ctx = match GpuContext::new(&GpuOptions::default()) {
            Ok(c) => c,
            Err(e) if std::env::var_os("CI").is_none() => {
                eprintln!("SKIPPED: no GPU adapter ({e})");
                return;
            }
            Err(e) => panic!("CI is set but the GPU backend found no device: {e}"),
        };
        let mut ring = Staging::with_sizes(16 << 10, 64 << 10);
        let mut seed = 7u64;
        let mut written = Vec::new();
        for len in [1usize, 5, 70_000, 3, 40_000, 200_001, 64 << 10, 13, 150_000] {
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed as u8
                })
                .collect();
            let size = (len.div_ceil(16) * 16) as u64;
            let buf = ctx.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("staged"),
                size,
                usage: wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: false,
            });
            ring.write(&ctx.device, &ctx.queue, &buf, &bytes, size)
                .unwrap();
            written.push((buf, bytes));
        }
        ring.release(&ctx.queue);
        for (buf, bytes) in &written {
            let back = ctx.read_bytes(buf, 0, buf.size()).unwrap();
            assert!(
                back[..bytes.len()] == bytes[..],
                "{} bytes differ",
                bytes.len()
            );
            assert!(back[bytes.len()..].iter().all(|&b| b == 0), "padding");
        }
        ctx.check().unwrap();
    }
}
