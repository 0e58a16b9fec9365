//! Shared pieces of the GPU kernel tests: the device (or a loud skip; a failure under CI), random
//! data, small quantizers and references, and tolerant comparison.
#![allow(dead_code)]

use minerva_engine::gpu::{GpuContext, GpuOptions};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

pub mod activations;
pub mod attention;
pub mod weights;

/// Options of a context whose ops take f32 decode products for every dtype, which the kernel
/// tests compare at f32 tolerances (tests of the int8 products turn them on).
pub fn exact() -> GpuOptions {
    GpuOptions {
        kv_f32: true,
        ..Default::default()
    }
}

/// A device (`exact`), or None after saying why on stderr. Under CI a missing adapter is a
/// failure.
pub fn device() -> Option<GpuContext> {
    device_with(&exact())
}

/// A device made with `opts`, or None after saying why on stderr (a failure under CI).
fn device_with(opts: &GpuOptions) -> Option<GpuContext> {
    match GpuContext::new(opts) {
        Ok(c) => {
            eprintln!("GPU: {}", c.describe());
            Some(c)
        }
        Err(e) => {
            if std::env::var_os("CI").is_some() {
                panic!("CI is set but the GPU backend found no device: {e}");
            }
            eprintln!("SKIPPED: no GPU adapter ({e}); install mesa-vulkan-drivers and set WGPU_BACKEND=vulkan");
            None
        }
    }
}

/// One device for all the tests of a test binary (`exact`): NVIDIA's driver stopped offering
/// an adapter to new instances after a dozen or so tests had each made their own (H200).
pub fn shared() -> Option<Arc<GpuContext>> {
    static SHARED: OnceLock<Option<Arc<GpuContext>>> = OnceLock::new();
    SHARED.get_or_init(|| device().map(Arc::new)).clone()
}

/// A second shared device, with the options a model runs with: matrix cores where the adapter
/// offers them (`exact` turns them off), for the tests of the matrix-core kernels.
pub fn shared_matrix_cores() -> Option<Arc<GpuContext>> {
    static SHARED: OnceLock<Option<Arc<GpuContext>>> = OnceLock::new();
    SHARED
        .get_or_init(|| device_with(&GpuOptions::default()).map(Arc::new))
        .clone()
}

/// Deterministic xorshift random numbers.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    /// Uniform in [-1, 1).
    pub fn f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
    pub fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.f32()).collect()
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// Asserts |a − b| ≤ tol · (1 + |b|) element-wise, naming the first mismatch.
pub fn assert_close(what: &str, got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()) && g.is_finite(),
            "{what}: element {i} is {g}, expected {w} (tolerance {tol})"
        );
    }
}

/// Relative error of a dot-product result, scaled by the magnitude of the terms.
pub fn assert_dots_close(what: &str, got: &[f32], want: &[f32], scale: &[f32], tol: f32) {
    for (i, ((g, w), s)) in got.iter().zip(want).zip(scale).enumerate() {
        assert!(
            (g - w).abs() <= tol * (1.0 + s) && g.is_finite(),
            "{what}: element {i} is {g}, expected {w} (terms' magnitude {s})"
        );
    }
}

/// Q8_0 blocks of `row` (length a multiple of 32): f16 scale, 32 signed bytes.
pub fn quantize_q8_0(row: &[f32]) -> Vec<u8> {
    let mut out = Vec::new();
    for b in row.chunks(32) {
        let amax = b.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d > 0.0 { 1.0 / d } else { 0.0 };
        out.extend_from_slice(&half::f16::from_f32(d).to_le_bytes());
        out.extend(b.iter().map(|v| (v * id).round() as i8 as u8));
    }
    out
}

/// Q4_0 blocks: f16 scale d = max/−8, element j in the low nibble of byte j, j+16 in the high.
pub fn quantize_q4_0(row: &[f32]) -> Vec<u8> {
    let mut out = Vec::new();
    for b in row.chunks(32) {
        let max = b
            .iter()
            .fold(0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
        let d = max / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        out.extend_from_slice(&half::f16::from_f32(d).to_le_bytes());
        for j in 0..16 {
            let q = |v: f32| ((v * id + 8.5) as i32).clamp(0, 15) as u8;
            out.push(q(b[j]) | (q(b[j + 16]) << 4));
        }
    }
    out
}

/// The values Q8_0 / Q4_0 blocks stand for (the CPU reference for these two until the formats
/// crate decodes GGUF blocks).
pub fn dequant_local(dtype: minerva_formats::DType, bytes: &[u8], out: &mut [f32]) -> bool {
    use minerva_formats::DType;
    let d = |b: &[u8]| half::f16::from_le_bytes([b[0], b[1]]).to_f32();
    match dtype {
        DType::Q8_0 => {
            for (blk, o) in bytes.chunks_exact(34).zip(out.chunks_exact_mut(32)) {
                for j in 0..32 {
                    o[j] = d(blk) * blk[2 + j] as i8 as f32;
                }
            }
        }
        DType::Q4_0 => {
            for (blk, o) in bytes.chunks_exact(18).zip(out.chunks_exact_mut(32)) {
                for j in 0..16 {
                    o[j] = d(blk) * ((blk[2 + j] & 15) as f32 - 8.0);
                    o[j + 16] = d(blk) * ((blk[2 + j] >> 4) as f32 - 8.0);
                }
            }
        }
        _ => return false,
    }
    true
}

/// MLX affine reference: `bits`-bit values from the least significant bit of u32 words,
/// w = scale·q + bias per group (f16 scales and biases).
pub fn dequant_mlx_affine(
    bits: u32,
    group: usize,
    words: &[u8],
    scales: &[u8],
    biases: &[u8],
    cols: usize,
    out: &mut [f32],
) {
    let h = |b: &[u8], i: usize| half::f16::from_le_bytes([b[2 * i], b[2 * i + 1]]).to_f32();
    let bit = |i: usize| (words[i / 8] >> (i % 8)) & 1;
    for (e, o) in out.iter_mut().enumerate() {
        let mut q = 0u32;
        for k in 0..bits as usize {
            q |= (bit(e * bits as usize + k) as u32) << k;
        }
        let g = (e / cols) * (cols / group) + (e % cols) / group;
        *o = h(scales, g) * q as f32 + h(biases, g);
    }
}

/// Tests of one binary that may hold GPU devices of their own at once. With one device per
/// test, 22 at once, NVIDIA's driver (580.159) stalled the golden suite in most runs (and
/// gpu_context's 7 in some): a thread of the driver's spinning while every test waited on a
/// lock (benches/GPU.md, entry 83). Two at a time also ran the suite faster there (3.2 s
/// against 6).
const TESTS_AT_ONCE: usize = 2;

static RUNNING: (Mutex<usize>, Condvar) = (Mutex::new(0), Condvar::new());

/// A test's turn at the GPU, for as long as it is held.
pub struct TestSlot;

impl TestSlot {
    pub fn take() -> TestSlot {
        let (count, freed) = &RUNNING;
        let mut n = count.lock().unwrap_or_else(|p| p.into_inner());
        while *n >= TESTS_AT_ONCE {
            n = freed.wait(n).unwrap_or_else(|p| p.into_inner());
        }
        *n += 1;
        TestSlot
    }
}

impl Drop for TestSlot {
    fn drop(&mut self) {
        let (count, freed) = &RUNNING;
        *count.lock().unwrap_or_else(|p| p.into_inner()) -= 1;
        freed.notify_one();
    }
}
