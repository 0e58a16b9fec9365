// Matrix × vector for decode: y[z][r] = Σ_c W[r][c] · x[z][c] with W in its stored layout,
// decoded unit by unit (DECODER). Each workgroup owns RPW rows; the TPR = WG / RPW threads of a
// row stride over its 32-value units and reduce with subgroup adds where the adapter has them.
// With MOE, batch item z uses expert ids[z]; a workgroup whose expert lives in another part of
// the weight (a tensor split across bindings) does nothing.
#include "common.wgsl"
#include DECODER
#include "xstage.wgsl"

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
    _pad: u32,
}

// x as vec4s, staged through workgroup memory (xstage.wgsl).
@group(0) @binding(3) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
@group(0) @binding(5) var<uniform> p: Params;
#ifdef MOE
@group(0) @binding(6) var<storage, read> ids: array<u32>;
#endif
#ifdef BIAS
@group(0) @binding(7) var<storage, read> bias: array<f32>;
#endif

fn x_vec4(xb: u32, c: u32) -> vec4<f32> {
    let i = xb + c;
    if (c + 4u <= p.cols && (i & 3u) == 0u) {
        return x[i >> 2u];
    }
    var v = vec4<f32>(0.0);
    for (var j = 0u; j < 4u; j++) {
        if (c + j < p.cols) {
            v[j] = x[(i + j) >> 2u][(i + j) & 3u];
        }
    }
    return v;
}

const TPR: u32 = WG / RPW;
var<workgroup> partial: array<f32, WG>;

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
#ifdef SUBGROUPS
    @builtin(subgroup_size) sg_size: u32,
    @builtin(subgroup_invocation_id) sg_lane: u32,
#endif
) {
    let r_local = lid / TPR;
    let t = lid % TPR;
    let row = (wid.x + wid.y * p.groups_x) * RPW + r_local;
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
    let xb = p.x_offset + (z / p.x_div) * p.x_stride;
    let units = (p.cols + 31u) / 32u;
    var acc = 0.0;
    for (var base = 0u; base < units; base += CHUNK_UNITS) {
        stage_x(xb, base, lid);
        let end = select(base, min(base + CHUNK_UNITS, units), live);
        for (var u = base + t; u < end; u += TPR) {
            var w = load_unit(w_row, u, p.cols);
            for (var k = 0u; k < 8u; k++) {
                acc += dot(w[k], staged(u - base, k));
            }
        }
    }
#ifdef SUBGROUPS
    let s = subgroupAdd(acc);
    if (sg_lane == 0u) {
        partial[lid / sg_size] = s;
    }
    workgroupBarrier();
    let per_row = TPR / sg_size;
    if (t == 0u && live) {
        var total = 0.0;
        for (var i = 0u; i < per_row; i++) {
            total += partial[r_local * per_row + i];
        }
#else
    partial[lid] = acc;
    workgroupBarrier();
    for (var step = TPR / 2u; step > 0u; step >>= 1u) {
        if (t < step) {
            partial[lid] += partial[lid + step];
        }
        workgroupBarrier();
    }
    if (t == 0u && live) {
        var total = partial[lid];
#endif
#ifdef BIAS
        total += bias[p.bias_offset + b_row];
#endif
        y[p.y_offset + z * p.y_stride + row] = total;
    }
}
