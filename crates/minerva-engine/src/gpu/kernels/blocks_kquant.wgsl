// GGUF k-quant super-blocks of 256 values, decoded 32 at a time (unit u is sub-block u % 8 of
// super-block u / 8; part jp of a unit is its values 8jp..8jp+7). Layouts (bytes):
//   Q2_K scales[16] qs[64] d dmin            Q3_K hmask[32] qs[64] scales[12] d
//   Q4_K d dmin scales[12] qs[128]           Q5_K d dmin scales[12] qh[32] qs[128]
//   Q6_K ql[128] qh[64] scales:i8[16] d
// Q3_K's and Q6_K's blocks are held as their first 108 and 208 bytes in w0 and d apart in w1
// (weights.rs, `BlockSplit`), so that every word of a block is aligned.
#include "common.wgsl"
#include "weights.wgsl"

const PART_SPLIT: bool = false;

#ifdef DT_Q2_K
const BLOCK_BYTES: u32 = 84u;
#endif
#ifdef DT_Q3_K
const BLOCK_BYTES: u32 = 108u;
#endif
#ifdef DT_Q4_K
const BLOCK_BYTES: u32 = 144u;
#endif
#ifdef DT_Q5_K
const BLOCK_BYTES: u32 = 176u;
#endif
#ifdef DT_Q6_K
const BLOCK_BYTES: u32 = 208u;
#endif

// The word at byte offset b, a multiple of 4: Q2_K's, Q4_K's and Q5_K's blocks (84, 144 and
// 176 bytes), and Q3_K's and Q6_K's without their d, keep every field's words aligned, so
// their reads need not w0_word's two loads.
fn w0_at(b: u32) -> u32 {
    return w0[b >> 2u];
}

// Q4_K/Q5_K: 6-bit scale and min of sub-block j from the 12 packed bytes at `s` (a multiple
// of 4), read as their three words.
fn scale_min_k4(s: u32, j: u32) -> vec2<f32> {
    let w = vec3<u32>(w0_at(s), w0_at(s + 4u), w0_at(s + 8u));
    let shift = (j % 4u) * 8u;
    if (j < 4u) {
        return vec2<f32>(f32((w.x >> shift) & 63u), f32((w.y >> shift) & 63u));
    }
    let a = (w.z >> shift) & 0xFFu;
    let sc = (a & 0xFu) | ((((w.x >> shift) >> 6u) & 3u) << 4u);
    let m = (a >> 4u) | ((((w.y >> shift) >> 6u) & 3u) << 4u);
    return vec2<f32>(f32(sc), f32(m));
}

// Q3_K: signed 6-bit scale i (0..15) from the 12 packed bytes at `s`.
fn scale_q3k(s: u32, i: u32) -> f32 {
    let a0 = w0_at(s);
    let a1 = w0_at(s + 4u);
    let t = w0_at(s + 8u);
    var w: u32;
    switch (i / 4u) {
        case 0u: { w = (a0 & 0x0F0F0F0Fu) | ((t & 0x03030303u) << 4u); }
        case 1u: { w = (a1 & 0x0F0F0F0Fu) | (((t >> 2u) & 0x03030303u) << 4u); }
        case 2u: { w = ((a0 >> 4u) & 0x0F0F0F0Fu) | (((t >> 4u) & 0x03030303u) << 4u); }
        default: { w = ((a1 >> 4u) & 0x0F0F0F0Fu) | (((t >> 6u) & 0x03030303u) << 4u); }
    }
    return f32(i32((w >> (8u * (i % 4u))) & 0xFFu) - 32);
}

#ifdef DT_Q3_K
// Q3_K: a part's 8 values share one signed 6-bit scale, left with d as the part's multiplier
// (SCALED_PARTS). Each value is its 2 low bits (pair t of sub-block j's qs bytes) plus 4 when
// its hmask bit n·4 + t is set, minus 4: both bits are joined into one 3-bit integer per byte
// before the conversion to floats.
fn load_scaled_part(row: u32, u: u32, jp: u32, cols: u32) -> ScaledPart {
    var out: Part;
    let g = row * (cols / 256u) + u / 8u;
    let b = g * BLOCK_BYTES;
    let j = u % 8u;
    let n = j / 4u;
    let t = j % 4u;
    let bit = n * 4u + t;
    for (var i = 0u; i < 2u; i++) {
        let k = 2u * jp + i;
        let low = (w0[(b + 32u + n * 32u) / 4u + k] >> (2u * t)) & 0x03030303u;
        let high = (w0[b / 4u + k] >> bit) & 0x01010101u;
        out[i] = bytes4(low | (high << 2u)) - 4.0;
    }
    let scale = scale_q3k(b + 96u, n * 8u + 2u * t + jp / 2u);
    return ScaledPart(out, half_scale(g) * scale);
}
#endif
#ifdef DT_Q6_K
// Q6_K: a part's 8 values share one signed 8-bit scale, left with d as the part's multiplier
// (SCALED_PARTS): the values are the 6-bit integers minus 32. Sub-block j's low 4 bits are the
// low or high nibbles (t >= 2) of its 32 ql bytes, its top 2 bits pair t of its qh bytes.
fn load_scaled_part(row: u32, u: u32, jp: u32, cols: u32) -> ScaledPart {
    var out: Part;
    let g = row * (cols / 256u) + u / 8u;
    let b = g * BLOCK_BYTES;
    let j = u % 8u;
    let n = j / 4u;
    let t = j % 4u;
    let ql = (b + n * 64u + (t & 1u) * 32u) / 4u;
    let qh = (b + 128u + n * 32u) / 4u;
    let nibble = 4u * (t >> 1u);
    for (var i = 0u; i < 2u; i++) {
        let k = 2u * jp + i;
        let low = (w0[ql + k] >> nibble) & 0x0F0F0F0Fu;
        let high = (w0[qh + k] >> (2u * t)) & 0x03030303u;
        out[i] = bytes4(low | (high << 4u)) - 32.0;
    }
    let si = b + 192u + n * 8u + jp / 2u + 2u * t;
    let sc = f32((bitcast<i32>(w0_byte(si)) << 24u) >> 24u);
    return ScaledPart(out, half_scale(g) * sc);
}
#endif
#ifndef SCALED_PARTS
fn load_part(row: u32, u: u32, jp: u32, cols: u32) -> Part {
    var out: Part;
    let b = (row * (cols / 256u) + u / 8u) * BLOCK_BYTES;
    let j = u % 8u;
#ifdef DT_Q4_K
    let dm = unpack2x16float(w0_at(b));
    let d = dm.x;
    let dmin = dm.y;
    let sm = scale_min_k4(b + 4u, j);
    let q = b + 16u + (j / 2u) * 32u;
    for (var i = 0u; i < 2u; i++) {
        let k = 2u * jp + i;
        let w = w0_at(q + 4u * k);
        let v = select(lo4(w), hi4(w), (j & 1u) == 1u);
        out[i] = v * (d * sm.x) - dmin * sm.y;
    }
#endif
#ifdef DT_Q5_K
    let dm = unpack2x16float(w0_at(b));
    let d = dm.x;
    let dmin = dm.y;
    let sm = scale_min_k4(b + 4u, j);
    let q = b + 48u + (j / 2u) * 32u;
    for (var i = 0u; i < 2u; i++) {
        let k = 2u * jp + i;
        let w = w0_at(q + 4u * k);
        let h = bytes4((w0_at(b + 16u + 4u * k) >> j) & 0x01010101u) * 16.0;
        let v = select(lo4(w), hi4(w), (j & 1u) == 1u) + h;
        out[i] = v * (d * sm.x) - dmin * sm.y;
    }
#endif
#ifdef DT_Q2_K
    let dm = unpack2x16float(w0_at(b + 80u));
    let d = dm.x;
    let dmin = dm.y;
    let n = j / 4u;
    let t = j % 4u;
    for (var i = 0u; i < 2u; i++) {
        let k = 2u * jp + i;
        let half = k / 4u;
        let sc = w0_byte(b + n * 8u + 2u * t + half);
        let w = w0_at(b + 16u + n * 32u + 4u * k);
        let q = bytes4((w >> (2u * t)) & 0x03030303u);
        out[i] = q * (d * f32(sc & 0xFu)) - dmin * f32(sc >> 4u);
    }
#endif
    return out;
}
#endif

#ifdef DOT_I8
// Part jp of sub-block j against quantized x (common.wgsl's XQuant: x vec4s jp and jp + 4 of
// the unit, each term's bytes): code words jp and jp + 4 of the sub-block as bytes (Q5_K's
// fifth bit joined), their integer dot products with both terms joined in x's steps. A code n
// stands for n · d · scale − dmin · min, so the part's dot product is d · scale · Σ n·q −
// dmin · min · Σq (Q4_K, Q5_K). Each term's is at most 8 · 31 · 127 in size, exact as f32.

// Codes lo (meeting x vec4 jp) and hi (vec4 jp + 4) of sub-block j of the block at b, as bytes,
// against x, with the block's d, dmin and the sub-block's scale and min.
fn min_scaled_dot(b: u32, j: u32, lo: u32, hi: u32, x: XQuant) -> f32 {
    let dm = unpack2x16float(w0_at(b));
    let sm = scale_min_k4(b + 4u, j);
    return codes_dot(lo, hi, x) * (dm.x * sm.x) - x.sum * (dm.y * sm.y);
}

#ifdef DT_Q4_K
fn dot_i8_part(row: u32, u: u32, jp: u32, cols: u32, x: XQuant) -> f32 {
    let b = (row * (cols / 256u) + u / 8u) * BLOCK_BYTES;
    let j = u % 8u;
    let q = b + 16u + (j / 2u) * 32u;
    let nibble = 4u * (j & 1u);
    let lo = (w0_at(q + 4u * jp) >> nibble) & 0x0F0F0F0Fu;
    let hi = (w0_at(q + 16u + 4u * jp) >> nibble) & 0x0F0F0F0Fu;
    return min_scaled_dot(b, j, lo, hi, x);
}
#endif
#ifdef DT_Q5_K
// Code word k of sub-block j as bytes: its nibbles at q, its fifth bits at h.
fn q5_codes(q: u32, h: u32, k: u32, j: u32) -> u32 {
    let nibble = 4u * (j & 1u);
    return ((w0_at(q + 4u * k) >> nibble) & 0x0F0F0F0Fu)
        | (((w0_at(h + 4u * k) >> j) & 0x01010101u) << 4u);
}

fn dot_i8_part(row: u32, u: u32, jp: u32, cols: u32, x: XQuant) -> f32 {
    let b = (row * (cols / 256u) + u / 8u) * BLOCK_BYTES;
    let j = u % 8u;
    let q = b + 48u + (j / 2u) * 32u;
    let h = b + 16u;
    return min_scaled_dot(b, j, q5_codes(q, h, jp, j), q5_codes(q, h, jp + 4u, j), x);
}
#endif
#ifdef DT_Q6_K
// Q6_K's 6-bit codes n stand for n − 32: bytes n | 0x80 minus 32 never borrow across bytes, and
// flipping the top bit back leaves n − 32 as a signed byte, so the dot products need no Σq. The
// part's two halves (values 4jp.. and 16 + 4jp..) take the sub-block's two 16-value scales.
fn signed6(low: u32, high: u32) -> u32 {
    return (((low | (high << 4u)) | 0x80808080u) - 0x20202020u) ^ 0x80808080u;
}

// Code word k of sub-block t of a half as signed bytes: its nibbles at ql, its top two bits at
// qh.
fn q6_codes(ql: u32, qh: u32, k: u32, t: u32) -> u32 {
    let nibble = 4u * (t >> 1u);
    return signed6(
        (w0_at(ql + 4u * k) >> nibble) & 0x0F0F0F0Fu,
        (w0_at(qh + 4u * k) >> (2u * t)) & 0x03030303u,
    );
}

fn dot_i8_part(row: u32, u: u32, jp: u32, cols: u32, x: XQuant) -> f32 {
    let g = row * (cols / 256u) + u / 8u;
    let b = g * BLOCK_BYTES;
    let j = u % 8u;
    let n = j / 4u;
    let t = j % 4u;
    let ql = b + n * 64u + (t & 1u) * 32u;
    let qh = b + 128u + n * 32u;
    let lo = q6_codes(ql, qh, jp, t);
    let hi = q6_codes(ql, qh, jp + 4u, t);
    let s = w0_at(b + 192u + n * 8u + 4u * (t / 2u)) >> (16u * (t % 2u));
    let s0 = f32((bitcast<i32>(s) << 24u) >> 24u);
    let s1 = f32((bitcast<i32>(s) << 16u) >> 24u);
    let first = join_terms(dot4I8Packed(lo, x.q.x), dot4I8Packed(lo, x.q.z));
    let second = join_terms(dot4I8Packed(hi, x.q.y), dot4I8Packed(hi, x.q.w));
    return (first * s0 + second * s1) * half_scale(g);
}
#endif
#endif

#include "unit.wgsl"
