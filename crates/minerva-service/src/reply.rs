//! A reply's text as it streams, for conversations and completions alike: stop tokens dropped,
//! the text split into reasoning and answer by the model's template, and the answer cut at the
//! first of the caller's stop strings (text that may be the start of one is held back until
//! the next piece settles it).

use crate::models::ChatPrep;
use minerva_engine::Event;
use minerva_text::{OutputPiece, OutputSplitter};

pub struct ReplyText {
    stop_ids: Vec<u32>,
    splitter: OutputSplitter,
    stop_strings: Vec<String>,
    /// Answer text that may be the start of a stop string.
    held: String,
    stopped: bool,
}

impl ReplyText {
    /// Empty stop strings are ignored.
    pub fn new(prep: &ChatPrep, mut stop_strings: Vec<String>) -> ReplyText {
        stop_strings.retain(|s| !s.is_empty());
        ReplyText {
            stop_ids: prep.stop.clone(),
            splitter: prep.builder.output_splitter(),
            stop_strings,
            held: String::new(),
            stopped: false,
        }
    }

    /// The pieces a session's event adds (none for events without text, for stop tokens,
    /// and after a stop string).
    pub fn push(&mut self, event: &Event) -> Vec<OutputPiece> {
        let text = match event {
            // A stop token ends the turn; its text (an end-of-turn marker) is not the answer's.
            Event::Token { id, .. } if self.stop_ids.contains(id) => return Vec::new(),
            Event::Token { text, .. } | Event::Text(text) => text,
            _ => return Vec::new(),
        };
        let pieces = self.splitter.push(text);
        self.cut(pieces)
    }

    /// What the splitter and the stop-string check still hold, at the end of the reply.
    pub fn finish(&mut self) -> Vec<OutputPiece> {
        let pieces = self.splitter.finish();
        let mut out = self.cut(pieces);
        if !self.stopped && !self.held.is_empty() {
            out.push(OutputPiece::Answer(std::mem::take(&mut self.held)));
        }
        out
    }

    /// True once the answer reached a stop string (the generation should be cancelled).
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    fn cut(&mut self, pieces: Vec<OutputPiece>) -> Vec<OutputPiece> {
        let mut out = Vec::new();
        for piece in pieces {
            if self.stopped {
                break;
            }
            match piece {
                OutputPiece::Answer(t) if !self.stop_strings.is_empty() => {
                    self.held.push_str(&t);
                    if let Some(at) = self.first_stop() {
                        self.held.truncate(at);
                        self.stopped = true;
                    }
                    let keep = if self.stopped {
                        0
                    } else {
                        self.partial_stop_len()
                    };
                    let ready = self.held.len() - keep;
                    if ready > 0 {
                        let rest = self.held.split_off(ready);
                        out.push(OutputPiece::Answer(std::mem::replace(&mut self.held, rest)));
                    }
                }
                other => out.push(other),
            }
        }
        out
    }

    /// Where the first stop string starts in the held text.
    fn first_stop(&self) -> Option<usize> {
        self.stop_strings
            .iter()
            .filter_map(|s| self.held.find(s.as_str()))
            .min()
    }

    /// The longest end of the held text that is the start of a stop string.
    fn partial_stop_len(&self) -> usize {
        let h = &self.held;
        self.stop_strings
            .iter()
            .flat_map(|s| {
                (1..s.len().min(h.len() + 1))
                    .filter(|&n| s.is_char_boundary(n) && h.ends_with(&s[..n]))
            })
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use minerva_text::{PromptBuilder, Tokenizer};
    use std::sync::Arc;

    fn prep() -> ChatPrep {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/thinking");
        let ckpt = minerva_formats::Checkpoint::open(std::path::Path::new(dir)).unwrap();
        ChatPrep {
            tokenizer: Arc::new(Tokenizer::from_checkpoint(&ckpt).unwrap()),
            builder: PromptBuilder::from_checkpoint(&ckpt).unwrap(),
            stop: vec![7],
        }
    }

    fn answer(r: &mut ReplyText, parts: &[&str]) -> String {
        let mut out = String::new();
        for p in parts {
            for piece in r.push(&Event::Text(p.to_string())) {
                if let OutputPiece::Answer(t) = piece {
                    out.push_str(&t);
                }
            }
        }
        for piece in r.finish() {
            if let OutputPiece::Answer(t) = piece {
                out.push_str(&t);
            }
        }
        out
    }

    #[test]
    fn a_stop_string_cuts_the_answer_even_across_pieces() {
        let mut r = ReplyText::new(&prep(), vec!["END".into(), "".into()]);
        assert_eq!(
            answer(&mut r, &["Paris is", " the capital E", "N", "D and more"]),
            "Paris is the capital "
        );
        assert!(r.stopped());
    }

    #[test]
    fn text_that_only_looked_like_a_stop_string_is_given_back() {
        let mut r = ReplyText::new(&prep(), vec!["\n\n".into()]);
        assert_eq!(answer(&mut r, &["one\n", "two\n"]), "one\ntwo\n");
        assert!(!r.stopped());
    }

    #[test]
    fn stop_tokens_add_no_text_and_reasoning_is_kept_apart() {
        let mut r = ReplyText::new(&prep(), vec![]);
        let mut pieces = r.push(&Event::Token {
            id: 7,
            text: "<|im_end|>".into(),
        });
        assert!(pieces.is_empty());
        pieces = r.push(&Event::Text("<think>hmm</think>Paris".into()));
        pieces.extend(r.finish());
        let reasoning: String = pieces
            .iter()
            .filter_map(|p| match p {
                OutputPiece::Reasoning(t) => Some(t.as_str()),
                _ => None,
            })
            .collect();
        assert!(reasoning.contains("hmm"), "{pieces:?}");
        assert!(pieces
            .iter()
            .any(|p| matches!(p, OutputPiece::Answer(t) if t.contains("Paris"))));
    }
}
