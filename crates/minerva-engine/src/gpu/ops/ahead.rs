//! Kernels built ahead of use on background threads: those a model's steps will use, from its
//! weights' dtypes and the fixed kernels (`warm_up`), and those a list names (`build_ahead`).

use super::moe_coop::add_expert_tiles;
use super::{coop_block_defines, coop_weight_defines, select, Eltwise, MatmulTile, Ops};
use crate::gpu::shader::{defines, Defines};

impl Ops {
    /// Builds, on a background thread, pipelines a model's steps will use: the prefill tiles and
    /// the embedding of the weight dtypes in `decoders` and, with no decoders, the fixed kernels,
    /// so that compiling overlaps the weight upload. (Decode products depend on what folds into
    /// them: the model's throwaway step at load builds those.)
    pub fn warm_up(&self, decoders: &[Defines], kv_f16: bool) {
        type Job = (&'static str, Defines, Vec<Defines>, &'static str);
        let mut jobs: Vec<Job> = Vec::new();
        let single = |file, d| (file, d, Vec::new(), "main");
        for dec in decoders {
            for tile in MatmulTile::ALL {
                jobs.push(single("matmul.wgsl", tile.defines(dec.clone())));
            }
            if self.ctx.caps.matrix_cores {
                jobs.push(single(
                    "coop_weights.wgsl",
                    coop_weight_defines(dec.clone()),
                ));
            }
            jobs.push(single("embed.wgsl", dec.clone()));
        }
        if decoders.is_empty() && self.ctx.caps.matrix_cores {
            jobs.push(single("coop_inputs.wgsl", Defines::new()));
            for d in coop_block_defines() {
                jobs.push(single("matmul_coop.wgsl", d));
            }
            for entry in ["scores", "values"] {
                jobs.push(("attention_coop.wgsl", Defines::new(), Vec::new(), entry));
            }
            for d in [Defines::new(), defines(&[("SINKS", String::new())])] {
                jobs.push(single("attention_softmax.wgsl", d));
            }
            jobs.push((
                "attention_softmax.wgsl",
                Defines::new(),
                Vec::new(),
                "gather",
            ));
            for d in [Defines::new(), defines(&[("BIAS", String::new())])] {
                jobs.push(single("coop_splits.wgsl", d));
            }
        }
        if decoders.is_empty() {
            for mode in ["PLAIN", "INPLACE", "RESIDUAL"] {
                jobs.push(single("norm.wgsl", defines(&[(mode, String::new())])));
            }
            jobs.push(single("rope.wgsl", Defines::new()));
            jobs.push(single("rope.wgsl", defines(&[("TWO", String::new())])));
            let kv = if kv_f16 {
                Defines::new()
            } else {
                defines(&[("KV_F32", String::new())])
            };
            for entry in [
                "write_kv",
                "rope_write",
                "attend",
                "combine",
                "attend_tiled",
            ] {
                jobs.push(("attention.wgsl", kv.clone(), Vec::new(), entry));
            }
            for op in [Eltwise::Add, Eltwise::Copy, Eltwise::SwiGlu] {
                jobs.push(single("elementwise.wgsl", Self::eltwise_defines(op)));
            }
            jobs.push(single("select.wgsl", Defines::new()));
            jobs.push(single(
                "select.wgsl",
                select::top_k_defines(crate::backend::DEVICE_SAMPLE_CANDIDATES as u32),
            ));
            for entry in ["penalize", "pick"] {
                jobs.push(("sample.wgsl", Defines::new(), Vec::new(), entry));
            }
            for entry in ["route", "group"] {
                jobs.push(("moe.wgsl", Defines::new(), Vec::new(), entry));
            }
        }
        // Mixture-of-experts prompts on matrix cores (moe_coop.rs), after every dense kernel.
        if decoders.is_empty() && self.ctx.caps.matrix_cores {
            for mut d in coop_block_defines() {
                add_expert_tiles(&mut d);
                jobs.push(single("matmul_coop.wgsl", d));
            }
            for d in [Defines::new(), defines(&[("BIAS", String::new())])] {
                jobs.push(("moe_coop.wgsl", d, Vec::new(), "scatter"));
            }
            jobs.push(("moe_coop.wgsl", Defines::new(), Vec::new(), "gather"));
        }
        let jobs = jobs
            .into_iter()
            .map(|(file, d, weights, entry)| (file.to_string(), d, weights, entry.to_string()))
            .collect();
        self.build_ahead(jobs);
    }

    /// Builds `kernels` on a background thread, in order (a kernel that fails is reported when
    /// an op uses it).
    pub fn build_ahead(&self, kernels: Vec<crate::gpu::kernel_list::Kernel>) {
        let (ctx, pipelines) = (self.ctx.clone(), self.pipelines.clone());
        let stop = self.stop_warming.clone();
        let thread = std::thread::spawn(move || {
            for (file, d, weights, entry) in kernels {
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    return;
                }
                pipelines.prepare(&ctx, &file, &d, &weights, &entry);
            }
        });
        let mut warming = self.warming.lock().unwrap_or_else(|p| p.into_inner());
        warming.retain(|t| !t.is_finished());
        warming.push(thread);
    }
}
