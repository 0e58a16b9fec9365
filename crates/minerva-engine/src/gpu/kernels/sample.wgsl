// Sampling the next token on the GPU, so that only the chosen id is read back (and the next
// step can be queued before it is). Two entries over one row of logits:
// - `penalize`: the repetition penalty on the tokens the host lists (distinct ids), and on the
//   token the last choice left in `chosen` when the host has not read it yet (`with_chosen`);
// - `pick`: after the top-k kernel has put the best `k` candidates (ids and logits, best first)
//   in `cand_ids` / `cand_vals`: the softmax at the temperature (over the whole row when no top-k
//   is set, else over the top k), then top-p and min-p, and a draw with the host's uniform `u`
//   from what is kept. The same arithmetic as `Sampler::distribution`, in f32.
struct Params {
    n: u32,            // logits in the row
    offset: u32,       // where the row starts
    k: u32,            // candidates the top-k kernel wrote
    top_k: u32,        // 0: no top-k filter (the candidates stand for the head of the row)
    temperature: f32,
    top_p: f32,
    min_p: f32,
    u: f32,            // uniform in [0, 1)
    penalty: f32,
    penalized: u32,    // ids listed in `pen_ids`
    with_chosen: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> logits: array<f32>;
@group(0) @binding(2) var<storage, read_write> chosen: array<u32>;
@group(0) @binding(3) var<storage, read> pen_ids: array<u32>;
@group(0) @binding(4) var<storage, read> cand_ids: array<u32>;
@group(0) @binding(5) var<storage, read> cand_vals: array<f32>;
// The step, which `pick` moves on as select.wgsl's ADVANCE does.
@group(0) @binding(6) var<storage, read_write> step_rw: array<u32>;

const WG: u32 = 256u;
var<workgroup> partial: array<f32, WG>;
// Each candidate's exp((v − best) / T), worked out by all threads at once, so that the serial
// top-p, min-p and draw loops below only add (they load and exponentiate nothing).
var<workgroup> weights: array<f32, WG>;

fn penalized(v: f32) -> f32 {
    if (v > 0.0) {
        return v / p.penalty;
    }
    return v * p.penalty;
}

@compute @workgroup_size(64)
fn penalize(@builtin(local_invocation_id) lid3: vec3<u32>) {
    let lid = lid3.x;
    for (var i = lid; i < p.penalized; i += 64u) {
        let t = pen_ids[i];
        if (t < p.n) {
            logits[p.offset + t] = penalized(logits[p.offset + t]);
        }
    }
    if (lid == 0u && p.with_chosen != 0u) {
        let c = chosen[0];
        var listed = false;
        for (var i = 0u; i < p.penalized; i++) {
            listed = listed || pen_ids[i] == c;
        }
        if (!listed && c < p.n) {
            logits[p.offset + c] = penalized(logits[p.offset + c]);
        }
    }
}

@compute @workgroup_size(256)
fn pick(@builtin(local_invocation_id) lid3: vec3<u32>) {
    let lid = lid3.x;
    let best = cand_vals[0];
    // At most WG candidates (the host asks for at most 256).
    let kept_k = min(WG, select(p.k, min(p.top_k, p.k), p.top_k > 0u));
    for (var i = lid; i < kept_k; i += WG) {
        weights[i] = exp((cand_vals[i] - best) / p.temperature);
    }
    // The softmax's denominator: over the row, or over the top k.
    var s = 0.0;
    if (p.top_k == 0u) {
        // Eight of the row's values loaded at once per thread: one at a time, each thread of
        // this one workgroup waited on every load in turn (≈ 75 µs for 201,088 values).
        var a = vec4<f32>(0.0);
        var b = vec4<f32>(0.0);
        var i = lid;
        for (; i + 7u * WG < p.n; i += 8u * WG) {
            let at = p.offset + i;
            let u = vec4<f32>(logits[at], logits[at + WG], logits[at + 2u * WG], logits[at + 3u * WG]);
            let v = vec4<f32>(
                logits[at + 4u * WG],
                logits[at + 5u * WG],
                logits[at + 6u * WG],
                logits[at + 7u * WG],
            );
            a += exp((u - best) / p.temperature);
            b += exp((v - best) / p.temperature);
        }
        for (; i < p.n; i += WG) {
            a.x += exp((logits[p.offset + i] - best) / p.temperature);
        }
        let ab = a + b;
        s = (ab.x + ab.y) + (ab.z + ab.w);
    } else {
        for (var i = lid; i < kept_k; i += WG) {
            s += weights[i];
        }
    }
    partial[lid] = s;
    workgroupBarrier();
    for (var st = WG / 2u; st > 0u; st >>= 1u) {
        if (lid < st) {
            partial[lid] += partial[lid + st];
        }
        workgroupBarrier();
    }
    if (lid != 0u) {
        return;
    }
    let total = partial[0];
    // How many candidates top-p and min-p keep (at least one).
    var keep = kept_k;
    if (p.top_p < 1.0) {
        var acc = 0.0;
        for (var i = 0u; i < kept_k; i++) {
            acc += weights[i] / total;
            if (acc >= p.top_p) {
                keep = i + 1u;
                break;
            }
        }
    }
    if (p.min_p > 0.0) {
        let least = p.min_p / total;
        var n = 0u;
        while (n < keep && weights[n] / total >= least) {
            n++;
        }
        keep = max(n, 1u);
    }
    var kept = 0.0;
    for (var i = 0u; i < keep; i++) {
        kept += weights[i];
    }
    let goal = p.u * kept;
    var acc = 0.0;
    var drawn = cand_ids[keep - 1u];
    for (var i = 0u; i < keep; i++) {
        acc += weights[i];
        if (goal < acc) {
            drawn = cand_ids[i];
            break;
        }
    }
    chosen[0] = drawn;
    step_rw[0] += step_rw[1];
    step_rw[1] = 1u;
}
