// The partial sums of a matrix-core product split along its inputs (matmul_coop.wgsl), added:
// y[t][r] = Σ_s part[s · split_stride + t · rows + r] (+ bias[r] with BIAS), for the step's
// `tokens` tokens only (the product's last block of tokens may run past them). One thread per
// output.

struct Params {
    rows: u32,
    tokens: u32,
    splits: u32,
    split_stride: u32,
    y_offset: u32,
    y_stride: u32,
    bias_offset: u32,
    _pad: u32,
}

@group(0) @binding(0) var<storage, read> part: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;
#ifdef BIAS
@group(0) @binding(3) var<storage, read> bias: array<f32>;
#endif

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let r = gid.x;
    let t = gid.y;
    if (r >= p.rows || t >= p.tokens) {
        return;
    }
    var acc = 0.0;
    for (var s = 0u; s < p.splits; s++) {
        acc += part[s * p.split_stride + t * p.rows + r];
    }
#ifdef BIAS
    acc += bias[p.bias_offset + r];
#endif
    y[p.y_offset + t * p.y_stride + r] = acc;
}
