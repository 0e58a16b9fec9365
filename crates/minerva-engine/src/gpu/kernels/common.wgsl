// Shared helpers: half-precision and microscaling number decoding from raw bits.

// 32 consecutive weights of one row, as eight vec4s (the unit every decoder produces).
alias Unit = array<vec4<f32>, 8>;

// A quarter of a unit: 8 of its values as two vec4s, the decode products' grain (unit.wgsl).
alias Part = array<vec4<f32>, 2>;

// The x values a decode product's part meets (product.wgsl): vec4s of its unit as the part's
// two vec4s of weights, times the norm's weights with NORM, and Σx² of the raw values (NORM).
struct XPart {
    a: vec4<f32>,
    b: vec4<f32>,
    sq: f32,
}

#ifdef DOT_I8
// A part's x values as two int8 terms, quantized once per vector (quantize_x.wgsl): with scale
// s = max|v| / 127 over the part's 8 values and t = v / s, coarse = round(t) and
// fine = round(254 · t) - 254 · coarse, the rounded remainder in [-127, 127], so
// v = s · (coarse + fine / 254) within s / 508: about 15 bits of each value where one int8 holds
// 8 (whose error, 1/254 of a part's max|v|, moved greedy logits by 0.04-0.07). A part holds
// vec4s j and j + 4 of its unit whatever the weight's dtype, so one quantized x serves Q4_0 and
// Q8_0 weights alike. q: the coarse term's two vec4s as packed bytes, then the fine term's;
// scale: s (times 1 / rms(x) where the quantization applied a norm); sum: Σ (coarse + fine / 254)
// over the part, which Q4_0's offset of 8 per nibble multiplies.
struct XQuant {
    q: vec4<u32>,
    scale: f32,
    sum: f32,
}

// A part's integer dot products with the coarse and fine terms as one float, in x's steps.
// Plain conversions: a bias trick (n + 1.5·2^23 read as a float, minus 1.5·2^23) loses the
// low bits where a compiler reassociates the subtraction with the sum (common.wgsl, bytes4).
fn join_terms(coarse: i32, fine: i32) -> f32 {
    return f32(coarse) + f32(fine) * (1.0 / 254.0);
}
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

// E2M1 codes (sign bit 3, exponent bits 2..1, mantissa bit 0) decoded through the float's own
// fields: a nonzero code becomes sign | exponent 128 + e | mantissa m, which is 4× its value
// for e ≥ 1; the codes with e = 0 (0 and 0.5) have no normal float of that form, so code 1
// clears its mantissa (4 × 0.5 = 2 = exponent 128, mantissa 0) and code 0 leaves every bit 0
// (no subnormals involved, which GPUs may flush). Per word of eight codes, `e2m1_prepare`
// readies the bits for all of them: x holds each code's exponent bits in place and its mantissa
// bit where e ≠ 0; y holds, at bits 4i + 1 and 4i of code i, its sign and whether it is nonzero.
// Each value then costs two shifts and two masks (`e2m1_place`).
fn e2m1_prepare(w: u32) -> vec2<u32> {
    let e_nonzero = ((w >> 1u) | (w >> 2u)) & 0x11111111u;
    let field = w & (0x66666666u | e_nonzero);
    let top = ((w >> 2u) & 0x22222222u) | ((w | e_nonzero) & 0x11111111u);
    return vec2<u32>(field, top);
}

// Four codes as 4× their values: `field` shifted left by `fs` puts a code's exponent and
// mantissa at float bits 24..22, `top` shifted by `ts` its sign and nonzero bits at 31 and 30.
fn e2m1_place(field: vec4<u32>, fs: vec4<u32>, top: u32, ts: vec4<u32>) -> vec4<f32> {
    let bits = ((field << fs) & vec4<u32>(0x01C00000u)) | ((vec4<u32>(top) << ts) & vec4<u32>(0xC0000000u));
    return bitcast<vec4<f32>>(bits);
}

// Eight E2M1 codes packed from the least significant nibble, as 4× their values in that order.
fn e2m1_word_x4(w: u32) -> Part {
    let c = e2m1_prepare(w);
    let fs = vec4<u32>(22u, 18u, 14u, 10u);
    return Part(
        e2m1_place(vec4<u32>(c.x), fs, c.y, vec4<u32>(30u, 26u, 22u, 18u)),
        e2m1_place(vec4<u32>(c.x >> 16u), fs, c.y, vec4<u32>(14u, 10u, 6u, 2u)),
    );
}

// Eight E2M1 codes in the bytes of a word, as 4× their values: the low nibbles (bytes 0..3),
// then the high nibbles.
fn e2m1_nibbles_x4(w: u32) -> Part {
    let c = e2m1_prepare(w);
    let field = vec4<u32>(c.x, c.x, c.x >> 16u, c.x >> 16u);
    return Part(
        e2m1_place(field, vec4<u32>(22u, 14u, 22u, 14u), c.y, vec4<u32>(30u, 22u, 14u, 6u)),
        e2m1_place(field, vec4<u32>(18u, 10u, 18u, 10u), c.y, vec4<u32>(26u, 18u, 10u, 2u)),
    );
}

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
