//! The GPU device: adapter choice by name, and device errors surfacing as `GpuError` values.
//! Each test makes its own device; at most two at once (`TestSlot`).

mod gpu_common;

use gpu_common::*;
use minerva_engine::gpu::context::{submit_sizes, Pieces};
use minerva_engine::gpu::pipelines::Pipelines;
use minerva_engine::gpu::shader::defines;
use minerva_engine::gpu::weights::decoder_defines;
use minerva_engine::gpu::{Eltwise, GpuContext, GpuError, GpuOptions, GpuWeight, Ops, Region};
use minerva_formats::{DType, TensorData, TensorView};

#[test]
fn an_adapter_name_that_matches_nothing_is_an_error() {
    let _turn = TestSlot::take();
    if device().is_none() {
        return;
    }
    let opts = GpuOptions {
        adapter_name: Some("no-such-adapter-anywhere".into()),
        ..Default::default()
    };
    match GpuContext::new(&opts) {
        Err(GpuError::NoAdapter(msg)) => assert!(msg.contains("no-such-adapter-anywhere"), "{msg}"),
        Err(e) => panic!("unexpected error {e}"),
        Ok(c) => panic!("matched {}", c.describe()),
    }
}

#[test]
fn validation_errors_become_values() {
    let _turn = TestSlot::take();
    let Some(ctx) = device() else { return };
    // A copy past the end of a buffer: wgpu reports it to the device's error handler.
    let a = ctx.storage("a", 16);
    let b = ctx.storage("b", 16);
    let mut enc = ctx.device.create_command_encoder(&Default::default());
    enc.copy_buffer_to_buffer(&a, 0, &b, 8, 16);
    ctx.queue.submit([enc.finish()]);
    match ctx.wait() {
        Err(GpuError::Validation(msg)) => assert!(!msg.is_empty()),
        other => panic!("expected a validation error, got {other:?}"),
    }
    // The slot is cleared once reported; the device keeps working.
    ctx.wait().unwrap();
    let c = ctx.storage_with("c", &[1f32, 2.0]);
    assert_eq!(ctx.read_f32(&c, 0, 2).unwrap(), vec![1.0, 2.0]);
}

#[test]
fn upload_rejects_mismatched_sizes_and_unknown_dtypes() {
    let _turn = TestSlot::take();
    let Some(ctx) = device() else { return };
    let bytes = vec![0u8; 18 * 3];
    let short = TensorView {
        name: "blk.0.attn_q.weight",
        shape: vec![2, 64],
        dtype: DType::Q4_0,
        data: TensorData::Plain(&bytes),
    };
    let err = GpuWeight::upload(&ctx, &short, 1)
        .err()
        .expect("size mismatch accepted");
    assert!(err.to_string().contains("blk.0.attn_q.weight"), "{err}");
    let ints = TensorView {
        name: "ids",
        shape: vec![4],
        dtype: DType::I32,
        data: TensorData::Plain(&bytes[..16]),
    };
    let err = GpuWeight::upload(&ctx, &ints, 1)
        .err()
        .expect("I32 weight accepted");
    assert!(err.to_string().contains("I32"), "{err}");
}

#[test]
fn weight_memory_is_the_stored_size() {
    let _turn = TestSlot::take();
    let Some(ctx) = device() else { return };
    let mut rng = Rng::new(4);
    let row = rng.vec(64 * 10);
    let bytes: Vec<u8> = row.chunks(64).flat_map(quantize_q4_0).collect();
    let view = TensorView {
        name: "w",
        shape: vec![10, 64],
        dtype: DType::Q4_0,
        data: TensorData::Plain(&bytes),
    };
    let w = GpuWeight::upload(&ctx, &view, 1).unwrap();
    // The stored bytes, padded to whole vec4s (kernels read f32 vectors as vec4s).
    assert_eq!(w.gpu_bytes(), bytes.len().div_ceil(16) as u64 * 16);
}

#[test]
fn pipelines_built_ahead_keep_their_errors_to_themselves() {
    let _turn = TestSlot::take();
    let Some(ctx) = device() else { return };
    let pipelines = Pipelines::default();
    // A decoder file without its dtype flag does not compile (no BLOCK_BYTES).
    let broken = defines(&[("DECODER", "blocks_ggml.wgsl".into())]);
    pipelines.prepare(&ctx, "embed.wgsl", &broken, &[], "main");
    ctx.check()
        .expect("an ahead-of-use build reported into the device's error slot");
    // Asked for by an op, the same kernel fails with an error naming it.
    match pipelines.get(&ctx, "embed.wgsl", &broken, "main") {
        Err(GpuError::Validation(msg)) => assert!(msg.contains("embed.wgsl"), "{msg}"),
        other => panic!("expected a validation error, got {:?}", other.map(|_| ())),
    }
    // A good kernel built ahead is the one later handed out.
    let good = decoder_defines(DType::Q4_0, None).expect("Q4_0 has a decoder");
    pipelines.prepare(&ctx, "embed.wgsl", &good, &[], "main");
    assert_eq!(pipelines.len(), 1);
    let a = pipelines.get(&ctx, "embed.wgsl", &good, "main").unwrap();
    let b = pipelines.get(&ctx, "embed.wgsl", &good, "main").unwrap();
    assert!(std::sync::Arc::ptr_eq(&a, &b));
    assert_eq!(pipelines.len(), 1);
    ctx.check().unwrap();
}

/// Weights pass through the staging ring (two halves of 32 MiB): tensors
/// of odd sizes, one larger than a half, several filling both halves, some staged after a
/// step (a read) has let the ring go, come back byte for byte, each padded with zeros to its
/// buffer's size.
#[test]
fn staged_weights_read_back_exactly() {
    let _turn = TestSlot::take();
    let Some(ctx) = device() else { return };
    let mut rng = Rng::new(11);
    let mut upload = |i: usize, n: usize| {
        let bytes: Vec<u8> = rng.vec(n).iter().flat_map(|v| v.to_le_bytes()).collect();
        let name = format!("w{i}");
        let view = TensorView {
            name: &name,
            shape: vec![1, n],
            dtype: DType::F32,
            data: TensorData::Plain(&bytes),
        };
        (GpuWeight::upload(&ctx, &view, 1).unwrap(), bytes)
    };
    let check = |(w, bytes): &(GpuWeight, Vec<u8>)| {
        let buf = &w.parts[0].buffers[0];
        let back = ctx.read_bytes(buf, 0, buf.size()).unwrap();
        assert_eq!(back.len() as u64, buf.size());
        assert!(back[..bytes.len()] == bytes[..], "{}: bytes differ", w.name);
        assert!(
            back[bytes.len()..].iter().all(|&b| b == 0),
            "{}: padding",
            w.name
        );
    };
    // F32 rows of these many values: 4 B to 36 MB.
    let first = [1usize, 5, 9_000_001, 700_000, 1_000_000, 9];
    let second = [1_000_000usize, 3, 2_500_000, 1_000_000, 4_000_000];
    let mut all: Vec<_> = first
        .iter()
        .enumerate()
        .map(|(i, &n)| upload(i, n))
        .collect();
    check(&all[1]);
    all.extend(second.iter().enumerate().map(|(i, &n)| upload(10 + i, n)));
    all.iter().for_each(check);
}

/// A step goes to the GPU in growing pieces (an idle GPU starts on the first while the host
/// records the rest) or, queued behind running work, in one command buffer; either way every
/// dispatch runs once, in order, before its read back.
#[test]
fn a_step_goes_in_growing_pieces_or_in_one() {
    let _turn = TestSlot::take();
    let Some(ctx) = device() else { return };
    let ctx = std::sync::Arc::new(ctx);
    let ops = Ops::new(ctx.clone());
    let x = ctx.storage_with("x", &[1.0f32, 2.0, 3.0, 4.0]);
    let acc = ctx.storage("acc", 16);
    let add = ops
        .eltwise(
            Eltwise::Add,
            Region::new(&x, 0, 4),
            None,
            Region::new(&acc, 0, 4),
            4,
            1,
        )
        .unwrap();
    let step = vec![&add; 40];
    let mut total = 0.0;
    for (pieces, submits) in [(Pieces::Growing, submit_sizes(40).len()), (Pieces::One, 1)] {
        let before = ctx.submits();
        let read = ctx
            .submit_and_read(&step, &[(&acc, 0, 16)], pieces)
            .unwrap();
        let bytes = ctx.finish_read(read).unwrap().remove(0);
        total += 40.0;
        let got: Vec<f32> = bytemuck::pod_collect_to_vec(&bytes);
        assert_eq!(
            got,
            [total, 2.0 * total, 3.0 * total, 4.0 * total],
            "{pieces:?}"
        );
        assert_eq!(ctx.submits() - before, submits as u64, "{pieces:?}");
    }
    assert!(submit_sizes(40).len() > 1);
}
