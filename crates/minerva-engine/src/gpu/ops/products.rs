//! The decode products: `matvec` over one weight and `matvec_multi` over two or three in one
//! dispatch, with folded norms and residuals, and the int8 quantization of their x.

use super::{
    grid2, rows_per_lane, Bias, Eltwise, ExpertSel, Folds, MatSel, MultiFlags, MultiParams,
    NormFold, Ops, PartRange, Region, XRecords, GLU_RECORDS_SHAPE, LONG_ROW, X_HALVES_BYTES,
};
use crate::gpu::error::{GpuError, GpuResult};
use crate::gpu::pipelines::Dispatch;
use crate::gpu::shader::{defines, Defines};
use crate::gpu::weights::{GpuWeight, WeightPart};
use bytemuck::{Pod, Zeroable};
use std::sync::Arc;

/// Bindings of weight `i`'s buffers in `matvec_multi.wgsl` (its decoder instance's w0, w1, w2
/// moved to 10·i on).
pub(super) fn multi_weight_entries(i: usize, part: &WeightPart) -> Vec<(u32, &wgpu::Buffer)> {
    part.entries()
        .into_iter()
        .map(|(j, b)| (10 * i as u32 + j, b))
        .collect()
}

/// A product's dispatches behind the quantization of its x, if it has one.
pub(super) fn with_quantization(
    quantized: Option<QuantizedX>,
    products: Vec<Dispatch>,
) -> Vec<Dispatch> {
    quantized
        .and_then(|q| q.dispatch)
        .into_iter()
        .chain(products)
        .collect()
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct MatvecParams {
    rows: u32,
    cols: u32,
    row_base: u32,
    row_stride: u32,
    matrix_rows: u32,
    bias_stride: u32,
    x_offset: u32,
    x_stride: u32,
    x_div: u32,
    y_offset: u32,
    y_stride: u32,
    expert_first: u32,
    expert_count: u32,
    groups_x: u32,
    bias_offset: u32,
    norm_offset: u32,
    eps: f32,
    xq_scales: u32,
    xq_sq: u32,
    _pad: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct QuantizeParams {
    cols: u32,
    parts: u32,
    x_offset: u32,
    x_stride: u32,
    scales: u32,
    norm_offset: u32,
    eps: f32,
    _pad: u32,
}

/// How a decode product over several weights (`Ops::matvec_multi`) uses them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Multi {
    /// Each weight's outputs into its own buffer (q, k, v).
    Split,
    /// act(W0·x, W1·x) into one buffer (gate, up): `Eltwise::SwiGlu` or `Eltwise::GluOss`.
    Glu(Eltwise),
}

/// x quantized for an int8 decode product: the dispatch that writes it (`Ops::quantize_x`;
/// none where the kernel producing x wrote the records) and the records.
pub(super) struct QuantizedX {
    dispatch: Option<Dispatch>,
    records: XRecords,
}

impl QuantizedX {
    /// Records another kernel wrote: nothing to dispatch.
    fn given(records: &XRecords) -> QuantizedX {
        QuantizedX {
            dispatch: None,
            records: records.clone(),
        }
    }
}

/// What a decode product binds as x: the records where x is quantized, else x itself.
pub(super) fn x_binding<'a>(
    quantized: &'a Option<QuantizedX>,
    x: &'a wgpu::Buffer,
) -> &'a wgpu::Buffer {
    quantized.as_ref().map(|q| &q.records.buf).unwrap_or(x)
}

/// Where the records' scales start, for the kernels' `xq_scales` (0 without records).
pub(super) fn xq_scales(quantized: &Option<QuantizedX>) -> u32 {
    quantized.as_ref().map(|q| q.records.scales).unwrap_or(0)
}

/// Threads per workgroup of `quantize_x.wgsl` (WG there), one per part of 8 values.
const QUANTIZE_WG: u32 = 64;

/// The most workgroup memory a decode product quantizes its x into (XQ_LOCAL): 32 bytes per
/// part of 8 values, inputs of up to 6,144 values.
pub const XQ_LOCAL_BYTES: u32 = 24 * 1024;

/// Parts of 8 values in a vector of `cols` values, whole units of 32 (the products' lanes and
/// the int8 records go by them).
fn x_parts(cols: u32) -> u32 {
    cols.div_ceil(32) * 4
}

/// The defines of a decode product that quantizes its x of `cols` values in each workgroup.
fn local_xq(cols: u32) -> Defines {
    let parts = x_parts(cols);
    defines(&[
        ("XQ_LOCAL", String::new()),
        ("XQ_PARTS", format!("{parts}u")),
    ])
}

/// What a decode product's lanes hold of x, which sets how many parts they load at once.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ProductX {
    /// f32 values (with a folded norm's weights).
    Plain,
    /// f32 values, against E2M1 weights, whose parts take more registers to decode.
    E2m1,
    /// f16 pairs staged by the workgroup (X_HALVES).
    Halves,
    /// int8 records (DOT_I8).
    Int8,
}

impl ProductX {
    fn of(halves: bool, e2m1: bool, int8: bool) -> ProductX {
        match (halves, int8, e2m1) {
            (true, _, _) => ProductX::Halves,
            (false, true, _) => ProductX::Int8,
            (false, false, true) => ProductX::E2m1,
            (false, false, false) => ProductX::Plain,
        }
    }
}

impl Ops {
    /// Sets whether gate/up products below `INT8_MIN_OUTPUTS` that fold a norm quantize x in
    /// their own workgroups (XQ_LOCAL) rather than behind a dispatch of its own, for measuring
    /// or checking both.
    pub fn set_local_xq(&mut self, on: bool) {
        self.local_xq = on;
    }

    /// Whether a gate/up/activation product over `weights` with `rows` outputs, folding a norm
    /// of its x of `cols` values, quantizes x in its own workgroups (XQ_LOCAL, XQ_PARTS)
    /// instead of behind a quantizing dispatch: it takes int8 x for its norm
    /// (`glu_takes_int8`) but has too few outputs for that dispatch to pay (`dot_i8`), and the
    /// records fit `XQ_LOCAL_BYTES` beside the products' reduction (16 bytes per thread).
    /// Products that read x in f32 keep it: quantizing in every workgroup before the first
    /// weight load made tinyllama's q/k/v product 2.4 µs and its 5,632-input down product
    /// 9.6 µs slower on the H200 (benches/GPU.md, entry 96).
    fn glu_quantizes_locally(&self, weights: &[&GpuWeight], rows: u32, cols: u32) -> bool {
        let room = self.staging_room(self.local_xq_shape.0);
        self.local_xq
            && x_parts(cols) * 32 <= XQ_LOCAL_BYTES.min(room)
            && self.glu_takes_int8(weights, true)
            && !self.dot_i8(weights, true, rows)
    }

    /// The defines that stage x in f16 pairs for a packed f16 product over inputs of `cols`
    /// values (X_HALVES, X_PARTS), if it is on and the staging fits `X_HALVES_BYTES`.
    pub(super) fn x_halves_defines(&self, cols: u32) -> Option<[(String, String); 2]> {
        let parts = x_parts(cols);
        // 16 bytes per part.
        let bytes = parts * 16;
        let room = self.staging_room(self.halves_shape.0);
        (self.x_halves && bytes <= X_HALVES_BYTES.min(room)).then(|| {
            [
                ("X_HALVES".to_string(), String::new()),
                ("X_PARTS".to_string(), format!("{parts}u")),
            ]
        })
    }

    /// Workgroup memory a decode product of `wg` threads has for its staged x: the adapter's
    /// limit less the products' own reduction, 16 bytes per thread.
    fn staging_room(&self, wg: u32) -> u32 {
        self.ctx.caps.max_workgroup_storage.saturating_sub(16 * wg)
    }

    /// Whether a decode product of weights read through `decoders` takes them in packed f16:
    /// E2M1 weights only, and no folded norm, whose raw x (before the division by its rms) may
    /// exceed what f16 products hold.
    pub(super) fn takes_packed_f16(&self, decoders: &[&Defines], norm: bool) -> bool {
        self.packed_f16 && !norm && decoders.iter().all(|d| d.contains_key("E2M1"))
    }

    /// The workgroup size and rows per workgroup of a decode product of `outputs` results over
    /// inputs of `cols` values, by what its lanes hold of x: `Ops::shape`, except that gate/up
    /// products quantizing x in their own workgroups (`local`) take `LOCAL_XQ_SHAPE`, and
    /// products other than gate/up ones (`glu`) whose lanes read x in f32 against weights other
    /// than E2M1 (`ProductX::Plain`) or as int8 records give rows of more than `LONG_ROW`
    /// inputs twice the lanes. Gate/up products writing int8 records take `GLU_RECORDS_SHAPE`
    /// (`multi_pipeline`).
    fn product_shape_of(
        &self,
        glu: bool,
        x: ProductX,
        outputs: u32,
        cols: u32,
        local: bool,
    ) -> (u32, u32) {
        let (wg, rows) = self.shape(x == ProductX::Halves, outputs);
        if rows == 1 {
            (wg, rows)
        } else if local {
            self.local_xq_shape
        } else if !glu && matches!(x, ProductX::Plain | ProductX::Int8) && cols > LONG_ROW {
            (wg, rows / 2)
        } else {
            (wg, rows)
        }
    }

    /// Workgroup shape `(wg, rpw)` of a decode product, its parts in flight by what the lanes
    /// hold (`IN_FLIGHT` and the like, for x staged in f16 pairs, E2M1 weights or int8 x), and
    /// subgroup reductions where every subgroup lies within one row's lanes.
    fn product_defines(&self, glu: bool, x: ProductX, (wg, rpw): (u32, u32)) -> Defines {
        let tpr = wg / rpw;
        let caps = self.ctx.caps;
        let class = match x {
            ProductX::Plain => 0,
            ProductX::E2m1 => 1,
            ProductX::Halves => 2,
            ProductX::Int8 => 3,
        };
        let in_flight = self.in_flight[2 * class + usize::from(glu)];
        let mut d = defines(&[
            ("WG", format!("{wg}u")),
            ("RPW", format!("{rpw}u")),
            ("IN_FLIGHT", format!("{in_flight}u")),
        ]);
        if caps.subgroups && caps.subgroup_max <= tpr && tpr.is_multiple_of(caps.subgroup_max) {
            d.insert("SUBGROUPS".into(), String::new());
        }
        d
    }

    fn matvec_defines(
        &self,
        decoder: Defines,
        experts: bool,
        bias: bool,
        rpl: u32,
        x: ProductX,
        shape: (u32, u32),
    ) -> Defines {
        let mut d = decoder;
        d.extend(self.product_defines(false, x, shape));
        d.insert("RPL".into(), format!("{rpl}u"));
        if rpl > 1 {
            d.insert("MULTI_ROW".into(), String::new());
        }
        if experts {
            d.insert("MOE".into(), String::new());
        }
        if bias {
            d.insert("BIAS".into(), String::new());
        }
        d
    }

    /// x quantized for the int8 decode products (quantize_x.wgsl): `vectors` vectors of `cols`
    /// values from `x` (vector v at x.offset + v · x.stride), through the RMSNorm `norm` first.
    /// The records go to a scratch buffer shared by every product: a product's quantization
    /// and its own dispatch follow each other, and wgpu orders dispatches that write and read
    /// one buffer.
    pub(super) fn quantize_x(
        &self,
        x: Region,
        cols: u32,
        vectors: u32,
        norm: Option<NormFold>,
    ) -> GpuResult<QuantizedX> {
        let mut d = defines(&[("DOT_I8", String::new()), ("XQ_OUT", String::new())]);
        if norm.is_some() {
            d.insert("NORM".into(), String::new());
        }
        let pipe = self.pipeline("quantize_x.wgsl", &d, "main")?;
        let parts = x_parts(cols);
        let records = self.records_buffer(parts * vectors);
        let params = QuantizeParams {
            cols,
            parts,
            x_offset: x.offset,
            x_stride: x.stride,
            scales: records.scales,
            norm_offset: norm.map(|n| n.offset).unwrap_or(0),
            eps: norm.map(|n| n.eps).unwrap_or(0.0),
            _pad: 0,
        };
        let ub = self.ctx.params("quantize params", &params);
        let mut entries = vec![(0, x.buf), (1, &records.buf), (2, &ub)];
        if let Some(n) = &norm {
            entries.push((3, n.buf));
        }
        let groups = [parts.div_ceil(QUANTIZE_WG), vectors, 1];
        let dispatch = self.dispatch(pipe, &entries, groups);
        Ok(QuantizedX {
            dispatch: Some(dispatch),
            records,
        })
    }

    /// Whether a decode product of `w` can read x as records another kernel wrote
    /// (`Folds::records`).
    pub fn takes_records(&self, w: &GpuWeight) -> bool {
        self.int8_weights(&[w], false)
    }

    /// y[z] = W · x[z] (+ bias) for `batch` vectors over the outputs `sel` picks; with
    /// `experts`, batch item z uses matrix ids[z] (and bias values ids[z] · expert_stride on).
    #[allow(clippy::too_many_arguments)]
    pub fn matvec(
        &self,
        w: &GpuWeight,
        sel: &MatSel,
        x: Region,
        y: Region,
        batch: u32,
        bias: Option<Bias>,
        experts: Option<ExpertSel>,
        folds: Folds,
    ) -> GpuResult<Vec<Dispatch>> {
        w.check_sel(sel)?;
        let rpl = self
            .rows_per_lane
            .unwrap_or_else(|| rows_per_lane(sel.out_dim as u32 * batch));
        // The router's product, which writes the norm's output, reads x itself.
        let outputs = sel.out_dim as u32 * batch.max(1);
        let int8 = self.dot_i8(&[w], false, outputs) && folds.normed.is_none();
        // Records another kernel wrote: of x itself, or of the norm's input times its weights.
        let normed_records = folds.norm.and_then(|n| n.records);
        let given = folds.records.or(normed_records);
        let decoder = self.weight_defines(w, sel);
        // Packed f16 (E2M1 weights, which take no int8 x), with x staged where it fits.
        let packed = !int8 && self.takes_packed_f16(&[&decoder], folds.norm.is_some());
        let halves = packed
            .then(|| self.x_halves_defines(sel.in_dim as u32))
            .flatten();
        let x_held = ProductX::of(
            halves.is_some(),
            decoder.contains_key("E2M1"),
            int8 || given.is_some(),
        );
        let shape = self.product_shape_of(false, x_held, outputs, sel.in_dim as u32, false);
        let mut d = self.matvec_defines(
            decoder,
            experts.is_some(),
            bias.is_some(),
            rpl,
            x_held,
            shape,
        );
        let x_div = experts.map(|e| e.x_div.max(1)).unwrap_or(1);
        let quantized = if let Some(records) = given {
            if !self.takes_records(w)
                || batch != 1
                || experts.is_some()
                || folds.normed.is_some()
                || (folds.records.is_some() && folds.norm.is_some())
            {
                return Err(GpuError::Unsupported {
                    tensor: w.name.clone(),
                    reason: "int8 records of x for a product that cannot take them".into(),
                });
            }
            d.insert("DOT_I8".into(), String::new());
            if normed_records.is_some() {
                d.insert("XQ_NORM".into(), String::new());
                d.insert("RMS".into(), String::new());
            }
            Some(QuantizedX::given(records))
        } else if int8 {
            d.insert("DOT_I8".into(), String::new());
            let vectors = (batch.max(1) - 1) / x_div + 1;
            Some(self.quantize_x(x, sel.in_dim as u32, vectors, folds.norm)?)
        } else {
            if folds.norm.is_some() {
                d.insert("NORM".into(), String::new());
                d.insert("RMS".into(), String::new());
            }
            if packed {
                d.insert("PACKED_F16".into(), String::new());
                d.extend(halves.clone().into_iter().flatten());
            }
            None
        };
        if folds.residual.is_some() {
            d.insert("RESIDUAL".into(), String::new());
        }
        if folds.normed.is_some() {
            if folds.norm.is_none() || batch != 1 || experts.is_some() {
                return Err(GpuError::Unsupported {
                    tensor: w.name.clone(),
                    reason: "the norm's output written by a product without one vector's norm"
                        .into(),
                });
            }
            d.insert("NORM_OUT".into(), String::new());
        }
        let pipe = self.pipeline("matvec.wgsl", &d, "main")?;
        let mrows = w.matrix_rows(sel.input_major);
        // Stored rows per matrix (parts hold whole matrices when used with experts).
        let stored = if sel.input_major { sel.in_dim } else { mrows }.max(1);
        // Experts: every part runs every item and skips those whose matrix it does not hold.
        let ranges = if experts.is_some() {
            (0..w.parts.len())
                .map(|i| PartRange {
                    part: i,
                    j_lo: 0,
                    j_hi: sel.out_dim,
                    row_base: sel.offset,
                })
                .collect()
        } else {
            w.ranges(sel)
        };
        let rows_per_group = shape.1;
        let mut out = Vec::new();
        for r in ranges {
            let part = &w.parts[r.part];
            let rows = (r.j_hi - r.j_lo) as u32;
            let (gx, gy) = grid2(rows.div_ceil(rows_per_group * rpl));
            let params = MatvecParams {
                rows,
                cols: sel.in_dim as u32,
                row_base: r.row_base as u32,
                row_stride: sel.stride as u32,
                matrix_rows: mrows as u32,
                bias_stride: bias.map(|b| b.expert_stride).unwrap_or(0),
                x_offset: x.offset,
                x_stride: x.stride,
                x_div,
                y_offset: y.offset + r.j_lo as u32,
                y_stride: y.stride,
                expert_first: (part.first_row / stored) as u32,
                expert_count: (part.rows / stored) as u32,
                groups_x: gx,
                bias_offset: bias.map(|b| b.offset).unwrap_or(0) + r.j_lo as u32,
                norm_offset: folds.norm.map(|n| n.offset).unwrap_or(0),
                eps: folds.norm.map(|n| n.eps).unwrap_or(0.0),
                xq_scales: xq_scales(&quantized),
                xq_sq: normed_records.map(|r| r.sq_at()).unwrap_or(0),
                _pad: 0,
            };
            let ub = self.ctx.params("matvec params", &params);
            let mut entries = part.entries();
            let xbuf = x_binding(&quantized, x.buf);
            entries.extend([(3, xbuf), (4, y.buf), (5, &ub)]);
            if let Some(e) = &experts {
                entries.push((6, e.ids));
            }
            if let Some(b) = &bias {
                entries.push((7, b.buf));
            }
            if let (Some(n), None) = (&folds.norm, &quantized) {
                entries.push((8, n.buf));
            }
            if let Some(r) = folds.residual {
                entries.push((9, r));
            }
            if let Some(h) = folds.normed {
                entries.push((10, h));
            }
            out.push(self.dispatch(pipe.clone(), &entries, [gx, gy, batch]));
        }
        Ok(with_quantization(quantized, out))
    }

    /// One vector through two or three whole, unsplit weights with the same input width in one
    /// dispatch (see `Multi`), behind the quantization of x where the weights take int8 x
    /// (`dot_i8`); outputs start at offset 0 of their buffers.
    pub fn matvec_multi(
        &self,
        weights: &[&GpuWeight],
        x: Region,
        outs: &[&wgpu::Buffer],
        mode: Multi,
        norm: Option<NormFold>,
        biases: &[Bias],
    ) -> GpuResult<Vec<Dispatch>> {
        self.multi_product(weights, x, outs, None, mode, norm, biases)
    }

    /// Records for the results of a gate/up product of `rows` outputs that writes them as int8
    /// records (`gate_up_records`), in a scratch buffer of their own: such a product may read
    /// x as records in the shared one.
    pub fn glu_records(&self, rows: u32) -> XRecords {
        self.records_in("int8 gate/up", x_parts(rows))
    }

    /// Whether a gate/up/activation product over `weights` (folding a norm with `norm`) can
    /// write its results as int8 records (XQ_OUT) for the product reading them next: it
    /// quantizes its x itself (`glu_quantizes_locally`; the kernel's `xq` binding is then free
    /// for the records it writes) and its outputs are whole units of 32 values.
    pub fn glu_writes_records(&self, weights: &[&GpuWeight], norm: bool) -> bool {
        let Some(w) = weights.first() else {
            return false;
        };
        weights.len() == 2
            && norm
            && w.rows.is_multiple_of(32)
            && weights.iter().all(|w| w.parts.len() == 1)
            && self.glu_quantizes_locally(weights, w.rows as u32, w.cols as u32)
    }

    /// The gate/up/activation product (`Multi::Glu`) of one vector writing its results as the
    /// int8 records `out` (`glu_records`) instead of f32 values, so that the product reading
    /// them next needs no quantizing dispatch (`glu_writes_records` says where it can).
    pub fn gate_up_records(
        &self,
        weights: &[&GpuWeight],
        x: Region,
        act: Eltwise,
        norm: Option<NormFold>,
        out: &XRecords,
    ) -> GpuResult<Vec<Dispatch>> {
        if !self.glu_writes_records(weights, norm.is_some()) {
            return Err(GpuError::Unsupported {
                tensor: weights.first().map(|w| w.name.clone()).unwrap_or_default(),
                reason: "a gate/up product writing int8 records of its results".into(),
            });
        }
        self.multi_product(weights, x, &[], Some(out), Multi::Glu(act), norm, &[])
    }

    /// `matvec_multi`, its results into `outs` or (GLU only) as the int8 records `records_out`.
    #[allow(clippy::too_many_arguments)]
    fn multi_product(
        &self,
        weights: &[&GpuWeight],
        x: Region,
        outs: &[&wgpu::Buffer],
        records_out: Option<&XRecords>,
        mode: Multi,
        norm: Option<NormFold>,
        biases: &[Bias],
    ) -> GpuResult<Vec<Dispatch>> {
        let bad = |reason: String| GpuError::Unsupported {
            tensor: weights.first().map(|w| w.name.clone()).unwrap_or_default(),
            reason,
        };
        let glu = matches!(mode, Multi::Glu(_));
        let shape_ok = match mode {
            Multi::Split => {
                (2..=3).contains(&weights.len())
                    && outs.len() == weights.len()
                    && records_out.is_none()
            }
            Multi::Glu(_) => {
                weights.len() == 2
                    && outs.len() + usize::from(records_out.is_some()) == 1
                    && weights[0].rows == weights[1].rows
            }
        };
        let biases_ok = biases.is_empty() || biases.len() == weights.len();
        if !shape_ok
            || !biases_ok
            || weights
                .iter()
                .any(|w| w.parts.len() != 1 || w.cols != weights[0].cols)
        {
            return Err(bad(format!("{} weights fused as {mode:?}", weights.len())));
        }
        let decoders: Vec<Defines> = weights.iter().map(|w| w.decoder()).collect();
        let rows: u32 = if glu {
            weights[0].rows as u32
        } else {
            weights.iter().map(|w| w.rows as u32).sum()
        };
        let given = norm.and_then(|n| n.records);
        if given.is_some() && !self.int8_weights(weights, glu) {
            return Err(bad(
                "int8 records of x for weights that cannot take them".into()
            ));
        }
        let cols = weights[0].cols as u32;
        let local = given.is_none()
            && glu
            && norm.is_some()
            && self.glu_quantizes_locally(weights, rows, cols);
        let int8 = if given.is_some() || local {
            true
        } else if glu {
            self.glu_takes_int8(weights, norm.is_some())
        } else {
            self.dot_i8(weights, false, rows)
        };
        let eps = norm.map(|n| n.eps).unwrap_or(0.0);
        let quantized = match given {
            Some(records) => Some(QuantizedX::given(records)),
            None if int8 && !local => Some(self.quantize_x(x, cols, 1, norm)?),
            None => None,
        };
        // With int8 x the quantization (or the records' writer) applied the norm's weights;
        // a product quantizing x itself applies them as it does.
        let norm = norm.filter(|_| !int8 || local);
        let flags = MultiFlags {
            norm: norm.is_some(),
            bias: !biases.is_empty(),
            experts: false,
            int8,
            xq_norm: given.is_some(),
            local,
            route: false,
            records_out: records_out.is_some(),
            cols,
            rows,
        };
        let (pipe, rows_per_group) = self.multi_pipeline(decoders, mode, flags)?;
        let rows: Vec<u32> = weights.iter().map(|w| w.rows as u32).collect();
        let total = if glu { rows[0] } else { rows.iter().sum() };
        let (gx, gy) = grid2(total.div_ceil(rows_per_group));
        let used = [
            rows[0],
            if glu { 0 } else { rows[1] },
            rows.get(2).copied().unwrap_or(0),
        ];
        let (alpha, limit) = match mode {
            Multi::Glu(Eltwise::GluOss { alpha, limit }) => (alpha, limit),
            _ => (0.0, 0.0),
        };
        let params = MultiParams {
            alpha,
            limit,
            norm_offset: norm.map(|n| n.offset).unwrap_or(0),
            eps,
            bias_offsets: std::array::from_fn(|i| biases.get(i).map(|b| b.offset).unwrap_or(0)),
            xq_scales: xq_scales(&quantized),
            xq_sq: given.map(|r| r.sq_at()).unwrap_or(0),
            xq_out_scales: records_out.map(|r| r.scales).unwrap_or(0),
            ..MultiParams::whole(used, cols, x.offset, gx)
        };
        let ub = self.ctx.params("multi params", &params);
        let mut entries: Vec<(u32, &wgpu::Buffer)> = Vec::new();
        for (i, w) in weights.iter().enumerate() {
            entries.extend(multi_weight_entries(i, &w.parts[0]));
        }
        entries.push((30, x_binding(&quantized, x.buf)));
        for (i, o) in outs.iter().enumerate() {
            entries.push((31 + i as u32, o));
        }
        if let Some(r) = records_out {
            entries.push((31, &r.buf));
        }
        entries.push((34, &ub));
        if let Some(n) = &norm {
            entries.push((35, n.buf));
        }
        for (i, b) in biases.iter().enumerate() {
            entries.push((36 + i as u32, b.buf));
        }
        let product = self.dispatch(pipe, &entries, [gx, gy, 1]);
        Ok(with_quantization(quantized, vec![product]))
    }

    /// The pipeline of `matvec_multi.wgsl` for weights read through `decoders`.
    pub(super) fn multi_pipeline(
        &self,
        mut decoders: Vec<Defines>,
        mode: Multi,
        flags: MultiFlags,
    ) -> GpuResult<(Arc<wgpu::ComputePipeline>, u32)> {
        let glu = matches!(mode, Multi::Glu(_));
        // E2M1's own count was measured for GLU products; q/k/v keep the plain one.
        let e2m1 = glu && decoders.iter().all(|dec| dec.contains_key("E2M1"));
        let packed = glu
            && !flags.int8
            && self.takes_packed_f16(&decoders.iter().collect::<Vec<_>>(), flags.norm);
        // Staged x pairs serve both weights when they pair x alike: one decoder.
        let halves = (packed && decoders.windows(2).all(|w| w[0] == w[1]))
            .then(|| self.x_halves_defines(flags.cols))
            .flatten();
        let x = ProductX::of(halves.is_some(), e2m1, flags.int8);
        let shape = if flags.records_out {
            GLU_RECORDS_SHAPE
        } else {
            self.product_shape_of(glu, x, flags.rows, flags.cols, flags.local)
        };
        let mut d = self.product_defines(glu, x, shape);
        if packed {
            // The kernel (common.wgsl: f16 on) and each weight's decoder (its half parts).
            for dec in decoders.iter_mut().chain([&mut d]) {
                dec.insert("PACKED_F16".into(), String::new());
            }
        }
        let rows_per_group = shape.1;
        d.extend(halves.into_iter().flatten());
        let mut flag = |f: &str| d.insert(f.into(), String::new());
        match mode {
            Multi::Split => {
                flag("SPLIT");
                if decoders.len() == 3 {
                    flag("THREE");
                }
            }
            Multi::Glu(op) => {
                flag("GLU");
                if matches!(op, Eltwise::GluOss { .. }) {
                    flag("OSS");
                }
            }
        }
        let MultiFlags {
            norm,
            bias,
            experts,
            int8,
            xq_norm,
            local,
            route,
            records_out,
            cols,
            rows: _,
        } = flags;
        for (on, f) in [
            (norm, "NORM"),
            (norm || xq_norm, "RMS"),
            (bias, "BIAS"),
            (experts, "MOE"),
            (int8, "DOT_I8"),
            (xq_norm, "XQ_NORM"),
            (route, "ROUTE"),
            (records_out, "XQ_OUT"),
        ] {
            if on {
                flag(f);
            }
        }
        if local {
            d.extend(local_xq(cols));
        }
        if int8 {
            // The decoder instances define their int8 dot products.
            for dec in &mut decoders {
                dec.insert("DOT_I8".into(), String::new());
            }
        }
        let pipe =
            self.pipelines
                .get_multi(&self.ctx, "matvec_multi.wgsl", &d, &decoders, "main")?;
        Ok((pipe, rows_per_group))
    }
}
