//! The attention tests' harness: the CPU's causal attention, and steps of queries run through
//! the GPU's cache write and attention (`attention_case`, `attention_steps`), each checked
//! against it.

use super::activations::*;
use super::*;
use minerva_engine::gpu::ops::Rotary;
use minerva_engine::gpu::{AttnShape, GpuContext, KvCache, Ops, Region, Step, SCORES_BYTES};
use std::sync::Arc;

/// Causal attention of queries at positions pos0.. over the keys and values of all positions.
#[allow(clippy::too_many_arguments)]
pub fn cpu_attention(
    q: &[f32],
    keys: &[f32],
    vals: &[f32],
    pos0: usize,
    s: &AttnShape,
    sinks: Option<&[f32]>,
) -> Vec<f32> {
    let (h_n, kv_n, d) = (s.heads as usize, s.kv_heads as usize, s.head_dim as usize);
    let mut out = Vec::new();
    for (t, qt) in q.chunks(h_n * d).enumerate() {
        let qp = pos0 + t;
        let lo = if s.window > 0 {
            (qp + 1).saturating_sub(s.window as usize)
        } else {
            0
        };
        for h in 0..h_n {
            let kvh = h / (h_n / kv_n);
            let qh = &qt[h * d..(h + 1) * d];
            let scores: Vec<f64> = (lo..=qp)
                .map(|j| {
                    let k = &keys[(j * kv_n + kvh) * d..(j * kv_n + kvh + 1) * d];
                    qh.iter()
                        .zip(k)
                        .map(|(a, b)| (*a as f64) * (*b as f64))
                        .sum::<f64>()
                        * s.scale as f64
                })
                .collect();
            let sink = sinks.map(|x| x[h] as f64);
            let m = scores
                .iter()
                .copied()
                .fold(sink.unwrap_or(f64::MIN), f64::max);
            let denom: f64 = scores.iter().map(|v| (v - m).exp()).sum::<f64>()
                + sink.map(|x| (x - m).exp()).unwrap_or(0.0);
            for i in 0..d {
                let acc: f64 = (lo..=qp)
                    .zip(&scores)
                    .map(|(j, sc)| (sc - m).exp() * vals[(j * kv_n + kvh) * d + i] as f64)
                    .sum();
                out.push((acc / denom) as f32);
            }
        }
    }
    out
}

pub fn round_f16(v: &[f32]) -> Vec<f32> {
    v.iter().map(|x| half::f16::from_f32(*x).to_f32()).collect()
}

/// The RoPE an attention case applies in the cache write (`Ops::rope_write`, `Ops::decode_rope`).
#[derive(Clone, Copy)]
pub struct CaseRope {
    pub rot: usize,
    pub halves: bool,
    pub mscale: f32,
}

/// Prefills `first` tokens, then the rest `then` at a time, comparing every step. With `rope`,
/// each step's q and k are turned by the same dispatch that writes the cache (checked against
/// the CPU), and attention is checked against the turned values the GPU kept.
#[allow(clippy::too_many_arguments)]
pub fn attention_case(
    ctx: &Arc<GpuContext>,
    shape: AttnShape,
    f16: bool,
    sinks: Option<Vec<f32>>,
    total: usize,
    first: usize,
    then: usize,
    rope: Option<CaseRope>,
) {
    attention_steps(
        ctx, shape, f16, sinks, total, first, then, rope, false, None,
    );
}

/// `attention_case`, with single-query steps through `decode_rope` where `fold` (the RoPE and
/// the cache write in the attention's dispatch; the cache slot written is checked too), every
/// other one also writing its output as int8 records (checked against the output).
#[allow(clippy::too_many_arguments)]
pub fn attention_steps(
    ctx: &Arc<GpuContext>,
    shape: AttnShape,
    f16: bool,
    sinks: Option<Vec<f32>>,
    total: usize,
    first: usize,
    then: usize,
    rope: Option<CaseRope>,
    fold: bool,
    scores_bytes: Option<u64>,
) {
    let mut ops = Ops::new(ctx.clone());
    ops.set_int8_products(true);
    if let Some(b) = scores_bytes {
        ops.set_scores_bytes(b);
    }
    let mut rng = Rng::new(13 + total as u64);
    let (h_n, kv_n, d) = (
        shape.heads as usize,
        shape.kv_heads as usize,
        shape.head_dim as usize,
    );
    let q = rng.vec(total * h_n * d);
    let k = rng.vec(total * kv_n * d);
    let v = rng.vec(total * kv_n * d);
    let rounded = |x: &[f32]| if f16 { round_f16(x) } else { x.to_vec() };
    let vr = rounded(&v);
    // Keys as the cache holds them, filled in step by step.
    let mut keys = vec![0f32; k.len()];
    let freq: Vec<f32> = rope.map_or(Vec::new(), |r| {
        (0..r.rot / 2)
            .map(|i| 10000f32.powf(-2.0 * i as f32 / r.rot as f32))
            .collect()
    });
    // One spare value: a buffer is never empty.
    let freq_buf = ctx.storage_with("freq", &[freq.as_slice(), &[0.0]].concat());
    let cache = KvCache::new(ctx, shape.cache_len, shape.kv_heads, shape.head_dim, f16);
    let sink_buf = sinks.as_ref().map(|s| ctx.storage_with("sinks", s));
    let step_buf = ctx.uniform("step", &Step::default());
    let scratch_len = shape
        .scratch_len(first as u32)
        .max(shape.scratch_len(then as u32));
    let scratch = ctx.storage("scratch", scratch_len * 4);
    let counters = ctx.storage("counters", shape.kv_heads as u64 * 4);
    let what = format!(
        "attention fold={fold} f16={f16} heads={h_n}/{kv_n}x{d} window={} cache={} sinks={} \
         rope={}",
        shape.window,
        shape.cache_len,
        sinks.is_some(),
        rope.map_or("no".into(), |r| format!(
            "{}/{}/{}",
            r.rot, r.halves, r.mscale
        ))
    );
    let mut pos = 0;
    let mut steps = 0;
    while pos < total {
        let n = if pos == 0 {
            first
        } else {
            then.min(total - pos)
        };
        // The most keys a query sees: exactly the step's (the tightest layout), or every other
        // step as the backend gives it, a power of two (past the cache here and there).
        let seen = match steps % 2 {
            0 => (pos + n) as u32,
            _ => ((pos + n) as u32).next_power_of_two(),
        };
        steps += 1;
        let coop = ops.attention_on_matrix_cores(&shape, &cache, n as u32, seen);
        let (qs, ks) = (
            pos * h_n * d..(pos + n) * h_n * d,
            pos * kv_n * d..(pos + n) * kv_n * d,
        );
        let qb = ctx.storage_with("q", &q[qs.clone()]);
        let records = match (&rope, fold && n == 1 && pos % 2 == 0) {
            (Some(_), true) => {
                let r = ops.attention_records(&shape);
                // Every shape here groups whole units of 32 outputs per KV head.
                assert!(
                    r.is_some() || ctx.caps.max_storage_buffers <= 10,
                    "{what}: no records"
                );
                r
            }
            _ => None,
        };
        // The output from offset 1, or 0 where the records are written (they cover it all).
        let o_off = if records.is_some() { 0 } else { 1 };
        let ob = ctx.storage("out", ((n * h_n * d + 1) * 4) as u64);
        ctx.queue.write_buffer(
            &step_buf,
            0,
            bytemuck::bytes_of(&Step {
                pos0: pos as u32,
                tokens: n as u32,
                _pad: [0; 2],
            }),
        );
        // src = [k | v] of the step's tokens (write_kv); separate buffers for rope_write.
        let mut src = k[ks.clone()].to_vec();
        src.extend(&v[ks.clone()]);
        let sb = ctx.storage_with("kv", &src);
        let (kb, vb) = (
            ctx.storage_with("k", &k[ks.clone()]),
            ctx.storage_with("v", &v[ks.clone()]),
        );
        let rotary = rope.map(|r| Rotary {
            freq: &freq_buf,
            rot_dim: r.rot as u32,
            halves: r.halves,
            mscale: r.mscale,
        });
        let folded = match &rotary {
            Some(r) if fold && n == 1 => Some(r),
            _ => None,
        };
        if let Some(r) = folded {
            assert!(ops.folds_rope(&shape, r.rot_dim, 1), "{what}: folds");
            let one = ops
                .decode_rope(
                    &shape,
                    &cache,
                    [&qb, &kb, &vb],
                    r,
                    Region::new(&ob, o_off, 0),
                    &scratch,
                    &counters,
                    sink_buf.as_ref().map(|b| Region::new(b, 0, 0)),
                    &step_buf,
                    records.as_ref(),
                )
                .unwrap();
            run(ctx, &[&one]);
        } else {
            let write = match &rotary {
                Some(r) => ops.rope_write(&shape, &cache, &qb, &kb, &vb, r, &step_buf, n as u32),
                None => ops.write_kv(
                    &shape,
                    &cache,
                    Region::new(&sb, 0, 0),
                    Region::new(&sb, (n * kv_n * d) as u32, 0),
                    &step_buf,
                    n as u32,
                ),
            }
            .unwrap();
            let att = ops
                .attention(
                    &shape,
                    &cache,
                    &qb,
                    0,
                    &ob,
                    1,
                    &scratch,
                    &counters,
                    sink_buf.as_ref().map(|b| Region::new(b, 0, 0)),
                    &step_buf,
                    n as u32,
                    seen,
                )
                .unwrap();
            let one = (n == 1 && shape.one_pass(1)) || shape.tiled(n as u32);
            let want_dispatches = if coop {
                // q to f16, three per group of heads (each as many heads as the scores and
                // weights of fit), the copy out.
                let row_len = seen.clamp(n as u32, shape.cache_len).next_multiple_of(32) + 32;
                let per_head = n.next_multiple_of(32) as u64 * row_len as u64 * 6;
                let per_group =
                    (scores_bytes.unwrap_or(SCORES_BYTES) / per_head).clamp(1, h_n as u64);
                2 + 3 * (h_n as u64).div_ceil(per_group) as usize
            } else if one {
                1
            } else {
                2
            };
            assert_eq!(att.len(), want_dispatches, "{what}: attention dispatches");
            let mut list = vec![&write];
            list.extend(&att);
            run(ctx, &list);
        }
        let step_q = match rope {
            Some(r) => {
                let (mut want_q, mut want_k) = (q[qs.clone()].to_vec(), k[ks.clone()].to_vec());
                cpu_rope(&mut want_q, pos, h_n, d, r.rot, r.halves, &freq, r.mscale);
                cpu_rope(&mut want_k, pos, kv_n, d, r.rot, r.halves, &freq, r.mscale);
                let got_q = ctx.read_f32(&qb, 0, want_q.len()).unwrap();
                let got_k = ctx.read_f32(&kb, 0, want_k.len()).unwrap();
                assert_close(&format!("{what}: q turned at {pos}"), &got_q, &want_q, 1e-4);
                assert_close(&format!("{what}: k turned at {pos}"), &got_k, &want_k, 1e-4);
                keys[ks.clone()].copy_from_slice(&got_k);
                got_q
            }
            None => {
                keys[ks.clone()].copy_from_slice(&k[ks.clone()]);
                q[qs.clone()].to_vec()
            }
        };
        if folded.is_some() {
            // The step's slot holds its turned key and its value, as the cache stores them.
            let row = kv_n * d;
            let slot = pos % shape.cache_len as usize;
            let (got_k, got_v) = read_cache_row(ctx, &cache, slot, row);
            let want_k = rounded(&keys[ks.clone()]);
            assert_close(
                &format!("{what}: cached key at {pos}"),
                &got_k,
                &want_k,
                0.0,
            );
            assert_close(
                &format!("{what}: cached value at {pos}"),
                &got_v,
                &vr[ks.clone()],
                0.0,
            );
        }
        let got = ctx.read_f32(&ob, o_off as usize, n * h_n * d).unwrap();
        let want = cpu_attention(&step_q, &rounded(&keys), &vr, pos, &shape, sinks.as_deref());
        // Matrix cores take the queries and the softmax's weights in f16.
        let tol = if coop { 4e-3 } else { 2e-4 };
        assert_close(&format!("{what} at position {pos}"), &got, &want, tol);
        if let Some(r) = &records {
            let parts = got.len() / 8;
            assert_eq!(r.scales() as usize, parts, "{what}: records");
            let words = ctx.read_u32(r.buffer(), 0, 6 * parts).unwrap();
            check_records(&format!("{what}: records at {pos}"), &got, &words);
        }
        // Neither path leaves a count behind for the next dispatch.
        let left = ctx.read_u32(&counters, 0, kv_n).unwrap();
        assert!(left.iter().all(|&c| c == 0), "{what}: counters {left:?}");
        pos += n;
    }
}

/// Cache slot `slot`'s keys and values (`row` values each) as f32.
pub fn read_cache_row(
    ctx: &GpuContext,
    cache: &KvCache,
    slot: usize,
    row: usize,
) -> (Vec<f32>, Vec<f32>) {
    let read = |b: &wgpu::Buffer| {
        if !cache.f16 {
            return ctx.read_f32(b, slot * row, row).unwrap();
        }
        let words = ctx.read_u32(b, slot * row / 2, row / 2).unwrap();
        words
            .iter()
            .flat_map(|w| [*w as u16, (*w >> 16) as u16])
            .map(|h| half::f16::from_bits(h).to_f32())
            .collect()
    };
    (read(&cache.k), read(&cache.v))
}

/// A rotation of `rot` dims per head (halves: NeoX / Hugging Face pairs, else adjacent pairs
/// as GGUF llama), its turned values times `mscale` (YaRN's attention factor).
pub fn case_rope(rot: usize, halves: bool, mscale: f32) -> Option<CaseRope> {
    Some(CaseRope {
        rot,
        halves,
        mscale,
    })
}
