// x quantized once per vector for the int8 decode products (DOT_I8, matvec.wgsl and
// matvec_multi.wgsl): each part of 8 values (vec4s j and j + 4 of a 32-value unit) as two int8
// terms, coarse and fine (common.wgsl's XQuant), so that no product lane quantizes x itself.
// One thread per part, vector v = wid.y at x_offset + v · x_stride. xq holds the records of
// every vector's parts (record g = v · parts + i: the coarse term's two vec4s as packed bytes,
// then the fine term's), then from vec4 `scales` on the records' (scale, sum), two per vec4.
// NORM applies an RMSNorm first, x · g / rms(x): every workgroup sums x² over the whole vector
// (≤ a few K values, from L2) and folds 1 / rms(x) into the scales.
#include "common.wgsl"

struct Params {
    cols: u32,
    parts: u32,         // records per vector: 4 per unit of 32 values
    x_offset: u32,
    x_stride: u32,
    scales: u32,        // where the scales start (vec4s)
    norm_offset: u32,   // NORM: where the norm's weights start in norm_w
    eps: f32,           // NORM
    _pad: u32,
}

@group(0) @binding(0) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> xq: array<vec4<u32>>;
@group(0) @binding(2) var<uniform> p: Params;
#ifdef NORM
@group(0) @binding(3) var<storage, read> norm_w: array<vec4<f32>>;
#endif

#include "x_read.wgsl"

const WG: u32 = 64u;

var<workgroup> partial: array<f32, WG>;

// 1 / rms(x) of the vector at xb, in every thread: called from uniform control flow.
fn inv_rms(xb: u32, lid: u32) -> f32 {
    var s = 0.0;
    for (var c = 4u * lid; c < p.cols; c += 4u * WG) {
        let v = x_vec4(xb, c);
        s += dot(v, v);
    }
    partial[lid] = s;
    workgroupBarrier();
    for (var step = WG / 2u; step > 0u; step >>= 1u) {
        if (lid < step) {
            partial[lid] += partial[lid + step];
        }
        workgroupBarrier();
    }
    return inverseSqrt(partial[0] / f32(p.cols) + p.eps);
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let xb = p.x_offset + wid.y * p.x_stride;
#ifdef NORM
    let scale_by = inv_rms(xb, lid);
#else
    let scale_by = 1.0;
#endif
    let i = wid.x * WG + lid;
    if (i >= p.parts) {
        return;
    }
    let v = x_part(xb, i);
    let r = quantize_part(v.a, v.b);
    store_record(wid.y * p.parts + i, p.scales, r, scale_by);
}
