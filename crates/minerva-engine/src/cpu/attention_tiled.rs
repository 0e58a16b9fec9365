//! Attention on the fast path, over the f16 cache in tiles: four queries at a time (the heads
//! that share a KV head, for each of the step's tokens) take their scores against 32 keys at
//! a time and their outputs 32 dimensions at a time, so each key and value is read (and
//! widened from f16) once for four queries, into registers' worth of accumulators. The keys
//! are cached turned, a row of positions per dimension, so that a block of 32 keys' values
//! of one dimension is one load.
//!
//! A query's score for a key is summed over the dimensions in order, its softmax over its own
//! keys in order, and its output over the keys in order (keys it does not see add exact
//! zeros), whichever queries share its tile: a token's attention is the same bits alone or in
//! a prompt, as its products are.

use super::attention::first_key;
use crate::backend::AttnParams;
use half::f16;
use rayon::prelude::*;

/// Queries per tile.
const QUERIES: usize = 4;
/// Keys per block of the score product, dimensions per block of the value product.
const BLOCK: usize = 32;

/// One layer's f16 cache: keys turned, `kt[c · cap + slot]` for column c of
/// `[kv heads · head_dim]`, values by slot, `v[slot · width + c]`; position p in slot p mod cap.
pub struct Cache<'a> {
    pub kt: &'a [f16],
    pub v: &'a [f16],
    pub cap: usize,
    pub width: usize,
}

/// softmax(q·K / √d) · V for every query of the step (`q` is `[n, heads · head_dim]`) into
/// `out`, on the thread pool when `parallel`.
pub fn attend(
    cache: &Cache,
    q: &[f32],
    sinks: Option<&[f32]>,
    p: &AttnParams,
    out: &mut [f32],
    parallel: bool,
) {
    let hd = p.head_dim;
    let kv_heads = p.n_kv_heads.max(1);
    let group = (p.n_heads / kv_heads).max(1);
    // The step's keys: from the first token's first to the last token's position.
    let lo = first_key(p, p.pos);
    let step = Step {
        cache,
        q,
        sinks,
        p,
        lo,
        span: (p.pos + p.n - lo).next_multiple_of(BLOCK),
    };
    // Each KV head's queries (token by token, the group's heads within), four to a tile.
    let per_head = (p.n * group).div_ceil(QUERIES);
    let tile = |i: usize| {
        let (kvh, first) = (i / per_head, i % per_head * QUERIES);
        let queries: Vec<(usize, usize)> = (first..(first + QUERIES).min(p.n * group))
            .map(|k| (k / group, kvh * group + k % group))
            .collect();
        let o = step.tile(kvh, &queries);
        (queries, o)
    };
    let tiles = kv_heads * per_head;
    let done: Vec<_> = if parallel {
        (0..tiles).into_par_iter().map(tile).collect()
    } else {
        (0..tiles).map(tile).collect()
    };
    let q_width = p.n_heads * hd;
    for (queries, o) in done {
        for (&(t, h), o) in queries.iter().zip(o.chunks_exact(hd)) {
            out[t * q_width + h * hd..][..hd].copy_from_slice(o);
        }
    }
}

/// One step's attention: the cache, queries, and the step's keys (positions `lo..`, `span`
/// of them rounded up to a block).
struct Step<'a> {
    cache: &'a Cache<'a>,
    q: &'a [f32],
    sinks: Option<&'a [f32]>,
    p: &'a AttnParams,
    lo: usize,
    span: usize,
}

/// Where a block of 32 keys' turned rows lie: `at[d · stride + x]` for key x, dimension d.
struct Rows<'a> {
    at: &'a [f16],
    stride: usize,
}

impl Step<'_> {
    /// Up to four queries `(token, head)` of KV head `kvh`: their outputs, one after another.
    fn tile(&self, kvh: usize, queries: &[(usize, usize)]) -> Vec<f32> {
        let (p, hd, span) = (self.p, self.p.head_dim, self.span);
        let q_width = p.n_heads * hd;
        // The queries' values and the keys each sees (from the step's first); a tile of
        // fewer than four repeats its last query.
        let mut qs = vec![0f32; QUERIES * hd];
        let mut seen = [(0usize, 0usize); QUERIES];
        let mut heads = [0usize; QUERIES];
        for i in 0..QUERIES {
            let (t, h) = queries[i.min(queries.len() - 1)];
            qs[i * hd..(i + 1) * hd].copy_from_slice(&self.q[t * q_width + h * hd..][..hd]);
            let pos = p.pos + t;
            seen[i] = (first_key(p, pos) - self.lo, pos + 1 - self.lo);
            heads[i] = h;
        }
        let from = seen.iter().map(|s| s.0).min().unwrap_or(0) / BLOCK * BLOCK;
        let to = seen.iter().map(|s| s.1).max().unwrap_or(0);
        let mut s = vec![0f32; QUERIES * span];
        let mut turned = Vec::new();
        for jb in (from..to).step_by(BLOCK) {
            let rows = self.key_rows(kvh, jb, &mut turned);
            scores(&rows, &qs, hd, p.scale, &mut s[jb..], span);
        }
        for (i, &(a, b)) in seen.iter().enumerate() {
            let sink = self.sinks.map(|s| s[heads[i]]);
            softmax(&mut s[i * span..(i + 1) * span], a..b, from..to, sink);
        }
        let mut o = vec![0f32; QUERIES * hd];
        self.outputs(kvh, &s, from..to, &mut o);
        o.truncate(queries.len() * hd);
        o
    }

    /// The turned rows of keys `jb..jb + 32` (from the step's first) of KV head `kvh`: in
    /// place, or, where their slots wrap or run past the cache's end, copied into `turned`.
    fn key_rows<'b>(&'b self, kvh: usize, jb: usize, turned: &'b mut Vec<f16>) -> Rows<'b> {
        let (c, hd) = (self.cache, self.p.head_dim);
        let slot = (self.lo + jb) % c.cap;
        let first = kvh * hd * c.cap;
        if slot + BLOCK <= c.cap {
            return Rows {
                at: &c.kt[first + slot..],
                stride: c.cap,
            };
        }
        turned.resize(hd * BLOCK, f16::ZERO);
        for d in 0..hd {
            for x in 0..BLOCK {
                // Past the step's keys: any slot's value, as in place; masked later.
                let s = (self.lo + jb + x) % c.cap;
                turned[d * BLOCK + x] = c.kt[first + d * c.cap + s];
            }
        }
        Rows {
            at: turned,
            stride: BLOCK,
        }
    }

    /// `o[i · hd + d] = Σ_j s[i · span + j] · v[key j][d]` over `keys`.
    fn outputs(&self, kvh: usize, s: &[f32], keys: std::ops::Range<usize>, o: &mut [f32]) {
        let (c, hd) = (self.cache, self.p.head_dim);
        let values = Values {
            v: &c.v[kvh * hd..],
            width: c.width,
            cap: c.cap,
            slot: (self.lo + keys.start) % c.cap,
        };
        #[cfg(target_arch = "x86_64")]
        if hd.is_multiple_of(8) && super::quant::Lanes::chosen() != super::quant::Lanes::Portable {
            // SAFETY: lanes other than the portable ones are chosen only where the processor
            // has AVX2, FMA and F16C.
            unsafe { x86::outputs_all(&values, s, self.span, keys, hd, o) };
            return;
        }
        let mut slot = values.slot;
        for j in keys {
            let row = &values.v[slot * c.width..][..hd];
            for i in 0..QUERIES {
                let w = s[i * self.span + j];
                for (o, v) in o[i * hd..(i + 1) * hd].iter_mut().zip(row) {
                    *o += w * v.to_f32();
                }
            }
            slot = values.next(slot);
        }
    }
}

/// One KV head's values: `v[slot · width + d]`, read from `slot` on, wrapping at `cap`.
struct Values<'a> {
    v: &'a [f16],
    width: usize,
    cap: usize,
    slot: usize,
}

impl Values<'_> {
    #[inline(always)]
    fn next(&self, slot: usize) -> usize {
        if slot + 1 == self.cap {
            0
        } else {
            slot + 1
        }
    }
}

/// `s[i · span + x] = scale · Σ_d qs[i · hd + d] · key x's d` for a block of 32 keys.
fn scores(rows: &Rows, qs: &[f32], hd: usize, scale: f32, s: &mut [f32], span: usize) {
    #[cfg(target_arch = "x86_64")]
    if super::quant::Lanes::chosen() != super::quant::Lanes::Portable {
        // SAFETY: as in `outputs`.
        unsafe { x86::scores(rows, qs, hd, scale, s, span) };
        return;
    }
    let mut acc = [[0f32; BLOCK]; QUERIES];
    for d in 0..hd {
        let k = &rows.at[d * rows.stride..][..BLOCK];
        for (i, acc) in acc.iter_mut().enumerate() {
            let qd = qs[i * hd + d];
            for (a, k) in acc.iter_mut().zip(k) {
                *a += qd * k.to_f32();
            }
        }
    }
    for (i, acc) in acc.iter().enumerate() {
        for (x, a) in acc.iter().enumerate() {
            s[i * span + x] = a * scale;
        }
    }
}

/// A query's scores over `seen` turned into its softmax weights (with its sink logit in the
/// denominator), in order; the rest of `all` weighted zero.
fn softmax(
    row: &mut [f32],
    seen: std::ops::Range<usize>,
    all: std::ops::Range<usize>,
    sink: Option<f32>,
) {
    let mut max = f32::NEG_INFINITY;
    for &x in &row[seen.clone()] {
        max = max.max(x);
    }
    if let Some(sk) = sink {
        max = max.max(sk);
    }
    let mut denom = 0f32;
    for x in &mut row[seen.clone()] {
        *x = (*x - max).exp();
        denom += *x;
    }
    if let Some(sk) = sink {
        denom += (sk - max).exp();
    }
    for x in &mut row[seen.clone()] {
        *x /= denom;
    }
    row[all.start..seen.start].fill(0.0);
    row[seen.end..all.end].fill(0.0);
}

/// The two products' register blocks in AVX2 lanes: four queries × 32 keys (or dimensions)
/// in sixteen registers, each lane its own chain of fused multiply-adds.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{Rows, Values, BLOCK, QUERIES};
    use std::arch::x86_64::*;

    /// Eight f16 at `p`, widened.
    #[inline(always)]
    unsafe fn eight(p: *const half::f16) -> __m256 {
        _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i))
    }

    /// [`super::scores`] in AVX2 lanes.
    ///
    /// # Safety
    /// The processor has AVX2, FMA and F16C; `rows` holds `hd` rows of 32 keys, `s` four
    /// rows of `span` from here.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn scores(
        rows: &Rows,
        qs: &[f32],
        hd: usize,
        scale: f32,
        s: &mut [f32],
        span: usize,
    ) {
        const REGS: usize = BLOCK / 8;
        debug_assert!(rows.at.len() >= (hd - 1) * rows.stride + BLOCK);
        debug_assert!(s.len() >= (QUERIES - 1) * span + BLOCK && qs.len() >= QUERIES * hd);
        let mut acc = [[_mm256_setzero_ps(); REGS]; QUERIES];
        let (kp, qp) = (rows.at.as_ptr(), qs.as_ptr());
        for d in 0..hd {
            let mut k = [_mm256_setzero_ps(); REGS];
            for (m, k) in k.iter_mut().enumerate() {
                *k = eight(kp.add(d * rows.stride + 8 * m));
            }
            for (i, acc) in acc.iter_mut().enumerate() {
                let qd = _mm256_broadcast_ss(&*qp.add(i * hd + d));
                for (a, &k) in acc.iter_mut().zip(&k) {
                    *a = _mm256_fmadd_ps(qd, k, *a);
                }
            }
        }
        let sc = _mm256_set1_ps(scale);
        for (i, acc) in acc.iter().enumerate() {
            for (m, &a) in acc.iter().enumerate() {
                _mm256_storeu_ps(s.as_mut_ptr().add(i * span + 8 * m), _mm256_mul_ps(a, sc));
            }
        }
    }

    /// The outputs of every block of dimensions: 32 at a time, then 8 at a time.
    ///
    /// # Safety
    /// The processor has AVX2, FMA and F16C; `hd` is a multiple of 8; `values` holds the
    /// keys' rows, `s` four rows of `span`, `o` four of `hd`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn outputs_all(
        values: &Values,
        s: &[f32],
        span: usize,
        keys: std::ops::Range<usize>,
        hd: usize,
        o: &mut [f32],
    ) {
        debug_assert!(keys.end <= span && s.len() >= QUERIES * span && o.len() >= QUERIES * hd);
        let mut db = 0;
        while db + BLOCK <= hd {
            outputs::<{ BLOCK / 8 }>(values, s, span, keys.clone(), hd, db, o);
            db += BLOCK;
        }
        while db < hd {
            outputs::<1>(values, s, span, keys.clone(), hd, db, o);
            db += 8;
        }
    }

    /// Dimensions `db..db + 8·REGS` of the four outputs.
    #[inline(always)]
    unsafe fn outputs<const REGS: usize>(
        values: &Values,
        s: &[f32],
        span: usize,
        keys: std::ops::Range<usize>,
        hd: usize,
        db: usize,
        o: &mut [f32],
    ) {
        let mut acc = [[_mm256_setzero_ps(); REGS]; QUERIES];
        let (vp, sp) = (values.v.as_ptr(), s.as_ptr());
        let mut slot = values.slot;
        for j in keys {
            let mut w = [_mm256_setzero_ps(); REGS];
            for (m, w) in w.iter_mut().enumerate() {
                *w = eight(vp.add(slot * values.width + db + 8 * m));
            }
            for (i, acc) in acc.iter_mut().enumerate() {
                let p = _mm256_broadcast_ss(&*sp.add(i * span + j));
                for (a, &w) in acc.iter_mut().zip(&w) {
                    *a = _mm256_fmadd_ps(p, w, *a);
                }
            }
            slot = values.next(slot);
        }
        for (i, acc) in acc.iter().enumerate() {
            for (m, &a) in acc.iter().enumerate() {
                _mm256_storeu_ps(o.as_mut_ptr().add(i * hd + db + 8 * m), a);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::backend::{AttnParams, KvSpec};
    use crate::cpu::attention::KvStore;
    use half::f16;

    /// Deterministic values in ±2, rounded to f16 so that both caches hold the same keys.
    fn values(seed: u64, n: usize) -> Vec<f32> {
        let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let v = (x >> 40) as f32 / (1u64 << 24) as f32 * 4.0 - 2.0;
                f16::from_f32(v).to_f32()
            })
            .collect()
    }

    /// The tiles against the reference path (a query at a time over an f32 cache of the same
    /// f16 values), step by step over a prompt and then single tokens; and each token's
    /// output the same bits whether its prompt came in one step or a token at a time.
    #[test]
    fn tiles_match_the_reference_and_a_token_alone() {
        // (heads, kv heads, head_dim, window, sinks)
        let cases = [
            (4, 4, 64, None, false),
            (8, 2, 128, None, false),
            (6, 2, 80, Some(9), true),
            (2, 1, 32, Some(40), false),
        ];
        for (ci, &(heads, kv_heads, hd, window, sinks)) in cases.iter().enumerate() {
            let spec = KvSpec {
                n_kv_heads: kv_heads,
                head_dim: hd,
                ctx: 64,
                window,
                max_batch: 37,
            };
            let sink_logits: Vec<f32> = values(99, heads).iter().map(|v| v * 2.0).collect();
            let sinks = sinks.then_some(&sink_logits[..]);
            let mut fast = KvStore::new(&spec, true).unwrap();
            let mut reference = KvStore::new(&spec, false).unwrap();
            let mut alone = KvStore::new(&spec, true).unwrap();
            let (qw, kw) = (heads * hd, kv_heads * hd);
            let mut pos = 0;
            for (step, n) in [37, 1, 1, 5, 1, 3, 1].into_iter().enumerate() {
                let seed = (ci * 10 + step) as u64;
                let (q, k, v) = (
                    values(seed, n * qw),
                    values(seed + 1000, n * kw),
                    values(seed + 2000, n * kw),
                );
                let p = AttnParams {
                    n,
                    pos,
                    n_heads: heads,
                    n_kv_heads: kv_heads,
                    head_dim: hd,
                    window,
                    sinks: None,
                    scale: 1.0 / (hd as f32).sqrt(),
                };
                let (mut got, mut want) = (vec![0f32; n * qw], vec![0f32; n * qw]);
                fast.attend(&q, &k, &v, sinks, &p, &mut got);
                reference.attend(&q, &k, &v, sinks, &p, &mut want);
                let case = format!("case {ci}, step {step} ({n} tokens at {pos})");
                for (a, b) in got.iter().zip(&want) {
                    assert!(
                        (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
                        "{case}: {a} vs {b}"
                    );
                }
                for t in 0..n {
                    let one = AttnParams {
                        n: 1,
                        pos: pos + t,
                        ..p
                    };
                    let mut o = vec![0f32; qw];
                    let row = |x: &[f32], w: usize| x[t * w..(t + 1) * w].to_vec();
                    alone.attend(
                        &row(&q, qw),
                        &row(&k, kw),
                        &row(&v, kw),
                        sinks,
                        &one,
                        &mut o,
                    );
                    let same = o
                        .iter()
                        .zip(&got[t * qw..(t + 1) * qw])
                        .all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(same, "{case}: token {t} alone differs");
                }
                pos += n;
            }
        }
    }
}
