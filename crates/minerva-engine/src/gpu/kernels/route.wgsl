// MoE routing of one token by one workgroup, shared by moe.wgsl (`route`) and the router's
// decode product (matvec.wgsl with ROUTE, in its last workgroup): the k largest of E router
// logits → expert ids and their softmax weights (over the chosen k when renormalizing, else over
// all E). One thread per expert. The including kernel declares `ids: array<u32>` and
// `weights: array<f32>` (read_write storage) and the constant ROUTE_THREADS: its workgroup size,
// a power of two, at least E.

const ROUTE_MAX_K: u32 = 32u;
var<workgroup> route_logit: array<f32, ROUTE_THREADS>;
var<workgroup> route_sums: array<f32, ROUTE_THREADS>;
var<workgroup> route_chosen: array<f32, ROUTE_MAX_K>;
var<workgroup> route_top: f32;

// Does expert a come before expert b: a larger logit, or an equal one and a lower id.
fn route_before(va: f32, a: u32, vb: f32, b: u32) -> bool {
    return va > vb || (va == vb && a < b);
}

// Thread e's part of routing the logits in route_logit[0..experts) into slots out..out + k of
// ids and weights. Each thread counts the experts that come before its own: that count is its
// rank, so the k threads of rank < k write the choice in one pass, with no serial selection.
// Call from uniform control flow (every argument but e the same in every thread), after a
// workgroupBarrier that follows the stores of route_logit.
fn route_logits(e: u32, experts: u32, k: u32, renorm: bool, out: u32) {
    let live = e < experts;
    var rank = experts;
    let v = route_logit[e];
    if (live) {
        rank = 0u;
        for (var o = 0u; o < experts; o++) {
            rank += u32(route_before(route_logit[o], o, v, e));
        }
        if (rank == 0u) {
            route_top = v;
        }
    }
    workgroupBarrier();
    let w = exp(v - route_top);
    if (rank < k) {
        ids[out + rank] = e;
        route_chosen[rank] = w;
    }
    // The softmax denominator: Σ over all experts (a tree over the workgroup) or over the k.
    route_sums[e] = select(0.0, w, live);
    workgroupBarrier();
    if (!renorm) {
        for (var s = ROUTE_THREADS / 2u; s > 0u; s >>= 1u) {
            if (e < s) {
                route_sums[e] += route_sums[e + s];
            }
            workgroupBarrier();
        }
    }
    if (rank < k) {
        var denom = route_sums[0];
        if (renorm) {
            denom = 0.0;
            for (var s = 0u; s < k; s++) {
                denom += route_chosen[s];
            }
        }
        weights[out + rank] = w / denom;
    }
}
