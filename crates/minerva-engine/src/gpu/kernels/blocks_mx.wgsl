// MLX mxfp4 packs and gpt-oss Hugging Face MXFP4 blocks: both store E2M1 codes in element order
// from the least significant nibble (w0), with one E8M0 scale byte per 32 values (w1); part j of
// a unit is its word j, values 8j..8j+7.
#include "common.wgsl"
#include "weights.wgsl"

@group(0) @binding(1) var<storage, read> w1: array<u32>;

const PART_SPLIT: bool = false;

fn load_scaled_part(row: u32, u: u32, j: u32, cols: u32) -> ScaledPart {
    let g = row * (cols / 32u) + u;
    let s = e8m0((w1[g >> 2u] >> ((g & 3u) * 8u)) & 0xFFu);
    return ScaledPart(e2m1_word_x4(w0[g * 4u + j]), s * 0.25);
}

#include "unit.wgsl"
