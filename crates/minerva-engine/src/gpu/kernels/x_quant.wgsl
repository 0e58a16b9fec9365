// x as two int8 terms per part of 8 values, for the int8 decode products (DOT_I8): the record
// a part's values become, and the quantization that kernels writing such records share
// (quantize_x.wgsl; attention.wgsl's decode merge with DEC_XQ).

// A part's x values as two int8 terms, quantized once per vector (quantize_x.wgsl): with scale
// s = max|v| / 127 over the part's 8 values and t = v / s, coarse = round(t) and
// fine = round(254 · t) - 254 · coarse, the rounded remainder in [-127, 127], so
// v = s · (coarse + fine / 254) within s / 508: about 15 bits of each value where one int8 holds
// 8 (whose error, 1/254 of a part's max|v|, moved greedy logits by 0.04-0.07). A part holds
// vec4s j and j + 4 of its unit whatever the weight's dtype, so one quantized x serves Q4_0 and
// Q8_0 weights alike. q: the coarse term's two vec4s as packed bytes, then the fine term's;
// scale: s (times 1 / rms(x) where the quantization applied a norm); sum: Σ (coarse + fine / 254)
// over the part, which Q4_0's offset of 8 per nibble multiplies; sq: Σx² of the part's values
// before a norm's weights where the records hold x times them (XQ_NORM, product.wgsl), else 0.
struct XQuant {
    q: vec4<u32>,
    scale: f32,
    sum: f32,
    sq: f32,
}

// A part's integer dot products with the coarse and fine terms as one float, in x's steps.
// Plain conversions: a bias trick (n + 1.5·2^23 read as a float, minus 1.5·2^23) loses the
// low bits where a compiler reassociates the subtraction with the sum (common.wgsl, bytes4).
fn join_terms(coarse: i32, fine: i32) -> f32 {
    return f32(coarse) + f32(fine) * (1.0 / 254.0);
}

// A part's codes as signed bytes, `low` meeting x's vec4 j and `high` its vec4 j + 4, against
// both of x's terms, joined in x's steps.
fn codes_dot(low: u32, high: u32, x: XQuant) -> f32 {
    let coarse = dot4I8Packed(low, x.q.x) + dot4I8Packed(high, x.q.y);
    let fine = dot4I8Packed(low, x.q.z) + dot4I8Packed(high, x.q.w);
    return join_terms(coarse, fine);
}

// Codes as bytes, low (meeting x vec4 j) and high (vec4 j + 4), that stand for n · d + m
// (dm = (d, m)), against x.
fn offset_dot(low: u32, high: u32, dm: vec2<f32>, x: XQuant) -> f32 {
    return codes_dot(low, high, x) * dm.x + x.sum * dm.y;
}

// Four values rounded to the nearest integers.
fn rounded(v: vec4<f32>) -> vec4<i32> {
    return vec4<i32>(round(v));
}

// Σ of the four int8 values packed in a word.
fn byte_sum(w: u32) -> i32 {
    return dot4I8Packed(w, 0x01010101u);
}

// A part's 8 values a, b as two int8 terms with scale max|v| / 127 (see XQuant); the sum
// counts the values' steps only.
fn quantize_part(a: vec4<f32>, b: vec4<f32>) -> XQuant {
    let m = max(abs(a), abs(b));
    let amax = max(max(m.x, m.y), max(m.z, m.w));
    // Parts of zeros, or so small that 127 / amax could overflow, contribute nothing.
    let inv = select(0.0, 127.0 / amax, amax >= 1e-30);
    let ca = rounded(a * inv);
    let cb = rounded(b * inv);
    // The fine term: the remainder of 254 · t after 254 · coarse, in [-127, 127].
    let inv_fine = 254.0 * inv;
    let fa = rounded(a * inv_fine) - 254 * ca;
    let fb = rounded(b * inv_fine) - 254 * cb;
    let q = vec4<u32>(pack4xI8(ca), pack4xI8(cb), pack4xI8(fa), pack4xI8(fb));
    let sum = join_terms(byte_sum(q.x) + byte_sum(q.y), byte_sum(q.z) + byte_sum(q.w));
    return XQuant(q, amax / 127.0, sum, 0.0);
}

#ifdef XQ_OUT
// Stores part g's record in `xq` (the writer's read_write binding), whose scales start at vec4
// `scales`, two parts' (scale, sum) per vec4: the part's scale times `scale_by`.
fn store_record(g: u32, scales: u32, r: XQuant, scale_by: f32) {
    xq[g] = r.q;
    let k = 2u * (g & 1u);
    xq[scales + (g >> 1u)][k] = bitcast<u32>(r.scale * scale_by);
    xq[scales + (g >> 1u)][k + 1u] = bitcast<u32>(r.sum);
}

// Stores part g's Σx² (XQ_NORM's records) in the four-per-vec4 region from vec4 `sq_at`.
fn store_sq(g: u32, sq_at: u32, sq: f32) {
    xq[sq_at + (g >> 2u)][g & 3u] = bitcast<u32>(sq);
}
#endif
