// Decode products of one input with two or three weights in one dispatch (each weight read
// through its own decoder instance: load_unit_0, load_unit_1, load_unit_2).
//   SPLIT  outputs [0, rows0) from weight 0 into y0, the next rows1 from weight 1 into y1, the
//          next rows2 from weight 2 into y2 (q, k and v).
//   GLU    output r = act(W0[r]·x, W1[r]·x) into y0 (gate, up and the activation): SiLU, or
//          gpt-oss's clamped GLU with OSS.
// Layout as matvec.wgsl: RPW rows per workgroup of WG threads, 32-value units per thread.
struct Params {
    rows0: u32,
    rows1: u32,
    rows2: u32,
    cols: u32,
    x_offset: u32,
    groups_x: u32,
    alpha: f32,
    limit: f32,
}

// x as vec4s, staged through workgroup memory (xstage.wgsl).
@group(0) @binding(30) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(31) var<storage, read_write> y0: array<f32>;
#ifdef SPLIT
@group(0) @binding(32) var<storage, read_write> y1: array<f32>;
#ifdef THREE
@group(0) @binding(33) var<storage, read_write> y2: array<f32>;
#endif
#endif
@group(0) @binding(34) var<uniform> p: Params;

#include "xstage.wgsl"

const TPR: u32 = WG / RPW;
var<workgroup> partial: array<f32, WG>;

fn x_vec4(xb: u32, c: u32) -> vec4<f32> {
    let b = xb + c;
    if (c + 4u <= p.cols && (b & 3u) == 0u) {
        return x[b >> 2u];
    }
    var v = vec4<f32>(0.0);
    for (var j = 0u; j < 4u; j++) {
        if (c + j < p.cols) {
            v[j] = x[(b + j) >> 2u][(b + j) & 3u];
        }
    }
    return v;
}

// One unit of a weight row against staged unit `lu` of x.
fn dot_unit(unit: Unit, lu: u32) -> f32 {
    // A `var`: indexing a value array with a loop index copies the whole array each time.
    var w = unit;
    var s = 0.0;
    for (var k = 0u; k < 8u; k++) {
        s += dot(w[k], staged(lu, k));
    }
    return s;
}

// Sum of `v` over the TPR threads of each row; the total is valid in thread t == 0 of the row.
fn row_sum(v: f32, lid: u32) -> f32 {
    partial[lid] = v;
    workgroupBarrier();
    let t = lid % TPR;
    for (var step = TPR / 2u; step > 0u; step >>= 1u) {
        if (t < step) {
            partial[lid] += partial[lid + step];
        }
        workgroupBarrier();
    }
    let total = partial[lid];
    workgroupBarrier();
    return total;
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let t = lid % TPR;
    let row = (wid.x + wid.y * p.groups_x) * RPW + lid / TPR;
    let units = (p.cols + 31u) / 32u;
#ifdef GLU
    let live = row < p.rows0;
    var g = 0.0;
    var u = 0.0;
    for (var base = 0u; base < units; base += CHUNK_UNITS) {
        stage_x(p.x_offset, base, lid);
        let end = select(base, min(base + CHUNK_UNITS, units), live);
        for (var i = base + t; i < end; i += TPR) {
            g += dot_unit(load_unit_0(row, i, p.cols), i - base);
            u += dot_unit(load_unit_1(row, i, p.cols), i - base);
        }
    }
    let gs = row_sum(g, lid);
    let us = row_sum(u, lid);
    if (t == 0u && live) {
#ifdef OSS
        let gc = min(gs, p.limit);
        let uc = clamp(us, -p.limit, p.limit);
        y0[row] = (uc + 1.0) * gc / (1.0 + exp(-p.alpha * gc));
#else
        y0[row] = gs / (1.0 + exp(-gs)) * us;
#endif
    }
#else
    let total_rows = p.rows0 + p.rows1 + p.rows2;
    let live = row < total_rows;
    var acc = 0.0;
    for (var base = 0u; base < units; base += CHUNK_UNITS) {
        stage_x(p.x_offset, base, lid);
        let end = select(base, min(base + CHUNK_UNITS, units), live);
        for (var i = base + t; i < end; i += TPR) {
            if (row < p.rows0) {
                acc += dot_unit(load_unit_0(row, i, p.cols), i - base);
            } else if (row < p.rows0 + p.rows1) {
                acc += dot_unit(load_unit_1(row - p.rows0, i, p.cols), i - base);
            } else {
#ifdef THREE
                acc += dot_unit(load_unit_2(row - p.rows0 - p.rows1, i, p.cols), i - base);
#endif
            }
        }
    }
    let s = row_sum(acc, lid);
    if (t == 0u && live) {
        if (row < p.rows0) {
            y0[row] = s;
        } else if (row < p.rows0 + p.rows1) {
            y1[row - p.rows0] = s;
        } else {
#ifdef THREE
            y2[row - p.rows0 - p.rows1] = s;
#endif
        }
    }
#endif
}
