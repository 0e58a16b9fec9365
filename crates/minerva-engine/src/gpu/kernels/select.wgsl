// Choosing tokens on the GPU so that one small read back per step suffices: the k largest logits
// of each row with their indices, best first, ties to the lowest index (argmax: k = 1; TOPK also
// writes the values). Workgroup (block, row) picks the best `kept` of its `block` logits, in
// order, into its list in `partial`; the last workgroup of the row to finish merges the rows'
// lists. Lists and the per-row counts of finished workgroups are atomics, so that the merging
// workgroup reads them at the level every SM writes to; the count goes back to 0 after the merge.
// Without SORTED a list is made one pick at a time (a tree of barriers per pick: right for
// argmax, ≈ 3 µs a pick on an H200). With SORTED (TOPK, k ≤ SORT / 2) a workgroup sorts up to
// SORT entries at once in workgroup memory (a bitonic network, ≈ 66 barriers for SORT), keeps
// the best k and takes the next window of entries in behind them; the merge first drops every
// entry ranked after a bound that the row's k-th best cannot be ranked after (from the lists'
// entries at one position), so that it rarely sorts more than a few hundred.
// ADVANCE (argmax of one row: a token chosen for the next step): the merging workgroup also moves
// the step on (pos0 += tokens, tokens = 1), so that the host need not write it before a decode
// step queued behind this one (`Step` in ops/mod.rs).
struct Params {
    n: u32,
    rows: u32,
    k: u32,
    offset: u32,
    block: u32,   // logits per workgroup, a multiple of WG
    blocks: u32,  // workgroups per row, at most LISTS · WG
    kept: u32,    // list length per block: min(k, block)
    _pad: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> logits: array<f32>;
@group(0) @binding(2) var<storage, read_write> ids: array<u32>;
#ifdef TOPK
@group(0) @binding(3) var<storage, read_write> values: array<f32>;
#endif
// [rows][blocks][kept] entries of (value bits, index).
@group(0) @binding(4) var<storage, read_write> partial: array<atomic<u32>>;
@group(0) @binding(5) var<storage, read_write> counters: array<atomic<u32>>;
#ifdef ADVANCE
@group(0) @binding(6) var<storage, read_write> step_rw: array<u32>;
#endif

const WG: u32 = 256u;
const LISTS: u32 = 4u;
const NONE: u32 = 0xFFFFFFFFu;
var<workgroup> best_v: array<f32, WG>;
var<workgroup> best_i: array<u32, WG>;
var<workgroup> last_flag: u32;

struct Cand {
    v: f32,
    i: u32,
}

// Ranks below every logit, -inf included (an all -inf row still yields its lowest index).
fn nothing() -> Cand {
    return Cand(bitcast<f32>(0xFF800000u), NONE);
}

// Is a ranked before b: larger value, or equal value and lower index.
fn before(a: Cand, b: Cand) -> bool {
    return a.v > b.v || (a.v == b.v && a.i < b.i);
}

// The best of every thread's candidate, for all threads. Every thread must call it.
fn pick(lid: u32, c: Cand) -> Cand {
    best_v[lid] = c.v;
    best_i[lid] = c.i;
    workgroupBarrier();
    for (var st = WG / 2u; st > 0u; st >>= 1u) {
        if (lid < st && before(Cand(best_v[lid + st], best_i[lid + st]), Cand(best_v[lid], best_i[lid]))) {
            best_v[lid] = best_v[lid + st];
            best_i[lid] = best_i[lid + st];
        }
        workgroupBarrier();
    }
    let w = Cand(best_v[0], best_i[0]);
    workgroupBarrier();
    return w;
}

// This thread's best logit of the block ranked after `prev` (all of them before the first pick).
fn scan(base: u32, first: u32, len: u32, lid: u32, prev: Cand, picked: bool) -> Cand {
    var best = nothing();
    for (var e = lid; e < len; e += WG) {
        let c = Cand(logits[base + e], first + e);
        if ((!picked || before(prev, c)) && before(c, best)) {
            best = c;
        }
    }
    return best;
}

fn entry(at: u32) -> Cand {
    return Cand(bitcast<f32>(atomicLoad(&partial[2u * at])), atomicLoad(&partial[2u * at + 1u]));
}

// Entries in list b: the block's logits, up to kept.
fn list_len(b: u32) -> u32 {
    return min(p.kept, min(p.block, p.n - b * p.block));
}

#ifdef SORTED
const SORT: u32 = 2048u;
var<workgroup> sv: array<f32, SORT>;
var<workgroup> si: array<u32, SORT>;
var<workgroup> fill: atomic<u32>;
var<workgroup> filled: u32;

fn put(at: u32, c: Cand) {
    sv[at] = c.v;
    si[at] = c.i;
}

// Sorts entries [0, size) best first: size a power of two, at most SORT, the same for every
// thread.
fn sort_held(size: u32, lid: u32) {
    for (var span = 2u; span <= size; span <<= 1u) {
        for (var stride = span >> 1u; stride > 0u; stride >>= 1u) {
            for (var t = lid; t < size / 2u; t += WG) {
                let i = 2u * stride * (t / stride) + t % stride;
                let j = i + stride;
                let a = Cand(sv[i], si[i]);
                let b = Cand(sv[j], si[j]);
                // Runs whose span bit is clear go best first, the others the other way round,
                // so that each pair of runs makes a bitonic run of twice the span.
                if (select(before(a, b), before(b, a), (i & span) == 0u)) {
                    put(i, b);
                    put(j, a);
                }
            }
            workgroupBarrier();
        }
    }
}

// The entries held after `held` best ones are joined by `got` more in [held, held + got): pads
// to a power of two with nothing, sorts, and returns how many of the best stay held (`most`).
fn settle(held: u32, got: u32, most: u32, lid: u32) -> u32 {
    let n = held + got;
    let size = max(2u, 1u << (32u - countLeadingZeros(max(n, 2u) - 1u)));
    for (var e = n + lid; e < size; e += WG) {
        put(e, nothing());
    }
    workgroupBarrier();
    sort_held(size, lid);
    return min(most, n);
}

// Sorts the block into its list of the best `kept`, a window of logits at a time.
fn block_list(base: u32, first: u32, len: u32, list: u32, lid: u32) {
    var held = 0u;
    var at = 0u;
    loop {
        if (at >= len) {
            break;
        }
        let take = min(SORT - held, len - at);
        for (var e = lid; e < take; e += WG) {
            put(held + e, Cand(logits[base + at + e], first + at + e));
        }
        held = settle(held, take, p.kept, lid);
        at += take;
    }
    for (var s = lid; s < held; s += WG) {
        atomicStore(&partial[2u * (list + s)], bitcast<u32>(sv[s]));
        atomicStore(&partial[2u * (list + s) + 1u], si[s]);
    }
}

// The best k of the row's lists at or before `last`, a window of list entries at a time.
fn merge_windows(lists: u32, last: Cand, lid: u32) -> u32 {
    var held = 0u;
    var at = 0u;
    let total = p.blocks * p.kept;
    loop {
        if (at >= total) {
            break;
        }
        let take = min(SORT - held, total - at);
        workgroupBarrier();
        if (lid == 0u) {
            atomicStore(&fill, 0u);
        }
        workgroupBarrier();
        for (var e = lid; e < take; e += WG) {
            let f = at + e;
            if (f % p.kept < list_len(f / p.kept)) {
                let c = entry(lists + f);
                if (!before(last, c)) {
                    put(held + atomicAdd(&fill, 1u), c);
                }
            }
        }
        workgroupBarrier();
        if (lid == 0u) {
            filled = atomicLoad(&fill);
        }
        let got = workgroupUniformLoad(&filled);
        if (got > 0u) {
            held = settle(held, got, p.k, lid);
        }
        at += take;
    }
    return held;
}

// The last workgroup of a row: the best k of the row's lists → ids (and values).
fn merge_lists(row: u32, lid: u32) {
    let lists = row * p.blocks * p.kept;
    // A bound: each list's entry at position r, sorted; the (s+1)-th best of them has s+1 lists
    // with r+1 entries each ranked at or before it, (s+1)(r+1) ≥ k, so the row's k-th best is
    // ranked at or before it and nothing ranked after it is kept. Lists without an entry at r
    // (a short last block) give nothing, which bounds nothing.
    let r = (p.k + p.blocks - 1u) / p.blocks - 1u;
    let s = (p.k + r) / (r + 1u) - 1u;
    let heads = max(2u, 1u << (32u - countLeadingZeros(max(p.blocks, 2u) - 1u)));
    for (var b = lid; b < heads; b += WG) {
        var c = nothing();
        if (b < p.blocks && list_len(b) > r) {
            c = entry(lists + b * p.kept + r);
        }
        put(b, c);
    }
    workgroupBarrier();
    sort_held(heads, lid);
    let last = Cand(sv[s], si[s]);
    // The entries ranked at or before the bound: each list scanned from its head by a few
    // threads (positions apart by their count) until one is ranked after it.
    if (lid == 0u) {
        atomicStore(&fill, 0u);
    }
    workgroupBarrier();
    let per_list = max(1u, WG / p.blocks);
    for (var b = lid / per_list; b < p.blocks; b += WG / per_list) {
        for (var at = lid % per_list; at < list_len(b); at += per_list) {
            let c = entry(lists + b * p.kept + at);
            if (before(last, c)) {
                break;
            }
            let slot = atomicAdd(&fill, 1u);
            if (slot < SORT) {
                put(slot, c);
            }
        }
    }
    workgroupBarrier();
    if (lid == 0u) {
        filled = atomicLoad(&fill);
    }
    let found = workgroupUniformLoad(&filled);
    var held = 0u;
    if (found <= SORT) {
        held = settle(0u, found, p.k, lid);
    } else {
        // More than one sort holds (a row of many equal values): the lists a window at a time.
        held = merge_windows(lists, last, lid);
    }
    for (var s = lid; s < p.k; s += WG) {
        var c = nothing();
        if (s < held) {
            c = Cand(sv[s], si[s]);
        }
        ids[row * p.k + s] = c.i;
        values[row * p.k + s] = c.v;
    }
}
#endif

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let blk = wid.x;
    let row = wid.y;
    let first = blk * p.block;
    let len = min(p.block, p.n - first);
    let base = p.offset + row * p.n + first;
    let list = (row * p.blocks + blk) * p.kept;
#ifdef SORTED
    block_list(base, first, len, list, lid);
#else
    // Only the thread that held a pick looks for its next best; the others' still stand.
    var mine = scan(base, first, len, lid, nothing(), false);
    for (var s = 0u; s < list_len(blk); s++) {
        let w = pick(lid, mine);
        if (lid == 0u) {
            atomicStore(&partial[2u * (list + s)], bitcast<u32>(w.v));
            atomicStore(&partial[2u * (list + s) + 1u], w.i);
        }
        if (mine.i == w.i) {
            mine = scan(base, first, len, lid, w, true);
        }
    }
#endif
    storageBarrier();
    if (lid == 0u) {
        let done = atomicAdd(&counters[row], 1u) + 1u;
        last_flag = select(0u, 1u, done == p.blocks);
        if (done == p.blocks) {
            atomicStore(&counters[row], 0u);
        }
    }
    if (workgroupUniformLoad(&last_flag) == 0u) {
        return;
    }
    storageBarrier();
#ifdef SORTED
    merge_lists(row, lid);
#else
    // Merge: thread lid owns lists lid + WG·j; next[j] is the first entry not yet taken.
    var next: array<u32, LISTS>;
    var mine_list = 0u;
    mine = nothing();
    for (var j = 0u; j < LISTS; j++) {
        let b = lid + WG * j;
        if (b < p.blocks && before(entry((row * p.blocks + b) * p.kept), mine)) {
            mine = entry((row * p.blocks + b) * p.kept);
            mine_list = j;
        }
    }
    for (var s = 0u; s < p.k; s++) {
        let w = pick(lid, mine);
        if (lid == 0u) {
            ids[row * p.k + s] = w.i;
#ifdef TOPK
            values[row * p.k + s] = w.v;
#endif
        }
        if (mine.i == w.i) {
            next[mine_list] += 1u;
            mine = nothing();
            for (var j = 0u; j < LISTS; j++) {
                let b = lid + WG * j;
                if (b < p.blocks && next[j] < list_len(b)) {
                    let c = entry((row * p.blocks + b) * p.kept + next[j]);
                    if (before(c, mine)) {
                        mine = c;
                        mine_list = j;
                    }
                }
            }
        }
    }
#ifdef ADVANCE
    if (lid == 0u) {
        step_rw[0] += step_rw[1];
        step_rw[1] = 1u;
    }
#endif
#endif
}
