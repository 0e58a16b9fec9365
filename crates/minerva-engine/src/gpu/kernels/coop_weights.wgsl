// Weight rows decoded to f16 for the matrix-core product (matmul_coop.wgsl): output row j of the
// product (stored row row_base + j · row_stride of this part, DECODER) becomes row first_out + j
// of `out`, `stride` halves long (the row length rounded up to whole 32-value units), zeros past
// the row's end. Each thread decodes one part (8 values) of DECODE_ROWS consecutive rows and
// writes them as two pairs of halves per vec4, so that neighbouring lanes write neighbouring
// bytes. Values saturate at ±65504
// instead of overflowing. With BIAS the first thread of each row also copies the row's bias into
// all 16 columns of `bias_block` ([16][out_rows], the accumulators' starting values).
#include "common.wgsl"
#include DECODER

struct Params {
    rows: u32,          // rows of this part: outputs first_out .. first_out + rows
    cols: u32,
    stride: u32,        // halves per row of `out`, a multiple of 32
    first_out: u32,
    row_base: u32,      // output first_out + j reads stored row row_base + j · row_stride
    row_stride: u32,
    bias_offset: u32,   // BIAS: output first_out + j adds bias[bias_offset + j]
    out_rows: u32,      // rows of the whole product (of `out` and of `bias_block`)
}

// f16 pairs, low half first: halves 4i .. 4i + 3 of `out` are vec2 i.
@group(0) @binding(3) var<storage, read_write> out: array<vec2<u32>>;
@group(0) @binding(4) var<uniform> p: Params;
#ifdef BIAS
@group(0) @binding(5) var<storage, read> bias: array<f32>;
@group(0) @binding(6) var<storage, read_write> bias_block: array<f32>;
#endif

// Four values from column `c` on as two f16 pairs (`f16_four`).
fn half4(v: vec4<f32>, c: u32) -> vec2<u32> {
    let h = f16_four(v, c, p.cols);
    return vec2<u32>(pack2x16float(h.xy), pack2x16float(h.zw));
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let u = gid.x / 4u;
    if (u >= (p.cols + 31u) / 32u) {
        return;
    }
    for (var i = 0u; i < DECODE_ROWS; i++) {
        let r = gid.y * DECODE_ROWS + i;
        if (r >= p.rows) {
            return;
        }
        decode_row(gid.x, r);
    }
}

// Part gid.x % 4 of unit gid.x / 4 of output row r.
fn decode_row(lane: u32, r: u32) {
    let u = lane / 4u;
    let j = lane % 4u;
#ifdef BIAS
    if (lane == 0u) {
        let b = bias[p.bias_offset + r];
        for (var t = 0u; t < 16u; t++) {
            bias_block[t * p.out_rows + p.first_out + r] = b;
        }
    }
#endif
    let part = load_part(p.row_base + r * p.row_stride, u, j, p.cols);
    let k = part_k(j);
    let row = (p.first_out + r) * p.stride + u * 32u;
    out[(row + 4u * k.x) / 4u] = half4(part[0], u * 32u + 4u * k.x);
    out[(row + 4u * k.y) / 4u] = half4(part[1], u * 32u + 4u * k.y);
}
