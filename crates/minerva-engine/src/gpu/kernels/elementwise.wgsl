// Element-wise ops over rows of n values (tokens × n): ADD (y += a), COPY (y = a), SWIGLU
// (y = silu(a) · b), GLU_OSS, gpt-oss's clamped variant: y = (clamp(b, −limit, limit) + 1) · g ·
// σ(alpha · g) with g = min(a, limit), and SCALED_ADD: y += a · s with one scalar s per row read
// from b (σ(s) with SIGMOID: Qwen's gated shared expert).
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
    alpha: f32,
    limit: f32,
    _pad0: u32,
    _pad1: u32,
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
    let g = min(av, p.limit);
    let u = clamp(b[p.b_offset + r * p.b_stride + c], -p.limit, p.limit);
    y[yi] = (u + 1.0) * g / (1.0 + exp(-p.alpha * g));
#endif
#ifdef OP_SCALED_ADD
    var sc = b[p.b_offset + r * p.b_stride];
#ifdef SIGMOID
    sc = 1.0 / (1.0 + exp(-sc));
#endif
    y[yi] += av * sc;
#endif
}
