// GGUF legacy blocks of 32 (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) and GGUF MXFP4, read in place.
// Layouts (bytes): Q4_0 d:f16 qs[16]; Q4_1 d m qs[16]; Q5_0 d qh:u32 qs[16]; Q5_1 d m qh qs[16];
// Q8_0 d qs:i8[32]; MXFP4 e:u8 qs[16]. The upload splits Q4_0, Q8_0 and MXFP4 blocks into their
// codes in w0 (16, 32 and 16 bytes a block) and their scales in w1 (f16, f16, e8m0), so that every
// word of codes is aligned (weights.rs, `BlockSplit`); the others are read in place. Nibble blocks hold element j in the low nibble
// of byte j and element j+16 in the high nibble, so part j is word j of qs: its low nibbles are
// vec4 j of the unit, its high nibbles vec4 j + 4. With DOT_I8, Q4_0 and Q8_0 parts also take x quantized
// to int8 (`dot_i8_part`, for the decode products).
#include "common.wgsl"
#include "weights.wgsl"

#ifdef DT_Q4_1
const BLOCK_BYTES: u32 = 20u;
#endif
#ifdef DT_Q5_0
const BLOCK_BYTES: u32 = 22u;
#endif
#ifdef DT_Q5_1
const BLOCK_BYTES: u32 = 24u;
#endif
#ifdef DT_Q8_0
const PART_SPLIT: bool = false;
#else
const PART_SPLIT: bool = true;
#endif
#ifdef DT_MXFP4
@group(0) @binding(1) var<storage, read> w1: array<u32>;

// The E8M0 scale of block g.
fn mx_scale(g: u32) -> f32 {
    return e8m0((w1[g >> 2u] >> ((g & 3u) * 8u)) & 0xFFu);
}
#endif

// Bit j of `h` for the four elements starting at j, as 0 or 16.
fn high_bits(h: u32, j: u32) -> vec4<f32> {
    let b = h >> j;
    return vec4<f32>(f32(b & 1u), f32((b >> 1u) & 1u), f32((b >> 2u) & 1u), f32((b >> 3u) & 1u)) * 16.0;
}

// Q4_0, Q5_0, Q8_0 and MXFP4 blocks have one scale and no offset: their parts leave it as the
// part's multiplier, which the decode products apply once per part (SCALED_PARTS, unit.wgsl).
#ifdef SCALED_PARTS
fn load_scaled_part(row: u32, u: u32, j: u32, cols: u32) -> ScaledPart {
    let g = row * (cols / 32u) + u;
#ifdef DT_MXFP4
    return ScaledPart(e2m1_nibbles_x4(w0[g * 4u + j]), mx_scale(g) * 0.25);
#endif
#ifdef DT_Q8_0
    let q = g * 8u + 2u * j;
    return ScaledPart(Part(sbytes4(w0[q]), sbytes4(w0[q + 1u])), half_scale(g));
#endif
#ifdef DT_Q4_0
    let q = w0[g * 4u + j];
    return ScaledPart(Part(lo4_minus(q, 8.0), hi4_minus(q, 8.0)), half_scale(g));
#endif
#ifdef DT_Q5_0
    let b = g * BLOCK_BYTES;
    let h = w0_word(b + 2u);
    let q = w0_word(b + 6u + 4u * j);
    return ScaledPart(
        Part(lo4(q) + high_bits(h, 4u * j) - 16.0, hi4(q) + high_bits(h, 16u + 4u * j) - 16.0),
        w0_f16(b),
    );
#endif
}

#ifdef PACKED_F16
fn load_half_part(row: u32, u: u32, j: u32, cols: u32) -> HalfPart {
    let g = row * (cols / 32u) + u;
    return HalfPart(e2m1_halves(w0[g * 4u + j]), mx_scale(g) * 4.0);
}

// The part's x values (a: the low nibbles' values, b: the high nibbles') paired as
// load_half_part pairs the weights: nibbles n and n + 4 of the word are the same nibble of
// bytes n / 2 and n / 2 + 2.
fn x_halves(a: vec4<f32>, b: vec4<f32>) -> array<vec2<f16>, 4> {
    return array<vec2<f16>, 4>(
        vec2<f16>(a.xz),
        vec2<f16>(b.xz),
        vec2<f16>(a.yw),
        vec2<f16>(b.yw),
    );
}
#endif
#else
// Q4_1's and Q5_1's blocks (20 and 24 bytes) keep their words aligned: one load each.
fn load_part(row: u32, u: u32, j: u32, cols: u32) -> Part {
    let b = (row * (cols / 32u) + u) * BLOCK_BYTES;
#ifdef DT_Q4_1
    let dm = unpack2x16float(w0[b / 4u]);
    let d = dm.x;
    let m = dm.y;
    let q = w0[b / 4u + 1u + j];
    return Part(lo4(q) * d + m, hi4(q) * d + m);
#endif
#ifdef DT_Q5_1
    let dm = unpack2x16float(w0[b / 4u]);
    let d = dm.x;
    let m = dm.y;
    let h = w0[b / 4u + 1u];
    let q = w0[b / 4u + 2u + j];
    return Part(
        (lo4(q) + high_bits(h, 4u * j)) * d + m,
        (hi4(q) + high_bits(h, 16u + 4u * j)) * d + m,
    );
#endif
}
#endif

#ifdef DOT_I8
// Part j against quantized x (common.wgsl's XQuant: x vec4s j and j + 4 of the unit, each term's
// bytes), both terms' integer dot products joined in x's steps, times the block's scale.
#ifdef DT_Q4_0
// The nibbles as bytes: the low ones meet x vec4 j, the high ones vec4 j + 4. A nibble n stands
// for n - 8, so the part's dot product is Σ n·q - 8·Σq. Each term's is at most 8 · 15 · 127 in
// size, exact as f32.
fn dot_i8_part(row: u32, u: u32, j: u32, cols: u32, x: XQuant) -> f32 {
    let g = row * (cols / 32u) + u;
    let q = w0[g * 4u + j];
    let low = q & 0x0F0F0F0Fu;
    let high = (q >> 4u) & 0x0F0F0F0Fu;
    return (codes_dot(low, high, x) - 8.0 * x.sum) * half_scale(g);
}
#endif
#ifdef DT_Q8_0
// Code bytes 4j..4j+3 meet x vec4 j, bytes 16+4j..19+4j vec4 j + 4 (the part x was quantized by,
// not load_part's 8j..8j+7). Each term's dot product is at most 8 · 128 · 127 in size, exact
// as f32.
fn dot_i8_part(row: u32, u: u32, j: u32, cols: u32, x: XQuant) -> f32 {
    let g = row * (cols / 32u) + u;
    let wa = w0[g * 8u + j];
    let wb = w0[g * 8u + 4u + j];
    return codes_dot(wa, wb, x) * half_scale(g);
}
#endif
#ifdef DT_Q4_1
// As Q4_0's, but a nibble n stands for n · d + m: the part's dot product is d · Σ n·q + m · Σq.
fn dot_i8_part(row: u32, u: u32, j: u32, cols: u32, x: XQuant) -> f32 {
    let w = (row * (cols / 32u) + u) * (BLOCK_BYTES / 4u);
    let dm = unpack2x16float(w0[w]);
    let q = w0[w + 1u + j];
    return offset_dot(q & 0x0F0F0F0Fu, (q >> 4u) & 0x0F0F0F0Fu, dm, x);
}
#endif
#ifdef DT_Q5_1
// As Q4_1's, with each code's fifth bit (bit 4j + i of qh for the low nibbles' element i, 16 +
// 4j + i for the high ones') moved into its byte.
fn dot_i8_part(row: u32, u: u32, j: u32, cols: u32, x: XQuant) -> f32 {
    let w = (row * (cols / 32u) + u) * (BLOCK_BYTES / 4u);
    let dm = unpack2x16float(w0[w]);
    let h = w0[w + 1u];
    let q = w0[w + 2u + j];
    let low = (q & 0x0F0F0F0Fu) | (bits_to_bytes((h >> (4u * j)) & 0xFu) << 4u);
    let high = ((q >> 4u) & 0x0F0F0F0Fu) | (bits_to_bytes((h >> (16u + 4u * j)) & 0xFu) << 4u);
    return offset_dot(low, high, dm, x);
}

// Bits 0..3 of `b` as bytes 0..3 of a word (0 or 1 each): the four shifted copies land on
// disjoint bits, so the product has no carries.
fn bits_to_bytes(b: u32) -> u32 {
    return (b * 0x00204081u) & 0x01010101u;
}
#endif
#endif

#include "unit.wgsl"
