//! Weights on their way to the device: a ring of two host-visible buffers, written in turn
//! (by every core) and copied on the queue into the weights' own buffers. A load holds two
//! halves of [`HALF`] in host-visible memory, the ring's pages are faulted in and zeroed
//! once rather than once per tensor, and the device's copy of one half overlaps the writing
//! of the other.

use super::error::{GpuError, GpuResult};
use super::gather::Gather;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The size of each half. Making a half is what costs (the driver pins its pages and wgpu
/// zeroes them: ≈ 0.5 ms per MiB on an H200), while handing one over costs ≈ 0.15 ms: halves
/// that doubled from 32 to 128 MiB made tinyllama's load wait 112–148 ms for 448 MiB of
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
    /// The time each weight buffer's creation took (the driver's new memory blocks stand out).
    pub buffers: Vec<Duration>,
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
            self.buffers.len(),
            ms(self.buffers.iter().sum()),
            self.made.0,
            ms(self.made.1),
            self.remapped.0,
            ms(self.remapped.1),
            self.copied.0 as f64 / 1e6,
            ms(self.copied.1),
            self.submitted.0,
            ms(self.submitted.1),
        );
        let mut each = self.buffers.clone();
        each.sort();
        if let Some(median) = each.get(each.len() / 2) {
            let slow: Vec<&Duration> = each.iter().filter(|d| d.as_micros() >= 200).collect();
            eprintln!(
                "load: upload: a buffer's creation {:.0} µs at the median, {} of them ≥ 200 µs in \
                 {:.1} ms",
                median.as_secs_f64() * 1e6,
                slow.len(),
                ms(slow.into_iter().sum())
            );
        }
    }
}

/// Adds the time since `t` and one event to `slot`.
fn tally(slot: &mut (u64, Duration), t: Instant, n: u64) {
    slot.0 += n;
    slot.1 += t.elapsed();
}

/// A copy into the current half that waits for the half's hand-over: gathered bytes `from ..
/// from + len` of the `src_len` bytes at the address `src` (inside one of the ring's held
/// mappings) to `at` bytes into the half.
struct Pending {
    src: usize,
    src_len: usize,
    gather: Gather,
    from: usize,
    len: usize,
    at: u64,
}

/// The ring and the copies recorded from it since the last hand-over.
pub(crate) struct Staging {
    halves: [Half; 2],
    cur: usize,
    copies: Option<wgpu::CommandEncoder>,
    /// The checkpoint's file mappings, held until the ring is released: bytes inside them
    /// are copied into a half when it is handed over, all of the half's tensors at once on
    /// every core. A small model's tensors (2–7 MB) copied one by one kept few cores busy: its
    /// 636 MB went at ≈ 10 GB/s, gpt-oss-20b's 141 MB tensors at ≈ 24 GB/s.
    held: Vec<minerva_formats::Mapping>,
    pending: Vec<Pending>,
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
            held: Vec::new(),
            pending: Vec::new(),
            half,
            times: super::profile::timing_asked().then(UploadTimes::default),
        }
    }

    /// Writes the bytes `gather` takes from `src` into `dst` from offset 0, then zeros up to
    /// `size` (a multiple of 4, at least as many), through the ring: the copies reach the
    /// queue at the next [`Staging::hand_over`].
    pub fn write(
        &mut self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        dst: &wgpu::Buffer,
        (src, gather): (&[u8], Gather),
        size: u64,
    ) -> GpuResult<()> {
        let packed = gather.packed_len(src.len());
        debug_assert!(size.is_multiple_of(4) && size >= packed as u64);
        let held = held_in(&self.held, src);
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
                let from = (at as usize).min(packed);
                let len = ((at + n) as usize).min(packed) - from;
                let mut piece = view.slice(..);
                piece.slice(len..).fill(0);
                if held && len > 0 {
                    self.pending.push(Pending {
                        src: src.as_ptr() as usize,
                        src_len: src.len(),
                        gather,
                        from,
                        len,
                        at: half.used,
                    });
                } else {
                    let t = Instant::now();
                    copy_parallel(piece.slice(..len), src, gather, from);
                    if let Some(times) = &mut self.times {
                        tally(&mut times.copied, t, len as u64);
                    }
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

    /// Holds `maps` until the ring is released, so that bytes inside them can be copied when
    /// their half is handed over.
    pub fn hold(&mut self, maps: &[minerva_formats::Mapping]) {
        self.held = maps.to_vec();
    }

    /// Submits the copies recorded so far and moves to the other half; none recorded, none
    /// submitted.
    fn hand_over(&mut self, queue: &wgpu::Queue) {
        let Some(copies) = self.copies.take() else {
            return;
        };
        let half = &mut self.halves[self.cur];
        if let Some(buf) = &half.buf {
            let t = Instant::now();
            let bytes = copy_pending(buf, std::mem::take(&mut self.pending));
            if let Some(times) = &mut self.times {
                tally(&mut times.copied, t, bytes);
            }
            buf.unmap();
        }
        let t = Instant::now();
        half.mapped = false;
        half.used = 0;
        half.last = Some(queue.submit([copies.finish()]));
        self.cur ^= 1;
        if let Some(times) = &mut self.times {
            tally(&mut times.submitted, t, 1);
        }
    }

    /// A ring whose two halves are made and mapped now rather than by a load's first weights:
    /// the ring a device kept for the next load holds (`device_pool`), 64 MiB of host-visible
    /// memory while no model loads.
    pub fn made(device: &wgpu::Device) -> GpuResult<Staging> {
        let mut ring = Staging::default();
        for _ in 0..2 {
            ring.ready(device)?;
            ring.cur ^= 1;
        }
        ring.times = super::profile::timing_asked().then(UploadTimes::default);
        Ok(ring)
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
        // The pending copies went with the hand-over: the mappings can go.
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

/// Whether `data` lies inside one of `held`.
fn held_in(held: &[minerva_formats::Mapping], data: &[u8]) -> bool {
    let (p, n) = (data.as_ptr() as usize, data.len());
    !data.is_empty()
        && held
            .iter()
            .any(|m| m.as_ptr() as usize <= p && p + n <= m.as_ptr() as usize + m.len())
}

/// Makes a half's pending copies, in chunks of at most 1 MiB across every core; returns the
/// bytes copied.
fn copy_pending(buf: &wgpu::Buffer, pending: Vec<Pending>) -> u64 {
    use rayon::prelude::*;
    const CHUNK: usize = 1 << 20;
    if pending.is_empty() {
        return 0;
    }
    let mut view = buf
        .slice(..)
        .get_mapped_range_mut()
        .expect("a half with pending copies is mapped");
    // An address, so that the closure can cross threads.
    let base = view.slice(..).as_raw_ptr().cast::<u8>().as_ptr() as usize;
    let chunks: Vec<(&Pending, usize, usize)> = pending
        .iter()
        .flat_map(|p| {
            (0..p.len)
                .step_by(CHUNK)
                .map(move |o| (p, o, CHUNK.min(p.len - o)))
        })
        .collect();
    chunks.par_iter().for_each(|&(p, o, len)| {
        // SAFETY: `p.src .. p.src + p.src_len` lies inside a mapping the ring holds
        // (`held_in`), and `p.at + o .. p.at + o + len` inside the mapped half (each pending
        // copy was given room in it); chunks write disjoint ranges, and the view keeps the half
        // mapped until they are done.
        let (src, out) = unsafe {
            (
                std::slice::from_raw_parts(p.src as *const u8, p.src_len),
                std::slice::from_raw_parts_mut((base + p.at as usize + o) as *mut u8, len),
            )
        };
        p.gather.copy(src, p.from + o, out);
    });
    drop(view);
    pending.iter().map(|p| p.len as u64).sum()
}

/// Copies gathered bytes `from .. from + dst.len()` of `src` into `dst`, a large tensor in
/// chunks across threads: one core's copy (and the page faults of the file's mapping behind
/// it) is what a load waits for.
fn copy_parallel(mut dst: wgpu::WriteOnly<'_, [u8]>, src: &[u8], gather: Gather, from: usize) {
    use rayon::prelude::*;
    const CHUNK: usize = 4 << 20;
    let len = dst.len();
    if len <= CHUNK {
        // SAFETY: `dst` is mapped, writable and `len` bytes long while it is borrowed here.
        let out =
            unsafe { std::slice::from_raw_parts_mut(dst.as_raw_ptr().cast::<u8>().as_ptr(), len) };
        gather.copy(src, from, out);
        return;
    }
    // An address, so that the closure can cross threads.
    let base = dst.as_raw_ptr().cast::<u8>().as_ptr() as usize;
    (0..len).into_par_iter().step_by(CHUNK).for_each(|o| {
        // SAFETY: `dst` is mapped, writable and `len` bytes long until this returns, and each
        // chunk writes its own disjoint range of it.
        let out =
            unsafe { std::slice::from_raw_parts_mut((base + o) as *mut u8, CHUNK.min(len - o)) };
        gather.copy(src, from + o, out);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small ring (halves of 16 KiB) through which tensors of odd sizes, some larger than a
    /// half, pass many times round: halves are made, handed over full and mapped again, and
    /// every byte lands, each buffer's tail zeroed. Once from the heap (copied as written),
    /// once from a held file mapping (copied at each hand-over, chunks of 1 MiB on every core)
    /// with heap tensors in between; every third tensor as Q8_0 blocks' codes, gathered on
    /// the way.
    #[test]
    fn a_small_ring_wraps_and_every_byte_lands() {
        let Some((_one, ctx)) = crate::gpu::device_pool::test_context() else {
            return;
        };
        let mut seed = 7u64;
        let lens = [
            1usize,
            5,
            70_000,
            3,
            40_000,
            2_500_001,
            64 << 10,
            13,
            150_000,
        ];
        let tensors: Vec<Vec<u8>> = lens
            .iter()
            .map(|&len| {
                (0..len)
                    .map(|_| {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        seed as u8
                    })
                    .collect()
            })
            .collect();
        let mut file = tempfile::tempfile().unwrap();
        std::io::Write::write_all(&mut file, &tensors.concat()).unwrap();
        // SAFETY: a private temporary file, written above and not changed while mapped.
        let map: minerva_formats::Mapping =
            std::sync::Arc::new(unsafe { memmap2::Mmap::map(&file) }.unwrap());
        for from_file in [false, true] {
            let mut ring = Staging::with_half(16 << 10);
            if from_file {
                ring.hold(std::slice::from_ref(&map));
            }
            let mut written = Vec::new();
            let mut at = 0;
            for (i, bytes) in tensors.iter().enumerate() {
                // From the file: every other tensor, the rest from the heap.
                let src = if from_file && i % 2 == 0 {
                    &map[at..at + bytes.len()]
                } else {
                    &bytes[..]
                };
                at += bytes.len();
                let codes = Gather::Field {
                    stride: 34,
                    off: 2,
                    len: 32,
                };
                let gather = if i % 3 == 2 { codes } else { Gather::All };
                let expected: Vec<u8> = match gather {
                    Gather::All => bytes.clone(),
                    _ => bytes
                        .chunks_exact(34)
                        .flat_map(|b| b[2..].to_vec())
                        .collect(),
                };
                let size = (expected.len().div_ceil(16).max(1) * 16) as u64;
                let buf = ctx.device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("staged"),
                    size,
                    usage: wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC,
                    mapped_at_creation: false,
                });
                ring.write(&ctx.device, &ctx.queue, &buf, (src, gather), size)
                    .unwrap();
                written.push((buf, expected));
            }
            ring.release(&ctx.queue);
            for (buf, bytes) in &written {
                let back = ctx.read_bytes(buf, 0, buf.size()).unwrap();
                assert!(
                    back[..bytes.len()] == bytes[..],
                    "{} bytes differ (from the file: {from_file})",
                    bytes.len()
                );
                assert!(back[bytes.len()..].iter().all(|&b| b == 0), "padding");
            }
        }
        ctx.check().unwrap();
    }
}
