// What the decode products (matvec.wgsl, matvec_multi.wgsl) share: the loop of a row's lanes
// over its parts, the x values a part meets, the RMSNorm that NORM folds into a product, and sums
// over a row's lanes. The including kernel declares the uniform `p` (fields cols, norm_offset,
// eps, xq_scales), the constants WG, TPR (lanes per row) and IN_FLIGHT (parts whose loads a lane
// issues together), `fn part_value(at: RowAt, i: u32) -> vec4<f32>`: the sums that part i of
// the row adds (x: a dot product, y: Σx² of the x values read, z: a second dot product, w:
// unused), and x: `x: array<vec4<f32>>` (with NORM also `norm_w: array<vec4<f32>>`, the norm's
// weight), or with DOT_I8 `xq: array<vec4<u32>>`, x quantized by quantize_x.wgsl (or by the
// kernel that produced x), and with XQ_NORM the uniform's field xq_sq; with DOT_I8 and XQ_LOCAL
// x itself again (and NORM's weights), which each workgroup quantizes (`stage_xq`).
//
// NORM: the product of W with RMSNorm(x)·g equals (W · (x∘g)) / rms(x), and a row's lanes read
// every value of x anyway, so they also sum x² on the way: the norm costs no dispatch and no
// pass of its own. With DOT_I8 the quantization applies the norm instead (no NORM here), or
// with XQ_NORM the records hold x times the norm's weights and each part's Σx² (from vec4
// xq_sq on, four per vec4), which the lanes sum as NORM's lanes sum x², and the product
// divides by rms(x) as NORM's does.

// Where a row's work is: its stored weight row (and the second weight's, for the gate/up
// product), its x vector (with DOT_I8 the vector's first record), its output row.
struct RowAt {
    w_row: u32,
    up_row: u32,
    xb: u32,
    row: u32,
}

// Parts of 8 values in an x vector of p.cols values: whole units of 32 (the lanes and the int8
// records go by them).
fn x_parts() -> u32 {
    return ((p.cols + 31u) / 32u) * 4u;
}

// Σ part_value over the parts t, t + TPR, … of a row (t: the lane), IN_FLIGHT at a time so
// that their loads are in flight together.
fn row_parts(at: RowAt, t: u32, parts: u32) -> vec4<f32> {
    var acc = vec4<f32>(0.0);
    var i = t;
    for (; i + (IN_FLIGHT - 1u) * TPR < parts; i += IN_FLIGHT * TPR) {
        for (var k = 0u; k < IN_FLIGHT; k++) {
            acc += part_value(at, i + k * TPR);
        }
    }
    for (; i < parts; i += TPR) {
        acc += part_value(at, i);
    }
    return acc;
}

#ifdef DOT_I8
#ifdef XQ_LOCAL
#include "x_read.wgsl"

// XQ_LOCAL (gate/up products): the product quantizes its one x vector itself, each workgroup
// into its own memory (XQ_PARTS parts), so that no dispatch of its own (quantize_x.wgsl) comes
// before it: the part's packed terms, and its (scale, sum, Σx² of the raw values, unused). With
// NORM the records hold x times the norm's weights and the product divides by rms(x), as
// XQ_NORM's records.
var<workgroup> xl_q: array<vec4<u32>, XQ_PARTS>;
var<workgroup> xl_s: array<vec4<f32>, XQ_PARTS>;

// Quantizes the parts of the vector at xb. Call from uniform control flow, before any row reads
// its x.
fn stage_xq(xb: u32, parts: u32, lid: u32) {
    for (var i = lid; i < parts; i += WG) {
        let v = x_part(xb, i);
        let r = quantize_part(v.a, v.b);
        xl_q[i] = r.q;
        xl_s[i] = vec4<f32>(r.scale, r.sum, v.sq, 0.0);
    }
    workgroupBarrier();
}

// Part i of the workgroup's x, as stage_xq left it.
fn x_in(xb: u32, i: u32, k: vec2<u32>) -> XQuant {
    let s = xl_s[i];
    return XQuant(xl_q[i], s.x, s.y, s.z);
}
#else
// Part i of the vector whose records start at xb, as quantize_x.wgsl wrote it: xq holds every
// part's packed terms (one vec4 each), then from p.xq_scales on two parts' (scale, sum) per vec4.
// The decoder's vec4 indices k do not matter: quantized parts are vec4s j and j + 4 for every
// dtype.
fn x_in(xb: u32, i: u32, k: vec2<u32>) -> XQuant {
    let g = xb + i;
    let m = xq[p.xq_scales + (g >> 1u)];
    let scale_sum = bitcast<vec2<f32>>(select(m.xy, m.zw, (g & 1u) == 1u));
#ifdef XQ_NORM
    let sq = bitcast<f32>(xq[p.xq_sq + (g >> 2u)][g & 3u]);
#else
    let sq = 0.0;
#endif
    return XQuant(xq[g], scale_sum.x, scale_sum.y, sq);
}
#endif

// Σx² of the part's raw values with XQ_NORM or XQ_LOCAL; otherwise the quantization applied any
// norm, and none is summed.
fn x_sq(xi: XQuant) -> f32 {
    return xi.sq;
}
#else
#include "x_read.wgsl"

// The x values part i of the vector at xb meets: its unit's vec4s k.x and k.y (times the norm's
// weights with NORM), and Σx² of them (NORM).
fn x_in(xb: u32, i: u32, k: vec2<u32>) -> XPart {
    let c = (i >> 2u) * 32u;
    let a = x_vec4(xb, c + 4u * k.x);
    let b = x_vec4(xb, c + 4u * k.y);
#ifdef NORM
    return XPart(a * norm_vec4(c + 4u * k.x), b * norm_vec4(c + 4u * k.y), dot(a, a) + dot(b, b));
#else
    return XPart(a, b, 0.0);
#endif
}

fn x_sq(xi: XPart) -> f32 {
    return xi.sq;
}
#endif

// A row's dot product d from its reduced sums s: divided by rms(x) with NORM or XQ_NORM.
fn finish(d: f32, s: vec4<f32>) -> f32 {
#ifdef RMS
    return d * inverseSqrt(s.y / f32(p.cols) + p.eps);
#else
    return d;
#endif
}

#ifdef X_HALVES
// PACKED_F16 products, whose rows in a workgroup all meet one x vector: the workgroup converts
// x to the decoder's f16 pairs once (X_PARTS parts; the including kernel defines `fn
// x_part_halves(xb: u32, i: u32) -> array<vec2<f16>, 4>`), so that a row's part reads its x as
// one 16-byte load from workgroup memory, not two vec4 loads and four conversions per row.
var<workgroup> xh: array<array<vec2<f16>, 4>, X_PARTS>;

// Stages the parts of the vector at xb. Call from uniform control flow, before any row reads xh.
fn stage_x(xb: u32, parts: u32, lid: u32) {
    for (var i = lid; i < parts; i += WG) {
        xh[i] = x_part_halves(xb, i);
    }
    workgroupBarrier();
}
#endif

var<workgroup> partial: array<vec4<f32>, WG>;

// Sum of `v` over the TPR lanes of each row, valid in every lane. Call from uniform control
// flow; without subgroups pass sg_size 1.
fn row_sum(v: vec4<f32>, lid: u32, sg_size: u32, sg_lane: u32) -> vec4<f32> {
    workgroupBarrier();
#ifdef SUBGROUPS
    // Only the sums in use: each component is its own reduction across the subgroup.
#ifdef GLU
    let s = vec4<f32>(subgroupAdd(v.xyz), 0.0);
#else
#ifdef MULTI_ROW
    let s = subgroupAdd(v);
#else
#ifdef RMS
    let s = vec4<f32>(subgroupAdd(v.xy), 0.0, 0.0);
#else
    let s = vec4<f32>(subgroupAdd(v.x), 0.0, 0.0, 0.0);
#endif
#endif
#endif
    if (sg_lane == 0u) {
        partial[lid / sg_size] = s;
    }
    workgroupBarrier();
    let per_row = TPR / sg_size;
    var total = vec4<f32>(0.0);
    for (var i = 0u; i < per_row; i++) {
        total += partial[(lid / TPR) * per_row + i];
    }
    return total;
#else
    partial[lid] = v;
    workgroupBarrier();
    let t = lid % TPR;
    for (var step = TPR / 2u; step > 0u; step >>= 1u) {
        if (t < step) {
            partial[lid] += partial[lid + step];
        }
        workgroupBarrier();
    }
    return partial[lid - t];
#endif
}
