//! Benchmark runs in SQLite (stored, listed newest first, read back, deleted), reports imported
//! from files with clear errors for anything else, and the app's settings with their defaults.

use minerva_bench::report::{Machine, Report, Settings, SCHEMA_VERSION};
use minerva_service::{AppSettings, Store};

fn report(model: &str) -> Report {
    Report {
        schema_version: SCHEMA_VERSION,
        engine_version: "0.1.0".into(),
        started: "2026-11-25T06:00:00Z".into(),
        machine: Machine {
            cpu: "test".into(),
            cores: 2,
            ram_bytes: 1 << 34,
            device: "cpu".into(),
        },
        settings: Settings {
            model: model.into(),
            backend: "cpu".into(),
            prompt_tokens: vec![16],
            gen_tokens: 8,
            runs: 1,
            reference: "safetensors F32".into(),
        },
        formats: Vec::new(),
        interrupted: false,
    }
}

#[test]
fn runs_are_kept_listed_newest_first_and_deleted() {
    let store = Store::in_memory().unwrap();
    let a = store.add_bench_run(&report("first"), false).unwrap();
    let b = store.add_bench_run(&report("second"), true).unwrap();
    let list = store.bench_runs().unwrap();
    assert_eq!(
        list.iter()
            .map(|r| (r.model.as_str(), r.imported))
            .collect::<Vec<_>>(),
        [("second", true), ("first", false)]
    );
    let (summary, back) = store.bench_run(a.id).unwrap();
    assert_eq!((summary, back), (a.clone(), report("first")));
    store.delete_bench_run(a.id).unwrap();
    assert_eq!(store.bench_runs().unwrap(), [b]);
    let err = store.delete_bench_run(a.id).unwrap_err().to_string();
    assert!(err.contains(&format!("no bench run {}", a.id)), "{err}");
}

#[test]
fn imports_read_reports_and_name_the_file_of_anything_else() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.json");
    std::fs::write(&good, serde_json::to_string(&report("imported")).unwrap()).unwrap();
    let r = minerva_service::bench_runs::read_report(&good).unwrap();
    assert_eq!(r.settings.model, "imported");

    let cases = [
        ("notjson.json", "{ nope".to_string(), "not JSON"),
        ("other.json", "{\"a\": 1}".to_string(), "no schema_version"),
        (
            "future.json",
            format!("{{\"schema_version\": {}}}", SCHEMA_VERSION + 1),
            "this Minerva reads version",
        ),
        (
            "partial.json",
            format!("{{\"schema_version\": {SCHEMA_VERSION}}}"),
            "not a bench report",
        ),
    ];
    for (name, text, want) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let err = minerva_service::bench_runs::read_report(&path)
            .unwrap_err()
            .to_string();
        assert!(err.contains(name) && err.contains(want), "{err}");
    }
    let err = minerva_service::bench_runs::read_report(&dir.path().join("missing.json"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("missing.json"), "{err}");
}

#[test]
fn app_settings_default_save_and_are_made_sound() {
    let store = Store::in_memory().unwrap();
    assert_eq!(store.app_settings().unwrap(), AppSettings::default());
    let saved = store
        .set_app_settings(&AppSettings {
            adapter: "cpu".into(),
            default_ctx: Some(2048),
            model_folders: vec!["/models".into(), " ".into()],
            data_folder: String::new(),
            theme: "dark".into(),
            remote_engines: Vec::new(),
        })
        .unwrap();
    assert_eq!(saved.model_folders, ["/models"]);
    assert_eq!(store.app_settings().unwrap(), saved);
    let odd = store
        .set_app_settings(&AppSettings {
            theme: "purple".into(),
            default_ctx: Some(0),
            adapter: String::new(),
            ..saved
        })
        .unwrap();
    assert_eq!(
        (odd.theme.as_str(), odd.default_ctx, odd.adapter.as_str()),
        ("system", None, "auto")
    );
}
