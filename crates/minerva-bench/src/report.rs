//! The benchmark report: the machine, the settings and every run's raw figures per format,
//! with medians (and min, max) and each format's quality against the reference. The JSON
//! layout is versioned ([`SCHEMA_VERSION`]) and described by `benches/report.schema.json`,
//! generated from these types; the dashboard reads it.

use crate::quality::Quality;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Bumped on any change a reader of the JSON would notice.
pub const SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Report {
    pub schema_version: u32,
    pub engine_version: String,
    /// When the run started, RFC 3339.
    pub started: String,
    pub machine: Machine,
    pub settings: Settings,
    pub formats: Vec<FormatResult>,
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
    /// The format every other is compared with (the most precise present).
    pub reference: String,
}

/// One format of the model: what it is, each run's figures, and their summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FormatResult {
    /// e.g. `gguf q4_0`, `safetensors bf16`, `mlx 4-bit`.
    pub label: String,
    pub path: String,
    pub bytes_on_disk: u64,
    pub runs: Vec<RunFigures>,
    pub summary: Summary,
    pub quality: Option<Quality>,
}

/// The figures of one run, in a fresh process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunFigures {
    /// Load time to ready, with the files' pages dropped first.
    pub load_cold_ms: f64,
    /// Load time to ready, files in the page cache.
    pub load_warm_ms: f64,
    /// Per prompt length, in the order of `Settings::prompt_tokens`.
    pub ttft_ms: Vec<f64>,
    pub prefill_tokens_per_s: Vec<f64>,
    pub decode_tokens_per_s: f64,
    pub peak_rss_bytes: u64,
    /// The engine's own account of its GPU buffers (none on the CPU).
    pub gpu_bytes: Option<u64>,
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
            load_cold_ms: stat(&|r| r.load_cold_ms),
            load_warm_ms: stat(&|r| r.load_warm_ms),
            ttft_ms: (0..prompt_lengths)
                .map(|i| at(&|r| &r.ttft_ms, i))
                .collect(),
            prefill_tokens_per_s: (0..prompt_lengths)
                .map(|i| at(&|r| &r.prefill_tokens_per_s, i))
                .collect(),
            decode_tokens_per_s: stat(&|r| r.decode_tokens_per_s),
            peak_rss_bytes: stat(&|r| r.peak_rss_bytes as f64),
        }
    }
}

/// The JSON Schema of [`Report`] as serialized (draft 2020-12).
pub fn schema() -> serde_json::Value {
    let generator = schemars::generate::SchemaSettings::draft2020_12()
        .for_serialize()
        .into_generator();
    serde_json::to_value(generator.into_root_schema_for::<Report>()).unwrap_or_default()
}

fn cell(s: Option<Stat>, digits: usize) -> String {
    s.map_or_else(|| "–".into(), |s| format!("{:.digits$}", s.median))
}

/// One Markdown table: a row per format, medians of each figure, and quality.
pub fn markdown(r: &Report) -> String {
    let mut head = vec![
        "format".to_string(),
        "size MiB".into(),
        "load cold ms".into(),
        "load warm ms".into(),
    ];
    for n in &r.settings.prompt_tokens {
        head.push(format!("TTFT@{n} ms"));
        head.push(format!("prefill@{n} tok/s"));
    }
    head.extend(
        [
            "decode tok/s",
            "peak RSS MiB",
            "KL mean",
            "KL max",
            "top-1",
            "PPL",
        ]
        .map(String::from),
    );
    let mut out = format!("| {} |\n|{}\n", head.join(" | "), "---|".repeat(head.len()));
    for f in &r.formats {
        let s = &f.summary;
        let mut row = vec![
            f.label.clone(),
            format!("{:.1}", f.bytes_on_disk as f64 / (1 << 20) as f64),
            cell(s.load_cold_ms, 0),
            cell(s.load_warm_ms, 0),
        ];
        for i in 0..r.settings.prompt_tokens.len() {
            row.push(cell(s.ttft_ms.get(i).copied().flatten(), 1));
            row.push(cell(s.prefill_tokens_per_s.get(i).copied().flatten(), 0));
        }
        row.push(cell(s.decode_tokens_per_s, 1));
        row.push(s.peak_rss_bytes.map_or("–".into(), |b| {
            format!("{:.0}", b.median / (1 << 20) as f64)
        }));
        match &f.quality {
            Some(q) => row.extend([
                format!("{:.4}", q.kl_mean),
                format!("{:.4}", q.kl_max),
                format!("{:.3}", q.top1_agreement),
                format!("{:.3}", q.perplexity),
            ]),
            None => row.extend(["–", "–", "–", "–"].map(String::from)),
        }
        out.push_str(&format!("| {} |\n", row.join(" | ")));
    }
    out
}

/// CSV: one line per format and run, with the raw figures (the long form for spreadsheets).
pub fn csv(r: &Report) -> String {
    let mut out = String::from("format,run,load_cold_ms,load_warm_ms,prompt_tokens,ttft_ms,prefill_tokens_per_s,decode_tokens_per_s,peak_rss_bytes\n");
    for f in &r.formats {
        for (i, run) in f.runs.iter().enumerate() {
            for (j, n) in r.settings.prompt_tokens.iter().enumerate() {
                let get = |v: &Vec<f64>| v.get(j).map_or(String::new(), |x| x.to_string());
                out.push_str(&format!(
                    "\"{}\",{},{},{},{},{},{},{},{}\n",
                    f.label.replace('"', "\"\""),
                    i + 1,
                    run.load_cold_ms,
                    run.load_warm_ms,
                    n,
                    get(&run.ttft_ms),
                    get(&run.prefill_tokens_per_s),
                    run.decode_tokens_per_s,
                    run.peak_rss_bytes
                ));
            }
        }
    }
    out
}
