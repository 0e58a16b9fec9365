// Mixture-of-experts on the GPU, no CPU round trip:
//   route    per token: the k largest router logits → expert ids and their softmax weights
//            (over the chosen k when `renorm` is set, else over all experts).
//   combine  y[t] = Σ_s weight[t·k + s] · expert_out[t·k + s].
//   scatter  y[t][e] = the routing weight of expert e for token t (0 when not chosen), for
//            experts that are separate tensors and run densely.
struct Params {
    experts: u32,
    k: u32,
    tokens: u32,
    renorm: u32,
    n: u32,          // combine: values per token
    logits_offset: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read_write> ids: array<u32>;
@group(0) @binding(3) var<storage, read_write> weights: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(64)
fn route(@builtin(global_invocation_id) gid: vec3<u32>) {
    let t = gid.x;
    if (t >= p.tokens) {
        return;
    }
    let base = p.logits_offset + t * p.experts;
    var top = -3.0e38;
    for (var e = 0u; e < p.experts; e++) {
        top = max(top, src[base + e]);
    }
    var all = 0.0;
    for (var e = 0u; e < p.experts; e++) {
        all += exp(src[base + e] - top);
    }
    // Selection by repeated maximum: k is small (≤ 8 in practice), ties go to the lower id.
    var chosen_sum = 0.0;
    for (var s = 0u; s < p.k; s++) {
        var best = 0xFFFFFFFFu;
        var best_v = -3.4e38;
        for (var e = 0u; e < p.experts; e++) {
            var taken = false;
            for (var q = 0u; q < s; q++) {
                taken = taken || ids[t * p.k + q] == e;
            }
            let v = src[base + e];
            if (!taken && (best == 0xFFFFFFFFu || v > best_v)) {
                best = e;
                best_v = v;
            }
        }
        ids[t * p.k + s] = best;
        let w = exp(best_v - top);
        weights[t * p.k + s] = w;
        chosen_sum += w;
    }
    let denom = select(all, chosen_sum, p.renorm != 0u);
    for (var s = 0u; s < p.k; s++) {
        weights[t * p.k + s] /= denom;
    }
}

@compute @workgroup_size(64)
fn combine(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    let t = gid.y;
    if (i >= p.n || t >= p.tokens) {
        return;
    }
    var acc = 0.0;
    for (var s = 0u; s < p.k; s++) {
        let slot = t * p.k + s;
        acc += weights[slot] * src[slot * p.n + i];
    }
    y[t * p.n + i] = acc;
}

@compute @workgroup_size(64)
fn scatter(@builtin(global_invocation_id) gid: vec3<u32>) {
    let e = gid.x;
    let t = gid.y;
    if (e >= p.experts || t >= p.tokens) {
        return;
    }
    var w = 0.0;
    for (var s = 0u; s < p.k; s++) {
        if (ids[t * p.k + s] == e) {
            w += weights[t * p.k + s];
        }
    }
    y[t * p.experts + e] = w;
}
