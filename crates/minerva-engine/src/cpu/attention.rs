//! Causal attention over a per-layer KV cache, with GQA, sliding windows and sinks. Heads
//! (and tokens) are spread over the cores. The fast path's f16 cache is read in tiles
//! ([`super::attention_tiled`]); the reference path's f32 cache a query at a time, here.

use crate::backend::{AttnParams, KvSpec};
use crate::cpu::matmul::dot;
use crate::cpu::PARALLEL_WORK;
use crate::error::{EngineError, Result};
use half::f16;
use half::slice::HalfFloatSliceExt;
use rayon::prelude::*;

/// Cached keys or values: f16 on the fast path (half the memory; llama.cpp's default too),
/// f32 on the reference one. By slot, `[cap, width]`, or, for the fast path's keys, turned,
/// `[width, cap]` (see [`super::attention_tiled`]).
enum Cached {
    F32(Vec<f32>),
    F16(Vec<f16>),
    F16Turned(Vec<f16>),
}

impl Cached {
    /// `n` zeros, or None where the memory cannot hold them; turned where `half` and
    /// `turned`.
    fn zeroed(n: usize, half: bool, turned: bool) -> Option<Cached> {
        fn zeros<T: Clone>(n: usize, zero: T) -> Option<Vec<T>> {
            let mut v = Vec::new();
            v.try_reserve_exact(n).ok()?;
            v.resize(n, zero);
            Some(v)
        }
        Some(if half && turned {
            Cached::F16Turned(zeros(n, f16::ZERO)?)
        } else if half {
            Cached::F16(zeros(n, f16::ZERO)?)
        } else {
            Cached::F32(zeros(n, 0.0)?)
        })
    }

    /// Stores one position's values (a row of the cache's width) in `slot` of `cap`.
    fn write(&mut self, slot: usize, cap: usize, src: &[f32]) {
        let at = slot * src.len();
        match self {
            Cached::F32(c) => c[at..at + src.len()].copy_from_slice(src),
            Cached::F16(c) => c[at..at + src.len()].convert_from_f32_slice(src),
            Cached::F16Turned(c) => {
                for (col, &x) in src.iter().enumerate() {
                    c[col * cap + slot] = f16::from_f32(x);
                }
            }
        }
    }
}

/// One layer's keys and values, `[cap, n_kv_heads · head_dim]` each. Position p lives in slot
/// p mod cap: a full layer holds the whole context, a sliding-window layer a ring that still
/// holds the window of the oldest query of a step after the step's keys were written.
pub struct KvStore {
    cap: usize,
    width: usize,
    k: Cached,
    v: Cached,
}

impl KvStore {
    /// A zeroed cache of `spec.ctx` positions (or its window), in f16 where `half`; a size the
    /// memory cannot hold is an error, not an abort.
    pub fn new(spec: &KvSpec, half: bool) -> Result<KvStore> {
        let cap = match spec.window {
            Some(w) => spec.ctx.min(w.saturating_add(spec.max_batch.max(1) - 1)),
            None => spec.ctx,
        };
        let width = spec.n_kv_heads * spec.head_dim;
        let zeroed = |turned| Cached::zeroed(cap.checked_mul(width)?, half, turned);
        let (Some(k), Some(v)) = (zeroed(true), zeroed(false)) else {
            return Err(EngineError::Invalid(format!(
                "not enough memory for a KV cache of {cap} tokens × {width} values per layer"
            )));
        };
        Ok(KvStore { cap, width, k, v })
    }

    /// Stores the `n` new keys and values, then attends. `sinks` holds one logit per head.
    pub fn attend(
        &mut self,
        q: &[f32],
        k: &[f32],
        v: &[f32],
        sinks: Option<&[f32]>,
        p: &AttnParams,
        out: &mut [f32],
    ) {
        let (hd, w) = (p.head_dim, self.width);
        for t in 0..p.n {
            let slot = (p.pos + t) % self.cap;
            self.k.write(slot, self.cap, &k[t * w..(t + 1) * w]);
            self.v.write(slot, self.cap, &v[t * w..(t + 1) * w]);
        }
        let q_width = p.n_heads * hd;
        let cap = self.cap;
        let work = p.n * p.n_heads * hd * (p.pos + p.n).min(self.cap);
        // Threads are awake through a step (`run_awake`): a split pays from a quarter.
        let parallel = work >= PARALLEL_WORK / 4;
        let (k, v) = match (&self.k, &self.v) {
            (Cached::F16Turned(kt), Cached::F16(v)) => {
                let cache = super::attention_tiled::Cache {
                    kt,
                    v,
                    cap,
                    width: w,
                };
                super::attention_tiled::attend(&cache, q, sinks, p, out, parallel);
                return;
            }
            (Cached::F32(k), Cached::F32(v)) => (k, v),
            _ => unreachable!("a cache is f16 (keys turned) or f32 throughout"),
        };
        let job = Heads {
            q,
            k,
            v,
            sinks,
            p,
            cap,
            width: w,
        };
        #[cfg(target_arch = "x86_64")]
        let avx2 = super::quant::Lanes::chosen() != super::quant::Lanes::Portable;
        let head = |(idx, o): (usize, &mut [f32])| {
            #[cfg(target_arch = "x86_64")]
            if avx2 {
                // SAFETY: the chosen lanes are AVX2 or better only where the processor has
                // AVX2 and FMA.
                return unsafe { job.one_avx2(idx, o) };
            }
            job.one(idx, o)
        };
        let out = &mut out[..p.n * q_width];
        if parallel {
            out.par_chunks_mut(hd).enumerate().for_each(head);
        } else {
            out.chunks_mut(hd).enumerate().for_each(head);
        }
    }
}

/// The first position a query at `pos` sees: its window's start, or 0.
pub(super) fn first_key(p: &AttnParams, pos: usize) -> usize {
    p.window.map_or(0, |win| (pos + 1).saturating_sub(win))
}

/// One step's attention: queries, the cache as f32, and what to attend with.
struct Heads<'a> {
    q: &'a [f32],
    k: &'a [f32],
    v: &'a [f32],
    sinks: Option<&'a [f32]>,
    p: &'a AttnParams,
    cap: usize,
    width: usize,
}

impl Heads<'_> {
    /// Output `idx` (token idx / heads, head idx % heads): softmax(q·K / √d) · V over the
    /// positions the token sees, with the head's sink logit in the denominator.
    #[inline(always)]
    fn one(&self, idx: usize, o: &mut [f32]) {
        let (p, hd, w, cap) = (self.p, self.p.head_dim, self.width, self.cap);
        let (t, h) = (idx / p.n_heads, idx % p.n_heads);
        let kvh = h / (p.n_heads / p.n_kv_heads.max(1)).max(1);
        let pos = p.pos + t;
        let first = first_key(p, pos);
        let q_width = p.n_heads * hd;
        let qh = &self.q[t * q_width + h * hd..t * q_width + (h + 1) * hd];
        let at = |j: usize| (j % cap) * w + kvh * hd;
        // A plain loop: a closure would not inherit `one_avx2`'s target features, and its
        // products would run on the baseline's narrow lanes.
        let mut scores = Vec::with_capacity(pos + 1 - first);
        for j in first..=pos {
            scores.push(dot(qh, &self.k[at(j)..at(j) + hd]) * p.scale);
        }
        let sink = self.sinks.map(|s| s[h]);
        let max = scores
            .iter()
            .copied()
            .chain(sink)
            .fold(f32::NEG_INFINITY, f32::max);
        let exps: Vec<f32> = scores.iter().map(|s| (s - max).exp()).collect();
        let denom = exps.iter().sum::<f32>() + sink.map_or(0.0, |s| (s - max).exp());
        o.fill(0.0);
        for (j, e) in (first..=pos).zip(&exps) {
            let wgt = e / denom;
            for (oo, vv) in o.iter_mut().zip(&self.v[at(j)..at(j) + hd]) {
                *oo += wgt * vv;
            }
        }
    }

    /// [`Heads::one`] compiled for AVX2 and FMA.
    ///
    /// # Safety
    /// The processor has AVX2 and FMA.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn one_avx2(&self, idx: usize, o: &mut [f32]) {
        self.one(idx, o)
    }
}
