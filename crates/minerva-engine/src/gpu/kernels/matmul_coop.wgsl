// Matrix × matrix for prefill on matrix cores (wgpu cooperative matrices): y[t][r] = Σ_c W[r][c]
// · x[t][c] (+ bias[r]) from the f16 copies of the weight and of x that the two dispatches before
// it wrote (coop_weights.wgsl, coop_inputs.wgsl), accumulated in f32. Each workgroup is one
// 32-lane subgroup and computes ROWS rows × 32 tokens: 2 × 2 accumulators of 16 × 16, or with
// ROWS64 (ROWS 64) 4 × 2, each input matrix it loads serving every row block (twice the
// multiplies per input load; entry 64 of benches/GPU.md), and with ROWS64 and TOKENS64 64 rows ×
// 64 tokens, 4 × 4 (each weight matrix serving four token blocks too; entry 89).
// Nothing is shared through workgroup memory and nothing waits at a barrier: naga 30 declares
// the Vulkan memory model for modules with cooperative matrices without marking workgroup
// accesses and barriers for it (gfx-rs/wgpu#8805), so values shared between invocations of one
// dispatch are not synchronised; what earlier dispatches wrote is, by wgpu's barriers between
// dispatches. Every matrix operation runs in uniform control flow: the block comes from the
// workgroup id, the loop bound from the parameters.
// Memory layouts (naga: coopLoad/coopStore column-major, coopLoadT row-major; strides in
// elements; pointers and strides 16-byte aligned, which the multiples below give):
// A, 16 weight rows × 16 k: row-major, (i, k) at w16[(row0 + i) · p.k + k0 + k];
// B, 16 k × 16 tokens: column-major, (k, j) at x16[(tok0 + j) · p.k + k0 + k];
// C, 16 rows × 16 tokens: column-major, (i, j) at y[p.y_offset + (tok0 + j) · y_stride + row0 + i]
// (and, with BIAS, at bias_block[j · p.rows + row0 + i], where every j holds the bias).
// A product split along k (workgroup z takes halves z · k_split.. of each row) writes partial
// sums, z's from z · split_stride of y, which coop_splits.wgsl adds (and biases); its split has
// no BIAS.
// With EXPERTS (mixture-of-experts prefill, moe_coop.wgsl) block x is tile x of moe.wgsl's
// `group`: its 32 token slots hold that tile's items, gathered; w16 holds the decoded matrices of
// experts first_expert .. first_expert + experts, one after the other; a tile of another expert,
// or an empty one, exits at once. With TOKENS64 block x is the pair of tiles 2x and 2x + 1 of one
// expert (moe.wgsl's `tile_pairs`), its second tile possibly empty: whatever its slots hold,
// each token's outputs depend on that token's inputs only, and no empty slot is scattered.
enable f16;
enable wgpu_cooperative_matrix;

#include "coop_params.wgsl"

@group(0) @binding(0) var<storage, read> w16: array<f16>;
@group(0) @binding(1) var<storage, read> x16: array<f16>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;
#ifdef BIAS
@group(0) @binding(4) var<storage, read> bias_block: array<f32>;
#endif
#ifdef EXPERTS
// A uniform, so that a tile's exit keeps the matrix operations in uniform control flow.
@group(0) @binding(5) var<uniform> tiles: array<vec4<u32>, MOE_COOP_TILES>;
#endif

// One workgroup's 32 tokens × ROWS rows, its weight matrix at w_base of w16.
fn block(wid: vec3<u32>, w_base: u32) {
#ifdef TOKENS64
    let tok0 = wid.x * 64u;
#else
    let tok0 = wid.x * 32u;
#endif
    let k_first = wid.z * p.k_split;
    let row0 = wid.y * ROWS;
    // c<row block><token block>, started from the bias.
#ifdef BIAS
    let c0 = coopLoad<coop_mat16x16<f32, C>>(&bias_block[row0], p.rows);
    let c1 = coopLoad<coop_mat16x16<f32, C>>(&bias_block[row0 + 16u], p.rows);
#else
    let c0 = coop_mat16x16<f32, C>();
    let c1 = coop_mat16x16<f32, C>();
#endif
    var c00 = c0;
    var c01 = c0;
    var c10 = c1;
    var c11 = c1;
    let a0 = w_base + row0 * p.k;
    let a1 = a0 + 16u * p.k;
    let b0 = tok0 * p.k;
    let b1 = b0 + 16u * p.k;
#ifdef ROWS64
#ifdef BIAS
    let c2 = coopLoad<coop_mat16x16<f32, C>>(&bias_block[row0 + 32u], p.rows);
    let c3 = coopLoad<coop_mat16x16<f32, C>>(&bias_block[row0 + 48u], p.rows);
#else
    let c2 = coop_mat16x16<f32, C>();
    let c3 = coop_mat16x16<f32, C>();
#endif
    var c20 = c2;
    var c21 = c2;
    var c30 = c3;
    var c31 = c3;
    let a2 = a1 + 16u * p.k;
    let a3 = a2 + 16u * p.k;
#endif
#ifdef TOKENS64
    var c02 = c0;
    var c03 = c0;
    var c12 = c1;
    var c13 = c1;
    var c22 = c2;
    var c23 = c2;
    var c32 = c3;
    var c33 = c3;
    let b2 = b1 + 16u * p.k;
    let b3 = b2 + 16u * p.k;
#endif
    let k_end = min(k_first + p.k_split, p.k);
    for (var k = k_first; k < k_end; k += 16u) {
        let w0 = coopLoadT<coop_mat16x16<f16, A>>(&w16[a0 + k], p.k);
        let w1 = coopLoadT<coop_mat16x16<f16, A>>(&w16[a1 + k], p.k);
        let x0 = coopLoad<coop_mat16x16<f16, B>>(&x16[b0 + k], p.k);
        let x1 = coopLoad<coop_mat16x16<f16, B>>(&x16[b1 + k], p.k);
        c00 = coopMultiplyAdd(w0, x0, c00);
        c01 = coopMultiplyAdd(w0, x1, c01);
        c10 = coopMultiplyAdd(w1, x0, c10);
        c11 = coopMultiplyAdd(w1, x1, c11);
#ifdef ROWS64
        let w2 = coopLoadT<coop_mat16x16<f16, A>>(&w16[a2 + k], p.k);
        let w3 = coopLoadT<coop_mat16x16<f16, A>>(&w16[a3 + k], p.k);
        c20 = coopMultiplyAdd(w2, x0, c20);
        c21 = coopMultiplyAdd(w2, x1, c21);
        c30 = coopMultiplyAdd(w3, x0, c30);
        c31 = coopMultiplyAdd(w3, x1, c31);
#endif
#ifdef TOKENS64
        let x2 = coopLoad<coop_mat16x16<f16, B>>(&x16[b2 + k], p.k);
        let x3 = coopLoad<coop_mat16x16<f16, B>>(&x16[b3 + k], p.k);
        c02 = coopMultiplyAdd(w0, x2, c02);
        c03 = coopMultiplyAdd(w0, x3, c03);
        c12 = coopMultiplyAdd(w1, x2, c12);
        c13 = coopMultiplyAdd(w1, x3, c13);
        c22 = coopMultiplyAdd(w2, x2, c22);
        c23 = coopMultiplyAdd(w2, x3, c23);
        c32 = coopMultiplyAdd(w3, x2, c32);
        c33 = coopMultiplyAdd(w3, x3, c33);
#endif
    }
    // Every index and the stride named: naga 30 does not emit expressions written inside a
    // coopStore's arguments before the store (its SPIR-V writer then panics).
    let ys = p.y_stride;
    let y00 = p.y_offset + wid.z * p.split_stride + tok0 * ys + row0;
    let y01 = y00 + 16u * ys;
    let y10 = y00 + 16u;
    let y11 = y01 + 16u;
    coopStore(c00, &y[y00], ys);
    coopStore(c01, &y[y01], ys);
    coopStore(c10, &y[y10], ys);
    coopStore(c11, &y[y11], ys);
#ifdef ROWS64
    let y20 = y00 + 32u;
    let y21 = y01 + 32u;
    let y30 = y00 + 48u;
    let y31 = y01 + 48u;
    coopStore(c20, &y[y20], ys);
    coopStore(c21, &y[y21], ys);
    coopStore(c30, &y[y30], ys);
    coopStore(c31, &y[y31], ys);
#endif
#ifdef TOKENS64
    let y02 = y01 + 16u * ys;
    let y03 = y02 + 16u * ys;
    let y12 = y02 + 16u;
    let y13 = y03 + 16u;
    let y22 = y02 + 32u;
    let y23 = y03 + 32u;
    let y32 = y02 + 48u;
    let y33 = y03 + 48u;
    coopStore(c02, &y[y02], ys);
    coopStore(c03, &y[y03], ys);
    coopStore(c12, &y[y12], ys);
    coopStore(c13, &y[y13], ys);
    coopStore(c22, &y[y22], ys);
    coopStore(c23, &y[y23], ys);
    coopStore(c32, &y[y32], ys);
    coopStore(c33, &y[y33], ys);
#endif
}

@compute @workgroup_size(32)
fn main(@builtin(workgroup_id) wid: vec3<u32>) {
#ifdef EXPERTS
#ifdef TOKENS64
    let tile = tiles[2u * wid.x];
#else
    let tile = tiles[wid.x];
#endif
    if (tile.z > 0u && tile.x >= p.first_expert && tile.x < p.first_expert + p.experts) {
        block(wid, (tile.x - p.first_expert) * p.rows * p.k);
    }
#else
    block(wid, 0u);
#endif
}
