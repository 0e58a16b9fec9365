//! Where a model runs: the GPU adapters wgpu sees, and the `auto` choice between the best real
//! GPU and the CPU.

use std::fmt;
use std::str::FromStr;

/// Which backend a user asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BackendKind {
    /// A real GPU when there is one, else the CPU.
    #[default]
    Auto,
    Cpu,
    Gpu,
}

impl FromStr for BackendKind {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "auto" => Ok(BackendKind::Auto),
            "cpu" => Ok(BackendKind::Cpu),
            "gpu" => Ok(BackendKind::Gpu),
            other => Err(format!(
                "unknown backend '{other}' (expected auto, gpu or cpu)"
            )),
        }
    }
}

/// One GPU adapter, as a user would want it described.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Adapter {
    pub name: String,
    /// The graphics API wgpu drives it through: Vulkan, Metal, Dx12 or Gl.
    pub api: String,
    /// DiscreteGpu, IntegratedGpu, VirtualGpu, Cpu (a software rasterizer) or Other.
    pub device_type: String,
    pub driver: String,
    pub driver_info: String,
    /// A software implementation (Mesa's llvmpipe, SwiftShader, WARP): slower than the CPU
    /// backend, so `auto` passes it over.
    pub software: bool,
}

impl Adapter {
    fn from_info(info: &wgpu::AdapterInfo) -> Adapter {
        Adapter {
            name: info.name.clone(),
            api: format!("{:?}", info.backend),
            device_type: format!("{:?}", info.device_type),
            driver: info.driver.clone(),
            driver_info: info.driver_info.clone(),
            software: info.device_type == wgpu::DeviceType::Cpu,
        }
    }
}

impl fmt::Display for Adapter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}", self.name, self.api)?;
        let driver = [self.driver.as_str(), self.driver_info.as_str()]
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join(" ");
        if !driver.is_empty() {
            write!(f, ", driver {driver}")?;
        }
        if self.software {
            write!(f, ", software")?;
        }
        write!(f, ")")
    }
}

/// The adapters wgpu sees, best first: the order `--backend gpu` chooses in.
pub fn adapters() -> Vec<Adapter> {
    crate::gpu::adapters::adapter_infos()
        .iter()
        .map(Adapter::from_info)
        .collect()
}

/// What a model runs on once `auto` is resolved, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendChoice {
    /// Cpu or Gpu, never Auto.
    pub kind: BackendKind,
    /// The adapter `kind` Gpu runs on (the best one; the backend opens the same).
    pub adapter: Option<Adapter>,
    /// Why `auto` chose the CPU, for messages.
    pub reason: Option<String>,
}

impl BackendChoice {
    pub fn cpu(reason: Option<String>) -> BackendChoice {
        BackendChoice {
            kind: BackendKind::Cpu,
            adapter: None,
            reason,
        }
    }

    /// `cpu` or `gpu`, for JSON.
    pub fn name(&self) -> &'static str {
        match self.kind {
            BackendKind::Gpu => "gpu",
            _ => "cpu",
        }
    }
}

impl fmt::Display for BackendChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.adapter, &self.reason) {
            (Some(a), _) => write!(f, "{}: {a}", self.name()),
            (None, Some(why)) => write!(f, "{} ({why})", self.name()),
            (None, None) => write!(f, "{}", self.name()),
        }
    }
}

/// Resolves `kind`: `auto` takes the best adapter when it is a real GPU and the CPU otherwise;
/// `gpu` takes the best adapter of any kind (errors come when the backend opens it).
pub fn choose(kind: BackendKind) -> BackendChoice {
    match kind {
        BackendKind::Cpu => BackendChoice::cpu(None),
        _ => choose_among(kind, adapters()),
    }
}

/// [`choose`] with `gpu` limited to adapters whose name contains `adapter` (any case).
pub fn choose_named(kind: BackendKind, adapter: Option<&str>) -> BackendChoice {
    match (kind, adapter) {
        (BackendKind::Gpu, Some(name)) => {
            let want = name.to_lowercase();
            let found = adapters()
                .into_iter()
                .filter(|a| a.name.to_lowercase().contains(&want))
                .collect();
            choose_among(kind, found)
        }
        _ => choose(kind),
    }
}

/// [`choose`] among `found`, best first.
pub fn choose_among(kind: BackendKind, found: Vec<Adapter>) -> BackendChoice {
    let best = found.into_iter().next();
    match (kind, best) {
        (BackendKind::Cpu, _) => BackendChoice::cpu(None),
        (BackendKind::Gpu, best) => BackendChoice {
            kind: BackendKind::Gpu,
            adapter: best,
            reason: None,
        },
        (BackendKind::Auto, Some(best)) if !best.software => BackendChoice {
            kind: BackendKind::Gpu,
            adapter: Some(best),
            reason: None,
        },
        (BackendKind::Auto, Some(best)) => {
            BackendChoice::cpu(Some(format!("only a software GPU adapter: {}", best.name)))
        }
        (BackendKind::Auto, None) => BackendChoice::cpu(Some("no GPU adapter".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn adapter(name: &str, software: bool) -> Adapter {
        Adapter {
            name: name.into(),
            api: "Vulkan".into(),
            device_type: if software { "Cpu" } else { "DiscreteGpu" }.into(),
            driver: "d".into(),
            driver_info: "1.0".into(),
            software,
        }
    }

    #[test]
    fn auto_takes_a_real_gpu_and_passes_over_software_ones() {
        let gpu = choose_among(
            BackendKind::Auto,
            vec![adapter("NVIDIA H200", false), adapter("llvmpipe", true)],
        );
        assert_eq!(gpu.kind, BackendKind::Gpu);
        assert_eq!(gpu.adapter.unwrap().name, "NVIDIA H200");
        let soft = choose_among(BackendKind::Auto, vec![adapter("llvmpipe (LLVM 15)", true)]);
        assert_eq!(soft.kind, BackendKind::Cpu);
        assert!(soft.to_string().contains("llvmpipe"), "{soft}");
        assert_eq!(
            choose_among(BackendKind::Auto, vec![]).kind,
            BackendKind::Cpu
        );
    }

    #[test]
    fn names_parse_and_unknown_ones_are_refused() {
        assert_eq!("auto".parse::<BackendKind>(), Ok(BackendKind::Auto));
        assert_eq!(BackendKind::default(), BackendKind::Auto);
        assert!("tpu".parse::<BackendKind>().unwrap_err().contains("tpu"));
    }
}
