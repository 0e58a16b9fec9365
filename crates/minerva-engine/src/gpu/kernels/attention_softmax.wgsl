// The matrix-core prefill attention's kernels without matrices (attention_coop.wgsl has the
// layouts), in a module of their own: one without cooperative matrices keeps naga's usual
// ordering of memory at barriers.
//   main    softmax: one subgroup of 32 lanes per (query row i, head of the pass), 8 per
//           workgroup, turns row i of S into weights P: scale · S over the keys 0..pos0 + i
//           (and the head's sink, which takes a share of the denominator and gives no value),
//           as f16, and zeros over the keys past them up to the end of the keys that the
//           values kernel reads for i's block of 32 queries. Rows past the step's queries get
//           zeros. Matrix cores come with subgroups of exactly 32 lanes.
//   gather  the output: the values kernel's partial sums over its key splits, added.

#include "attention_coop_params.wgsl"

@group(0) @binding(4) var<storage, read> s: array<f32>;
// f16 pairs, the lower key in the low half.
@group(0) @binding(5) var<storage, read_write> p16: array<u32>;
@group(0) @binding(6) var<storage, read> o: array<f32>;
#ifdef SINKS
@group(0) @binding(7) var<storage, read> sinks: array<f32>;
#endif
@group(0) @binding(8) var<storage, read_write> out: array<f32>;

const ROWS_PER_GROUP: u32 = 8u;

@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = wid.x * ROWS_PER_GROUP + lid / 32u;
    let lane = lid % 32u;
    let h = p.head0 + wid.y;
    // Keys 0..lim are seen by query i (none for rows past the step's queries or the heads).
    let live = i < step.tokens && h < p.heads;
    let lim = select(0u, step.pos0 + i + 1u, live);
    let row = (wid.y * p.rows + i) * p.row_len;
    // One pass for the maximum and the sum, rescaling the sum as the maximum grows.
    var m = -3.4e38;
    var l = 0.0;
    for (var j = lane; j < lim; j += 32u) {
        let x = s[row + j] * p.scale;
        let grown = max(m, x);
        l = l * exp(m - grown) + exp(x - grown);
        m = grown;
    }
    var top = subgroupMax(m);
#ifdef SINKS
    let sink = sinks[p.sinks_offset + min(h, p.heads - 1u)];
    top = max(top, sink);
#endif
    var sum = subgroupAdd(l * exp(m - top));
#ifdef SINKS
    sum += exp(sink - top);
#endif
    let inv = select(0.0, 1.0 / sum, sum > 0.0 && live);
    if (h >= p.heads) {
        return;
    }
    let zeros_to = (block_end(i & ~31u) + 15u) & ~15u;
    for (var j = 2u * lane; j < zeros_to; j += 64u) {
        var w = vec2<f32>(0.0);
        if (j < lim) {
            w.x = exp(s[row + j] * p.scale - top) * inv;
        }
        if (j + 1u < lim) {
            w.y = exp(s[row + j + 1u] * p.scale - top) * inv;
        }
        p16[(row + j) / 2u] = pack2x16float(w);
    }
}

// Value c of query t: the sum of the splits that the block of t saw keys in.
@compute @workgroup_size(256)
fn gather(@builtin(global_invocation_id) gid: vec3<u32>) {
    let c = gid.x;
    let t = gid.y;
    if (c >= p.q_row || t >= step.tokens) {
        return;
    }
    let end = block_end(t & ~31u);
    let keys = split_keys(end);
    var acc = 0.0;
    for (var split = 0u; split * keys < end; split++) {
        acc += o[(split * p.rows + t) * p.q_row + c];
    }
    out[p.out_offset + t * p.q_row + c] = acc;
}
