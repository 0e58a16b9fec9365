//! Streaming split of `<think>…</think>` output (Qwen3, DeepSeek-R1 style reasoning models) into
//! reasoning text and answer text.

use crate::markers::{MarkerStream, Segment};

/// A piece of model output, by kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutputPiece {
    Reasoning(String),
    Answer(String),
}

#[derive(Debug, Clone)]
pub struct ReasoningSplitter {
    stream: MarkerStream,
    in_reasoning: bool,
    /// Newlines right after a tag are layout, not content.
    trim_next: bool,
}

impl Default for ReasoningSplitter {
    fn default() -> Self {
        ReasoningSplitter::new()
    }
}

impl ReasoningSplitter {
    pub const OPEN: &'static str = "<think>";
    pub const CLOSE: &'static str = "</think>";

    /// Output that starts as answer text (reasoning begins when the model writes `<think>`).
    pub fn new() -> ReasoningSplitter {
        ReasoningSplitter {
            stream: MarkerStream::new([Self::OPEN, Self::CLOSE]),
            in_reasoning: false,
            trim_next: false,
        }
    }

    /// Output that starts inside reasoning (the prompt already ended with `<think>`).
    pub fn starting_in_reasoning() -> ReasoningSplitter {
        ReasoningSplitter {
            in_reasoning: true,
            trim_next: true,
            ..ReasoningSplitter::new()
        }
    }

    pub fn push(&mut self, text: &str) -> Vec<OutputPiece> {
        let segments = self.stream.push(text);
        self.apply(segments)
    }

    pub fn finish(&mut self) -> Vec<OutputPiece> {
        let segments = self.stream.finish();
        self.apply(segments)
    }

    fn apply(&mut self, segments: Vec<Segment>) -> Vec<OutputPiece> {
        let mut out: Vec<OutputPiece> = Vec::new();
        for seg in segments {
            match seg {
                Segment::Marker(0) => {
                    self.in_reasoning = true;
                    self.trim_next = true;
                }
                Segment::Marker(_) => {
                    self.in_reasoning = false;
                    self.trim_next = true;
                }
                Segment::Text(mut t) => {
                    if self.trim_next {
                        t = t.trim_start_matches('\n').to_owned();
                        if t.is_empty() {
                            continue;
                        }
                        self.trim_next = false;
                    }
                    match (out.last_mut(), self.in_reasoning) {
                        (Some(OutputPiece::Reasoning(r)), true) => r.push_str(&t),
                        (Some(OutputPiece::Answer(a)), false) => a.push_str(&t),
                        (_, true) => out.push(OutputPiece::Reasoning(t)),
                        (_, false) => out.push(OutputPiece::Answer(t)),
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(mut s: ReasoningSplitter, pieces: &[&str]) -> (String, String) {
        let (mut reasoning, mut answer) = (String::new(), String::new());
        let mut all: Vec<OutputPiece> = pieces.iter().flat_map(|p| s.push(p)).collect();
        all.extend(s.finish());
        for p in all {
            match p {
                OutputPiece::Reasoning(t) => reasoning.push_str(&t),
                OutputPiece::Answer(t) => answer.push_str(&t),
            }
        }
        (reasoning, answer)
    }

    #[test]
    fn think_tags_split_across_tokens() {
        let (r, a) = run(
            ReasoningSplitter::new(),
            &["<th", "ink>\nLet me ", "add.</th", "ink>\n\nIt is 4."],
        );
        assert_eq!(r, "Let me add.");
        assert_eq!(a, "It is 4.");
    }

    #[test]
    fn output_may_start_inside_reasoning() {
        let (r, a) = run(
            ReasoningSplitter::starting_in_reasoning(),
            &["\nhmm", "</think>", "ok <"],
        );
        assert_eq!(r, "hmm");
        assert_eq!(a, "ok <");
    }

    #[test]
    fn plain_output_is_all_answer() {
        let (r, a) = run(ReasoningSplitter::new(), &["no tags ", "here"]);
        assert_eq!((r.as_str(), a.as_str()), ("", "no tags here"));
    }
}
