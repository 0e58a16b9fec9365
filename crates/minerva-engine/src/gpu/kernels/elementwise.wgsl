// Element-wise ops over rows of n values (tokens × n): ADD (y += a), COPY (y = a), SWIGLU (y = silu(a) · b) and
// GLU_OSS, gpt-oss's clamped variant: y = (clamp(b, −7, 7) + 1) · g · σ(1.702 g), g = min(a, 7).
// Each operand has its own offset and row stride, so halves of one buffer can be operands.
struct Params {
    n: u32,
    rows: u32,
    a_offset: u32,
    a_stride: u32,
    b_offset: u32,
    b_stride: u32,
    y_offset: u32,
    y_stride: u32,
}

@group(0) @binding(0) var<storage, read> a: array<f32>;
#ifndef ONE_INPUT
@group(0) @binding(1) var<storage, read> b: array<f32>;
#endif
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = gid.x + gid.y * groups.x * 256u;
    if (i >= p.n * p.rows) {
        return;
    }
    let r = i / p.n;
    let c = i % p.n;
    let av = a[p.a_offset + r * p.a_stride + c];
    let yi = p.y_offset + r * p.y_stride + c;
#ifdef OP_ADD
    y[yi] += av;
#endif
#ifdef OP_COPY
    y[yi] = av;
#endif
#ifdef OP_SWIGLU
    let bv = b[p.b_offset + r * p.b_stride + c];
    y[yi] = av / (1.0 + exp(-av)) * bv;
#endif
#ifdef OP_GLU_OSS
    let g = min(av, 7.0);
    let u = clamp(b[p.b_offset + r * p.b_stride + c], -7.0, 7.0);
    y[yi] = (u + 1.0) * g / (1.0 + exp(-1.702 * g));
#endif
}
