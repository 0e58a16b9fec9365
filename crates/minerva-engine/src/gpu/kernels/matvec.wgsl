// Matrix × vector for decode: y[z][r] = Σ_c W[r][c] · x[z][c] with W in its stored layout
// (DECODER). Each workgroup owns RPW groups of RPL consecutive rows; the TPR = WG / RPW lanes of
// a group take its parts (8 values, a quarter of a 32-value unit: unit.wgsl) in turn, so that
// neighbouring lanes read neighbouring weight words and x values, each lane reading its x
// values once for the group's RPL rows (MULTI_ROW when RPL > 1), and reduce with subgroup adds
// where the adapter has them (product.wgsl).
// With MOE, batch item z uses expert ids[z]; a workgroup whose expert lives in another part of
// the weight (a tensor split across bindings) does nothing. NORM folds an RMSNorm of x into the
// product; RESIDUAL also adds each result into `resid` (the residual stream); NORM_OUT (with
// NORM, one vector) also writes the norm's output into `normed`, for products that read it next.
// DOT_I8 (weights whose decoder defines `dot_i8_part`: `Ops::int8_weights`) reads x as int8
// records (quantize_x.wgsl's, or those of the kernel that produced x), two int8 terms per part
// (about 15 bits, any norm applied), and takes integer dot products (unit.wgsl, common.wgsl); it
// goes without NORM and NORM_OUT.
// PACKED_F16 (E2M1 weights): each part's products and their sums in packed f16 (HalfPart,
// common.wgsl, through unit.wgsl's part_dot), the part's sum and everything after it in f32;
// with X_HALVES x is converted once per workgroup (product.wgsl).
#include "common.wgsl"
#include DECODER

struct Params {
    rows: u32,          // outputs of this dispatch
    cols: u32,
    row_base: u32,      // output j reads stored row row_base + j · row_stride (of the part,
    row_stride: u32,    // plus the expert's matrix with MOE)
    matrix_rows: u32,   // MOE: stored rows per expert matrix
    bias_stride: u32,   // MOE: bias values per expert
    x_offset: u32,
    x_stride: u32,      // elements between consecutive x vectors
    x_div: u32,         // batch item z reads x vector z / x_div
    y_offset: u32,      // where this part's first row goes
    y_stride: u32,      // elements between consecutive y vectors
    expert_first: u32,  // MOE: experts [expert_first, expert_first + expert_count) are in this part
    expert_count: u32,
    groups_x: u32,      // workgroups along x (rows are spread over x and y)
    bias_offset: u32,
    norm_offset: u32,   // NORM: where the norm's weights start in norm_w
    eps: f32,           // NORM
    xq_scales: u32,     // DOT_I8: where the records' scales start in xq (vec4s)
    xq_sq: u32,         // XQ_NORM: where the parts' Σx² start in xq (vec4s)
    _pad2: u32,
}

#ifdef DOT_I8
@group(0) @binding(3) var<storage, read> xq: array<vec4<u32>>;
#else
@group(0) @binding(3) var<storage, read> x: array<vec4<f32>>;
#endif
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
@group(0) @binding(5) var<uniform> p: Params;
#ifdef MOE
@group(0) @binding(6) var<storage, read> ids: array<u32>;
#endif
#ifdef BIAS
@group(0) @binding(7) var<storage, read> bias: array<f32>;
#endif
#ifdef NORM
@group(0) @binding(8) var<storage, read> norm_w: array<vec4<f32>>;
#endif
#ifdef RESIDUAL
@group(0) @binding(9) var<storage, read_write> resid: array<f32>;
#endif
#ifdef NORM_OUT
@group(0) @binding(10) var<storage, read_write> normed: array<f32>;
#endif

const TPR: u32 = WG / RPW;
#include "product.wgsl"

// Sums of part i for the lane's rows: x the first row's dot product, y Σx², z and w the second
// and third rows' (MULTI_ROW; rows past the end read the last row again and are not written).
fn part_value(at: RowAt, i: u32) -> vec4<f32> {
    let u = i >> 2u;
    let j = i & 3u;
#ifdef X_HALVES
    let xi = xh[i];
    var s = vec4<f32>(half_part_dot(at.w_row, u, j, p.cols, xi), 0.0, 0.0, 0.0);
#else
    let xi = x_in(at.xb, i, part_k(j));
    var s = vec4<f32>(part_dot(at.w_row, u, j, p.cols, xi), x_sq(xi), 0.0, 0.0);
#endif
#ifdef MULTI_ROW
    for (var r = 1u; r < RPL; r++) {
        let w_row = at.w_row + min(r, p.rows - 1u - at.row) * p.row_stride;
#ifdef X_HALVES
        s[r + 1u] = half_part_dot(w_row, u, j, p.cols, xi);
#else
        s[r + 1u] = part_dot(w_row, u, j, p.cols, xi);
#endif
    }
#endif
    return s;
}

#ifdef X_HALVES
fn x_part_halves(xb: u32, i: u32) -> array<vec2<f16>, 4> {
    let xi = x_in(xb, i, part_k(i & 3u));
    return x_halves(xi.a, xi.b);
}
#endif

// The dot product of row r of the lane's rows in the reduced sums s.
fn row_dot(s: vec4<f32>, r: u32) -> f32 {
    return select(s[r + 1u], s.x, r == 0u);
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
    let r_local = lid / TPR;
    let t = lid % TPR;
    let row = ((wid.x + wid.y * p.groups_x) * RPW + r_local) * RPL;
    let z = wid.z;
    var live = row < p.rows;
    var w_row = p.row_base + row * p.row_stride;
    var b_row = row;
#ifdef MOE
    let e = ids[z];
    live = live && e >= p.expert_first && e < p.expert_first + p.expert_count;
    w_row += (e - p.expert_first) * p.matrix_rows;
    b_row += e * p.bias_stride;
#endif
    let vec_parts = x_parts();
#ifdef DOT_I8
    let xb = (z / p.x_div) * vec_parts;
#else
    let xb = p.x_offset + (z / p.x_div) * p.x_stride;
#endif
    let at = RowAt(w_row, 0u, xb, row);
#ifdef X_HALVES
    stage_x(xb, vec_parts, lid);
#endif
    let parts = select(0u, vec_parts, live);
    let s = row_sum(row_parts(at, t, parts), lid, sg_size, sg_lane);
#ifdef NORM_OUT
    // Every lane of a live row has summed x² over all of x: the workgroups whose rows are all
    // live share writing the norm's output (each thread a value or two: a loop over many would
    // wait on its loads in turn), multiplied in the order of norm.wgsl. With fewer rows than a
    // workgroup holds, the first workgroup's live rows write it all.
    let group = wid.x + wid.y * p.groups_x;
    let full = p.rows / (RPW * RPL);
    var writes = group < full;
    var first = group * WG + lid;
    var stride = full * WG;
    if (full == 0u) {
        let groups = (p.rows + RPL - 1u) / RPL;
        writes = group == 0u && r_local < groups;
        first = lid;
        stride = groups * TPR;
    }
    if (writes) {
        let inv = inverseSqrt(s.y / f32(p.cols) + p.eps);
        for (var c = first; c < p.cols; c += stride) {
            let i = at.xb + c;
            let g = p.norm_offset + c;
            normed[c] = x[i >> 2u][i & 3u] * inv * norm_w[g >> 2u][g & 3u];
        }
    }
#endif
    if (t == 0u && live) {
        for (var r = 0u; r < min(RPL, p.rows - row); r++) {
            var total = finish(row_dot(s, r), s);
#ifdef BIAS
            total += bias[p.bias_offset + b_row + r];
#endif
            let o = p.y_offset + z * p.y_stride + row + r;
            y[o] = total;
#ifdef RESIDUAL
            resid[o] += total;
#endif
        }
    }
}
