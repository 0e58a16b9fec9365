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

// E2M1 code (sign bit 3, exponent bits 2..1, mantissa bit 0) to its value.
fn e2m1(c: u32) -> f32 {
    let e = (c >> 1u) & 3u;
    let m = f32(c & 1u);
    var v = m * 0.5;
    if (e != 0u) {
        v = (1.0 + 0.5 * m) * f32(1u << (e - 1u));
    }
    return select(v, -v, (c & 8u) != 0u);
}

// Eight E2M1 codes packed from the least significant nibble, times a scale.
fn e2m1_word(w: u32, s: f32) -> array<vec4<f32>, 2> {
    return array<vec4<f32>, 2>(
        vec4<f32>(e2m1(w), e2m1(w >> 4u), e2m1(w >> 8u), e2m1(w >> 12u)) * s,
        vec4<f32>(e2m1(w >> 16u), e2m1(w >> 20u), e2m1(w >> 24u), e2m1(w >> 28u)) * s,
    );
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
    return vec4<f32>(f32(w & 0xFFu), f32((w >> 8u) & 0xFFu), f32((w >> 16u) & 0xFFu), f32(w >> 24u));
}

// The four bytes of a word as a vec4 of signed values.
fn sbytes4(w: u32) -> vec4<f32> {
    let s = bitcast<i32>(w);
    return vec4<f32>(f32((s << 24u) >> 24u), f32((s << 16u) >> 24u), f32((s << 8u) >> 24u), f32(s >> 24u));
}

// Low and high nibbles of the four bytes of a word.
fn lo4(w: u32) -> vec4<f32> {
    return bytes4(w & 0x0F0F0F0Fu);
}

fn hi4(w: u32) -> vec4<f32> {
    return bytes4((w >> 4u) & 0x0F0F0F0Fu);
}
