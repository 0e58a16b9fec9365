//! The CPU backend over weights kept as stored. [`CpuBackend::new`] multiplies quantized
//! blocks in integers against 8-bit activations (`quant`); [`CpuBackend::reference`] keeps
//! the plain f32 arithmetic (rows dequantized block by block as they are read), the oracle
//! the fast kernels and the GPU backend are checked against. Rayon spreads output rows over
//! the cores.

mod attention;
mod attention_tiled;
mod matmul;
mod moe;
pub mod quant;
mod resident;
mod weights;

pub use matmul::dot;
pub use moe::route;

use crate::backend::{
    AttnParams, Backend, BufId, KvId, KvSpec, Linear, MoeBlock, RopeParams, VecRef, WeightId,
};
use crate::error::{EngineError, Result};
use attention::KvStore;
use minerva_formats::{Activation, Mapping, RopeStyle, TensorView};
pub use weights::Weights;

/// Below this many multiply-adds an op runs on the calling thread: handing small work to the
/// thread pool costs more than it saves.
pub(crate) const PARALLEL_WORK: usize = 1 << 18;

/// Runs `f` on `pool` with the pool's other threads kept awake (looking for work, then
/// spinning) until `f` returns: a step's ops follow each other within microseconds, and a
/// thread that went to sleep between two of them takes longer to wake than a small op takes.
/// A spinner that finds nothing to do for `IDLE` goes back to sleep, so a thread that picks
/// one up itself is held up by at most that.
pub fn run_awake<R: Send>(pool: &rayon::ThreadPool, f: impl FnOnce() -> R + Send) -> R {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};
    const IDLE: Duration = Duration::from_micros(500);
    let running = AtomicBool::new(true);
    pool.install(|| {
        rayon::scope(|s| {
            for _ in 1..rayon::current_num_threads() {
                s.spawn(|_| {
                    let mut last = Instant::now();
                    while running.load(Ordering::Acquire) && last.elapsed() < IDLE {
                        match rayon::yield_now() {
                            Some(rayon::Yield::Executed) => last = Instant::now(),
                            _ => std::hint::spin_loop(),
                        }
                    }
                });
            }
            let r = f();
            running.store(false, Ordering::Release);
            r
        })
    })
}

/// `f(0) .. f(n)`, on the thread pool when `work` (multiply-adds) is worth it.
pub(crate) fn map_tasks<T: Send>(
    n: usize,
    work: usize,
    f: impl Fn(usize) -> T + Sync + Send,
) -> Vec<T> {
    use rayon::prelude::*;
    if work >= PARALLEL_WORK {
        (0..n).into_par_iter().map(f).collect()
    } else {
        (0..n).map(f).collect()
    }
}

struct Buf {
    cols: usize,
    data: Vec<f32>,
}

/// The CPU backend.
pub struct CpuBackend {
    weights: Weights,
    bufs: Vec<Buf>,
    kvs: Vec<Option<KvStore>>,
    /// Its own threads (RAYON_NUM_THREADS, else one per core), on which the model runs its
    /// steps; None where the system would not start them (the global pool then serves).
    pool: Option<std::sync::Arc<rayon::ThreadPool>>,
}

impl Default for CpuBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl CpuBackend {
    /// The fast backend: integer products on the stored blocks. `MINERVA_CPU_PRODUCTS=f32` in
    /// the environment gives the reference arithmetic instead, for comparisons with float32
    /// runs of other engines (as `MINERVA_GPU_MATRIX_CORES=0` does on the GPU).
    pub fn new() -> CpuBackend {
        Self::with_products(std::env::var("MINERVA_CPU_PRODUCTS").map_or(true, |v| v != "f32"))
    }

    /// The reference backend: every product in f32 over dequantized rows.
    pub fn reference() -> CpuBackend {
        Self::with_products(false)
    }

    fn with_products(fast: bool) -> CpuBackend {
        CpuBackend {
            weights: Weights::new(fast),
            bufs: Vec::new(),
            kvs: Vec::new(),
            pool: rayon::ThreadPoolBuilder::new()
                .thread_name(|i| format!("minerva-cpu-{i}"))
                .build()
                .ok()
                .map(std::sync::Arc::new),
        }
    }

    fn buf(&self, b: BufId) -> Result<&Buf> {
        self.bufs
            .get(b.0 as usize)
            .ok_or_else(|| EngineError::Backend(format!("unknown buffer handle {}", b.0)))
    }

    /// Takes an output buffer's storage out, so inputs can be borrowed while it is written.
    fn take(&mut self, b: BufId, n: usize, inputs: &[BufId]) -> Result<Vec<f32>> {
        if inputs.contains(&b) {
            return Err(EngineError::Backend(
                "an op's output buffer is also its input".into(),
            ));
        }
        let buf = self
            .bufs
            .get_mut(b.0 as usize)
            .ok_or_else(|| EngineError::Backend(format!("unknown buffer handle {}", b.0)))?;
        if n * buf.cols > buf.data.len() {
            return Err(EngineError::Backend(format!(
                "{n} rows exceed a buffer of {} rows",
                buf.data.len() / buf.cols.max(1)
            )));
        }
        Ok(std::mem::take(&mut buf.data))
    }

    fn put(&mut self, b: BufId, data: Vec<f32>) {
        self.bufs[b.0 as usize].data = data;
    }

    fn check_width(&self, b: BufId, cols: usize, what: &str) -> Result<()> {
        let have = self.buf(b)?.cols;
        if have != cols {
            return Err(EngineError::Backend(format!(
                "{what}: buffer of width {have}, {cols} needed"
            )));
        }
        Ok(())
    }
}

/// `gate = act(gate, up)` elementwise.
pub fn glu_into(gate: &mut [f32], up: &[f32], act: Activation) {
    let sigmoid = |x: f32| 1.0 / (1.0 + (-x).exp());
    match act {
        Activation::Silu => gate
            .iter_mut()
            .zip(up)
            .for_each(|(g, u)| *g = *g * sigmoid(*g) * u),
        Activation::GptOssClamped { alpha, limit } => gate.iter_mut().zip(up).for_each(|(g, u)| {
            let gc = g.min(limit);
            // max/min rather than clamp: clamp panics when a bad limit inverts the range.
            let uc = u.max(-limit).min(limit);
            *g = (uc + 1.0) * gc * sigmoid(alpha * gc);
        }),
    }
}

impl Backend for CpuBackend {
    fn name(&self) -> String {
        "cpu".to_string()
    }

    fn thread_pool(&self) -> Option<std::sync::Arc<rayon::ThreadPool>> {
        self.pool.clone()
    }

    fn share_mappings(&mut self, maps: &[Mapping]) {
        self.weights.share_mappings(maps);
    }

    fn upload(&mut self, view: &TensorView) -> Result<WeightId> {
        self.weights.upload(view)
    }

    fn upload_f32(&mut self, name: &str, shape: &[usize], data: &[f32]) -> Result<WeightId> {
        self.weights.upload_f32(name, shape, data)
    }

    fn alloc(&mut self, rows: usize, cols: usize) -> Result<BufId> {
        let len = rows
            .checked_mul(cols)
            .ok_or_else(|| EngineError::Backend(format!("buffer {rows}×{cols} too large")))?;
        self.bufs.push(Buf {
            cols,
            data: vec![0.0; len],
        });
        Ok(BufId(self.bufs.len() as u32 - 1))
    }

    fn alloc_kv(&mut self, spec: &KvSpec) -> Result<KvId> {
        let store = KvStore::new(spec, self.weights.fast())?;
        if let Some(slot) = self.kvs.iter().position(Option::is_none) {
            self.kvs[slot] = Some(store);
            return Ok(KvId(slot as u32));
        }
        self.kvs.push(Some(store));
        Ok(KvId(self.kvs.len() as u32 - 1))
    }

    fn free_kv(&mut self, kv: KvId) {
        if let Some(slot) = self.kvs.get_mut(kv.0 as usize) {
            *slot = None;
        }
    }

    fn embed(&mut self, table: WeightId, ids: &[u32], out: BufId) -> Result<()> {
        let mut o = self.take(out, ids.len(), &[])?;
        let res = (|| {
            let stored = self.weights.stored(table)?;
            let view = stored.view();
            let hidden = view.row_len();
            for (t, &id) in ids.iter().enumerate() {
                if id as usize >= view.rows() {
                    return Err(EngineError::Invalid(format!(
                        "token id {id} outside the embedding of {} rows",
                        view.rows()
                    )));
                }
                stored.dequantize_row(id as usize, &mut o[t * hidden..(t + 1) * hidden])?;
            }
            Ok(())
        })();
        self.put(out, o);
        res
    }

    fn rms_norm(
        &mut self,
        x: BufId,
        weight: VecRef,
        out: BufId,
        n: usize,
        group: usize,
        eps: f32,
    ) -> Result<()> {
        let w = self.weights.vec(&weight)?;
        if w.len() != group {
            return Err(EngineError::Backend(format!(
                "norm weight of {} for groups of {group}",
                w.len()
            )));
        }
        let cols = self.buf(x)?.cols;
        self.check_width(out, cols, "rms_norm")?;
        let mut o = self.take(out, n, &[x])?;
        let xs = &self.buf(x)?.data[..n * cols];
        for (xg, og) in xs.chunks_exact(group).zip(o.chunks_exact_mut(group)) {
            let ms = xg.iter().map(|v| v * v).sum::<f32>() / group as f32;
            let r = 1.0 / (ms + eps).sqrt();
            for ((ov, xv), wv) in og.iter_mut().zip(xg).zip(&w) {
                *ov = xv * r * wv;
            }
        }
        self.put(out, o);
        Ok(())
    }

    fn matmul(&mut self, x: BufId, lin: &Linear, out: BufId, n: usize) -> Result<()> {
        self.check_width(x, lin.in_dim(), "matmul input")?;
        self.check_width(out, lin.out_dim(), "matmul output")?;
        let mut o = self.take(out, n, &[x])?;
        let res = self
            .weights
            .linear(&self.bufs[x.0 as usize].data, n, lin, &mut o);
        self.put(out, o);
        res
    }

    fn rope(&mut self, x: BufId, n: usize, pos: usize, rope: &RopeParams) -> Result<()> {
        let freqs = self.weights.vec(&VecRef {
            weight: rope.freqs,
            row: 0,
            len: rope.dim / 2,
        })?;
        let (hd, half) = (rope.head_dim, rope.dim / 2);
        let buf = self
            .bufs
            .get_mut(x.0 as usize)
            .ok_or_else(|| EngineError::Backend("unknown buffer".into()))?;
        let cols = buf.cols;
        for t in 0..n {
            let p = (pos + t) as f32;
            let cs: Vec<(f32, f32)> = freqs
                .iter()
                .map(|f| {
                    let a = p * f;
                    (
                        a.cos() * rope.attention_factor,
                        a.sin() * rope.attention_factor,
                    )
                })
                .collect();
            for head in buf.data[t * cols..(t + 1) * cols].chunks_exact_mut(hd) {
                for (i, &(c, s)) in cs.iter().enumerate() {
                    let (a, b) = match rope.style {
                        RopeStyle::Halves => (i, i + half),
                        RopeStyle::Interleaved => (2 * i, 2 * i + 1),
                    };
                    let (x0, x1) = (head[a], head[b]);
                    head[a] = x0 * c - x1 * s;
                    head[b] = x1 * c + x0 * s;
                }
            }
        }
        Ok(())
    }

    fn attention(
        &mut self,
        q: BufId,
        k: BufId,
        v: BufId,
        kv: KvId,
        out: BufId,
        p: &AttnParams,
    ) -> Result<()> {
        let sinks = p.sinks.map(|s| self.weights.vec(&s)).transpose()?;
        let mut o = self.take(out, p.n, &[q, k, v])?;
        let (qd, kd, vd) = (
            &self.bufs[q.0 as usize].data,
            &self.bufs[k.0 as usize].data,
            &self.bufs[v.0 as usize].data,
        );
        let res = match self.kvs.get_mut(kv.0 as usize) {
            Some(Some(store)) => {
                store.attend(qd, kd, vd, sinks.as_deref(), p, &mut o);
                Ok(())
            }
            _ => Err(EngineError::Backend(format!(
                "unknown KV cache handle {}",
                kv.0
            ))),
        };
        self.put(out, o);
        res
    }

    fn glu(&mut self, gate: BufId, up: BufId, out: BufId, n: usize, act: Activation) -> Result<()> {
        let cols = self.buf(gate)?.cols;
        let mut o = self.take(out, n, &[gate, up])?;
        o[..n * cols].copy_from_slice(&self.bufs[gate.0 as usize].data[..n * cols]);
        glu_into(
            &mut o[..n * cols],
            &self.bufs[up.0 as usize].data[..n * cols],
            act,
        );
        self.put(out, o);
        Ok(())
    }

    fn moe(&mut self, x: BufId, block: &MoeBlock, out: BufId, n: usize) -> Result<()> {
        let hidden = self.buf(x)?.cols;
        let mut o = self.take(out, n, &[x])?;
        let res = moe::moe(
            &self.weights,
            block,
            &self.bufs[x.0 as usize].data,
            n,
            hidden,
            &mut o,
        );
        self.put(out, o);
        res
    }

    fn add(&mut self, acc: BufId, x: BufId, n: usize) -> Result<()> {
        let cols = self.buf(acc)?.cols;
        self.check_width(x, cols, "add")?;
        let mut a = self.take(acc, n, &[x])?;
        for (av, xv) in a[..n * cols].iter_mut().zip(&self.bufs[x.0 as usize].data) {
            *av += xv;
        }
        self.put(acc, a);
        Ok(())
    }

    fn copy_rows(
        &mut self,
        src: BufId,
        src_row: usize,
        dst: BufId,
        dst_row: usize,
        n: usize,
    ) -> Result<()> {
        let cols = self.buf(src)?.cols;
        self.check_width(dst, cols, "copy_rows")?;
        let mut d = self.take(dst, dst_row + n, &[src])?;
        let s = &self.bufs[src.0 as usize].data;
        let res = if (src_row + n) * cols > s.len() {
            Err(EngineError::Backend(
                "copy_rows past the source buffer".into(),
            ))
        } else {
            d[dst_row * cols..(dst_row + n) * cols]
                .copy_from_slice(&s[src_row * cols..(src_row + n) * cols]);
            Ok(())
        };
        self.put(dst, d);
        res
    }

    fn argmax(&mut self, x: BufId, row: usize) -> Result<u32> {
        let r = self.read_rows(x, row, 1)?;
        let mut best = 0;
        for (i, v) in r.iter().enumerate() {
            if *v > r[best] {
                best = i;
            }
        }
        Ok(best as u32)
    }

    fn top_k(&mut self, x: BufId, row: usize, k: usize) -> Result<Vec<(u32, f32)>> {
        let r = self.read_rows(x, row, 1)?;
        let mut idx: Vec<u32> = (0..r.len() as u32).collect();
        idx.sort_by(|&a, &b| {
            r[b as usize]
                .partial_cmp(&r[a as usize])
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        Ok(idx
            .into_iter()
            .take(k)
            .map(|i| (i, r[i as usize]))
            .collect())
    }

    fn read_rows(&mut self, x: BufId, first: usize, n: usize) -> Result<Vec<f32>> {
        let b = self.buf(x)?;
        let range = first * b.cols..(first + n) * b.cols;
        b.data
            .get(range)
            .map(<[f32]>::to_vec)
            .ok_or_else(|| EngineError::Backend("read past a buffer's end".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::MatView;
    use minerva_formats::{DType, TensorData};

    /// A Q4_0 matrix in a mapped file: the fast backend packs it at upload (where its lanes
    /// have packed kernels) and still reads its rows as stored through `embed`, and its
    /// products match the reference backend's; a matrix of zero-length rows loads as it did.
    #[test]
    fn packed_weights_read_back_as_stored() {
        use std::io::Write;
        let (rows, len) = (16, 64);
        let row_bytes = DType::Q4_0.row_bytes(len).unwrap();
        let mut bytes: Vec<u8> = (0..rows * row_bytes)
            .map(|i| (i * 37 % 251) as u8)
            .collect();
        for blk in bytes.chunks_exact_mut(18) {
            blk[..2].copy_from_slice(&half::f16::from_f32(0.03).to_le_bytes());
        }
        let mut file = tempfile::NamedTempFile::new().unwrap();
        file.write_all(&bytes).unwrap();
        // SAFETY: a temporary file of this test's own, not changed while mapped.
        let map: Mapping =
            std::sync::Arc::new(unsafe { memmap2::Mmap::map(file.as_file()) }.unwrap());
        let view = TensorView {
            name: "w",
            shape: vec![rows, len],
            dtype: DType::Q4_0,
            data: TensorData::Plain(&map[..]),
        };
        let empty = TensorView {
            name: "e",
            shape: vec![rows, 0],
            dtype: DType::Q4_0,
            data: TensorData::Plain(&map[..0]),
        };
        let mut outs = Vec::new();
        for mut backend in [CpuBackend::new(), CpuBackend::reference()] {
            backend.share_mappings(std::slice::from_ref(&map));
            backend.upload(&empty).unwrap();
            let w = backend.upload(&view).unwrap();
            let x = backend.alloc(2, len).unwrap();
            backend.embed(w, &[3, 12], x).unwrap();
            let embedded = backend.read_rows(x, 0, 2).unwrap();
            let y = backend.alloc(2, rows).unwrap();
            let lin = Linear {
                w: MatView {
                    weight: w,
                    matrix: 0,
                    input_major: false,
                    offset: 0,
                    stride: 1,
                    out_dim: rows,
                    in_dim: len,
                },
                bias: None,
            };
            backend.matmul(x, &lin, y, 2).unwrap();
            let packed = backend.weights.packed(w);
            outs.push((embedded, backend.read_rows(y, 0, 2).unwrap(), packed));
        }
        let (fast, reference) = (&outs[0], &outs[1]);
        assert_eq!(fast.0, reference.0, "rows read back through embed");
        let size = reference.1.iter().fold(1f32, |m, v| m.max(v.abs()));
        for (a, b) in fast.1.iter().zip(&reference.1) {
            assert!((a - b).abs() <= 0.01 * size, "products {a} vs {b}");
        }
        assert!(
            !reference.2,
            "the reference backend keeps the file's layout"
        );
        let lanes = quant::Lanes::chosen();
        let packs = cfg!(unix) && quant::packed::packs(DType::Q4_0, rows, lanes).is_some();
        assert_eq!(fast.2, packs, "packed where the lanes have packed kernels");
    }

    /// A negative limit (refused by the spec check, but reachable through `load_with_spec`)
    /// gives numbers, not the panic `f32::clamp` raises on an inverted range.
    #[test]
    fn clamped_glu_survives_an_inverted_limit() {
        let mut gate = vec![1.0, -2.0];
        glu_into(
            &mut gate,
            &[0.5, 3.0],
            Activation::GptOssClamped {
                alpha: 1.702,
                limit: -1.0,
            },
        );
        assert!(gate.iter().all(|v| !v.is_nan()), "{gate:?}");
    }
}
