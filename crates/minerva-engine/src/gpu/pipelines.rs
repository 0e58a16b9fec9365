//! Compute pipelines built from composed WGSL, once per (file, defines, entry point), plus the
//! `Dispatch` record that ops produce: a pipeline, its bind group and a grid, ready to record
//! into any number of compute passes.

use super::context::GpuContext;
use super::error::{GpuError, GpuResult};
use super::shader::{compose, compose_multi, Defines};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

type Key = (String, Vec<(String, String)>, String);

/// Runtime checks wgpu adds to the kernels: buffer bounds and integer division stay checked.
const RUNTIME_CHECKS: wgpu::ShaderRuntimeChecks = {
    let mut c = wgpu::ShaderRuntimeChecks::checked();
    c.force_loop_bounding = false;
    c
};

#[derive(Default)]
pub struct Pipelines {
    cache: Mutex<HashMap<Key, Arc<wgpu::ComputePipeline>>>,
    /// "file:entry" of each pipeline, by address, for profiles.
    labels: Mutex<HashMap<usize, Arc<str>>>,
    /// While recording (`record`): the kernels ops asked for, built or found, in order.
    asked: Mutex<Option<Vec<super::kernel_list::Kernel>>>,
}

impl Pipelines {
    pub fn get(
        &self,
        ctx: &GpuContext,
        file: &str,
        defs: &Defines,
        entry: &str,
    ) -> GpuResult<Arc<wgpu::ComputePipeline>> {
        self.build(ctx, file, defs, &[], entry, true)
    }

    /// The "file:entry" name of a pipeline this cache built.
    pub fn label(&self, pipeline: &Arc<wgpu::ComputePipeline>) -> Arc<str> {
        let labels = self.labels.lock().unwrap_or_else(|p| p.into_inner());
        labels
            .get(&(Arc::as_ptr(pipeline) as usize))
            .cloned()
            .unwrap_or_else(|| Arc::from("kernel"))
    }

    /// Starts recording the kernels ops ask for (not those built ahead of use).
    pub fn record(&self) {
        *self.asked.lock().unwrap_or_else(|p| p.into_inner()) = Some(Vec::new());
    }

    /// The kernels asked for since `record`, each once; recording stops.
    pub fn recorded(&self) -> Vec<super::kernel_list::Kernel> {
        self.asked
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .unwrap_or_default()
    }

    /// Pipelines built so far.
    pub fn len(&self) -> usize {
        self.cache.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A kernel over several weights, each decoded by its own instance of its decoder
    /// (`shader::compose_multi`).
    pub fn get_multi(
        &self,
        ctx: &GpuContext,
        file: &str,
        defs: &Defines,
        weights: &[Defines],
        entry: &str,
    ) -> GpuResult<Arc<wgpu::ComputePipeline>> {
        self.build(ctx, file, defs, weights, entry, true)
    }

    /// Builds a pipeline ahead of use without consuming device errors (another thread may be
    /// the one to report them); a kernel that fails here fails again, reported, when used.
    pub fn prepare(
        &self,
        ctx: &GpuContext,
        file: &str,
        defs: &Defines,
        weights: &[Defines],
        entry: &str,
    ) {
        let _ = self.build(ctx, file, defs, weights, entry, false);
    }

    fn build(
        &self,
        ctx: &GpuContext,
        file: &str,
        defs: &Defines,
        weights: &[Defines],
        entry: &str,
        checked: bool,
    ) -> GpuResult<Arc<wgpu::ComputePipeline>> {
        let mut flat: Vec<(String, String)> =
            defs.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        for (i, w) in weights.iter().enumerate() {
            flat.extend(
                w.iter()
                    .map(|(k, v)| (format!("weight {i}: {k}"), v.clone())),
            );
        }
        let key: Key = (file.to_string(), flat, entry.to_string());
        if checked {
            let mut asked = self.asked.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(asked) = asked.as_mut() {
                let kernel = (
                    file.to_string(),
                    defs.clone(),
                    weights.to_vec(),
                    entry.to_string(),
                );
                if !asked.contains(&kernel) {
                    asked.push(kernel);
                }
            }
        }
        // The lock is not held while compiling: the warm-up thread must not stall the ops.
        if let Some(p) = self
            .cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
        {
            return Ok(p.clone());
        }
        let started = std::time::Instant::now();
        let src = if weights.is_empty() {
            compose(file, defs)
        } else {
            compose_multi(file, defs, weights)
        }
        .map_err(GpuError::Validation)?;
        // Profiles tell the int8 decode products (DOT_I8) from the f32 ones.
        let int8 = if defs.contains_key("DOT_I8") {
            " int8"
        } else {
            ""
        };
        let label = format!("{file}:{entry}{int8}");
        // Ahead of use, errors go to a scope of this thread, not to the device's shared slot.
        let scope = (!checked).then(|| ctx.device.push_error_scope(wgpu::ErrorFilter::Validation));
        let pipeline = if super::spirv::TRANSLATED.contains(&file) {
            super::spirv::pipeline(ctx, &label, &src, entry)
        } else {
            Ok(Self::from_wgsl(ctx, &label, src, entry))
        };
        match scope {
            Some(scope) => {
                if let Some(e) = pollster::block_on(scope.pop()) {
                    // Not cached: the op that uses it builds it again and reports the error.
                    return Err(GpuError::Validation(e.to_string()));
                }
            }
            None => ctx.check().map_err(|e| match e {
                GpuError::Validation(m) => {
                    GpuError::Validation(format!("kernel {label} {defs:?}: {m}"))
                }
                other => other,
            })?,
        }
        let pipeline = pipeline?;
        BUILT.fetch_add(1, Ordering::Relaxed);
        BUILD_NANOS.fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        let pipeline = Arc::new(pipeline);
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        // Two threads may have built the same pipeline: keep the first.
        let pipeline = cache.entry(key).or_insert(pipeline).clone();
        self.labels
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(Arc::as_ptr(&pipeline) as usize, Arc::from(label));
        Ok(pipeline)
    }

    /// A pipeline from WGSL that wgpu translates, its layout derived from the kernel.
    fn from_wgsl(ctx: &GpuContext, label: &str, src: String, entry: &str) -> wgpu::ComputePipeline {
        let desc = wgpu::ShaderModuleDescriptor {
            label: Some(label),
            source: wgpu::ShaderSource::Wgsl(src.into()),
        };
        // SAFETY: every loop of the kernels is bounded by a count from its parameters (no
        // loop depends on data it computes), so wgpu's added loop counters — which keep the
        // driver from unrolling the inner loops over a block's values — guard against nothing.
        // Buffer bounds checks stay on.
        let module = unsafe {
            ctx.device
                .create_shader_module_trusted(desc, RUNTIME_CHECKS)
        };
        ctx.device
            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(label),
                layout: None,
                module: &module,
                entry_point: Some(entry),
                compilation_options: Default::default(),
                cache: None,
            })
    }
}

static BUILT: AtomicU64 = AtomicU64::new(0);
static BUILD_NANOS: AtomicU64 = AtomicU64::new(0);

/// Pipelines this process has built so far, and the time building them took (summed over the
/// threads that built them), for the load's timings.
pub fn built() -> (u64, std::time::Duration) {
    (
        BUILT.load(Ordering::Relaxed),
        std::time::Duration::from_nanos(BUILD_NANOS.load(Ordering::Relaxed)),
    )
}

/// One recorded kernel launch.
pub struct Dispatch {
    /// The kernel's "file:entry", for profiles.
    pub label: Arc<str>,
    pub pipeline: Arc<wgpu::ComputePipeline>,
    pub bind_group: wgpu::BindGroup,
    pub groups: [u32; 3],
}

impl Dispatch {
    /// Binds `entries` (binding index, buffer) to the pipeline's layout.
    pub fn new(
        ctx: &GpuContext,
        label: Arc<str>,
        pipeline: Arc<wgpu::ComputePipeline>,
        entries: &[(u32, &wgpu::Buffer)],
        groups: [u32; 3],
    ) -> Dispatch {
        let layout = pipeline.get_bind_group_layout(0);
        let entries: Vec<wgpu::BindGroupEntry> = entries
            .iter()
            .map(|(i, b)| wgpu::BindGroupEntry {
                binding: *i,
                resource: b.as_entire_binding(),
            })
            .collect();
        let bind_group = ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &layout,
            entries: &entries,
        });
        Dispatch {
            label,
            pipeline,
            bind_group,
            groups,
        }
    }

    pub fn record(&self, pass: &mut wgpu::ComputePass) {
        if self.groups.contains(&0) {
            return;
        }
        pass.set_pipeline(&self.pipeline);
        pass.set_bind_group(0, &self.bind_group, &[]);
        pass.dispatch_workgroups(self.groups[0], self.groups[1], self.groups[2]);
    }
}
