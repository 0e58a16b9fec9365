// GGUF legacy blocks of 32 (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) and GGUF MXFP4, read in place.
// Layouts (bytes): Q4_0 d:f16 qs[16]; Q4_1 d m qs[16]; Q5_0 d qh:u32 qs[16]; Q5_1 d m qh qs[16];
// Q8_0 d qs:i8[32]; MXFP4 e:u8 qs[16]. Nibble blocks hold element j in the low nibble of byte j
// and element j+16 in the high nibble, so part j is word j of qs: its low nibbles are vec4 j of
// the unit, its high nibbles vec4 j + 4.
#include "common.wgsl"
#include "weights.wgsl"

#ifdef DT_Q4_0
const BLOCK_BYTES: u32 = 18u;
#endif
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
const BLOCK_BYTES: u32 = 34u;
const PART_SPLIT: bool = false;
#else
const PART_SPLIT: bool = true;
#endif
#ifdef DT_MXFP4
const BLOCK_BYTES: u32 = 17u;
#endif

// Bit j of `h` for the four elements starting at j, as 0 or 16.
fn high_bits(h: u32, j: u32) -> vec4<f32> {
    let b = h >> j;
    return vec4<f32>(f32(b & 1u), f32((b >> 1u) & 1u), f32((b >> 2u) & 1u), f32((b >> 3u) & 1u)) * 16.0;
}

#ifdef DT_MXFP4
fn load_scaled_part(row: u32, u: u32, j: u32, cols: u32) -> ScaledPart {
    let b = (row * (cols / 32u) + u) * BLOCK_BYTES;
    return ScaledPart(e2m1_nibbles_x4(w0_word(b + 1u + 4u * j)), e8m0(w0_byte(b)) * 0.25);
}

#ifdef PACKED_F16
fn load_half_part(row: u32, u: u32, j: u32, cols: u32) -> HalfPart {
    let b = (row * (cols / 32u) + u) * BLOCK_BYTES;
    return HalfPart(e2m1_halves(w0_word(b + 1u + 4u * j)), e8m0(w0_byte(b)) * 4.0);
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
fn load_part(row: u32, u: u32, j: u32, cols: u32) -> Part {
    let b = (row * (cols / 32u) + u) * BLOCK_BYTES;
#ifdef DT_Q8_0
    let d = w0_f16(b);
    let q = b + 2u + 8u * j;
    return Part(sbytes4(w0_word(q)) * d, sbytes4(w0_word(q + 4u)) * d);
#endif
#ifdef DT_Q4_0
    let d = w0_f16(b);
    let q = w0_word(b + 2u + 4u * j);
    return Part(lo4_minus(q, 8.0) * d, hi4_minus(q, 8.0) * d);
#endif
#ifdef DT_Q4_1
    let d = w0_f16(b);
    let m = w0_f16(b + 2u);
    let q = w0_word(b + 4u + 4u * j);
    return Part(lo4(q) * d + m, hi4(q) * d + m);
#endif
#ifdef DT_Q5_0
    let d = w0_f16(b);
    let h = w0_word(b + 2u);
    let q = w0_word(b + 6u + 4u * j);
    return Part(
        (lo4(q) + high_bits(h, 4u * j) - 16.0) * d,
        (hi4(q) + high_bits(h, 16u + 4u * j) - 16.0) * d,
    );
#endif
#ifdef DT_Q5_1
    let d = w0_f16(b);
    let m = w0_f16(b + 2u);
    let h = w0_word(b + 4u);
    let q = w0_word(b + 8u + 4u * j);
    return Part(
        (lo4(q) + high_bits(h, 4u * j)) * d + m,
        (hi4(q) + high_bits(h, 16u + 4u * j)) * d + m,
    );
#endif
}
#endif

#include "unit.wgsl"
