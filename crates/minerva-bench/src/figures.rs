//! The figures of a report, one per column of its table and one per chart of its HTML page:
//! a title, a unit, which way is better, and each format's median (with min and max).

use crate::report::{Report, Stat};

/// Which way a figure improves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Better {
    Higher,
    Lower,
}

/// One figure across the formats.
#[derive(Debug, Clone)]
pub struct Figure {
    pub title: String,
    /// The table's column head, with the unit.
    pub short: String,
    pub unit: &'static str,
    pub better: Better,
    /// Per format, in the report's order; None where not measured.
    pub values: Vec<Option<Stat>>,
    /// Digits after the point in tables.
    pub digits: usize,
}

impl Figure {
    /// Whether any format has a value (a GPU figure on the CPU has none).
    pub fn measured(&self) -> bool {
        self.values.iter().any(Option::is_some)
    }
}

const MIB: f64 = (1u64 << 20) as f64;

fn scaled(s: Option<Stat>, by: f64) -> Option<Stat> {
    s.map(|s| Stat {
        median: s.median / by,
        min: s.min / by,
        max: s.max / by,
    })
}

fn exact(v: f64) -> Option<Stat> {
    v.is_finite().then_some(Stat {
        median: v,
        min: v,
        max: v,
    })
}

/// Every figure of the report, in table order; figures nothing measured are left out.
pub fn figures(r: &Report) -> Vec<Figure> {
    let per = |f: &dyn Fn(&crate::report::FormatResult) -> Option<Stat>| {
        r.formats.iter().map(f).collect::<Vec<_>>()
    };
    let fig = |title: &str, short: &str, unit, better, digits, values| Figure {
        title: title.to_string(),
        short: short.to_string(),
        unit,
        better,
        values,
        digits,
    };
    let mut all = vec![
        fig(
            "size on disk",
            "size MiB",
            "MiB",
            Better::Lower,
            1,
            per(&|f| f.bytes_on_disk.and_then(|b| exact(b as f64 / MIB))),
        ),
        fig(
            "load, cold",
            "load cold ms",
            "ms",
            Better::Lower,
            0,
            per(&|f| f.summary.load_cold_ms),
        ),
        fig(
            "load, warm",
            "load warm ms",
            "ms",
            Better::Lower,
            0,
            per(&|f| f.summary.load_warm_ms),
        ),
    ];
    for (i, n) in r.settings.prompt_tokens.iter().enumerate() {
        all.push(fig(
            &format!("time to first token, {n}-token prompt"),
            &format!("TTFT@{n} ms"),
            "ms",
            Better::Lower,
            1,
            per(&|f| f.summary.ttft_ms.get(i).copied().flatten()),
        ));
        all.push(fig(
            &format!("prefill, {n}-token prompt"),
            &format!("prefill@{n} tok/s"),
            "tok/s",
            Better::Higher,
            0,
            per(&|f| f.summary.prefill_tokens_per_s.get(i).copied().flatten()),
        ));
    }
    all.extend([
        fig(
            "decode",
            "decode tok/s",
            "tok/s",
            Better::Higher,
            1,
            per(&|f| f.summary.decode_tokens_per_s),
        ),
        fig(
            "peak resident memory",
            "peak RSS MiB",
            "MiB",
            Better::Lower,
            0,
            per(&|f| scaled(f.summary.peak_rss_bytes, MIB)),
        ),
        fig(
            "GPU memory, engine's account",
            "GPU MiB (engine)",
            "MiB",
            Better::Lower,
            0,
            per(&|f| scaled(f.summary.gpu_reserved_bytes, MIB)),
        ),
        fig(
            "GPU memory, driver's figure",
            "GPU MiB (driver)",
            "MiB",
            Better::Lower,
            0,
            per(&|f| scaled(f.summary.gpu_driver_bytes, MIB)),
        ),
    ]);
    let quality = |q: &dyn Fn(&crate::quality::Quality) -> Option<f64>| {
        per(&|f| f.quality.as_ref().and_then(q).and_then(exact))
    };
    all.extend([
        fig(
            "KL divergence, mean",
            "KL mean",
            "nats",
            Better::Lower,
            4,
            quality(&|q| q.kl_mean),
        ),
        fig(
            "KL divergence, max",
            "KL max",
            "nats",
            Better::Lower,
            4,
            quality(&|q| q.kl_max),
        ),
        fig(
            "top-1 agreement",
            "top-1",
            "",
            Better::Higher,
            3,
            quality(&|q| Some(q.top1_agreement)),
        ),
        fig(
            "perplexity",
            "PPL",
            "",
            Better::Lower,
            2,
            quality(&|q| q.perplexity),
        ),
    ]);
    all.retain(Figure::measured);
    all
}

/// A value for a table: fixed digits, or scientific notation where those digits would show
/// a nonzero value as 0 (a KL of 2e-6).
pub fn number(v: f64, digits: usize) -> String {
    let fixed = format!("{v:.digits$}");
    if v != 0.0 && v.abs() < 0.5 * 10f64.powi(-(digits as i32)) {
        format!("{v:.1e}")
    } else {
        fixed
    }
}
