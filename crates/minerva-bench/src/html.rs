//! The report as one self-contained HTML page: what ran where, the table of medians, and a
//! bar chart per figure (inline SVG; no scripts, fonts or files beside it), light or dark
//! after the reader's system.

use crate::figures::figures;
use crate::report::Report;
use crate::svg::{bar_chart, escape};

const STYLE: &str = "
:root { color-scheme: light dark; --fg: #1d2330; --muted: #5b6475; --grid: #e3e6ec;
  --whisker: #1d2330; --bg: #ffffff; }
@media (prefers-color-scheme: dark) { :root { --fg: #e6e9ef; --muted: #9aa3b5;
  --grid: #2c3240; --whisker: #e6e9ef; --bg: #151922; } }
body { font: 14px/1.45 system-ui, sans-serif; color: var(--fg); background: var(--bg);
  margin: 2rem auto; max-width: 1260px; padding: 0 1rem; }
h1 { font-size: 1.5rem; margin-bottom: .2rem; }
.meta { color: var(--muted); margin-top: 0; }
.wide { overflow-x: auto; }
table { border-collapse: collapse; margin: 1rem 0 2rem; font-variant-numeric: tabular-nums; }
th, td { padding: .3rem .6rem; border-bottom: 1px solid var(--grid); text-align: right; }
th:first-child, td:first-child { text-align: left; }
th { font-weight: 600; vertical-align: bottom; }
.charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(600px, 1fr));
  gap: 1.5rem 2rem; }
.chart text { fill: var(--fg); font: 12px system-ui, sans-serif; }
.chart .title { font-weight: 600; font-size: 14px; }
.chart .note, .chart .tick { fill: var(--muted); font-size: 11px; }
.chart .grid { stroke: var(--grid); }
.chart .axis { stroke: var(--muted); }
.chart .bar.reference { opacity: .55; }
.f0 { fill: #0072b2; } .f1 { fill: #e69f00; } .f2 { fill: #009e73; } .f3 { fill: #cc79a7; }
.f4 { fill: #56b4e9; } .f5 { fill: #d55e00; } .f6 { fill: #b8a800; } .f7 { fill: #8a8a8a; }
.chart .whisker { stroke: var(--whisker); stroke-width: 1.2; fill: none; }
.warning { border-left: 4px solid #d08a2c; padding: .4rem .8rem; }
";

fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

/// The whole page.
pub fn page(r: &Report) -> String {
    let figs = figures(r);
    let labels: Vec<String> = r.formats.iter().map(|f| f.label.clone()).collect();
    let reference = labels.iter().position(|l| *l == r.settings.reference);
    let s = &r.settings;
    let prompts: Vec<String> = s.prompt_tokens.iter().map(usize::to_string).collect();
    let mut out = format!(
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>{model}: formats compared</title>\n<style>{STYLE}</style>\n</head>\n<body>\n\
         <h1>{model}: formats compared</h1>\n\
         <p class=\"meta\">{device} · {cpu}, {cores} cores, {ram} · backend {backend} · \
         prompts of {prompts} tokens, {gen} generated · {runs} run(s) each, fresh process per \
         run · {quality} · Minerva {version} · {started}</p>\n",
        model = escape(&s.model),
        device = escape(&r.machine.device),
        cpu = escape(&r.machine.cpu),
        cores = r.machine.cores,
        ram = gib(r.machine.ram_bytes),
        backend = escape(&s.backend),
        prompts = prompts.join(" and "),
        gen = s.gen_tokens,
        runs = s.runs,
        quality = if s.reference.is_empty() {
            "no local format to measure quality against".to_string()
        } else {
            format!("quality against {}", escape(&s.reference))
        },
        version = escape(&r.engine_version),
        started = escape(&r.started),
    );
    if r.interrupted {
        out.push_str(
            "<p class=\"warning\">Stopped by the user: the figures are those measured until \
             then.</p>\n",
        );
    }
    let verdicts = crate::view::verdicts(r);
    if !verdicts.is_empty() {
        out.push_str("<ul class=\"verdicts\">\n");
        for v in verdicts {
            out.push_str(&format!("<li>{}</li>\n", escape(&v)));
        }
        out.push_str("</ul>\n");
    }
    out.push_str("<div class=\"wide\"><table>\n<tr><th>format</th>");
    for f in &figs {
        out.push_str(&format!(
            "<th title=\"{}\">{}</th>",
            escape(&f.title),
            escape(&f.short)
        ));
    }
    out.push_str("</tr>\n");
    for row in crate::view::rows(r, &figs) {
        let mark = if row.reference { " (reference)" } else { "" };
        out.push_str(&format!("<tr><td>{}{mark}</td>", escape(&row.label)));
        for cell in row.cells {
            out.push_str(&format!("<td>{}</td>", cell.unwrap_or_else(|| "–".into())));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table></div>\n<div class=\"charts\">\n");
    for f in &figs {
        out.push_str(&bar_chart(f, &labels, reference));
    }
    out.push_str("</div>\n</body>\n</html>\n");
    out
}
