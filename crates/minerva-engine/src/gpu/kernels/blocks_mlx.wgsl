// MLX affine packs: BITS-bit values packed from the least significant bit of u32 words (w0),
// w = scale·q + bias with one scale (w1) and bias (w2) per GROUP values along the row.
// 3-, 5- and 6-bit values may straddle two words.
#include "common.wgsl"
#include "weights.wgsl"

@group(0) @binding(1) var<storage, read> w1: array<u32>;
@group(0) @binding(2) var<storage, read> w2: array<u32>;

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

fn load_unit(row: u32, u: u32, cols: u32) -> Unit {
    var out: Unit;
    let g = row * (cols / GROUP) + (u * 32u) / GROUP;
    let scale = affine_param(1u, g);
    let bias = affine_param(2u, g);
    // A unit of 32 values fills exactly BITS words.
    let first_word = (row * (cols / 32u) + u) * BITS;
    for (var k = 0u; k < 8u; k++) {
        let v = vec4<f32>(
            packed_value(first_word, 4u * k),
            packed_value(first_word, 4u * k + 1u),
            packed_value(first_word, 4u * k + 2u),
            packed_value(first_word, 4u * k + 3u),
        );
        out[k] = v * scale + bias;
    }
    return out;
}
