// Matrix × matrix for prefill: y[t][r] = Σ_c W[r][c] · x[t][c] (+ bias[r]) over tiles of
// TILE_ROWS rows × TILE_TOKENS tokens per 128-thread workgroup. Each K step, every thread decodes
// one 32-value unit of the tile's rows (DECODER) into workgroup memory — so each weight is decoded
// once per token tile and no thread idles while others decode — and all threads stage the same
// columns of the tile's tokens; then each thread accumulates THREAD_ROWS × THREAD_TOKENS outputs
// from vec4 reads along k (THREAD_ROWS + THREAD_TOKENS loads for 4 · THREAD_ROWS · THREAD_TOKENS
// FMAs). Tile defines come from ops/matmul.rs (`MatmulTile`); every tile has 8 row groups × 16 token
// groups of threads, and 1024 vec4s of weights and of x per step (32 KiB). Which tokens, weight
// rows and outputs a tile covers: matmul_tiles.wgsl (with EXPERTS, one expert's items in
// mixture-of-experts prefill).
#include "common.wgsl"
#include DECODER

struct Params {
    rows: u32,
    cols: u32,
    tokens: u32,
    x_offset: u32,
    x_stride: u32,
    y_offset: u32,
    y_stride: u32,
    bias_offset: u32,
    row_base: u32,      // output r reads stored row row_base + r · row_stride of the part
    row_stride: u32,
    matrix_rows: u32,   // EXPERTS: stored rows per expert matrix
    bias_stride: u32,   // EXPERTS: bias values per expert
    expert_first: u32,  // EXPERTS: experts [expert_first, expert_first + expert_count) are in
    expert_count: u32,  // this part
    x_div: u32,         // EXPERTS: item i reads x row i / x_div
    _pad: u32,
}

@group(0) @binding(3) var<storage, read> x: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
@group(0) @binding(5) var<uniform> p: Params;
#ifdef BIAS
@group(0) @binding(7) var<storage, read> bias: array<f32>;
#endif

const WG: u32 = 128u;
const TT: u32 = TILE_TOKENS;
const ROW_GROUPS: u32 = TILE_ROWS / THREAD_ROWS;
const TOKEN_GROUPS: u32 = TILE_TOKENS / THREAD_TOKENS;
const UNITS_PER_STEP: u32 = WG / TILE_ROWS; // one unit per thread per step
const STEP_COLS: u32 = 32u * UNITS_PER_STEP;
const STEP_VEC4S: u32 = STEP_COLS / 4u;
const X_PER_THREAD: u32 = TILE_TOKENS * STEP_COLS / WG;
const OUTPUTS: u32 = THREAD_ROWS * THREAD_TOKENS;
const_assert ROW_GROUPS * TOKEN_GROUPS == WG;
const_assert WG % TILE_ROWS == 0u;
// A thread's rows (and tokens) are ROW_GROUPS (TOKEN_GROUPS) apart: all share one line % 8.
const_assert ROW_GROUPS % 8u == 0u && TOKEN_GROUPS % 8u == 0u;

// The step's weights [row][k] and x values [token][k], one line of STEP_VEC4S vec4s per row or
// token (see `slot`).
var<workgroup> ws: array<vec4<f32>, TILE_ROWS * STEP_VEC4S>;
var<workgroup> xs: array<vec4<f32>, TILE_TOKENS * STEP_VEC4S>;

#include "matmul_tiles.wgsl"

// Vec4 k4 of tile line `line`, stored at k4 ^ (line % 8): eight consecutive lines read or written
// at the same k4 then fall in eight different bank groups, with no padding.
fn slot(line: u32, k4: u32) -> u32 {
    return line * STEP_VEC4S + (k4 ^ (line & 7u));
}

// Decodes this thread's unit of step `step`: row lid / UNITS_PER_STEP of the tile, neighbouring
// lanes taking neighbouring units of a row. Rows and units past the end stage zeros.
fn stage_weights(tile: Tile, r0: u32, step: u32, lid: u32) {
    let line = lid / UNITS_PER_STEP;
    let k = lid % UNITS_PER_STEP;
    let u = step * UNITS_PER_STEP + k;
    var w: Unit;
    if (r0 + line < p.rows && u < (p.cols + 31u) / 32u) {
        w = load_unit(w_row(tile, r0 + line), u, p.cols);
    }
    for (var j = 0u; j < 8u; j++) {
        ws[slot(line, 8u * k + j)] = w[j];
    }
}

// Stages the step's columns of the tile's tokens: each load instruction reads 32 consecutive
// values of one token. The loads are issued before the weights are decoded (values held in
// `vals`) so that their latencies overlap; tokens and columns past the end stage zeros.
fn load_x(tile: Tile, step: u32, lid: u32, vals: ptr<function, array<f32, X_PER_THREAD>>) {
    for (var i = 0u; i < X_PER_THREAD; i++) {
        let f = i * WG + lid;
        let t = f / STEP_COLS;
        let c = step * STEP_COLS + f % STEP_COLS;
        let inside = t < tile.count && c < p.cols;
        let at = select(0u, p.x_offset + x_row(tile, t) * p.x_stride + c, inside);
        (*vals)[i] = select(0.0, x[at], inside);
    }
}

fn store_x(lid: u32, vals: ptr<function, array<f32, X_PER_THREAD>>) {
    for (var i = 0u; i < X_PER_THREAD; i++) {
        let f = i * WG + lid;
        let c = f % STEP_COLS;
        xs[slot(f / STEP_COLS, c / 4u)][c % 4u] = (*vals)[i];
    }
}

// acc[i · THREAD_TOKENS + j] += Σ_k W[row i][k] · x[token j][k] over the staged step; the thread's
// rows are rg + ROW_GROUPS · i and its tokens tg + TOKEN_GROUPS · j.
fn multiply(rg: u32, tg: u32, acc: ptr<function, array<f32, OUTPUTS>>) {
    for (var k4 = 0u; k4 < STEP_VEC4S; k4++) {
        // `slot` with the swizzle shared by all the thread's rows, and by all its tokens.
        let wk = k4 ^ (rg & 7u);
        let xk = k4 ^ (tg & 7u);
        var xv: array<vec4<f32>, THREAD_TOKENS>;
        for (var j = 0u; j < THREAD_TOKENS; j++) {
            xv[j] = xs[(tg + TOKEN_GROUPS * j) * STEP_VEC4S + xk];
        }
        for (var i = 0u; i < THREAD_ROWS; i++) {
            let wv = ws[(rg + ROW_GROUPS * i) * STEP_VEC4S + wk];
            for (var j = 0u; j < THREAD_TOKENS; j++) {
                // One multiply-add per statement, so that each contracts to an FMA.
                var s = (*acc)[i * THREAD_TOKENS + j];
                s += wv.x * xv[j].x;
                s += wv.y * xv[j].y;
                s += wv.z * xv[j].z;
                s += wv.w * xv[j].w;
                (*acc)[i * THREAD_TOKENS + j] = s;
            }
        }
    }
}

fn write_out(tile: Tile, r0: u32, rg: u32, tg: u32, acc: ptr<function, array<f32, OUTPUTS>>) {
    for (var i = 0u; i < THREAD_ROWS; i++) {
        let r = r0 + rg + ROW_GROUPS * i;
        if (r >= p.rows) {
            continue;
        }
        var b = 0.0;
#ifdef BIAS
        b = bias[bias_index(tile, r)];
#endif
        for (var j = 0u; j < THREAD_TOKENS; j++) {
            let t = tg + TOKEN_GROUPS * j;
            if (t < tile.count) {
                y[p.y_offset + tile_token(tile, t) * p.y_stride + r] = (*acc)[i * THREAD_TOKENS + j] + b;
            }
        }
    }
}

@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let tile = tile_at(wid.y);
    if (!tile_live(tile)) {
        return;
    }
    let r0 = wid.x * TILE_ROWS;
    // Masks keep every workgroup-memory index provably in range for the compiler.
    let rg = lid % ROW_GROUPS;
    let tg = (lid / ROW_GROUPS) % TOKEN_GROUPS;
    var acc: array<f32, OUTPUTS>;
    var vals: array<f32, X_PER_THREAD>;
    let steps = (p.cols + STEP_COLS - 1u) / STEP_COLS;
    for (var step = 0u; step < steps; step++) {
        load_x(tile, step, lid, &vals);
        stage_weights(tile, r0, step, lid);
        store_x(lid, &vals);
        workgroupBarrier();
        multiply(rg, tg, &acc);
        workgroupBarrier();
    }
    write_out(tile, r0, rg, tg, &acc);
}
