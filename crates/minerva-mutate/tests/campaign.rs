//! A bounded campaign on every test run: a new seed each time (printed, with the failing
//! inputs saved under target/mutate-failures), about two minutes on two workers. Set
//! MINERVA_MUTATE_SECONDS to run longer; `minerva-mutate --help` runs campaigns by hand.

use std::process::Command;

#[test]
fn a_bounded_campaign_finds_no_panic_abort_hang_or_unnamed_error() {
    let seconds = std::env::var("MINERVA_MUTATE_SECONDS").unwrap_or_else(|_| "120".into());
    let out = concat!(env!("CARGO_MANIFEST_DIR"), "/../../target/mutate-failures");
    let run = Command::new(env!("CARGO_BIN_EXE_minerva-mutate"))
        .args(["--seconds", &seconds, "--workers", "2", "--out", out])
        .output()
        .expect("run minerva-mutate");
    let text = String::from_utf8_lossy(&run.stdout);
    println!("{text}{}", String::from_utf8_lossy(&run.stderr));
    assert!(text.contains(" cases in "), "no summary: {text}");
    let cases: u64 = text
        .lines()
        .find_map(|l| {
            l.split(" cases in ")
                .next()
                .filter(|_| l.contains(" cases in "))
        })
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0);
    assert!(cases > 1000, "only {cases} cases ran");
    assert!(
        run.status.success(),
        "failing cases, saved under {out}:\n{text}"
    );
}
