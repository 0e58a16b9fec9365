// The product of matmul_coop.wgsl (its parameters, bindings and memory layouts of w16, x16, y
// and the bias block), with the inputs of each K step staged in workgroup memory: a workgroup of
// four 32-lane subgroups computes 64 rows × 64 tokens, each subgroup a quarter of them (32 × 32,
// 2 × 2 accumulators). Every step of KS = 32 halves of k the workgroup's threads load the step's
// 64 weight rows and 64 input columns (64 bytes each, a quarter per thread) into workgroup
// memory, and the subgroups' matrices load from there: each value leaves memory once per
// workgroup, not once per subgroup, and the loads of step s + 1 are in flight while step s
// multiplies (two buffers, one barrier a step). The hand-over through workgroup memory needs the
// GLSL450 memory model: this kernel is translated by spirv.rs, not by wgpu.
// A product split along k (k_split a multiple of KS) writes partial sums as matmul_coop.wgsl's.
// With EXPERTS (mixture-of-experts prefill, moe_coop.rs), block x is the pair of tiles 2x and
// 2x + 1 of one expert, as matmul_coop.wgsl's with TOKENS64, and the weight is read as stored
// (below); a workgroup whose pair belongs to an expert outside first_expert .. first_expert +
// experts, or is empty, exits before its first barrier (the whole workgroup: the tile list is
// uniform).
enable f16;
enable wgpu_cooperative_matrix;

#include "coop_params.wgsl"

#ifdef EXPERTS
// The weight in its stored layout, read through its decoder (instance 0 of `compose_multi`:
// bindings 0 to 2, `load_part_0`): each step's weight rows are decoded to f16 on their way to
// workgroup memory, with no f16 copy of the experts' matrices. No BIAS (the scatter adds it).
@group(0) @binding(3) var<storage, read> x16: array<vec4<f16>>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
@group(0) @binding(5) var<uniform> p: Params;
@group(0) @binding(6) var<uniform> tiles: array<vec4<u32>, MOE_COOP_TILES>;
#else
// w16 and x16 in fours of halves: a 16-byte line of eight halves is two of them.
@group(0) @binding(0) var<storage, read> w16: array<vec4<f16>>;
@group(0) @binding(1) var<storage, read> x16: array<vec4<f16>>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;
#ifdef BIAS
@group(0) @binding(4) var<storage, read> bias_block: array<f32>;
#endif
#endif

const KS: u32 = 32u;
// A staged row (weight row or input column) of one step: its eight fours and two of padding,
// so that the eight 16-byte rows a matrix load reads at once fall in distinct banks.
const LINE: u32 = 10u;
const TILE: u32 = 64u * LINE;
// Buffer b: the step's weight rows at 2·b·TILE, its input columns TILE after them.
var<workgroup> stage: array<vec4<f16>, 2560>;

#ifdef EXPERTS
// Part j of the 32-value unit from half k on of stored row `row`: its two fours, which go to
// fours weight_at(j) of the step's staged row.
fn weight_fours(row: u32, k: u32, j: u32) -> array<vec4<f16>, 2> {
    let part = load_part_0(row, k / 32u, j, p.cols);
    let at = weight_at(j);
    return array<vec4<f16>, 2>(
        vec4<f16>(f16_four(part[0], k + 4u * at.x, p.cols)),
        vec4<f16>(f16_four(part[1], k + 4u * at.y, p.cols)),
    );
}

fn weight_at(j: u32) -> vec2<u32> {
    return part_k_0(j);
}

// This thread's eight fours of the step from half k on: part lid % 4 of weight rows lid / 4 and
// lid / 4 + 32 (stored rows from w_base + row0), and line lid % 4 (two fours) of input columns
// lid / 4 and lid / 4 + 32.
fn step_lines(k: u32, lid: u32, w_base: u32, row0: u32, tok0: u32) -> array<vec4<f16>, 8> {
    let per_row = p.k / 4u;
    let r = lid / 4u;
    let j = lid % 4u;
    let w0 = weight_fours(w_base + row0 + r, k, j);
    let w1 = weight_fours(w_base + row0 + r + 32u, k, j);
    let x0 = (tok0 + r) * per_row + k / 4u + 2u * j;
    let x1 = x0 + 32u * per_row;
    return array<vec4<f16>, 8>(
        w0[0], w0[1], w1[0], w1[1],
        x16[x0], x16[x0 + 1u], x16[x1], x16[x1 + 1u],
    );
}
#else
fn weight_at(j: u32) -> vec2<u32> {
    return vec2<u32>(2u * j, 2u * j + 1u);
}

// This thread's eight fours of the step from half k on: line lid % 4 (two fours) of weight
// rows lid / 4 and lid / 4 + 32 (from w_base of w16, in fours), and of input columns lid / 4
// and lid / 4 + 32.
fn step_lines(k: u32, lid: u32, w_base: u32, row0: u32, tok0: u32) -> array<vec4<f16>, 8> {
    let per_row = p.k / 4u;
    let at = k / 4u + 2u * (lid % 4u);
    let r = lid / 4u;
    let w0 = w_base + (row0 + r) * per_row + at;
    let w1 = w0 + 32u * per_row;
    let x0 = (tok0 + r) * per_row + at;
    let x1 = x0 + 32u * per_row;
    return array<vec4<f16>, 8>(
        w16[w0], w16[w0 + 1u], w16[w1], w16[w1 + 1u],
        x16[x0], x16[x0 + 1u], x16[x1], x16[x1 + 1u],
    );
}
#endif

fn stage_lines(buf: u32, lid: u32, v: array<vec4<f16>, 8>) {
    let row = 2u * buf * TILE + (lid / 4u) * LINE;
    let w = row + weight_at(lid % 4u);
    stage[w.x] = v[0];
    stage[w.y] = v[1];
    stage[w.x + 32u * LINE] = v[2];
    stage[w.y + 32u * LINE] = v[3];
    let x = row + TILE + 2u * (lid % 4u);
    stage[x] = v[4];
    stage[x + 1u] = v[5];
    stage[x + 32u * LINE] = v[6];
    stage[x + 32u * LINE + 1u] = v[7];
}

// One workgroup's 64 tokens × 64 rows, its weight matrix at w_base (see step_lines).
fn block(wid: vec3<u32>, lid: u32, w_base: u32) {
    // Subgroups of exactly 32 lanes (Capabilities::matrix_cores), lanes 32s .. 32s + 31.
    let sg = lid / 32u;
    let row0 = wid.y * 64u;
    let tok0 = wid.x * 64u;
    // The subgroup's 32 rows and 32 tokens of the workgroup's block.
    let wr = (sg % 2u) * 32u;
    let wt = (sg / 2u) * 32u;
#ifdef BIAS
    let c0 = coopLoad<coop_mat16x16<f32, C>>(&bias_block[row0 + wr], p.rows);
    let c1 = coopLoad<coop_mat16x16<f32, C>>(&bias_block[row0 + wr + 16u], p.rows);
#else
    let c0 = coop_mat16x16<f32, C>();
    let c1 = coop_mat16x16<f32, C>();
#endif
    var c00 = c0;
    var c01 = c0;
    var c10 = c1;
    var c11 = c1;
    let k_first = wid.z * p.k_split;
    let k_end = min(k_first + p.k_split, p.k);
    var lines = step_lines(k_first, lid, w_base, row0, tok0);
    stage_lines(0u, lid, lines);
    workgroupBarrier();
    var buf = 0u;
    for (var k = k_first; k < k_end; k += KS) {
        // The next step's lines; the last step loads its own again, so that no branch stands
        // between these loads and the multiplies and the compiler may interleave them.
        lines = step_lines(min(k + KS, k_end - KS), lid, w_base, row0, tok0);
        // The step's two halves of 16 inputs (fours 0 and 4 of each staged row), written out.
        let a = 2u * buf * TILE + wr * LINE;
        let b = 2u * buf * TILE + TILE + wt * LINE;
        let w0 = coopLoadT<coop_mat16x16<f16, A>>(&stage[a], LINE);
        let w1 = coopLoadT<coop_mat16x16<f16, A>>(&stage[a + 16u * LINE], LINE);
        let x0 = coopLoad<coop_mat16x16<f16, B>>(&stage[b], LINE);
        let x1 = coopLoad<coop_mat16x16<f16, B>>(&stage[b + 16u * LINE], LINE);
        c00 = coopMultiplyAdd(w0, x0, c00);
        c01 = coopMultiplyAdd(w0, x1, c01);
        c10 = coopMultiplyAdd(w1, x0, c10);
        c11 = coopMultiplyAdd(w1, x1, c11);
        let v0 = coopLoadT<coop_mat16x16<f16, A>>(&stage[a + 4u], LINE);
        let v1 = coopLoadT<coop_mat16x16<f16, A>>(&stage[a + 16u * LINE + 4u], LINE);
        let z0 = coopLoad<coop_mat16x16<f16, B>>(&stage[b + 4u], LINE);
        let z1 = coopLoad<coop_mat16x16<f16, B>>(&stage[b + 16u * LINE + 4u], LINE);
        c00 = coopMultiplyAdd(v0, z0, c00);
        c01 = coopMultiplyAdd(v0, z1, c01);
        c10 = coopMultiplyAdd(v1, z0, c10);
        c11 = coopMultiplyAdd(v1, z1, c11);
        // The buffer the last step writes is one nobody reads again.
        stage_lines(1u - buf, lid, lines);
        workgroupBarrier();
        buf = 1u - buf;
    }
    // Every index and the stride named: naga 30 does not emit expressions written inside a
    // coopStore's arguments before the store.
    let ys = p.y_stride;
    let y00 = p.y_offset + wid.z * p.split_stride + (tok0 + wt) * ys + row0 + wr;
    let y01 = y00 + 16u * ys;
    let y10 = y00 + 16u;
    let y11 = y01 + 16u;
    coopStore(c00, &y[y00], ys);
    coopStore(c01, &y[y01], ys);
    coopStore(c10, &y[y10], ys);
    coopStore(c11, &y[y11], ys);
}

@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
#ifdef EXPERTS
    let tile = tiles[2u * wid.x];
    if (tile.z > 0u && tile.x >= p.first_expert && tile.x < p.first_expert + p.experts) {
        block(wid, lid, (tile.x - p.first_expert) * p.rows);
    }
#else
    block(wid, lid, 0u);
#endif
}
