// The parameters of the matrix-core prefill attention's kernels (attention_coop.wgsl,
// attention_softmax.wgsl), and the step's uniform (positions pos0.., `tokens` queries).
struct Params {
    heads: u32,     // query heads
    group: u32,     // query heads per KV head
    head_dim: u32,  // a multiple of 64
    kv_row: u32,    // cache values per position: KV heads · head_dim
    q_row: u32,     // values per query of q16 and of O: heads · head_dim
    row_len: u32,   // keys per row of S and P: a multiple of 32
    rows: u32,      // query rows per head of S and P: the step's queries rounded up to 32
    head0: u32,     // the pass's first head
    scale: f32,
    sinks_offset: u32,
    out_offset: u32, // where the attention's output starts in `out`
    _pad0: u32,
}

#include "step.wgsl"

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<uniform> step: Step;

// The values kernel splits each block's keys into KEY_SPLITS ranges, each a workgroup of its
// own, so that no workgroup walks a long prompt's keys alone; `gather` adds their partial sums.
const KEY_SPLITS: u32 = 4u;

// Keys the block of 32 queries from t0 sees: 0..end.
fn block_end(t0: u32) -> u32 {
    return min(step.pos0 + t0 + 32u, step.pos0 + step.tokens);
}

// Keys per split of that block: its keys shared out in multiples of 16 (the matrices' depth).
fn split_keys(end: u32) -> u32 {
    return (end + KEY_SPLITS * 16u - 1u) / (KEY_SPLITS * 16u) * 16u;
}
