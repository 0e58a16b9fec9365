// MLX affine packs: BITS-bit values packed from the least significant bit of u32 words (w0),
// w = scale·q + bias with one scale (w1) and bias (w2) per GROUP values along the row. A unit
// of 32 values fills exactly BITS words; part j is its values 8j..8j+7. 3-, 5- and 6-bit values
// may straddle two words.
#include "common.wgsl"
#include "weights.wgsl"

@group(0) @binding(1) var<storage, read> w1: array<u32>;
@group(0) @binding(2) var<storage, read> w2: array<u32>;

const PART_SPLIT: bool = false;

fn affine_param(buf: u32, i: u32) -> f32 {
#ifdef SCALE_F32
    if (buf == 1u) {
        return bitcast<f32>(w1[i]);
    }
    return bitcast<f32>(w2[i]);
#else
    var w: u32;
    if (buf == 1u) {
        w = w1[i >> 1u];
    } else {
        w = w2[i >> 1u];
    }
    let h = w >> ((i & 1u) * 16u);
#ifdef SCALE_BF16
    return bf16_bits(h);
#else
    return f16_bits(h);
#endif
#endif
}

fn packed_value(first_word: u32, i: u32) -> f32 {
    let pos = i * BITS;
    let wi = first_word + (pos >> 5u);
    let s = pos & 31u;
    var v = w0[wi] >> s;
    if (s + BITS > 32u) {
        v |= w0[wi + 1u] << (32u - s);
    }
    return f32(v & ((1u << BITS) - 1u));
}

// Eight values packed in `q` from bit `shift` on, in steps of BITS (4 or fewer bits each).
fn packed8(q: u32, shift: u32) -> Part {
    let m = (1u << BITS) - 1u;
    var out: Part;
    for (var h = 0u; h < 2u; h++) {
        let s = shift + 4u * h * BITS;
        out[h] = vec4<f32>(f32((q >> s) & m), f32((q >> (s + BITS)) & m), f32((q >> (s + 2u * BITS)) & m), f32((q >> (s + 3u * BITS)) & m));
    }
    return out;
}

fn load_part(row: u32, u: u32, j: u32, cols: u32) -> Part {
    let g = row * (cols / GROUP) + (u * 32u) / GROUP;
    let scale = affine_param(1u, g);
    let bias = affine_param(2u, g);
    let first_word = (row * (cols / 32u) + u) * BITS;
    var q: Part;
    if (BITS == 4u) {
        q = packed8(w0[first_word + j], 0u);
    } else if (BITS == 8u) {
        q = Part(bytes4(w0[first_word + 2u * j]), bytes4(w0[first_word + 2u * j + 1u]));
    } else if (BITS == 2u) {
        q = packed8(w0[first_word + j / 2u], 16u * (j & 1u));
    } else {
        for (var h = 0u; h < 2u; h++) {
            let i = 8u * j + 4u * h;
            q[h] = vec4<f32>(packed_value(first_word, i), packed_value(first_word, i + 1u), packed_value(first_word, i + 2u), packed_value(first_word, i + 3u));
        }
    }
    return Part(q[0] * scale + bias, q[1] * scale + bias);
}

#ifdef DOT_I8
// Part j against quantized x (common.wgsl's XQuant: x vec4s j and j + 4 of the unit), for 4- and
// 8-bit values only (`Ops::int8_weights`): the codes as bytes meeting x's, each standing for
// n · scale + bias. 4-bit: vec4 j's codes are the 16 bits of half j % 2 of word j / 2, vec4
// j + 4's the same half of word 2 + j / 2. 8-bit: words j and j + 4, whose unsigned bytes are
// read as n - 128, the bias taking 128 · scale. Each term's dot product is at most 8 · 128 · 127
// in size, exact as f32.
fn dot_i8_part(row: u32, u: u32, j: u32, cols: u32, x: XQuant) -> f32 {
    let g = row * (cols / GROUP) + (u * 32u) / GROUP;
    let scale = affine_param(1u, g);
    let bias = affine_param(2u, g);
    let first_word = (row * (cols / 32u) + u) * BITS;
    if (BITS == 8u) {
        let low = w0[first_word + j] ^ 0x80808080u;
        let high = w0[first_word + 4u + j] ^ 0x80808080u;
        return offset_dot(low, high, vec2<f32>(scale, bias + 128.0 * scale), x);
    }
    let shift = 16u * (j & 1u);
    let low = nibbles_to_bytes(w0[first_word + j / 2u] >> shift);
    let high = nibbles_to_bytes(w0[first_word + 2u + j / 2u] >> shift);
    return offset_dot(low, high, vec2<f32>(scale, bias), x);
}

// The four nibbles in bits 0..15 of `v` as bytes 0..3 of a word.
fn nibbles_to_bytes(v: u32) -> u32 {
    return (v & 0xFu) | ((v & 0xF0u) << 4u) | ((v & 0xF00u) << 8u) | ((v & 0xF000u) << 12u);
}
#endif

#include "unit.wgsl"
