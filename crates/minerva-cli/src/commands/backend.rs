//! The `--backend` option shared by the commands that run a model, and loading with the choice
//! told on stderr (and as JSON) so a user always knows what ran.

use minerva_engine::{devices, Adapter, BackendKind, Loaded};
use serde::Serialize;
use std::path::Path;

#[derive(clap::Args)]
pub struct BackendArg {
    /// auto (a real GPU when there is one, else the CPU), gpu or cpu.
    #[arg(long = "backend", default_value = "auto")]
    pub kind: BackendKind,
}

/// An adapter as JSON.
#[derive(Serialize)]
pub struct AdapterJson<'a> {
    name: &'a str,
    api: &'a str,
    device_type: &'a str,
    driver: &'a str,
    driver_info: &'a str,
    software: bool,
}

impl<'a> From<&'a Adapter> for AdapterJson<'a> {
    fn from(a: &'a Adapter) -> Self {
        AdapterJson {
            name: &a.name,
            api: &a.api,
            device_type: &a.device_type,
            driver: &a.driver,
            driver_info: &a.driver_info,
            software: a.software,
        }
    }
}

impl BackendArg {
    /// The service's name for it: `auto`, `gpu` or `cpu`.
    pub fn name(&self) -> String {
        match self.kind {
            BackendKind::Auto => "auto",
            BackendKind::Gpu => "gpu",
            BackendKind::Cpu => "cpu",
        }
        .to_string()
    }
}

/// Loads `path` through the service with a progress bar, and says on stderr where it runs.
pub fn load_with_service(
    service: &minerva_service::Service,
    path: &Path,
    backend: &str,
    ctx: Option<usize>,
) -> Result<minerva_service::ModelInfo, String> {
    let bar = super::progress::bytes_bar("loading");
    let info = service
        .load_blocking(path, backend, ctx, &mut |bytes, total| {
            bar.set_length(total);
            bar.set_position(bytes);
            true
        })
        .map_err(|e| e.to_string());
    bar.finish_and_clear();
    let info = info?;
    match (&info.adapter, &info.backend_reason) {
        (Some(a), _) => eprintln!("backend: gpu: {a}"),
        (None, Some(why)) => eprintln!("backend: cpu ({why})"),
        (None, None) => eprintln!("backend: {}", info.backend),
    }
    Ok(info)
}

/// Loads `path` on the backend `kind` resolves to and says which on stderr.
pub fn load(path: &Path, kind: BackendKind) -> Result<Loaded, String> {
    let path = minerva_service::catalogue::resolve(path).map_err(|e| e.to_string())?;
    let loaded = minerva_engine::load(&path, kind).map_err(|e| e.to_string())?;
    eprintln!("backend: {}", loaded.backend);
    Ok(loaded)
}

#[derive(Serialize)]
struct AdaptersJson<'a> {
    adapters: Vec<AdapterJson<'a>>,
    auto: AutoJson<'a>,
}

#[derive(Serialize)]
struct AutoJson<'a> {
    backend: &'static str,
    adapter: Option<AdapterJson<'a>>,
    reason: Option<&'a str>,
}

/// `minerva info --adapters`: every adapter wgpu sees, best first, and the `auto` choice.
pub fn print_adapters(json: bool) -> Result<(), String> {
    let found = devices::adapters();
    let auto = devices::choose_among(BackendKind::Auto, found.clone());
    if json {
        let out = AdaptersJson {
            adapters: found.iter().map(AdapterJson::from).collect(),
            auto: AutoJson {
                backend: auto.name(),
                adapter: auto.adapter.as_ref().map(AdapterJson::from),
                reason: auto.reason.as_deref(),
            },
        };
        println!(
            "{}",
            serde_json::to_string_pretty(&out).map_err(|e| e.to_string())?
        );
        return Ok(());
    }
    if found.is_empty() {
        println!("no GPU adapters");
    }
    for (i, a) in found.iter().enumerate() {
        println!("{}. {a} [{}]", i + 1, a.device_type);
    }
    println!("--backend auto: {auto}");
    Ok(())
}
