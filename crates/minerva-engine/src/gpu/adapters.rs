//! Adapters and devices: the adapters wgpu sees, best first, the one a `GpuOptions` chooses
//! with the optional features the kernels use that it offers, and a new device on it.

use super::context::{GpuOptions, COOP_SUBGROUP};
use super::error::{GpuError, GpuResult};
use std::sync::OnceLock;

fn rank(t: wgpu::DeviceType) -> u8 {
    match t {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Other => 3,
        wgpu::DeviceType::Cpu => 4,
    }
}

/// Every adapter of the backends `WGPU_BACKEND` allows (Vulkan, Metal, DX12 and GL by
/// default), best first: discrete before integrated before software and, within a device type,
/// Vulkan/Metal/DX12 before GL, which lacks subgroups and f16.
///
/// Listed once per process: making the instance and listing its adapters took 70–100 ms on
/// an H200's driver, paid once when the backend was chosen and again by every device made
/// (benches/GPU.md, entry 74). An adapter plugged in later is seen after a restart.
fn ranked_adapters() -> Vec<wgpu::Adapter> {
    static LISTED: OnceLock<(wgpu::Instance, Vec<wgpu::Adapter>)> = OnceLock::new();
    let (_, adapters) = LISTED.get_or_init(|| {
        let mut desc = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
        desc.backends = wgpu::Backends::from_env().unwrap_or(wgpu::Backends::PRIMARY);
        let instance = wgpu::Instance::new(desc);
        let mut adapters = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::all()));
        adapters.sort_by_key(|a| {
            let info = a.get_info();
            (rank(info.device_type), info.backend == wgpu::Backend::Gl)
        });
        (instance, adapters)
    });
    adapters.clone()
}

/// What the adapters wgpu sees are, best first (the order `GpuContext::new` chooses in).
pub fn adapter_infos() -> Vec<wgpu::AdapterInfo> {
    ranked_adapters().iter().map(|a| a.get_info()).collect()
}

/// The adapter a `GpuOptions` chooses, and what a device on it is asked for.
pub(super) struct Chosen {
    adapter: wgpu::Adapter,
    pub info: wgpu::AdapterInfo,
    pub features: wgpu::Features,
    pub limits: wgpu::Limits,
    pub matrix_cores: bool,
}

/// The best adapter (discrete before integrated before software, among the backends
/// `WGPU_BACKEND` allows, filtered by `opts.adapter_name`) and the optional features the kernels
/// use that it offers.
pub(super) fn choose_adapter(opts: &GpuOptions) -> GpuResult<Chosen> {
    let mut adapters = ranked_adapters();
    let names: Vec<String> = adapters.iter().map(|a| a.get_info().name).collect();
    if let Some(want) = &opts.adapter_name {
        let want = want.to_lowercase();
        adapters.retain(|a| a.get_info().name.to_lowercase().contains(&want));
    }
    let Some(adapter) = adapters.into_iter().next() else {
        let detail = match &opts.adapter_name {
            Some(w) => format!(" whose name contains {w:?} (present: {names:?})"),
            None => String::new(),
        };
        return Err(GpuError::NoAdapter(detail));
    };
    let offered = adapter.features();
    let mut wanted = wgpu::Features::SUBGROUP
        | wgpu::Features::SUBGROUP_BARRIER
        | wgpu::Features::SHADER_F16
        | wgpu::Features::TIMESTAMP_QUERY
        // Kernel parameters written in place (`GpuContext::params`).
        | wgpu::Features::MAPPABLE_PRIMARY_BUFFERS
        // Kernels that stage matrices in workgroup memory go to the driver as SPIR-V translated
        // here (spirv.rs); asked of every adapter, so that CI's checks that path too.
        | wgpu::Features::PASSTHROUGH_SHADERS;
    let matrix_cores = matrix_cores_wanted(opts) && offers_matrix_cores(&adapter);
    if matrix_cores {
        wanted |= wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX;
    }
    if super::profile::Profiler::pass_asked() {
        wanted |= wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES;
    }
    Ok(Chosen {
        info: adapter.get_info(),
        features: offered & wanted,
        limits: adapter.limits(),
        matrix_cores,
        adapter,
    })
}

/// A new device on the chosen adapter, with its features and all its limits.
pub(super) fn request_device(c: &Chosen) -> GpuResult<(wgpu::Device, wgpu::Queue)> {
    pollster::block_on(c.adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("minerva"),
        required_features: c.features,
        required_limits: c.limits.clone(),
        // SAFETY: the only experimental feature requested is cooperative matrices, used by
        // one kernel (matmul_coop.wgsl) that its tests check against the CPU.
        experimental_features: if c.matrix_cores {
            unsafe { wgpu::ExperimentalFeatures::enabled() }
        } else {
            wgpu::ExperimentalFeatures::disabled()
        },
        // Small memory blocks: a buffer larger than a block gets memory of its own size.
        // With the default 256 MiB blocks, each 141 MiB expert tensor of gpt-oss-20b took
        // a block of its own and left 115 MiB of it unused: 19.9 GB reserved for 11.8 GB
        // of buffers.
        memory_hints: wgpu::MemoryHints::MemoryUsage,
        ..Default::default()
    }))
    .map_err(|e| GpuError::RequestDevice {
        adapter: c.info.name.clone(),
        reason: e.to_string(),
    })
}

/// Whether the options and the environment leave matrix cores on.
fn matrix_cores_wanted(opts: &GpuOptions) -> bool {
    !opts.matmul_f32
        && !opts.kv_f32
        && std::env::var("MINERVA_GPU_MATRIX_CORES").map_or(true, |v| v != "0")
}

/// Whether the options and the environment leave packed f16 decode products on.
pub(super) fn packed_f16_wanted(opts: &GpuOptions) -> bool {
    !opts.matmul_f32
        && !opts.kv_f32
        && std::env::var("MINERVA_GPU_PACKED_F16").map_or(true, |v| v != "0")
}

/// Whether the adapter can run the matrix-core product (see `Capabilities::matrix_cores`).
fn offers_matrix_cores(adapter: &wgpu::Adapter) -> bool {
    use wgpu::CooperativeScalarType::{F16, F32};
    let needed = wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX
        | wgpu::Features::SHADER_F16
        | wgpu::Features::SUBGROUP;
    let info = adapter.get_info();
    adapter.features().contains(needed)
        && info.subgroup_min_size == COOP_SUBGROUP
        && info.subgroup_max_size == COOP_SUBGROUP
        && adapter.cooperative_matrix_properties().iter().any(|c| {
            (c.m_size, c.n_size, c.k_size) == (16, 16, 16) && c.ab_type == F16 && c.cr_type == F32
        })
}
