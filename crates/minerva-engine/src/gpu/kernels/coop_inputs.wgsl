// Prefill inputs converted to f16 for the matrix-core product (matmul_coop.wgsl): row t of x
// (`cols` values from x_offset + t · x_stride) becomes row t of `out`, `stride` halves long (a
// multiple of 32), zeros past the row's end; values saturate at ±65504. One thread per four
// values.

struct Params {
    cols: u32,
    stride: u32,
    tokens: u32,
    x_offset: u32,
    x_stride: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
// f16 pairs, low half first: halves 4i .. 4i + 3 of `out` are vec2 i.
@group(0) @binding(1) var<storage, read_write> out: array<vec2<u32>>;
@group(0) @binding(2) var<uniform> p: Params;

const F16_MAX: f32 = 65504.0;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let c = 4u * gid.x;
    let t = gid.y;
    if (c >= p.stride || t >= p.tokens) {
        return;
    }
    var v = vec4<f32>(0.0);
    for (var i = 0u; i < 4u; i++) {
        if (c + i < p.cols) {
            v[i] = clamp(x[p.x_offset + t * p.x_stride + c + i], -F16_MAX, F16_MAX);
        }
    }
    out[(t * p.stride + c) / 4u] = vec2<u32>(pack2x16float(v.xy), pack2x16float(v.zw));
}
