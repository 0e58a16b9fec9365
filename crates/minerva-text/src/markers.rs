//! Finding marker strings (stop strings, `<think>`, harmony's `<|message|>`…) in text that arrives
//! in pieces: text that could be the start of a marker is held back until the next piece says.

/// A piece of the stream: plain text, or the index of the marker that was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    Text(String),
    Marker(usize),
}

#[derive(Debug, Clone, Default)]
pub struct MarkerStream {
    markers: Vec<String>,
    pending: String,
}

impl MarkerStream {
    pub fn new<S: Into<String>>(markers: impl IntoIterator<Item = S>) -> MarkerStream {
        let markers = markers
            .into_iter()
            .map(Into::into)
            .filter(|m: &String| !m.is_empty())
            .collect();
        MarkerStream {
            markers,
            pending: String::new(),
        }
    }

    pub fn markers(&self) -> &[String] {
        &self.markers
    }

    /// Adds text; returns what is now certain, in order.
    pub fn push(&mut self, text: &str) -> Vec<Segment> {
        self.pending.push_str(text);
        let mut out = Vec::new();
        loop {
            // Earliest match; at one position the longest marker wins.
            let found = self
                .markers
                .iter()
                .enumerate()
                .filter_map(|(i, m)| {
                    self.pending
                        .find(m.as_str())
                        .map(|p| (p, std::cmp::Reverse(m.len()), i))
                })
                .min();
            match found {
                Some((pos, len, i)) => {
                    if pos > 0 {
                        out.push(Segment::Text(self.pending[..pos].to_owned()));
                    }
                    out.push(Segment::Marker(i));
                    self.pending.drain(..pos + len.0);
                }
                None => {
                    let keep = self.partial_len();
                    let cut = self.pending.len() - keep;
                    if cut > 0 {
                        out.push(Segment::Text(self.pending[..cut].to_owned()));
                        self.pending.drain(..cut);
                    }
                    return out;
                }
            }
        }
    }

    /// Everything held back, as text (the stream ended, so it cannot become a marker).
    pub fn finish(&mut self) -> Vec<Segment> {
        let rest = std::mem::take(&mut self.pending);
        if rest.is_empty() {
            vec![]
        } else {
            vec![Segment::Text(rest)]
        }
    }

    /// Length of the longest end of the pending text that begins some marker.
    fn partial_len(&self) -> usize {
        let p = &self.pending;
        let mut best = 0;
        for m in &self.markers {
            let longest = (m.len() - 1).min(p.len());
            for len in (best + 1..=longest).rev() {
                let start = p.len() - len;
                if p.is_char_boundary(start) && m.starts_with(&p[start..]) {
                    best = len;
                    break;
                }
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Segment::*;

    #[test]
    fn markers_split_across_pieces_are_found() {
        let mut s = MarkerStream::new(["<think>", "</think>"]);
        assert_eq!(s.push("a<th"), [Text("a".into())]);
        assert_eq!(s.push("ink>b</"), [Marker(0), Text("b".into())]);
        assert_eq!(s.push("think>"), [Marker(1)]);
        assert_eq!(s.push("x<"), [Text("x".into())]);
        assert_eq!(s.finish(), [Text("<".into())]);
    }

    #[test]
    fn multibyte_text_is_never_cut_inside_a_character() {
        let mut s = MarkerStream::new(["éa"]);
        assert_eq!(s.push("xé"), [Text("x".into())]);
        assert_eq!(s.push("b"), [Text("éb".into())]);
    }
}
