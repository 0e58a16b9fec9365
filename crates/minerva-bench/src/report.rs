//! The benchmark report: the machine, the settings and every run's raw figures per format
//! (and per remote engine), with medians (and min, max) and each one's quality against the
//! reference. A figure that was not measured (a remote engine's load time and memory) is null.
//! The JSON layout is versioned ([`SCHEMA_VERSION`]) and described by
//! `benches/report.schema.json`, generated from these types; the dashboard reads it.

use crate::quality::Quality;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Bumped on any change a reader of the JSON would notice. Version 3 let figures be null and
/// added remote engines; a version 2 report reads as one of version 3.
pub const SCHEMA_VERSION: u32 = 3;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Report {
    pub schema_version: u32,
    pub engine_version: String,
    /// When the run started, RFC 3339.
    pub started: String,
    pub machine: Machine,
    pub settings: Settings,
    pub formats: Vec<FormatResult>,
    /// True when the user stopped the run: the figures are those measured until then.
    pub interrupted: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Machine {
    pub cpu: String,
    pub cores: usize,
    pub ram_bytes: u64,
    /// `cpu`, or the GPU adapter as `name (API, driver …)`.
    pub device: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Settings {
    /// The catalogue id or the paths given.
    pub model: String,
    pub backend: String,
    pub prompt_tokens: Vec<usize>,
    pub gen_tokens: usize,
    pub runs: usize,
    /// The format every other is compared with (the most precise present); empty when only
    /// remote engines ran.
    pub reference: String,
}

/// One format of the model, or a remote engine serving it: what it is, each run's figures,
/// and their summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FormatResult {
    /// e.g. `gguf Q4_0`, `safetensors BF16`, `mlx 4-bit`, `remote: qwen3-4b @ 10.0.0.5:8000`.
    pub label: String,
    /// `gguf`, `safetensors`, `mlx`, or `remote` (an OpenAI-compatible engine).
    #[serde(default)]
    pub format: String,
    /// The model's file or folder; a remote engine's `URL#MODEL`.
    pub path: String,
    /// None for a remote engine.
    pub bytes_on_disk: Option<u64>,
    pub runs: Vec<RunFigures>,
    pub summary: Summary,
    pub quality: Option<Quality>,
    /// Why a figure is missing, in words (a remote engine that sends no log-probabilities).
    #[serde(default)]
    pub note: Option<String>,
}

/// The figures of one run, in a fresh process (a remote engine's: its requests, timed from
/// here, with no load or memory figures).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunFigures {
    /// Load time to ready, with the files' pages dropped first.
    pub load_cold_ms: Option<f64>,
    /// Load time to ready, files in the page cache.
    pub load_warm_ms: Option<f64>,
    /// Time to make the GPU device, which each process does before it loads (as the app and
    /// the server do at their start), so that neither load time above includes it; none on
    /// the CPU.
    #[serde(default)]
    pub device_ms: Option<f64>,
    /// Per prompt length, in the order of `Settings::prompt_tokens`.
    pub ttft_ms: Vec<f64>,
    pub prefill_tokens_per_s: Vec<f64>,
    /// Per prompt length, the prompt's real length in tokens: the length asked for, or as a
    /// remote engine counted it (its prompt is cut from the text by characters).
    #[serde(default)]
    pub prompt_tokens: Vec<usize>,
    pub decode_tokens_per_s: f64,
    pub peak_rss_bytes: Option<u64>,
    /// The engine's own account at the end of the longest prompt's run: bytes of its live
    /// GPU buffers (none on the CPU).
    pub gpu_allocated_bytes: Option<u64>,
    /// The device memory the engine's allocator reserved for those buffers (it reserves
    /// whole blocks), at the same moment.
    pub gpu_reserved_bytes: Option<u64>,
    /// The driver's figure (NVML on NVIDIA): the most the process held on the GPU.
    pub gpu_driver_bytes: Option<u64>,
    /// Whether `gpu_driver_bytes` is the process's own figure, or (where the driver cannot
    /// see the process, as inside a container) the rise of the GPU's used memory during it.
    pub gpu_driver_per_process: Option<bool>,
}

/// Median, min and max of one figure over the runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Stat {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Stat {
    /// None for no values; the median of an even count is the mean of the middle two.
    pub fn of(values: &[f64]) -> Option<Stat> {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Stat {
            median,
            min: v[0],
            max: v[n - 1],
        })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Summary {
    pub load_cold_ms: Option<Stat>,
    pub load_warm_ms: Option<Stat>,
    pub ttft_ms: Vec<Option<Stat>>,
    pub prefill_tokens_per_s: Vec<Option<Stat>>,
    pub decode_tokens_per_s: Option<Stat>,
    pub peak_rss_bytes: Option<Stat>,
    pub gpu_reserved_bytes: Option<Stat>,
    pub gpu_driver_bytes: Option<Stat>,
}

impl Summary {
    pub fn of(runs: &[RunFigures], prompt_lengths: usize) -> Summary {
        let stat =
            |f: &dyn Fn(&RunFigures) -> f64| Stat::of(&runs.iter().map(f).collect::<Vec<_>>());
        let at = |f: &dyn Fn(&RunFigures) -> &Vec<f64>, i: usize| {
            Stat::of(
                &runs
                    .iter()
                    .filter_map(|r| f(r).get(i).copied())
                    .collect::<Vec<_>>(),
            )
        };
        Summary {
            load_cold_ms: stat(&|r| r.load_cold_ms.unwrap_or(f64::NAN)),
            load_warm_ms: stat(&|r| r.load_warm_ms.unwrap_or(f64::NAN)),
            ttft_ms: (0..prompt_lengths)
                .map(|i| at(&|r| &r.ttft_ms, i))
                .collect(),
            prefill_tokens_per_s: (0..prompt_lengths)
                .map(|i| at(&|r| &r.prefill_tokens_per_s, i))
                .collect(),
            decode_tokens_per_s: stat(&|r| r.decode_tokens_per_s),
            peak_rss_bytes: stat(&|r| bytes(r.peak_rss_bytes)),
            gpu_reserved_bytes: stat(&|r| bytes(r.gpu_reserved_bytes)),
            gpu_driver_bytes: stat(&|r| bytes(r.gpu_driver_bytes)),
        }
    }
}

/// An optional byte count as a figure (NaN, left out of statistics, when absent).
fn bytes(b: Option<u64>) -> f64 {
    b.map_or(f64::NAN, |b| b as f64)
}

/// The JSON Schema of [`Report`] as serialized (draft 2020-12).
pub fn schema() -> serde_json::Value {
    let generator = schemars::generate::SchemaSettings::draft2020_12()
        .for_serialize()
        .into_generator();
    serde_json::to_value(generator.into_root_schema_for::<Report>()).unwrap_or_default()
}
