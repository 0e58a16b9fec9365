//! Streaming detokenizer: turns ids into text as they arrive. It decodes a short window of
//! recent ids and emits only what the new id added, so a UTF-8 character or byte-fallback
//! sequence split over several tokens comes out whole, and SentencePiece's leading '▁' is
//! handled as in a full decode. Stop strings that span tokens are caught: text that could be
//! the start of a stop string is held back until it is certain.

use crate::error::Result;
use crate::markers::{MarkerStream, Segment};
use crate::tokenizer::Tokenizer;

/// Tokens that may stay undecodable (an unfinished UTF-8 sequence) before they are shown anyway.
const MAX_HELD_TOKENS: usize = 8;

#[derive(Debug, Clone)]
pub struct Detokenizer {
    ids: Vec<u32>,
    /// Start of the decode window (context for the first new token).
    prefix: usize,
    /// Ids before this index have been turned into text.
    read: usize,
    skip_special: bool,
    stops: MarkerStream,
    stopped: Option<String>,
}

impl Detokenizer {
    /// `skip_special`: leave special tokens (BOS, `<|im_end|>`…) out of the text.
    pub fn new(skip_special: bool) -> Detokenizer {
        Detokenizer {
            ids: Vec::new(),
            prefix: 0,
            read: 0,
            skip_special,
            stops: MarkerStream::default(),
            stopped: None,
        }
    }

    /// Generation ends at the first of these strings; the text before it is returned, the stop
    /// string and anything after it are not.
    pub fn with_stop_strings<S: Into<String>>(
        mut self,
        stops: impl IntoIterator<Item = S>,
    ) -> Detokenizer {
        self.stops = MarkerStream::new(stops);
        self
    }

    /// Adds one generated id; returns the text that can be shown now (often empty).
    pub fn push(&mut self, tokenizer: &Tokenizer, id: u32) -> Result<String> {
        if self.stopped.is_some() {
            return Ok(String::new());
        }
        self.ids.push(id);
        let before = tokenizer.decode(&self.ids[self.prefix..self.read], self.skip_special)?;
        let now = tokenizer.decode(&self.ids[self.prefix..], self.skip_special)?;
        let unfinished = now.ends_with('\u{FFFD}') && self.ids.len() - self.read < MAX_HELD_TOKENS;
        if unfinished {
            return Ok(String::new());
        }
        if now.len() <= before.len() && now.starts_with(&before) {
            // Nothing visible yet (a skipped special token, a bare '▁' at the start): the window
            // keeps its start so the next token is decoded in the same context.
            self.read = self.ids.len();
            return Ok(String::new());
        }
        let new = new_text(&before, &now);
        self.prefix = self.read;
        self.read = self.ids.len();
        Ok(self.filter_stops(&new))
    }

    /// The end of generation: returns every held-back piece of text.
    pub fn finish(&mut self, tokenizer: &Tokenizer) -> Result<String> {
        if self.stopped.is_some() {
            return Ok(String::new());
        }
        let mut out = String::new();
        if self.read < self.ids.len() {
            let before = tokenizer.decode(&self.ids[self.prefix..self.read], self.skip_special)?;
            let now = tokenizer.decode(&self.ids[self.prefix..], self.skip_special)?;
            out = self.filter_stops(&new_text(&before, &now));
            self.prefix = self.read;
            self.read = self.ids.len();
        }
        if self.stopped.is_none() {
            for seg in self.stops.finish() {
                if let Segment::Text(t) = seg {
                    out.push_str(&t);
                }
            }
        }
        Ok(out)
    }

    /// The stop string that ended generation, if one did.
    pub fn stopped(&self) -> Option<&str> {
        self.stopped.as_deref()
    }

    /// Every id pushed so far.
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    fn filter_stops(&mut self, text: &str) -> String {
        let mut out = String::new();
        for seg in self.stops.push(text) {
            match seg {
                Segment::Text(t) => out.push_str(&t),
                Segment::Marker(i) => {
                    self.stopped = Some(self.stops.markers()[i].clone());
                    break;
                }
            }
        }
        out
    }
}

/// What `now` adds to `before` (decoders can rewrite the end of `before`, e.g. an unfinished
/// character; then everything after the common start is new).
fn new_text(before: &str, now: &str) -> String {
    if let Some(rest) = now.strip_prefix(before) {
        return rest.to_owned();
    }
    let common = before
        .char_indices()
        .zip(now.chars())
        .take_while(|((_, a), b)| a == b)
        .count();
    now.chars().skip(common).collect()
}
