//! A report as front ends show it: columns (one per figure), rows of formatted cells, a chart
//! per column, and verdicts in plain words. Also two reports merged into one, so that two runs
//! (CPU against GPU, two machines) compare in the same table and charts.

use crate::figures::{figures, number, Better, Figure};
use crate::report::{Report, Stat};
use crate::svg::bar_chart;
use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Column {
    pub title: String,
    pub short: String,
    pub unit: String,
    /// `higher` or `lower`.
    pub better: &'static str,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    pub label: String,
    pub reference: bool,
    /// One per column; None where not measured.
    pub cells: Vec<Option<String>>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct View {
    pub columns: Vec<Column>,
    pub rows: Vec<Row>,
    /// SVG markup, one chart per column.
    pub charts: Vec<String>,
    pub verdicts: Vec<String>,
}

/// Everything a front end shows of a report.
pub fn view(r: &Report) -> View {
    let figs = figures(r);
    let labels: Vec<String> = r.formats.iter().map(|f| f.label.clone()).collect();
    let reference = labels.iter().position(|l| *l == r.settings.reference);
    View {
        columns: figs
            .iter()
            .map(|f| Column {
                title: f.title.clone(),
                short: f.short.clone(),
                unit: f.unit.to_string(),
                better: match f.better {
                    Better::Higher => "higher",
                    Better::Lower => "lower",
                },
            })
            .collect(),
        rows: rows(r, &figs),
        charts: figs
            .iter()
            .map(|f| bar_chart(f, &labels, reference))
            .collect(),
        verdicts: verdicts(r),
    }
}

/// The table's rows: each format's medians, formatted.
pub fn rows(r: &Report, figs: &[Figure]) -> Vec<Row> {
    r.formats
        .iter()
        .enumerate()
        .map(|(i, f)| Row {
            label: f.label.clone(),
            reference: f.label == r.settings.reference,
            cells: figs
                .iter()
                .map(|fig| fig.values[i].map(|s| number(s.median, fig.digits)))
                .collect(),
        })
        .collect()
}

/// "2.1× faster decode than X", "1.3× slower decode than X", "decode on par with X".
fn decode_words(x: f64, reference: &str) -> String {
    if x >= 1.05 {
        format!("{x:.1}× faster decode than {reference}")
    } else if x <= 1.0 / 1.05 {
        format!("{:.1}× slower decode than {reference}", 1.0 / x)
    } else {
        format!("decode on par with {reference}")
    }
}

/// Plain-words lines: each format against the reference, then which is fastest and closest,
/// then why figures are missing where a note says.
pub fn verdicts(r: &Report) -> Vec<String> {
    let median = |s: Option<Stat>| s.map(|s| s.median).filter(|m| m.is_finite() && *m > 0.0);
    let reference = r.formats.iter().find(|f| f.label == r.settings.reference);
    let mut out = Vec::new();
    if let Some(reference) = reference {
        let ref_decode = median(reference.summary.decode_tokens_per_s);
        for f in r.formats.iter().filter(|f| f.label != reference.label) {
            let mut parts = Vec::new();
            if let (Some(d), Some(rd)) = (median(f.summary.decode_tokens_per_s), ref_decode) {
                parts.push(decode_words(d / rd, &reference.label));
            }
            if let (Some(b), Some(rb)) = (f.bytes_on_disk, reference.bytes_on_disk) {
                if rb > 0 {
                    parts.push(format!("{:.0}% of its size", 100.0 * b as f64 / rb as f64));
                }
            }
            if let Some(q) = &f.quality {
                let same = format!(
                    "same top token {:.0}% of the time",
                    100.0 * q.top1_agreement
                );
                parts.push(match q.kl_mean {
                    Some(kl) => format!("KL {} ({same})", number(kl, 3)),
                    None => same,
                });
            }
            if !parts.is_empty() {
                out.push(format!("{}: {}.", f.label, parts.join(", ")));
            }
        }
    }
    let best = |key: &dyn Fn(&crate::report::FormatResult) -> Option<f64>, higher: bool| {
        r.formats
            .iter()
            .filter_map(|f| key(f).map(|v| (f, v)))
            .max_by(|a, b| {
                let o = a.1.total_cmp(&b.1);
                if higher {
                    o
                } else {
                    o.reverse()
                }
            })
    };
    if let Some((f, v)) = best(&|f| median(f.summary.decode_tokens_per_s), true) {
        out.push(format!("Fastest decode: {} ({v:.1} tokens/s).", f.label));
    }
    if let Some(reference) = reference {
        let kl = |f: &crate::report::FormatResult| {
            (f.label != reference.label)
                .then_some(())
                .and(f.quality.as_ref())
                .and_then(|q| q.kl_mean)
        };
        if let Some((f, v)) = best(&kl, false) {
            out.push(format!(
                "Closest to {}: {} (KL {}).",
                reference.label,
                f.label,
                number(v, 4)
            ));
        }
    }
    for f in &r.formats {
        if let Some(note) = &f.note {
            out.push(format!("{}: {note}.", f.label));
        }
    }
    out
}

/// Two reports as one: every format of each, labelled `A · …` and `B · …`; the settings and
/// machine are the first's, the reference is the first's reference.
pub fn merge(a: &Report, b: &Report) -> Report {
    let mut merged = a.clone();
    merged.formats.clear();
    for (tag, r) in [("A", a), ("B", b)] {
        for f in &r.formats {
            let mut f = f.clone();
            f.label = format!("{tag} · {}", f.label);
            merged.formats.push(f);
        }
    }
    merged.settings.reference = format!("A · {}", a.settings.reference);
    merged.settings.model = if a.settings.model == b.settings.model {
        a.settings.model.clone()
    } else {
        format!("{} vs {}", a.settings.model, b.settings.model)
    };
    // Prompt lengths must line up for the per-length figures: keep those the two share.
    let shared: Vec<usize> = a
        .settings
        .prompt_tokens
        .iter()
        .copied()
        .filter(|n| b.settings.prompt_tokens.contains(n))
        .collect();
    for (f, r) in merged
        .formats
        .iter_mut()
        .zip(std::iter::repeat_n(a, a.formats.len()).chain(std::iter::repeat_n(b, b.formats.len())))
    {
        let keep: Vec<usize> = shared
            .iter()
            .filter_map(|n| r.settings.prompt_tokens.iter().position(|m| m == n))
            .collect();
        let pick =
            |v: &Vec<Option<Stat>>| keep.iter().map(|&i| v.get(i).copied().flatten()).collect();
        f.summary.ttft_ms = pick(&f.summary.ttft_ms);
        f.summary.prefill_tokens_per_s = pick(&f.summary.prefill_tokens_per_s);
        for run in &mut f.runs {
            let pick = |v: &Vec<f64>| keep.iter().filter_map(|&i| v.get(i).copied()).collect();
            run.ttft_ms = pick(&run.ttft_ms);
            run.prefill_tokens_per_s = pick(&run.prefill_tokens_per_s);
            let real = &run.prompt_tokens;
            run.prompt_tokens = keep.iter().filter_map(|&i| real.get(i).copied()).collect();
        }
    }
    merged.settings.prompt_tokens = shared;
    merged.interrupted = a.interrupted || b.interrupted;
    merged
}
