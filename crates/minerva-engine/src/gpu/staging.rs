//! Weights on their way to the device: a ring of two host-visible buffers, written in turn
//! (by every core) and copied on the queue into the weights' own buffers. A load holds two
//! halves of [`HALF`] in host-visible memory, the ring's pages are faulted in and zeroed
//! once rather than once per tensor, and the device's copy of one half overlaps the writing
//! of the other.

use super::error::{GpuError, GpuResult};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The size of each half. Making a half is what costs (the driver pins its pages and wgpu
/// zeroes them: ≈ 0.5 ms per MiB on an H200), while handing one over costs ≈ 0.15 ms: halves
/// that doubled from 32 to 128 MiB made tinyllama's load wait 115–150 ms for 448 MiB of
/// halves, two fixed ones of 32 MiB 15–21 ms (benches/GPU.md, entry 74).
pub(crate) const HALF: u64 = 32 << 20;
/// Offsets into a mapped buffer must be multiples of this (wgpu's `MAP_ALIGNMENT`).
const ALIGN: u64 = wgpu::MAP_ALIGNMENT;

struct Half {
    buf: Option<wgpu::Buffer>,
    size: u64,
    used: u64,
    mapped: bool,
    /// The submission that copies its bytes out, which a rewrite must wait for.
    last: Option<wgpu::SubmissionIndex>,
}

/// Where a load's upload time went, printed when the ring is released
/// (`MINERVA_GPU_TIMING=1`).
#[derive(Default)]
pub(crate) struct UploadTimes {
    /// Weight buffers created, and the time creating them took.
    pub buffers: (u64, Duration),
    /// Halves made, and the time making and mapping them took.
    made: (u64, Duration),
    /// Halves mapped again, and the time waiting for the device's copies and the map.
    remapped: (u64, Duration),
    /// Bytes copied into mapped halves, and the time the copies took.
    copied: (u64, Duration),
    /// Hand-overs (unmap, finish, submit), and their time.
    submitted: (u64, Duration),
}

impl UploadTimes {
    fn report(&self) {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        eprintln!(
            "load: upload: {} buffers created in {:.1} ms; {} halves made in {:.1} ms, {} mapped \
             again after {:.1} ms of waiting; {:.1} MB copied in {:.1} ms; {} hand-overs in {:.1} ms",
            self.buffers.0,
            ms(self.buffers.1),
            self.made.0,
            ms(self.made.1),
            self.remapped.0,
            ms(self.remapped.1),
            self.copied.0 as f64 / 1e6,
            ms(self.copied.1),
            self.submitted.0,
            ms(self.submitted.1),
        );
    }
}

/// Adds the time since `t` and one event to `slot`.
fn tally(slot: &mut (u64, Duration), t: Instant, n: u64) {
    slot.0 += n;
    slot.1 += t.elapsed();
}

/// The ring and the copies recorded from it since the last hand-over.
pub(crate) struct Staging {
    halves: [Half; 2],
    cur: usize,
    copies: Option<wgpu::CommandEncoder>,
    /// Each half's size.
    half: u64,
    /// Kept only when timings are asked for.
    pub times: Option<UploadTimes>,
}

impl Default for Staging {
    fn default() -> Self {
        Staging::with_half(HALF)
    }
}

impl Staging {
    /// A ring of two halves of `half` bytes (a multiple of 8).
    pub fn with_half(half: u64) -> Staging {
        let empty = || Half {
            buf: None,
            size: 0,
            used: 0,
            mapped: false,
            last: None,
        };
        Staging {
            halves: [empty(), empty()],
            cur: 0,
            copies: None,
            half,
            times: super::profile::timing_asked().then(UploadTimes::default),
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
                let t = Instant::now();
                copy_parallel(piece.slice(..data.len()), data);
                piece.slice(data.len()..).fill(0);
                if let Some(times) = &mut self.times {
                    tally(&mut times.copied, t, n);
                }
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
        let t = Instant::now();
        let half = &mut self.halves[self.cur];
        if let Some(buf) = &half.buf {
            buf.unmap();
        }
        half.mapped = false;
        half.used = 0;
        half.last = Some(queue.submit([copies.finish()]));
        self.cur ^= 1;
        if let Some(times) = &mut self.times {
            tally(&mut times.submitted, t, 1);
        }
    }

    /// Hands the recorded copies over and lets the ring's buffers go (once the device is done
    /// with them): where host-visible memory is device memory (resizable BAR), the ring would
    /// otherwise hold up to the limit of it for good. A later load makes it again.
    pub fn release(&mut self, queue: &wgpu::Queue) {
        self.hand_over(queue);
        if let Some(times) = &self.times {
            if times.copied.0 > 0 {
                times.report();
            }
        }
        *self = Staging::with_half(self.half);
    }

    /// Makes the current half writable: made, or mapped again once the device has copied its
    /// last bytes out.
    fn ready(&mut self, device: &wgpu::Device) -> GpuResult<()> {
        let size = self.half;
        let half = &mut self.halves[self.cur];
        if half.mapped {
            return Ok(());
        }
        let t = Instant::now();
        let made = half.buf.is_none();
        if made {
            half.size = size;
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
        if let Some(times) = &mut self.times {
            tally(
                if made {
                    &mut times.made
                } else {
                    &mut times.remapped
                },
                t,
                1,
            );
        }
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

    /// A small ring (halves of 16 KiB) through which tensors of odd sizes, some larger than a
    /// half, pass many times round: halves are made, handed over full and mapped again, and
    /// every byte lands, each buffer's tail zeroed.
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
        let mut ring = Staging::with_half(16 << 10);
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
