// Matrix × matrix for prefill: y[t][r] = Σ_c W[r][c] · x[t][c] over a tile of 64 rows × 32 tokens
// per workgroup. Each step decodes one 32-value unit of 64 weight rows into workgroup memory
// (DECODER) and loads the matching 32 columns of 32 tokens; 256 threads each own 4 adjacent rows
// × 2 adjacent tokens.
#include "common.wgsl"
#include DECODER

struct Params {
    rows: u32,
    cols: u32,
    tokens: u32,
    x_offset: u32,
    x_stride: u32,
    y_offset: u32,
    y_stride: u32,
    bias_offset: u32,
    row_base: u32,      // output r reads stored row row_base + r · row_stride of the part
    row_stride: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(3) var<storage, read> x: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
@group(0) @binding(5) var<uniform> p: Params;
#ifdef BIAS
@group(0) @binding(7) var<storage, read> bias: array<f32>;
#endif

const TR: u32 = 64u;
const TT: u32 = 32u;
// Transposed tiles, k-major: ws[k][row group of 4] and xs[k][token pair], so each thread reads
// its 4 rows and 2 tokens with one vec4 and one vec2 load per k.
var<workgroup> ws: array<vec4<f32>, 512>; // 32 k × 16 row groups
var<workgroup> xs: array<vec2<f32>, 512>; // 32 k × 16 token pairs

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let r0 = wid.x * TR;
    let t0 = wid.y * TT;
    let tr = lid % 16u;
    let tt = lid / 16u;
    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    let units = (p.cols + 31u) / 32u;
    for (var u = 0u; u < units; u++) {
        if (lid < TR) {
            let row = r0 + lid;
            var w: Unit;
            if (row < p.rows) {
                w = load_unit(p.row_base + row * p.row_stride, u, p.cols);
            }
            for (var k = 0u; k < 8u; k++) {
                for (var j = 0u; j < 4u; j++) {
                    ws[(4u * k + j) * 16u + lid / 4u][lid % 4u] = w[k][j];
                }
            }
        }
        for (var j = 0u; j < 4u; j++) {
            let idx = lid * 4u + j;
            let ti = idx / 32u;
            let c = idx % 32u;
            var v = 0.0;
            if (t0 + ti < p.tokens && u * 32u + c < p.cols) {
                v = x[p.x_offset + (t0 + ti) * p.x_stride + u * 32u + c];
            }
            xs[c * 16u + ti / 2u][ti % 2u] = v;
        }
        workgroupBarrier();
        for (var k = 0u; k < 32u; k++) {
            let wv = ws[k * 16u + tr];
            let xv = xs[k * 16u + tt];
            acc0 += wv * xv.x;
            acc1 += wv * xv.y;
        }
        workgroupBarrier();
    }
    for (var i = 0u; i < 4u; i++) {
        let row = r0 + 4u * tr + i;
        if (row >= p.rows) {
            continue;
        }
        for (var j = 0u; j < 2u; j++) {
            let t = t0 + 2u * tt + j;
            if (t < p.tokens) {
                var v = select(acc0[i], acc1[i], j == 1u);
#ifdef BIAS
                v += bias[p.bias_offset + row];
#endif
                y[p.y_offset + t * p.y_stride + row] = v;
            }
        }
    }
}
