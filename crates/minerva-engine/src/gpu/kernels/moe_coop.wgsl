// Mixture-of-experts prefill on matrix cores (matmul_coop.wgsl with EXPERTS), around the
// product: `gather` writes the items of each tile of moe.wgsl's `group` as f16 rows, 32 slots
// per tile (slot 32·g + j holds item order[tiles[g].y + j], reading x row item / x_div; zeros
// past the tile's items), and `scatter` moves each live slot's product row to its item's row of
// y, adding the item's expert's bias (BIAS). Slots of empty tiles and past a tile's count are
// never read back.
struct Params {
    cols: u32,          // values per row of x and of y
    stride: u32,        // halves per f16 row (gather), values per product row (scatter)
    x_offset: u32,
    x_stride: u32,
    x_div: u32,
    y_offset: u32,
    y_stride: u32,
    bias_offset: u32,
    bias_stride: u32,
    splits: u32,        // scatter: the product's shares of its inputs, each a partial sum
    split_stride: u32,  // scatter: values between the shares' partial sums
    _pad: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> order: array<u32>;
@group(0) @binding(2) var<storage, read> tiles: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read> x: array<f32>;
// f16 pairs, low half first: halves 4i .. 4i + 3 of `x16` are vec2 i.
@group(0) @binding(4) var<storage, read_write> x16: array<vec2<u32>>;
@group(0) @binding(5) var<storage, read> products: array<f32>;
@group(0) @binding(6) var<storage, read_write> y: array<f32>;
#ifdef BIAS
@group(0) @binding(7) var<storage, read> bias: array<f32>;
#endif

const F16_MAX: f32 = 65504.0;

// One thread per four halves of one slot: grid (stride / 4 / 64, slots).
@compute @workgroup_size(64)
fn gather(@builtin(global_invocation_id) gid: vec3<u32>) {
    let c = 4u * gid.x;
    let slot = gid.y;
    if (c >= p.stride) {
        return;
    }
    let tile = tiles[slot / 32u];
    let j = slot % 32u;
    var v = vec4<f32>(0.0);
    if (j < tile.z) {
        let row = order[tile.y + j] / p.x_div;
        for (var i = 0u; i < 4u; i++) {
            if (c + i < p.cols) {
                v[i] = clamp(x[p.x_offset + row * p.x_stride + c + i], -F16_MAX, F16_MAX);
            }
        }
    }
    x16[(slot * p.stride + c) / 4u] = vec2<u32>(pack2x16float(v.xy), pack2x16float(v.zw));
}

// Output values per thread of `scatter`, 64 apart (SCATTER_VALUES in moe_coop.rs).
const SCATTER_VALUES: u32 = 4u;

// Each thread SCATTER_VALUES output values of one slot, a workgroup's threads neighbours:
// grid (cols / (64 · SCATTER_VALUES), slots).
@compute @workgroup_size(64)
fn scatter(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let slot = wid.y;
    let tile = tiles[slot / 32u];
    let j = slot % 32u;
    if (j >= tile.z) {
        return;
    }
    let item = order[tile.y + j];
    for (var i = 0u; i < SCATTER_VALUES; i++) {
        let r = (wid.x * SCATTER_VALUES + i) * 64u + lid;
        if (r >= p.cols) {
            return;
        }
        var v = 0.0;
        for (var z = 0u; z < p.splits; z++) {
            v += products[z * p.split_stride + slot * p.stride + r];
        }
#ifdef BIAS
        v += bias[p.bias_offset + tile.x * p.bias_stride + r];
#endif
        y[p.y_offset + item * p.y_stride + r] = v;
    }
}
