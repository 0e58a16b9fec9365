// Attention over a per-layer KV cache, split along the keys ("flash decoding"):
//   write_kv  stores the step's keys and values at slot (pos0 + t) % cache_len (f16 pairs in
//             u32 words, or f32 with KV_F32). A sliding-window layer's cache may hold just the
//             window plus one step's tokens; positions wrap around it.
//   attend    for each (split, query head, token): the causal keys inside the window, taken
//             CHUNK at a time (chunks split, split + splits, …), with a running max m, Σexp l
//             and exp-weighted sum of values.
//   combine   merges the splits of each (head, token), with the head's sink logit (SINKS) in the
//             denominator only.
// Query head h reads KV head h / (heads / kv_heads) (grouped-query attention).
struct Params {
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    cache_len: u32,
    window: u32,      // 0: attend to every earlier position
    chunks: u32,      // splits per (head, token) in the scratch buffer
    q_offset: u32,
    k_offset: u32,    // write_kv: offset of the new keys
    v_offset: u32,
    out_offset: u32,
    scale: f32,
    sinks_offset: u32,
}

struct Step {
    pos0: u32,
    tokens: u32,
    _pad0: u32,
    _pad1: u32,
}

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
#ifdef KV_F32
    kc[dst] = src[ks];
    kc[dst + 1u] = src[ks + 1u];
    vc[dst] = vsrc[vs];
    vc[dst + 1u] = vsrc[vs + 1u];
#else
    kc[dst >> 1u] = pack2x16float(vec2<f32>(src[ks], src[ks + 1u]));
    vc[dst >> 1u] = pack2x16float(vec2<f32>(vsrc[vs], vsrc[vs + 1u]));
#endif
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
