//! The `Backend` trait on the GPU. Ops check their operands and append a node to the step
//! graph; nothing runs until something must be read back (argmax, top-k, rows) or a buffer the
//! graph reads is about to be rewritten from the CPU (token ids, the step uniform). Then the
//! graph is planned (`fusion.rs`: which ops fuse into which kernel), encoded (`encode.rs`) and
//! sent in pieces of a few dozen dispatches, the first while the rest still encode. Plans and
//! their dispatches are kept per shape class (the graph's key, which leaves positions out), so
//! every decode step replays one plan.

use super::buffers::{Buf, Kv, Src};
use super::context::{GpuContext, GpuOptions, PendingRead, Pieces, StreamedSubmit};
use super::error::{GpuError, GpuResult};
use super::fusion;
use super::graph::{Graph, MoeTable, Node};
use super::ops::{select_scratch_len, KvCache, Ops, SampleParams, Step};
use super::pipelines::Dispatch;
use super::plan::Plan;
use super::weights::GpuWeight;
use crate::backend::{
    AttnParams, Backend, BufId, Choice, DeviceSample, KvId, KvSpec, Linear, MoeBlock, RopeParams,
    VecRef, WeightId, DEVICE_SAMPLE_CANDIDATES, DEVICE_SAMPLE_PENALIZED,
};
use crate::error::{EngineError, Result};
use minerva_formats::{Activation, DType, TensorData, TensorView};
use std::collections::HashMap;
use std::sync::Arc;

impl From<GpuError> for EngineError {
    fn from(e: GpuError) -> Self {
        EngineError::Backend(e.to_string())
    }
}

/// A plan's dispatches, and how many of them each kernel has.
pub(super) struct Encoded {
    pub(super) dispatches: Vec<Arc<Dispatch>>,
    pub(super) per_kernel: Vec<usize>,
}

pub struct GpuBackend {
    pub(super) ctx: Arc<GpuContext>,
    pub(super) ops: Ops,
    pub(super) kv_f16: bool,
    pub(super) weights: Vec<GpuWeight>,
    /// f32 copies of the small float tensors used as vectors (norm weights, biases, sinks).
    pub(super) vectors: HashMap<u32, wgpu::Buffer>,
    pub(super) bufs: Vec<Buf>,
    pub(super) kvs: Vec<Option<Kv>>,
    pub(super) moes: MoeTable,
    /// The step uniform, and what it will hold once the work recorded so far has run (`None`:
    /// not known, the next step writes it).
    pub(super) step: wgpu::Buffer,
    step_now: Option<Step>,
    /// The graph reads (or moves on) the step uniform / reads the token ids: rewriting them
    /// must submit it first.
    step_users: bool,
    ids_users: bool,
    pub(super) ids: wgpu::Buffer,
    ids_len: usize,
    /// A sampled step's settings (`SampleParams`) and the ids its repetition penalty lists.
    pub(super) sample_params: wgpu::Buffer,
    pub(super) pen_ids: wgpu::Buffer,
    sample_users: bool,
    /// The last greedy choice kept on the device, which the next `embed_choice` reads.
    pub(super) chosen: wgpu::Buffer,
    /// Choices on the device whose read backs are in flight, oldest first, with their numbers.
    choices: std::collections::VecDeque<(u64, PendingRead)>,
    next_choice: u64,
    /// Scratch buffers that grow on demand; growing drops the encoded plans that bind them.
    pub(super) scratch: HashMap<&'static str, wgpu::Buffer>,
    /// The ops recorded since the last submit.
    graph: Graph,
    /// Plans by shape class, and their dispatches (dropped when a buffer they bind is).
    pub(super) plans: HashMap<u64, Arc<Plan>>,
    pub(super) encoded: HashMap<u64, Arc<Encoded>>,
    /// The last graph submitted and its key, for `explain_plan`.
    pub(super) last_graph: Option<(Graph, u64)>,
    /// Build pipelines ahead of use: not on a software adapter, where compiling competes for
    /// the cores that run the kernels.
    warm: bool,
    /// Weight decoders whose pipelines are being built ahead of use.
    warmed: Vec<super::shader::Defines>,
    /// While a model loads in a process that keeps devices: the key of its list of kernels.
    kernel_list: Option<u64>,
}

fn bad(what: String) -> EngineError {
    EngineError::Backend(what)
}

impl GpuBackend {
    pub fn new(opts: &GpuOptions) -> GpuResult<GpuBackend> {
        let ctx = Arc::new(GpuContext::new(opts)?);
        // Zeros, `Step::default()`; a storage buffer too, for the kernels that move it on.
        let step = ctx.storage_uniform("step", std::mem::size_of::<Step>() as u64);
        let ids = ctx.storage("token ids", 4 * 64);
        let chosen = ctx.storage("chosen token", 4);
        let sample_params = ctx.uniform("sample params", &SampleParams::default());
        let pen_ids = ctx.storage("penalized ids", 4 * DEVICE_SAMPLE_PENALIZED as u64);
        let warm = ctx.info.device_type != wgpu::DeviceType::Cpu;
        let b = GpuBackend {
            ops: Ops::new(ctx.clone()),
            kv_f16: !opts.kv_f32,
            ctx,
            weights: Vec::new(),
            vectors: HashMap::new(),
            bufs: Vec::new(),
            kvs: Vec::new(),
            moes: MoeTable::default(),
            step,
            step_now: Some(Step::default()),
            step_users: false,
            ids_users: false,
            ids,
            ids_len: 64,
            chosen,
            sample_params,
            pen_ids,
            sample_users: false,
            choices: Default::default(),
            next_choice: 0,
            scratch: HashMap::new(),
            graph: Graph::default(),
            plans: HashMap::new(),
            encoded: HashMap::new(),
            last_graph: None,
            warmed: Vec::new(),
            kernel_list: None,
            warm,
        };
        if b.warm {
            b.ops.warm_up(&[], b.kv_f16);
        }
        Ok(b)
    }

    pub fn context(&self) -> &Arc<GpuContext> {
        &self.ctx
    }

    /// Plans and encodes the recorded graph (reusing the plan of its shape class), leaving the
    /// graph empty. Returns the step's dispatches and how many of them are already submitted: a
    /// new shape class sends its dispatches as they are encoded ([`StreamedSubmit`]), so that the
    /// GPU starts on a prompt of a new length while the host encodes the rest of it.
    fn take_step(&mut self) -> Result<Option<(Arc<Encoded>, usize)>> {
        if self.graph.is_empty() {
            return Ok(None);
        }
        let key = self.graph.key();
        let started = std::time::Instant::now();
        let plan = match self.plans.get(&key) {
            Some(p) => p.clone(),
            None => {
                let p = Arc::new(fusion::plan(&self.graph, self));
                self.plans.insert(key, p.clone());
                p
            }
        };
        let planned = started.elapsed();
        let (enc, sent) = match self.encoded.get(&key) {
            Some(e) => (e.clone(), 0),
            None => {
                let mut stream = StreamedSubmit::default();
                let ctx = self.ctx.clone();
                let per = self.encode(&self.graph, &plan, &mut |kernels| {
                    stream.offer(kernels, |list| Ok(ctx.submit(list)?))
                });
                let per = match per {
                    Ok(per) => per,
                    Err(e) => {
                        // The step cannot run; the next starts from an empty graph and writes
                        // the step uniform, which this one may have been meant to move on.
                        self.graph.nodes.clear();
                        self.step_now = None;
                        return Err(e);
                    }
                };
                let e = Arc::new(Encoded {
                    per_kernel: per.iter().map(Vec::len).collect(),
                    dispatches: per.into_iter().flatten().map(Arc::new).collect(),
                });
                self.encoded.insert(key, e.clone());
                // A new shape class (a prompt of a new length) pays this on the host, and from
                // its first submitted piece on the GPU works alongside.
                if super::profile::timing_asked() {
                    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
                    eprintln!(
                        "step: {} dispatches planned in {:.1} ms, encoded and {} of them submitted in {:.1} ms",
                        e.dispatches.len(),
                        ms(planned),
                        stream.sent,
                        ms(started.elapsed() - planned)
                    );
                }
                (e, stream.sent)
            }
        };
        let len = self.graph.nodes.len();
        let g = std::mem::replace(&mut self.graph, Graph::with_capacity(len));
        self.last_graph = Some((g, key));
        self.step_users = false;
        self.ids_users = false;
        self.sample_users = false;
        Ok(Some((enc, sent)))
    }

    /// Sends the recorded work to the GPU (no wait).
    pub(super) fn flush(&mut self) -> Result<()> {
        if let Some((enc, sent)) = self.take_step()? {
            let list: Vec<&Dispatch> = enc.dispatches[sent..].iter().map(|d| d.as_ref()).collect();
            if !list.is_empty() {
                self.ctx.submit(&list)?;
            }
        }
        Ok(())
    }

    /// Sends the recorded work and reads `reads` back in the same submit.
    fn flush_read(&mut self, reads: &[(Src, u64, u64)]) -> Result<Vec<Vec<u8>>> {
        let read = self.flush_and_read(reads, Pieces::Growing)?;
        Ok(self.ctx.finish_read(read)?)
    }

    /// Sends the recorded work with copies of `reads` behind it, without waiting for them.
    fn flush_and_read(&mut self, reads: &[(Src, u64, u64)], pieces: Pieces) -> Result<PendingRead> {
        let enc = self.take_step()?;
        let list: Vec<&Dispatch> = enc
            .iter()
            .flat_map(|(e, sent)| e.dispatches[*sent..].iter().map(|d| d.as_ref()))
            .collect();
        let mut regions = Vec::new();
        for (src, off, bytes) in reads {
            regions.push((self.src(*src)?, *off, *bytes));
        }
        Ok(self.ctx.submit_and_read(&list, &regions, pieces)?)
    }

    /// Drops the encoded plans: a buffer they bind is being replaced.
    pub(super) fn forget_dispatches(&mut self) {
        self.encoded.clear();
    }

    /// Makes the step uniform say (pos, n), submitting work recorded for another step first.
    /// A decode step after a token chosen on the device finds it so already (`step_moves_on`).
    fn set_step(&mut self, pos: usize, n: usize) -> Result<()> {
        let s = Step::new(pos, n);
        if self.step_now != Some(s) {
            // Queue writes land before the next submit: the graph's readers (and movers) of the
            // old value go first.
            if self.step_users {
                self.flush()?;
            }
            self.ctx
                .write_step_input(&self.step, bytemuck::bytes_of(&s));
            self.step_now = Some(s);
        }
        self.step_users = true;
        Ok(())
    }

    /// A kernel recorded to choose a token on the device also moves the step uniform on to
    /// the next token's (`Step::advanced`).
    fn step_moves_on(&mut self) {
        self.step_now = self.step_now.map(Step::advanced);
        self.step_users = true;
    }

    fn push(&mut self, node: Node) {
        self.graph.nodes.push(node);
    }

    /// Submits the graph (which ends with a choice into the chosen-token buffer) with the
    /// chosen id's read back behind it, without waiting: the choice stays on the device.
    fn choice_on_device(&mut self) -> Result<Choice> {
        let pieces = if self.behind_work() {
            Pieces::One
        } else {
            Pieces::Growing
        };
        let read = self.flush_and_read(&[(Src::Chosen, 0, 4)], pieces)?;
        let n = self.next_choice;
        self.next_choice += 1;
        // Choices nobody read (a turn that ended on the token before) are dropped.
        while self.choices.len() >= 2 {
            self.choices.pop_front();
        }
        self.choices.push_back((n, read));
        Ok(Choice::OnDevice(n))
    }

    /// Whether the GPU is still running a step whose choice is not read yet: a step queued
    /// behind it goes in one command buffer, since the host encodes it meanwhile.
    fn behind_work(&self) -> bool {
        self.choices
            .back()
            .is_some_and(|(_, read)| !self.ctx.is_read_done(read))
    }

    /// Records the `k` best of row `row` of `x` into the selection buffers.
    fn record_top_k(&mut self, x: BufId, row: usize, k: usize) {
        let cols = self.bufs[x.0 as usize].cols;
        self.scratch("selected ids", (k * 4) as u64);
        self.scratch("selected values", (k * 4) as u64);
        self.scratch(
            "select lists",
            select_scratch_len(cols as u32, 1, k as u32) * 4,
        );
        self.scratch("counters", 4);
        self.push(Node::TopK { x, row, k });
    }

    /// Records the argmax of row `row` of `x` into the chosen-token buffer.
    fn record_argmax(&mut self, x: BufId, row: usize) -> Result<()> {
        self.check_rows(x, row + 1, None, "argmax")?;
        let cols = self.buf(x)?.cols;
        self.scratch("select lists", select_scratch_len(cols as u32, 1, 1) * 4);
        self.scratch("counters", 4);
        self.push(Node::Argmax { x, row });
        self.step_moves_on();
        Ok(())
    }
}

impl Backend for GpuBackend {
    fn name(&self) -> String {
        format!("gpu: {}", self.ctx.info.name)
    }

    fn builds_kernels_on_first_use(&self) -> bool {
        true
    }

    fn share_mappings(&mut self, maps: &[minerva_formats::Mapping]) {
        self.ctx.hold_mappings(maps);
    }

    fn model_loads(&mut self, signature: u64) {
        // Processes that load once (the command line, tests) neither read nor write lists; a
        // software adapter builds nothing ahead (`warm`).
        if !super::device_pool::keeping() || !self.warm {
            return;
        }
        let key = super::kernel_list::key(signature, &self.ctx.describe());
        let listed = super::kernel_list::read(key);
        if !listed.is_empty() {
            self.ops.build_ahead(listed);
        }
        self.ops.pipelines().record();
        self.kernel_list = Some(key);
    }

    fn first_steps_done(&mut self) {
        if let Some(key) = self.kernel_list.take() {
            super::kernel_list::write(key, &self.ops.pipelines().recorded());
        }
    }

    fn upload(&mut self, view: &TensorView) -> Result<WeightId> {
        // Stacked matrices (experts) stay whole within a part so that ids can pick them.
        let n = view.shape.len();
        let align = if n >= 3 { view.shape[n - 2] } else { 1 };
        let w = GpuWeight::upload(&self.ctx, view, align)?;
        let dec = w.decoder();
        if self.warm && !self.warmed.contains(&dec) {
            self.ops.warm_up(std::slice::from_ref(&dec), self.kv_f16);
            self.warmed.push(dec);
        }
        self.weights.push(w);
        Ok(WeightId(self.weights.len() as u32 - 1))
    }

    fn upload_f32(&mut self, name: &str, shape: &[usize], data: &[f32]) -> Result<WeightId> {
        let bytes: &[u8] = bytemuck::cast_slice(data);
        let view = TensorView {
            name,
            shape: shape.to_vec(),
            dtype: DType::F32,
            data: TensorData::Plain(bytes),
        };
        self.upload(&view)
    }

    fn max_rows(&self, cols: usize) -> usize {
        let limit = self.ctx.caps.max_binding.min(self.ctx.caps.max_buffer);
        usize::try_from(limit / (cols.max(1) as u64 * 4)).unwrap_or(usize::MAX)
    }

    fn alloc(&mut self, rows: usize, cols: usize) -> Result<BufId> {
        self.alloc_buf(rows, cols, false)
    }

    fn alloc_step_local(&mut self, rows: usize, cols: usize) -> Result<BufId> {
        self.alloc_buf(rows, cols, true)
    }

    fn alloc_kv(&mut self, spec: &KvSpec) -> Result<KvId> {
        let cache_len = match spec.window {
            Some(w) => spec.ctx.min(w + spec.max_batch.max(1) - 1),
            None => spec.ctx,
        }
        .max(1);
        let cache = KvCache::new(
            &self.ctx,
            cache_len as u32,
            spec.n_kv_heads as u32,
            spec.head_dim as u32,
            self.kv_f16,
        );
        self.ctx.check()?;
        self.kvs.push(Some(Kv { cache, cache_len }));
        Ok(KvId(self.kvs.len() as u32 - 1))
    }

    fn free_kv(&mut self, kv: KvId) {
        let _ = self.flush();
        if let Some(slot) = self.kvs.get_mut(kv.0 as usize) {
            *slot = None;
        }
        // Dispatches binding the cache go with it.
        self.forget_dispatches();
    }

    fn embed(&mut self, table: WeightId, ids: &[u32], out: BufId) -> Result<()> {
        let n = ids.len();
        let (cols, vocab) = (self.weight(table)?.cols, self.weight(table)?.rows);
        self.check_rows(out, n, Some(cols), "embed")?;
        if let Some(&bad_id) = ids.iter().find(|&&i| i as usize >= vocab) {
            return Err(bad(format!(
                "token id {bad_id} is outside the embedding table"
            )));
        }
        // The ids buffer is rewritten: the graph that reads it must go first.
        if self.ids_users {
            self.flush()?;
        }
        self.ids_users = true;
        if n > self.ids_len {
            self.ids_len = n.next_power_of_two();
            self.ids = self.ctx.storage("token ids", 4 * self.ids_len as u64);
            self.forget_dispatches();
        }
        self.ctx
            .write_step_input(&self.ids, bytemuck::cast_slice(ids));
        self.push(Node::Embed { table, out, n });
        Ok(())
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
        let cols = self.buf(x)?.cols;
        if group == 0 || cols % group != 0 || weight.len != group {
            return Err(bad(format!(
                "rms_norm: groups of {group} in rows of {cols}"
            )));
        }
        self.check_rows(x, n, None, "rms_norm")?;
        self.check_rows(out, n, Some(cols), "rms_norm")?;
        self.vector(&weight)?;
        self.push(Node::Norm {
            x,
            w: weight,
            out,
            n,
            group,
            eps,
        });
        Ok(())
    }

    fn matmul(&mut self, x: BufId, lin: &Linear, out: BufId, n: usize) -> Result<()> {
        self.check_rows(x, n, Some(lin.in_dim()), "matmul")?;
        self.check_rows(out, n, Some(lin.out_dim()), "matmul")?;
        self.vector_opt(&lin.bias)?;
        self.push(Node::Product {
            x,
            lin: *lin,
            out,
            n,
        });
        Ok(())
    }

    fn rope(&mut self, x: BufId, n: usize, pos: usize, rope: &RopeParams) -> Result<()> {
        let cols = self.buf(x)?.cols;
        if rope.head_dim == 0
            || cols % rope.head_dim != 0
            || rope.dim > rope.head_dim
            || !rope.dim.is_multiple_of(2)
        {
            return Err(bad(format!(
                "rope: heads of {} in rows of {cols}, {} rotated",
                rope.head_dim, rope.dim
            )));
        }
        self.check_rows(x, n, None, "rope")?;
        self.set_step(pos, n)?;
        self.vector(&super::encode::freqs(rope))?;
        self.push(Node::Rope {
            x,
            n,
            pos,
            rope: *rope,
        });
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
        let qd = p.n_heads * p.head_dim;
        let kd = p.n_kv_heads * p.head_dim;
        if p.n_kv_heads == 0
            || !p.n_heads.is_multiple_of(p.n_kv_heads)
            || !p.head_dim.is_multiple_of(2)
            || p.head_dim > 512
        {
            return Err(bad(format!(
                "attention: {} heads over {} KV heads of {}",
                p.n_heads, p.n_kv_heads, p.head_dim
            )));
        }
        if [q, k, v].contains(&out) {
            return Err(bad("attention: the output buffer is also an input".into()));
        }
        self.check_rows(q, p.n, Some(qd), "attention q")?;
        self.check_rows(k, p.n, Some(kd), "attention k")?;
        self.check_rows(v, p.n, Some(kd), "attention v")?;
        self.check_rows(out, p.n, Some(qd), "attention out")?;
        let shape = self.attn_shape(kv, p)?;
        self.vector_opt(&p.sinks)?;
        self.set_step(p.pos, p.n)?;
        self.scratch("attention", shape.scratch_len(p.n as u32) * 4);
        self.scratch("counters", shape.kv_heads as u64 * 4);
        self.push(Node::Attention {
            q,
            k,
            v,
            kv,
            out,
            p: *p,
        });
        Ok(())
    }

    fn glu(&mut self, gate: BufId, up: BufId, out: BufId, n: usize, act: Activation) -> Result<()> {
        let cols = self.buf(gate)?.cols;
        self.check_rows(gate, n, None, "glu")?;
        self.check_rows(up, n, Some(cols), "glu")?;
        self.check_rows(out, n, Some(cols), "glu")?;
        self.push(Node::Glu {
            gate,
            up,
            out,
            n,
            act,
        });
        Ok(())
    }

    fn moe(&mut self, x: BufId, block: &MoeBlock, out: BufId, n: usize) -> Result<()> {
        let hidden = self.buf(x)?.cols;
        self.check_rows(x, n, None, "moe")?;
        self.check_rows(out, n, Some(hidden), "moe")?;
        let experts = block.experts.len();
        if experts == 0 || block.routing.top_k.min(experts) == 0 {
            return Err(bad("moe: no experts".into()));
        }
        self.prepare_moe(x, block, n)?;
        let block = self.moes.intern(block);
        self.push(Node::Moe { x, block, out, n });
        Ok(())
    }

    fn add(&mut self, acc: BufId, x: BufId, n: usize) -> Result<()> {
        let cols = self.buf(acc)?.cols;
        if acc == x {
            return Err(bad("add of a buffer to itself".into()));
        }
        self.check_rows(acc, n, None, "add")?;
        self.check_rows(x, n, Some(cols), "add")?;
        self.push(Node::Add { acc, x, n });
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
        if src == dst {
            return Err(bad("copy_rows within one buffer".into()));
        }
        self.check_rows(src, src_row + n, None, "copy_rows")?;
        self.check_rows(dst, dst_row + n, Some(cols), "copy_rows")?;
        self.push(Node::Copy {
            src,
            src_row,
            dst,
            dst_row,
            n,
        });
        Ok(())
    }

    fn argmax(&mut self, x: BufId, row: usize) -> Result<u32> {
        self.record_argmax(x, row)?;
        let b = self.flush_read(&[(Src::Chosen, 0, 4)])?;
        Ok(u32::from_le_bytes([b[0][0], b[0][1], b[0][2], b[0][3]]))
    }

    fn choose_greedy(&mut self, x: BufId, row: usize) -> Result<Choice> {
        self.record_argmax(x, row)?;
        self.choice_on_device()
    }

    fn samples_on_device(&self) -> bool {
        true
    }

    fn choose_sampled(&mut self, x: BufId, row: usize, s: &DeviceSample) -> Result<Option<Choice>> {
        self.check_rows(x, row + 1, None, "sample")?;
        let cols = self.buf(x)?.cols;
        let fits = s.temperature > 0.0
            && s.top_k <= DEVICE_SAMPLE_CANDIDATES
            && s.penalized.len() <= DEVICE_SAMPLE_PENALIZED;
        if !fits || cols == 0 {
            return Ok(None);
        }
        let k = match s.top_k {
            0 => DEVICE_SAMPLE_CANDIDATES,
            k => k,
        }
        .min(cols);
        // The settings are rewritten: a graph that reads them must go first.
        if self.sample_users {
            self.flush()?;
        }
        let params = SampleParams {
            n: cols as u32,
            offset: (row * cols) as u32,
            k: k as u32,
            top_k: s.top_k.min(cols) as u32,
            temperature: s.temperature,
            top_p: s.top_p,
            min_p: s.min_p,
            u: s.u,
            penalty: s.penalty,
            penalized: s.penalized.len() as u32,
            with_chosen: s.with_chosen as u32,
            _pad: 0,
        };
        self.ctx
            .write_step_input(&self.sample_params, bytemuck::bytes_of(&params));
        if !s.penalized.is_empty() {
            self.ctx
                .write_step_input(&self.pen_ids, bytemuck::cast_slice(s.penalized));
        }
        self.sample_users = true;
        if s.penalty != 1.0 {
            self.push(Node::Penalize { x, row });
        }
        self.record_top_k(x, row, k);
        self.push(Node::Sample { x, row, k });
        self.step_moves_on();
        self.choice_on_device().map(Some)
    }

    fn embed_choice(&mut self, table: WeightId, choice: Choice, out: BufId) -> Result<()> {
        let n = match choice {
            Choice::Known(id) => return self.embed(table, &[id], out),
            Choice::OnDevice(n) => n,
        };
        // Only the latest choice is still in the buffer.
        if n + 1 != self.next_choice {
            return Err(bad(format!("choice {n} is no longer on the device")));
        }
        let cols = self.weight(table)?.cols;
        self.check_rows(out, 1, Some(cols), "embed")?;
        self.push(Node::EmbedChoice { table, out });
        Ok(())
    }

    fn read_choice(&mut self, choice: Choice) -> Result<u32> {
        let n = match choice {
            Choice::Known(id) => return Ok(id),
            Choice::OnDevice(n) => n,
        };
        while let Some((m, read)) = self.choices.pop_front() {
            if m == n {
                let b = self.ctx.finish_read(read)?;
                return Ok(u32::from_le_bytes([b[0][0], b[0][1], b[0][2], b[0][3]]));
            }
        }
        Err(bad(format!("choice {n} was already read or dropped")))
    }

    fn top_k(&mut self, x: BufId, row: usize, k: usize) -> Result<Vec<(u32, f32)>> {
        self.check_rows(x, row + 1, None, "top_k")?;
        let cols = self.buf(x)?.cols;
        let k = k.min(cols);
        if k == 0 {
            return Ok(Vec::new());
        }
        self.record_top_k(x, row, k);
        let b = self.flush_read(&[
            (Src::Scratch("selected ids"), 0, (k * 4) as u64),
            (Src::Scratch("selected values"), 0, (k * 4) as u64),
        ])?;
        let ids: Vec<u32> = bytemuck::pod_collect_to_vec(&b[0]);
        let vals: Vec<f32> = bytemuck::pod_collect_to_vec(&b[1]);
        Ok(ids.into_iter().zip(vals).collect())
    }

    fn device_memory(&self) -> Option<crate::backend::DeviceMemory> {
        self.ctx.memory()
    }

    fn read_rows(&mut self, x: BufId, first: usize, n: usize) -> Result<Vec<f32>> {
        self.check_rows(x, first + n, None, "read_rows")?;
        if self.buf(x)?.step_local {
            return Err(bad(format!("read_rows of step-local buffer {}", x.0)));
        }
        let cols = self.buf(x)?.cols;
        let b = self.flush_read(&[(
            Src::Buf(x),
            (first * cols * 4) as u64,
            (n * cols * 4) as u64,
        )])?;
        Ok(bytemuck::pod_collect_to_vec(&b[0]))
    }

    fn explain_plan(&self, bandwidth: f64) -> Option<String> {
        GpuBackend::explain_plan(self, bandwidth)
    }
}
