// Units of 32 values assembled from a decoder's four parts. Decoders define `load_part(row, u,
// j, cols) -> Part` (part j of unit u of a row) and PART_SPLIT: whether part j holds the unit's
// vec4s j and j + 4 (nibble blocks: low and high nibbles of the same bytes) or 2j and 2j + 1.
// Decode products read parts, so that four neighbouring lanes share a unit and their loads of
// weights and of x fall on neighbouring addresses; prefill tiles and embedding rows read units.

#ifdef SCALED_PARTS
// Decoders with SCALED_PARTS define `load_scaled_part` instead (values and the multiplier the
// products apply once per part); the others' parts carry a multiplier of 1.
fn load_part(row: u32, u: u32, j: u32, cols: u32) -> Part {
    let p = load_scaled_part(row, u, j, cols);
    return Part(p.vals[0] * p.mult, p.vals[1] * p.mult);
}
#else
fn load_scaled_part(row: u32, u: u32, j: u32, cols: u32) -> ScaledPart {
    return ScaledPart(load_part(row, u, j, cols), 1.0);
}
#endif

// Part j of unit u of a row against the x values it meets: the decode products' dot product.
// With DOT_I8 the x values come as two int8 terms (common.wgsl) and the decoder (Q4_0, Q8_0)
// defines `dot_i8_part`: its integer dot products with both, joined, times the block's scale.
#ifdef DOT_I8
fn part_dot(row: u32, u: u32, j: u32, cols: u32, x: XQuant) -> f32 {
    return dot_i8_part(row, u, j, cols, x) * x.scale;
}
#else
#ifdef PACKED_F16
// E2M1 weights against x in packed f16 (HalfPart, common.wgsl): x as the part's f16 pairs, in
// the order of the decoder's `x_halves`.
fn half_part_dot(row: u32, u: u32, j: u32, cols: u32, x: array<vec2<f16>, 4>) -> f32 {
    let w = load_half_part(row, u, j, cols);
    return dot_halves(w.vals, x) * w.mult;
}

fn part_dot(row: u32, u: u32, j: u32, cols: u32, x: XPart) -> f32 {
    return half_part_dot(row, u, j, cols, x_halves(x.a, x.b));
}
#else
fn part_dot(row: u32, u: u32, j: u32, cols: u32, x: XPart) -> f32 {
    let w = load_scaled_part(row, u, j, cols);
    return (dot(w.vals[0], x.a) + dot(w.vals[1], x.b)) * w.mult;
}
#endif
#endif

// The unit's vec4 indices that part j holds.
fn part_k(j: u32) -> vec2<u32> {
    if (PART_SPLIT) {
        return vec2<u32>(j, j + 4u);
    }
    return vec2<u32>(2u * j, 2u * j + 1u);
}

fn load_unit(row: u32, u: u32, cols: u32) -> Unit {
    var out: Unit;
    for (var j = 0u; j < 4u; j++) {
        let p = load_part(row, u, j, cols);
        let k = part_k(j);
        out[k.x] = p[0];
        out[k.y] = p[1];
    }
    return out;
}
