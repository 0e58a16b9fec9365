//! A remote engine's quality: how often its most likely next token is the local reference's.
//! The engine continues the first half of the quality text greedily and sends each token with
//! its top log-probability; the same prompt and that continuation are then fed through the
//! reference (teacher forcing), and at each of the engine's tokens its top token is compared
//! with the reference's argmax, as text (an engine sends token texts, not ids). An engine sends
//! no whole distributions, so there is no KL divergence or perplexity.

use crate::child::Stop;
use crate::quality::Quality;
use crate::remote::Target;
use minerva_engine::{KvCache, Model};
use minerva_remote::{RemoteCompletion, RemoteDelta, RemoteLogprob};
use minerva_text::Tokenizer;

/// The most tokens of the engine's continuation compared: each costs the reference one step.
const MAX_COMPARED: usize = 128;

/// The engine's top-1 agreement with `model` over `text_ids` (the quality text, as the
/// reference tokenizes it). An error says, in words, why there is none.
pub fn agreement(
    model: &mut Model,
    tokenizer: &Tokenizer,
    text_ids: &[u32],
    target: &Target,
    stop: &Stop,
) -> Result<Quality, String> {
    let half = text_ids.len() / 2;
    if half == 0 {
        return Err("the quality text is too short to compare with".into());
    }
    let prompt = tokenizer
        .decode(&text_ids[..half], true)
        .map_err(|e| e.to_string())?;
    let req = RemoteCompletion {
        model: target.model.clone(),
        prompt: prompt.clone(),
        // One token fewer than the text's rest: the engine's start token must fit too, where
        // the text fills the reference's context.
        max_tokens: Some((text_ids.len() - half - 1).clamp(1, MAX_COMPARED)),
        temperature: Some(0.0),
        logprobs: Some(1),
        ..RemoteCompletion::default()
    };
    let mut tokens = Vec::new();
    let done = target
        .engine()?
        .complete(&req, stop.flag(), &mut |d| {
            if let RemoteDelta::Logprob(l) = d {
                tokens.push(l);
            }
        })
        .map_err(|e| format!("no quality figures: {e}"))?;
    if stop.requested() {
        return Err("stopped before its quality was measured".into());
    }
    if tokens.is_empty() {
        return Err("no quality figures: the engine sent no log-probabilities".into());
    }
    // The engine's prompt as it counted it: with the start token the tokenizer adds, unless
    // its count says it added none.
    let encode = |special| {
        tokenizer
            .encode(&prompt, special)
            .map_err(|e| e.to_string())
    };
    let (with, without) = (encode(true)?, encode(false)?);
    let prompt_ids = if done.prompt_tokens == Some(without.len()) {
        without
    } else {
        with
    };
    // Room for the continuation where the reference splits some tokens in several.
    let capacity = (prompt_ids.len() + 4 * tokens.len() + 1).min(model.spec.context_length);
    let mut cache = model.new_cache(capacity).map_err(|e| e.to_string())?;
    let counts = follow(model, &mut cache, capacity, tokenizer, prompt_ids, &tokens);
    model.free_cache(cache);
    let (compared, agreed, unaligned) = counts?;
    if compared == 0 {
        return Err(
            "no quality figures: none of the engine's tokens is a token of the reference's \
             tokenizer"
                .into(),
        );
    }
    Ok(Quality {
        positions: compared,
        kl_mean: None,
        kl_max: None,
        top1_agreement: agreed as f64 / compared as f64,
        perplexity: None,
        unaligned: Some(unaligned),
    })
}

/// Feeds the prompt, then the engine's tokens one at a time, comparing at each the engine's
/// top token with the reference's argmax. Returns (compared, agreed, left out).
fn follow(
    model: &mut Model,
    cache: &mut KvCache,
    capacity: usize,
    tokenizer: &Tokenizer,
    prompt_ids: Vec<u32>,
    tokens: &[RemoteLogprob],
) -> Result<(usize, usize, usize), String> {
    let text = |e: minerva_text::TextError| e.to_string();
    let engine = |e: minerva_engine::EngineError| e.to_string();
    let mut context = prompt_ids;
    model.prefill(cache, &context).map_err(engine)?;
    let (mut compared, mut agreed, mut unaligned) = (0, 0, 0);
    for t in tokens {
        let argmax = model.argmax().map_err(engine)?;
        let local = token_texts(tokenizer, &context, argmax);
        let top1 = t.top.first().map_or(t.token.as_str(), |(s, _)| s.as_str());
        // The engine's token, as the reference's own argmax where their texts agree (which
        // also picks the right one of tokens sharing a text, such as lone bytes shown as
        // U+FFFD), else as the reference's tokenizer writes its text.
        let next = if local.contains(&t.token) {
            vec![argmax]
        } else {
            tokenizer.encode(&t.token, false).map_err(text)?
        };
        // Where the tokenizers differ, the texts line up only where the reference has the
        // engine's token as one token of its own: the other tokens are left out.
        if next.len() == 1 {
            compared += 1;
            agreed += usize::from(local.iter().any(|s| s == top1));
        } else {
            unaligned += 1;
        }
        if context.len() + next.len() > capacity {
            break;
        }
        if !next.is_empty() {
            model.prefill(cache, &next).map_err(engine)?;
            context.extend(next);
        }
    }
    Ok((compared, agreed, unaligned))
}

/// The texts a token may go by in an engine's answer: decoded alone (as Minerva writes it), and
/// as it reads after the tokens before it (SentencePiece's leading space kept, as llama.cpp
/// and vLLM write it).
fn token_texts(tokenizer: &Tokenizer, before: &[u32], id: u32) -> [String; 2] {
    let alone = tokenizer.decode(&[id], false).unwrap_or_default();
    let window = &before[before.len().saturating_sub(4)..];
    let prev = tokenizer.decode(window, false).unwrap_or_default();
    let mut ids = window.to_vec();
    ids.push(id);
    let now = tokenizer.decode(&ids, false).unwrap_or_default();
    let in_context = now.strip_prefix(&prev).map(str::to_string);
    let in_context = in_context.unwrap_or_else(|| alone.clone());
    [alone, in_context]
}
