//! The commands of the benchmark dashboard and the settings screen: starting and cancelling a
//! run (whose measurements run in this very binary as `minerva-app bench-child`), the runs kept
//! in SQLite with their views, comparisons, imports and exports, and the app's settings.

use crate::commands::{off_ui, words, Answer, Svc};
use minerva_bench::report::Report;
use minerva_bench::view::{self, View};
use minerva_service::{AppSettings, BenchFormat, BenchRequest, BenchRunSummary};
use serde::Serialize;
use std::path::PathBuf;

/// A catalogue model with the files of it found on disk.
#[derive(Serialize)]
pub struct CatalogueModel {
    id: String,
    name: String,
    files: Vec<PathBuf>,
}

/// A run as the dashboard shows it.
#[derive(Serialize)]
pub struct BenchView {
    summary: BenchRunSummary,
    report: Report,
    #[serde(flatten)]
    view: View,
}

impl BenchView {
    fn of(summary: BenchRunSummary, report: Report) -> BenchView {
        BenchView {
            view: view::view(&report),
            summary,
            report,
        }
    }
}

#[tauri::command(rename_all = "snake_case")]
pub async fn bench_catalogue(svc: Svc<'_>) -> Answer<Vec<CatalogueModel>> {
    let svc = svc.inner().clone();
    off_ui(move || {
        let home = std::env::home_dir();
        Ok(svc
            .catalogue()
            .entries
            .iter()
            .map(|e| CatalogueModel {
                id: e.id.clone(),
                name: e.name.clone(),
                files: e.files(home.as_deref()),
            })
            .collect())
    })
    .await
}

#[tauri::command(rename_all = "snake_case")]
pub async fn bench_formats(svc: Svc<'_>, paths: Vec<PathBuf>) -> Answer<Vec<BenchFormat>> {
    let svc = svc.inner().clone();
    off_ui(move || svc.bench_formats(&paths).map_err(words)).await
}

#[tauri::command(rename_all = "snake_case")]
pub fn start_bench(svc: Svc<'_>, request: BenchRequest) -> Answer<u64> {
    let child = minerva_bench::measure::this_binary()?;
    svc.start_bench(request, child).map_err(words)
}

#[tauri::command(rename_all = "snake_case")]
pub fn cancel_bench(svc: Svc<'_>) {
    svc.cancel_bench();
}

#[tauri::command(rename_all = "snake_case")]
pub async fn bench_runs(svc: Svc<'_>) -> Answer<Vec<BenchRunSummary>> {
    let svc = svc.inner().clone();
    off_ui(move || svc.store().bench_runs().map_err(words)).await
}

#[tauri::command(rename_all = "snake_case")]
pub async fn bench_run(svc: Svc<'_>, id: i64) -> Answer<BenchView> {
    let svc = svc.inner().clone();
    off_ui(move || {
        let (summary, report) = svc.store().bench_run(id).map_err(words)?;
        Ok(BenchView::of(summary, report))
    })
    .await
}

/// Two runs side by side: the first's summary, the formats of both (`A · …`, `B · …`).
#[tauri::command(rename_all = "snake_case")]
pub async fn compare_bench_runs(svc: Svc<'_>, a: i64, b: i64) -> Answer<BenchView> {
    let svc = svc.inner().clone();
    off_ui(move || {
        let (summary, first) = svc.store().bench_run(a).map_err(words)?;
        let (_, second) = svc.store().bench_run(b).map_err(words)?;
        Ok(BenchView::of(summary, view::merge(&first, &second)))
    })
    .await
}

#[tauri::command(rename_all = "snake_case")]
pub async fn delete_bench_run(svc: Svc<'_>, id: i64) -> Answer<()> {
    let svc = svc.inner().clone();
    off_ui(move || svc.store().delete_bench_run(id).map_err(words)).await
}

#[tauri::command(rename_all = "snake_case")]
pub async fn import_bench_report(svc: Svc<'_>, path: PathBuf) -> Answer<BenchRunSummary> {
    let svc = svc.inner().clone();
    off_ui(move || svc.import_bench_report(&path).map_err(words)).await
}

/// Writes a stored run as `json`, `csv`, `markdown` or `html` to `path`.
#[tauri::command(rename_all = "snake_case")]
pub async fn export_bench_run(svc: Svc<'_>, id: i64, format: String, path: PathBuf) -> Answer<()> {
    let svc = svc.inner().clone();
    off_ui(move || {
        let (_, report) = svc.store().bench_run(id).map_err(words)?;
        let text = match format.as_str() {
            "json" => serde_json::to_string_pretty(&report).map_err(words)?,
            "csv" => minerva_bench::tables::csv(&report),
            "markdown" => minerva_bench::tables::markdown(&report),
            "html" => minerva_bench::html::page(&report),
            other => {
                return Err(format!(
                    "cannot export as '{other}': json, csv, markdown or html"
                ))
            }
        };
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))
    })
    .await
}

/// Writes a chart the UI drew as PNG (base64 from a canvas).
#[tauri::command(rename_all = "snake_case")]
pub async fn save_png(path: PathBuf, base64: String) -> Answer<()> {
    off_ui(move || {
        let data = base64.split_once(',').map_or(base64.as_str(), |(_, d)| d);
        let bytes = decode_base64(data).ok_or("the chart's PNG data is not base64")?;
        if !bytes.starts_with(b"\x89PNG") {
            return Err("the chart's data is not a PNG".into());
        }
        std::fs::write(&path, bytes).map_err(|e| format!("{}: {e}", path.display()))
    })
    .await
}

fn decode_base64(s: &str) -> Option<Vec<u8>> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(s.trim())
        .ok()
}

#[tauri::command(rename_all = "snake_case")]
pub async fn app_settings(svc: Svc<'_>) -> Answer<AppSettings> {
    let svc = svc.inner().clone();
    off_ui(move || {
        let mut s = svc.store().app_settings().map_err(words)?;
        s.data_folder = crate::data_folder();
        Ok(s)
    })
    .await
}

#[tauri::command(rename_all = "snake_case")]
pub async fn set_app_settings(svc: Svc<'_>, settings: AppSettings) -> Answer<AppSettings> {
    let svc = svc.inner().clone();
    off_ui(move || {
        let mut s = svc.store().set_app_settings(&settings).map_err(words)?;
        s.data_folder = crate::data_folder();
        Ok(s)
    })
    .await
}
