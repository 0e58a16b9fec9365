//! Remote engines measured beside the local formats: a model of an OpenAI-compatible engine,
//! named `URL#MODEL`, asked from this process (no child) for streamed greedy completions of
//! prompts cut from the bench text. Time to first token and the prefill and decode rates are
//! timed here as the chunks arrive, so they include the network; load time and memory are the
//! engine's own and stay unmeasured.

use crate::compare::Plan;
use crate::report::{RunFigures, Stat};
use crate::BENCH_TEXT;
use minerva_formats::Checkpoint;
use minerva_remote::{RemoteCompletion, RemoteDelta, RemoteEngine};
use std::sync::atomic::AtomicBool;
use std::time::Instant;

/// Characters per token where no local tokenizer tells (English prose).
const CHARS_PER_TOKEN: f64 = 4.0;

/// A model of a remote engine to measure. Not `Debug`: it holds the key.
#[derive(Clone, PartialEq)]
pub struct Target {
    /// The engine's base URL, normalized (`http://host:8080/v1`).
    pub url: String,
    pub model: String,
    pub key: Option<String>,
}

impl Target {
    /// `URL#MODEL`, as `minerva bench --remote` and remote models' paths write it.
    pub fn parse(spec: &str, key: Option<String>) -> Result<Target, String> {
        let (url, model) = spec
            .split_once('#')
            .filter(|(_, m)| !m.trim().is_empty())
            .ok_or_else(|| {
                format!(
                    "`{spec}`: name a remote model as URL#MODEL, such as \
                     http://127.0.0.1:8080/v1#qwen3-4b"
                )
            })?;
        let engine = RemoteEngine::new(url, None).map_err(|e| e.to_string())?;
        Ok(Target {
            url: engine.url().to_string(),
            model: model.trim().to_string(),
            key,
        })
    }

    pub fn engine(&self) -> Result<RemoteEngine, String> {
        RemoteEngine::new(&self.url, self.key.as_deref()).map_err(|e| e.to_string())
    }

    /// `remote: MODEL @ HOST:PORT`.
    pub fn label(&self) -> String {
        let host =
            RemoteEngine::new(&self.url, None).map_or_else(|_| self.url.clone(), |e| e.host());
        format!("remote: {} @ {host}", self.model)
    }

    /// `URL#MODEL`.
    pub fn path(&self) -> String {
        format!("{}#{}", self.url, self.model)
    }
}

/// Characters per token of the bench text under this model's tokenizer, or the usual 4.
pub fn chars_per_token(ckpt: Option<&Checkpoint>) -> f64 {
    let ids = ckpt
        .and_then(|c| minerva_text::Tokenizer::from_checkpoint(c).ok())
        .and_then(|t| t.encode(BENCH_TEXT, false).ok())
        .filter(|ids| !ids.is_empty());
    ids.map_or(CHARS_PER_TOKEN, |ids| {
        BENCH_TEXT.chars().count() as f64 / ids.len() as f64
    })
}

/// A prompt of about `tokens` tokens: the bench text's first characters, the text repeated
/// where it is too short, as the local formats' prompts repeat its tokens.
pub fn prompt(tokens: usize, chars_per_token: f64) -> String {
    let chars = (tokens as f64 * chars_per_token).round().max(1.0) as usize;
    BENCH_TEXT.chars().cycle().take(chars).collect()
}

/// One completion's figures as timed from here.
struct Timing {
    prompt_tokens: usize,
    ttft_ms: f64,
    prefill_tokens_per_s: f64,
    decode_tokens_per_s: f64,
}

/// A streamed greedy completion of `prompt`, `gen` tokens long at most (the engine may stop
/// at its end-of-sequence token: the counts are the engine's). None when stopped.
fn timed(
    engine: &RemoteEngine,
    model: &str,
    prompt: String,
    gen: usize,
    nominal: usize,
    stop: &AtomicBool,
) -> Result<Option<Timing>, String> {
    let req = RemoteCompletion {
        model: model.to_string(),
        prompt,
        max_tokens: Some(gen.max(1)),
        temperature: Some(0.0),
        ..RemoteCompletion::default()
    };
    let start = Instant::now();
    let (mut first, mut last, mut chunks) = (None, start, 0usize);
    let done = engine
        .complete(&req, stop, &mut |d| {
            if let RemoteDelta::Content(_) = d {
                let now = Instant::now();
                first.get_or_insert(now);
                last = now;
                chunks += 1;
            }
        })
        .map_err(|e| e.to_string())?;
    if done.finish_reason.as_deref() == Some("cancelled") {
        return Ok(None);
    }
    let prompt_tokens = done.prompt_tokens.unwrap_or(nominal);
    // Without a count from the engine, each chunk is taken for a token.
    let generated = done.completion_tokens.unwrap_or(chunks);
    let ttft_s = first.map_or(f64::NAN, |f| (f - start).as_secs_f64());
    // The first token arrives with the prefill; the rest are decode.
    let decode_s = first.map_or(f64::NAN, |f| (last - f).as_secs_f64());
    let rate = |n: usize, s: f64| {
        if n > 0 && s > 0.0 {
            n as f64 / s
        } else {
            f64::NAN
        }
    };
    Ok(Some(Timing {
        prompt_tokens,
        ttft_ms: ttft_s * 1e3,
        prefill_tokens_per_s: rate(prompt_tokens, ttft_s),
        decode_tokens_per_s: rate(generated.saturating_sub(1), decode_s),
    }))
}

/// The runs of one remote model: per run, a completion at every prompt length. A stop ends it
/// early with the runs completed.
pub fn measure(
    plan: &Plan,
    target: &Target,
    chars_per_token: f64,
    progress: &mut dyn FnMut(usize, &str),
) -> Result<Vec<RunFigures>, String> {
    let engine = target.engine()?;
    let mut step = 1;
    let mut runs = Vec::new();
    for r in 0..plan.runs {
        let mut fig = RunFigures {
            load_cold_ms: None,
            load_warm_ms: None,
            device_ms: None,
            ttft_ms: Vec::new(),
            prefill_tokens_per_s: Vec::new(),
            prompt_tokens: Vec::new(),
            decode_tokens_per_s: f64::NAN,
            peak_rss_bytes: None,
            gpu_allocated_bytes: None,
            gpu_reserved_bytes: None,
            gpu_driver_bytes: None,
            gpu_driver_per_process: None,
        };
        let mut decodes = Vec::new();
        for &n in &plan.prompt_tokens {
            progress(step, &format!("run {}/{}: prompt {n}", r + 1, plan.runs));
            let text = prompt(n, chars_per_token);
            let Some(t) = timed(
                &engine,
                &target.model,
                text,
                plan.gen_tokens,
                n,
                plan.stop.flag(),
            )?
            else {
                return Ok(runs);
            };
            step += 1;
            fig.ttft_ms.push(t.ttft_ms);
            fig.prefill_tokens_per_s.push(t.prefill_tokens_per_s);
            fig.prompt_tokens.push(t.prompt_tokens);
            decodes.push(t.decode_tokens_per_s);
        }
        fig.decode_tokens_per_s = Stat::of(&decodes).map_or(f64::NAN, |s| s.median);
        runs.push(fig);
    }
    Ok(runs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_url_hash_model() {
        let t = Target::parse("http://127.0.0.1:8080#qwen3-4b", Some("k".into())).unwrap();
        assert_eq!(t.url, "http://127.0.0.1:8080/v1");
        assert_eq!(t.model, "qwen3-4b");
        assert_eq!(t.label(), "remote: qwen3-4b @ 127.0.0.1:8080");
        assert_eq!(t.path(), "http://127.0.0.1:8080/v1#qwen3-4b");
        let t = Target::parse("https://api.example.com/v1#org/m:q4", None).unwrap();
        assert_eq!(t.label(), "remote: org/m:q4 @ api.example.com");
        for bad in ["http://h:1/v1", "http://h:1/v1#", "h:1#m"] {
            assert!(Target::parse(bad, None).is_err(), "{bad}");
        }
    }

    #[test]
    fn prompts_are_cut_by_characters_and_repeat_the_text() {
        assert_eq!(
            prompt(10, 4.0),
            BENCH_TEXT.chars().take(40).collect::<String>()
        );
        let long = prompt(100_000, 4.0);
        assert_eq!(long.chars().count(), 400_000);
        assert!(long[BENCH_TEXT.len()..].starts_with(&BENCH_TEXT[..100]));
        assert_eq!(chars_per_token(None), 4.0);
    }
}
