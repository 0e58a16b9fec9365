// The input vector of a decode product, staged in workgroup memory a chunk at a time.
// The lanes of a row each take a 32-value unit, so their reads of x are 32 values apart: from
// global memory every load would touch as many cache lines as lanes. Staged with one vec4 of
// padding per unit, the lanes' vec4 reads fall in different banks.
// The including kernel defines `fn x_vec4(xb: u32, c: u32) -> vec4<f32>` (x values c..c+3 of
// the vector at xb, zero past the row's end) and WG.

const CHUNK_UNITS: u32 = 64u;
var<workgroup> xs: array<vec4<f32>, 576>; // CHUNK_UNITS × (8 vec4s + 1 of padding)

// Stages units [base, base + CHUNK_UNITS) of the vector at xb. Call from uniform control flow.
fn stage_x(xb: u32, base: u32, lid: u32) {
    workgroupBarrier();
    for (var i = lid; i < CHUNK_UNITS * 8u; i += WG) {
        xs[i + i / 8u] = x_vec4(xb, base * 32u + 4u * i);
    }
    workgroupBarrier();
}

// Values 4k..4k+3 of staged unit `lu` (the unit's index within the chunk).
fn staged(lu: u32, k: u32) -> vec4<f32> {
    return xs[9u * lu + k];
}
