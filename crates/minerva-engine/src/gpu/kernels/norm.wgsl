// RMSNorm over rows of n values: y = x / sqrt(mean(x²) + eps) · w. One workgroup per row; with
// INPLACE the row is normalized where it lies (per-head q/k norms); with RESIDUAL the residual
// add before it is fused: x += y, then y = norm(x) (one dispatch instead of two).
struct Params {
    n: u32,
    rows: u32,
    x_offset: u32,
    y_offset: u32,
    eps: f32,
    w_offset: u32,
    _pad1: u32,
    _pad2: u32,
}

#ifdef RESIDUAL
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
#else
#ifndef INPLACE
@group(0) @binding(0) var<storage, read> x: array<f32>;
#endif
#endif
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

// Values per thread held in registers: rows of up to WG · NV values are read once, with all of
// a thread's loads issued together (a row's norm is latency-bound: one or few workgroups);
// longer rows read their values past that twice.
const WG: u32 = 256u;
const NV: u32 = 16u;

var<workgroup> sums: array<f32, WG>;

fn input(i: u32) -> f32 {
#ifdef INPLACE
    return y[p.y_offset + i];
#else
    return x[p.x_offset + i];
#endif
}

// Value i of the row at base (after the residual add with RESIDUAL, which also stores it).
fn load_value(base: u32, i: u32) -> f32 {
#ifdef RESIDUAL
    let v = x[p.x_offset + base + i] + y[p.y_offset + base + i];
    x[p.x_offset + base + i] = v;
    return v;
#else
    return input(base + i);
#endif
}

// Σ of v over the workgroup, in every thread. Called from uniform control flow.
fn workgroup_sum(v: f32, lid: u32, sg_size: u32) -> f32 {
#ifdef SUBGROUPS
    let s = subgroupAdd(v);
    if (lid % sg_size == 0u) {
        sums[lid / sg_size] = s;
    }
    workgroupBarrier();
    var total = 0.0;
    for (var i = 0u; i < WG / sg_size; i++) {
        total += sums[i];
    }
    return total;
#else
    sums[lid] = v;
    workgroupBarrier();
    for (var step = WG / 2u; step > 0u; step >>= 1u) {
        if (lid < step) {
            sums[lid] += sums[lid + step];
        }
        workgroupBarrier();
    }
    return sums[0];
#endif
}

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
#ifdef SUBGROUPS
    @builtin(subgroup_size) sg_size: u32,
#endif
) {
#ifndef SUBGROUPS
    let sg_size = 1u;
#endif
    let row = wid.x + wid.y * 65535u;
    let live = row < p.rows;
    let base = row * p.n;
    let n = select(0u, p.n, live);
    var v: array<f32, NV>;
    var s = 0.0;
    for (var k = 0u; k < NV; k++) {
        let i = lid + WG * k;
        v[k] = 0.0;
        if (i < n) {
            v[k] = load_value(base, i);
        }
        s += v[k] * v[k];
    }
    for (var i = lid + WG * NV; i < n; i += WG) {
        let t = load_value(base, i);
        s += t * t;
    }
    let inv = inverseSqrt(workgroup_sum(s, lid, sg_size) / f32(p.n) + p.eps);
    for (var k = 0u; k < NV; k++) {
        let i = lid + WG * k;
        if (i < n) {
            y[p.y_offset + base + i] = v[k] * inv * w[p.w_offset + i];
        }
    }
    for (var i = lid + WG * NV; i < n; i += WG) {
#ifdef RESIDUAL
        let t = x[p.x_offset + base + i];
#else
        let t = input(base + i);
#endif
        y[p.y_offset + base + i] = t * inv * w[p.w_offset + i];
    }
}
