// The top-k routing of one token's router logits, shared by moe.wgsl's `route` and the expert
// gate/up product that routes its own token (matvec_multi.wgsl with ROUTE). Thread e of a
// workgroup of MAX_EXPERTS threads ranks expert e by counting the experts that come before it
// (a larger logit, or an equal one and a lower id), so the k threads of rank < k write the
// choice in one pass, with no serial selection. The including kernel declares `ids: array<u32>`
// and `weights: array<f32>` as read_write storage.
const MAX_EXPERTS: u32 = 256u;
const MAX_K: u32 = 32u;
var<workgroup> logit: array<f32, MAX_EXPERTS>;
var<workgroup> sums: array<f32, MAX_EXPERTS>;
var<workgroup> chosen: array<f32, MAX_K>;
var<workgroup> top: f32;

// Does expert a come before expert b: a larger logit, or an equal one and a lower id.
fn before(va: f32, a: u32, vb: f32, b: u32) -> bool {
    return va > vb || (va == vb && a < b);
}

// Thread e's expert: its logit and its rank among the `experts` logits (`experts` for threads
// past them). Every thread calls it, thread e < experts with its expert's logit `value`.
struct Ranked {
    rank: u32,
    v: f32,
}

fn route_rank(e: u32, experts: u32, value: f32) -> Ranked {
    let live = e < experts;
    if (live) {
        logit[e] = value;
    }
    workgroupBarrier();
    var rank = experts;
    let v = logit[min(e, MAX_EXPERTS - 1u)];
    if (live) {
        rank = 0u;
        for (var o = 0u; o < experts; o++) {
            rank += u32(before(logit[o], o, v, e));
        }
        if (rank == 0u) {
            top = v;
        }
    }
    workgroupBarrier();
    return Ranked(rank, v);
}

// Token t's k expert ids and their weights, from every thread's `route_rank`: the softmax over
// the chosen k with `renorm`, else over all experts. Call from uniform control flow.
fn route_write(t: u32, e: u32, r: Ranked, experts: u32, k: u32, renorm: bool) {
    let w = exp(r.v - top);
    if (r.rank < k) {
        ids[t * k + r.rank] = e;
        chosen[r.rank] = w;
    }
    sums[e] = select(0.0, w, e < experts);
    workgroupBarrier();
    if (!renorm) {
        for (var s = MAX_EXPERTS / 2u; s > 0u; s >>= 1u) {
            if (e < s) {
                sums[e] += sums[e + s];
            }
            workgroupBarrier();
        }
    }
    if (r.rank < k) {
        var denom = sums[0];
        if (renorm) {
            denom = 0.0;
            for (var s = 0u; s < k; s++) {
                denom += chosen[s];
            }
        }
        weights[t * k + r.rank] = w / denom;
    }
}
