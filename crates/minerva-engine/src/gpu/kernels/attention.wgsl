// Attention over a per-layer KV cache, split along the keys ("flash decoding"):
//   write_kv    stores the step's keys and values at slot (pos0 + t) % cache_len (f16 pairs in
//               u32 words, or f32 with KV_F32). A sliding-window layer's cache may hold just the
//               window plus one step's tokens; positions wrap around it.
//   rope_write  RoPE of the step's queries and keys (in place, as rope.wgsl), and the turned keys
//               with the values into the cache as write_kv: the whole step before attention in
//               one dispatch.
//   attend      for each (split, query head, token): the causal keys inside the window, taken
//               CHUNK at a time (chunks split, split + splits, …), with a running max m, Σexp l
//               and exp-weighted sum of values.
//   combine     merges the splits of each (head, token), with the head's sink logit (SINKS) in
//               the denominator only.
//   decode      one query in one dispatch: workgroup (split, KV head) attends all query heads of
//               that KV head (keys read once for the group) over its share of the keys; the last
//               workgroup of the KV head to finish merges the splits as combine does. Built per
//               shape (DEC_GQ heads per KV head, DEC_D8 octets per head), head_dim a multiple
//               of 8. With DEC_ROPE it also does rope_write's work for its one query: q and k
//               arrive unturned, every split turns q as it loads it, and the split holding the
//               step's own key turns k and stores it with v at the step's slot. With DEC_XQ
//               the merge also writes its outputs as int8 records (x_quant.wgsl), so that the
//               int8 product reading them next needs no quantizing dispatch.
//   attend_tiled  several queries (head_dim ≤ TD): workgroup (row tile, KV head) takes TR rows
//               (query, query head of the KV head) and walks their keys TB at a time, each block
//               of keys and values staged in workgroup memory once for all TR rows, with a
//               running max and sum per row; sinks as combine. attend + combine take the shapes
//               it does not (head_dim > TD).
// Query head h reads KV head h / (heads / kv_heads) (grouped-query attention).
#include "angle.wgsl"

struct Params {
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    cache_len: u32,
    window: u32,      // 0: attend to every earlier position
    chunks: u32,      // splits per (head, token) in the scratch buffer; decode: per KV head
    q_offset: u32,
    k_offset: u32,    // write_kv: offset of the new keys
    v_offset: u32,
    out_offset: u32,
    scale: f32,
    sinks_offset: u32,
    rot_dim: u32,     // rope_write: rotated dims at the start of each head (≤ head_dim)
    halves: u32,      // rope_write: pairs (i, i + rot_dim / 2), else (2i, 2i + 1)
    mscale: f32,      // rope_write: factor on the turned values (YaRN; 1 otherwise)
    xq_scales: u32,   // decode with DEC_XQ: where the records' scales start in xq (vec4s)
}

#include "step.wgsl"

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<uniform> step: Step;
#ifdef KV_F32
@group(0) @binding(2) var<storage, read_write> kc: array<f32>;
@group(0) @binding(3) var<storage, read_write> vc: array<f32>;
#else
@group(0) @binding(2) var<storage, read_write> kc: array<u32>;
@group(0) @binding(3) var<storage, read_write> vc: array<u32>;
#endif
@group(0) @binding(4) var<storage, read> src: array<f32>;
@group(0) @binding(5) var<storage, read_write> scratch: array<f32>;
@group(0) @binding(6) var<storage, read_write> out: array<f32>;
#ifdef SINKS
@group(0) @binding(7) var<storage, read> sinks: array<f32>;
#endif
@group(0) @binding(8) var<storage, read> vsrc: array<f32>;
// decode: the splits' (m, l, values) per query head, and one finished-workgroup count per KV
// head (back to 0 when the last one has merged). Atomics, so that the merging workgroup reads
// at the level every SM writes to.
@group(0) @binding(9) var<storage, read_write> partial: array<atomic<u32>>;
@group(0) @binding(10) var<storage, read_write> counters: array<atomic<u32>>;
// rope_write: q and k turned in place, and the rotation frequencies.
@group(0) @binding(11) var<storage, read_write> qt: array<f32>;
@group(0) @binding(12) var<storage, read_write> kt: array<f32>;
@group(0) @binding(13) var<storage, read> freq: array<f32>;
#ifdef DEC_XQ
// decode: the output also as x_quant.wgsl's records, for an int8 product reading it next.
@group(0) @binding(16) var<storage, read_write> xq: array<vec4<u32>>;
#include "x_quant.wgsl"
#endif

const CHUNK: u32 = 256u;
const WG: u32 = 64u;
const NEG: f32 = -3.0e38;

// Elements i and i+1 (i even) of a cache.
fn k_pair(i: u32) -> vec2<f32> {
#ifdef KV_F32
    return vec2<f32>(kc[i], kc[i + 1u]);
#else
    return unpack2x16float(kc[i >> 1u]);
#endif
}

fn v_pair(i: u32) -> vec2<f32> {
#ifdef KV_F32
    return vec2<f32>(vc[i], vc[i + 1u]);
#else
    return unpack2x16float(vc[i >> 1u]);
#endif
}

// Stores elements i and i+1 (i even) of both caches.
fn store_pairs(i: u32, k: vec2<f32>, v: vec2<f32>) {
#ifdef KV_F32
    kc[i] = k.x;
    kc[i + 1u] = k.y;
    vc[i] = v.x;
    vc[i + 1u] = v.y;
#else
    kc[i >> 1u] = pack2x16float(k);
    vc[i >> 1u] = pack2x16float(v);
#endif
}

// One thread per pair of values of one (token, kv head): keys from src at k_offset, values from
// vsrc at v_offset, both [tokens][kv_heads][head_dim].
@compute @workgroup_size(64)
fn write_kv(@builtin(global_invocation_id) gid: vec3<u32>) {
    let per_token = p.kv_heads * p.head_dim / 2u;
    let i = gid.x;
    let t = gid.y;
    if (i >= per_token || t >= step.tokens) {
        return;
    }
    let e = 2u * i;
    let slot = (step.pos0 + t) % p.cache_len;
    let dst = slot * p.kv_heads * p.head_dim + e;
    let ks = p.k_offset + t * p.kv_heads * p.head_dim + e;
    let vs = p.v_offset + t * p.kv_heads * p.head_dim + e;
    store_pairs(dst, vec2<f32>(src[ks], src[ks + 1u]), vec2<f32>(vsrc[vs], vsrc[vs + 1u]));
}

// Elements of rotation pair i within a head.
fn rope_pair(i: u32) -> vec2<u32> {
    if (p.halves != 0u) {
        return vec2<u32>(i, i + p.rot_dim / 2u);
    }
    return vec2<u32>(2u * i, 2u * i + 1u);
}

// The pair x turned by position pos times frequency i, scaled by mscale.
fn rope_turn(x: vec2<f32>, i: u32, pos: u32) -> vec2<f32> {
    let cs = cos_sin(f32(pos) * freq[i]) * p.mscale;
    return vec2<f32>(x.x * cs.x - x.y * cs.y, x.x * cs.y + x.y * cs.x);
}

var<workgroup> turned: array<f32, 512>;

// Workgroup (head, token): heads [0, heads) are q's, turned in place; the next kv_heads are k's,
// turned in place and, gathered in workgroup memory (the halves layout pairs values of
// different f16 words), stored with the head's values at the token's cache slot.
@compute @workgroup_size(64)
fn rope_write(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let t = wid.y;
    let d = p.head_dim;
    let pos = step.pos0 + t;
    let half = p.rot_dim / 2u;
    if (wid.x < p.heads) {
        let base = p.q_offset + (t * p.heads + wid.x) * d;
        for (var i = lid; i < half; i += WG) {
            let e = base + rope_pair(i);
            let r = rope_turn(vec2<f32>(qt[e.x], qt[e.y]), i, pos);
            qt[e.x] = r.x;
            qt[e.y] = r.y;
        }
        return;
    }
    let g = wid.x - p.heads;
    let base = p.k_offset + (t * p.kv_heads + g) * d;
    for (var i = lid; i < half; i += WG) {
        let e = rope_pair(i);
        let r = rope_turn(vec2<f32>(kt[base + e.x], kt[base + e.y]), i, pos);
        kt[base + e.x] = r.x;
        kt[base + e.y] = r.y;
        turned[e.x] = r.x;
        turned[e.y] = r.y;
    }
    for (var e = p.rot_dim + lid; e < d; e += WG) {
        turned[e] = kt[base + e];
    }
    workgroupBarrier();
    let dst = ((pos % p.cache_len) * p.kv_heads + g) * d;
    let vs = p.v_offset + (t * p.kv_heads + g) * d;
    for (var e = 2u * lid; e < d; e += 2u * WG) {
        store_pairs(dst + e, vec2<f32>(turned[e], turned[e + 1u]), vec2<f32>(vsrc[vs + e], vsrc[vs + e + 1u]));
    }
}

var<workgroup> qv: array<f32, 512>;
var<workgroup> scores: array<f32, CHUNK>;
var<workgroup> red: array<f32, WG>;

// First attended position of the query at position qp.
fn first_key(qp: u32) -> u32 {
    if (p.window != 0u && qp + 1u > p.window) {
        return qp + 1u - p.window;
    }
    return 0u;
}

@compute @workgroup_size(64)
fn attend(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let split = wid.x;
    let h = wid.y;
    let t = wid.z;
    let d = p.head_dim;
    let qp = step.pos0 + t;
    let lo = first_key(qp);
    let kvh = h / (p.heads / p.kv_heads);
    let row = (t * p.heads + h) * p.chunks + split;

    for (var i = lid; i < d; i += WG) {
        qv[i] = src[p.q_offset + (t * p.heads + h) * d + i] * p.scale;
    }
    // This thread's value dims: pairs 2·lid + 2·WG·q (head_dim ≤ 512).
    var acc: array<vec2<f32>, 4>;
    var m_run = NEG;
    var l_run = 0.0;
    for (var c = split; lo + c * CHUNK <= qp; c += p.chunks) {
        let start = lo + c * CHUNK;
        let n = min(start + CHUNK, qp + 1u) - start;
        workgroupBarrier();
        var m = NEG;
        for (var j = lid; j < n; j += WG) {
            let base = ((start + j) % p.cache_len * p.kv_heads + kvh) * d;
            var s = 0.0;
            for (var i = 0u; i < d; i += 2u) {
                let kv = k_pair(base + i);
                s += qv[i] * kv.x + qv[i + 1u] * kv.y;
            }
            scores[j] = s;
            m = max(m, s);
        }
        red[lid] = m;
        workgroupBarrier();
        for (var st = WG / 2u; st > 0u; st >>= 1u) {
            if (lid < st) {
                red[lid] = max(red[lid], red[lid + st]);
            }
            workgroupBarrier();
        }
        let m_new = max(m_run, red[0]);
        workgroupBarrier();
        var l = 0.0;
        for (var j = lid; j < n; j += WG) {
            let e = exp(scores[j] - m_new);
            scores[j] = e;
            l += e;
        }
        red[lid] = l;
        workgroupBarrier();
        for (var st = WG / 2u; st > 0u; st >>= 1u) {
            if (lid < st) {
                red[lid] += red[lid + st];
            }
            workgroupBarrier();
        }
        let rescale = exp(m_run - m_new);
        l_run = l_run * rescale + red[0];
        m_run = m_new;
        for (var q = 0u; q < 4u; q++) {
            let i = 2u * lid + 2u * WG * q;
            if (i < d) {
                var a = acc[q] * rescale;
                for (var j = 0u; j < n; j++) {
                    let base = ((start + j) % p.cache_len * p.kv_heads + kvh) * d;
                    a += scores[j] * v_pair(base + i);
                }
                acc[q] = a;
            }
        }
    }
    let base_out = row * (d + 2u);
    if (lid == 0u) {
        scratch[base_out] = m_run;
        scratch[base_out + 1u] = l_run;
    }
    for (var q = 0u; q < 4u; q++) {
        let i = 2u * lid + 2u * WG * q;
        if (i < d) {
            scratch[base_out + 2u + i] = acc[q].x;
            scratch[base_out + 3u + i] = acc[q].y;
        }
    }
}

@compute @workgroup_size(64)
fn combine(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let h = wid.x;
    let t = wid.y;
    let d = p.head_dim;
    let qp = step.pos0 + t;
    let n_keys = qp + 1u - first_key(qp);
    let used = min((n_keys + CHUNK - 1u) / CHUNK, p.chunks);
    // Splits past the last chunk saw no keys (m = NEG, l = 0) and are skipped.
    let row0 = (t * p.heads + h) * p.chunks;
    var mx = NEG;
#ifdef SINKS
    mx = sinks[p.sinks_offset + h];
#endif
    for (var c = 0u; c < used; c++) {
        mx = max(mx, scratch[(row0 + c) * (d + 2u)]);
    }
    var total = 0.0;
#ifdef SINKS
    total = exp(sinks[p.sinks_offset + h] - mx);
#endif
    for (var c = 0u; c < used; c++) {
        let b = (row0 + c) * (d + 2u);
        total += exp(scratch[b] - mx) * scratch[b + 1u];
    }
    for (var i = lid; i < d; i += WG) {
        var acc = 0.0;
        for (var c = 0u; c < used; c++) {
            let b = (row0 + c) * (d + 2u);
            acc += exp(scratch[b] - mx) * scratch[b + 2u + i];
        }
        out[p.out_offset + (t * p.heads + h) * d + i] = acc / total;
    }
}

#ifdef DEC_GQ
// decode, for GQ query heads per KV head (G2: rounded up to a power of two) of D8 octets
// (8 values) each. Latency, not bandwidth, sets its time, so every thread issues all
// of a pass's cache loads at once and the work between them has few barriers:
//   score threads (head lid / RUN, key lid % RUN): RUN = DWG / G2 keys per pass; a thread
//     holds its key's whole row and dots it with its head's query; max and Σexp per head
//     reduce over its run of RUN threads;
//   value threads (subset lid / VU, head, octet) with VU = G2 · D8 units: subset r takes the
//     pass's keys r, r + R, … (D8 of them) for one octet of one head, loaded with the keys.
// Splits share the current keys evenly, a pass or more each; the splits a short context
// leaves idle return at once. The last split of a KV head to finish merges the splits.
const DWG: u32 = 256u;
const GQ: u32 = DEC_GQ;
const G2: u32 = DEC_G2;
const D8: u32 = DEC_D8;
const RUN: u32 = DWG / G2;
const VU: u32 = G2 * D8;
const R: u32 = DWG / VU;
// Splits per KV head at most (DECODE_SPLITS), and each thread's share of them in the merge.
const SMAX: u32 = 64u;
const SPT: u32 = (SMAX + RUN - 1u) / RUN;
// Merge: outputs per thread, and splits whose values one thread loads at once.
const OPT: u32 = (GQ * D8 * 8u + DWG - 1u) / DWG;
const CB: u32 = 32u / OPT;
// Query rows (2·D8 vec4s) and weight rows (RUN keys) padded by one, so that lanes of different
// heads reading the same element hit different banks.
const QS: u32 = 2u * D8 + 1u;
const PS: u32 = RUN + 1u;

// The caches as octets: one vec4 of f16 pairs, or two vec4 of f32. DEC_ROPE writes the step's
// slot.
#ifdef KV_F32
#ifdef DEC_ROPE
@group(0) @binding(14) var<storage, read_write> kc8: array<vec4<f32>>;
@group(0) @binding(15) var<storage, read_write> vc8: array<vec4<f32>>;
#else
@group(0) @binding(14) var<storage, read> kc8: array<vec4<f32>>;
@group(0) @binding(15) var<storage, read> vc8: array<vec4<f32>>;
#endif
struct Oct {
    lo: vec4<f32>,
    hi: vec4<f32>,
}
fn k_oct(o: u32) -> Oct {
    return Oct(kc8[2u * o], kc8[2u * o + 1u]);
}
fn v_oct(o: u32) -> Oct {
    return Oct(vc8[2u * o], vc8[2u * o + 1u]);
}
fn lo4(x: Oct) -> vec4<f32> {
    return x.lo;
}
fn hi4(x: Oct) -> vec4<f32> {
    return x.hi;
}
fn oct_of(lo: vec4<f32>, hi: vec4<f32>) -> Oct {
    return Oct(lo, hi);
}
#ifdef DEC_ROPE
fn store_kv_oct(o: u32, k: Oct, v: Oct) {
    kc8[2u * o] = k.lo;
    kc8[2u * o + 1u] = k.hi;
    vc8[2u * o] = v.lo;
    vc8[2u * o + 1u] = v.hi;
}
#endif
#else
#ifdef DEC_ROPE
@group(0) @binding(14) var<storage, read_write> kc8: array<vec4<u32>>;
@group(0) @binding(15) var<storage, read_write> vc8: array<vec4<u32>>;
#else
@group(0) @binding(14) var<storage, read> kc8: array<vec4<u32>>;
@group(0) @binding(15) var<storage, read> vc8: array<vec4<u32>>;
#endif
struct Oct {
    w: vec4<u32>,
}
fn k_oct(o: u32) -> Oct {
    return Oct(kc8[o]);
}
fn v_oct(o: u32) -> Oct {
    return Oct(vc8[o]);
}
fn lo4(x: Oct) -> vec4<f32> {
    return vec4<f32>(unpack2x16float(x.w.x), unpack2x16float(x.w.y));
}
fn hi4(x: Oct) -> vec4<f32> {
    return vec4<f32>(unpack2x16float(x.w.z), unpack2x16float(x.w.w));
}
fn oct_of(lo: vec4<f32>, hi: vec4<f32>) -> Oct {
    return Oct(vec4<u32>(pack2x16float(lo.xy), pack2x16float(lo.zw), pack2x16float(hi.xy), pack2x16float(hi.zw)));
}
#ifdef DEC_ROPE
fn store_kv_oct(o: u32, k: Oct, v: Oct) {
    kc8[o] = k.w;
    vc8[o] = v.w;
}
#endif
#endif

#ifdef DEC_ROPE
// How element j of a head turns at position pos: x_j · c + x_partner · s, with rope_write's
// pairs and factors; elements past rot_dim pass through.
struct Turn {
    partner: u32,
    c: f32,
    s: f32,
}

fn turn_of(j: u32, pos: u32) -> Turn {
    if (j >= p.rot_dim) {
        return Turn(j, 1.0, 0.0);
    }
    let half = p.rot_dim / 2u;
    var first = j % 2u == 0u;
    var i = j / 2u;
    var partner = j ^ 1u;
    if (p.halves != 0u) {
        first = j < half;
        i = select(j - half, j, first);
        partner = select(j - half, j + half, first);
    }
    let cs = cos_sin(f32(pos) * freq[i]) * p.mscale;
    return Turn(partner, cs.x, select(cs.y, -cs.y, first));
}

// Four elements j.. of the query head at qt[b..], turned.
fn q_turned4(b: u32, j: u32, pos: u32) -> vec4<f32> {
    var x: vec4<f32>;
    for (var u = 0u; u < 4u; u++) {
        let t = turn_of(j + u, pos);
        x[u] = qt[b + j + u] * t.c + qt[b + t.partner] * t.s;
    }
    return x;
}

// Four elements j.. of the key head at kt[b..], turned.
fn k_turned4(b: u32, j: u32, pos: u32) -> vec4<f32> {
    var x: vec4<f32>;
    for (var u = 0u; u < 4u; u++) {
        let t = turn_of(j + u, pos);
        x[u] = kt[b + j + u] * t.c + kt[b + t.partner] * t.s;
    }
    return x;
}
#endif

var<workgroup> dq: array<vec4<f32>, 576>;     // G2 × QS ≤ 2·DWG + 64
var<workgroup> dw: array<f32, 320>;           // G2 × PS ≤ DWG + 64: the pass's weights
var<workgroup> dr: array<f32, 64>;            // per head: the pass's rescale of the values
var<workgroup> dred: array<f32, DWG>;
var<workgroup> dsum: array<vec4<f32>, 512>;   // per thread: its values' two vec4s
var<workgroup> coef: array<f32, 2048>;        // merge: weight of (head, split), G2 × splits
var<workgroup> last_flag: u32;
#ifdef DEC_ROPE
// The step's own key and value, as the cache holds them, and the turned key in f32.
var<workgroup> new_k: array<Oct, 32>;
var<workgroup> new_v: array<Oct, 32>;
var<workgroup> k_turned: array<vec4<f32>, 64>;
#endif

// Max (by_max) or sum of v over each aligned run of RUN threads, in every thread of the run.
// Every thread of the workgroup calls it. With subgroups, lanes first combine across their
// run's share of the subgroup (any power-of-two size); one value per share then goes through
// workgroup memory.
fn run_reduce(v: f32, lid: u32, sg_size: u32, by_max: bool) -> f32 {
    workgroupBarrier();
#ifdef SUBGROUPS
    let share = min(RUN, sg_size);
    var x = v;
    for (var mask = 1u; mask < share; mask <<= 1u) {
        let o = subgroupShuffleXor(x, mask);
        x = select(x + o, max(x, o), by_max);
    }
    if (lid % share == 0u) {
        dred[lid / share] = x;
    }
    workgroupBarrier();
    let per = RUN / share;
    let b = lid / RUN * per;
    var t = dred[b];
    for (var i = 1u; i < per; i++) {
        let o = dred[b + i];
        t = select(t + o, max(t, o), by_max);
    }
    return t;
#else
    dred[lid] = v;
    workgroupBarrier();
    for (var st = RUN / 2u; st > 0u; st >>= 1u) {
        if (lid % RUN < st) {
            let o = dred[lid + st];
            dred[lid] = select(dred[lid] + o, max(dred[lid], o), by_max);
        }
        workgroupBarrier();
    }
    return dred[lid / RUN * RUN];
#endif
}

fn store_f32(i: u32, v: f32) {
    atomicStore(&partial[i], bitcast<u32>(v));
}

fn load_f32(i: u32) -> f32 {
    return bitcast<f32>(atomicLoad(&partial[i]));
}

// Octet index of key position `key`'s row of KV head g.
fn row_oct(key: u32, g: u32) -> u32 {
    return ((key % p.cache_len) * p.kv_heads + g) * D8;
}

// Whether key position `key` is the step's own, whose row this dispatch writes: its readers
// take it from new_k / new_v instead of the cache.
fn is_new(key: u32) -> bool {
#ifdef DEC_ROPE
    return key == step.pos0;
#else
    return false;
#endif
}

// The query's four values at vec4 c of head h, turned with DEC_ROPE.
fn q_load4(h: u32, c: u32) -> vec4<f32> {
    let b = p.q_offset + h * D8 * 8u;
#ifdef DEC_ROPE
    return q_turned4(b, 4u * c, step.pos0);
#else
    return vec4<f32>(src[b + 4u * c], src[b + 4u * c + 1u], src[b + 4u * c + 2u], src[b + 4u * c + 3u]);
#endif
}

#ifdef DEC_ROPE
// Thread o < D8 of the split holding the step's key: octet o of KV head g's key (turned) and
// value, into workgroup memory and the cache slot.
fn store_new(g: u32, o: u32) {
    let d = D8 * 8u;
    let pos = step.pos0;
    let kb = p.k_offset + g * d;
    let vb = p.v_offset + g * d + 8u * o;
    let lo = k_turned4(kb, 8u * o, pos);
    let hi = k_turned4(kb, 8u * o + 4u, pos);
    k_turned[2u * o] = lo;
    k_turned[2u * o + 1u] = hi;
    let k = oct_of(lo, hi);
    let v = oct_of(
        vec4<f32>(vsrc[vb], vsrc[vb + 1u], vsrc[vb + 2u], vsrc[vb + 3u]),
        vec4<f32>(vsrc[vb + 4u], vsrc[vb + 5u], vsrc[vb + 6u], vsrc[vb + 7u]),
    );
    new_k[o] = k;
    new_v[o] = v;
    store_kv_oct(row_oct(pos, g) + o, k, v);
}

fn new_k_row() -> array<Oct, D8> {
    var r: array<Oct, D8>;
    for (var o = 0u; o < D8; o++) {
        r[o] = new_k[o];
    }
    return r;
}
#endif

@compute @workgroup_size(256)
fn decode(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
#ifdef SUBGROUPS
    @builtin(subgroup_size) sg_size: u32,
#endif
) {
#ifndef SUBGROUPS
    let sg_size = 1u;
#endif
    let split = wid.x;
    let g = wid.y;
    let d = D8 * 8u;
    let h0 = g * GQ;
    let qp = step.pos0;
    let lo = first_key(qp);
    let n = qp + 1u - lo;
    let used = min(p.chunks, (n + RUN - 1u) / RUN);
    if (split >= used) {
        return;
    }
    let k0 = lo + split * n / used;
    let k1 = lo + (split + 1u) * n / used;
    for (var e = lid; e < G2 * 2u * D8; e += DWG) {
        let h = e / (2u * D8);
        let c = e % (2u * D8);
        var x = vec4<f32>(0.0);
        if (h < GQ) {
            x = q_load4(h0 + h, c);
        }
        dq[h * QS + c] = x;
    }
#ifdef DEC_ROPE
    // The last split's keys end with the step's own.
    let holds_new = split + 1u == used;
    if (holds_new && lid < D8) {
        store_new(g, lid);
    }
#endif
    let sh = lid / RUN;
    let sj = lid % RUN;
    let vsub = lid / VU;
    let vh = lid % VU / D8;
    let vo = lid % D8;
    var m_run = NEG;
    var l_run = 0.0;
    var acc = array<vec4<f32>, 2>(vec4<f32>(0.0), vec4<f32>(0.0));
    for (var c0 = k0; c0 < k1; c0 += RUN) {
        let cnt = min(RUN, k1 - c0);
        let live = sh < GQ && sj < cnt;
        var kr: array<Oct, D8>;
        if (live && !is_new(c0 + sj)) {
            let base = row_oct(c0 + sj, g);
            for (var o = 0u; o < D8; o++) {
                kr[o] = k_oct(base + o);
            }
        }
        var vr: array<Oct, D8>;
        if (vh < GQ) {
            for (var t = 0u; t < D8; t++) {
                let j = vsub + R * t;
                if (j < cnt && !is_new(c0 + j)) {
                    vr[t] = v_oct(row_oct(c0 + j, g) + vo);
                }
            }
        }
        workgroupBarrier();
#ifdef DEC_ROPE
        if (live && is_new(c0 + sj)) {
            kr = new_k_row();
        }
#endif
        var s = NEG;
        if (live) {
            var dot4 = vec4<f32>(0.0);
            for (var o = 0u; o < D8; o++) {
                dot4 += dq[sh * QS + 2u * o] * lo4(kr[o]) + dq[sh * QS + 2u * o + 1u] * hi4(kr[o]);
            }
            s = (dot4.x + dot4.y + dot4.z + dot4.w) * p.scale;
        }
        let m_new = max(m_run, run_reduce(s, lid, sg_size, true));
        let w = select(0.0, exp(s - m_new), live);
        let rescale = exp(m_run - m_new);
        l_run = l_run * rescale + run_reduce(w, lid, sg_size, false);
        m_run = m_new;
        if (sh < GQ) {
            dw[sh * PS + sj] = w;
            if (sj == 0u) {
                dr[sh] = rescale;
            }
        }
        workgroupBarrier();
        if (vh < GQ) {
            let r = dr[vh];
            acc[0] *= r;
            acc[1] *= r;
            for (var t = 0u; t < D8; t++) {
                let j = vsub + R * t;
                if (j < cnt) {
#ifdef DEC_ROPE
                    if (is_new(c0 + j)) {
                        vr[t] = new_v[vo];
                    }
#endif
                    let wj = dw[vh * PS + j];
                    acc[0] += wj * lo4(vr[t]);
                    acc[1] += wj * hi4(vr[t]);
                }
            }
        }
    }
    // Partial of (KV head g, split, head h): m, l, then the d values summed over the subsets.
    dsum[2u * lid] = acc[0];
    dsum[2u * lid + 1u] = acc[1];
    workgroupBarrier();
#ifdef DEC_ROPE
    // k turned in place, as rope_write leaves it: every read of k was before the barrier.
    if (holds_new && lid < 2u * D8) {
        let b = p.k_offset + g * d + 4u * lid;
        let x = k_turned[lid];
        kt[b] = x.x;
        kt[b + 1u] = x.y;
        kt[b + 2u] = x.z;
        kt[b + 3u] = x.w;
    }
#endif
    let row0 = (g * p.chunks + split) * GQ;
    for (var e = lid; e < GQ * 2u * D8; e += DWG) {
        let h = e / (2u * D8);
        let q = e % (2u * D8);
        let unit = h * D8 + q / 2u;
        var x = vec4<f32>(0.0);
        for (var r = 0u; r < R; r++) {
            x += dsum[2u * (r * VU + unit) + q % 2u];
        }
        let b = (row0 + h) * (d + 2u) + 2u + 4u * q;
        store_f32(b, x.x);
        store_f32(b + 1u, x.y);
        store_f32(b + 2u, x.z);
        store_f32(b + 3u, x.w);
    }
    if (sh < GQ && sj == 0u) {
        store_f32((row0 + sh) * (d + 2u), m_run);
        store_f32((row0 + sh) * (d + 2u) + 1u, l_run);
    }
    // Count this workgroup done once its partial is visible; the last one merges.
    storageBarrier();
    if (lid == 0u) {
        let done = atomicAdd(&counters[g], 1u) + 1u;
        last_flag = select(0u, 1u, done == used);
        if (done == used) {
            atomicStore(&counters[g], 0u);
        }
    }
    if (workgroupUniformLoad(&last_flag) == 0u) {
        return;
    }
    storageBarrier();
    merge(g, used, lid, sg_size);
}

// The last split of KV head g: each head's weight per split (exp(m_c − m) / Σ, the sink in
// the denominator), threads (head, splits sj, sj + RUN, …), then every output as the weighted
// sum of the splits' values, CB splits' loads in flight at a time.
fn merge(g: u32, used: u32, lid: u32, sg_size: u32) {
    let d = D8 * 8u;
    let h0 = g * GQ;
    let first = g * p.chunks * GQ;
    let sh = lid / RUN;
    let sj = lid % RUN;
    var ms: array<f32, SPT>;
    var ls: array<f32, SPT>;
    for (var k = 0u; k < SPT; k++) {
        let c = sj + RUN * k;
        ms[k] = NEG;
        if (sh < GQ && c < used) {
            let b = (first + c * GQ + sh) * (d + 2u);
            ms[k] = load_f32(b);
            ls[k] = load_f32(b + 1u);
        }
    }
    var mx = NEG;
#ifdef SINKS
    let sink = sinks[p.sinks_offset + h0 + min(sh, GQ - 1u)];
    mx = sink;
#endif
    for (var k = 0u; k < SPT; k++) {
        mx = max(mx, ms[k]);
    }
    let m_all = run_reduce(mx, lid, sg_size, true);
    var total = 0.0;
    for (var k = 0u; k < SPT; k++) {
        ms[k] = exp(ms[k] - m_all);
        total += ms[k] * ls[k];
    }
    var l_all = run_reduce(total, lid, sg_size, false);
#ifdef SINKS
    l_all += exp(sink - m_all);
#endif
    for (var k = 0u; k < SPT; k++) {
        let c = sj + RUN * k;
        if (sh < GQ && c < used) {
            coef[sh * p.chunks + c] = ms[k] / l_all;
        }
    }
    workgroupBarrier();
    var a: array<f32, OPT>;
    for (var c0 = 0u; c0 < used; c0 += CB) {
        var x: array<f32, OPT * CB>;
        for (var o = 0u; o < OPT; o++) {
            let e = min(lid + DWG * o, GQ * d - 1u);
            for (var b = 0u; b < CB; b++) {
                let c = min(c0 + b, used - 1u);
                x[o * CB + b] = load_f32((first + c * GQ + e / d) * (d + 2u) + 2u + e % d);
            }
        }
        for (var o = 0u; o < OPT; o++) {
            let h = min(lid + DWG * o, GQ * d - 1u) / d;
            for (var b = 0u; b < CB; b++) {
                if (c0 + b < used) {
                    a[o] += coef[h * p.chunks + c0 + b] * x[o * CB + b];
                }
            }
        }
    }
    for (var o = 0u; o < OPT; o++) {
        let e = lid + DWG * o;
        if (e < GQ * d) {
            out[p.out_offset + h0 * d + e] = a[o];
#ifdef DEC_XQ
            dsum[e / 4u][e % 4u] = a[o];
#endif
#ifdef DEC_ROPE
            // q turned in place, as rope_write leaves it: every split of g has loaded it.
            let i = e % d;
            qt[p.q_offset + h0 * d + e] = dq[e / d * QS + i / 4u][i % 4u];
#endif
        }
    }
#ifdef DEC_XQ
    // The group's GQ · d outputs (whole units of 32: Ops::writes_records) as records of the
    // vector's parts, one part (vec4s j and j + 4 of a unit) per thread; dsum was last read
    // before the count of finished splits.
    workgroupBarrier();
    for (var i = lid; i < GQ * D8; i += DWG) {
        let u = (i / 4u) * 8u + i % 4u;
        store_record(h0 * D8 + i, p.xq_scales, quantize_part(dsum[u], dsum[u + 4u]), 1.0);
    }
#endif
}
#endif

// attend_tiled: TR rows of queries per workgroup, TB keys per block, head_dim ≤ TD; rows and
// keys padded by one value, so that lanes reading one element of different rows or keys hit
// different banks (d + 1 is odd).
const TR: u32 = 32u;
const TB: u32 = 32u;
const TD: u32 = 128u;
const TWG: u32 = 128u;
const TS: u32 = TD + 1u;
// Tile rows per thread: rows pr, pr + 8, … for pr = lid / 16.
const RA: u32 = TR / 8u;

var<workgroup> tq: array<f32, 4128>;      // TR × TS
var<workgroup> tkv: array<f32, 4128>;     // TB × TS: the block's keys, then its values
var<workgroup> tp: array<f32, 1056>;      // TR × (TB + 1): weights of the block's keys per row
// Per (row, lane): partial maxima at [0, TRED), partial sums at [TRED, 2·TRED).
const TRED: u32 = TR * 16u;
var<workgroup> tred: array<f32, 1024>;

// Query position of tile row r (rows past the step's count clamp to the last query).
fn tile_pos(r: u32, gq: u32) -> u32 {
    return step.pos0 + min(r / gq, step.tokens - 1u);
}

// Stages keys (values with `vals`) at positions k0 + j for j < TB, zero past `last`, as f32 at
// tkv[j * TS + i].
fn stage_block(lid: u32, k0: u32, last: u32, g: u32, vals: bool) {
    let d = p.head_dim;
    let pairs = d / 2u;
    for (var e = lid; e < TB * pairs; e += TWG) {
        let j = e / pairs;
        let i = 2u * (e % pairs);
        var x = vec2<f32>(0.0);
        if (k0 + j <= last) {
            let base = ((k0 + j) % p.cache_len * p.kv_heads + g) * d;
            if (vals) {
                x = v_pair(base + i);
            } else {
                x = k_pair(base + i);
            }
        }
        tkv[j * TS + i] = x.x;
        tkv[j * TS + i + 1u] = x.y;
    }
}

// Max (or sum) of the 16 per-lane partials of tile row r.
fn row_total(r: u32, by_max: bool) -> f32 {
    let b = select(TRED, 0u, by_max) + r * 16u;
    var x = tred[b];
    for (var l = 1u; l < 16u; l++) {
        let o = tred[b + l];
        x = select(x + o, max(x, o), by_max);
    }
    return x;
}

// Thread (pr, lane) = (lid / 16, lid % 16) owns rows pr + 8·a (a < RA) of the tile: their scores
// for keys lane and lane + 16 of each block, and their value dims lane + 16·c.
@compute @workgroup_size(128)
fn attend_tiled(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let g = wid.y;
    let d = p.head_dim;
    let gq = p.heads / p.kv_heads;
    let rows = step.tokens * gq;
    let r0 = wid.x * TR;
    let pr = lid / 16u;
    let lane = lid % 16u;
    for (var e = lid; e < TR * d; e += TWG) {
        let r = e / d;
        let i = e % d;
        var x = 0.0;
        if (r0 + r < rows) {
            let t = (r0 + r) / gq;
            let h = g * gq + (r0 + r) % gq;
            x = src[p.q_offset + (t * p.heads + h) * d + i] * p.scale;
        }
        tq[r * TS + i] = x;
    }
    // Rows' positions and first keys; the tile attends keys [lo, last].
    var qpos: array<u32, RA>;
    var first: array<u32, RA>;
    for (var a = 0u; a < RA; a++) {
        qpos[a] = tile_pos(r0 + pr + 8u * a, gq);
        first[a] = first_key(qpos[a]);
    }
    let lo = first_key(tile_pos(r0, gq));
    let last = tile_pos(r0 + TR - 1u, gq);
    var m_run: array<f32, RA>;
    var l_run: array<f32, RA>;
    for (var a = 0u; a < RA; a++) {
        m_run[a] = NEG;
    }
    var acc: array<array<f32, 8>, RA>;
    for (var k0 = lo; k0 <= last; k0 += TB) {
        workgroupBarrier();
        stage_block(lid, k0, last, g, false);
        workgroupBarrier();
        var s: array<array<f32, 2>, RA>;
        for (var i = 0u; i < d; i++) {
            let ka = tkv[lane * TS + i];
            let kb = tkv[(lane + 16u) * TS + i];
            for (var a = 0u; a < RA; a++) {
                let q = tq[(pr + 8u * a) * TS + i];
                s[a][0] += q * ka;
                s[a][1] += q * kb;
            }
        }
        // Keys outside a row's causal window weigh nothing.
        for (var a = 0u; a < RA; a++) {
            var mx = NEG;
            for (var b = 0u; b < 2u; b++) {
                let kp = k0 + lane + 16u * b;
                if (kp < first[a] || kp > qpos[a]) {
                    s[a][b] = NEG;
                }
                mx = max(mx, s[a][b]);
            }
            tred[(pr + 8u * a) * 16u + lane] = mx;
        }
        workgroupBarrier();
        stage_block(lid, k0, last, g, true);
        var m_new: array<f32, RA>;
        for (var a = 0u; a < RA; a++) {
            let r = pr + 8u * a;
            m_new[a] = max(m_run[a], row_total(r, true));
            var l = 0.0;
            for (var b = 0u; b < 2u; b++) {
                let w = select(0.0, exp(s[a][b] - m_new[a]), s[a][b] > NEG);
                tp[r * (TB + 1u) + lane + 16u * b] = w;
                l += w;
            }
            tred[TRED + r * 16u + lane] = l;
        }
        workgroupBarrier();
        for (var a = 0u; a < RA; a++) {
            let r = pr + 8u * a;
            let rescale = exp(m_run[a] - m_new[a]);
            l_run[a] = l_run[a] * rescale + row_total(r, false);
            m_run[a] = m_new[a];
            for (var c = 0u; c < 8u; c++) {
                acc[a][c] *= rescale;
            }
        }
        let n = min(TB, last + 1u - k0);
        for (var j = 0u; j < n; j++) {
            var w: array<f32, RA>;
            for (var a = 0u; a < RA; a++) {
                w[a] = tp[(pr + 8u * a) * (TB + 1u) + j];
            }
            for (var c = 0u; c < 8u; c++) {
                let i = lane + 16u * c;
                if (i < d) {
                    let v = tkv[j * TS + i];
                    for (var a = 0u; a < RA; a++) {
                        acc[a][c] += w[a] * v;
                    }
                }
            }
        }
    }
    for (var a = 0u; a < RA; a++) {
        let r = r0 + pr + 8u * a;
        if (r >= rows) {
            continue;
        }
        let t = r / gq;
        let h = g * gq + r % gq;
        var mx = m_run[a];
        var total = l_run[a];
#ifdef SINKS
        mx = max(mx, sinks[p.sinks_offset + h]);
        total = l_run[a] * exp(m_run[a] - mx) + exp(sinks[p.sinks_offset + h] - mx);
#endif
        let f = exp(m_run[a] - mx) / total;
        for (var c = 0u; c < 8u; c++) {
            let i = lane + 16u * c;
            if (i < d) {
                out[p.out_offset + (t * p.heads + h) * d + i] = acc[a][c] * f;
            }
        }
    }
}
