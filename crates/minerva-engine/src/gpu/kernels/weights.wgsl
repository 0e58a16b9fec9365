// The main weight buffer (blocks or packed words) and unaligned reads from it. Block sizes such
// as Q5_0's 22 bytes are not multiples of 4, so fields are read from u32 words. With
// HALF_SCALES (Q4_0, Q8_0, Q3_K, Q6_K) the blocks' f16 scales are held apart, in w1 (weights.rs).

@group(0) @binding(0) var<storage, read> w0: array<u32>;

fn w0_byte(b: u32) -> u32 {
    return (w0[b >> 2u] >> ((b & 3u) * 8u)) & 0xFFu;
}

fn w0_u16(b: u32) -> u32 {
    if ((b & 3u) == 3u) {
        return w0_byte(b) | (w0_byte(b + 1u) << 8u);
    }
    return (w0[b >> 2u] >> ((b & 3u) * 8u)) & 0xFFFFu;
}

// Four bytes from any byte offset. Without a branch: lanes reading blocks of alternating
// alignment (Q4_0's 18 bytes) would otherwise run both paths. The high word moves by 32 - s in
// two shifts, so that s = 0 shifts it out entirely with no select.
fn w0_word(b: u32) -> u32 {
    let i = b >> 2u;
    let s = (b & 3u) * 8u;
    return (w0[i] >> s) | ((w0[i + 1u] << 1u) << (31u - s));
}

fn w0_f16(b: u32) -> f32 {
    return f16_bits(w0_u16(b));
}

#ifdef HALF_SCALES
@group(0) @binding(1) var<storage, read> w1: array<u32>;

// The f16 scale of block g.
fn half_scale(g: u32) -> f32 {
    return unpack2x16float(w1[g >> 1u])[g & 1u];
}
#endif
