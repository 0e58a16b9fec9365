// Decode products of one input with two or three weights in one dispatch (each weight read
// through its own decoder instance: part_dot_0, _1, _2).
//   SPLIT  outputs [0, rows0) from weight 0 into y0, the next rows1 from weight 1 into y1, the
//          next rows2 from weight 2 into y2 (q, k and v).
//   GLU    output r = act(W0[r]·x, W1[r]·x) into y0 (gate, up and the activation): SiLU, or
//          gpt-oss's clamped GLU with OSS.
// NORM folds an RMSNorm of x into the products (product.wgsl); with BIAS each weight's outputs
// get its bias added (GLU: before the activation). GLU output r reads stored rows
// row_base + r · row_stride of each weight. MOE (GLU only): batch item z = wid.z runs the
// matrices of expert ids[z] (its x vector z / x_div, its output row z · y_stride, its biases
// ids[z] · bias_stride on); a workgroup whose expert lives in another part of the weights does
// nothing, as in matvec.wgsl. ROUTE (MOE, one token's k items): the workgroups rank the
// router's logits themselves (route.wgsl) instead of reading ids from a routing dispatch before
// them, and one of them writes the ids and weights. Layout as matvec.wgsl: RPW rows per
// workgroup of WG threads, the lanes of a row taking its 8-value parts in turn. DOT_I8 as in matvec.wgsl (no NORM with it,
// but with XQ_LOCAL, GLU only: each workgroup quantizes x itself, NORM's weights applied;
// product.wgsl);
// XQ_OUT (GLU with XQ_LOCAL, no MOE, RPW a multiple of 8): instead of f32 outputs the
// workgroup writes its rows as int8 records (x_quant.wgsl) for the product that reads them next
// (the down product), so that no quantizing dispatch comes between the two. Its RPW rows are
// then RPW / 8 whole parts of 8 values in the records' order (vec4s j and j + 4 of a unit), not
// consecutive rows.
// PACKED_F16 (GLU, both weights E2M1): the parts' products in packed f16 (HalfPart,
// common.wgsl, through unit.wgsl's part_dot); X_HALVES (both weights of one decoder) converts x
// once per workgroup (product.wgsl).
struct Params {
    rows0: u32,
    rows1: u32,
    rows2: u32,
    cols: u32,
    x_offset: u32,
    groups_x: u32,
    alpha: f32,
    limit: f32,
    norm_offset: u32,
    eps: f32,
    bias0: u32,         // BIAS: where each weight's bias starts in its buffer
    bias1: u32,
    bias2: u32,
    row_base0: u32,     // GLU
    row_base1: u32,
    row_stride0: u32,
    row_stride1: u32,
    matrix_rows: u32,   // MOE: stored rows per expert matrix
    bias_stride: u32,   // MOE: bias values per expert
    x_stride: u32,      // MOE
    x_div: u32,
    y_stride: u32,
    expert_first: u32,  // MOE: experts [expert_first, expert_first + expert_count) are in this part
    expert_count: u32,
    xq_scales: u32,     // DOT_I8: where the records' scales start in xq (vec4s)
    xq_sq: u32,         // XQ_NORM: where the parts' Σx² start in xq (vec4s)
    route_experts: u32, // ROUTE: the router's logits, the experts chosen, their weights' softmax
    route_k: u32,       // over the k (route_renorm 1) or over all, whether this dispatch
    route_renorm: u32,  // writes ids and weights (one part's), where the logits start
    route_writes: u32,
    logits_offset: u32,
    xq_out_scales: u32, // XQ_OUT: where the written records' scales start (vec4s)
}

#ifdef DOT_I8
#ifdef XQ_LOCAL
@group(0) @binding(30) var<storage, read> x: array<vec4<f32>>;
#else
@group(0) @binding(30) var<storage, read> xq: array<vec4<u32>>;
#endif
#else
@group(0) @binding(30) var<storage, read> x: array<vec4<f32>>;
#endif
#ifdef XQ_OUT
@group(0) @binding(31) var<storage, read_write> xq: array<vec4<u32>>;
// Each row's result, for the threads that quantize the workgroup's parts.
var<workgroup> row_out: array<f32, RPW>;
#else
@group(0) @binding(31) var<storage, read_write> y0: array<f32>;
#endif
#ifdef SPLIT
@group(0) @binding(32) var<storage, read_write> y1: array<f32>;
#ifdef THREE
@group(0) @binding(33) var<storage, read_write> y2: array<f32>;
#endif
#endif
@group(0) @binding(34) var<uniform> p: Params;
#ifdef NORM
@group(0) @binding(35) var<storage, read> norm_w: array<vec4<f32>>;
#endif
#ifdef BIAS
@group(0) @binding(36) var<storage, read> b0: array<f32>;
@group(0) @binding(37) var<storage, read> b1: array<f32>;
#ifdef THREE
@group(0) @binding(38) var<storage, read> b2: array<f32>;
#endif
#endif
#ifdef MOE
#ifdef ROUTE
@group(0) @binding(39) var<storage, read_write> ids: array<u32>;
@group(0) @binding(40) var<storage, read> logits: array<f32>;
@group(0) @binding(41) var<storage, read_write> weights: array<f32>;
#include "route.wgsl"
var<workgroup> routed: u32;
#else
@group(0) @binding(39) var<storage, read> ids: array<u32>;
#endif
#endif

const TPR: u32 = WG / RPW;
#include "product.wgsl"

fn part_value(at: RowAt, i: u32) -> vec4<f32> {
    let u = i >> 2u;
    let j = i & 3u;
#ifdef X_HALVES
    // GLU over two weights of one decoder: both meet the same staged pairs.
    let xh_i = xh[i];
    let g = half_part_dot_0(at.w_row, u, j, p.cols, xh_i);
    return vec4<f32>(g, 0.0, half_part_dot_1(at.up_row, u, j, p.cols, xh_i), 0.0);
#else
#ifdef GLU
    let xg = x_in(at.xb, i, part_k_0(j));
    let g = part_dot_0(at.w_row, u, j, p.cols, xg);
#ifdef DOT_I8
    // Quantized x does not depend on the weight's dtype: the up weight meets the same part.
    let xu = xg;
#else
    let xu = x_in(at.xb, i, part_k_1(j));
#endif
    return vec4<f32>(g, x_sq(xg), part_dot_1(at.up_row, u, j, p.cols, xu), 0.0);
#else
    let row = at.row;
    if (row < p.rows0) {
        let xi = x_in(at.xb, i, part_k_0(j));
        return vec4<f32>(part_dot_0(row, u, j, p.cols, xi), x_sq(xi), 0.0, 0.0);
    }
    if (row < p.rows0 + p.rows1) {
        let xi = x_in(at.xb, i, part_k_1(j));
        return vec4<f32>(part_dot_1(row - p.rows0, u, j, p.cols, xi), x_sq(xi), 0.0, 0.0);
    }
#ifdef THREE
    let xi = x_in(at.xb, i, part_k_2(j));
    let d = part_dot_2(row - p.rows0 - p.rows1, u, j, p.cols, xi);
    return vec4<f32>(d, x_sq(xi), 0.0, 0.0);
#else
    return vec4<f32>(0.0);
#endif
#endif
#endif
}

#ifdef X_HALVES
fn x_part_halves(xb: u32, i: u32) -> array<vec2<f16>, 4> {
    let xi = x_in(xb, i, part_k_0(i & 3u));
    return x_halves_0(xi.a, xi.b);
}
#endif

// Stages the workgroup's x vector at xb where the product does (X_HALVES, XQ_LOCAL). Call from
// uniform control flow, before any row reads its x.
fn stage_inputs(xb: u32, lid: u32) {
#ifdef X_HALVES
    stage_x(xb, x_parts(), lid);
#endif
#ifdef XQ_LOCAL
    stage_xq(xb, x_parts(), lid);
#endif
}

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
#ifdef SUBGROUPS
    @builtin(subgroup_size) sg_size: u32,
    @builtin(subgroup_invocation_id) sg_lane: u32,
#endif
) {
#ifndef SUBGROUPS
    let sg_size = 1u;
    let sg_lane = 0u;
#endif
    let t = lid % TPR;
    let group = wid.x + wid.y * p.groups_x;
#ifdef XQ_OUT
    // Slot s of the workgroup is value s % 8 of its part s / 8: vec4 j, then vec4 j + 4.
    let slot = lid / TPR;
    let part = group * (RPW / 8u) + slot / 8u;
    let k = slot % 8u;
    let row = (part / 4u) * 32u + (part % 4u) * 4u + (k % 4u) + (k / 4u) * 16u;
#else
    let row = group * RPW + lid / TPR;
#endif
#ifdef GLU
    var live = row < p.rows0;
    var expert = 0u;
    var xb = p.x_offset;
    var x_stride = p.x_stride;
#ifdef DOT_I8
#ifndef XQ_LOCAL
    // Records of quantized x: each vector's start at its first part.
    xb = 0u;
    x_stride = x_parts();
#endif
#endif
#ifdef MOE
    xb += (wid.z / p.x_div) * x_stride;
#ifdef ROUTE
    // One token's items route it themselves (WG = MAX_EXPERTS threads): item z takes the
    // expert of rank z; the first workgroup of the dispatch that writes them also leaves the ids
    // and weights for the down product and the combine. The logits load while x is staged.
    var value = 0.0;
    if (lid < p.route_experts) {
        value = logits[p.logits_offset + lid];
    }
    stage_inputs(xb, lid);
    let ranked = route_rank(lid, p.route_experts, value);
    if (ranked.rank == wid.z) {
        routed = lid;
    }
    if (p.route_writes != 0u && wid.x == 0u && wid.y == 0u && wid.z == 0u) {
        route_write(0u, lid, ranked, p.route_experts, p.route_k, p.route_renorm != 0u);
    }
    expert = workgroupUniformLoad(&routed);
#else
    expert = ids[wid.z];
#endif
    live = live && expert >= p.expert_first && expert < p.expert_first + p.expert_count;
#endif
#ifndef ROUTE
    stage_inputs(xb, lid);
#endif
    // Stored rows of this part: matrices from the part's first expert on.
    let m = (expert - p.expert_first) * p.matrix_rows;
    let w_rows = vec2<u32>(p.row_base0 + row * p.row_stride0, p.row_base1 + row * p.row_stride1) + m;
    let at = RowAt(w_rows.x, w_rows.y, xb, row);
#else
    let live = row < p.rows0 + p.rows1 + p.rows2;
#ifdef DOT_I8
    let at = RowAt(0u, 0u, 0u, row);
#else
    let at = RowAt(0u, 0u, p.x_offset, row);
#endif
    stage_inputs(at.xb, lid);
#endif
    let parts = select(0u, x_parts(), live);
    let s = row_sum(row_parts(at, t, parts), lid, sg_size, sg_lane);
    if (t == 0u && live) {
#ifdef GLU
        // Σx² rides along with the gate's sums (y); z holds the up product.
        var gt = finish(s.x, s);
        var ut = finish(s.z, s);
#ifdef BIAS
        let b = expert * p.bias_stride + row;
        gt += b0[p.bias0 + b];
        ut += b1[p.bias1 + b];
#endif
        let o = wid.z * p.y_stride + row;
#ifdef OSS
        let gc = min(gt, p.limit);
        let uc = clamp(ut, -p.limit, p.limit);
        let h = (uc + 1.0) * gc / (1.0 + exp(-p.alpha * gc));
#else
        let h = gt / (1.0 + exp(-gt)) * ut;
#endif
#ifdef XQ_OUT
        row_out[slot] = h;
#else
        y0[o] = h;
#endif
#else
        let total = finish(s.x, s);
        if (row < p.rows0) {
#ifdef BIAS
            y0[row] = total + b0[p.bias0 + row];
#else
            y0[row] = total;
#endif
        } else if (row < p.rows0 + p.rows1) {
            let r = row - p.rows0;
#ifdef BIAS
            y1[r] = total + b1[p.bias1 + r];
#else
            y1[r] = total;
#endif
        } else {
#ifdef THREE
            let r = row - p.rows0 - p.rows1;
#ifdef BIAS
            y2[r] = total + b2[p.bias2 + r];
#else
            y2[r] = total;
#endif
#endif
        }
#endif
    }
#ifdef XQ_OUT
    if (t == 0u && !live) {
        row_out[slot] = 0.0;
    }
    workgroupBarrier();
    let q = group * (RPW / 8u) + lid;
    if (lid < RPW / 8u && q < p.rows0 / 8u) {
        let v = 8u * lid;
        let a = vec4<f32>(row_out[v], row_out[v + 1u], row_out[v + 2u], row_out[v + 3u]);
        let b = vec4<f32>(row_out[v + 4u], row_out[v + 5u], row_out[v + 6u], row_out[v + 7u]);
        store_record(q, p.xq_out_scales, quantize_part(a, b), 1.0);
    }
#endif
}
