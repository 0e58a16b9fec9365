// Plain float weights (f32, f16, bf16); part j of a unit is its values 8j..8j+7. Rows may have
// any length: values past the row's end decode as zero, so a unit never reads another row. With
// INPUT_MAJOR the stored matrices are [inputs][IN_STRIDE outputs] (Hugging Face gpt-oss
// experts): "row" m·IN_STRIDE + j is output column j of matrix m, and its `cols` inputs are
// IN_STRIDE apart.
#include "common.wgsl"
#include "weights.wgsl"

const PART_SPLIT: bool = false;

fn float_at(e: u32) -> f32 {
#ifdef DT_F32
    return bitcast<f32>(w0[e]);
#endif
#ifdef DT_F16
    return f16_bits(w0[e >> 1u] >> ((e & 1u) * 16u));
#endif
#ifdef DT_BF16
    return bf16_bits(w0[e >> 1u] >> ((e & 1u) * 16u));
#endif
}

// Four values of a row from element `e` on, with `first` the first's column: zero past `cols`.
fn float4_at(e: u32, first: u32, cols: u32, step: u32) -> vec4<f32> {
    var v = vec4<f32>(0.0);
    for (var i = 0u; i < 4u; i++) {
        if (first + i < cols) {
            v[i] = float_at(e + i * step);
        }
    }
    return v;
}

fn load_part(row: u32, u: u32, j: u32, cols: u32) -> Part {
    let first = u * 32u + 8u * j;
#ifdef INPUT_MAJOR
    let m = row / IN_STRIDE;
    let e = m * cols * IN_STRIDE + first * IN_STRIDE + row % IN_STRIDE;
    return Part(
        float4_at(e, first, cols, IN_STRIDE),
        float4_at(e + 4u * IN_STRIDE, first + 4u, cols, IN_STRIDE),
    );
#else
    let e = row * cols + first;
    if (first + 8u <= cols) {
#ifdef DT_F32
        return Part(
            vec4<f32>(bitcast<f32>(w0[e]), bitcast<f32>(w0[e + 1u]), bitcast<f32>(w0[e + 2u]), bitcast<f32>(w0[e + 3u])),
            vec4<f32>(bitcast<f32>(w0[e + 4u]), bitcast<f32>(w0[e + 5u]), bitcast<f32>(w0[e + 6u]), bitcast<f32>(w0[e + 7u])),
        );
#else
        // Four words of two halves each, when the part starts on a word.
        if ((e & 1u) == 0u) {
            let w = e >> 1u;
            let a = w0[w];
            let b = w0[w + 1u];
            let c = w0[w + 2u];
            let d = w0[w + 3u];
#ifdef DT_F16
            return Part(
                vec4<f32>(unpack2x16float(a), unpack2x16float(b)),
                vec4<f32>(unpack2x16float(c), unpack2x16float(d)),
            );
#else
            return Part(
                vec4<f32>(bitcast<f32>(a << 16u), bitcast<f32>(a & 0xFFFF0000u), bitcast<f32>(b << 16u), bitcast<f32>(b & 0xFFFF0000u)),
                vec4<f32>(bitcast<f32>(c << 16u), bitcast<f32>(c & 0xFFFF0000u), bitcast<f32>(d << 16u), bitcast<f32>(d & 0xFFFF0000u)),
            );
#endif
        }
#endif
    }
    return Part(float4_at(e, first, cols, 1u), float4_at(e + 4u, first + 4u, cols, 1u));
#endif
}

#include "unit.wgsl"
