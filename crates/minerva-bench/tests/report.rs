//! The report: medians, the Markdown and CSV forms, the HTML page's charts, a remote engine's
//! entry (its unmeasured figures shown as such), and the committed JSON Schema, which must
//! match the types (regenerate with MINERVA_WRITE_SCHEMA=1) and accept a real report.

use minerva_bench::quality::Quality;
use minerva_bench::report::*;
use minerva_bench::tables::{csv, markdown};
use std::path::Path;

fn run(load: f64, decode: f64) -> RunFigures {
    RunFigures {
        load_cold_ms: Some(load * 2.0),
        load_warm_ms: Some(load),
        device_ms: Some(80.0),
        ttft_ms: vec![10.0, 40.0],
        prefill_tokens_per_s: vec![12_800.0, 12_800.0],
        prompt_tokens: vec![128, 512],
        decode_tokens_per_s: decode,
        peak_rss_bytes: Some(200 << 20),
        gpu_allocated_bytes: None,
        gpu_reserved_bytes: None,
        gpu_driver_bytes: None,
        gpu_driver_per_process: None,
    }
}

fn report() -> Report {
    let runs = vec![run(100.0, 30.0), run(120.0, 32.0), run(90.0, 31.0)];
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
            model: "tiny".into(),
            backend: "cpu".into(),
            prompt_tokens: vec![128, 512],
            gen_tokens: 64,
            runs: 3,
            reference: "safetensors f32".into(),
        },
        formats: vec![
            FormatResult {
                label: "safetensors f32".into(),
                format: "safetensors".into(),
                path: "/m/f32".into(),
                bytes_on_disk: Some(12 << 20),
                summary: Summary::of(&runs[..1], 2),
                runs: runs[..1].to_vec(),
                quality: Some(Quality {
                    positions: 10,
                    kl_mean: Some(0.0),
                    kl_max: Some(0.0),
                    top1_agreement: 1.0,
                    perplexity: Some(12.0),
                    unaligned: None,
                }),
                note: None,
            },
            FormatResult {
                label: "gguf <q4_0>".into(),
                format: "gguf".into(),
                path: "/m/q4.gguf".into(),
                bytes_on_disk: Some(3 << 20),
                summary: Summary::of(&runs, 2),
                runs,
                quality: Some(Quality {
                    positions: 10,
                    kl_mean: Some(2e-6),
                    kl_max: Some(0.2),
                    top1_agreement: 0.9,
                    perplexity: Some(12.5),
                    unaligned: None,
                }),
                note: None,
            },
        ],
        interrupted: false,
    }
}

#[test]
fn medians_and_tables() {
    assert_eq!(
        Stat::of(&[3.0, 1.0, 2.0]),
        Some(Stat {
            median: 2.0,
            min: 1.0,
            max: 3.0
        })
    );
    assert_eq!(Stat::of(&[4.0, 1.0]).unwrap().median, 2.5);
    assert_eq!(Stat::of(&[f64::NAN]), None);
    let r = report();
    let s = &r.formats[1].summary;
    assert_eq!(s.load_warm_ms.unwrap().median, 100.0);
    assert_eq!(
        s.decode_tokens_per_s.unwrap(),
        Stat {
            median: 31.0,
            min: 30.0,
            max: 32.0
        }
    );
    let md = markdown(&r);
    // No GPU column on the CPU; a KL too small for 4 decimals in scientific notation.
    assert!(!md.contains("GPU"), "{md}");
    assert!(
        md.contains("| safetensors f32 (reference) | 12.0 |"),
        "{md}"
    );
    assert!(md.contains("| gguf <q4_0> | 3.0 | 200 | 100 | 10.0 | 12800 | 40.0 | 12800 | 31.0 | 200 | 2.0e-6 | 0.2000 | 0.900 | 12.50 |"), "{md}");
    let csv = csv(&r);
    assert_eq!(csv.lines().count(), 1 + (1 + 3) * 2);
    assert!(
        csv.lines()
            .nth(3)
            .unwrap()
            .starts_with("\"gguf <q4_0>\",1,200,100,128,128,10,12800,30,"),
        "{csv}"
    );
}

/// The report with a remote engine after the formats: timed requests, no load or memory
/// figures, no size, top-1 agreement alone, and one without log-probabilities.
fn with_remotes() -> Report {
    let mut r = report();
    let remote = |ttft: f64, decode: f64| RunFigures {
        load_cold_ms: None,
        load_warm_ms: None,
        device_ms: None,
        ttft_ms: vec![ttft, 4.0 * ttft],
        prefill_tokens_per_s: vec![6_400.0, 6_400.0],
        prompt_tokens: vec![129, 513],
        decode_tokens_per_s: decode,
        peak_rss_bytes: None,
        gpu_allocated_bytes: None,
        gpu_reserved_bytes: None,
        gpu_driver_bytes: None,
        gpu_driver_per_process: None,
    };
    for (label, runs, quality, note) in [
        (
            "remote: tiny @ 10.0.0.5:8000",
            vec![remote(20.0, 45.0)],
            Some(Quality {
                positions: 60,
                kl_mean: None,
                kl_max: None,
                top1_agreement: 0.95,
                perplexity: None,
                unaligned: Some(4),
            }),
            None,
        ),
        (
            "remote: tiny @ 10.0.0.6:8000",
            vec![remote(20.0, 40.0)],
            None,
            Some("no quality figures: the engine sent no log-probabilities".to_string()),
        ),
    ] {
        r.formats.push(FormatResult {
            label: label.into(),
            format: "remote".into(),
            path: "http://10.0.0.5:8000/v1#tiny".into(),
            bytes_on_disk: None,
            summary: Summary::of(&runs, 2),
            runs,
            quality,
            note,
        });
    }
    r
}

#[test]
fn a_remote_engine_shows_dashes_for_what_it_does_not_measure() {
    let r = with_remotes();
    let md = markdown(&r);
    // size, loads – ; TTFT and prefill at both lengths and decode measured; RSS, KL – ;
    // top-1 measured; perplexity – .
    assert!(
        md.contains("| remote: tiny @ 10.0.0.5:8000 | – | – | – | 20.0 | 6400 | 80.0 | 6400 | 45.0 | – | – | – | 0.950 | – |"),
        "{md}"
    );
    assert!(
        md.contains("| remote: tiny @ 10.0.0.6:8000 | – | – | – | 20.0 |"),
        "{md}"
    );
    assert!(
        md.contains("remote: tiny @ 10.0.0.6:8000: no quality figures: the engine sent no log-probabilities"),
        "{md}"
    );
    let csv = csv(&r);
    assert!(
        csv.lines()
            .any(|l| l == "\"remote: tiny @ 10.0.0.5:8000\",1,,,128,129,20,6400,45,,,,"),
        "{csv}"
    );
    let v = minerva_bench::view::verdicts(&r);
    assert!(
        v.contains(&"remote: tiny @ 10.0.0.5:8000: 1.5× faster decode than safetensors f32, same top token 95% of the time.".to_string()),
        "{v:?}"
    );
    assert!(
        v.contains(&"Fastest decode: remote: tiny @ 10.0.0.5:8000 (45.0 tokens/s).".to_string()),
        "{v:?}"
    );
    // The closest by KL is still a local format: an engine has no KL.
    assert!(
        v.contains(&"Closest to safetensors f32: gguf <q4_0> (KL 2.0e-6).".to_string()),
        "{v:?}"
    );
    // Unmeasured figures are null in the JSON, and read back.
    let json = serde_json::to_value(&r).unwrap();
    let remote = &json["formats"][2];
    for key in [
        "load_cold_ms",
        "load_warm_ms",
        "device_ms",
        "peak_rss_bytes",
    ] {
        assert!(remote["runs"][0][key].is_null(), "{key}: {remote}");
    }
    assert!(remote["bytes_on_disk"].is_null() && remote["quality"]["kl_mean"].is_null());
    assert!(remote["summary"]["load_cold_ms"].is_null());
    let back: Report = serde_json::from_value(json).unwrap();
    assert_eq!(back, r);
    let page = minerva_bench::html::page(&r);
    assert!(page.contains("remote: tiny @ 10.0.0.5:8000"));
}

#[test]
fn only_remote_engines_have_no_reference_and_no_quality() {
    let mut r = with_remotes();
    r.formats.drain(..2);
    r.settings.reference = String::new();
    for f in &mut r.formats {
        f.quality = None;
    }
    let v = minerva_bench::view::verdicts(&r);
    assert_eq!(
        v[0],
        "Fastest decode: remote: tiny @ 10.0.0.5:8000 (45.0 tokens/s)."
    );
    let page = minerva_bench::html::page(&r);
    assert!(
        page.contains("no local format to measure quality against"),
        "{page}"
    );
    assert!(!markdown(&r).contains("(reference)"));
}

#[test]
fn a_version_2_report_reads() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/reports/tinyllama-1.1b-h100.json");
    let r: Report = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(r.schema_version, 2);
    assert!(r
        .formats
        .iter()
        .all(|f| f.runs.iter().all(|run| run.load_cold_ms.is_some())));
}

#[test]
fn the_committed_schema_matches_the_types_and_describes_a_report() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../benches/report.schema.json");
    let schema = schema();
    let text = serde_json::to_string_pretty(&schema).unwrap() + "\n";
    if std::env::var_os("MINERVA_WRITE_SCHEMA").is_some() {
        std::fs::write(&path, &text).unwrap();
    }
    let committed = std::fs::read_to_string(&path)
        .expect("benches/report.schema.json (MINERVA_WRITE_SCHEMA=1 writes it)");
    assert_eq!(
        committed, text,
        "the schema changed: regenerate it with MINERVA_WRITE_SCHEMA=1 and bump SCHEMA_VERSION"
    );
    // Every required top-level field of the schema is in a serialized report.
    let value = serde_json::to_value(with_remotes()).unwrap();
    for field in schema["required"].as_array().unwrap() {
        assert!(value.get(field.as_str().unwrap()).is_some(), "{field}");
    }
    let back: Report = serde_json::from_value(value).unwrap();
    assert_eq!(back, with_remotes());
}

#[test]
fn the_page_has_a_chart_per_figure_with_a_bar_per_format() {
    let r = report();
    let page = minerva_bench::html::page(&r);
    let figures = minerva_bench::figures::figures(&r);
    assert_eq!(page.matches("<svg ").count(), figures.len());
    // Each chart: a bar per format in its own colour, the reference's marked; labels escaped.
    assert_eq!(
        page.matches("<rect class=\"bar f1\"").count(),
        figures.len()
    );
    assert_eq!(
        page.matches("<rect class=\"bar f0 reference\"").count(),
        figures.len()
    );
    assert!(page.contains("gguf &lt;q4_0&gt;") && !page.contains("gguf <q4_0>"));
    // Whiskers only where the runs differ: the reference ran once, the other three times,
    // and only its load, warm load and decode vary.
    assert_eq!(page.matches("class=\"whisker\"").count(), 3);
    assert!(
        page.contains("<title>decode (tok/s), higher is better</title>"),
        "{page}"
    );
    // No scripts or outside files: the page stands alone.
    assert!(!page.contains("<script") && !page.contains("src=") && !page.contains("href="));
}

#[test]
fn verdicts_say_how_each_format_compares_in_words() {
    let r = report();
    let v = minerva_bench::view::verdicts(&r);
    // Decode 31 against the reference's 30: within 5 %, so on par; 3 MiB of 12 is 25 %.
    assert_eq!(
        v[0],
        "gguf <q4_0>: decode on par with safetensors f32, 25% of its size, KL 2.0e-6 (same top token 90% of the time)."
    );
    assert!(
        v.contains(&"Fastest decode: gguf <q4_0> (31.0 tokens/s).".to_string()),
        "{v:?}"
    );
    assert!(
        v.contains(&"Closest to safetensors f32: gguf <q4_0> (KL 2.0e-6).".to_string()),
        "{v:?}"
    );
}

#[test]
fn two_runs_merge_into_one_comparison() {
    let a = report();
    let mut b = report();
    b.settings.prompt_tokens = vec![512, 1024];
    let m = minerva_bench::view::merge(&a, &b);
    let labels: Vec<&str> = m.formats.iter().map(|f| f.label.as_str()).collect();
    assert_eq!(
        labels,
        [
            "A · safetensors f32",
            "A · gguf <q4_0>",
            "B · safetensors f32",
            "B · gguf <q4_0>"
        ]
    );
    assert_eq!(m.settings.reference, "A · safetensors f32");
    // Only the prompt length both ran keeps its per-length figures: a's 512 is its second,
    // b's is its first.
    assert_eq!(m.settings.prompt_tokens, [512]);
    assert_eq!(m.formats[1].runs[0].ttft_ms, [40.0]);
    assert_eq!(m.formats[3].runs[0].ttft_ms, [10.0]);
    assert_eq!(m.formats[1].summary.ttft_ms.len(), 1);
    let view = minerva_bench::view::view(&m);
    assert_eq!(view.rows.len(), 4);
    assert_eq!(view.charts.len(), view.columns.len());
}
