// Rotary position embedding, in place on [tokens][heads][head_dim]. Token t sits at position
// pos0 + t; pair i turns by pos · freq[i] (frequencies with any scaling, from the CPU), and the
// result is multiplied by `mscale` (YaRN's attention factor; 1 otherwise). HALVES pairs x[i] with
// x[i + d/2] (Hugging Face); otherwise pairs are adjacent (x[2i], x[2i+1], GGUF llama).
// With TWO, heads [heads, heads + heads2) are those of a second buffer (q and k in one dispatch).
#include "angle.wgsl"

struct Params {
    tokens: u32,
    heads: u32,
    head_dim: u32,
    rot_dim: u32,    // rotated dims (≤ head_dim); the rest pass through
    halves: u32,
    offset: u32,
    mscale: f32,
    heads2: u32,
}

#include "step.wgsl"

@group(0) @binding(0) var<storage, read_write> v: array<f32>;
@group(0) @binding(1) var<storage, read> freq: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;
@group(0) @binding(3) var<uniform> step: Step;
#ifdef TWO
@group(0) @binding(4) var<storage, read_write> v2: array<f32>;
#endif

fn turn(second: bool, a: u32, b: u32, c: f32, s: f32) {
#ifdef TWO
    if (second) {
        let x0 = v2[a];
        let x1 = v2[b];
        v2[a] = x0 * c - x1 * s;
        v2[b] = x0 * s + x1 * c;
        return;
    }
#endif
    let x0 = v[a];
    let x1 = v[b];
    v[a] = x0 * c - x1 * s;
    v[b] = x0 * s + x1 * c;
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let half = p.rot_dim / 2u;
    let i = gid.x;
    let t = gid.z;
    let second = gid.y >= p.heads;
    let h = select(gid.y, gid.y - p.heads, second);
    let heads = select(p.heads, p.heads2, second);
    if (i >= half || h >= heads || t >= p.tokens) {
        return;
    }
    let base = select(p.offset, 0u, second) + (t * heads + h) * p.head_dim;
    var a = base + 2u * i;
    var b = a + 1u;
    if (p.halves != 0u) {
        a = base + i;
        b = base + i + half;
    }
    let cs = cos_sin(f32(step.pos0 + t) * freq[i]) * p.mscale;
    turn(second, a, b, cs.x, cs.y);
}
