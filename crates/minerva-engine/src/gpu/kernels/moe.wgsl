// Mixture-of-experts on the GPU, no CPU round trip:
//   route    per token: the k largest router logits → expert ids and their softmax weights
//            (over the chosen k when `renorm` is set, else over all experts).
//   group    prefill: the tokens·k (token, slot) items sorted by expert, in tiles of at most
//            `tile_tokens` items of one expert for the grouped expert products (matmul.wgsl
//            with EXPERTS).
//   combine  y[t] = Σ_s weight[t·k + s] · expert_out[t·k + s]; with RESIDUAL also added into
//            `resid` (the residual stream), so that no add of its own follows.
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

// One workgroup per token and one thread per expert (route) or per expert slot (group).
const MAX_EXPERTS: u32 = 256u;
const MAX_K: u32 = 32u;
var<workgroup> logit: array<f32, MAX_EXPERTS>;
var<workgroup> sums: array<f32, MAX_EXPERTS>;
var<workgroup> chosen: array<f32, MAX_K>;
var<workgroup> top: f32;

// Does expert a come before expert b: a larger logit, or an equal one and a lower id.
fn before(va: f32, a: u32, vb: f32, b: u32) -> bool {
    return va > vb || (va == vb && a < b);
}

// Each thread counts the experts that come before its own: that count is its rank, so the
// k threads of rank < k write the choice in one pass, with no serial selection.
@compute @workgroup_size(256)
fn route(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) e: u32) {
    let t = wid.x + wid.y * p.groups_x;
    if (t >= p.tokens) {
        return;
    }
    let live = e < p.experts;
    if (live) {
        logit[e] = src[p.logits_offset + t * p.experts + e];
    }
    workgroupBarrier();
    var rank = p.experts;
    let v = logit[min(e, MAX_EXPERTS - 1u)];
    if (live) {
        rank = 0u;
        for (var o = 0u; o < p.experts; o++) {
            rank += u32(before(logit[o], o, v, e));
        }
        if (rank == 0u) {
            top = v;
        }
    }
    workgroupBarrier();
    let w = exp(v - top);
    if (rank < p.k) {
        ids[t * p.k + rank] = e;
        chosen[rank] = w;
    }
    // The softmax denominator: Σ over all experts (a tree over the workgroup) or over the k.
    sums[e] = select(0.0, w, live);
    workgroupBarrier();
    if (p.renorm == 0u) {
        for (var s = MAX_EXPERTS / 2u; s > 0u; s >>= 1u) {
            if (e < s) {
                sums[e] += sums[e + s];
            }
            workgroupBarrier();
        }
    }
    if (rank < p.k) {
        var denom = sums[0];
        if (p.renorm != 0u) {
            denom = 0.0;
            for (var s = 0u; s < p.k; s++) {
                denom += chosen[s];
            }
        }
        weights[t * p.k + rank] = w / denom;
    }
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
    let own = vec2<u32>(count, (count + p.tile_tokens - 1u) / p.tile_tokens);
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
        let at = first.x + j * p.tile_tokens;
        tiles[first.y + j] = vec4<u32>(e, at, min(p.tile_tokens, first.x + count - at), 0u);
    }
    for (var g = scan[MAX_EXPERTS - 1u].y + e; g < p.max_tiles; g += MAX_EXPERTS) {
        tiles[g] = vec4<u32>(0u);
    }
}

@compute @workgroup_size(64)
fn combine(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    let t = gid.y;
    if (i >= p.n || t >= p.tokens) {
        return;
    }
    var acc = 0.0;
    for (var s = 0u; s < p.k; s++) {
        let slot = t * p.k + s;
        acc += weights[slot] * src[slot * p.n + i];
    }
    y[t * p.n + i] = acc;
#ifdef RESIDUAL
    resid[t * p.n + i] += acc;
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
