//! A bar chart of one figure as SVG, written by hand: a horizontal bar per format at its
//! median, a whisker from min to max, the value at the end, a zero-based axis with round
//! ticks. Colours come from CSS classes (`f0`…`f7` per format, `reference`), so the page
//! decides them (and its dark mode).

use crate::figures::{number, Better, Figure};

const WIDTH: f64 = 600.0;
const LABEL_W: f64 = 170.0;
const VALUE_W: f64 = 80.0;
const ROW_H: f64 = 28.0;
const TOP: f64 = 44.0;
const AXIS_H: f64 = 26.0;

/// Escapes text for XML content and attributes.
pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A round step for about `ticks` intervals up to `max`: 1, 2 or 5 times a power of ten.
fn tick_step(max: f64, ticks: f64) -> f64 {
    let raw = max / ticks;
    let power = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * power)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * power)
}

/// A tick's text: as many decimals as the step needs; tiny steps in scientific notation.
fn tick_label(v: f64, step: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if step < 1e-3 {
        format!("{v:.0e}")
    } else if step < 1.0 {
        let digits = (-step.log10()).ceil() as usize;
        format!("{v:.digits$}")
    } else {
        format!("{v:.0}")
    }
}

/// The chart of `fig` with one bar per label; `reference` is drawn apart.
pub fn bar_chart(fig: &Figure, labels: &[String], reference: Option<usize>) -> String {
    let plot_w = WIDTH - LABEL_W - VALUE_W;
    let top = fig
        .values
        .iter()
        .flatten()
        .map(|s| s.max.max(s.median))
        .fold(0.0f64, f64::max);
    let step = if top > 0.0 { tick_step(top, 4.0) } else { 1.0 };
    let scale_max = (top / step).ceil().max(1.0) * step;
    let x = |v: f64| LABEL_W + (v.max(0.0) / scale_max) * plot_w;
    let height = TOP + ROW_H * labels.len() as f64 + AXIS_H;
    let direction = match fig.better {
        Better::Higher => "higher is better",
        Better::Lower => "lower is better",
    };
    let unit = if fig.unit.is_empty() {
        String::new()
    } else {
        format!(" ({})", fig.unit)
    };
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" viewBox=\"0 0 {WIDTH} {height}\" \
         width=\"{WIDTH}\" height=\"{height}\" role=\"img\" aria-label=\"{t}\">\n\
         <title>{t}{u}, {direction}</title>\n\
         <text class=\"title\" x=\"0\" y=\"18\">{t}{u}</text>\n\
         <text class=\"note\" x=\"0\" y=\"34\">{direction}; bars are medians, whiskers min to max</text>\n",
        t = escape(&fig.title),
        u = escape(&unit),
    );
    // Grid and axis.
    let axis_y = TOP + ROW_H * labels.len() as f64;
    for k in 0..=(scale_max / step).round() as usize {
        let tick = k as f64 * step;
        let tx = x(tick);
        s.push_str(&format!(
            "<line class=\"grid\" x1=\"{tx:.1}\" y1=\"{TOP}\" x2=\"{tx:.1}\" y2=\"{axis_y}\"/>\n\
             <text class=\"tick\" x=\"{tx:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\n",
            axis_y + 16.0,
            tick_label(tick, step)
        ));
    }
    for (i, label) in labels.iter().enumerate() {
        let y = TOP + ROW_H * i as f64;
        // A colour per format (the page's palette has eight), the reference told apart.
        let class = if Some(i) == reference {
            format!("bar f{} reference", i % 8)
        } else {
            format!("bar f{}", i % 8)
        };
        s.push_str(&format!(
            "<text class=\"label\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>\n",
            LABEL_W - 8.0,
            y + ROW_H / 2.0 + 4.0,
            escape(label)
        ));
        let Some(v) = fig.values.get(i).copied().flatten() else {
            s.push_str(&format!(
                "<text class=\"value\" x=\"{:.1}\" y=\"{:.1}\">not measured</text>\n",
                LABEL_W + 4.0,
                y + ROW_H / 2.0 + 4.0
            ));
            continue;
        };
        let (x0, xm) = (x(0.0), x(v.median));
        s.push_str(&format!(
            "<rect class=\"{class}\" x=\"{x0:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\">\
             <title>{}: {}</title></rect>\n",
            y + 5.0,
            (xm - x0).max(1.0),
            ROW_H - 10.0,
            escape(label),
            number(v.median, fig.digits)
        ));
        if v.max > v.min {
            let (a, b, cy) = (x(v.min), x(v.max), y + ROW_H / 2.0);
            s.push_str(&format!(
                "<path class=\"whisker\" d=\"M{a:.1},{cy:.1}H{b:.1}M{a:.1},{:.1}V{:.1}M{b:.1},{:.1}V{:.1}\"/>\n",
                cy - 5.0,
                cy + 5.0,
                cy - 5.0,
                cy + 5.0
            ));
        }
        s.push_str(&format!(
            "<text class=\"value\" x=\"{:.1}\" y=\"{:.1}\">{}</text>\n",
            x(v.max.max(v.median)) + 6.0,
            y + ROW_H / 2.0 + 4.0,
            number(v.median, fig.digits)
        ));
    }
    s.push_str(&format!(
        "<line class=\"axis\" x1=\"{LABEL_W}\" y1=\"{axis_y}\" x2=\"{:.1}\" y2=\"{axis_y}\"/>\n</svg>\n",
        LABEL_W + plot_w
    ));
    s
}
