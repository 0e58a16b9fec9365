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

// Q4_0, Q5_0, Q8_0 and MXFP4 blocks have one scale and no offset: their parts leave it as the
// part's multiplier, which the decode products apply once per part (SCALED_PARTS, unit.wgsl).
#ifdef SCALED_PARTS
fn load_scaled_part(row: u32, u: u32, j: u32, cols: u32) -> ScaledPart {
    let b = (row * (cols / 32u) + u) * BLOCK_BYTES;
#ifdef DT_MXFP4
    return ScaledPart(e2m1_nibbles_x4(w0_word(b + 1u + 4u * j)), e8m0(w0_byte(b)) * 0.25);
#endif
#ifdef DT_Q8_0
    let q = b + 2u + 8u * j;
    return ScaledPart(Part(sbytes4(w0_word(q)), sbytes4(w0_word(q + 4u))), w0_f16(b));
#endif
#ifdef DT_Q4_0
    let q = w0_word(b + 2u + 4u * j);
    return ScaledPart(Part(lo4_minus(q, 8.0), hi4_minus(q, 8.0)), w0_f16(b));
#endif
#ifdef DT_Q5_0
    let h = w0_word(b + 2u);
    let q = w0_word(b + 6u + 4u * j);
    return ScaledPart(
        Part(lo4(q) + high_bits(h, 4u * j) - 16.0, hi4(q) + high_bits(h, 16u + 4u * j) - 16.0),
        w0_f16(b),
    );
#endif
}
#else
fn load_part(row: u32, u: u32, j: u32, cols: u32) -> Part {
    let b = (row * (cols / 32u) + u) * BLOCK_BYTES;
#ifdef DT_Q4_1
    let d = w0_f16(b);
    let m = w0_f16(b + 2u);
    let q = w0_word(b + 4u + 4u * j);
    return Part(lo4(q) * d + m, hi4(q) * d + m);
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
