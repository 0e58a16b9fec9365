//! CPU references shared by the activation kernel tests (RoPE, the int8 records of x), and
//! submitting dispatches.

use minerva_engine::gpu::GpuContext;

pub fn run(ctx: &GpuContext, d: &[&minerva_engine::gpu::pipelines::Dispatch]) {
    ctx.submit(d).unwrap();
}

#[allow(clippy::too_many_arguments, clippy::needless_range_loop)]
pub fn cpu_rope(
    v: &mut [f32],
    pos0: usize,
    heads: usize,
    d: usize,
    rot: usize,
    halves: bool,
    freq: &[f32],
    mscale: f32,
) {
    for (t, tok) in v.chunks_mut(heads * d).enumerate() {
        for h in tok.chunks_mut(d) {
            for i in 0..rot / 2 {
                let (a, b) = if halves {
                    (i, i + rot / 2)
                } else {
                    (2 * i, 2 * i + 1)
                };
                let ang = (pos0 + t) as f32 * freq[i];
                let (s, c) = ang.sin_cos();
                let (x0, x1) = (h[a], h[b]);
                h[a] = (x0 * c - x1 * s) * mscale;
                h[b] = (x0 * s + x1 * c) * mscale;
            }
        }
    }
}

/// Part i of the `parts` int8 records in `words` (x_quant.wgsl's layout: every part's packed
/// terms, then their (scale, sum) pairs): its scale, its sum, and for each of its 8 values
/// (values 4j.. and 16 + 4j.. of a unit of 32) the value's index in the vector and its steps,
/// coarse + fine / 254.
pub fn record(words: &[u32], parts: usize, i: usize) -> (f32, f32, [(usize, f32); 8]) {
    let byte = |w: u32, k: usize| ((w >> (8 * k)) & 0xFF) as u8 as i8 as f32;
    let rec = &words[4 * i..4 * i + 4];
    let scale = f32::from_bits(words[4 * parts + 2 * i]);
    let sum = f32::from_bits(words[4 * parts + 2 * i + 1]);
    let base = (i / 4) * 32 + 4 * (i % 4);
    let values = std::array::from_fn(|k| {
        let t = byte(rec[k / 4], k % 4) + byte(rec[2 + k / 4], k % 4) / 254.0;
        (base + k % 4 + 16 * (k / 4), t)
    });
    (scale, sum, values)
}

/// x_quant.wgsl's int8 records of `x` (then their (scale, sum) pairs) as `words`: each part
/// (values 4j.. and 16 + 4j.. of a unit of 32) with scale max|v| / 127, its values within
/// scale / 508 of x, and its sum Σ (coarse + fine / 254).
pub fn check_records(what: &str, x: &[f32], words: &[u32]) {
    let parts = x.len() / 8;
    for i in 0..parts {
        let (scale, sum, values) = record(words, parts, i);
        let amax = values
            .iter()
            .map(|&(c, _)| x[c].abs())
            .fold(0.0f32, f32::max);
        assert!(
            (scale - amax / 127.0).abs() <= 1e-6 * amax,
            "{what}: part {i} scale {scale} for max {amax}"
        );
        let mut steps = 0.0;
        for &(c, t) in &values {
            steps += t;
            assert!(
                (scale * t - x[c]).abs() <= scale / 508.0 * 1.02 + 1e-30,
                "{what}: value {c} {} for {}",
                scale * t,
                x[c]
            );
        }
        assert!(
            (steps - sum).abs() <= 1e-3,
            "{what}: part {i} sum {sum} for {steps}"
        );
    }
}
