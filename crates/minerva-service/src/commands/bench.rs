//! The commands of the benchmark dashboard and the settings screen: starting and cancelling a
//! run (whose measurements run in this very binary, as a child process), the runs kept in SQLite
//! with their views, comparisons, imports and exports, and the app's settings.

use super::{answer, args, failed, Answer, Caller, CommandError};
use crate::{AppSettings, BenchRequest, Service};
use minerva_bench::report::Report;
use minerva_bench::view::{self, View};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;

/// A catalogue model with the files of it found on disk.
#[derive(Serialize)]
struct CatalogueModel {
    id: String,
    name: String,
    files: Vec<PathBuf>,
}

/// A run as the dashboard shows it.
#[derive(Serialize)]
struct BenchView {
    summary: crate::BenchRunSummary,
    report: Report,
    #[serde(flatten)]
    view: View,
}

impl BenchView {
    fn of(summary: crate::BenchRunSummary, report: Report) -> BenchView {
        BenchView {
            view: view::view(&report),
            summary,
            report,
        }
    }
}

#[derive(Deserialize)]
struct Paths {
    paths: Vec<PathBuf>,
}

#[derive(Deserialize)]
struct Start {
    request: BenchRequest,
}

#[derive(Deserialize)]
struct RunId {
    id: i64,
}

#[derive(Deserialize)]
struct Pair {
    a: i64,
    b: i64,
}

#[derive(Deserialize)]
struct Import {
    path: PathBuf,
}

#[derive(Deserialize)]
struct Export {
    id: i64,
    format: String,
    path: PathBuf,
}

#[derive(Deserialize)]
struct Png {
    path: PathBuf,
    base64: String,
}

#[derive(Deserialize)]
struct NewAppSettings {
    settings: AppSettings,
}

pub(super) fn call(
    svc: &Arc<Service>,
    caller: &Caller,
    command: &str,
    json: Value,
) -> Option<Answer> {
    let access = &caller.access;
    // The engines' keys stay on this side; they are edited by their own commands.
    let with_folder = |mut s: AppSettings| {
        s.data_folder = caller.data_folder.clone();
        s.remote_engines.iter_mut().for_each(|r| r.api_key = None);
        answer(s)
    };
    Some(match command {
        "bench_catalogue" => {
            let home = dirs::home_dir();
            let entries = svc.catalogue().entries;
            let files = |e: &crate::catalogue::Entry| {
                let files = e.files(home.as_deref());
                files
                    .into_iter()
                    .filter(|f| access.readable(f).is_ok())
                    .collect()
            };
            answer(
                entries
                    .iter()
                    .map(|e| CatalogueModel {
                        id: e.id.clone(),
                        name: e.name.clone(),
                        files: files(e),
                    })
                    .collect::<Vec<_>>(),
            )
        }
        "bench_formats" => (|| {
            let a: Paths = args(command, json)?;
            let paths = a
                .paths
                .iter()
                .map(|p| access.readable(p))
                .collect::<Result<Vec<_>, _>>()?;
            answer(svc.bench_formats(&paths).map_err(failed)?)
        })(),
        "start_bench" => (|| {
            let a: Start = args(command, json)?;
            for p in &a.request.paths {
                access.readable(p)?;
            }
            let child = minerva_bench::measure::this_binary().map_err(CommandError::Failed)?;
            answer(svc.start_bench(a.request, child).map_err(failed)?)
        })(),
        "cancel_bench" => answer(svc.cancel_bench()),
        "bench_runs" => svc.store().bench_runs().map_err(failed).and_then(answer),
        "bench_run" => (|| {
            let a: RunId = args(command, json)?;
            let (summary, report) = svc.store().bench_run(a.id).map_err(failed)?;
            answer(BenchView::of(summary, report))
        })(),
        // Two runs side by side: the first's summary, the formats of both (`A · …`, `B · …`).
        "compare_bench_runs" => (|| {
            let a: Pair = args(command, json)?;
            let (summary, first) = svc.store().bench_run(a.a).map_err(failed)?;
            let (_, second) = svc.store().bench_run(a.b).map_err(failed)?;
            answer(BenchView::of(summary, view::merge(&first, &second)))
        })(),
        "delete_bench_run" => args::<RunId>(command, json)
            .and_then(|a| answer(svc.store().delete_bench_run(a.id).map_err(failed)?)),
        "import_bench_report" => (|| {
            let a: Import = args(command, json)?;
            let path = access.readable(&a.path)?;
            answer(svc.import_bench_report(&path).map_err(failed)?)
        })(),
        // Writes a stored run as `json`, `csv`, `markdown` or `html` to `path`.
        "export_bench_run" => (|| {
            access.writes_files("Exporting a run")?;
            let a: Export = args(command, json)?;
            let (_, report) = svc.store().bench_run(a.id).map_err(failed)?;
            let text = match a.format.as_str() {
                "json" => serde_json::to_string_pretty(&report).map_err(failed)?,
                "csv" => minerva_bench::tables::csv(&report),
                "markdown" => minerva_bench::tables::markdown(&report),
                "html" => minerva_bench::html::page(&report),
                other => {
                    return Err(CommandError::BadArguments(format!(
                        "cannot export as '{other}': json, csv, markdown or html"
                    )))
                }
            };
            std::fs::write(&a.path, text)
                .map_err(|e| CommandError::Failed(format!("{}: {e}", a.path.display())))?;
            answer(())
        })(),
        // Writes a chart the UI drew as PNG (base64 from a canvas).
        "save_png" => (|| {
            access.writes_files("Saving a chart")?;
            let a: Png = args(command, json)?;
            let data = a
                .base64
                .split_once(',')
                .map_or(a.base64.as_str(), |(_, d)| d);
            let bytes = decode_base64(data).ok_or_else(|| {
                CommandError::BadArguments("the chart's PNG data is not base64".into())
            })?;
            if !bytes.starts_with(b"\x89PNG") {
                return Err(CommandError::BadArguments(
                    "the chart's data is not a PNG".into(),
                ));
            }
            std::fs::write(&a.path, bytes)
                .map_err(|e| CommandError::Failed(format!("{}: {e}", a.path.display())))?;
            answer(())
        })(),
        "app_settings" => svc
            .store()
            .app_settings()
            .map_err(failed)
            .and_then(with_folder),
        "set_app_settings" => (|| {
            let mut a: NewAppSettings = args(command, json)?;
            let now = svc.store().app_settings().map_err(failed)?;
            a.settings.remote_engines = now.remote_engines;
            if let crate::commands::Access::Served { .. } = access {
                // The folders scanned are the server's to choose, not a browser's.
                a.settings.model_folders = now.model_folders;
            }
            let saved = svc.store().set_app_settings(&a.settings).map_err(failed)?;
            with_folder(saved)
        })(),
        _ => return None,
    })
}

fn decode_base64(s: &str) -> Option<Vec<u8>> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(s.trim())
        .ok()
}
