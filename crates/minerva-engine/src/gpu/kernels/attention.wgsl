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
//   decode      (attention_decode.wgsl) one query in one dispatch: workgroup (split, KV head)
//               attends all query heads of that KV head (keys read once for the group) over its
//               share of the keys; the last workgroup of the KV head to finish merges the
//               splits as combine does. Built per shape (DEC_GQ heads per KV head, DEC_D8
//               octets per head), head_dim a multiple of 8. With DEC_ROPE it also does
//               rope_write's work for its one query: q and k arrive unturned, every split turns
//               q as it loads it, and the split holding the step's own key turns k and stores
//               it with v at the step's slot. With DEC_XQ the merge also writes its outputs as
//               int8 records (x_quant.wgsl), so that the int8 product reading them next needs
//               no quantizing dispatch.
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
#include "attention_decode.wgsl"
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
