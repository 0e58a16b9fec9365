// MLX mxfp4 packs and gpt-oss Hugging Face MXFP4 blocks: both store E2M1 codes in element order
// from the least significant nibble (w0), with one E8M0 scale byte per 32 values (w1); part j of
// a unit is its word j, values 8j..8j+7.
#include "common.wgsl"
#include "weights.wgsl"

@group(0) @binding(1) var<storage, read> w1: array<u32>;

const PART_SPLIT: bool = false;

// The E8M0 scale of unit u of a row.
fn unit_scale(row: u32, u: u32, cols: u32) -> f32 {
    let g = row * (cols / 32u) + u;
    return e8m0((w1[g >> 2u] >> ((g & 3u) * 8u)) & 0xFFu);
}

fn load_scaled_part(row: u32, u: u32, j: u32, cols: u32) -> ScaledPart {
    let g = row * (cols / 32u) + u;
    return ScaledPart(e2m1_word_x4(w0[g * 4u + j]), unit_scale(row, u, cols) * 0.25);
}

#ifdef PACKED_F16
fn load_half_part(row: u32, u: u32, j: u32, cols: u32) -> HalfPart {
    let g = row * (cols / 32u) + u;
    return HalfPart(e2m1_halves(w0[g * 4u + j]), unit_scale(row, u, cols) * 4.0);
}

// The part's x values (a: its values 0..3, b: 4..7) paired as load_half_part pairs the
// weights: codes n and n + 4 of the word are values n and n + 4.
fn x_halves(a: vec4<f32>, b: vec4<f32>) -> array<vec2<f16>, 4> {
    return array<vec2<f16>, 4>(
        vec2<f16>(vec2<f32>(a.x, b.x)),
        vec2<f16>(vec2<f32>(a.y, b.y)),
        vec2<f16>(vec2<f32>(a.z, b.z)),
        vec2<f16>(vec2<f32>(a.w, b.w)),
    );
}
#endif

#include "unit.wgsl"
