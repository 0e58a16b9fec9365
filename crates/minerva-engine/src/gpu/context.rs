//! The wgpu device the GPU backend runs on (chosen in `adapters.rs`, possibly kept from a model
//! before: `device_pool.rs`), what it can do, and device errors captured into a shared slot so
//! they surface as `GpuError`s rather than panics.

use super::adapters::{choose_adapter, packed_f16_wanted, request_device, Chosen};
use super::error::{GpuError, GpuResult};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// How to choose the adapter.
#[derive(Debug, Clone, Default)]
pub struct GpuOptions {
    /// Keep only adapters whose name contains this (case-insensitive).
    pub adapter_name: Option<String>,
    /// Keep the KV cache in f32 instead of f16 (exact comparisons with the CPU backend); implies
    /// `matmul_f32` and decode products with x in f32 (no int8 products).
    pub kv_f32: bool,
    /// Multiply prefill products in f32 rather than on matrix cores with f16 inputs (exact
    /// comparisons with the CPU backend). `MINERVA_GPU_MATRIX_CORES=0` does the same.
    pub matmul_f32: bool,
}

/// What the chosen device can do that kernels specialise on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    pub subgroups: bool,
    pub f16: bool,
    pub timestamps: bool,
    /// Smallest subgroup size the adapter reports (kernels must not assume more).
    pub subgroup_min: u32,
    pub subgroup_max: u32,
    /// Largest storage buffer binding, bytes.
    pub max_binding: u64,
    pub max_buffer: u64,
    pub max_workgroup_storage: u32,
    /// Storage buffers one kernel may bind.
    pub max_storage_buffers: u32,
    /// Dense prefill products and the prompt's attention run on matrix cores
    /// (`matmul_coop.wgsl`, `attention_coop.wgsl`): the adapter offers
    /// 16×16×16 subgroup matrices with f16 inputs and f32 results, f16, and subgroups of exactly
    /// `COOP_SUBGROUP` lanes; the options leave them on.
    pub matrix_cores: bool,
    /// Decode products of E2M1 (MXFP4) weights multiply in packed f16 (PACKED_F16): the adapter
    /// offers f16 and the options allow inexact products (neither `kv_f32` nor `matmul_f32`;
    /// `MINERVA_GPU_PACKED_F16=0` does the same).
    pub packed_f16: bool,
    /// Dense prefill products stage their matrices in workgroup memory (`matmul_staged.wgsl`):
    /// matrix cores, and SPIR-V passthrough for the kernel spirv.rs translates;
    /// `MINERVA_GPU_STAGED=0` turns it off.
    pub staged_matrices: bool,
}

/// The one subgroup size the matrix-core product is written for: its workgroup is one subgroup.
pub const COOP_SUBGROUP: u32 = 32;

pub struct GpuContext {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub info: wgpu::AdapterInfo,
    /// The features the device was made with (what a kept device is matched by).
    features: wgpu::Features,
    /// Set once the device is lost: it is not kept for another model.
    lost: Arc<AtomicBool>,
    /// Whether the device was kept from before (`device_pool`) rather than made for this one.
    kept: bool,
    /// The kernels built on the device, kept with it for the next model.
    pipelines: Arc<super::pipelines::Pipelines>,
    pub caps: Capabilities,
    /// Decode products of the weights that take it (`Ops::int8_weights`: GGUF's Q4_0, Q4_1,
    /// Q5_1, Q8_0, Q4_K, Q5_K and Q6_K, MLX's 4- and 8-bit affine) quantize x per 8 values to
    /// two int8 terms (each value within 1/64516 of its part's max|x|) and take integer dot
    /// products: on unless `kv_f32` asks for exact results or MINERVA_GPU_INT8_DOT=0.
    pub int8_products: bool,
    errors: Arc<Mutex<Option<GpuError>>>,
    submits: AtomicU64,
    dispatches: AtomicU64,
    step_writes: AtomicU64,
    weight_bytes: AtomicU64,
    /// Weights on their way to the device.
    staging: Mutex<super::staging::Staging>,
    profiler: Option<super::profile::Profiler>,
    timer: Option<super::profile::StepTimer>,
}

impl Drop for GpuContext {
    /// A device that was not lost goes back to `device_pool` with its kernels for the next
    /// model, where a process keeps devices.
    fn drop(&mut self) {
        if !self.lost.load(Ordering::SeqCst) {
            super::device_pool::put(
                self.device.clone(),
                self.queue.clone(),
                self.pipelines.clone(),
                &self.info.name,
                self.features,
            );
        }
    }
}

fn record(slot: &Mutex<Option<GpuError>>, err: GpuError) {
    let mut guard = slot.lock().unwrap_or_else(|p| p.into_inner());
    // The first error is the cause; later ones usually follow from it.
    if guard.is_none() {
        *guard = Some(err);
    }
}

impl GpuContext {
    /// A device on the adapter `opts` choose (`adapters::choose_adapter`): one kept from a
    /// model before where the process keeps devices (`device_pool`), else a new one.
    pub fn new(opts: &GpuOptions) -> GpuResult<GpuContext> {
        let t = std::time::Instant::now();
        let chosen = choose_adapter(opts)?;
        let found = t.elapsed();
        let pooled = super::device_pool::take(&chosen.info.name, chosen.features);
        let kept = pooled.is_some();
        let (device, queue, pipelines, staging) = match pooled {
            Some(k) => (k.device, k.queue, k.pipelines, k.staging),
            None => {
                let (device, queue) = request_device(&chosen)?;
                (device, queue, Arc::default(), None)
            }
        };
        let Chosen {
            info,
            features,
            limits,
            matrix_cores,
            ..
        } = chosen;
        if super::profile::timing_asked() {
            eprintln!(
                "load: adapters listed in {:.1} ms, device {} in {:.1} ms",
                found.as_secs_f64() * 1e3,
                if kept { "kept from before" } else { "made" },
                (t.elapsed() - found).as_secs_f64() * 1e3
            );
        }
        let errors: Arc<Mutex<Option<GpuError>>> = Arc::new(Mutex::new(None));
        let slot = errors.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            let err = match e {
                wgpu::Error::OutOfMemory { source } => GpuError::OutOfMemory(source.to_string()),
                wgpu::Error::Validation { description, .. } => GpuError::Validation(description),
                wgpu::Error::Internal { description, .. } => GpuError::Validation(description),
            };
            record(&slot, err);
        }));
        let slot = errors.clone();
        let lost = Arc::new(AtomicBool::new(false));
        let lost_flag = lost.clone();
        device.set_device_lost_callback(move |reason, msg| {
            lost_flag.store(true, Ordering::SeqCst);
            if reason != wgpu::DeviceLostReason::Destroyed {
                record(&slot, GpuError::DeviceLost(format!("{reason:?}: {msg}")));
            }
        });
        let caps = Capabilities {
            subgroups: features.contains(wgpu::Features::SUBGROUP),
            f16: features.contains(wgpu::Features::SHADER_F16),
            timestamps: features.contains(wgpu::Features::TIMESTAMP_QUERY),
            subgroup_min: info.subgroup_min_size.max(1),
            subgroup_max: info.subgroup_max_size.max(1),
            max_binding: limits.max_storage_buffer_binding_size,
            max_buffer: limits.max_buffer_size,
            max_workgroup_storage: limits.max_compute_workgroup_storage_size,
            max_storage_buffers: limits.max_storage_buffers_per_shader_stage,
            matrix_cores,
            packed_f16: features.contains(wgpu::Features::SHADER_F16) && packed_f16_wanted(opts),
            staged_matrices: matrix_cores
                && features.contains(wgpu::Features::PASSTHROUGH_SHADERS)
                && std::env::var("MINERVA_GPU_STAGED").map_or(true, |v| v != "0"),
        };
        let profiler = super::profile::Profiler::from_env(
            caps.timestamps,
            features.contains(wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES),
            &queue,
        );
        Ok(GpuContext {
            device,
            queue,
            info,
            features,
            lost,
            kept,
            pipelines,
            caps,
            int8_products: !opts.kv_f32
                && std::env::var("MINERVA_GPU_INT8_DOT").map_or(true, |v| v != "0"),
            errors,
            submits: AtomicU64::new(0),
            dispatches: AtomicU64::new(0),
            step_writes: AtomicU64::new(0),
            weight_bytes: AtomicU64::new(0),
            staging: Mutex::new(staging.unwrap_or_default()),
            profiler,
            timer: super::profile::StepTimer::from_env(),
        })
    }

    /// Whether the device was kept from before (made ahead, or a model's before) rather than
    /// made for this context.
    pub fn kept(&self) -> bool {
        self.kept
    }

    /// The cache of kernels built on this device (kept with it between models).
    pub fn pipelines(&self) -> Arc<super::pipelines::Pipelines> {
        self.pipelines.clone()
    }

    /// Command buffers submitted so far (one per step, plus uploads' and reads' own).
    pub fn submits(&self) -> u64 {
        self.submits.load(Ordering::Relaxed)
    }

    /// Kernel launches submitted so far.
    pub fn dispatches(&self) -> u64 {
        self.dispatches.load(Ordering::Relaxed)
    }

    /// Writes of a step's inputs from the host so far (`write_step_input`).
    pub fn step_writes(&self) -> u64 {
        self.step_writes.load(Ordering::Relaxed)
    }

    /// Writes a step's input (the step uniform, token ids, sampling settings) through the
    /// queue: it lands before the next submit. Each write costs the GPU a copy and its
    /// barriers in front of that submit (≈ 6 µs on an H200, benches/GPU.md entry 119).
    pub fn write_step_input(&self, buf: &wgpu::Buffer, bytes: &[u8]) {
        self.queue.write_buffer(buf, 0, bytes);
        self.step_writes.fetch_add(1, Ordering::Relaxed);
    }

    /// Bytes of weight buffers created on this device.
    pub fn weight_bytes(&self) -> u64 {
        self.weight_bytes.load(Ordering::Relaxed)
    }

    /// The live buffers' bytes and the blocks reserved for them, from the memory allocator
    /// (None where the wgpu backend keeps no report).
    pub fn memory(&self) -> Option<crate::backend::DeviceMemory> {
        let report = self.device.generate_allocator_report()?;
        Some(crate::backend::DeviceMemory {
            allocated_bytes: report.total_allocated_bytes,
            reserved_bytes: report.total_reserved_bytes,
        })
    }

    /// A weight's buffer of `size` bytes (a multiple of 4, at least the bytes `source` gives)
    /// holding those bytes and zeros after them, written through the staging ring
    /// ([`super::staging`]): the copies reach the queue before the next step.
    pub(crate) fn weight_buffer(
        &self,
        label: &str,
        source: (&[u8], super::gather::Gather),
        size: u64,
    ) -> GpuResult<wgpu::Buffer> {
        let t = std::time::Instant::now();
        let buf = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size,
            // COPY_SRC too, so that a weight can be read back as it landed.
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_DST
                | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        let mut ring = self.staging.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(times) = &mut ring.times {
            times.buffers.push(t.elapsed());
        }
        ring.write(&self.device, &self.queue, &buf, source, size)?;
        drop(ring);
        self.check()?;
        Ok(buf)
    }

    /// Holds a checkpoint's file mappings until the staging ring is released, so that
    /// weights inside them are copied a half at a time (`Staging::hold`).
    pub(crate) fn hold_mappings(&self, maps: &[minerva_formats::Mapping]) {
        let mut ring = self.staging.lock().unwrap_or_else(|p| p.into_inner());
        ring.hold(maps);
    }

    /// Submits the weight copies still recorded in the staging ring, and lets the ring go:
    /// work is submitted once a load is done (its first step), and weights copied before it.
    fn release_staging(&self) {
        let mut ring = self.staging.lock().unwrap_or_else(|p| p.into_inner());
        ring.release(&self.queue);
    }

    pub(crate) fn count_weight_bytes(&self, bytes: u64) {
        self.weight_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// The first device error since the last check, if any.
    pub fn check(&self) -> GpuResult<()> {
        let mut guard = self.errors.lock().unwrap_or_else(|p| p.into_inner());
        match guard.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Blocks until the queue is idle, then reports any device error.
    pub fn wait(&self) -> GpuResult<()> {
        self.device
            .poll(wgpu::PollType::Wait {
                submission_index: None,
                timeout: None,
            })
            .map_err(|e| GpuError::DeviceLost(e.to_string()))?;
        self.check()
    }

    /// A one-line description: adapter, backend, and the features kernels use.
    pub fn describe(&self) -> String {
        format!(
            "{} ({:?}, {:?}; subgroups {}, f16 {}, matrix cores {}, int8 products {}, \
             packed f16 products {}, binding ≤ {} MiB)",
            self.info.name,
            self.info.backend,
            self.info.device_type,
            if self.caps.subgroups {
                self.caps.subgroup_min.to_string()
            } else {
                "no".into()
            },
            self.caps.f16,
            match (self.caps.matrix_cores, self.caps.staged_matrices) {
                (true, true) => "on, staged",
                (true, false) => "on",
                _ => "off",
            },
            self.int8_products,
            if self.caps.packed_f16 { "on" } else { "off" },
            self.caps.max_binding >> 20
        )
    }
}

/// The size a scratch buffer of at least `bytes` gets: a multiple of an eighth of the largest
/// power of two not above it, so that growing prompts reallocate it only a few times and it
/// wastes at most 12.5 % (the next power of two wasted up to half: 35 MB took 64).
pub fn scratch_size(bytes: u64) -> u64 {
    let bytes = bytes.max(16);
    let floor = 1u64 << (63 - bytes.leading_zeros());
    let unit = (floor / 8).max(16);
    bytes.div_ceil(unit) * unit
}

/// Buffers and one-shot execution: what ops and tests need around kernels.
impl GpuContext {
    /// A storage buffer of `bytes` (at least one word), zero-filled.
    pub fn storage(&self, label: &str, bytes: u64) -> wgpu::Buffer {
        self.storage_usage(label, bytes, wgpu::BufferUsages::empty())
    }

    /// A zero-filled storage buffer with `extra` usages.
    fn storage_usage(&self, label: &str, bytes: u64, extra: wgpu::BufferUsages) -> wgpu::Buffer {
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            // Whole vec4s, so kernels may read any buffer as an array of vec4.
            size: bytes.div_ceil(16).max(1) * 16,
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST
                | extra,
            mapped_at_creation: false,
        })
    }

    /// A storage buffer of `bytes` that kernels may also bind as a uniform (a list one kernel
    /// writes and a later one reads in uniform control flow).
    pub fn storage_uniform(&self, label: &str, bytes: u64) -> wgpu::Buffer {
        self.storage_usage(label, bytes, wgpu::BufferUsages::UNIFORM)
    }

    /// A storage buffer holding `data`.
    pub fn storage_with<T: bytemuck::Pod>(&self, label: &str, data: &[T]) -> wgpu::Buffer {
        let bytes: &[u8] = bytemuck::cast_slice(data);
        let buf = self.storage(label, bytes.len() as u64);
        if !bytes.is_empty() {
            let padded = bytes.len().div_ceil(4) * 4;
            if padded == bytes.len() {
                self.queue.write_buffer(&buf, 0, bytes);
            } else {
                let mut v = bytes.to_vec();
                v.resize(padded, 0);
                self.queue.write_buffer(&buf, 0, &v);
            }
        }
        buf
    }

    /// A kernel's parameters, written once when its dispatch is built: a uniform buffer the
    /// host maps and writes at its creation where the device allows it (MAPPABLE_PRIMARY_BUFFERS;
    /// wgpu places it in device-local memory the host can write, where there is some). A
    /// queued write (`uniform`) stages every buffer through one of its own, and a prompt of a new
    /// length builds hundreds of dispatches.
    pub fn params<T: bytemuck::Pod>(&self, label: &str, data: &T) -> wgpu::Buffer {
        if !self
            .features
            .contains(wgpu::Features::MAPPABLE_PRIMARY_BUFFERS)
        {
            return self.uniform(label, data);
        }
        let bytes = bytemuck::bytes_of(data);
        let buf = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: bytes.len().max(16).next_multiple_of(4) as u64,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::MAP_WRITE,
            mapped_at_creation: true,
        });
        match buf.get_mapped_range_mut(..bytes.len() as u64) {
            Ok(mut view) => view.copy_from_slice(bytes),
            // The device is lost or out of memory: the error handler has it, `check` reports it.
            Err(_) => return buf,
        }
        buf.unmap();
        buf
    }

    /// A uniform buffer holding `data` (a Pod struct laid out like the kernel's Params), written
    /// through the queue: for uniforms the host writes again later.
    pub fn uniform<T: bytemuck::Pod>(&self, label: &str, data: &T) -> wgpu::Buffer {
        let buf = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: std::mem::size_of::<T>().max(16) as u64,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        self.queue.write_buffer(&buf, 0, bytemuck::bytes_of(data));
        buf
    }

    /// Records `dispatches` and submits them (see `submit_pieces`).
    pub fn submit(&self, dispatches: &[&super::pipelines::Dispatch]) -> GpuResult<()> {
        let (_, profiled) = self.submit_pieces(dispatches, Pieces::Growing, |_| {});
        self.finish_profile(profiled);
        self.check()
    }

    /// Records `dispatches` into command buffers, one compute pass per buffer, and submits each
    /// as soon as it is recorded (`Pieces` says how many). `last` adds commands after the last
    /// piece's pass (read-back copies).
    fn submit_pieces(
        &self,
        dispatches: &[&super::pipelines::Dispatch],
        pieces: Pieces,
        last: impl FnOnce(&mut wgpu::CommandEncoder),
    ) -> (wgpu::SubmissionIndex, Vec<super::profile::Pending>) {
        // Weights still staged are copied before anything that may read them.
        self.release_staging();
        let mut profiled = Vec::new();
        let mut submission = None;
        let mut last = Some(last);
        let mut at = 0;
        let sizes = match pieces {
            Pieces::Growing => submit_sizes(dispatches.len()),
            Pieces::One => vec![dispatches.len()],
        };
        for size in sizes {
            let mut enc = self
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                    label: Some("step"),
                });
            profiled.extend(self.record_step(&mut enc, &dispatches[at..at + size]));
            at += size;
            if at == dispatches.len() {
                if let Some(f) = last.take() {
                    f(&mut enc);
                }
            }
            submission = Some(self.queue.submit([enc.finish()]));
            self.submits.fetch_add(1, Ordering::Relaxed);
        }
        self.dispatches
            .fetch_add(dispatches.len() as u64, Ordering::Relaxed);
        // submit_sizes always yields at least one piece.
        let submission = submission.unwrap_or_else(|| self.queue.submit([]));
        (submission, profiled)
    }

    /// Records a step's dispatches: one compute pass, or one timed pass each when profiling.
    fn record_step(
        &self,
        enc: &mut wgpu::CommandEncoder,
        dispatches: &[&super::pipelines::Dispatch],
    ) -> Option<super::profile::Pending> {
        if let Some(p) = &self.profiler {
            return p.record(&self.device, enc, dispatches);
        }
        if !dispatches.is_empty() {
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("step"),
                timestamp_writes: None,
            });
            for d in dispatches {
                d.record(&mut pass);
            }
        }
        None
    }

    fn finish_profile(&self, pending: Vec<super::profile::Pending>) {
        if let Some(p) = &self.profiler {
            for one in pending {
                p.collect(&self.device, one);
            }
        }
    }

    /// Copies `bytes` bytes at `offset` of `buf` back to the CPU (waits for the queue).
    pub fn read_bytes(&self, buf: &wgpu::Buffer, offset: u64, bytes: u64) -> GpuResult<Vec<u8>> {
        Ok(self.run_and_read(&[], &[(buf, offset, bytes)])?.remove(0))
    }

    /// Submits `dispatches` (`submit_pieces`), then copies each (buffer, offset, bytes) region
    /// to one staging buffer behind the last piece, and waits for the bytes: a step and its read
    /// back cost a single wait.
    pub fn run_and_read(
        &self,
        dispatches: &[&super::pipelines::Dispatch],
        reads: &[(&wgpu::Buffer, u64, u64)],
    ) -> GpuResult<Vec<Vec<u8>>> {
        let pending = self.submit_and_read(dispatches, reads, Pieces::Growing)?;
        self.finish_read(pending)
    }

    /// Like `run_and_read`, without the wait: the bytes come from `finish_read`, which waits
    /// only for this submission, so that later work can be queued behind it meanwhile.
    pub fn submit_and_read(
        &self,
        dispatches: &[&super::pipelines::Dispatch],
        reads: &[(&wgpu::Buffer, u64, u64)],
        pieces: Pieces,
    ) -> GpuResult<PendingRead> {
        let padded: Vec<u64> = reads.iter().map(|r| r.2.div_ceil(4).max(1) * 4).collect();
        let total: u64 = padded.iter().sum();
        let staging = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("read back"),
            size: total.max(4),
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let started = std::time::Instant::now();
        let (submission, profiled) = self.submit_pieces(dispatches, pieces, |enc| {
            let mut at = 0;
            for ((buf, offset, _), size) in reads.iter().zip(&padded) {
                enc.copy_buffer_to_buffer(buf, *offset, &staging, at, *size);
                at += size;
            }
        });
        self.check()?;
        let mapped: Arc<Mutex<Option<Result<(), wgpu::BufferAsyncError>>>> =
            Arc::new(Mutex::new(None));
        let s = mapped.clone();
        staging.slice(..).map_async(wgpu::MapMode::Read, move |r| {
            *s.lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
        });
        Ok(PendingRead {
            staging,
            sizes: reads.iter().map(|r| r.2).zip(padded).collect(),
            submission,
            mapped,
            profiled,
            dispatches: dispatches.len(),
            encode: started.elapsed(),
        })
    }

    /// Whether a read's submission has finished (its bytes are mapped), without waiting.
    pub fn is_read_done(&self, read: &PendingRead) -> bool {
        let _ = self.device.poll(wgpu::PollType::Poll);
        read.mapped
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }

    /// Waits for a read's submission (not for work queued after it) and returns its bytes.
    pub fn finish_read(&self, read: PendingRead) -> GpuResult<Vec<Vec<u8>>> {
        let waited = std::time::Instant::now();
        self.device
            .poll(wgpu::PollType::Wait {
                submission_index: Some(read.submission),
                timeout: None,
            })
            .map_err(|e| GpuError::DeviceLost(e.to_string()))?;
        self.check()?;
        if let Some(t) = &self.timer {
            t.add(read.dispatches, read.encode, waited.elapsed());
        }
        self.finish_profile(read.profiled);
        // Another thread polling the same device may be the one running this map's callback:
        // the submission is done, so the callback comes at once; wait for it a little.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let result = loop {
            let taken = read.mapped.lock().unwrap_or_else(|p| p.into_inner()).take();
            if taken.is_some() || std::time::Instant::now() > deadline {
                break taken;
            }
            let _ = self.device.poll(wgpu::PollType::Poll);
            std::thread::yield_now();
        };
        match result {
            Some(Ok(())) => {}
            Some(Err(e)) => return Err(GpuError::Readback(e.to_string())),
            None => return Err(GpuError::Readback("the map request never completed".into())),
        }
        let mut out = Vec::new();
        {
            let view = read
                .staging
                .slice(..)
                .get_mapped_range()
                .map_err(|e| GpuError::Readback(e.to_string()))?;
            let mut at = 0usize;
            for (bytes, size) in &read.sizes {
                out.push(view[at..at + *bytes as usize].to_vec());
                at += *size as usize;
            }
        }
        read.staging.unmap();
        Ok(out)
    }

    pub fn read_f32(
        &self,
        buf: &wgpu::Buffer,
        offset_elems: usize,
        n: usize,
    ) -> GpuResult<Vec<f32>> {
        let b = self.read_bytes(buf, offset_elems as u64 * 4, n as u64 * 4)?;
        Ok(bytemuck::pod_collect_to_vec(&b))
    }

    pub fn read_u32(
        &self,
        buf: &wgpu::Buffer,
        offset_elems: usize,
        n: usize,
    ) -> GpuResult<Vec<u32>> {
        let b = self.read_bytes(buf, offset_elems as u64 * 4, n as u64 * 4)?;
        Ok(bytemuck::pod_collect_to_vec(&b))
    }
}

/// A submitted step's read back, not yet waited for (`GpuContext::finish_read`).
pub struct PendingRead {
    staging: wgpu::Buffer,
    /// Bytes asked for and bytes taken in the staging buffer, per region.
    sizes: Vec<(u64, u64)>,
    submission: wgpu::SubmissionIndex,
    mapped: Arc<Mutex<Option<Result<(), wgpu::BufferAsyncError>>>>,
    profiled: Vec<super::profile::Pending>,
    dispatches: usize,
    /// Host time spent recording and submitting.
    encode: std::time::Duration,
}

/// How a step's dispatches go to the GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pieces {
    /// In command buffers of `submit_sizes(n)` dispatches, each submitted once recorded: wgpu's
    /// encoding costs the host a few µs per dispatch, and an idle GPU runs the first piece
    /// while the host encodes the next.
    Growing,
    /// In one command buffer, for a step queued behind work that the GPU is still running,
    /// which hides the host's encoding: in pieces, each further command buffer made such a
    /// step ≈ 20 µs longer (H200, benches/GPU.md entry 118).
    One,
}

/// Dispatches in a step's first command buffer: few, so that the GPU starts early.
const FIRST_PIECE: usize = 16;
/// Dispatches in its later command buffers at most (each submit costs the host some tens of
/// µs).
const LAST_PIECE: usize = 64;

/// The size of the command buffer after one of `n` dispatches.
fn next_piece(n: usize) -> usize {
    (n * 2).min(LAST_PIECE)
}

/// How many dispatches each command buffer of a step holds: a small first piece so that the GPU
/// starts early, then larger ones. Always at least one piece, so that a step without dispatches
/// still carries its copies.
pub fn submit_sizes(dispatches: usize) -> Vec<usize> {
    let mut sizes = Vec::new();
    let mut left = dispatches;
    let mut next = FIRST_PIECE;
    while left > 0 {
        let n = next.min(left);
        sizes.push(n);
        left -= n;
        next = next_piece(next);
    }
    if sizes.is_empty() {
        sizes.push(0);
    }
    sizes
}

/// Sends a step's dispatches while the rest of it is still being encoded, in pieces of the sizes
/// `submit_sizes` gives (each piece whole kernels, so a piece may be a little larger).
#[derive(Debug)]
pub struct StreamedSubmit {
    /// Dispatches submitted so far.
    pub sent: usize,
    next: usize,
}

impl Default for StreamedSubmit {
    fn default() -> Self {
        StreamedSubmit {
            sent: 0,
            next: FIRST_PIECE,
        }
    }
}

impl StreamedSubmit {
    /// Given every kernel encoded so far, submits the dispatches past those already sent once
    /// there are a piece's worth.
    pub fn offer<T, E>(
        &mut self,
        kernels: &[Vec<T>],
        submit: impl FnOnce(&[&T]) -> Result<(), E>,
    ) -> Result<(), E> {
        let total: usize = kernels.iter().map(Vec::len).sum();
        if total - self.sent < self.next {
            return Ok(());
        }
        let list: Vec<&T> = kernels.iter().flatten().skip(self.sent).collect();
        submit(&list)?;
        self.sent = total;
        self.next = next_piece(self.next);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{scratch_size, submit_sizes, StreamedSubmit};

    #[test]
    fn a_streamed_step_sends_each_dispatch_once_in_growing_pieces() {
        // Kernels of 1 to 5 dispatches, numbered in order, offered after each is encoded.
        let mut kernels: Vec<Vec<usize>> = Vec::new();
        let mut stream = StreamedSubmit::default();
        let mut sent = Vec::new();
        let mut pieces = Vec::new();
        let mut next = 0;
        for k in 0..120 {
            kernels.push((next..next + 1 + k % 5).collect());
            next += 1 + k % 5;
            stream
                .offer(&kernels, |list: &[&usize]| {
                    pieces.push(list.len());
                    sent.extend(list.iter().copied().copied());
                    Ok::<(), ()>(())
                })
                .unwrap();
        }
        assert_eq!(stream.sent, sent.len());
        assert_eq!(
            sent,
            (0..sent.len()).collect::<Vec<_>>(),
            "in order, each once"
        );
        let rest = next - stream.sent;
        assert!(rest < 64, "at most a piece is left for the caller: {rest}");
        // Whole kernels at a time: each piece is at least its planned size and under 5 more.
        for (got, want) in pieces.iter().zip(submit_sizes(next)) {
            assert!(*got >= want && *got < want + 5, "{pieces:?}");
        }
        assert_eq!(pieces[0], 16, "{pieces:?}");
    }

    #[test]
    fn scratch_sizes_cover_the_request_and_waste_at_most_an_eighth() {
        // The expert products of a 512-token gpt-oss prompt, and an exact 64 KiB tile list.
        assert_eq!(scratch_size(35_389_440), 36 << 20);
        assert_eq!(scratch_size(65_536), 65_536);
        assert_eq!(scratch_size(1), 16);
        let mut last = 0;
        for bytes in (1..5_000_000u64).step_by(9_973) {
            let s = scratch_size(bytes);
            assert!(s >= bytes && s.is_multiple_of(16), "{bytes} → {s}");
            assert!(s <= bytes + bytes / 8 + 16, "{bytes} → {s}");
            assert!(s >= last, "sizes grow with the request");
            last = s;
        }
    }
}
