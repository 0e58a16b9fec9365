// Matrix × matrix for prefill: y[t][r] = Σ_c W[r][c] · x[t][c] over a tile of 64 rows × 32 tokens
// per workgroup. Each step decodes one 32-value unit of 64 weight rows into workgroup memory
// (DECODER) and loads the matching 32 columns of 32 tokens; 256 threads each own 4 adjacent rows
// × 2 adjacent tokens. Which tokens, weight rows and outputs a tile covers: matmul_tiles.wgsl
// (with EXPERTS, one expert's items in mixture-of-experts prefill).
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
    matrix_rows: u32,   // EXPERTS: stored rows per expert matrix
    bias_stride: u32,   // EXPERTS: bias values per expert
    expert_first: u32,  // EXPERTS: experts [expert_first, expert_first + expert_count) are in
    expert_count: u32,  // this part
    x_div: u32,         // EXPERTS: item i reads x row i / x_div
    _pad: u32,
}

@group(0) @binding(3) var<storage, read> x: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
@group(0) @binding(5) var<uniform> p: Params;
#ifdef BIAS
@group(0) @binding(7) var<storage, read> bias: array<f32>;
#endif

const TR: u32 = 64u;
const TT: u32 = 32u;

#include "matmul_tiles.wgsl"

// Transposed tiles, k-major: ws[k][row group of 4] and xs[k][token pair], so each thread reads
// its 4 rows and 2 tokens with one vec4 and one vec2 load per k.
var<workgroup> ws: array<vec4<f32>, 512>; // 32 k × 16 row groups
var<workgroup> xs: array<vec2<f32>, 512>; // 32 k × 16 token pairs

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let r0 = wid.x * TR;
    let tile = tile_at(wid.y);
    if (!tile_live(tile)) {
        return;
    }
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
                w = load_unit(w_row(tile, row), u, p.cols);
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
            if (ti < tile.count && u * 32u + c < p.cols) {
                v = x[p.x_offset + x_row(tile, ti) * p.x_stride + u * 32u + c];
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
            let t = 2u * tt + j;
            if (t < tile.count) {
                var v = select(acc0[i], acc1[i], j == 1u);
#ifdef BIAS
                v += bias[bias_index(tile, row)];
#endif
                y[p.y_offset + tile_token(tile, t) * p.y_stride + row] = v;
            }
        }
    }
}
