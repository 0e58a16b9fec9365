// The single-query attention kernel (`decode`; attention.wgsl's header says what it does),
// included by attention.wgsl for its decode variants: it uses that file's parameters,
// bindings and helpers (first_key, the cache's pairs, angle.wgsl).
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

// Score thread sj's key row of the pass from key c0 (live: a real head and key); the step's
// own key is left to new_k.
fn load_k(c0: u32, g: u32, live: bool, sj: u32) -> array<Oct, D8> {
    var kr: array<Oct, D8>;
    if (live && !is_new(c0 + sj)) {
        let base = row_oct(c0 + sj, g);
        for (var o = 0u; o < D8; o++) {
            kr[o] = k_oct(base + o);
        }
    }
    return kr;
}

// Value thread (vsub, vh, vo)'s octets of the pass's keys vsub, vsub + R, … of its `cnt`; the
// step's own value is left to new_v.
fn load_v(c0: u32, cnt: u32, g: u32, vh: u32, vsub: u32, vo: u32) -> array<Oct, D8> {
    var vr: array<Oct, D8>;
    if (vh < GQ) {
        for (var t = 0u; t < D8; t++) {
            let j = vsub + R * t;
            if (j < cnt && !is_new(c0 + j)) {
                vr[t] = v_oct(row_oct(c0 + j, g) + vo);
            }
        }
    }
    return vr;
}

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
    let sh = lid / RUN;
    let sj = lid % RUN;
    let vsub = lid / VU;
    let vh = lid % VU / D8;
    let vo = lid % D8;
    // The first pass's cache loads go out before the query is staged and turned, so that
    // their latency and the query's overlap.
    let cnt0 = min(RUN, k1 - k0);
    var kr = load_k(k0, g, sh < GQ && sj < cnt0, sj);
    var vr = load_v(k0, cnt0, g, vh, vsub, vo);
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
    var m_run = NEG;
    var l_run = 0.0;
    var acc = array<vec4<f32>, 2>(vec4<f32>(0.0), vec4<f32>(0.0));
    for (var c0 = k0; c0 < k1; c0 += RUN) {
        let cnt = min(RUN, k1 - c0);
        let live = sh < GQ && sj < cnt;
        if (c0 != k0) {
            kr = load_k(c0, g, live, sj);
            vr = load_v(c0, cnt, g, vh, vsub, vo);
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
