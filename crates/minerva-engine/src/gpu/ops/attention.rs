//! Attention: the KV cache and its writes (`write_kv`, `rope_write`), the attention kernels
//! (`attention`; `decode_rope` with the RoPE and the cache write folded in) and the int8
//! records the decode attention can write for the product after it.

use super::{Ops, Region, XRecords};
use crate::gpu::context::GpuContext;
use crate::gpu::error::{GpuError, GpuResult};
use crate::gpu::pipelines::Dispatch;
use crate::gpu::shader::Defines;
use bytemuck::{Pod, Zeroable};

/// Keys per chunk of the split-K attention kernel (CHUNK in attention.wgsl).
pub const ATTN_CHUNK: u32 = 256;

/// The single-query attention kernel (`decode` in attention.wgsl): at most DECODE_SPLITS splits
/// per KV head (SMAX), one per DECODE_BLOCK keys the layer may hold, and DECODE_COEFS weights
/// (query head, split) in its merge; query heads per KV head rounded up to a power of two times
/// head_dim at most DECODE_QMAX (each thread holds one value unit), head_dim at most
/// DECODE_DMAX (a thread holds a key's row) and a multiple of 8.
const DECODE_BLOCK: u32 = 32;
const DECODE_SPLITS: u32 = 64;
const DECODE_COEFS: u32 = 2048;
const DECODE_QMAX: u32 = 2048;
const DECODE_GMAX: u32 = 64;
const DECODE_DMAX: u32 = 256;
/// Storage buffers `decode` binds with the RoPE and the cache write folded in (sinks included).
const DECODE_ROPE_BUFFERS: u32 = 10;
/// Prefill attention in tiles (`attend_tiled`): TILE_ROWS (query, query head) rows per
/// workgroup, head_dim at most TILE_DMAX (its workgroup memory holds the rows and a block of
/// keys of that size).
const TILE_ROWS: u32 = 32;
const TILE_DMAX: u32 = 128;

/// Shape of one attention layer.
#[derive(Debug, Clone, Copy)]
pub struct AttnShape {
    pub heads: u32,
    pub kv_heads: u32,
    pub head_dim: u32,
    /// Positions the cache holds; position p lives in slot p % cache_len.
    pub cache_len: u32,
    /// 0 for full attention.
    pub window: u32,
    pub scale: f32,
}

impl AttnShape {
    /// Keys a query may attend to, at most.
    fn keys(&self) -> u32 {
        if self.window == 0 {
            self.cache_len
        } else {
            self.window.min(self.cache_len)
        }
    }

    /// Key chunks a query may span.
    pub fn chunks(&self) -> u32 {
        self.keys().div_ceil(ATTN_CHUNK).max(1)
    }

    /// Whether `tokens` queries run as one dispatch (`decode`): a single query, with the query
    /// heads of a KV head fitting its workgroup memory.
    pub fn one_pass(&self, tokens: u32) -> bool {
        let group = self.group().next_power_of_two();
        tokens == 1
            && group <= DECODE_GMAX
            && group * self.head_dim <= DECODE_QMAX
            && self.head_dim <= DECODE_DMAX
            && self.head_dim.is_multiple_of(8)
    }

    /// Query heads per KV head.
    fn group(&self) -> u32 {
        self.heads / self.kv_heads.max(1)
    }

    /// Whether `tokens` queries run as one `attend_tiled` dispatch: several queries, with
    /// head_dim small enough for its tiles.
    pub fn tiled(&self, tokens: u32) -> bool {
        tokens > 1 && self.head_dim <= TILE_DMAX
    }

    /// Workgroups per (head, query) of the two-pass kernels, each taking every `splits`-th
    /// chunk: many for one query (decode: parallelism comes from the keys), one for long
    /// prompts (it comes from the queries, and scratch stays small). For one pass, workgroups
    /// per KV head, each taking a contiguous share of the key blocks.
    pub fn splits(&self, tokens: u32) -> u32 {
        if self.one_pass(tokens) {
            let most = DECODE_SPLITS.min(DECODE_COEFS / self.group().next_power_of_two());
            return self.keys().div_ceil(DECODE_BLOCK).clamp(1, most);
        }
        let cap = match tokens {
            0 | 1 => 32,
            2..=15 => 8,
            _ => 1,
        };
        self.chunks().min(cap)
    }

    /// f32 values of scratch needed for `tokens` queries.
    pub fn scratch_len(&self, tokens: u32) -> u64 {
        tokens as u64 * self.heads as u64 * self.splits(tokens) as u64 * (self.head_dim as u64 + 2)
    }
}

/// The rotary embedding that `Ops::rope_write` and `Ops::decode_rope` apply: `rot_dim / 2`
/// frequencies in `freq`, pairs (i, i + rot_dim / 2) with `halves`, else (2i, 2i + 1), turned
/// values times `mscale`.
#[derive(Clone, Copy)]
pub struct Rotary<'a> {
    pub freq: &'a wgpu::Buffer,
    pub rot_dim: u32,
    pub halves: bool,
    pub mscale: f32,
}

/// The KV cache buffers of one layer.
pub struct KvCache {
    pub k: wgpu::Buffer,
    pub v: wgpu::Buffer,
    pub f16: bool,
}

impl KvCache {
    /// A cache of `positions` × `kv_heads` × `head_dim` values, f16 where `f16` is set.
    pub fn new(
        ctx: &GpuContext,
        positions: u32,
        kv_heads: u32,
        head_dim: u32,
        f16: bool,
    ) -> KvCache {
        // The slack past the last position is what the matrix-core prefill attention's last
        // blocks of keys may read (`CACHE_SLACK`).
        let slots = positions as u64 + super::CACHE_SLACK as u64;
        let bytes = slots * kv_heads as u64 * head_dim as u64 * if f16 { 2 } else { 4 };
        KvCache {
            k: ctx.storage("k cache", bytes),
            v: ctx.storage("v cache", bytes),
            f16,
        }
    }
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct AttnParams {
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    cache_len: u32,
    window: u32,
    chunks: u32,
    q_offset: u32,
    k_offset: u32,
    v_offset: u32,
    out_offset: u32,
    scale: f32,
    sinks_offset: u32,
    rot_dim: u32,
    halves: u32,
    mscale: f32,
    xq_scales: u32,
}

/// Element offsets of the attention kernels' operands.
#[derive(Default, Clone, Copy)]
struct AttnOffsets {
    q: u32,
    k: u32,
    v: u32,
    out: u32,
    sinks: u32,
}

impl Ops {
    /// Where the decode attention of `shape` writes its output as int8 records, if it can
    /// (`writes_records`).
    pub fn attention_records(&self, shape: &AttnShape) -> Option<XRecords> {
        self.writes_records(shape)
            .then(|| self.records_buffer(shape.heads * shape.head_dim / 8))
    }

    /// Whether the decode attention (`decode_rope`) of `shape` can write its output as int8
    /// records: int8 products on, each KV head's group of outputs whole units of 32 that its
    /// merging workgroup holds (≤ 2048 values), and a binding to spare.
    pub fn writes_records(&self, shape: &AttnShape) -> bool {
        let group = shape.group() * shape.head_dim;
        self.int8_products
            && group.is_multiple_of(32)
            && group <= 2048
            && self.ctx.caps.max_storage_buffers > DECODE_ROPE_BUFFERS
    }

    /// Stores the step's keys (src at k_offset) and values (src at v_offset), [tokens, kv_heads,
    /// head_dim], into the cache.
    pub fn write_kv(
        &self,
        shape: &AttnShape,
        cache: &KvCache,
        k: Region,
        v: Region,
        step: &wgpu::Buffer,
        tokens: u32,
    ) -> GpuResult<Dispatch> {
        let pipe = self.pipeline(
            "attention.wgsl",
            &self.attn_defines(cache, false),
            "write_kv",
        )?;
        let offsets = AttnOffsets {
            k: k.offset,
            v: v.offset,
            ..AttnOffsets::default()
        };
        let ub = self
            .ctx
            .uniform("kv params", &self.attn_params(shape, tokens, offsets, None));
        let per_token = shape.kv_heads * shape.head_dim / 2;
        Ok(self.dispatch(
            pipe,
            &[
                (0, &ub),
                (1, step),
                (2, &cache.k),
                (3, &cache.v),
                (4, k.buf),
                (8, v.buf),
            ],
            [per_token.div_ceil(64), tokens, 1],
        ))
    }

    /// RoPE of q [tokens, heads, head_dim] and k [tokens, kv_heads, head_dim] in place (each
    /// from offset 0 of its buffer), then k with v into the cache as `write_kv` does: one
    /// dispatch for what precedes attention in a layer.
    #[allow(clippy::too_many_arguments)]
    pub fn rope_write(
        &self,
        shape: &AttnShape,
        cache: &KvCache,
        q: &wgpu::Buffer,
        k: &wgpu::Buffer,
        v: &wgpu::Buffer,
        rotary: &Rotary,
        step: &wgpu::Buffer,
        tokens: u32,
    ) -> GpuResult<Dispatch> {
        if shape.head_dim > 512
            || rotary.rot_dim > shape.head_dim
            || !rotary.rot_dim.is_multiple_of(2)
        {
            return Err(GpuError::Validation(format!(
                "rope_write: {} rotated dims of heads of {} (at most 512)",
                rotary.rot_dim, shape.head_dim
            )));
        }
        let pipe = self.pipeline(
            "attention.wgsl",
            &self.attn_defines(cache, false),
            "rope_write",
        )?;
        let ub = self.ctx.params(
            "rope+kv params",
            &self.attn_params(shape, tokens, AttnOffsets::default(), Some(rotary)),
        );
        Ok(self.dispatch(
            pipe,
            &[
                (0, &ub),
                (1, step),
                (2, &cache.k),
                (3, &cache.v),
                (8, v),
                (11, q),
                (12, k),
                (13, rotary.freq),
            ],
            [shape.heads + shape.kv_heads, tokens, 1],
        ))
    }

    /// Attention of `tokens` queries (q at q_offset of `q`, [tokens, heads, head_dim]) over the
    /// cache, into `out` at out_offset; `scratch` holds `shape.scratch_len(tokens)` values and
    /// `counters` one zero u32 per KV head (left zero). `keys` bounds the keys a query of any
    /// step that replays the dispatches sees (the step's last position + 1, at most): the
    /// matrix-core attention sizes its scores by it. One dispatch where
    /// `shape.one_pass(tokens)` (decode) or `shape.tiled(tokens)` (attend_tiled), else two
    /// (attend, combine).
    #[allow(clippy::too_many_arguments)]
    pub fn attention(
        &self,
        shape: &AttnShape,
        cache: &KvCache,
        q: &wgpu::Buffer,
        q_offset: u32,
        out: &wgpu::Buffer,
        out_offset: u32,
        scratch: &wgpu::Buffer,
        counters: &wgpu::Buffer,
        sinks: Option<Region>,
        step: &wgpu::Buffer,
        tokens: u32,
        keys: u32,
    ) -> GpuResult<Vec<Dispatch>> {
        let offsets = AttnOffsets {
            q: q_offset,
            out: out_offset,
            sinks: sinks.map(|r| r.offset).unwrap_or(0),
            ..AttnOffsets::default()
        };
        let ub = self.ctx.params(
            "attention params",
            &self.attn_params(shape, tokens, offsets, None),
        );
        let with_sinks = self.attn_defines(cache, sinks.is_some());
        if shape.one_pass(tokens) {
            let decode = self.pipeline(
                "attention.wgsl",
                &self.decode_defines(shape, with_sinks),
                "decode",
            )?;
            let mut entries = vec![
                (0, &ub),
                (1, step),
                (14, &cache.k),
                (15, &cache.v),
                (4, q),
                (6, out),
                (9, scratch),
                (10, counters),
            ];
            if let Some(s) = sinks {
                entries.push((7, s.buf));
            }
            let groups = [shape.splits(tokens), shape.kv_heads, 1];
            return Ok(vec![self.dispatch(decode, &entries, groups)]);
        }
        if self.attention_on_matrix_cores(shape, cache, tokens, keys) {
            return self.attention_coop(
                shape, cache, q, q_offset, out, out_offset, sinks, step, tokens, keys,
            );
        }
        if shape.tiled(tokens) {
            let tiled = self.pipeline("attention.wgsl", &with_sinks, "attend_tiled")?;
            let mut entries = vec![
                (0, &ub),
                (1, step),
                (2, &cache.k),
                (3, &cache.v),
                (4, q),
                (6, out),
            ];
            if let Some(s) = sinks {
                entries.push((7, s.buf));
            }
            let rows = tokens * (shape.heads / shape.kv_heads);
            let groups = [rows.div_ceil(TILE_ROWS), shape.kv_heads, 1];
            return Ok(vec![self.dispatch(tiled, &entries, groups)]);
        }
        // head_dim past TILE_DMAX: one workgroup per (split, head, query), then the merge.
        let attend = self.pipeline("attention.wgsl", &self.attn_defines(cache, false), "attend")?;
        let combine = self.pipeline("attention.wgsl", &with_sinks, "combine")?;
        let a = self.dispatch(
            attend,
            &[
                (0, &ub),
                (1, step),
                (2, &cache.k),
                (3, &cache.v),
                (4, q),
                (5, scratch),
            ],
            [shape.splits(tokens), shape.heads, tokens],
        );
        let mut entries = vec![(0, &ub), (1, step), (5, scratch), (6, out)];
        if let Some(s) = sinks {
            entries.push((7, s.buf));
        }
        let c = self.dispatch(combine, &entries, [shape.heads, tokens, 1]);
        Ok(vec![a, c])
    }

    /// Whether `decode_rope` takes one query of `shape` turned by `rot_dim` dims: the shapes
    /// `decode` takes, on adapters that let it bind all its buffers.
    pub fn folds_rope(&self, shape: &AttnShape, rot_dim: u32, tokens: u32) -> bool {
        shape.one_pass(tokens)
            && rot_dim <= shape.head_dim
            && rot_dim.is_multiple_of(2)
            && self.ctx.caps.max_storage_buffers >= DECODE_ROPE_BUFFERS
    }

    /// Decode attention of one query with `rope_write`'s work folded in (`folds_rope`): q
    /// [heads, head_dim] and k [kv_heads, head_dim] unturned from offset 0 of their buffers,
    /// and v; every split turns q as it loads it, the split holding the step's key turns k and
    /// stores it with v at the step's slot; q and k are left turned in place, as `rope_write`
    /// leaves them. `scratch` and `counters` as `attention`. With `records` (from
    /// `attention_records`, the output at offset 0) the output is also written as int8 records
    /// there, for the product reading it next.
    #[allow(clippy::too_many_arguments)]
    pub fn decode_rope(
        &self,
        shape: &AttnShape,
        cache: &KvCache,
        qkv: [&wgpu::Buffer; 3],
        rotary: &Rotary,
        out: Region,
        scratch: &wgpu::Buffer,
        counters: &wgpu::Buffer,
        sinks: Option<Region>,
        step: &wgpu::Buffer,
        records: Option<&XRecords>,
    ) -> GpuResult<Dispatch> {
        if !self.folds_rope(shape, rotary.rot_dim, 1)
            || (records.is_some() && (!self.writes_records(shape) || out.offset != 0))
        {
            return Err(GpuError::Validation(format!(
                "decode_rope: {} rotated dims of {} heads of {} over {} KV heads{}",
                rotary.rot_dim,
                shape.heads,
                shape.head_dim,
                shape.kv_heads,
                if records.is_some() {
                    ", writing int8 records"
                } else {
                    ""
                }
            )));
        }
        let mut d = self.decode_defines(shape, self.attn_defines(cache, sinks.is_some()));
        d.insert("DEC_ROPE".into(), String::new());
        if records.is_some() {
            d.insert("DEC_XQ".into(), String::new());
            d.insert("XQ_OUT".into(), String::new());
        }
        let pipe = self.pipeline("attention.wgsl", &d, "decode")?;
        let offsets = AttnOffsets {
            out: out.offset,
            sinks: sinks.map(|r| r.offset).unwrap_or(0),
            ..AttnOffsets::default()
        };
        let params = AttnParams {
            xq_scales: records.map(|r| r.scales).unwrap_or(0),
            ..self.attn_params(shape, 1, offsets, Some(rotary))
        };
        let ub = self.ctx.params("decode+rope params", &params);
        let [q, k, v] = qkv;
        let mut entries = vec![
            (0, &ub),
            (1, step),
            (14, &cache.k),
            (15, &cache.v),
            (11, q),
            (12, k),
            (8, v),
            (13, rotary.freq),
            (6, out.buf),
            (9, scratch),
            (10, counters),
        ];
        if let Some(s) = sinks {
            entries.push((7, s.buf));
        }
        if let Some(r) = records {
            entries.push((16, &r.buf));
        }
        let groups = [shape.splits(1), shape.kv_heads, 1];
        Ok(self.dispatch(pipe, &entries, groups))
    }

    fn attn_defines(&self, cache: &KvCache, sinks: bool) -> Defines {
        let mut d = Defines::new();
        if !cache.f16 {
            d.insert("KV_F32".into(), String::new());
        }
        if sinks {
            d.insert("SINKS".into(), String::new());
        }
        d
    }

    /// The `decode` variant for `shape`: its group and head size, subgroup reductions where the
    /// adapter has subgroups (any size).
    fn decode_defines(&self, shape: &AttnShape, mut d: Defines) -> Defines {
        let group = shape.group();
        d.insert("DEC_GQ".into(), format!("{group}u"));
        d.insert("DEC_G2".into(), format!("{}u", group.next_power_of_two()));
        d.insert("DEC_D8".into(), format!("{}u", shape.head_dim / 8));
        if self.ctx.caps.subgroups {
            d.insert("SUBGROUPS".into(), String::new());
        }
        d
    }

    fn attn_params(
        &self,
        s: &AttnShape,
        tokens: u32,
        at: AttnOffsets,
        rotary: Option<&Rotary>,
    ) -> AttnParams {
        AttnParams {
            heads: s.heads,
            kv_heads: s.kv_heads,
            head_dim: s.head_dim,
            cache_len: s.cache_len,
            window: s.window,
            chunks: s.splits(tokens),
            q_offset: at.q,
            k_offset: at.k,
            v_offset: at.v,
            out_offset: at.out,
            scale: s.scale,
            sinks_offset: at.sinks,
            rot_dim: rotary.map(|r| r.rot_dim).unwrap_or(0),
            halves: rotary.is_some_and(|r| r.halves) as u32,
            mscale: rotary.map(|r| r.mscale).unwrap_or(1.0),
            xq_scales: 0,
        }
    }
}
