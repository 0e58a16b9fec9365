//! GPU decode products alone: one product kernel dispatched many times in one submit, so that
//! the time per dispatch is the kernel's (plus the barrier between dispatches), for the shapes
//! of tinyllama-1.1b and gpt-oss-20b, several workgroup shapes and rows per lane. Needs a GPU adapter; prints
//! a note and measures nothing without one.

use criterion::{criterion_group, criterion_main, Criterion};
use minerva_engine::gpu::pipelines::Dispatch;
use minerva_engine::gpu::{
    Eltwise, ExpertSel, Folds, GpuContext, GpuOptions, GpuWeight, MatSel, Multi, NormFold, Ops,
    Region, HALVES_SHAPE, IN_FLIGHT, PRODUCT_SHAPE,
};
use minerva_formats::{DType, TensorData, TensorView};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Dispatches per submit: enough that the submit and wait are a small share.
const REPEAT: usize = 200;

/// Random stored bytes of a weight with finite, moderate scales.
fn weight_bytes(dtype: DType, rows: usize, cols: usize) -> Vec<u8> {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut byte = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state as u8
    };
    let half = half::f16::from_f32(0.01).to_le_bytes();
    match dtype {
        DType::Q4_0 => (0..rows * cols / 32)
            .flat_map(|_| {
                let mut b = half.to_vec();
                b.extend((0..16).map(|_| byte()));
                b
            })
            .collect(),
        DType::MXFP4 => (0..rows * cols / 32)
            .flat_map(|_| {
                let mut b = vec![120u8];
                b.extend((0..16).map(|_| byte()));
                b
            })
            .collect(),
        DType::Q8_0 => (0..rows * cols / 32)
            .flat_map(|_| {
                let mut b = half.to_vec();
                b.extend((0..32).map(|_| byte() & 0x3F));
                b
            })
            .collect(),
        _ => (0..rows * cols).flat_map(|_| [byte(), 0x1C]).collect(),
    }
}

fn context() -> Option<Arc<GpuContext>> {
    match GpuContext::new(&GpuOptions::default()) {
        Ok(c) => Some(Arc::new(c)),
        Err(e) => {
            eprintln!("gpu_products: no GPU adapter ({e}); nothing measured");
            None
        }
    }
}

/// The dispatches of one vector x through all of `w` into y.
fn plain_product(ops: &Ops, w: &GpuWeight, x: Region, y: Region) -> Vec<Dispatch> {
    ops.matvec(w, &MatSel::whole(w), x, y, 1, None, None, Folds::default())
        .expect("matvec")
}

/// Times `REPEAT` copies of the dispatches `d` (a product, after the quantization of its x with
/// int8 x) per submit; reports the time per copy.
fn time_dispatch(c: &mut Criterion, ctx: &GpuContext, name: &str, d: &[Dispatch]) {
    let list: Vec<&Dispatch> = (0..REPEAT).flat_map(|_| d).collect();
    c.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let t = Instant::now();
                ctx.submit(&list).expect("submit");
                ctx.wait().expect("wait");
                total += t.elapsed() / REPEAT as u32;
            }
            total
        })
    });
}

fn products(c: &mut Criterion) {
    let Some(ctx) = context() else { return };
    eprintln!("gpu_products on {}", ctx.describe());
    let x = ctx.storage_with("x", &vec![0.5f32; 16384]);
    let y = ctx.storage("y", 4 * 201_088);
    let mut ops = Ops::new(ctx.clone());
    // Int8 x for every Q4_0/Q8_0 product of the sweep, whatever its size, so the bench shows
    // where it pays (INT8_MIN_OUTPUTS).
    ops.set_int8_min_outputs(0);

    let tiny = ops
        .eltwise(
            Eltwise::Copy,
            Region::new(&x, 0, 1),
            None,
            Region::new(&y, 0, 1),
            1,
            1,
        )
        .expect("copy");
    time_dispatch(
        c,
        &ctx,
        "dispatch floor (1-value copy)",
        std::slice::from_ref(&tiny),
    );

    // tinyllama-1.1b's products, and gpt-oss-20b's output and four experts' worth of rows.
    let shapes = [
        (DType::Q4_0, 2048, 2048),
        (DType::Q4_0, 32000, 2048),
        (DType::Q8_0, 2048, 2048),
        (DType::F16, 2048, 2048),
        (DType::Q4_0, 2048, 5632),
        (DType::Q8_0, 201_088, 2880),
        (DType::MXFP4, 4 * 2880, 2880),
    ];
    for (dtype, rows, cols) in shapes {
        let bytes = weight_bytes(dtype, rows, cols);
        let w = upload(&ctx, dtype, rows, cols, &bytes);
        for (wg, rpw, rows_per_lane) in SHAPES {
            ops.set_product_shape(wg, rpw);
            ops.set_halves_shape(wg, rpw);
            ops.set_rows_per_lane(rows_per_lane);
            let d = plain_product(
                &ops,
                &w,
                Region::new(&x, 0, cols as u32),
                Region::new(&y, 0, rows as u32),
            );
            let name = format!(
                "{} {rows}x{cols} wg {wg} lane groups {rpw} rows per lane {rows_per_lane}",
                dtype.name()
            );
            time_dispatch(c, &ctx, &name, &d);
        }
    }

    // gpt-oss's four experts' rows of MXFP4, the products in f32 and in packed f16.
    let (rows, cols) = (4 * 2880, 2880);
    let bytes = weight_bytes(DType::MXFP4, rows, cols);
    let w = upload(&ctx, DType::MXFP4, rows, cols, &bytes);
    ops.set_product_shape(PRODUCT_SHAPE.0, PRODUCT_SHAPE.1);
    ops.set_halves_shape(HALVES_SHAPE.0, HALVES_SHAPE.1);
    ops.set_rows_per_lane(2);
    for (packed, halves) in [(false, false), (true, false), (true, true)] {
        ops.set_packed_f16(packed);
        ops.set_x_halves(halves);
        let d = plain_product(
            &ops,
            &w,
            Region::new(&x, 0, cols as u32),
            Region::new(&y, 0, rows as u32),
        );
        let name = format!(
            "MXFP4 {rows}x{cols} rows per lane 2 packed f16 {} x halves {halves}",
            ops.packed_f16()
        );
        time_dispatch(c, &ctx, &name, &d);
    }

    // tinyllama's gate/up/SiLU product with the RMSNorm folded in, as decode runs it.
    let norm = NormFold {
        buf: &x,
        offset: 0,
        eps: 1e-5,
        records: None,
    };
    // The same weight bytes as one plain product of twice the rows, with and without the norm.
    let (rows, cols) = (5632, 2048);
    let bytes = weight_bytes(DType::Q4_0, rows, cols);
    let gate = upload(&ctx, DType::Q4_0, rows, cols, &bytes);
    let up = upload(&ctx, DType::Q4_0, rows, cols, &bytes);
    let both = upload(
        &ctx,
        DType::Q4_0,
        2 * rows,
        cols,
        &[bytes.clone(), bytes].concat(),
    );
    ops.set_product_shape(256, 4);
    for with_norm in [true, false] {
        let fold = with_norm.then_some(norm);
        let d = ops
            .matvec_multi(
                &[&gate, &up],
                Region::new(&x, 0, cols as u32),
                &[&y],
                Multi::Glu(Eltwise::SwiGlu),
                fold,
                &[],
            )
            .expect("glu product");
        let name = format!("Q4_0 gate/up {rows}x{cols} norm {with_norm}");
        time_dispatch(c, &ctx, &name, &d);
        if d.len() > 1 {
            // The int8 products' quantization of x (with the norm) on its own.
            time_dispatch(c, &ctx, &format!("{name}: x quantized alone"), &d[..1]);
        }
        ops.set_rows_per_lane(2);
        let d = ops
            .matvec(
                &both,
                &MatSel::whole(&both),
                Region::new(&x, 0, cols as u32),
                Region::new(&y, 0, 2 * rows as u32),
                1,
                None,
                None,
                Folds {
                    norm: fold,
                    ..Default::default()
                },
            )
            .expect("matvec");
        let name = format!("Q4_0 {}x{cols} rows per lane 2 norm {with_norm}", 2 * rows);
        time_dispatch(c, &ctx, &name, &d);
    }
    q8_products(c, &ctx, &mut ops, &x, &y);
    experts(c, &ctx, &mut ops, &x, &y);
}

/// gpt-oss-20b's Q8_0 products on int8 x (its vocabulary product, and its q/k/v rows as one
/// plain product): lane groups per workgroup, rows per lane and parts in flight per lane.
/// Leaves `ops` in its defaults.
fn q8_products(
    c: &mut Criterion,
    ctx: &GpuContext,
    ops: &mut Ops,
    x: &wgpu::Buffer,
    y: &wgpu::Buffer,
) {
    for (rows, cols) in [(201_088, 2880), (5120, 2880)] {
        let bytes = weight_bytes(DType::Q8_0, rows, cols);
        let w = upload(ctx, DType::Q8_0, rows, cols, &bytes);
        for rpw in [4, 8] {
            for rows_per_lane in [1, 2, 3] {
                for in_flight in [2, 4, 8] {
                    ops.set_product_shape(256, rpw);
                    ops.set_rows_per_lane(rows_per_lane);
                    ops.set_in_flight(in_flight, IN_FLIGHT.1);
                    let d = plain_product(
                        ops,
                        &w,
                        Region::new(x, 0, cols as u32),
                        Region::new(y, 0, rows as u32),
                    );
                    let name = format!(
                        "Q8_0 int8 {rows}x{cols} lane groups {rpw} rows per lane {rows_per_lane} in flight {in_flight}"
                    );
                    time_dispatch(c, ctx, &name, &d);
                }
            }
        }
    }
    ops.set_product_shape(PRODUCT_SHAPE.0, PRODUCT_SHAPE.1);
    ops.set_in_flight(IN_FLIGHT.0, IN_FLIGHT.1);
    ops.set_rows_per_lane(2);
}

/// gpt-oss-20b's expert products of one decode token (32 experts of 2880 × 2880 MXFP4, 4
/// chosen): gate/up/activation and down, x in f16 converted per row or once per workgroup,
/// several workgroup shapes and parts in flight. Leaves `ops` in the last variant's settings.
fn experts(c: &mut Criterion, ctx: &GpuContext, ops: &mut Ops, x: &wgpu::Buffer, y: &wgpu::Buffer) {
    let (experts, rows, cols) = (32usize, 2880usize, 2880usize);
    let bytes = weight_bytes(DType::MXFP4, experts * rows, cols);
    let upload = |bytes: &[u8]| {
        let view = TensorView {
            name: "experts",
            shape: vec![experts, rows, cols],
            dtype: DType::MXFP4,
            data: TensorData::Plain(bytes),
        };
        GpuWeight::upload(ctx, &view, rows).expect("upload")
    };
    let (gate, up) = (upload(&bytes), upload(&bytes));
    let ids = ctx.storage_with("ids", &[3u32, 17, 8, 30]);
    let sel = MatSel::plain(rows, cols);
    ops.set_packed_f16(true);
    let variants = [
        // (workgroup, lane groups, parts in flight per lane, x halves)
        (256, 4, 1, false),
        (256, 4, 1, true),
        (256, 8, 1, false),
        (256, 8, 1, true),
        (256, 8, 2, true),
        (256, 8, 4, true),
        (128, 4, 1, true),
    ];
    for (wg, rpw, in_flight, halves) in variants {
        ops.set_product_shape(wg, rpw);
        ops.set_halves_shape(wg, rpw);
        ops.set_in_flight(in_flight, in_flight);
        ops.set_x_halves(halves);
        let variant = format!("wg {wg} lane groups {rpw} in flight {in_flight} x halves {halves}");
        let items = ExpertSel {
            ids: &ids,
            x_div: 4,
        };
        let act = Eltwise::GluOss {
            alpha: 1.702,
            limit: 7.0,
        };
        let (xr, yr) = (
            Region::new(x, 0, cols as u32),
            Region::new(y, 0, rows as u32),
        );
        let d = ops
            .matvec_glu_experts([&gate, &up], [&sel, &sel], xr, yr, 4, act, None, items)
            .expect("expert gate/up");
        time_dispatch(
            c,
            ctx,
            &format!("MXFP4 experts gate/up 4 of {experts} {variant}"),
            &d,
        );
        let items = ExpertSel {
            ids: &ids,
            x_div: 1,
        };
        let (xr, yr) = (
            Region::new(x, 0, cols as u32),
            Region::new(y, 0, rows as u32),
        );
        let d = ops
            .matvec(&gate, &sel, xr, yr, 4, None, Some(items), Folds::default())
            .expect("expert down");
        time_dispatch(
            c,
            ctx,
            &format!("MXFP4 experts down 4 of {experts} {variant}"),
            &d,
        );
    }
}

/// Plain decode product shapes measured: (workgroup size, lane groups per workgroup, rows per
/// lane).
const SHAPES: [(u32, u32, u32); 3] = [(256, 4, 1), (256, 4, 2), (256, 4, 3)];

fn upload(ctx: &GpuContext, dtype: DType, rows: usize, cols: usize, bytes: &[u8]) -> GpuWeight {
    let view = TensorView {
        name: "w",
        shape: vec![rows, cols],
        dtype,
        data: TensorData::Plain(bytes),
    };
    GpuWeight::upload(ctx, &view, 1).expect("upload")
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    targets = products
}
criterion_main!(benches);
