//! Kernels that share workgroup memory between cooperative-matrix operations, handed to a Vulkan
//! driver as SPIR-V that naga translated here: naga 30 declares the Vulkan memory model for any
//! module with cooperative matrices but still writes the plain loads, stores and barriers of
//! the GLSL450 model, so under the declared model no workgroup write is ordered before another
//! invocation's read (gfx-rs/wgpu#8805). The translation here declares GLSL450, the model that
//! code was written for; Vulkan's cooperative matrices do not require the Vulkan model.
//! Such a module bypasses wgpu's translation (`Features::PASSTHROUGH_SHADERS`), so its pipeline
//! gets a layout made from the module's own bindings, and the module numbers them as wgpu's
//! Vulkan layer numbers that layout's (in order from 0).

use super::context::GpuContext;
use super::error::{GpuError, GpuResult};
use wgpu::naga;

/// The kernel files translated here rather than by wgpu.
pub const TRANSLATED: &[&str] = &["matmul_staged.wgsl"];

/// SPIR-V opcodes and operands the memory-model rewrite reads.
const OP_EXTENSION: u32 = 10;
const OP_MEMORY_MODEL: u32 = 14;
const OP_CAPABILITY: u32 = 17;
const OP_LOAD: u32 = 61;
const OP_STORE: u32 = 62;
const CAPABILITY_VULKAN_MEMORY_MODEL: u32 = 5345;
const CAPABILITY_VULKAN_MEMORY_MODEL_DEVICE_SCOPE: u32 = 5346;
const MEMORY_MODEL_GLSL450: u32 = 1;
/// MakePointerAvailable, MakePointerVisible and NonPrivatePointer: memory operands that only
/// the Vulkan model has.
const VULKAN_ONLY_ACCESS: u32 = 0x8 | 0x10 | 0x20;

/// A kernel translated for the driver: its SPIR-V words and the bindings of group 0 its entry
/// point uses, by binding index.
pub struct Translated {
    pub words: Vec<u32>,
    pub bindings: Vec<(u32, wgpu::BufferBindingType)>,
    pub workgroup_size: [u32; 3],
}

/// `src` (composed WGSL) parsed, validated and translated to SPIR-V 1.6 for `entry`, with wgpu's
/// index and buffer bounds checks and without its loop counters (as `pipelines.rs` asks of
/// wgpu), workgroup memory not zeroed (these kernels write every value they read), and the
/// GLSL450 memory model.
pub fn translate(src: &str, entry: &str) -> Result<Translated, String> {
    use naga::valid::{Capabilities, ValidationFlags, Validator};
    let module = naga::front::wgsl::parse_str(src).map_err(|e| e.emit_to_string(src))?;
    let caps = Capabilities::COOPERATIVE_MATRIX
        | Capabilities::SHADER_FLOAT16
        | Capabilities::SHADER_FLOAT16_IN_FLOAT32
        | Capabilities::SUBGROUP;
    let info = Validator::new(ValidationFlags::all(), caps)
        .validate(&module)
        .map_err(|e| e.emit_to_string(src))?;
    let (index, ep) = module
        .entry_points
        .iter()
        .enumerate()
        .find(|(_, ep)| ep.name == entry)
        .ok_or_else(|| format!("no entry point {entry}"))?;
    let used = info.get_entry_point(index);
    let mut bindings = Vec::new();
    for (handle, var) in module.global_variables.iter() {
        let Some(rb) = &var.binding else { continue };
        if rb.group != 0 || used[handle].is_empty() {
            continue;
        }
        let ty = match var.space {
            naga::AddressSpace::Uniform => wgpu::BufferBindingType::Uniform,
            naga::AddressSpace::Storage { access } => wgpu::BufferBindingType::Storage {
                read_only: !access.contains(naga::StorageAccess::STORE),
            },
            other => return Err(format!("binding {} in {other:?}", rb.binding)),
        };
        bindings.push((rb.binding, ty));
    }
    bindings.sort_by_key(|b| b.0);
    // wgpu's Vulkan layer numbers a bind group's bindings in order from 0 (a layout of
    // bindings 0, 1, 2, 3 and 5 is Vulkan's 0 to 4) and tells its own translations so; a module
    // passed through must be numbered the same way, or a binding after a gap reads nothing.
    let binding_map: naga::back::spv::BindingMap = bindings
        .iter()
        .enumerate()
        .map(|(rank, &(binding, _))| {
            let at = naga::ResourceBinding { group: 0, binding };
            let to = naga::back::spv::BindingInfo {
                descriptor_set: 0,
                binding: rank as u32,
                binding_array_size: None,
            };
            (at, to)
        })
        .collect();
    let restrict = naga::proc::BoundsCheckPolicy::Restrict;
    let options = naga::back::spv::Options {
        lang_version: (1, 6),
        bounds_check_policies: naga::proc::BoundsCheckPolicies {
            index: restrict,
            buffer: restrict,
            image_load: restrict,
            binding_array: naga::proc::BoundsCheckPolicy::Unchecked,
        },
        zero_initialize_workgroup_memory: naga::back::spv::ZeroInitializeWorkgroupMemoryMode::None,
        force_loop_bounding: false,
        binding_map,
        ..Default::default()
    };
    let pipeline = naga::back::spv::PipelineOptions {
        shader_stage: naga::ShaderStage::Compute,
        entry_point: entry.into(),
    };
    let mut words = naga::back::spv::write_vec(&module, &info, &options, Some(&pipeline))
        .map_err(|e| format!("SPIR-V: {e}"))?;
    glsl450_memory_model(&mut words)?;
    Ok(Translated {
        words,
        bindings,
        workgroup_size: ep.workgroup_size,
    })
}

/// Rewrites a module declaring the Vulkan memory model to declare GLSL450: the model's
/// capabilities and extension dropped, `OpMemoryModel` changed. An error where the code uses
/// what only the Vulkan model has (availability and visibility on a load or store).
pub fn glsl450_memory_model(words: &mut Vec<u32>) -> Result<(), String> {
    if words.len() < 5 {
        return Err("SPIR-V shorter than its header".into());
    }
    let mut out = words[..5].to_vec();
    let mut at = 5;
    while at < words.len() {
        let count = (words[at] >> 16) as usize;
        let op = words[at] & 0xFFFF;
        if count == 0 || at + count > words.len() {
            return Err(format!("SPIR-V instruction at word {at} runs past the end"));
        }
        let inst = &words[at..at + count];
        let keep = match op {
            OP_CAPABILITY => !matches!(
                inst[1],
                CAPABILITY_VULKAN_MEMORY_MODEL | CAPABILITY_VULKAN_MEMORY_MODEL_DEVICE_SCOPE
            ),
            OP_EXTENSION => literal_string(&inst[1..]) != "SPV_KHR_vulkan_memory_model",
            _ => true,
        };
        let access = match op {
            OP_LOAD => inst.get(4),
            OP_STORE => inst.get(3),
            _ => None,
        };
        if access.is_some_and(|a| a & VULKAN_ONLY_ACCESS != 0) {
            return Err(format!(
                "a load or store at word {at} uses the Vulkan memory model"
            ));
        }
        if keep {
            out.extend_from_slice(inst);
            if op == OP_MEMORY_MODEL {
                let last = out.len() - 1;
                out[last] = MEMORY_MODEL_GLSL450;
            }
        }
        at += count;
    }
    *words = out;
    Ok(())
}

/// A SPIR-V literal string: bytes from the words, up to the first zero.
fn literal_string(words: &[u32]) -> String {
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// The module and pipeline of a translated kernel: its layout one bind group of the module's
/// bindings, visible to compute.
pub fn pipeline(
    ctx: &GpuContext,
    label: &str,
    src: &str,
    entry: &str,
) -> GpuResult<wgpu::ComputePipeline> {
    let t = translate(src, entry).map_err(|e| GpuError::Validation(format!("{label}: {e}")))?;
    let entries: Vec<wgpu::BindGroupLayoutEntry> = t
        .bindings
        .iter()
        .map(|&(binding, ty)| wgpu::BindGroupLayoutEntry {
            binding,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty,
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        })
        .collect();
    let group = ctx
        .device
        .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some(label),
            entries: &entries,
        });
    let layout = ctx
        .device
        .create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some(label),
            bind_group_layouts: &[Some(&group)],
            immediate_size: 0,
        });
    let [x, y, z] = t.workgroup_size;
    let entry_points = [wgpu::PassthroughShaderEntryPoint {
        name: entry.into(),
        workgroup_size: (x, y, z),
    }];
    // SAFETY: the words are naga's translation of a module naga validated, with only the
    // declared memory model changed to the one the translation's code follows (see above).
    let module = unsafe {
        ctx.device
            .create_shader_module_passthrough(wgpu::ShaderModuleDescriptorPassthrough {
                label: Some(label),
                entry_points: entry_points[..].into(),
                spirv: Some(t.words.into()),
                ..Default::default()
            })
    };
    Ok(ctx
        .device
        .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(label),
            layout: Some(&layout),
            module: &module,
            entry_point: Some(entry),
            compilation_options: Default::default(),
            cache: None,
        }))
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAGED: &str = r#"
enable f16;
enable wgpu_cooperative_matrix;
@group(0) @binding(0) var<storage, read> a: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<storage, read> unused: array<f32>;
var<workgroup> s: array<vec4<u32>, 64>;
@compute @workgroup_size(32)
fn main(@builtin(local_invocation_index) lid: u32) {
    for (var i = lid; i < 64u; i += 32u) {
        s[i] = a[i];
    }
    workgroupBarrier();
    let m = coopLoadT<coop_mat16x16<f16, A>>(&s[0], 2u);
    let n = coopLoad<coop_mat16x16<f16, B>>(&s[32], 2u);
    let c = coopMultiplyAdd(m, n, coop_mat16x16<f32, C>());
    coopStore(c, &y[0], 16u);
}
"#;

    /// Opcode and first operand of every instruction after the header.
    fn instructions(words: &[u32]) -> Vec<(u32, Vec<u32>)> {
        let mut out = Vec::new();
        let mut at = 5;
        while at < words.len() {
            let count = (words[at] >> 16) as usize;
            out.push((words[at] & 0xFFFF, words[at + 1..at + count].to_vec()));
            at += count;
        }
        out
    }

    #[test]
    fn a_matrix_kernel_declares_glsl450_and_its_bindings() {
        let t = translate(STAGED, "main").unwrap();
        let inst = instructions(&t.words);
        let models: Vec<_> = inst.iter().filter(|i| i.0 == OP_MEMORY_MODEL).collect();
        assert_eq!(models.len(), 1);
        assert_eq!(models[0].1, vec![0, MEMORY_MODEL_GLSL450]);
        let caps: Vec<u32> = inst
            .iter()
            .filter(|i| i.0 == OP_CAPABILITY)
            .map(|i| i.1[0])
            .collect();
        assert!(caps.contains(&6022), "CooperativeMatrixKHR kept: {caps:?}");
        assert!(!caps.contains(&CAPABILITY_VULKAN_MEMORY_MODEL));
        let exts: Vec<String> = inst
            .iter()
            .filter(|i| i.0 == OP_EXTENSION)
            .map(|i| literal_string(&i.1))
            .collect();
        assert!(exts.contains(&"SPV_KHR_cooperative_matrix".to_string()));
        assert!(!exts.iter().any(|e| e.contains("vulkan_memory_model")));
        // Binding 2 is declared but not used: wgpu's layouts leave such bindings out too.
        let read = wgpu::BufferBindingType::Storage { read_only: true };
        let write = wgpu::BufferBindingType::Storage { read_only: false };
        assert_eq!(t.bindings, vec![(0, read), (1, write)]);
        assert_eq!(t.workgroup_size, [32, 1, 1]);
    }

    #[test]
    fn naga_alone_declares_the_vulkan_model() {
        // The rewrite is needed only while naga declares it (gfx-rs/wgpu#8805): once this
        // fails, naga writes code for the model it declares and the rewrite can go.
        let module = naga::front::wgsl::parse_str(STAGED).unwrap();
        let caps = naga::valid::Capabilities::all();
        let info = naga::valid::Validator::new(naga::valid::ValidationFlags::all(), caps)
            .validate(&module)
            .unwrap();
        let naga_words = naga::back::spv::write_vec(&module, &info, &Default::default(), None);
        let model = |w: &[u32]| {
            instructions(w)
                .into_iter()
                .find(|i| i.0 == OP_MEMORY_MODEL)
                .map(|i| i.1[1])
        };
        assert_eq!(model(&naga_words.unwrap()), Some(3));
        assert_eq!(
            model(&translate(STAGED, "main").unwrap().words),
            Some(MEMORY_MODEL_GLSL450)
        );
    }

    /// The staged product translates, with and without its bias, and binds what its ops give
    /// it (CI's lavapipe has no matrix cores: this is where CI sees the kernel).
    #[test]
    fn the_staged_product_translates() {
        let read = wgpu::BufferBindingType::Storage { read_only: true };
        let write = wgpu::BufferBindingType::Storage { read_only: false };
        let uniform = wgpu::BufferBindingType::Uniform;
        for bias in [false, true] {
            let mut d = super::super::shader::Defines::new();
            if bias {
                d.insert("BIAS".into(), String::new());
            }
            let src = super::super::shader::compose("matmul_staged.wgsl", &d).unwrap();
            let t = translate(&src, "main").unwrap_or_else(|e| panic!("{e}"));
            let mut expected = vec![(0, read), (1, read), (2, write), (3, uniform)];
            if bias {
                expected.push((4, read));
            }
            assert_eq!(t.bindings, expected);
            assert_eq!(t.workgroup_size, [128, 1, 1]);
        }
    }

    /// Bindings 0, 2 and 3 used, 1 and 4 not: wgpu's layout for them is Vulkan's 0, 1 and 2.
    const GAPS: &str = r#"
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> unused: array<f32>;
@group(0) @binding(2) var<uniform> u: vec4<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<storage, read> unused_too: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < arrayLength(&y)) {
        y[id.x] = a[id.x] * u.x + u.y;
    }
}
"#;

    /// The Binding decoration of each variable the module declares, in order.
    fn binding_decorations(words: &[u32]) -> Vec<u32> {
        const OP_DECORATE: u32 = 71;
        const DECORATION_BINDING: u32 = 33;
        instructions(words)
            .into_iter()
            .filter(|i| i.0 == OP_DECORATE && i.1[1] == DECORATION_BINDING)
            .map(|i| i.1[2])
            .collect()
    }

    #[test]
    fn bindings_after_a_gap_are_numbered_as_wgpus_vulkan_layouts_number_them() {
        let t = translate(GAPS, "main").unwrap();
        let read = wgpu::BufferBindingType::Storage { read_only: true };
        let write = wgpu::BufferBindingType::Storage { read_only: false };
        let uniform = wgpu::BufferBindingType::Uniform;
        assert_eq!(t.bindings, vec![(0, read), (2, uniform), (3, write)]);
        let mut decorated = binding_decorations(&t.words);
        decorated.sort_unstable();
        assert_eq!(decorated, vec![0, 1, 2]);
    }

    /// The module with gaps in its bindings, passed through to the driver, reads and writes the
    /// buffers bound at its WGSL binding numbers.
    #[test]
    fn a_kernel_passed_through_reads_each_binding_after_a_gap() {
        use super::super::pipelines::Dispatch;
        let Some((_one, ctx)) = super::super::device_pool::test_context() else {
            return;
        };
        if !ctx
            .device
            .features()
            .contains(wgpu::Features::PASSTHROUGH_SHADERS)
        {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI's adapter offers no SPIR-V passthrough: {}",
                ctx.describe()
            );
            eprintln!("SKIPPED: {} takes no SPIR-V passthrough", ctx.describe());
            return;
        }
        let a: Vec<f32> = (0..100).map(|i| i as f32).collect();
        let ab = ctx.storage_with("a", &a);
        let ub = ctx.params("u", &[3.0f32, -1.0, 0.0, 0.0]);
        let yb = ctx.storage("y", 100 * 4);
        let pipe = pipeline(&ctx, "gaps", GAPS, "main").unwrap();
        let entries = [(0, &ab), (2, &ub), (3, &yb)];
        let d = Dispatch::new(
            &ctx,
            "gaps".into(),
            std::sync::Arc::new(pipe),
            &entries,
            [2, 1, 1],
        );
        ctx.submit(&[&d]).unwrap();
        let y = ctx.read_f32(&yb, 0, 100).unwrap();
        let want: Vec<f32> = a.iter().map(|v| v * 3.0 - 1.0).collect();
        assert_eq!(y, want);
    }

    /// The staged expert product, which decodes its weights as it stages them, translates for
    /// each decoder family an expert weight comes in (compose_multi's instance 0 at bindings 0
    /// to 2, the kernel's own from 3).
    #[test]
    fn the_staged_expert_product_translates_for_each_decoder() {
        use super::super::shader::{compose_multi, Defines};
        use super::super::weights::decoder_defines;
        use minerva_formats::DType;
        let uniform = wgpu::BufferBindingType::Uniform;
        let read = wgpu::BufferBindingType::Storage { read_only: true };
        let write = wgpu::BufferBindingType::Storage { read_only: false };
        let mut d = Defines::new();
        for (k, v) in [("EXPERTS", ""), ("MOE_COOP_TILES", "4096u")] {
            d.insert(k.into(), v.into());
        }
        for dtype in [
            DType::MXFP4,
            DType::HfMxfp4,
            DType::Q4_0,
            DType::Q8_0,
            DType::F16,
        ] {
            let dec = decoder_defines(dtype, None).unwrap();
            let src = compose_multi("matmul_staged.wgsl", &d, &[dec]).unwrap();
            let t = translate(&src, "main").unwrap_or_else(|e| panic!("{dtype:?}: {e}"));
            let own: Vec<_> = t.bindings.iter().filter(|b| b.0 >= 3).cloned().collect();
            assert_eq!(
                own,
                vec![(3, read), (4, write), (5, uniform), (6, uniform)],
                "{dtype:?}"
            );
            assert!(t.bindings[0] == (0, read), "{dtype:?}: {:?}", t.bindings);
        }
    }

    #[test]
    fn damaged_words_are_an_error() {
        assert!(glsl450_memory_model(&mut vec![0; 3]).is_err());
        let mut w = vec![0x0723_0203, 0x0001_0600, 0, 8, 0, (5 << 16) | OP_CAPABILITY];
        assert!(glsl450_memory_model(&mut w).is_err());
        // A load with NonPrivatePointer is refused rather than left meaning something else.
        let mut w = vec![
            0x0723_0203,
            0x0001_0600,
            0,
            8,
            0,
            (5 << 16) | OP_LOAD,
            1,
            2,
            3,
            0x20,
        ];
        assert!(glsl450_memory_model(&mut w).is_err());
    }
}
