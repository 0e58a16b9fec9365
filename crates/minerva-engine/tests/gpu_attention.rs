//! GPU attention over the KV cache against the CPU: GQA, causal, sliding window, sinks, f16 and
//! f32 caches, several key chunks, a wrapping window cache, RoPE fused into the cache write,
//! prefill in tiles, one-dispatch decode, and RoPE and the cache write folded into decode.

mod gpu_common;

use gpu_common::attention::*;
use gpu_common::*;
use minerva_engine::gpu::{AttnShape, GpuContext, KvCache, Ops};
use std::sync::Arc;

#[test]
fn attention_full_window_and_sinks() {
    let Some(ctx) = shared() else { return };
    let base = AttnShape {
        heads: 4,
        kv_heads: 2,
        head_dim: 16,
        cache_len: 300,
        window: 0,
        scale: 0.25,
    };
    // 270 prefill tokens span two key chunks; then two decode steps.
    attention_case(&ctx, base, true, None, 272, 270, 1, None);
    attention_case(&ctx, base, false, None, 40, 37, 1, None);
    attention_case(
        &ctx,
        AttnShape { window: 7, ..base },
        true,
        Some(vec![0.5, -1.0, 2.0, 0.0]),
        30,
        20,
        1,
        None,
    );
}

#[test]
fn attention_over_more_chunks_than_workgroups() {
    let Some(ctx) = shared() else { return };
    // 11 key chunks: the prompt runs one workgroup per query over all of them, the 3-token
    // steps 8 workgroups per query, some taking two chunks, merged by the combine pass.
    let shape = AttnShape {
        heads: 4,
        kv_heads: 1,
        head_dim: 16,
        cache_len: 2600,
        window: 0,
        scale: 0.25,
    };
    attention_case(
        &ctx,
        shape,
        true,
        Some(vec![0.3, -0.2, 0.0, 1.0]),
        2599,
        2590,
        3,
        None,
    );
}

#[test]
fn attention_sliding_window_cache_wraps() {
    let Some(ctx) = shared() else { return };
    // The cache holds the window plus one token: positions wrap around it while decoding.
    let shape = AttnShape {
        heads: 6,
        kv_heads: 3,
        head_dim: 8,
        cache_len: 6,
        window: 5,
        scale: 0.3,
    };
    attention_case(&ctx, shape, true, Some(vec![0.1; 6]), 14, 1, 1, None);
}

#[test]
fn rope_write_then_decode_attention_in_one_dispatch() {
    let Some(ctx) = shared() else { return };
    let shape = |heads, kv_heads, head_dim, cache_len, window, scale| AttnShape {
        heads,
        kv_heads,
        head_dim,
        cache_len,
        window,
        scale,
    };
    let adjacent = CaseRope {
        rot: 64,
        halves: false,
        mscale: 1.0,
    };
    // tinyllama's layout: 8 query heads per KV head of 64 values, f16 cache.
    attention_case(
        &ctx,
        shape(16, 2, 64, 200, 0, 0.125),
        true,
        None,
        150,
        140,
        1,
        Some(adjacent),
    );
    // 7 KV heads of one query head each, head_dim 80 turned in part (halves), f32 cache.
    attention_case(
        &ctx,
        shape(7, 7, 80, 100, 0, 0.11),
        false,
        None,
        70,
        33,
        1,
        Some(CaseRope {
            rot: 40,
            halves: true,
            mscale: 1.2,
        }),
    );
    // gpt-oss's: sinks, head_dim 128, a window whose cache wraps twice while decoding.
    attention_case(
        &ctx,
        shape(16, 2, 128, 41, 40, 0.09),
        true,
        Some((0..16).map(|h| h as f32 * 0.3 - 2.0).collect()),
        100,
        30,
        1,
        Some(CaseRope {
            rot: 128,
            halves: true,
            mscale: 1.0,
        }),
    );
    // 64 query heads of 32 values on one KV head: the most one workgroup holds; each split
    // takes its block of keys 16 at a time.
    attention_case(
        &ctx,
        shape(64, 1, 32, 120, 0, 0.2),
        true,
        None,
        100,
        90,
        1,
        None,
    );
    // 8 query heads of 512 values exceed it: two passes, also for one query.
    attention_case(
        &ctx,
        shape(8, 1, 512, 40, 0, 0.05),
        false,
        None,
        36,
        33,
        1,
        None,
    );
}

#[test]
fn prefill_attention_in_tiles() {
    let Some(ctx) = shared() else { return };
    let shape = |heads, kv_heads, head_dim, cache_len, window, scale| AttnShape {
        heads,
        kv_heads,
        head_dim,
        cache_len,
        window,
        scale,
    };
    // Steps of 17, 70 and 2 queries; 7 KV heads of one query head each (tiles of 16 queries, the
    // last partly past the step), head_dim 80 (not a multiple of the 16 lanes), f32 cache.
    let seven = shape(7, 7, 80, 100, 0, 0.11);
    assert!(seven.tiled(2) && !seven.tiled(1));
    attention_case(&ctx, seven, false, None, 89, 17, 70, None);
    // 8 query heads on one KV head (two queries per tile), sinks, f16 cache.
    attention_case(
        &ctx,
        shape(8, 1, 64, 120, 0, 0.125),
        true,
        Some((0..8).map(|h| h as f32 * 0.4 - 1.5).collect()),
        89,
        17,
        70,
        None,
    );
    // A window of 9 keys, shorter than the steps, over a cache of 30 that wraps; head_dim 128
    // (the most a tile holds), 4 query heads per KV head, sinks, both cache types.
    for f16 in [true, false] {
        attention_case(
            &ctx,
            shape(8, 2, 128, 30, 9, 0.09),
            f16,
            Some((0..8).map(|h| 1.0 - h as f32 * 0.3).collect()),
            65,
            17,
            16,
            None,
        );
    }
    // head_dim 256 is past the tiles: attend + combine.
    let wide = shape(2, 1, 256, 40, 0, 0.06);
    assert!(!wide.tiled(5));
    attention_case(&ctx, wide, true, None, 12, 5, 7, None);
}

/// Prompts of at least 32 queries on matrix cores where the adapter has them (the tiles
/// elsewhere, as on CI's lavapipe): heads in groups of two and of one (scores and weights
/// bounded to a few heads'), sinks, blocks of queries and keys partly past the step and the
/// cache (lengths not multiples of 32), a second prompt after the first; then a step of fewer
/// than 32 queries, which keeps the tiles.
#[test]
fn prefill_attention_on_matrix_cores() {
    let Some(ctx) = shared() else { return };
    // tinyllama's layout: 8 query heads per KV head of 64 values.
    let tiny = AttnShape {
        heads: 8,
        kv_heads: 1,
        head_dim: 64,
        cache_len: 120,
        window: 0,
        scale: 0.125,
    };
    let ops = Ops::new(ctx.clone());
    let cache = KvCache::new(&ctx, tiny.cache_len, 1, 64, true);
    assert_eq!(
        ops.attention_on_matrix_cores(&tiny, &cache, 40, 40),
        ctx.caps.matrix_cores
    );
    assert!(!ops.attention_on_matrix_cores(&tiny, &cache, 31, 31));
    let f32_cache = KvCache::new(&ctx, tiny.cache_len, 1, 64, false);
    assert!(!ops.attention_on_matrix_cores(&tiny, &f32_cache, 40, 40));
    let windowed = AttnShape {
        window: 100,
        ..tiny
    };
    assert!(!ops.attention_on_matrix_cores(&windowed, &cache, 40, 40));
    // Shapes no attention takes are refused, not divided by.
    let headless = AttnShape { heads: 0, ..tiny };
    let no_kv = AttnShape {
        kv_heads: 0,
        ..tiny
    };
    assert!(!ops.attention_on_matrix_cores(&headless, &cache, 40, 40));
    assert!(!ops.attention_on_matrix_cores(&no_kv, &cache, 40, 40));
    assert!(!ops.attention_on_matrix_cores(&tiny, &cache, 0, 0));
    // Scores and weights for two heads, then one, at the longest step's layout (64 query rows ×
    // 160 keys × 6 bytes; the shorter first step fits more).
    let sinks = Some((0..8).map(|h| h as f32 * 0.4 - 1.5).collect::<Vec<f32>>());
    for heads_per_group in [2, 1] {
        let bytes = Some(heads_per_group * 64 * 160 * 6);
        attention_steps(
            &ctx,
            tiny,
            true,
            sinks.clone(),
            110,
            40,
            45,
            None,
            false,
            bytes,
        );
    }
    // 2 query heads per KV head of 128 values (two blocks of value dims), no sinks, every head
    // in one group.
    let wide = AttnShape {
        heads: 4,
        kv_heads: 2,
        head_dim: 128,
        cache_len: 100,
        window: 0,
        scale: 0.09,
    };
    attention_steps(&ctx, wide, true, None, 97, 64, 33, None, false, None);
}

#[test]
fn decode_attention_spreads_many_blocks_over_its_splits() {
    let Some(ctx) = shared() else { return };
    // A window of 2100 keys over 64 splits (one per 32 keys it may hold), the keys shared
    // evenly; the cache (window + 1) wraps while decoding.
    let shape = AttnShape {
        heads: 2,
        kv_heads: 1,
        head_dim: 8,
        cache_len: 2101,
        window: 2100,
        scale: 0.3,
    };
    assert_eq!(shape.splits(1), 64);
    attention_case(
        &ctx,
        shape,
        true,
        Some(vec![0.2, -0.4]),
        2110,
        2098,
        1,
        Some(CaseRope {
            rot: 8,
            halves: false,
            mscale: 1.0,
        }),
    );
}

/// An attention shape for the decode tests.
fn attn_shape(heads: u32, kv_heads: u32, head_dim: u32, cache_len: u32, window: u32) -> AttnShape {
    AttnShape {
        heads,
        kv_heads,
        head_dim,
        cache_len,
        window,
        scale: 1.0 / (head_dim as f32).sqrt(),
    }
}

/// The device, and the same device with its kernels built without subgroup operations (the
/// fallback of adapters that have none).
fn with_and_without_subgroups() -> Vec<Arc<GpuContext>> {
    let Some(ctx) = device() else {
        return Vec::new();
    };
    let mut plain = device().expect("the device opened once already");
    plain.caps.subgroups = false;
    vec![Arc::new(ctx), Arc::new(plain)]
}

#[test]
fn decode_attention_from_one_key() {
    // Every step a single query from the first key on: 1 to 45 keys, never a whole number of
    // passes of 256 / 128 / 64 / 32 keys (1, 2, 3 and 8 query heads per KV head; 3 pads to 4).
    let sinks = |n: u32| Some((0..n).map(|h| 0.7 - 0.4 * h as f32).collect::<Vec<f32>>());
    let gq1 = attn_shape(3, 3, 16, 70, 0);
    assert!(gq1.one_pass(1));
    for ctx in with_and_without_subgroups() {
        attention_case(&ctx, gq1, false, None, 45, 1, 1, None);
        attention_case(
            &ctx,
            attn_shape(4, 2, 24, 50, 0),
            true,
            sinks(4),
            45,
            1,
            1,
            None,
        );
        attention_case(
            &ctx,
            attn_shape(6, 2, 32, 50, 0),
            true,
            None,
            45,
            1,
            1,
            None,
        );
        attention_case(
            &ctx,
            attn_shape(16, 2, 64, 60, 0),
            false,
            sinks(16),
            45,
            1,
            1,
            None,
        );
    }
}

#[test]
fn decode_attention_over_thousands_of_keys() {
    let Some(ctx) = shared() else { return };
    // 2,998 to 3,000 keys: 64 splits of 46 or 47 keys, each a whole pass of 32 and a partial one.
    let tiny = attn_shape(8, 1, 64, 3100, 0);
    assert_eq!(tiny.splits(1), 64);
    attention_case(&ctx, tiny, true, None, 3000, 2997, 1, None);
    // A window of 2,500 over a cache of 2,501 that wraps, sinks, head_dim 128, f32 cache.
    let wide = attn_shape(4, 1, 128, 2501, 2500);
    let sinks = Some(vec![0.5, -0.5, 1.5, 0.0]);
    attention_case(&ctx, wide, false, sinks, 2600, 2400, 1, None);
}

#[test]
fn decode_attention_window_and_sinks_in_a_ring() {
    // gpt-oss's sliding layers: 8 query heads per KV head of 64 values, a window of 100 keys
    // over a cache of 101 that wraps while decoding, sinks; both cache types; 64 query heads
    // on one KV head (4 keys a pass).
    let shape = attn_shape(16, 2, 64, 101, 100);
    let sinks: Vec<f32> = (0..16).map(|h| h as f32 * 0.25 - 2.0).collect();
    for ctx in with_and_without_subgroups() {
        for f16 in [true, false] {
            attention_case(&ctx, shape, f16, Some(sinks.clone()), 230, 90, 1, None);
        }
        let many = attn_shape(64, 1, 16, 41, 40);
        let sinks64: Vec<f32> = (0..64).map(|h| 1.0 - h as f32 * 0.05).collect();
        attention_case(&ctx, many, true, Some(sinks64), 70, 20, 1, None);
    }
}

#[test]
fn decode_attention_with_rope_and_cache_write_folded_in() {
    let sinks = |n: usize| Some((0..n).map(|h| 0.6 - 0.3 * h as f32).collect::<Vec<f32>>());
    for ctx in with_and_without_subgroups() {
        // tinyllama's layout (8 query heads per KV head of 64 values), adjacent pairs, f16, every
        // step folded from position 0 (1 to 40 keys: one split, then two).
        let tiny = attn_shape(16, 2, 64, 200, 0);
        attention_steps(
            &ctx,
            tiny,
            true,
            None,
            40,
            1,
            1,
            case_rope(64, false, 1.0),
            true,
            None,
        );
        // 4 query heads per KV head of 128 values, 96 of them turned (halves), YaRN's factor,
        // sinks, f32 cache, a window of 50 over a cache of 51 that wraps while decoding.
        let wide = attn_shape(8, 2, 128, 51, 50);
        let yarn = case_rope(96, true, 1.1);
        attention_steps(&ctx, wide, false, sinks(8), 120, 20, 1, yarn, true, None);
        // One query head per KV head, 32 of 64 dims turned in adjacent pairs, sinks, f16, a
        // window of 33 over a cache of 34 that wraps.
        let single = attn_shape(3, 3, 64, 34, 33);
        let part = case_rope(32, false, 1.0);
        attention_steps(&ctx, single, true, sinks(3), 45, 2, 1, part, true, None);
        // gpt-oss's layout: 8 query heads per KV head of 64 values, sinks, halves, a window of
        // 128 over a cache of 129; both cache types.
        let oss = attn_shape(16, 2, 64, 129, 128);
        for f16 in [true, false] {
            let halves = case_rope(64, true, 1.0);
            attention_steps(&ctx, oss, f16, sinks(16), 140, 125, 1, halves, true, None);
        }
    }
    // Positions past 2,000 (angles reduced before sin and cos) over 64 splits of 33 keys.
    let Some(ctx) = shared() else { return };
    let long = attn_shape(4, 1, 64, 2200, 0);
    assert_eq!(long.splits(1), 64);
    attention_steps(
        &ctx,
        long,
        true,
        sinks(4),
        2110,
        2107,
        1,
        case_rope(64, true, 1.0),
        true,
        None,
    );
}
