// Choosing tokens on the GPU so that one small read back per step suffices:
//   argmax  the index of the largest logit of each row (ties → lowest index).
//   topk    the k largest logits of one row with their indices, best first.
struct Params {
    n: u32,
    rows: u32,
    k: u32,
    offset: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> logits: array<f32>;
@group(0) @binding(2) var<storage, read_write> ids: array<u32>;
#ifdef TOPK
@group(0) @binding(3) var<storage, read_write> values: array<f32>;
#endif

const WG: u32 = 256u;
var<workgroup> best_v: array<f32, WG>;
var<workgroup> best_i: array<u32, WG>;

// Is (v, i) better than (bv, bi): larger value, or equal value and lower index.
fn better(v: f32, i: u32, bv: f32, bi: u32) -> bool {
    return v > bv || (v == bv && i < bi);
}

fn taken(i: u32, row: u32, count: u32) -> bool {
    for (var q = 0u; q < count; q++) {
        if (ids[row * p.k + q] == i) {
            return true;
        }
    }
    return false;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let row = wid.x;
    let base = p.offset + row * p.n;
#ifdef TOPK
    let rounds = p.k;
#else
    let rounds = 1u;
#endif
    for (var s = 0u; s < rounds; s++) {
        var bv = -3.4e38;
        var bi = 0xFFFFFFFFu;
        for (var i = lid; i < p.n; i += WG) {
            let v = logits[base + i];
            if (better(v, i, bv, bi) && !taken(i, row, s)) {
                bv = v;
                bi = i;
            }
        }
        best_v[lid] = bv;
        best_i[lid] = bi;
        workgroupBarrier();
        for (var st = WG / 2u; st > 0u; st >>= 1u) {
            if (lid < st && better(best_v[lid + st], best_i[lid + st], best_v[lid], best_i[lid])) {
                best_v[lid] = best_v[lid + st];
                best_i[lid] = best_i[lid + st];
            }
            workgroupBarrier();
        }
        if (lid == 0u) {
            ids[row * p.k + s] = best_i[0];
#ifdef TOPK
            values[row * p.k + s] = best_v[0];
#endif
        }
        storageBarrier();
        workgroupBarrier();
    }
}
