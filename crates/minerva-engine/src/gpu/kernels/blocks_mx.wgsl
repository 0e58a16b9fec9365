// MLX mxfp4 packs and gpt-oss Hugging Face MXFP4 blocks: both store E2M1 codes in element order
// from the least significant nibble (w0), with one E8M0 scale byte per 32 values (w1).
#include "common.wgsl"
#include "weights.wgsl"

@group(0) @binding(1) var<storage, read> w1: array<u32>;

fn load_unit(row: u32, u: u32, cols: u32) -> Unit {
    var out: Unit;
    let g = row * (cols / 32u) + u;
    let s = e8m0((w1[g >> 2u] >> ((g & 3u) * 8u)) & 0xFFu);
    let base = g * 4u;
    for (var k = 0u; k < 4u; k++) {
        let v = e2m1_word(w0[base + k], s);
        out[2u * k] = v[0];
        out[2u * k + 1u] = v[1];
    }
    return out;
}
