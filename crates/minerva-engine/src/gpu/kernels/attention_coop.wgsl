// Prefill attention on matrix cores (wgpu cooperative matrices), for causal layers without a
// window over an f16 cache (ops/attention_coop.rs). Per group of query heads, three dispatches:
//   scores   S[h][i][j] = q_i · k_j of every block of 32 keys × 32 queries that a query of the
//            block attends to (this file),
//   softmax  P[h][i][j] = the softmax of scale · S over keys 0..pos0 + i, with the sinks, as f16
//            (attention_softmax.wgsl),
//   values   O[i][h] = Σ_j P[h][i][j] · v_j, in KEY_SPLITS partial sums over the keys (this
//            file), which `gather` (attention_softmax.wgsl) adds into the output after the last
//            group.
// Each workgroup is one 32-lane subgroup; nothing is shared through workgroup memory (naga 30
// does not order workgroup accesses in modules with cooperative matrices, gfx-rs/wgpu#8805, so
// matmul_coop.wgsl does without too): what a dispatch hands the next goes through storage, and
// wgpu's barriers between dispatches order it. Every matrix operation runs in uniform control
// flow: blocks come from the workgroup id, bounds from the uniforms.
// Layouts (coopLoad/coopStore column-major, coopLoadT row-major; strides in elements):
// K and V: cache slot = position (no window, so the cache never wraps), row j at j · kv_row,
// head g's values from g · head_dim; the cache holds 32 positions past its length, which the
// last blocks read (their scores are masked, their weights 0).
// q16: the step's queries as f16, query i at i · q_row, head h's from h · head_dim.
// S (f32) and P (f16): (head of the pass, query, key) at ((hh · rows) + i) · row_len + j.
// O: f32 partial sums, split s's query i at (s · rows + i) · q_row, head h's from h · head_dim.
enable f16;
enable wgpu_cooperative_matrix;

#include "attention_coop_params.wgsl"

@group(0) @binding(2) var<storage, read> kv: array<f16>;
@group(0) @binding(3) var<storage, read> q16: array<f16>;
@group(0) @binding(4) var<storage, read_write> s: array<f32>;
@group(0) @binding(5) var<storage, read> p16: array<f16>;
@group(0) @binding(6) var<storage, read_write> o: array<f32>;

// Keys 32x.. × queries 32y.. of head p.head0 + z: S^T blocks = K (keys × dims, row-major) times
// Q^T (dims × queries, column-major), stored column-major, so each query's row of keys is
// contiguous. Blocks wholly above the diagonal, or past the step's keys, are skipped.
@compute @workgroup_size(32)
fn scores(@builtin(workgroup_id) wid: vec3<u32>) {
    let j0 = wid.x * 32u;
    let t0 = wid.y * 32u;
    let h = p.head0 + wid.z;
    // A branch, not an early return: naga takes control flow after a return as non-uniform.
    if (h < p.heads && t0 < step.tokens && j0 <= step.pos0 + t0 + 31u
        && j0 < step.pos0 + step.tokens) {
        scores_block(j0, t0, wid.z);
    }
}

fn scores_block(j0: u32, t0: u32, hh: u32) {
    let h = p.head0 + hh;
    let kb = j0 * p.kv_row + (h / p.group) * p.head_dim;
    let kb1 = kb + 16u * p.kv_row;
    let qb = t0 * p.q_row + h * p.head_dim;
    let qb1 = qb + 16u * p.q_row;
    var c00 = coop_mat16x16<f32, C>();
    var c01 = coop_mat16x16<f32, C>();
    var c10 = coop_mat16x16<f32, C>();
    var c11 = coop_mat16x16<f32, C>();
    for (var k = 0u; k < p.head_dim; k += 16u) {
        let k0 = coopLoadT<coop_mat16x16<f16, A>>(&kv[kb + k], p.kv_row);
        let k1 = coopLoadT<coop_mat16x16<f16, A>>(&kv[kb1 + k], p.kv_row);
        let q0 = coopLoad<coop_mat16x16<f16, B>>(&q16[qb + k], p.q_row);
        let q1 = coopLoad<coop_mat16x16<f16, B>>(&q16[qb1 + k], p.q_row);
        c00 = coopMultiplyAdd(k0, q0, c00);
        c01 = coopMultiplyAdd(k0, q1, c01);
        c10 = coopMultiplyAdd(k1, q0, c10);
        c11 = coopMultiplyAdd(k1, q1, c11);
    }
    // Every index and the stride named: naga 30 does not emit expressions written inside a
    // coopStore's arguments before the store.
    let rl = p.row_len;
    let s00 = (hh * p.rows + t0) * rl + j0;
    let s01 = s00 + 16u * rl;
    let s10 = s00 + 16u;
    let s11 = s01 + 16u;
    coopStore(c00, &s[s00], rl);
    coopStore(c01, &s[s01], rl);
    coopStore(c10, &s[s10], rl);
    coopStore(c11, &s[s11], rl);
}

// Queries 32x.. × value dims 64·(z % d64).. of head p.head0 + z / d64, over split y of the
// block's keys: O^T = V^T (dims × keys, column-major) times P^T (keys × queries,
// column-major), in steps of 16 keys (the softmax wrote zeros for every key a query of the
// block does not see), into that split's partial sums (`gather` adds them).
@compute @workgroup_size(32)
fn values(@builtin(workgroup_id) wid: vec3<u32>) {
    let t0 = wid.x * 32u;
    let d64 = p.head_dim / 64u;
    let hh = wid.z / d64;
    let end = block_end(t0);
    let keys = split_keys(end);
    let j0 = wid.y * keys;
    if (p.head0 + hh < p.heads && t0 < step.tokens && j0 < end) {
        values_block(t0, (wid.z % d64) * 64u, hh, j0, min(j0 + keys, end), wid.y);
    }
}

fn values_block(t0: u32, d0: u32, hh: u32, j0: u32, j1: u32, split: u32) {
    let h = p.head0 + hh;
    let vb = (h / p.group) * p.head_dim + d0;
    let pb = (hh * p.rows + t0) * p.row_len;
    let pb1 = pb + 16u * p.row_len;
    var c00 = coop_mat16x16<f32, C>();
    var c01 = coop_mat16x16<f32, C>();
    var c10 = coop_mat16x16<f32, C>();
    var c11 = coop_mat16x16<f32, C>();
    var c20 = coop_mat16x16<f32, C>();
    var c21 = coop_mat16x16<f32, C>();
    var c30 = coop_mat16x16<f32, C>();
    var c31 = coop_mat16x16<f32, C>();
    for (var j = j0; j < j1; j += 16u) {
        let v = j * p.kv_row + vb;
        let v0 = coopLoad<coop_mat16x16<f16, A>>(&kv[v], p.kv_row);
        let v1 = coopLoad<coop_mat16x16<f16, A>>(&kv[v + 16u], p.kv_row);
        let v2 = coopLoad<coop_mat16x16<f16, A>>(&kv[v + 32u], p.kv_row);
        let v3 = coopLoad<coop_mat16x16<f16, A>>(&kv[v + 48u], p.kv_row);
        let w0 = coopLoad<coop_mat16x16<f16, B>>(&p16[pb + j], p.row_len);
        let w1 = coopLoad<coop_mat16x16<f16, B>>(&p16[pb1 + j], p.row_len);
        c00 = coopMultiplyAdd(v0, w0, c00);
        c01 = coopMultiplyAdd(v0, w1, c01);
        c10 = coopMultiplyAdd(v1, w0, c10);
        c11 = coopMultiplyAdd(v1, w1, c11);
        c20 = coopMultiplyAdd(v2, w0, c20);
        c21 = coopMultiplyAdd(v2, w1, c21);
        c30 = coopMultiplyAdd(v3, w0, c30);
        c31 = coopMultiplyAdd(v3, w1, c31);
    }
    let qs = p.q_row;
    let o00 = (split * p.rows + t0) * qs + h * p.head_dim + d0;
    let o01 = o00 + 16u * qs;
    let o10 = o00 + 16u;
    let o11 = o01 + 16u;
    let o20 = o00 + 32u;
    let o21 = o01 + 32u;
    let o30 = o00 + 48u;
    let o31 = o01 + 48u;
    coopStore(c00, &o[o00], qs);
    coopStore(c01, &o[o01], qs);
    coopStore(c10, &o[o10], qs);
    coopStore(c11, &o[o11], qs);
    coopStore(c20, &o[o20], qs);
    coopStore(c21, &o[o21], qs);
    coopStore(c30, &o[o30], qs);
    coopStore(c31, &o[o31], qs);
}
