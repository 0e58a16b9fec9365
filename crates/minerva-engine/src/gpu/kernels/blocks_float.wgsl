// Plain float weights (f32, f16, bf16). Rows may have any length: values past the row's end
// decode as zero, so a unit never reads another row. With INPUT_MAJOR the stored matrices are
// [inputs][IN_STRIDE outputs] (Hugging Face gpt-oss experts): "row" m·IN_STRIDE + j is output column j of
// matrix m, and its `cols` inputs are IN_STRIDE apart.
#include "common.wgsl"
#include "weights.wgsl"

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

fn load_unit(row: u32, u: u32, cols: u32) -> Unit {
    var out: Unit;
    let first = u * 32u;
#ifdef INPUT_MAJOR
    let m = row / IN_STRIDE;
    let base0 = m * cols * IN_STRIDE + first * IN_STRIDE + row % IN_STRIDE;
    for (var k = 0u; k < 8u; k++) {
        var v = vec4<f32>(0.0);
        for (var j = 0u; j < 4u; j++) {
            if (first + 4u * k + j < cols) {
                v[j] = float_at(base0 + (4u * k + j) * IN_STRIDE);
            }
        }
        out[k] = v;
    }
    return out;
#else
    let base = row * cols + first;
#ifndef DT_F32
    // A whole unit starting on a word: 16 words of two halves each.
    if (first + 32u <= cols && (base & 1u) == 0u) {
        let w = base >> 1u;
        for (var k = 0u; k < 8u; k++) {
            let a = w0[w + 2u * k];
            let b = w0[w + 2u * k + 1u];
#ifdef DT_F16
            out[k] = vec4<f32>(unpack2x16float(a), unpack2x16float(b));
#else
            out[k] = vec4<f32>(bitcast<f32>(a << 16u), bitcast<f32>(a & 0xFFFF0000u), bitcast<f32>(b << 16u), bitcast<f32>(b & 0xFFFF0000u));
#endif
        }
        return out;
    }
#endif
    if (first + 32u <= cols) {
        for (var k = 0u; k < 8u; k++) {
            let e = base + 4u * k;
            out[k] = vec4<f32>(float_at(e), float_at(e + 1u), float_at(e + 2u), float_at(e + 3u));
        }
    } else {
        for (var k = 0u; k < 8u; k++) {
            var v = vec4<f32>(0.0);
            for (var j = 0u; j < 4u; j++) {
                if (first + 4u * k + j < cols) {
                    v[j] = float_at(base + 4u * k + j);
                }
            }
            out[k] = v;
        }
    }
    return out;
#endif
}
