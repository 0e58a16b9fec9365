// Matrix × matrix for prefill on matrix cores (wgpu cooperative matrices): the product of
// matmul.wgsl, y[t][r] = Σ_c W[r][c] · x[t][c] (+ bias[r]), over tiles of 64 rows × 64 tokens per
// 128-thread workgroup of four 32-lane subgroups (ops.rs uses it only where subgroups have
// exactly 32 lanes). Each K step of 64 columns, every thread decodes one 32-value unit of the
// tile's rows (DECODER) and loads 32 x values, both rounded to f16 into workgroup memory; then
// subgroup s multiplies rows 16s..16s+15 of the tile by the tile's tokens as 16×16×16 products
// with f32 accumulators, one per 16 tokens. Steps alternate between two staging buffers, so that
// one barrier per step both publishes the next step's values and frees the buffer they replace.
// Parameters, bindings, and which tokens, weight rows and outputs a tile covers:
// matmul_tiles.wgsl (with EXPERTS, one expert's items in mixture-of-experts prefill).
enable f16;
enable wgpu_cooperative_matrix;
#include "common.wgsl"
#include DECODER

const WG: u32 = 128u;
const TILE_ROWS: u32 = 64u;
const TT: u32 = 64u;
const UNITS_PER_STEP: u32 = WG / TILE_ROWS; // one unit per thread per step
const STEP_COLS: u32 = 32u * UNITS_PER_STEP;
const X_PER_THREAD: u32 = TT * STEP_COLS / WG;
// f16 values per staged row or token: 8 of padding move each line 4 banks further, so the eight
// 16-byte rows a matrix load reads at once fall in all 32 banks.
const LINE: u32 = STEP_COLS + 8u;
// One staging buffer of weights (TILE_ROWS lines) or of x (TT lines).
const BUF: u32 = TILE_ROWS * LINE;
const_assert TILE_ROWS == TT;
const F16_MAX: f32 = 65504.0;

// The step's weights [row][k] and x values [token][k], two buffers each (`stage`).
var<workgroup> ws: array<f16, 2u * BUF>;
var<workgroup> xs: array<f16, 2u * BUF>;
// Each subgroup's current 16 × 16 result block, token-major, on its way to y.
var<workgroup> out_block: array<f32, 4u * 256u>;
// The tile's live token count (0: nothing to do), read back uniformly: naga takes every function
// result for non-uniform, and the matrix operations must stay in uniform control flow.
var<workgroup> live_tokens: u32;

#include "matmul_tiles.wgsl"

// f16 saturates instead of overflowing to infinity.
fn half4(v: vec4<f32>) -> vec4<f16> {
    return vec4<f16>(clamp(v, vec4<f32>(-F16_MAX), vec4<f32>(F16_MAX)));
}

// Stages step `step` into buffer step % 2: this thread's x values (loaded first, so that their
// latency overlaps the weight decode; each load instruction reads 32 consecutive values of one
// token) and its unit, row lid / UNITS_PER_STEP of the tile, neighbouring lanes taking
// neighbouring units of a row. Rows, units, tokens and columns past the end stage zeros.
fn stage(tile: Tile, r0: u32, step: u32, lid: u32) {
    let base = (step & 1u) * BUF;
    var vals: array<f32, X_PER_THREAD>;
    for (var i = 0u; i < X_PER_THREAD; i++) {
        let f = i * WG + lid;
        let t = f / STEP_COLS;
        let c = step * STEP_COLS + f % STEP_COLS;
        let inside = t < tile.count && c < p.cols;
        let at = select(0u, p.x_offset + x_row(tile, t) * p.x_stride + c, inside);
        vals[i] = select(0.0, x[at], inside);
    }
    let line = lid / UNITS_PER_STEP;
    let k = lid % UNITS_PER_STEP;
    let u = step * UNITS_PER_STEP + k;
    var w: Unit;
    if (r0 + line < p.rows && u < (p.cols + 31u) / 32u) {
        w = load_unit(w_row(tile, r0 + line), u, p.cols);
    }
    let at = base + line * LINE + 32u * k;
    for (var j = 0u; j < 8u; j++) {
        let h = half4(w[j]);
        ws[at + 4u * j] = h.x;
        ws[at + 4u * j + 1u] = h.y;
        ws[at + 4u * j + 2u] = h.z;
        ws[at + 4u * j + 3u] = h.w;
    }
    for (var i = 0u; i < X_PER_THREAD; i++) {
        let f = i * WG + lid;
        let v = clamp(vals[i], -F16_MAX, F16_MAX);
        xs[base + (f / STEP_COLS) * LINE + f % STEP_COLS] = f16(v);
    }
}

// Writes result block `c` (tile rows r16.., tokens t16..) to y through the subgroup's slot of
// `out_block`, adding the bias; rows and tokens past the end are dropped. Called by all threads
// alike (it holds barriers).
fn write_block(c: coop_mat16x16<f32, C>, tile: Tile, r16: u32, t16: u32, sg: u32, lane: u32, lanes: u32) {
    let slot = sg * 256u;
    // Column-major: (row i, token j) at j · 16 + i, so lanes write rows of one token side by side.
    coopStore(c, &out_block[slot], 16u);
    workgroupBarrier();
    for (var e = lane; e < 256u; e += lanes) {
        let r = r16 + e % 16u;
        let t = t16 + e / 16u;
        if (r < p.rows && t < tile.count) {
            var b = 0.0;
#ifdef BIAS
            b = bias[bias_index(tile, r)];
#endif
            y[p.y_offset + tile_token(tile, t) * p.y_stride + r] = out_block[slot + e] + b;
        }
    }
    workgroupBarrier();
}

@compute @workgroup_size(128)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
    @builtin(subgroup_id) sg_id: u32,
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(subgroup_size) lanes: u32,
) {
    let tile = tile_at(wid.y);
    if (lid == 0u) {
        live_tokens = select(0u, tile.count, tile_live(tile));
    }
    let count = workgroupUniformLoad(&live_tokens);
    if (count == 0u) {
        return;
    }
    let r0 = wid.x * TILE_ROWS;
    // The mask keeps workgroup-memory indices provably in range; there are four subgroups.
    let sg = sg_id & 3u;
    let a_line = 16u * sg * LINE;
    var c0 = coop_mat16x16<f32, C>();
    var c1 = coop_mat16x16<f32, C>();
    var c2 = coop_mat16x16<f32, C>();
    var c3 = coop_mat16x16<f32, C>();
    let steps = (p.cols + STEP_COLS - 1u) / STEP_COLS;
    stage(tile, r0, 0u, lid);
    workgroupBarrier();
    for (var step = 0u; step < steps; step++) {
        if (step + 1u < steps) {
            stage(tile, r0, step + 1u, lid);
        }
        // A: the subgroup's 16 rows, row-major; B: 16 tokens, each a column of k values.
        // Blocks of tokens past the tile's count are skipped.
        let base = (step & 1u) * BUF;
        for (var k = 0u; k < STEP_COLS; k += 16u) {
            let a = coopLoadT<coop_mat16x16<f16, A>>(&ws[base + a_line + k], LINE);
            c0 = coopMultiplyAdd(a, coopLoad<coop_mat16x16<f16, B>>(&xs[base + k], LINE), c0);
            if (count > 16u) {
                let b = coopLoad<coop_mat16x16<f16, B>>(&xs[base + 16u * LINE + k], LINE);
                c1 = coopMultiplyAdd(a, b, c1);
            }
            if (count > 32u) {
                let b = coopLoad<coop_mat16x16<f16, B>>(&xs[base + 32u * LINE + k], LINE);
                c2 = coopMultiplyAdd(a, b, c2);
            }
            if (count > 48u) {
                let b = coopLoad<coop_mat16x16<f16, B>>(&xs[base + 48u * LINE + k], LINE);
                c3 = coopMultiplyAdd(a, b, c3);
            }
        }
        workgroupBarrier();
    }
    let r16 = r0 + 16u * sg;
    write_block(c0, tile, r16, 0u, sg, lane, lanes);
    if (count > 16u) {
        write_block(c1, tile, r16, 16u, sg, lane, lanes);
    }
    if (count > 32u) {
        write_block(c2, tile, r16, 32u, sg, lane, lanes);
    }
    if (count > 48u) {
        write_block(c3, tile, r16, 48u, sg, lane, lanes);
    }
}
