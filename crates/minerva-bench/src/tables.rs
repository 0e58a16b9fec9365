//! The report as tables: Markdown (a row per format, the median of every figure) and CSV (the
//! long form, a line per format, run and prompt length, for spreadsheets). A figure not
//! measured is `–` in Markdown and empty in CSV.

use crate::figures::figures;
use crate::report::Report;

/// One Markdown table; the reference format is marked.
pub fn markdown(r: &Report) -> String {
    let figs = figures(r);
    let mut head = vec!["format".to_string()];
    head.extend(figs.iter().map(|f| f.short.clone()));
    let mut out = format!("| {} |\n|{}\n", head.join(" | "), "---|".repeat(head.len()));
    for row in crate::view::rows(r, &figs) {
        let mut cells = vec![if row.reference {
            format!("{} (reference)", row.label)
        } else {
            row.label
        }];
        cells.extend(
            row.cells
                .into_iter()
                .map(|c| c.unwrap_or_else(|| "–".into())),
        );
        out.push_str(&format!("| {} |\n", cells.join(" | ")));
    }
    for f in &r.formats {
        if let Some(note) = &f.note {
            out.push_str(&format!("\n{}: {note}\n", f.label));
        }
    }
    if r.interrupted {
        out.push_str("\nStopped by the user: the figures are those measured until then.\n");
    }
    out
}

fn optional<T: ToString>(v: Option<T>) -> String {
    v.map_or(String::new(), |v| v.to_string())
}

/// CSV: one line per format, run and prompt length, with the raw figures.
pub fn csv(r: &Report) -> String {
    let mut out = String::from(
        "format,run,load_cold_ms,load_warm_ms,prompt_tokens,prompt_tokens_real,ttft_ms,\
         prefill_tokens_per_s,decode_tokens_per_s,peak_rss_bytes,gpu_allocated_bytes,\
         gpu_reserved_bytes,gpu_driver_bytes\n",
    );
    for f in &r.formats {
        for (i, run) in f.runs.iter().enumerate() {
            for (j, n) in r.settings.prompt_tokens.iter().enumerate() {
                let finite = |x: f64| Some(x).filter(|x| x.is_finite());
                let get = |v: &Vec<f64>| optional(v.get(j).copied().and_then(finite));
                out.push_str(&format!(
                    "\"{}\",{},{},{},{},{},{},{},{},{},{},{},{}\n",
                    f.label.replace('"', "\"\""),
                    i + 1,
                    optional(run.load_cold_ms.and_then(finite)),
                    optional(run.load_warm_ms.and_then(finite)),
                    n,
                    optional(run.prompt_tokens.get(j)),
                    get(&run.ttft_ms),
                    get(&run.prefill_tokens_per_s),
                    optional(finite(run.decode_tokens_per_s)),
                    optional(run.peak_rss_bytes),
                    optional(run.gpu_allocated_bytes),
                    optional(run.gpu_reserved_bytes),
                    optional(run.gpu_driver_bytes),
                ));
            }
        }
    }
    out
}
