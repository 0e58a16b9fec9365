// Embedding lookup: y[t] = row ids[t] of the table, decoded from its stored layout (DECODER) and
// multiplied by `scale`. One thread per four values: each decodes its 32-value unit and writes
// its vec4 of it, so that a single row spreads over units / 8 workgroups and neighbouring
// threads store neighbouring values. Rows outside this part are skipped.
#include "common.wgsl"
#include DECODER

struct Params {
    rows: u32,       // rows in this part
    cols: u32,
    first_row: u32,  // first table row held by this part
    tokens: u32,
    scale: f32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(3) var<storage, read> ids: array<u32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
@group(0) @binding(5) var<uniform> p: Params;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let u = gid.x / 8u;
    let k = gid.x % 8u;
    let t = gid.y;
    let units = (p.cols + 31u) / 32u;
    if (u >= units || t >= p.tokens) {
        return;
    }
    let id = ids[t];
    if (id < p.first_row || id >= p.first_row + p.rows) {
        return;
    }
    var w = load_unit(id - p.first_row, u, p.cols);
    let quad = w[k] * p.scale;
    for (var j = 0u; j < 4u; j++) {
        let c = u * 32u + 4u * k + j;
        if (c < p.cols) {
            y[t * p.cols + c] = quad[j];
        }
    }
}
