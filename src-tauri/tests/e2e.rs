//! The real app end to end (tests/e2e/app.py, then tests/e2e/bench.py for the benchmark and
//! settings screens): under a virtual display, through tauri-driver and WebKitWebDriver, with
//! SmolLM2 and the fixture models. One test runs both: they share tauri-driver's port. Screenshots land in target/e2e-screenshots. Outside CI a
//! machine without the tools or the model skips loudly; under CI that is a failure.

use std::path::{Path, PathBuf};
use std::process::Command;

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

fn missing_tools() -> Vec<&'static str> {
    [
        "tauri-driver",
        "WebKitWebDriver",
        "xvfb-run",
        "dbus-run-session",
        "python3",
    ]
    .into_iter()
    .filter(|t| {
        !Command::new("sh")
            .args(["-c", &format!("command -v {t}")])
            .output()
            .is_ok_and(|o| o.status.success())
    })
    .collect()
}

#[test]
fn the_app_loads_a_model_and_chats_like_a_person_uses_it() {
    let model = Path::new(ROOT).join(".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf");
    let missing = missing_tools();
    if !missing.is_empty() || !model.is_file() {
        let why = format!(
            "missing {missing:?}{}; run scripts/setup.sh",
            if model.is_file() {
                ""
            } else {
                " and the SmolLM2 model"
            }
        );
        assert!(std::env::var_os("CI").is_none(), "{why}");
        eprintln!("SKIPPED: {why}");
        return;
    }
    let out = PathBuf::from(ROOT).join("target/e2e-screenshots");
    let model = model.display().to_string();
    let thinking = Path::new(ROOT).join("tests/fixtures/thinking");
    script(
        "app.py",
        &[
            "--model",
            &model,
            "--thinking",
            &thinking.display().to_string(),
        ],
        &out,
        &[
            "01-models-card",
            "06-chat-reply",
            "09-chat-after-restart",
            "10-models-catalogue",
            "11-chat-reasoning",
            "12-models-after-close-during-load",
        ],
    );
    // The benchmark dashboard and the settings screen (after the chat's run, never beside it).
    let report = Path::new(ROOT).join("tests/fixtures/reports/tinyllama-1.1b-h100.json");
    script(
        "bench.py",
        &["--report", &report.display().to_string()],
        &out,
        &[
            "13-settings",
            "14-bench-progress",
            "15-bench-results",
            "16-bench-cancelled",
            "17-bench-imported",
            "18-bench-history-open",
            "19-bench-compare",
            "20-settings-cpu",
        ],
    );
}

/// Runs `tests/e2e/<name>` on the app under a virtual display and a D-Bus session, with
/// `args` and `--out`; it must pass and leave each of `shots`.
fn script(name: &str, args: &[&str], out: &Path, shots: &[&str]) {
    let o = Command::new("xvfb-run")
        .args([
            "-a",
            "-s",
            "-screen 0 1280x800x24",
            "dbus-run-session",
            "--",
        ])
        .arg("python3")
        .arg(Path::new(ROOT).join("tests/e2e").join(name))
        .arg("--app")
        .arg(env!("CARGO_BIN_EXE_minerva-app"))
        .args(args)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    eprintln!("{stdout}");
    assert!(o.status.success(), "{name}: {stdout}\n{stderr}");
    for shot in shots {
        assert!(out.join(format!("{shot}.png")).is_file(), "{shot}.png");
    }
}

#[test]
fn without_a_display_the_app_says_so_and_shows_the_command_line() {
    let o = Command::new(env!("CARGO_BIN_EXE_minerva-app"))
        .env_remove("DISPLAY")
        .env_remove("WAYLAND_DISPLAY")
        .output()
        .unwrap();
    assert!(!o.status.success());
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("needs a display"), "{stderr}");
    assert!(stderr.contains("minerva chat MODEL"), "{stderr}");
}
