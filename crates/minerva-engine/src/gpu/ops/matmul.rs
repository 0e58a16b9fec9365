//! The prefill products: the tiled f32 kernel (`MatmulTile`) and the matrix-core path (f16
//! weights and inputs, then `matmul_coop.wgsl`).

use super::{Bias, ExpertTiles, MatSel, Ops, PartRange, Region};
use crate::gpu::error::{GpuError, GpuResult};
use crate::gpu::pipelines::Dispatch;
use crate::gpu::shader::Defines;
use crate::gpu::weights::GpuWeight;
use bytemuck::{Pod, Zeroable};

fn with(mut d: Defines, extra: &[(&str, String)]) -> Defines {
    for (k, v) in extra {
        d.insert(k.to_string(), v.clone());
    }
    d
}

/// Tiles of the prefill product (`matmul.wgsl`): rows × tokens per workgroup and per thread.
/// Larger tiles decode each weight for more tokens and load less from workgroup memory per FMA;
/// smaller ones make enough workgroups for short prompts and short weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatmulTile {
    /// 64 rows × 64 tokens, 8 × 4 per thread: 12 vec4 loads per 128 FMAs.
    Wide,
    /// 32 rows × 32 tokens, 4 × 2 per thread.
    Mid,
    /// 16 rows × 16 tokens, 2 × 1 per thread.
    Narrow,
}

/// Workgroups that keep every multiprocessor of a large GPU busy (an H200 has 132).
const MATMUL_FILL: u32 = 128;

/// Workgroup memory of every matmul tile: 1024 vec4s of weights and 1024 of x.
const MATMUL_WORKGROUP_BYTES: u32 = 32 * 1024;

impl MatmulTile {
    pub const ALL: [MatmulTile; 3] = [MatmulTile::Wide, MatmulTile::Mid, MatmulTile::Narrow];

    /// (tile rows, tile tokens, rows per thread, tokens per thread).
    const fn shape(self) -> (u32, u32, u32, u32) {
        match self {
            MatmulTile::Wide => (64, 64, 8, 4),
            MatmulTile::Mid => (32, 32, 4, 2),
            MatmulTile::Narrow => (16, 16, 2, 1),
        }
    }

    fn grid(self, rows: u32, tokens: u32) -> [u32; 3] {
        let (tr, tt, _, _) = self.shape();
        [rows.div_ceil(tr), tokens.div_ceil(tt), 1]
    }

    /// The largest tile that still makes `MATMUL_FILL` workgroups, else the smallest.
    pub fn pick(rows: u32, tokens: u32) -> MatmulTile {
        MatmulTile::ALL
            .into_iter()
            .find(|t| {
                let [gx, gy, _] = t.grid(rows, tokens);
                gx * gy >= MATMUL_FILL
            })
            .unwrap_or(MatmulTile::Narrow)
    }

    pub(super) fn defines(self, d: Defines) -> Defines {
        let (tr, tt, mr, mt) = self.shape();
        with(
            d,
            &[
                ("TILE_ROWS", format!("{tr}u")),
                ("TILE_TOKENS", format!("{tt}u")),
                ("THREAD_ROWS", format!("{mr}u")),
                ("THREAD_TOKENS", format!("{mt}u")),
            ],
        )
    }
}

/// Tokens per tile of the grouped expert products (the mid tile's; TT in matmul_tiles.wgsl).
pub const MATMUL_TOKENS: u32 = MatmulTile::Mid.shape().1;

/// Rows and tokens of the output block of one matrix-core subgroup (`matmul_coop.wgsl`).
pub const COOP_BLOCK: u32 = 32;

/// The defines of `matmul_coop.wgsl` for a product of `rows` outputs (a multiple of
/// `COOP_BLOCK`), with or without a bias, and the outputs each workgroup computes: 64 where
/// they divide the rows, which doubles the multiplies per input matrix loaded (tinyllama
/// prefill-512 +12 % for Q4_0, +20 % for f16; benches/GPU.md, entry 64), else 32.
pub fn coop_defines(rows: u32, bias: bool) -> (Defines, u32) {
    let mut d = Defines::new();
    if bias {
        d.insert("BIAS".into(), String::new());
    }
    let per_group = if rows.is_multiple_of(2 * COOP_BLOCK) {
        d.insert("ROWS64".into(), String::new());
        2 * COOP_BLOCK
    } else {
        COOP_BLOCK
    };
    d.insert("ROWS".into(), format!("{per_group}u"));
    (d, per_group)
}

/// The defines of each block shape of `matmul_coop.wgsl` without a bias: 32 × 32, 64 × 32 and
/// 64 × 64 (rows × tokens), for building the kernels ahead of use.
pub fn coop_block_defines() -> Vec<Defines> {
    let mut all = Vec::new();
    for rows in [COOP_BLOCK, 2 * COOP_BLOCK] {
        let (d, per_group) = coop_defines(rows, false);
        let mut wide = d.clone();
        let widened = coop_tokens(&mut wide, per_group, 2 * COOP_BLOCK) > COOP_BLOCK;
        all.push(d);
        if widened {
            all.push(wide);
        }
    }
    all
}

/// The tokens each workgroup of a whole (not split) matrix-core product computes over `tokens`
/// tokens (a multiple of `COOP_BLOCK`), with `d` and `per_group` from `coop_defines`: 64 where
/// the workgroup computes 64 rows and 64 divides the tokens, so that each weight matrix loaded
/// serves four blocks of tokens (`TOKENS64`; tinyllama prefill-512 +5.6 %, benches/GPU.md
/// entries 65 and 89), else 32.
pub fn coop_tokens(d: &mut Defines, per_group: u32, tokens: u32) -> u32 {
    if per_group == 2 * COOP_BLOCK && tokens.is_multiple_of(2 * COOP_BLOCK) {
        d.insert("TOKENS64".into(), String::new());
        2 * COOP_BLOCK
    } else {
        COOP_BLOCK
    }
}

/// Rows and tokens of the output block of one workgroup of `matmul_staged.wgsl`.
pub const STAGED_BLOCK: u32 = 64;
/// Inputs of one step of `matmul_staged.wgsl` (its KS).
pub const STAGED_STEP: u32 = 32;
/// The fewest subgroups a staged product runs with; below, the split product gives the GPU more.
const STAGED_MIN_SUBGROUPS: u32 = super::coop_split::SPLIT_TARGET / 2;

/// Weight rows each thread of `coop_weights.wgsl` decodes: fewer, larger workgroups than one row
/// each (benches/GPU.md, entry 93).
pub const COOP_DECODE_ROWS: u32 = 2;

/// The defines of `coop_weights.wgsl` for a weight decoder's defines.
pub fn coop_weight_defines(mut decoder: Defines) -> Defines {
    decoder.insert("DECODE_ROWS".into(), format!("{COOP_DECODE_ROWS}u"));
    decoder
}

/// Largest f16 copy of a weight the matrix-core product makes at once (bytes): larger products
/// (a vocabulary projection over every token of a prompt) decode and multiply their outputs in
/// chunks of this size.
pub const COOP_WEIGHT_BYTES: u64 = 64 << 20;

/// A dense prefill product on matrix cores: the weight's `rows` outputs (a multiple of
/// `COOP_BLOCK`) decoded to f16 rows of `k` halves (the input length rounded up to whole
/// 32-value units), `chunk` outputs at a time (all of them, or a multiple of 2 · `COOP_BLOCK`),
/// and its whole blocks of `tokens` tokens (a multiple of `COOP_BLOCK`; the rest run split
/// along the inputs, or where that does not fit on the f32 tiles: `Ops::coop`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CoopShape {
    rows: u32,
    k: u32,
    tokens: u32,
    chunk: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct MatmulParams {
    rows: u32,
    cols: u32,
    tokens: u32,
    x_offset: u32,
    x_stride: u32,
    y_offset: u32,
    y_stride: u32,
    bias_offset: u32,
    row_base: u32,
    row_stride: u32,
    matrix_rows: u32,
    bias_stride: u32,
    expert_first: u32,
    expert_count: u32,
    x_div: u32,
    _pad: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
pub(super) struct CoopWeightsParams {
    pub rows: u32,
    pub cols: u32,
    pub stride: u32,
    pub first_out: u32,
    pub row_base: u32,
    pub row_stride: u32,
    pub bias_offset: u32,
    pub out_rows: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct CoopInputsParams {
    cols: u32,
    stride: u32,
    tokens: u32,
    x_offset: u32,
    x_stride: u32,
    _pad: [u32; 3],
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
pub(super) struct CoopParams {
    pub rows: u32,
    pub k: u32,
    pub y_offset: u32,
    pub y_stride: u32,
    /// With EXPERTS: the experts whose decoded matrices the weights hold.
    pub first_expert: u32,
    pub experts: u32,
    /// Halves of k each workgroup z takes (all of k unless split), and the values of y
    /// between z's partial sums.
    pub k_split: u32,
    pub split_stride: u32,
    /// With EXPERTS on matmul_staged.wgsl (weights decoded as they are staged): the weight
    /// rows' values.
    pub cols: u32,
    pub _pad: [u32; 3],
}

impl Ops {
    /// y[t] = W · x[t] (+ bias) for `tokens` rows of x over the outputs `sel` picks: on matrix
    /// cores where the product fits them (`coop_shape`), else the tiled prefill kernel with the
    /// tile `MatmulTile::pick` chooses for the shape.
    pub fn matmul(
        &self,
        w: &GpuWeight,
        sel: &MatSel,
        x: Region,
        y: Region,
        tokens: u32,
        bias: Option<Bias>,
    ) -> GpuResult<Vec<Dispatch>> {
        if let Some(shape) = self.coop_shape(sel, &y, tokens) {
            return self.coop(w, sel, x, y, tokens, bias, shape);
        }
        let tile = MatmulTile::pick(sel.out_dim as u32, tokens);
        self.tiled(w, sel, x, y, tokens, bias, tile, None)
    }

    /// `matmul` on matrix cores; an error where the product does not fit them (`coop_shape`).
    pub fn matmul_coop(
        &self,
        w: &GpuWeight,
        sel: &MatSel,
        x: Region,
        y: Region,
        tokens: u32,
        bias: Option<Bias>,
    ) -> GpuResult<Vec<Dispatch>> {
        let Some(shape) = self.coop_shape(sel, &y, tokens) else {
            return Err(GpuError::Unsupported {
                tensor: w.name.clone(),
                reason: format!(
                    "{} × {} product of {tokens} tokens into y at {} (stride {}) on matrix \
                     cores ({})",
                    sel.out_dim,
                    sel.in_dim,
                    y.offset,
                    y.stride,
                    if self.ctx.caps.matrix_cores {
                        "shape or alignment unsupported"
                    } else {
                        "off or not offered"
                    }
                ),
            });
        };
        self.coop(w, sel, x, y, tokens, bias, shape)
    }

    /// The matrix-core shape of a dense product, or None where it keeps the f32 tiles: matrix
    /// cores off; fewer than `COOP_BLOCK` tokens; outputs not a multiple of `COOP_BLOCK`; an f16
    /// copy of the weight over `Ops::coop_weight_bytes` (or a binding) for an input-major weight,
    /// whose outputs are not cut into chunks; y's offset or stride not a multiple of 4 values
    /// (matrix stores are 16-byte aligned).
    fn coop_shape(&self, sel: &MatSel, y: &Region, tokens: u32) -> Option<CoopShape> {
        let caps = self.ctx.caps;
        let rows = sel.out_dim as u32;
        let k = (sel.in_dim as u32).div_ceil(32) * 32;
        let tokens = tokens / COOP_BLOCK * COOP_BLOCK;
        let most = self.coop_weight_bytes.min(caps.max_binding);
        let chunk = if rows as u64 * k as u64 * 2 <= most {
            rows
        } else if sel.input_major || k == 0 {
            0
        } else {
            let per = 2 * COOP_BLOCK;
            ((most / (k as u64 * 2)).min(u32::MAX as u64) as u32) / per * per
        };
        let fits = caps.matrix_cores
            && tokens > 0
            && rows > 0
            && chunk > 0
            && rows.is_multiple_of(COOP_BLOCK)
            // Grids: a chunk's decoded rows on y, and blocks of tokens on x.
            && chunk <= 65535
            && tokens / COOP_BLOCK <= 65535
            && tokens as u64 * k as u64 * 2 <= caps.max_binding
            && (chunk as u64 * 16 * 4) <= caps.max_binding
            && y.offset.is_multiple_of(4)
            && y.stride.is_multiple_of(4);
        fits.then_some(CoopShape {
            rows,
            k,
            tokens,
            chunk,
        })
    }

    /// The product on matrix cores: x converted to f16, then per chunk of outputs the weight
    /// decoded to f16 (with the bias block) and the matrix-core kernel. Where a product has
    /// few blocks of tokens for the GPU, or a last block that is not whole, it runs split along
    /// its inputs over every block of tokens into partial sums that a second kernel adds
    /// (`coop_split.rs`); otherwise over the whole blocks into y, the f32 tiles taking the
    /// tokens left.
    #[allow(clippy::too_many_arguments)]
    fn coop(
        &self,
        w: &GpuWeight,
        sel: &MatSel,
        x: Region,
        y: Region,
        tokens: u32,
        bias: Option<Bias>,
        shape: CoopShape,
    ) -> GpuResult<Vec<Dispatch>> {
        let CoopShape {
            rows,
            k,
            tokens: whole,
            chunk,
        } = shape;
        // Whole blocks of 64 outputs and 64 tokens stage their matrices in workgroup memory,
        // four subgroups a block, where that makes subgroups enough for the GPU; products of
        // fewer blocks keep the split along their inputs (tinyllama's k and v products at 512
        // tokens: 49 µs staged, 24 split; benches/GPU.md, entry 110).
        let staged_subgroups = 4 * (tokens / STAGED_BLOCK) as u64 * (chunk / STAGED_BLOCK) as u64;
        let staged = self.ctx.caps.staged_matrices
            && tokens.is_multiple_of(STAGED_BLOCK)
            && chunk.is_multiple_of(STAGED_BLOCK)
            && rows.is_multiple_of(STAGED_BLOCK)
            && staged_subgroups >= STAGED_MIN_SUBGROUPS as u64;
        let split = if staged {
            None
        } else {
            self.coop_split(tokens, chunk, k)
        };
        let t = if split.is_some() {
            tokens.div_ceil(COOP_BLOCK) * COOP_BLOCK
        } else {
            whole
        };
        let w16 = self.scratch_buffer("coop weights", chunk as u64 * k as u64 * 2);
        let x16 = self.scratch_buffer("coop inputs", t as u64 * k as u64 * 2);
        let block = match (bias, split) {
            (Some(_), None) => Some(self.scratch_buffer("coop bias", chunk as u64 * 16 * 4)),
            _ => None,
        };
        let mut out = vec![self.coop_inputs(x, &x16, sel.in_dim as u32, k, tokens.min(t))?];
        // Each chunk's dispatches reuse the scratch: wgpu orders a write after the reads before it.
        for first in (0..rows).step_by(chunk as usize) {
            let n = chunk.min(rows - first);
            let part = MatSel {
                offset: sel.offset + first as usize * sel.stride,
                out_dim: n as usize,
                ..*sel
            };
            let part_bias = bias.map(|b| Bias {
                offset: b.offset + first,
                ..b
            });
            out.extend(self.coop_weights(w, &part, &w16, k, part_bias.zip(block.as_ref()))?);
            if split.is_some() {
                let y_part = Region::new(y.buf, y.offset + first, y.stride);
                let at = super::coop_split::SplitAt { rows: n, k, tokens };
                out.extend(self.coop_split_product(&w16, &x16, y_part, part_bias, at)?);
                continue;
            }
            let (pipe, per_group, per_token_group) = if staged {
                let mut d = Defines::new();
                if bias.is_some() {
                    d.insert("BIAS".into(), String::new());
                }
                let pipe = self.pipeline("matmul_staged.wgsl", &d, "main")?;
                (pipe, STAGED_BLOCK, STAGED_BLOCK)
            } else {
                let (mut d, per_group) = coop_defines(n, bias.is_some());
                let per_token_group = coop_tokens(&mut d, per_group, t);
                let pipe = self.pipeline("matmul_coop.wgsl", &d, "main")?;
                (pipe, per_group, per_token_group)
            };
            let params = CoopParams {
                rows: n,
                k,
                y_offset: y.offset + first,
                y_stride: y.stride,
                first_expert: 0,
                experts: 0,
                k_split: k,
                split_stride: 0,
                ..Zeroable::zeroed()
            };
            let ub = self.ctx.params("coop params", &params);
            let mut entries = vec![(0, &w16), (1, &x16), (2, y.buf), (3, &ub)];
            if let Some(b) = &block {
                entries.push((4, b));
            }
            let grid = [t / per_token_group, n / per_group, 1];
            out.push(self.dispatch(pipe, &entries, grid));
        }
        if split.is_none() && tokens > t {
            let rest = tokens - t;
            let x_rest = Region::new(x.buf, x.offset + t * x.stride, x.stride);
            let y_rest = Region::new(y.buf, y.offset + t * y.stride, y.stride);
            let tile = MatmulTile::pick(rows, rest);
            out.extend(self.tiled(w, sel, x_rest, y_rest, rest, bias, tile, None)?);
        }
        Ok(out)
    }

    /// Decodes the outputs `sel` picks to f16 rows of `stride` halves in `out` (zeros past the
    /// input length; `coop_weights.wgsl`), one dispatch per weight part; with a bias, also
    /// writes the bias block ([16][outputs], each row the bias) into the second buffer.
    pub fn coop_weights(
        &self,
        w: &GpuWeight,
        sel: &MatSel,
        out: &wgpu::Buffer,
        stride: u32,
        bias: Option<(Bias, &wgpu::Buffer)>,
    ) -> GpuResult<Vec<Dispatch>> {
        w.check_sel(sel)?;
        let mut d = coop_weight_defines(self.weight_defines(w, sel));
        if bias.is_some() {
            d.insert("BIAS".into(), String::new());
        }
        let pipe = self.pipeline("coop_weights.wgsl", &d, "main")?;
        let lanes = (sel.in_dim as u32).div_ceil(32) * 4;
        let mut dispatches = Vec::new();
        for r in w.ranges(sel) {
            let part = &w.parts[r.part];
            let rows = (r.j_hi - r.j_lo) as u32;
            let params = CoopWeightsParams {
                rows,
                cols: sel.in_dim as u32,
                stride,
                first_out: r.j_lo as u32,
                row_base: r.row_base as u32,
                row_stride: sel.stride as u32,
                bias_offset: bias.map(|(b, _)| b.offset).unwrap_or(0) + r.j_lo as u32,
                out_rows: sel.out_dim as u32,
            };
            let ub = self.ctx.params("coop weights params", &params);
            let mut entries = part.entries();
            entries.extend([(3, out), (4, &ub)]);
            if let Some((b, block)) = &bias {
                entries.extend([(5, b.buf), (6, *block)]);
            }
            let grid = [lanes.div_ceil(64), rows.div_ceil(COOP_DECODE_ROWS), 1];
            dispatches.push(self.dispatch(pipe.clone(), &entries, grid));
        }
        Ok(dispatches)
    }

    /// Converts `tokens` rows of `cols` values of x to f16 rows of `stride` halves in `out`
    /// (zeros past `cols`; `coop_inputs.wgsl`).
    pub fn coop_inputs(
        &self,
        x: Region,
        out: &wgpu::Buffer,
        cols: u32,
        stride: u32,
        tokens: u32,
    ) -> GpuResult<Dispatch> {
        let pipe = self.pipeline("coop_inputs.wgsl", &Defines::new(), "main")?;
        let params = CoopInputsParams {
            cols,
            stride,
            tokens,
            x_offset: x.offset,
            x_stride: x.stride,
            _pad: [0; 3],
        };
        let ub = self.ctx.params("coop inputs params", &params);
        let entries = [(0, x.buf), (1, out), (2, &ub)];
        Ok(self.dispatch(pipe, &entries, [(stride / 4).div_ceil(64), tokens, 1]))
    }

    /// `matmul` with a given tile.
    #[allow(clippy::too_many_arguments)]
    pub fn matmul_tiled(
        &self,
        w: &GpuWeight,
        sel: &MatSel,
        x: Region,
        y: Region,
        tokens: u32,
        bias: Option<Bias>,
        tile: MatmulTile,
    ) -> GpuResult<Vec<Dispatch>> {
        self.tiled(w, sel, x, y, tokens, bias, tile, None)
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn tiled(
        &self,
        w: &GpuWeight,
        sel: &MatSel,
        x: Region,
        y: Region,
        tokens: u32,
        bias: Option<Bias>,
        tile: MatmulTile,
        experts: Option<ExpertTiles>,
    ) -> GpuResult<Vec<Dispatch>> {
        w.check_sel(sel)?;
        if self.ctx.caps.max_workgroup_storage < MATMUL_WORKGROUP_BYTES {
            return Err(GpuError::Unsupported {
                tensor: "prefill product".into(),
                reason: format!(
                    "the adapter offers {} bytes of workgroup memory, the tiles need {}",
                    self.ctx.caps.max_workgroup_storage, MATMUL_WORKGROUP_BYTES
                ),
            });
        }
        let mut d = tile.defines(self.weight_defines(w, sel));
        if bias.is_some() {
            d.insert("BIAS".into(), String::new());
        }
        if experts.is_some() {
            d.insert("EXPERTS".into(), String::new());
        }
        let pipe = self.pipeline("matmul.wgsl", &d, "main")?;
        let mrows = w.matrix_rows(sel.input_major);
        // Stored rows per matrix (parts hold whole matrices when used with experts).
        let stored = if sel.input_major { sel.in_dim } else { mrows }.max(1);
        let ranges = match experts {
            Some(_) => Self::expert_ranges(w, sel),
            None => w.ranges(sel),
        };
        let mut out = Vec::new();
        for r in ranges {
            let part = &w.parts[r.part];
            let rows = (r.j_hi - r.j_lo) as u32;
            let params = MatmulParams {
                rows,
                cols: sel.in_dim as u32,
                tokens,
                x_offset: x.offset,
                x_stride: x.stride,
                y_offset: y.offset + r.j_lo as u32,
                y_stride: y.stride,
                bias_offset: bias.map(|b| b.offset).unwrap_or(0) + r.j_lo as u32,
                row_base: r.row_base as u32,
                row_stride: sel.stride as u32,
                matrix_rows: mrows as u32,
                bias_stride: bias.map(|b| b.expert_stride).unwrap_or(0),
                expert_first: (part.first_row / stored) as u32,
                expert_count: (part.rows / stored) as u32,
                x_div: experts.map(|e| e.x_div.max(1)).unwrap_or(1),
                _pad: 0,
            };
            let ub = self.ctx.params("matmul params", &params);
            let mut entries = part.entries();
            entries.extend([(3, x.buf), (4, y.buf), (5, &ub)]);
            if let Some(e) = &experts {
                entries.extend([(6, e.order), (8, e.tiles)]);
            }
            if let Some(b) = &bias {
                entries.push((7, b.buf));
            }
            let grid = match experts {
                Some(e) => [rows.div_ceil(tile.shape().0), e.max_tiles, 1],
                None => tile.grid(rows, tokens),
            };
            out.push(self.dispatch(pipe.clone(), &entries, grid));
        }
        Ok(out)
    }

    /// Experts: every part runs every item and skips those whose matrix it does not hold.
    fn expert_ranges(w: &GpuWeight, sel: &MatSel) -> Vec<PartRange> {
        (0..w.parts.len())
            .map(|i| PartRange {
                part: i,
                j_lo: 0,
                j_hi: sel.out_dim,
                row_base: sel.offset,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::MatmulTile;

    #[test]
    fn matmul_tiles_shrink_until_the_grid_fills_the_gpu() {
        // tinyllama at 512 tokens: q/o/down and gate/up wide, the 256-row k and v mid.
        assert_eq!(MatmulTile::pick(2048, 512), MatmulTile::Wide);
        assert_eq!(MatmulTile::pick(5632, 512), MatmulTile::Wide);
        assert_eq!(MatmulTile::pick(256, 512), MatmulTile::Mid);
        // Short prompts.
        assert_eq!(MatmulTile::pick(2048, 100), MatmulTile::Mid);
        assert_eq!(MatmulTile::pick(2048, 20), MatmulTile::Narrow);
        assert_eq!(MatmulTile::pick(16, 2), MatmulTile::Narrow);
    }
}
