//! The decoder-only transformer, written once over the `Backend` ops for every architecture:
//! the architecture files only decide which weights fill which role, and the spec's flags
//! (q/k norm, sinks, windows, biases, MoE, RoPE) decide which ops run.

use crate::arch::{load_weights, FfnWeights, ModelWeights};
use crate::backend::{AttnParams, Backend, BufId, Choice, KvId, KvSpec, RopeParams};
use crate::error::{EngineError, Result};
use crate::rope::rope_freqs;
use minerva_formats::{Checkpoint, ModelSpec};

/// How many tokens one forward step processes at most; longer prompts are prefilled in
/// chunks of this size. Larger steps give the GPU products larger grids, at the cost of
/// activation buffers of this many rows.
pub const DEFAULT_MAX_BATCH: usize = 512;

/// Activation buffers of one forward step, sized for `max_batch` tokens.
struct Scratch {
    x: BufId,
    h: BufId,
    q: BufId,
    k: BufId,
    v: BufId,
    qn: BufId,
    kn: BufId,
    att: BufId,
    gate: BufId,
    up: BufId,
    act: BufId,
    moe_out: BufId,
    /// The last row of `x`, its norm, and its logits.
    last: BufId,
    last_norm: BufId,
    logits: BufId,
    /// Logits of every row of a step, allocated on the first `score`.
    all_logits: Option<AllLogits>,
}

/// Where `score` computes logits: `rows` at a time (fewer than a step's rows when a step's
/// logits would not fit one buffer, as a 256k vocabulary's do not on a 128 MiB binding), with
/// an input buffer for the normed rows of each part when it is not the step's first.
#[derive(Clone, Copy)]
struct AllLogits {
    out: BufId,
    input: Option<BufId>,
    rows: usize,
}

/// A loaded model: weights uploaded to a backend, and the scratch buffers to run it.
pub struct Model {
    pub spec: ModelSpec,
    backend: Box<dyn Backend>,
    weights: ModelWeights,
    rope: RopeParams,
    max_batch: usize,
    s: Scratch,
}

/// The KV cache of one conversation, and the tokens it holds.
///
/// Context policy: a step that would run past `ctx` fails with
/// [`EngineError::ContextFull`]; nothing is dropped or truncated silently.
pub struct KvCache {
    kv: Vec<KvId>,
    ctx: usize,
    tokens: Vec<u32>,
    /// Positions whose step ran on a choice not read yet ([`Model::decode_choice`]): they hold
    /// [`UNREAD`] in `tokens` until [`Model::read_choice`].
    unread: Vec<(Choice, usize)>,
    /// Sliding-window layers keep a ring of this many positions (None: the whole context).
    ring: Option<(usize, usize)>,
}

/// The placeholder id of a cached position whose token is not read yet (no vocabulary has this
/// many tokens, so it never matches a prompt).
pub const UNREAD: u32 = u32::MAX;

impl KvCache {
    /// Tokens processed so far (the next position).
    pub fn pos(&self) -> usize {
        self.tokens.len()
    }
    pub fn ctx(&self) -> usize {
        self.ctx
    }
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }
}

/// What a forward step embeds.
#[derive(Clone, Copy)]
enum Input<'a> {
    Ids(&'a [u32]),
    Chosen(Choice),
}

impl Input<'_> {
    fn len(&self) -> usize {
        match self {
            Input::Ids(ids) => ids.len(),
            Input::Chosen(_) => 1,
        }
    }
}

/// Which logits a forward step produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Logits {
    /// Only the last token's, left in the backend for sampling.
    Last,
    /// Every token's, read back.
    All,
}

impl Model {
    /// Reads the spec, maps and uploads the weights, and allocates the step buffers.
    pub fn load(ckpt: &Checkpoint, backend: Box<dyn Backend>) -> Result<Model> {
        let spec = ckpt.spec()?;
        Self::load_with_spec(ckpt, spec, backend, DEFAULT_MAX_BATCH)
    }

    /// As [`Model::load`], with a spec given by the caller and the most tokens one forward
    /// step processes (longer prompts are prefilled in chunks of it).
    pub fn load_with_spec(
        ckpt: &Checkpoint,
        spec: ModelSpec,
        backend: Box<dyn Backend>,
        max_batch: usize,
    ) -> Result<Model> {
        Self::load_observed(ckpt, spec, backend, max_batch, &mut |_| true)
    }

    /// As [`Model::load_with_spec`], telling `progress` the stored bytes of each tensor as it
    /// is uploaded; `progress` returning false stops the load with [`EngineError::Cancelled`].
    pub fn load_observed(
        ckpt: &Checkpoint,
        spec: ModelSpec,
        mut backend: Box<dyn Backend>,
        max_batch: usize,
        progress: &mut dyn FnMut(u64) -> bool,
    ) -> Result<Model> {
        if max_batch == 0 {
            return Err(EngineError::Invalid("max_batch must be at least 1".into()));
        }
        check_spec(&spec).map_err(|what| EngineError::Weights {
            model: ckpt.main_path().display().to_string(),
            what,
        })?;
        let started = std::time::Instant::now();
        backend.share_mappings(ckpt.mappings());
        backend.model_loads(signature(ckpt, &spec));
        if crate::gpu::profile::timing_asked() {
            let ms = started.elapsed().as_secs_f64() * 1e3;
            eprintln!("load: model signed and its kernel list read in {ms:.1} ms");
        }
        let started = std::time::Instant::now();
        let weights = load_weights(ckpt, &spec, backend.as_mut(), progress)?;
        if crate::gpu::profile::timing_asked() {
            let ms = started.elapsed().as_secs_f64() * 1e3;
            eprintln!("load: weights handed to the backend in {ms:.1} ms");
        }
        Self::assemble(spec, weights, backend, max_batch)
    }

    fn assemble(
        spec: ModelSpec,
        weights: ModelWeights,
        mut b: Box<dyn Backend>,
        max_batch: usize,
    ) -> Result<Model> {
        let assembling = std::time::Instant::now();
        let mut freqs = rope_freqs(&spec.rope);
        if let Some(factors) = &weights.rope_factors {
            for (f, d) in freqs.inv_freq.iter_mut().zip(factors) {
                *f /= d;
            }
        }
        let freq_w = b.upload_f32("rope.inv_freq", &[freqs.inv_freq.len()], &freqs.inv_freq)?;
        let rope = RopeParams {
            freqs: freq_w,
            style: spec.rope.style,
            dim: spec.rope.dim,
            head_dim: spec.head_dim,
            attention_factor: freqs.attention_factor,
        };
        let (mb, hidden, hd) = (max_batch, spec.hidden_size, spec.head_dim);
        let (q_dim, kv_dim) = (spec.n_heads * hd, spec.n_kv_heads * hd);
        let ffn = spec.ffn.max(1);
        let s = Scratch {
            x: b.alloc(mb, hidden)?,
            h: b.alloc(mb, hidden)?,
            q: b.alloc(mb, q_dim)?,
            k: b.alloc(mb, kv_dim)?,
            v: b.alloc(mb, kv_dim)?,
            qn: b.alloc(mb, q_dim)?,
            kn: b.alloc(mb, kv_dim)?,
            att: b.alloc(mb, q_dim)?,
            gate: b.alloc(mb, ffn)?,
            up: b.alloc(mb, ffn)?,
            // Only the down product reads it, in the step that wrote it: the GPU may hand it
            // over as int8 records instead.
            act: b.alloc_step_local(mb, ffn)?,
            moe_out: b.alloc(mb, hidden)?,
            last: b.alloc(1, hidden)?,
            last_norm: b.alloc_step_local(1, hidden)?,
            logits: b.alloc(1, spec.vocab_size)?,
            all_logits: None,
        };
        let mut model = Model {
            spec,
            backend: b,
            weights,
            rope,
            max_batch,
            s,
        };
        if crate::gpu::profile::timing_asked() {
            let ms = assembling.elapsed().as_secs_f64() * 1e3;
            eprintln!("load: step buffers made in {ms:.1} ms");
        }
        if model.backend.builds_kernels_on_first_use() {
            let started = std::time::Instant::now();
            let before = crate::gpu::pipelines::built();
            model.warm_up()?;
            model.backend.first_steps_done();
            if crate::gpu::profile::timing_asked() {
                let ms = started.elapsed().as_secs_f64() * 1e3;
                let after = crate::gpu::pipelines::built();
                eprintln!(
                    "load: kernels built by a throwaway step in {ms:.0} ms ({} pipelines built \
                     in {:.0} ms, {} before it in {:.0} ms)",
                    after.0 - before.0,
                    (after.1 - before.1).as_secs_f64() * 1e3,
                    before.0,
                    before.1.as_secs_f64() * 1e3
                );
            }
        }
        Ok(model)
    }

    /// A throwaway prefill of two tokens and one decode step, so that the kernels both run are
    /// built at load rather than during the first request's tokens.
    fn warm_up(&mut self) -> Result<()> {
        let mut cache = self.new_cache(4)?;
        let run = self
            .prefill(&mut cache, &[0, 0])
            .and_then(|_| self.prefill(&mut cache, &[0]))
            .and_then(|_| self.argmax());
        self.free_cache(cache);
        run.map(|_| ())
    }

    pub fn backend_name(&self) -> String {
        self.backend.name()
    }

    /// The device memory the backend holds now (None on the CPU).
    pub fn device_memory(&self) -> Option<crate::DeviceMemory> {
        self.backend.device_memory()
    }

    /// A fresh KV cache for `ctx` tokens (at most the trained context length is sensible, but
    /// not enforced: RoPE scaling may allow more).
    pub fn new_cache(&mut self, ctx: usize) -> Result<KvCache> {
        if ctx == 0 {
            return Err(EngineError::Invalid(
                "context length must be at least 1".into(),
            ));
        }
        let spec = &self.spec;
        let mut kv = Vec::with_capacity(spec.n_layers);
        let mut ring = None;
        for l in 0..spec.n_layers {
            let window = layer_window(&self.spec, l);
            if let Some(w) = window {
                ring = Some((w, w + self.max_batch - 1));
            }
            let ks = KvSpec {
                n_kv_heads: spec.n_kv_heads,
                head_dim: spec.head_dim,
                ctx,
                window,
                max_batch: self.max_batch,
            };
            kv.push(self.backend.alloc_kv(&ks)?);
        }
        Ok(KvCache {
            kv,
            ctx,
            tokens: Vec::new(),
            unread: Vec::new(),
            ring,
        })
    }

    /// Releases a cache's backend memory.
    pub fn free_cache(&mut self, cache: KvCache) {
        for kv in cache.kv {
            self.backend.free_kv(kv);
        }
    }

    /// Keeps the first `len` tokens of the cache, so that the next step continues from there.
    /// Returns false (and empties the cache) where sliding-window rings no longer hold the
    /// positions needed, so the caller prefills from the start.
    pub fn truncate(&self, cache: &mut KvCache, len: usize) -> bool {
        let len = len.min(cache.tokens.len());
        let back = cache.tokens.len() - len;
        let ok = match cache.ring {
            Some((w, cap)) if cap < cache.ctx => back + w <= cap,
            _ => true,
        };
        cache.tokens.truncate(if ok { len } else { 0 });
        let kept = cache.tokens.len();
        cache.unread.retain(|&(_, at)| at < kept);
        ok
    }

    /// Runs `ids` through the model after the cache's tokens; the last token's logits stay
    /// in the backend for [`Model::argmax`], [`Model::top_k`] and [`Model::last_logits`].
    pub fn prefill(&mut self, cache: &mut KvCache, ids: &[u32]) -> Result<()> {
        self.on_backend(|m| m.forward(cache, ids, Logits::Last).map(|_| ()))
    }

    /// Runs `f` on the backend's thread pool where it has one (see `Backend::thread_pool`).
    fn on_backend<R: Send>(&mut self, f: impl FnOnce(&mut Self) -> R + Send) -> R {
        match self.backend.thread_pool() {
            Some(pool) => crate::cpu::run_awake(&pool, || f(self)),
            None => f(self),
        }
    }

    /// Runs `ids` after the cache's tokens and returns every token's logits, `[n, vocab]`.
    pub fn score(&mut self, cache: &mut KvCache, ids: &[u32]) -> Result<Vec<f32>> {
        self.on_backend(|m| m.forward(cache, ids, Logits::All))
    }

    /// Greedy choice from the last step's logits.
    pub fn argmax(&mut self) -> Result<u32> {
        self.backend.argmax(self.s.logits, 0)
    }

    /// Greedy choice of the next token from the last step's logits, which the backend may leave
    /// on the device (then [`Model::decode_choice`] can queue the next step before the host
    /// knows the token, and [`Model::read_choice`] reads it).
    pub fn choose_greedy(&mut self) -> Result<Choice> {
        self.backend.choose_greedy(self.s.logits, 0)
    }

    /// Queues the one-token step of `choice` after the cache's tokens, leaving its logits for
    /// the next choice. The cache holds [`UNREAD`] for it until [`Model::read_choice`].
    pub fn decode_choice(&mut self, cache: &mut KvCache, choice: Choice) -> Result<()> {
        self.check_room(cache, 1)?;
        self.on_backend(|m| {
            m.step(cache, Input::Chosen(choice))?;
            let id = match choice {
                Choice::Known(id) => id,
                Choice::OnDevice(_) => {
                    cache.unread.push((choice, cache.tokens.len()));
                    UNREAD
                }
            };
            cache.tokens.push(id);
            m.last_row_logits(1)
        })
    }

    /// The id of a choice (waiting for the step that made it), written into the cache where a
    /// step already ran on it.
    pub fn read_choice(&mut self, cache: &mut KvCache, choice: Choice) -> Result<u32> {
        let id = self.backend.read_choice(choice)?;
        if let Some(i) = cache.unread.iter().position(|(c, _)| *c == choice) {
            let (_, at) = cache.unread.remove(i);
            if let Some(t) = cache.tokens.get_mut(at) {
                *t = id;
            }
        }
        Ok(id)
    }

    /// The `k` best candidates of the last step's logits.
    pub fn top_k(&mut self, k: usize) -> Result<Vec<(u32, f32)>> {
        self.backend.top_k(self.s.logits, 0, k)
    }

    /// The last step's logits.
    pub fn last_logits(&mut self) -> Result<Vec<f32>> {
        self.backend.read_rows(self.s.logits, 0, 1)
    }

    fn forward(&mut self, cache: &mut KvCache, ids: &[u32], want: Logits) -> Result<Vec<f32>> {
        if ids.is_empty() {
            return Err(EngineError::Invalid(
                "a forward step needs at least one token".into(),
            ));
        }
        self.check_room(cache, ids.len())?;
        if let Some(&bad) = ids.iter().find(|&&t| t as usize >= self.spec.vocab_size) {
            return Err(EngineError::Invalid(format!(
                "token id {bad} is outside the vocabulary of {}",
                self.spec.vocab_size
            )));
        }
        let mut all = Vec::new();
        for chunk in ids.chunks(self.max_batch) {
            self.step(cache, Input::Ids(chunk))?;
            cache.tokens.extend_from_slice(chunk);
            if want == Logits::All {
                all.extend(self.chunk_logits(chunk.len())?);
            }
        }
        if want == Logits::Last {
            self.last_row_logits((ids.len() - 1) % self.max_batch + 1)?;
        }
        Ok(all)
    }

    /// Whether `n` more tokens fit the cache.
    fn check_room(&self, cache: &KvCache, n: usize) -> Result<()> {
        let needed = cache.pos() + n;
        if needed > cache.ctx {
            return Err(EngineError::ContextFull {
                ctx: cache.ctx,
                needed,
            });
        }
        Ok(())
    }

    /// One forward step over `input` at the cache's position, leaving the final hidden states
    /// in `s.x`.
    fn step(&mut self, cache: &KvCache, input: Input) -> Result<()> {
        let (b, s, spec, w) = (self.backend.as_mut(), &self.s, &self.spec, &self.weights);
        let (n, pos, eps) = (input.len(), cache.pos(), spec.norm_eps);
        let (hidden, hd) = (spec.hidden_size, spec.head_dim);
        match input {
            Input::Ids(ids) => b.embed(w.embed, ids, s.x)?,
            Input::Chosen(c) => b.embed_choice(w.embed, c, s.x)?,
        }
        for (l, lw) in w.layers.iter().enumerate() {
            // Attention: norm, projections, optional per-head q/k norm, RoPE, cached attention.
            b.rms_norm(s.x, lw.attn_norm, s.h, n, hidden, eps)?;
            let a = &lw.attn;
            b.matmul(s.h, &a.q, s.q, n)?;
            b.matmul(s.h, &a.k, s.k, n)?;
            b.matmul(s.h, &a.v, s.v, n)?;
            let (q, k) = match (a.q_norm, a.k_norm) {
                (Some(qn), Some(kn)) => {
                    b.rms_norm(s.q, qn, s.qn, n, hd, eps)?;
                    b.rms_norm(s.k, kn, s.kn, n, hd, eps)?;
                    (s.qn, s.kn)
                }
                _ => (s.q, s.k),
            };
            b.rope(q, n, pos, &self.rope)?;
            b.rope(k, n, pos, &self.rope)?;
            let window = layer_window(spec, l);
            let p = AttnParams {
                n,
                pos,
                n_heads: spec.n_heads,
                n_kv_heads: spec.n_kv_heads,
                head_dim: hd,
                window,
                sinks: a.sinks,
                scale: 1.0 / (hd as f32).sqrt(),
            };
            b.attention(q, k, s.v, cache.kv[l], s.att, &p)?;
            b.matmul(s.att, &a.o, s.h, n)?;
            b.add(s.x, s.h, n)?;

            // Feed-forward: norm, then a dense gated FFN or the MoE block; residual.
            b.rms_norm(s.x, lw.ffn_norm, s.h, n, hidden, eps)?;
            let out = match &lw.ffn {
                FfnWeights::Dense(f) => {
                    b.matmul(s.h, &f.gate, s.gate, n)?;
                    b.matmul(s.h, &f.up, s.up, n)?;
                    b.glu(s.gate, s.up, s.act, n, spec.activation)?;
                    b.matmul(s.act, &f.down, s.h, n)?;
                    s.h
                }
                FfnWeights::Moe(m) => {
                    b.moe(s.h, m, s.moe_out, n)?;
                    s.moe_out
                }
            };
            b.add(s.x, out, n)?;
        }
        Ok(())
    }

    /// Whether the backend draws sampled tokens on the device.
    pub fn samples_on_device(&self) -> bool {
        self.backend.samples_on_device()
    }

    /// Draws the next token from the last step's logits on the device (see
    /// `Backend::choose_sampled`); None where the backend cannot.
    pub fn choose_sampled(&mut self, s: &crate::backend::DeviceSample) -> Result<Option<Choice>> {
        self.backend.choose_sampled(self.s.logits, 0, s)
    }

    /// The kernels the backend ran the last step as (see `Backend::explain_plan`).
    pub fn explain_plan(&self, bandwidth: f64) -> Option<String> {
        self.backend.explain_plan(bandwidth)
    }

    /// Logits of the last row of the step just run.
    fn last_row_logits(&mut self, n: usize) -> Result<()> {
        let (b, s, w) = (self.backend.as_mut(), &self.s, &self.weights);
        // A one-row step's last row is x itself.
        let last = if n == 1 {
            s.x
        } else {
            b.copy_rows(s.x, n - 1, s.last, 0, 1)?;
            s.last
        };
        b.rms_norm(
            last,
            w.output_norm,
            s.last_norm,
            1,
            self.spec.hidden_size,
            self.spec.norm_eps,
        )?;
        b.matmul(s.last_norm, &w.output, s.logits, 1)
    }

    /// Logits of every row of the step just run, read back.
    fn chunk_logits(&mut self, n: usize) -> Result<Vec<f32>> {
        let all = self.all_logits_buffers()?;
        let (b, s, w) = (self.backend.as_mut(), &self.s, &self.weights);
        let (hidden, vocab) = (self.spec.hidden_size, self.spec.vocab_size);
        b.rms_norm(s.x, w.output_norm, s.h, n, hidden, self.spec.norm_eps)?;
        let mut logits = Vec::with_capacity(n * vocab);
        for first in (0..n).step_by(all.rows) {
            let rows = all.rows.min(n - first);
            let input = match all.input {
                Some(input) if first > 0 => {
                    b.copy_rows(s.h, first, input, 0, rows)?;
                    input
                }
                _ => s.h,
            };
            b.matmul(input, &w.output, all.out, rows)?;
            logits.extend(b.read_rows(all.out, 0, rows)?);
        }
        Ok(logits)
    }

    /// The buffers of [`Model::chunk_logits`], made on first use.
    fn all_logits_buffers(&mut self) -> Result<AllLogits> {
        if let Some(all) = self.s.all_logits {
            return Ok(all);
        }
        let (hidden, vocab) = (self.spec.hidden_size, self.spec.vocab_size);
        let rows = self.max_batch.min(self.backend.max_rows(vocab));
        if rows == 0 {
            return Err(EngineError::Backend(format!(
                "one row of {vocab} logits exceeds the backend's largest buffer"
            )));
        }
        let input = if rows < self.max_batch {
            Some(self.backend.alloc(rows, hidden)?)
        } else {
            None
        };
        let all = AllLogits {
            out: self.backend.alloc(rows, vocab)?,
            input,
            rows,
        };
        self.s.all_logits = Some(all);
        Ok(all)
    }
}

/// The attention window of layer `l`, if it is a sliding-window layer.
fn layer_window(spec: &ModelSpec, l: usize) -> Option<usize> {
    match (spec.sliding_layers.get(l), spec.sliding_window) {
        (Some(true), Some(w)) => Some(w),
        _ => None,
    }
}

/// The relations between sizes the ops rely on (the weight shapes, checked against the file
/// when they are mapped, bound the sizes themselves).
fn check_spec(s: &ModelSpec) -> std::result::Result<(), String> {
    if s.n_heads == 0 || s.n_kv_heads == 0 || !s.n_heads.is_multiple_of(s.n_kv_heads) {
        return Err(format!(
            "{} attention heads cannot share {} KV heads",
            s.n_heads, s.n_kv_heads
        ));
    }
    if s.head_dim == 0
        || s.rope.dim == 0
        || !s.rope.dim.is_multiple_of(2)
        || s.rope.dim > s.head_dim
    {
        return Err(format!(
            "RoPE over {} of {} head dimensions",
            s.rope.dim, s.head_dim
        ));
    }
    if s.sliding_window == Some(0) {
        return Err("sliding window of 0 tokens".into());
    }
    if let Some(m) = &s.moe {
        if m.experts_per_token == 0 || m.experts_per_token > m.n_experts {
            return Err(format!(
                "{} experts per token of {}",
                m.experts_per_token, m.n_experts
            ));
        }
    }
    Ok(())
}

/// What a model's steps depend on: its spec and every tensor's name, dtype and shape.
fn signature(ckpt: &Checkpoint, spec: &ModelSpec) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    format!("{spec:?}").hash(&mut h);
    for t in ckpt.tensors() {
        (t.name, format!("{:?}", t.dtype), t.shape).hash(&mut h);
    }
    h.finish()
}
