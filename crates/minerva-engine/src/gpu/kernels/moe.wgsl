// Mixture-of-experts on the GPU, no CPU round trip:
//   route    per token: the k largest router logits → expert ids and their softmax weights
//            (over the chosen k when `renorm` is set, else over all experts).
//   group    prefill: the tokens·k (token, slot) items sorted by expert, in tiles of at most
//            `tile_tokens` items of one expert for the grouped expert products (matmul.wgsl
//            with EXPERTS); with `tile_pairs` 2 each expert's tiles come in pairs (the second
//            possibly empty), so that every pair starts at an even tile and one matrix-core
//            workgroup can take both (matmul_coop.wgsl with TOKENS64).
//   combine  y[t] = Σ_s weight[t·k + s] · expert_out[t·k + s]; with RESIDUAL also added into
//            `resid` (the residual stream), so that no add of its own follows. XQ_NORM_OUT (with
//            RESIDUAL, one token, n a multiple of 32) also writes the new residual times the next
//            RMSNorm's weights as int8 records with each part's Σx² (x_quant.wgsl), which the
//            products after that norm read in place of it (product.wgsl's XQ_NORM).
//   scatter  y[t][e] = the routing weight of expert e for token t (0 when not chosen), for
//            experts that are separate tensors and run densely.
struct Params {
    experts: u32,
    k: u32,
    tokens: u32,
    renorm: u32,
    n: u32,          // combine: values per token
    logits_offset: u32,
    groups_x: u32,   // route: workgroups along x (tokens are spread over x and y)
    tile_tokens: u32, // group: items per tile
    max_tiles: u32,  // group: tiles the products launch (the rest are written empty)
    norm_offset: u32, // XQ_NORM_OUT: where the norm's weights start in norm_w
    xq_scales: u32,  // XQ_NORM_OUT: where the records' scales and Σx² start in xq (vec4s)
    xq_sq: u32,
    tile_pairs: u32, // group: 2 for tiles in pairs, else 1
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read_write> ids: array<u32>;
@group(0) @binding(3) var<storage, read_write> weights: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
// group: item indices expert by expert, and per tile (expert, first position in order, items).
@group(0) @binding(5) var<storage, read_write> order: array<u32>;
@group(0) @binding(6) var<storage, read_write> tiles: array<vec4<u32>>;
#ifdef RESIDUAL
@group(0) @binding(7) var<storage, read_write> resid: array<f32>;
#endif
#ifdef XQ_NORM_OUT
@group(0) @binding(8) var<storage, read> norm_w: array<f32>;
@group(0) @binding(9) var<storage, read_write> xq: array<vec4<u32>>;
#include "x_quant.wgsl"
// combine: the workgroup's new residual values times the norm's weights, and their squares.
var<workgroup> xg: array<f32, 64>;
var<workgroup> x2: array<f32, 64>;
#endif

// One workgroup per token and one thread per expert (route) or per expert slot (group).
#include "route.wgsl"

@compute @workgroup_size(256)
fn route(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) e: u32) {
    let t = wid.x + wid.y * p.groups_x;
    if (t >= p.tokens) {
        return;
    }
    var value = 0.0;
    if (e < p.experts) {
        value = src[p.logits_offset + t * p.experts + e];
    }
    let r = route_rank(e, p.experts, value);
    route_write(t, e, r, p.experts, p.k, p.renorm != 0u);
}

var<workgroup> counts: array<atomic<u32>, MAX_EXPERTS>;
var<workgroup> scan: array<vec2<u32>, MAX_EXPERTS>;

// One workgroup: count the items of each expert, prefix sums of the counts and of the tiles,
// then each item takes a free position of its expert's range (the order within an expert
// changes no result: each item's product is computed on its own).
@compute @workgroup_size(256)
fn group(@builtin(local_invocation_index) e: u32) {
    let items = p.tokens * p.k;
    atomicStore(&counts[e], 0u);
    workgroupBarrier();
    for (var i = e; i < items; i += MAX_EXPERTS) {
        atomicAdd(&counts[ids[i]], 1u);
    }
    workgroupBarrier();
    let count = atomicLoad(&counts[e]);
    let per = p.tile_tokens * p.tile_pairs;
    let own = vec2<u32>(count, (count + per - 1u) / per * p.tile_pairs);
    // Inclusive prefix sums of (items, tiles) over the experts.
    scan[e] = own;
    workgroupBarrier();
    for (var d = 1u; d < MAX_EXPERTS; d <<= 1u) {
        var add = vec2<u32>(0u);
        if (e >= d) {
            add = scan[e - d];
        }
        workgroupBarrier();
        scan[e] += add;
        workgroupBarrier();
    }
    let first = scan[e] - own;
    atomicStore(&counts[e], 0u);
    workgroupBarrier();
    // Positions of expert x end at scan[x].x: its items fill them from the end.
    for (var i = e; i < items; i += MAX_EXPERTS) {
        let x = ids[i];
        order[scan[x].x - 1u - atomicAdd(&counts[x], 1u)] = i;
    }
    for (var j = 0u; j < own.y; j++) {
        // A pair's empty second tile starts at the end of the expert's items.
        let at = min(first.x + j * p.tile_tokens, first.x + count);
        tiles[first.y + j] = vec4<u32>(e, at, min(p.tile_tokens, first.x + count - at), 0u);
    }
    for (var g = scan[MAX_EXPERTS - 1u].y + e; g < p.max_tiles; g += MAX_EXPERTS) {
        tiles[g] = vec4<u32>(0u);
    }
}

@compute @workgroup_size(64)
fn combine(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = gid.x;
    let t = gid.y;
    let live = i < p.n && t < p.tokens;
    var r = 0.0;
    if (live) {
        var acc = 0.0;
        for (var s = 0u; s < p.k; s++) {
            let slot = t * p.k + s;
            acc += weights[slot] * src[slot * p.n + i];
        }
        y[t * p.n + i] = acc;
#ifdef RESIDUAL
        r = resid[t * p.n + i] + acc;
        resid[t * p.n + i] = r;
#endif
    }
#ifdef XQ_NORM_OUT
    // The workgroup's 64 values are two units of 32 (the last workgroup's second may lie past
    // n): threads 0-7 quantize their parts, values 4j.. and 16 + 4j.. of unit lid / 4.
    var g_i = 0.0;
    if (live) {
        g_i = norm_w[p.norm_offset + i];
    }
    xg[lid] = r * g_i;
    x2[lid] = r * r;
    workgroupBarrier();
    let first = i - lid;
    let at = (lid / 4u) * 32u + 4u * (lid % 4u);
    if (lid < 8u && first + at < p.n) {
        let a = vec4<f32>(xg[at], xg[at + 1u], xg[at + 2u], xg[at + 3u]);
        let b = vec4<f32>(xg[at + 16u], xg[at + 17u], xg[at + 18u], xg[at + 19u]);
        var sq = 0.0;
        for (var e = 0u; e < 4u; e++) {
            sq += x2[at + e] + x2[at + 16u + e];
        }
        let g = first / 8u + lid;
        store_record(g, p.xq_scales, quantize_part(a, b), 1.0);
        store_sq(g, p.xq_sq, sq);
    }
#endif
}

@compute @workgroup_size(64)
fn scatter(@builtin(global_invocation_id) gid: vec3<u32>) {
    let e = gid.x;
    let t = gid.y;
    if (e >= p.experts || t >= p.tokens) {
        return;
    }
    var w = 0.0;
    for (var s = 0u; s < p.k; s++) {
        if (ids[t * p.k + s] == e) {
            w += weights[t * p.k + s];
        }
    }
    y[t * p.experts + e] = w;
}
