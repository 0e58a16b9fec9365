// Reads of a vector x and of a norm's weights as vec4s from any element offset, zero past the
// vector's end, and of the parts the int8 records hold. The including kernel declares
// `x: array<vec4<f32>>`, the uniform `p` (fields cols, norm_offset) and, with NORM,
// `norm_w: array<vec4<f32>>`.

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

// Part i of the vector at xb as x_quant.wgsl's records hold it (vec4s j and j + 4 of its unit):
// its values, times the norm's weights with NORM, and Σx² of the values before them.
fn x_part(xb: u32, i: u32) -> XPart {
    let c = (i >> 2u) * 32u + 4u * (i & 3u);
    let a = x_vec4(xb, c);
    let b = x_vec4(xb, c + 16u);
    let sq = dot(a, a) + dot(b, b);
#ifdef NORM
    return XPart(a * norm_vec4(c), b * norm_vec4(c + 16u), sq);
#else
    return XPart(a, b, sq);
#endif
}
