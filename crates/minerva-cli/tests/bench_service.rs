//! The benchmark as the app runs it, through the service: progress events per format, the
//! report stored when the run ends, its view (table, a chart per column, verdicts), and a
//! cancel that still stores what was measured. Measurements run as `minerva bench-child`.

use minerva_service::{BenchRequest, Service, ServiceEvent, Store};
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures");

fn service() -> (std::sync::Arc<Service>, mpsc::Receiver<ServiceEvent>) {
    let (tx, rx) = mpsc::channel();
    let tx = std::sync::Mutex::new(tx);
    let sink = std::sync::Arc::new(move |e: ServiceEvent| {
        let _ = tx.lock().unwrap().send(e);
    });
    (Service::new(Store::in_memory().unwrap(), sink), rx)
}

fn request(runs: usize) -> BenchRequest {
    BenchRequest {
        model: "tiny llama".into(),
        paths: [
            "llama/f32",
            "llama/gguf-q4_0/llama-Q4_0.gguf",
            "llama/mlx-4bit",
        ]
        .map(|m| PathBuf::from(FIXTURES).join(m))
        .to_vec(),
        backend: "cpu".into(),
        prompt_tokens: vec![8, 16],
        gen_tokens: 4,
        runs,
        quality_tokens: 64,
        remotes: Vec::new(),
    }
}

fn child() -> Vec<std::ffi::OsString> {
    vec![env!("CARGO_BIN_EXE_minerva").into(), "bench-child".into()]
}

#[test]
fn a_run_reports_progress_and_is_stored_with_its_view() {
    let (svc, events) = service();
    let formats = svc.bench_formats(&request(1).paths).unwrap();
    let labels: Vec<&str> = formats.iter().map(|f| f.label.as_str()).collect();
    assert_eq!(labels, ["safetensors F32", "gguf Q4_0", "mlx 4-bit"]);
    let job = svc.start_bench(request(2), child()).unwrap();
    // One run at a time.
    let again = svc
        .start_bench(request(1), child())
        .unwrap_err()
        .to_string();
    assert!(again.contains("already running"), "{again}");
    let mut last_done = [0usize; 3];
    let run = loop {
        match events.recv_timeout(Duration::from_secs(300)).unwrap() {
            ServiceEvent::BenchProgress {
                job: j,
                format,
                done,
                total,
                ..
            } => {
                assert_eq!(j, job);
                assert!(done >= last_done[format] && done <= total);
                last_done[format] = done;
            }
            ServiceEvent::BenchDone { job: j, run } => {
                assert_eq!(j, job);
                break run;
            }
            ServiceEvent::BenchError { message, .. } => panic!("{message}"),
            _ => {}
        }
    };
    // Every format reached its last step: quality, then 2 runs × (cold + 2 lengths).
    assert_eq!(last_done, [7, 7, 7]);
    assert!(!run.interrupted && !run.imported);
    assert_eq!(svc.store().bench_runs().unwrap(), [run.clone()]);
    let (_, report) = svc.store().bench_run(run.id).unwrap();
    assert!(report.formats.iter().all(|f| f.runs.len() == 2));
    let view = minerva_bench::view::view(&report);
    assert_eq!(view.charts.len(), view.columns.len());
    assert_eq!(view.rows.len(), 3);
    assert!(view.rows[0].reference);
    assert!(
        view.verdicts
            .iter()
            .any(|v| v.starts_with("gguf Q4_0:") && v.contains("KL")),
        "{:?}",
        view.verdicts
    );
}

#[test]
fn cancel_stores_what_was_measured() {
    let (svc, events) = service();
    svc.start_bench(request(100), child()).unwrap();
    let run = loop {
        match events.recv_timeout(Duration::from_secs(300)).unwrap() {
            ServiceEvent::BenchProgress { phase, .. } if phase.starts_with("run 2/") => {
                svc.cancel_bench()
            }
            ServiceEvent::BenchDone { run, .. } => break run,
            ServiceEvent::BenchError { message, .. } => panic!("{message}"),
            _ => {}
        }
    };
    assert!(run.interrupted);
    let (_, report) = svc.store().bench_run(run.id).unwrap();
    let runs: Vec<usize> = report.formats.iter().map(|f| f.runs.len()).collect();
    assert_eq!(runs, [1, 0, 0]);
    // Another run may start once it ended.
    svc.start_bench(request(1), child()).unwrap();
    svc.cancel_bench();
    while !matches!(
        events.recv_timeout(Duration::from_secs(300)).unwrap(),
        ServiceEvent::BenchDone { .. } | ServiceEvent::BenchError { .. }
    ) {}
}

#[test]
fn remote_models_run_only_on_the_engines_added_with_their_keys() {
    let (svc, events) = service();
    // A port that was just free: no engine listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}/v1");
    let mut req = request(1);
    req.paths.clear();
    req.remotes = vec![format!("{url}#m")];
    let e = svc
        .start_bench(req.clone(), child())
        .unwrap_err()
        .to_string();
    assert!(e.contains("is not among the remote engines"), "{e}");
    let mut settings = svc.store().app_settings().unwrap();
    settings
        .remote_engines
        .push(minerva_service::app_settings::RemoteSource {
            url: url.clone(),
            api_key: Some("sk-test".into()),
        });
    svc.store().set_app_settings(&settings).unwrap();
    // Added, the engine is asked, and its failure ends the run in words.
    svc.start_bench(req, child()).unwrap();
    let message = loop {
        match events.recv_timeout(Duration::from_secs(60)).unwrap() {
            ServiceEvent::BenchError { message, .. } => break message,
            ServiceEvent::BenchDone { run, .. } => panic!("{run:?}"),
            _ => {}
        }
    };
    assert!(
        message.starts_with(&format!("cannot reach the engine at {url}")),
        "{message}"
    );
}
