// Where the tiles of the prefill product (matmul.wgsl, which defines Params `p` and TT) take
// their tokens, weight rows and biases, and where their outputs go. Plain: tile y covers tokens
// y·TT.. of the prompt. With EXPERTS (mixture-of-experts prefill) a tile covers up to TT
// (token, slot) items of one expert, grouped by moe.wgsl's `group`: tile y is tiles[y], its
// items' x rows are gathered through `order`, the weight rows come from the expert's matrix, and
// each item's output goes to its own row; tiles of experts in another part of the weight, and
// empty tiles, exit at once.

#ifdef EXPERTS
@group(0) @binding(6) var<storage, read> order: array<u32>;
@group(0) @binding(8) var<storage, read> tiles: array<vec4<u32>>;
#endif

// The tokens of one tile: `count` of them from position `first` (of the prompt, or of the
// expert-sorted item list), and the expert whose matrix they use.
struct Tile {
    expert: u32,
    first: u32,
    count: u32,
}

fn tile_at(ty: u32) -> Tile {
#ifdef EXPERTS
    let t = tiles[ty];
    return Tile(t.x, t.y, t.z);
#else
    let first = ty * TT;
    return Tile(0u, first, min(TT, p.tokens - min(first, p.tokens)));
#endif
}

// Whether this dispatch has work for the tile: items, and an expert held by this part.
fn tile_live(tile: Tile) -> bool {
#ifdef EXPERTS
    return tile.count > 0u && tile.expert >= p.expert_first
        && tile.expert < p.expert_first + p.expert_count;
#else
    return true;
#endif
}

// The output row (token or item) of the tile's i-th token.
fn tile_token(tile: Tile, i: u32) -> u32 {
#ifdef EXPERTS
    return order[tile.first + i];
#else
    return tile.first + i;
#endif
}

// The x row the tile's i-th token reads.
fn x_row(tile: Tile, i: u32) -> u32 {
#ifdef EXPERTS
    return tile_token(tile, i) / p.x_div;
#else
    return tile_token(tile, i);
#endif
}

// The stored row of output `row` in this part.
fn w_row(tile: Tile, row: u32) -> u32 {
    var r = p.row_base + row * p.row_stride;
#ifdef EXPERTS
    r += (tile.expert - p.expert_first) * p.matrix_rows;
#endif
    return r;
}

// The bias value of output `row`.
fn bias_index(tile: Tile, row: u32) -> u32 {
#ifdef EXPERTS
    return p.bias_offset + tile.expert * p.bias_stride + row;
#else
    return p.bias_offset + row;
#endif
}
