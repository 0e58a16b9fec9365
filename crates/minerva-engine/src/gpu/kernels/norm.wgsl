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

var<workgroup> sums: array<f32, 256>;

fn input(i: u32) -> f32 {
#ifdef INPLACE
    return y[p.y_offset + i];
#else
    return x[p.x_offset + i];
#endif
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let row = wid.x + wid.y * 65535u;
    let live = row < p.rows;
    let base = row * p.n;
    var s = 0.0;
    if (live) {
        for (var i = lid; i < p.n; i += 256u) {
#ifdef RESIDUAL
            let v = x[p.x_offset + base + i] + y[p.y_offset + base + i];
            x[p.x_offset + base + i] = v;
#else
            let v = input(base + i);
#endif
            s += v * v;
        }
    }
    sums[lid] = s;
    workgroupBarrier();
    for (var step = 128u; step > 0u; step >>= 1u) {
        if (lid < step) {
            sums[lid] += sums[lid + step];
        }
        workgroupBarrier();
    }
    let inv = inverseSqrt(sums[0] / f32(p.n) + p.eps);
    if (live) {
        for (var i = lid; i < p.n; i += 256u) {
            y[p.y_offset + base + i] = input(base + i) * inv * w[p.w_offset + i];
        }
    }
}
