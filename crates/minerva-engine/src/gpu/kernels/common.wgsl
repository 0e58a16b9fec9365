// Shared helpers: half-precision and microscaling number decoding from raw bits.
#ifdef PACKED_F16
enable f16;
#endif

// 32 consecutive weights of one row, as eight vec4s (the unit every decoder produces).
alias Unit = array<vec4<f32>, 8>;

// A quarter of a unit: 8 of its values as two vec4s, the decode products' grain (unit.wgsl).
alias Part = array<vec4<f32>, 2>;

// f16's largest finite value: the matrix-core products' f16 copies saturate there.
const F16_MAX: f32 = 65504.0;

// Four decoded values from column c of a row of `cols` on, as the matrix-core products take
// them in f16: saturated at ±F16_MAX, zero past the row's end.
fn f16_four(v: vec4<f32>, c: u32, cols: u32) -> vec4<f32> {
    let inside = vec4<u32>(c) + vec4<u32>(0u, 1u, 2u, 3u) < vec4<u32>(cols);
    return select(vec4<f32>(0.0), clamp(v, vec4<f32>(-F16_MAX), vec4<f32>(F16_MAX)), inside);
}

// The x values a decode product's part meets (product.wgsl): vec4s of its unit as the part's
// two vec4s of weights, times the norm's weights with NORM, and Σx² of the raw values (NORM).
struct XPart {
    a: vec4<f32>,
    b: vec4<f32>,
    sq: f32,
}

#ifdef DOT_I8
#include "x_quant.wgsl"
#endif

fn f16_bits(h: u32) -> f32 {
    return unpack2x16float(h & 0xFFFFu).x;
}

fn bf16_bits(h: u32) -> f32 {
    return bitcast<f32>((h & 0xFFFFu) << 16u);
}

// A part's decoded values before its scale: the products multiply a part's dot product by
// `mult` once instead of every value (decoders with SCALED_PARTS, unit.wgsl).
struct ScaledPart {
    vals: Part,
    mult: f32,
}

// E2M1 codes (sign bit 3, exponent bits 2..1, mantissa bit 0) decoded two at a time through
// f16 bit patterns: a nonzero code becomes sign | exponent `exponent` + e | mantissa m, which is
// 2^(exponent - 14) times its value for e ≥ 1; the codes with e = 0 (0 and 0.5) have no normal
// f16 of that form, so code 1 clears its mantissa (exponent `exponent`, mantissa 0: the same
// multiple of 0.5) and code 0 leaves every bit 0 (no subnormals involved, which GPUs may flush).
// `exponent`, a multiple of 4 from 4 to 24, keeps e in its two low bits: 16 gives 4× the
// values, 12 a quarter. The eight codes of a word make four pairs of f16 bits in a u32, pair n
// holding codes n (low half) and n + 4 (high half), which lie 16 bits apart in the word, so
// that one shift places both: per word, `field` holds each code's exponent bits and its
// mantissa where e ≠ 0, `top` its sign in place (bit 4i + 3) and, where it is nonzero, the
// exponent's high bits (exponent >> 2) from bit 4i on; each pair is then two shifts, two masks
// and an OR (about 3 integer operations per value, against 5 for one f32 at a time).
fn e2m1_pairs(w: u32, exponent: u32) -> vec4<u32> {
    let e_nonzero = ((w >> 1u) | (w >> 2u)) & 0x11111111u;
    let field = w & (0x66666666u | e_nonzero);
    let nonzero = (w | e_nonzero) & 0x11111111u;
    let top = (w & 0x88888888u) | (nonzero * (exponent >> 2u));
    let f = vec4<u32>(field << 9u, field << 5u, field << 1u, field >> 3u) & vec4<u32>(0x0E000E00u);
    let top_mask = (0x8000u | (exponent << 10u)) * 0x10001u;
    let t = (vec4<u32>(top) << vec4<u32>(12u, 8u, 4u, 0u)) & vec4<u32>(top_mask);
    return f | t;
}

// Eight E2M1 codes packed from the least significant nibble, as 4× their values in that order.
fn e2m1_word_x4(w: u32) -> Part {
    let p = e2m1_pairs(w, 16u);
    let p0 = unpack2x16float(p.x);
    let p1 = unpack2x16float(p.y);
    let p2 = unpack2x16float(p.z);
    let p3 = unpack2x16float(p.w);
    return Part(vec4<f32>(p0.x, p1.x, p2.x, p3.x), vec4<f32>(p0.y, p1.y, p2.y, p3.y));
}

// Eight E2M1 codes in the bytes of a word, as 4× their values: the low nibbles (bytes 0..3),
// then the high nibbles. Nibbles n and n + 4 are the same nibble of bytes n / 2 and n / 2 + 2.
fn e2m1_nibbles_x4(w: u32) -> Part {
    let p = e2m1_pairs(w, 16u);
    let lo = vec4<f32>(unpack2x16float(p.x), unpack2x16float(p.z));
    let hi = vec4<f32>(unpack2x16float(p.y), unpack2x16float(p.w));
    return Part(lo.xzyw, hi.xzyw);
}

#ifdef PACKED_F16
// A part's eight E2M1 values in four f16 pairs, each value a quarter of the code's (e2m1_pairs
// with exponent 12: eight products of |x| ≤ 5000 stay below f16's 65504), for the decode
// products of PACKED_F16, which multiply them two at a time in packed f16 arithmetic; `mult` is
// the multiplier the products apply once per part (E8M0 scale · 4). Which of the part's values
// each pair holds is the decoder's (its `x_halves` pairs x alike).
struct HalfPart {
    vals: array<vec2<f16>, 4>,
    mult: f32,
}

// E2M1 pairs (e2m1_pairs) as f16 values. WGSL's bitcast from u32 to vec2<f16> is what this
// means; naga does not translate it yet (gfx-rs/wgpu#8896), and the exact round trip through
// f32 is the closest it takes.
fn e2m1_halves(w: u32) -> array<vec2<f16>, 4> {
    let p = e2m1_pairs(w, 12u);
    return array<vec2<f16>, 4>(
        vec2<f16>(unpack2x16float(p.x)),
        vec2<f16>(unpack2x16float(p.y)),
        vec2<f16>(unpack2x16float(p.z)),
        vec2<f16>(unpack2x16float(p.w)),
    );
}

// Σ w·x over a part's four pairs: the products and their sums in packed f16 (two values per
// operation), the two halves added in f32.
fn dot_halves(w: array<vec2<f16>, 4>, x: array<vec2<f16>, 4>) -> f32 {
    var s = w[0] * x[0];
    s = fma(w[1], x[1], s);
    s = fma(w[2], x[2], s);
    s = fma(w[3], x[3], s);
    return f32(s.x) + f32(s.y);
}
#endif

// E8M0 scale byte to 2^(e - 127); 0 gives 2^-127 (a subnormal), like the CPU reference.
fn e8m0(e: u32) -> f32 {
    if (e == 0u) {
        return bitcast<f32>(0x00200000u);
    }
    return bitcast<f32>((e & 0xFFu) << 23u);
}

// Small integer fields to floats: by conversion instructions, not by ORing them into the
// mantissa of 2^23 and subtracting it again. That trick is exact only if the subtraction comes
// first, and NVIDIA's compiler reassociates float sums: it folded the 2^23 terms of several
// fields added together (Q3_K's low and high bits, Q6_K's) into one constant, leaving their sum
// rounded to 2^23's precision (benches/GPU.md, entry 49).

// The four bytes of a word as a vec4 of their unsigned values.
fn bytes4(w: u32) -> vec4<f32> {
    return vec4<f32>(unpack4xU8(w));
}

// The four bytes of a word as a vec4 of signed values.
fn sbytes4(w: u32) -> vec4<f32> {
    return vec4<f32>(unpack4xI8(w));
}

// Low nibbles of the four bytes of a word, minus `offset`.
fn lo4_minus(w: u32, offset: f32) -> vec4<f32> {
    return bytes4(w & 0x0F0F0F0Fu) - offset;
}

// High nibbles of the four bytes of a word, minus `offset`.
fn hi4_minus(w: u32, offset: f32) -> vec4<f32> {
    return bytes4((w >> 4u) & 0x0F0F0F0Fu) - offset;
}

// Low and high nibbles of the four bytes of a word.
fn lo4(w: u32) -> vec4<f32> {
    return bytes4(w & 0x0F0F0F0Fu);
}

fn hi4(w: u32) -> vec4<f32> {
    return bytes4((w >> 4u) & 0x0F0F0F0Fu);
}
