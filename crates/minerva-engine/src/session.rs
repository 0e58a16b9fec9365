//! Generation sessions: a model with the KV cache of one conversation. A turn prefills only the
//! tokens the cache does not hold yet, then decodes token by token, streaming events. A
//! session can run on its own thread ([`Session::spawn`]) and stream over a tokio channel.
//!
//! Context policy: a prompt that does not fit the context chosen at load fails with
//! [`EngineError::ContextFull`]; a generation that reaches the end of the context stops with
//! [`StopReason::ContextFull`]. Nothing is truncated silently.

use crate::backend::{Choice, DeviceSample};
use crate::error::{EngineError, Result};
use crate::model::{KvCache, Model};
use crate::sampler::{Sampler, SamplerConfig};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

/// Why a generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// A stop token was produced (it is included in the output).
    Stop,
    MaxTokens,
    Cancelled,
    /// The context chosen at load is full.
    ContextFull,
}

impl StopReason {
    pub fn name(&self) -> &'static str {
        match self {
            StopReason::Stop => "stop",
            StopReason::MaxTokens => "max_tokens",
            StopReason::Cancelled => "cancelled",
            StopReason::ContextFull => "context_full",
        }
    }
}

/// Timings and counts of one generation.
#[derive(Debug, Clone, PartialEq)]
pub struct Stats {
    /// Time to load the model (the session's, repeated for every turn).
    pub load_ms: f64,
    /// Tokens of the prompt (the whole conversation so far).
    pub prompt_tokens: usize,
    /// Tokens actually prefilled (those the cache did not hold).
    pub prefill_tokens: usize,
    pub prefill_tokens_per_s: f64,
    pub generated_tokens: usize,
    /// Decode speed over the tokens after the first.
    pub decode_tokens_per_s: f64,
    /// From the start of the turn to the first generated token.
    pub time_to_first_token_ms: f64,
    pub stop_reason: StopReason,
    /// The backend's device memory at the end of the turn (None on the CPU).
    pub device_memory: Option<crate::DeviceMemory>,
}

/// Turns generated ids into text as they arrive (a streaming detokenizer).
pub trait TokenText: Send {
    /// Text completed by this token (may be empty while a multi-byte character is pending).
    fn push(&mut self, id: u32) -> String;

    /// Text still held back when the generation ends.
    fn finish(&mut self) -> String {
        String::new()
    }
}

/// No text: events carry ids only.
pub struct NoText;

impl TokenText for NoText {
    fn push(&mut self, _id: u32) -> String {
        String::new()
    }
}

/// What a session streams.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Token {
        id: u32,
        text: String,
    },
    /// Text the detokenizer held back until the end (sent before `Done`, only when not empty).
    Text(String),
    /// The log-probabilities of the token whose `Token` event follows, when the request asked
    /// for them.
    Logprobs(TokenLogprobs),
    Done {
        stats: Stats,
    },
    Error(String),
}

/// One turn's request.
#[derive(Debug, Clone)]
pub struct Request {
    /// The whole conversation's ids; what the cache already holds is not computed again.
    pub prompt: Vec<u32>,
    pub max_tokens: usize,
    pub sampler: SamplerConfig,
    /// Ids that end the generation (eos, end of turn).
    pub stop: Vec<u32>,
    /// `Some(n)`: each token's log-probability and the `n` most likely alternatives are sent
    /// (a [`Event::Logprobs`] before its token). The logits are then read back every step.
    pub logprobs: Option<usize>,
}

/// Most alternatives a request may ask for (as OpenAI's API allows).
pub const MAX_TOP_LOGPROBS: usize = 20;

/// A generated token's log-probability under the model's distribution (before temperature and
/// the other sampler settings, as OpenAI-compatible servers report it), and the most likely
/// tokens at that step.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprobs {
    pub id: u32,
    pub logprob: f32,
    /// (id, log-probability), most likely first.
    pub top: Vec<(u32, f32)>,
}

impl TokenLogprobs {
    /// The log-probabilities of `id` and of the `n` best tokens in a row of logits.
    pub fn of(logits: &[f32], id: u32, n: usize) -> TokenLogprobs {
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let log_sum = max + logits.iter().map(|&l| (l - max).exp()).sum::<f32>().ln();
        let lp = |i: usize| logits.get(i).map_or(f32::NEG_INFINITY, |&l| l - log_sum);
        let n = n.min(MAX_TOP_LOGPROBS).min(logits.len());
        let mut order: Vec<usize> = (0..logits.len()).collect();
        if n > 0 {
            order.select_nth_unstable_by(n - 1, |&a, &b| logits[b].total_cmp(&logits[a]));
        }
        order.truncate(n);
        order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
        TokenLogprobs {
            id,
            logprob: lp(id as usize),
            top: order.into_iter().map(|i| (i as u32, lp(i))).collect(),
        }
    }
}

/// A model and one conversation's cache.
pub struct Session {
    pub model: Model,
    cache: KvCache,
    load_ms: f64,
}

impl Session {
    /// A session with a cache of `ctx` tokens; `load_ms` is reported in the stats.
    pub fn new(mut model: Model, ctx: usize, load_ms: f64) -> Result<Session> {
        let cache = model.new_cache(ctx)?;
        Ok(Session {
            model,
            cache,
            load_ms,
        })
    }

    /// Tokens the cache holds.
    pub fn cached(&self) -> &[u32] {
        self.cache.tokens()
    }

    /// Brings the cache to hold exactly `prompt`, computing only what it lacks, and leaves the
    /// last token's logits ready. Returns the number of tokens computed.
    pub fn prefill(&mut self, prompt: &[u32]) -> Result<usize> {
        if prompt.is_empty() {
            return Err(EngineError::Invalid("the prompt is empty".into()));
        }
        if prompt.len() > self.cache.ctx() {
            return Err(EngineError::ContextFull {
                ctx: self.cache.ctx(),
                needed: prompt.len(),
            });
        }
        let common = self
            .cache
            .tokens()
            .iter()
            .zip(prompt)
            .take_while(|(a, b)| a == b)
            .count();
        // The last prompt token is always run again: its logits choose the next token.
        let keep = common.min(prompt.len() - 1);
        let keep = if self.model.truncate(&mut self.cache, keep) {
            keep
        } else {
            0
        };
        self.model.prefill(&mut self.cache, &prompt[keep..])?;
        Ok(prompt.len() - keep)
    }

    /// The logits left by the last step.
    pub fn last_logits(&mut self) -> Result<Vec<f32>> {
        self.model.last_logits()
    }

    /// Runs one turn, calling `emit` with each event (a `Done` at the end); stops within one
    /// token of `cancel` being set. Errors are returned, not emitted.
    pub fn generate(
        &mut self,
        req: &Request,
        cancel: &AtomicBool,
        text: &mut dyn TokenText,
        emit: &mut dyn FnMut(Event),
    ) -> Result<Stats> {
        let start = Instant::now();
        let prefilled = self.prefill(&req.prompt)?;
        // A GPU backend only enqueues the prefill: its time is known once the first token's
        // logits are read, so it is taken again then (as "prompt eval" is in other engines).
        let mut prefill_s = start.elapsed().as_secs_f64();
        let mut sampler = Sampler::new(req.sampler.clone());
        let mut history = req.prompt.clone();
        let mut ttft_ms = 0.0;
        let mut decode_start = Instant::now();
        let mut generated = 0;
        // The choice of the next token when its step is already queued.
        let mut ahead: Option<Choice> = None;
        let stop_reason = loop {
            if cancel.load(Ordering::Relaxed) {
                break StopReason::Cancelled;
            }
            if generated == req.max_tokens {
                break StopReason::MaxTokens;
            }
            let choice = match (ahead.take(), req.logprobs) {
                (Some(c), _) => c,
                (None, Some(n)) => {
                    // The whole row is read: the token is chosen from it on the host.
                    let logits = self.model.last_logits()?;
                    let id = if sampler.config.is_plain_argmax() {
                        argmax(&logits)
                    } else {
                        sampler.sample(&logits, &history)
                    };
                    emit(Event::Logprobs(TokenLogprobs::of(&logits, id, n)));
                    Choice::Known(id)
                }
                (None, None) => self.choose(&mut sampler, &history)?,
            };
            // A choice left on the device gets its step queued before it is read, so that the
            // device does not wait for the host between tokens. If the token ends the turn,
            // the cache keeps it (its keys and values are right) and the next choice is dropped.
            let queued = matches!(choice, Choice::OnDevice(_))
                && generated + 1 < req.max_tokens
                && self.cache.pos() < self.cache.ctx();
            if queued {
                self.model.decode_choice(&mut self.cache, choice)?;
                ahead = Some(self.choose_on_device(&mut sampler, &history, true)?);
            }
            let id = self.model.read_choice(&mut self.cache, choice)?;
            generated += 1;
            history.push(id);
            if generated == 1 {
                prefill_s = start.elapsed().as_secs_f64();
                ttft_ms = prefill_s * 1e3;
                decode_start = Instant::now();
            }
            emit(Event::Token {
                id,
                text: text.push(id),
            });
            if req.stop.contains(&id) {
                break StopReason::Stop;
            }
            if generated == req.max_tokens {
                break StopReason::MaxTokens;
            }
            if !queued {
                if self.cache.pos() >= self.cache.ctx() {
                    break StopReason::ContextFull;
                }
                self.model.prefill(&mut self.cache, &[id])?;
            }
        };
        // Decode speed counts the forward steps after the first token.
        let steps = generated.saturating_sub(1) as f64;
        let decode_s = decode_start.elapsed().as_secs_f64();
        let stats = Stats {
            load_ms: self.load_ms,
            prompt_tokens: req.prompt.len(),
            prefill_tokens: prefilled,
            prefill_tokens_per_s: rate(prefilled as f64, prefill_s),
            generated_tokens: generated,
            decode_tokens_per_s: if steps > 0.0 {
                rate(steps, decode_s)
            } else {
                0.0
            },
            time_to_first_token_ms: ttft_ms,
            stop_reason,
            device_memory: self.model.device_memory(),
        };
        emit(Event::Done {
            stats: stats.clone(),
        });
        Ok(stats)
    }

    /// The next token as the sampler picks it from the last step's logits: a greedy choice may
    /// stay on the device.
    fn choose(&mut self, sampler: &mut Sampler, history: &[u32]) -> Result<Choice> {
        if sampler.config.is_plain_argmax() {
            return self.model.choose_greedy();
        }
        if let Some(c) = self.sample_on_device(sampler, history, false)? {
            return Ok(c);
        }
        let id = if let Some(k) = sampler.config.candidates() {
            let candidates = self.model.top_k(k)?;
            sampler.sample_candidates(&candidates)
        } else {
            let logits = self.model.last_logits()?;
            sampler.sample(&logits, history)
        };
        Ok(Choice::Known(id))
    }

    /// The next choice, left on the device, while the last one is still there unread (its
    /// step already queued): only choices the device can make are queued this way.
    fn choose_on_device(
        &mut self,
        sampler: &mut Sampler,
        history: &[u32],
        last_unread: bool,
    ) -> Result<Choice> {
        if sampler.config.is_plain_argmax() {
            return self.model.choose_greedy();
        }
        self.sample_on_device(sampler, history, last_unread)?
            .ok_or_else(|| EngineError::Invalid("the device stopped sampling mid-turn".into()))
    }

    /// A draw on the device with the sampler's settings and seed, where the backend can.
    fn sample_on_device(
        &mut self,
        sampler: &mut Sampler,
        history: &[u32],
        last_unread: bool,
    ) -> Result<Option<Choice>> {
        if !self.model.samples_on_device() {
            return Ok(None);
        }
        let penalized = sampler.penalized(history, last_unread);
        let u = sampler.next_uniform();
        let c = &sampler.config;
        let s = DeviceSample {
            temperature: c.temperature,
            top_k: c.top_k,
            top_p: c.top_p,
            min_p: c.min_p,
            penalty: c.repetition_penalty,
            penalized: &penalized,
            with_chosen: last_unread && c.repetition_penalty != 1.0,
            u,
        };
        self.model.choose_sampled(&s)
    }

    /// Moves the session to a thread of its own; turns are queued and run in order.
    pub fn spawn(self) -> SessionHandle {
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        let thread = std::thread::spawn(move || {
            let mut session = self;
            // Set after a panic: the model's state is unknown, so every later turn gets a clear
            // error instead of wrong text (the thread keeps answering until the handle drops).
            let mut failed = false;
            for job in rx {
                let Job {
                    req,
                    mut text,
                    cancel,
                    events,
                } = job;
                if failed {
                    let _ = events.send(Event::Error(
                        "the session has stopped after an engine failure; load the model again"
                            .into(),
                    ));
                    continue;
                }
                let mut emit = |e: Event| {
                    let _ = events.send(e);
                };
                let run = minerva_formats::guard::catch(|| {
                    session.generate(&req, &cancel, text.as_mut(), &mut emit)
                });
                match run {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => {
                        let _ = events.send(Event::Error(e.to_string()));
                    }
                    Err(panic) => {
                        let _ = events.send(Event::Error(format!(
                            "the engine failed ({panic}); load the model again"
                        )));
                        failed = true;
                    }
                }
            }
        });
        SessionHandle {
            jobs: Some(tx),
            thread: Some(thread),
        }
    }
}

/// The first index of the largest logit.
fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] {
            best = i;
        }
    }
    best as u32
}

fn rate(n: f64, secs: f64) -> f64 {
    if secs > 0.0 {
        n / secs
    } else {
        0.0
    }
}

struct Job {
    req: Request,
    text: Box<dyn TokenText>,
    cancel: Arc<AtomicBool>,
    events: UnboundedSender<Event>,
}

/// A session running on its own thread.
pub struct SessionHandle {
    jobs: Option<std::sync::mpsc::Sender<Job>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SessionHandle {
    /// Queues a turn. Events arrive on the receiver, ending with `Done` or `Error`; setting
    /// the returned flag cancels the turn within one token.
    pub fn generate(
        &self,
        req: Request,
        text: Box<dyn TokenText>,
    ) -> (UnboundedReceiver<Event>, Arc<AtomicBool>) {
        let (tx, rx) = unbounded_channel();
        let cancel = Arc::new(AtomicBool::new(false));
        let job = Job {
            req,
            text,
            cancel: cancel.clone(),
            events: tx.clone(),
        };
        if self.jobs.as_ref().is_none_or(|j| j.send(job).is_err()) {
            let _ = tx.send(Event::Error(
                "the session has stopped after an engine failure; load the model again".into(),
            ));
        }
        (rx, cancel)
    }
}

impl Drop for SessionHandle {
    fn drop(&mut self) {
        drop(self.jobs.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Streaming text through a `minerva_text` tokenizer.
pub struct TextStream {
    tokenizer: Arc<minerva_text::Tokenizer>,
    detok: minerva_text::Detokenizer,
}

impl TextStream {
    /// `skip_special`: leave special tokens out of the text.
    pub fn new(tokenizer: Arc<minerva_text::Tokenizer>, skip_special: bool) -> TextStream {
        TextStream {
            tokenizer,
            detok: minerva_text::Detokenizer::new(skip_special),
        }
    }
}

impl TokenText for TextStream {
    fn push(&mut self, id: u32) -> String {
        // An id the tokenizer cannot decode shows as the replacement character, not an error:
        // the ids themselves are still reported.
        self.detok
            .push(&self.tokenizer, id)
            .unwrap_or_else(|_| "\u{FFFD}".to_string())
    }

    fn finish(&mut self) -> String {
        self.detok.finish(&self.tokenizer).unwrap_or_default()
    }
}
