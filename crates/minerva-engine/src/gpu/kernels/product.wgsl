// What the decode products (matvec.wgsl, matvec_multi.wgsl) share: the loop of a row's lanes
// over its parts, x read as vec4s, the RMSNorm that NORM folds into a product, and sums over a
// row's lanes. The including kernel declares `x: array<vec4<f32>>`, the uniform `p` (fields
// cols, norm_offset, eps), with NORM `norm_w: array<vec4<f32>>` (the norm's weight), the
// constants WG, TPR (lanes per row) and IN_FLIGHT (parts whose loads a lane issues together), and `fn part_value(at: RowAt, i: u32) -> vec4<f32>`: the
// sums that part i of the row adds (x: a dot product, y: Σx² of the x values read, z: a second
// dot product, w: unused).
//
// NORM: the product of W with RMSNorm(x)·g equals (W · (x∘g)) / rms(x), and a row's lanes read
// every value of x anyway, so they also sum x² on the way: the norm costs no dispatch and no
// pass of its own.

// Where a row's work is: its stored weight row (and the second weight's, for the gate/up
// product), its x vector, its output row.
struct RowAt {
    w_row: u32,
    up_row: u32,
    xb: u32,
    row: u32,
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

// x values c..c+3 of the vector at xb, zero past the row's end.
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

#ifdef NORM
// Norm weights c..c+3, zero past the row's end.
fn norm_vec4(c: u32) -> vec4<f32> {
    let i = p.norm_offset + c;
    if (c + 4u <= p.cols && (i & 3u) == 0u) {
        return norm_w[i >> 2u];
    }
    var v = vec4<f32>(0.0);
    for (var j = 0u; j < 4u; j++) {
        if (c + j < p.cols) {
            v[j] = norm_w[(i + j) >> 2u][(i + j) & 3u];
        }
    }
    return v;
}
#endif

// The x values a part meets: vec4s k.x and k.y of the unit starting at column c of the vector
// at xb (times the norm's weights with NORM), and Σx² of them (NORM).
fn x_part(xb: u32, c: u32, k: vec2<u32>) -> XPart {
    let a = x_vec4(xb, c + 4u * k.x);
    let b = x_vec4(xb, c + 4u * k.y);
#ifdef NORM
    return XPart(a * norm_vec4(c + 4u * k.x), b * norm_vec4(c + 4u * k.y), dot(a, a) + dot(b, b));
#else
    return XPart(a, b, 0.0);
#endif
}

// The x values as the weights' `part_dot` takes them (unit.wgsl): with DOT_I8 quantized to
// int8, once per part for all the weights and rows a lane meets there.
#ifdef DOT_I8
fn x_for_weights(xp: XPart) -> XQuant {
    return quantize_part(xp);
}
#else
fn x_for_weights(xp: XPart) -> XPart {
    return xp;
}
#endif

// A row's dot product d from its reduced sums s: divided by rms(x) with NORM.
fn finish(d: f32, s: vec4<f32>) -> f32 {
#ifdef NORM
    return d * inverseSqrt(s.y / f32(p.cols) + p.eps);
#else
    return d;
#endif
}

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
#ifdef NORM
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
