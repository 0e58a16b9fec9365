// Shared helpers: half-precision and microscaling number decoding from raw bits.

// 32 consecutive weights of one row, as eight vec4s (the unit every decoder produces).
alias Unit = array<vec4<f32>, 8>;

// A quarter of a unit: 8 of its values as two vec4s, the decode products' grain (unit.wgsl).
alias Part = array<vec4<f32>, 2>;

fn f16_bits(h: u32) -> f32 {
    return unpack2x16float(h & 0xFFFFu).x;
}

fn bf16_bits(h: u32) -> f32 {
    return bitcast<f32>((h & 0xFFFFu) << 16u);
}

// Bit fields to floats without integer-to-float conversions, which run at a fraction of the
// arithmetic rate on many GPUs: a field kept in place at bit p (p + width ≤ 23) ORed into the
// mantissa of 2^23 reads exactly 2^23 + v·2^p, and one multiply-add with 2^-p (`scale`) leaves
// v - offset.
fn fields4(bits: vec4<u32>, scale: vec4<f32>, offset: f32) -> vec4<f32> {
    let f = bitcast<vec4<f32>>(bits | vec4<u32>(0x4B000000u));
    return f * scale - (8388608.0 * scale + offset);
}

// Magnitudes of the E2M1 codes 0..7 times two (0, 1, 2, 3, 4, 6, 8, 12), a nibble each.
const E2M1_TWICE: u32 = 0xC8643210u;

// Four E2M1 codes (sign bit 3, exponent bits 2..1, mantissa bit 0) to their values times two.
fn e2m1_twice4(c: vec4<u32>) -> vec4<f32> {
    let k = (vec4<u32>(E2M1_TWICE) >> ((c & vec4<u32>(7u)) << vec4<u32>(2u))) & vec4<u32>(15u);
    let v = bitcast<vec4<f32>>(k | vec4<u32>(0x4B000000u)) - 8388608.0;
    return select(v, -v, (c & vec4<u32>(8u)) != vec4<u32>(0u));
}

// Eight E2M1 codes packed from the least significant nibble, times a scale.
fn e2m1_word(w: u32, s: f32) -> array<vec4<f32>, 2> {
    let h = 0.5 * s;
    return array<vec4<f32>, 2>(
        e2m1_twice4(vec4<u32>(w, w >> 4u, w >> 8u, w >> 12u) & vec4<u32>(15u)) * h,
        e2m1_twice4(vec4<u32>(w >> 16u, w >> 20u, w >> 24u, w >> 28u) & vec4<u32>(15u)) * h,
    );
}

// Four E2M1 codes in the low nibbles of a word's bytes, times a scale.
fn e2m1_bytes(w: u32, s: f32) -> vec4<f32> {
    let c = vec4<u32>(w, w >> 8u, w >> 16u, w >> 24u) & vec4<u32>(15u);
    return e2m1_twice4(c) * (0.5 * s);
}

// E8M0 scale byte to 2^(e - 127); 0 gives 2^-127 (a subnormal), like the CPU reference.
fn e8m0(e: u32) -> f32 {
    if (e == 0u) {
        return bitcast<f32>(0x00200000u);
    }
    return bitcast<f32>((e & 0xFFu) << 23u);
}

// The four bytes of a word as a vec4 of their unsigned values.
fn bytes4(w: u32) -> vec4<f32> {
    let r = w >> 16u;
    let bits = vec4<u32>(w & 0xFFu, w & 0xFF00u, r & 0xFFu, r & 0xFF00u);
    return fields4(bits, vec4<f32>(1.0, 1.0 / 256.0, 1.0, 1.0 / 256.0), 0.0);
}

// The four bytes of a word as a vec4 of signed values.
fn sbytes4(w: u32) -> vec4<f32> {
    let u = w ^ 0x80808080u;
    let r = u >> 16u;
    let bits = vec4<u32>(u & 0xFFu, u & 0xFF00u, r & 0xFFu, r & 0xFF00u);
    return fields4(bits, vec4<f32>(1.0, 1.0 / 256.0, 1.0, 1.0 / 256.0), 128.0);
}

// Low nibbles of the four bytes of a word, minus `offset`.
fn lo4_minus(w: u32, offset: f32) -> vec4<f32> {
    let bits = vec4<u32>(w & 0xFu, w & 0xF00u, w & 0xF0000u, (w >> 12u) & 0xF000u);
    return fields4(bits, vec4<f32>(1.0, 1.0 / 256.0, 1.0 / 65536.0, 1.0 / 4096.0), offset);
}

// High nibbles of the four bytes of a word, minus `offset`.
fn hi4_minus(w: u32, offset: f32) -> vec4<f32> {
    let r = w >> 12u;
    let bits = vec4<u32>(w & 0xF0u, w & 0xF000u, r & 0xF00u, r & 0xF0000u);
    return fields4(bits, vec4<f32>(1.0 / 16.0, 1.0 / 4096.0, 1.0 / 256.0, 1.0 / 65536.0), offset);
}

// Low and high nibbles of the four bytes of a word.
fn lo4(w: u32) -> vec4<f32> {
    return lo4_minus(w, 0.0);
}

fn hi4(w: u32) -> vec4<f32> {
    return hi4_minus(w, 0.0);
}
