//! The `Backend` trait: the small set of coarse ops the transformer is written over, and the
//! handle and parameter types they take.
//!
//! # Contract
//!
//! - The backend owns every buffer. The transformer holds only handles: [`WeightId`] for
//!   uploaded weights, [`BufId`] for activation buffers, [`KvId`] for per-layer KV caches.
//! - Ops ENQUEUE work and return at once; they never read results back. A GPU backend may
//!   record a whole forward step into one command encoder. Only the explicit reads
//!   ([`Backend::argmax`], [`Backend::top_k`], [`Backend::read_rows`],
//!   [`Backend::read_choice`]) synchronize, and they observe every op enqueued before them.
//! - Activation buffers are row-major f32 matrices `[rows, cols]` allocated with a row
//!   capacity; every op takes `n`, the number of leading rows (tokens) it works on.
//! - Unless an op says it works in place, its output buffer is distinct from its inputs.
//! - Weights are uploaded AS STORED ([`Backend::upload`]): quantized blocks stay quantized and
//!   are decoded as they are read. Layout quirks of a checkpoint are expressed as view
//!   parameters ([`MatView`]: which matrix of a stacked tensor, which output rows with which
//!   stride, output-major or input-major storage) rather than as converted copies. Small
//!   tensors the architecture code had to fix on the CPU come in with [`Backend::upload_f32`].

use crate::error::{EngineError, Result};
use minerva_formats::{Activation, RopeStyle, TensorView};

/// An uploaded weight tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WeightId(pub u32);

/// An activation buffer: f32 `[rows, cols]`, row-major.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BufId(pub u32);

/// The key/value cache of one layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KvId(pub u32);

/// A matrix inside an uploaded weight, seen as `[out_dim, in_dim]` (a Linear weight).
///
/// The weight is a stack of matrices (its leading dimensions flattened; a 2-D weight is a
/// stack of one). `matrix` picks one. Output `j` of the view is stored output
/// `offset + j * stride` of that matrix, which is a stored row when `input_major` is false
/// (the usual `[out, in]` layout) and a stored column when it is true (`[in, out]` layout, as
/// in Hugging Face gpt-oss expert tensors).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatView {
    pub weight: WeightId,
    pub matrix: usize,
    pub input_major: bool,
    pub offset: usize,
    pub stride: usize,
    pub out_dim: usize,
    pub in_dim: usize,
}

impl MatView {
    /// A whole 2-D `[out, in]` weight.
    pub fn plain(weight: WeightId, out_dim: usize, in_dim: usize) -> MatView {
        MatView {
            weight,
            matrix: 0,
            input_major: false,
            offset: 0,
            stride: 1,
            out_dim,
            in_dim,
        }
    }
}

/// A vector inside an uploaded weight: row `row` of a 2-D weight, or the whole of a 1-D one
/// (`row` 0). Biases of stacked experts are rows of an `[n_expert, width]` tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VecRef {
    pub weight: WeightId,
    pub row: usize,
    pub len: usize,
}

/// A linear layer: `y = x · Wᵀ (+ b)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Linear {
    pub w: MatView,
    pub bias: Option<VecRef>,
}

impl Linear {
    pub fn out_dim(&self) -> usize {
        self.w.out_dim
    }
    pub fn in_dim(&self) -> usize {
        self.w.in_dim
    }
}

/// One gated FFN (a dense FFN, one expert, or a shared expert):
/// `down(act(gate(x), up(x)))`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GatedFfn {
    pub gate: Linear,
    pub up: Linear,
    pub down: Linear,
}

/// How a mixture-of-experts block routes tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Routing {
    pub top_k: usize,
    /// Softmax over the chosen top-k router logits only (gpt-oss, mixtral) rather than over
    /// all experts.
    pub softmax_after_topk: bool,
    /// With a softmax over all experts: renormalize the chosen weights to sum to one.
    pub norm_topk_prob: bool,
}

/// A whole mixture-of-experts block: route, pick the top-k experts per token, run them,
/// combine with the routing weights (plus an optional sigmoid-gated shared expert).
#[derive(Debug, Clone, PartialEq)]
pub struct MoeBlock {
    pub router: Linear,
    pub experts: Vec<GatedFfn>,
    pub routing: Routing,
    pub activation: Activation,
    /// Qwen MoE: an expert every token uses, scaled by σ(shared_gate(x)).
    pub shared: Option<(GatedFfn, Linear)>,
}

/// Rotary embedding for one op call. `freqs` holds the `dim / 2` inverse frequencies
/// (scaling already applied); cos and sin are multiplied by `attention_factor` (YaRN).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RopeParams {
    pub freqs: WeightId,
    pub style: RopeStyle,
    /// Rotated dimensions at the start of each head (head_dim unless partial rotary).
    pub dim: usize,
    pub head_dim: usize,
    pub attention_factor: f32,
}

/// Shape of one layer's KV cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvSpec {
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Largest position + 1 the cache must serve.
    pub ctx: usize,
    /// A sliding-window layer may keep fewer than `ctx` positions, but at least the last
    /// `min(ctx, window + max_batch − 1)`: a step writes its up to `max_batch` keys before its
    /// first query reads the `window` keys before it. The transformer relies on no more when it
    /// rewinds a conversation.
    pub window: Option<usize>,
    pub max_batch: usize,
}

/// Parameters of one attention call over `n` new tokens at positions `pos .. pos + n`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttnParams {
    pub n: usize,
    pub pos: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Query at position p sees keys at positions in (p − window, p]; None: all of [0, p].
    pub window: Option<usize>,
    /// One learned logit per head that joins the softmax and is then dropped (gpt-oss).
    pub sinks: Option<VecRef>,
    pub scale: f32,
}

/// A greedy choice of the next token ([`Backend::choose_greedy`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    /// The id, already read.
    Known(u32),
    /// Left on the device: the next [`Backend::embed_choice`] reads it there, and
    /// [`Backend::read_choice`] returns it (the number tells choices apart).
    OnDevice(u64),
}

/// A token drawn on the device ([`Backend::choose_sampled`]): the settings of
/// [`crate::SamplerConfig`] for one step, the tokens the repetition penalty applies to, and the
/// uniform draw.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceSample<'a> {
    pub temperature: f32,
    pub top_k: usize,
    pub top_p: f32,
    pub min_p: f32,
    pub penalty: f32,
    /// Distinct token ids to penalize.
    pub penalized: &'a [u32],
    /// Also penalize the token the last choice left on the device (its id not read yet), once.
    pub with_chosen: bool,
    /// Uniform in [0, 1).
    pub u: f32,
}

/// The most candidates a device draw considers: with no top-k set, the draw is among the 256
/// most likely tokens (the rest still count in the softmax).
pub const DEVICE_SAMPLE_CANDIDATES: usize = 256;

/// The most penalized tokens a device draw takes.
pub const DEVICE_SAMPLE_PENALIZED: usize = 256;

/// The ops the transformer needs. See the module docs for the contract.
pub trait Backend: Send {
    /// A short name for messages and stats ("cpu", "gpu: <adapter>").
    fn name(&self) -> String;

    /// Whether kernels are built (compiled) the first time an op runs: the model then runs a
    /// throwaway step at load, so that no request waits for them.
    fn builds_kernels_on_first_use(&self) -> bool {
        false
    }

    /// The thread pool whose threads run the backend's ops, where it has one: the model runs
    /// each step on it, so that the op's work is shared with threads that are still awake
    /// from the last op instead of being handed over from the caller's thread each time.
    fn thread_pool(&self) -> Option<std::sync::Arc<rayon::ThreadPool>> {
        None
    }

    /// The checkpoint's mapped files, told before the uploads: a backend that reads weights
    /// in place keeps them and holds views into them instead of copies.
    fn share_mappings(&mut self, _maps: &[minerva_formats::Mapping]) {}

    /// Which model loads (a signature of its spec and dtypes), told before the uploads: a
    /// backend that builds kernels on first use may start on those the model's throwaway step
    /// asked for when it last loaded, and records what this one asks for.
    fn model_loads(&mut self, _signature: u64) {}

    /// The model's throwaway step is done: a backend recording its kernels keeps the list.
    fn first_steps_done(&mut self) {}

    /// Uploads a tensor as stored (every dtype of `minerva_formats::DType` that the backend
    /// can decode; an error names the tensor otherwise).
    fn upload(&mut self, view: &TensorView) -> Result<WeightId>;

    /// Uploads a small f32 tensor made on the CPU (fixed-up biases, RoPE frequencies).
    fn upload_f32(&mut self, name: &str, shape: &[usize], data: &[f32]) -> Result<WeightId>;

    /// Allocates an f32 activation buffer of `rows × cols` (contents unspecified).
    fn alloc(&mut self, rows: usize, cols: usize) -> Result<BufId>;

    /// Allocates a buffer as `alloc` does whose contents matter only to the ops after its
    /// writer within one step: nothing reads it back or reads it in a later step, so a backend
    /// may leave unwritten what it folds into the readers (the GPU's folded norms).
    fn alloc_step_local(&mut self, rows: usize, cols: usize) -> Result<BufId> {
        self.alloc(rows, cols)
    }

    /// The most rows of `cols` f32 values one activation buffer may hold: GPU bindings are
    /// bounded (128 MiB on software Vulkan, 2–4 GiB on real GPUs), the CPU's are not.
    fn max_rows(&self, _cols: usize) -> usize {
        usize::MAX
    }

    /// Allocates one layer's KV cache.
    fn alloc_kv(&mut self, spec: &KvSpec) -> Result<KvId>;

    /// Releases a KV cache (a session ended).
    fn free_kv(&mut self, kv: KvId);

    /// `out[t] = table[ids[t]]` for each token: rows of an embedding `[vocab, hidden]`.
    fn embed(&mut self, table: WeightId, ids: &[u32], out: BufId) -> Result<()>;

    /// RMSNorm of each consecutive group of `group` values in the first `n` rows of `x`:
    /// `out = x / sqrt(mean(x²) + eps) · weight` (`weight` has `group` values). A group is a
    /// whole row for layer norms and one head for q/k norms.
    fn rms_norm(
        &mut self,
        x: BufId,
        weight: VecRef,
        out: BufId,
        n: usize,
        group: usize,
        eps: f32,
    ) -> Result<()>;

    /// `out[:n] = x[:n] · Wᵀ + b`.
    fn matmul(&mut self, x: BufId, lin: &Linear, out: BufId, n: usize) -> Result<()>;

    /// In place: rotates each head of the first `n` rows of `x` (heads of
    /// `rope.head_dim` values) for positions `pos .. pos + n`.
    fn rope(&mut self, x: BufId, n: usize, pos: usize, rope: &RopeParams) -> Result<()>;

    /// Stores the `n` new keys and values in `kv` at positions `pos .. pos + n`, then computes
    /// causal attention of the `n` queries over the cache (GQA: query head h reads KV head
    /// h / (n_heads / n_kv_heads)). `q` and `out` are `[n, n_heads · head_dim]`, `k`, `v`
    /// `[n, n_kv_heads · head_dim]`.
    fn attention(
        &mut self,
        q: BufId,
        k: BufId,
        v: BufId,
        kv: KvId,
        out: BufId,
        p: &AttnParams,
    ) -> Result<()>;

    /// `out = act(gate, up)` elementwise over the first `n` rows.
    fn glu(&mut self, gate: BufId, up: BufId, out: BufId, n: usize, act: Activation) -> Result<()>;

    /// `out[:n] = moe(x[:n])`: route, top-k, experts, combine.
    fn moe(&mut self, x: BufId, block: &MoeBlock, out: BufId, n: usize) -> Result<()>;

    /// In place: `acc[:n] += x[:n]`.
    fn add(&mut self, acc: BufId, x: BufId, n: usize) -> Result<()>;

    /// `dst[dst_row ..][:n] = src[src_row ..][:n]` (buffers of equal width).
    fn copy_rows(
        &mut self,
        src: BufId,
        src_row: usize,
        dst: BufId,
        dst_row: usize,
        n: usize,
    ) -> Result<()>;

    /// Synchronizing read: index of the largest value of row `row` (first one on ties).
    fn argmax(&mut self, x: BufId, row: usize) -> Result<u32>;

    /// Greedy choice from row `row` of `x`. A backend that runs asynchronously may leave it on
    /// the device, so that the step that embeds it can be queued before the host knows it.
    fn choose_greedy(&mut self, x: BufId, row: usize) -> Result<Choice> {
        Ok(Choice::Known(self.argmax(x, row)?))
    }

    /// `out[0] = table[choice]`: the embedding of a chosen token, as [`Backend::embed`].
    fn embed_choice(&mut self, table: WeightId, choice: Choice, out: BufId) -> Result<()> {
        match choice {
            Choice::Known(id) => self.embed(table, &[id], out),
            Choice::OnDevice(_) => Err(EngineError::Invalid(
                "this backend keeps no choices on the device".into(),
            )),
        }
    }

    /// The id of a choice; waits for the work that made it (not for work queued after it).
    fn read_choice(&mut self, choice: Choice) -> Result<u32> {
        match choice {
            Choice::Known(id) => Ok(id),
            Choice::OnDevice(_) => Err(EngineError::Invalid(
                "this backend keeps no choices on the device".into(),
            )),
        }
    }

    /// Whether [`Backend::choose_sampled`] draws on the device at all.
    fn samples_on_device(&self) -> bool {
        false
    }

    /// Draws the next token from row `row` of `x` on the device, leaving the choice there as
    /// [`Backend::choose_greedy`] does. None where the backend cannot (the caller then reads
    /// candidates or logits and samples on the CPU).
    fn choose_sampled(
        &mut self,
        _x: BufId,
        _row: usize,
        _s: &DeviceSample,
    ) -> Result<Option<Choice>> {
        Ok(None)
    }

    /// Synchronizing read: the `k` largest values of row `row`, best first, as (index, value).
    fn top_k(&mut self, x: BufId, row: usize, k: usize) -> Result<Vec<(u32, f32)>>;

    /// Synchronizing read: rows `first .. first + n`, row-major.
    fn read_rows(&mut self, x: BufId, first: usize, n: usize) -> Result<Vec<f32>>;

    /// The device memory this backend holds now, by its own account (None on the CPU, whose
    /// memory is the process's).
    fn device_memory(&self) -> Option<DeviceMemory> {
        None
    }

    /// The kernels the last step ran as, with the bytes each reads and its floor at
    /// `bandwidth` bytes/s (None where the backend runs ops one by one, as the CPU does).
    fn explain_plan(&self, _bandwidth: f64) -> Option<String> {
        None
    }
}

/// Device memory by the engine's own account: what its live buffers take, and what the
/// memory allocator has reserved from the driver for them (blocks are reserved whole).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DeviceMemory {
    pub allocated_bytes: u64,
    pub reserved_bytes: u64,
}
