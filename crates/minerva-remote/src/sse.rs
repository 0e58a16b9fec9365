//! Server-sent events: lines read from a byte stream, and the events those lines make.

use std::io::{self, BufRead};

/// The longest line accepted; a server sending more without a line end is broken or hostile.
pub const MAX_LINE: usize = 1 << 20;

/// One event: its name (empty for the default, `message`) and its data lines joined by `\n`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    pub event: String,
    pub data: String,
}

/// Turns lines into events. An event ends at a blank line; comments (`:` lines) are dropped;
/// `id:` and `retry:` are ignored, since a chat stream is never resumed.
#[derive(Debug, Default)]
pub struct SseParser {
    event: String,
    data: String,
    /// Whether a `data` field came, so that an event of one empty `data:` line still counts.
    has_data: bool,
}

impl SseParser {
    pub fn new() -> SseParser {
        SseParser::default()
    }

    /// Feeds one line without its line end; returns the event that a blank line completes.
    pub fn line(&mut self, line: &str) -> Option<SseEvent> {
        if line.is_empty() {
            return self.dispatch();
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "event" => self.event = value.to_string(),
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            _ => {}
        }
        None
    }

    /// At the end of the stream: the event whose blank line never came, if any.
    pub fn finish(&mut self) -> Option<SseEvent> {
        self.dispatch()
    }

    fn dispatch(&mut self) -> Option<SseEvent> {
        let event = std::mem::take(&mut self.event);
        if !std::mem::take(&mut self.has_data) {
            // An event without data is not dispatched (as browsers do).
            return None;
        }
        Some(SseEvent {
            event,
            data: std::mem::take(&mut self.data),
        })
    }
}

/// Splits a byte stream into lines at `\n`, `\r\n` or a lone `\r`, each at most `max` bytes.
pub struct Lines<R> {
    reader: R,
    max: usize,
    /// The last line ended at `\r`: a `\n` that follows belongs to it. Remembered rather than
    /// peeked at, so a line is handed over without waiting for the next bytes to arrive.
    after_cr: bool,
    buf: Vec<u8>,
}

impl<R: BufRead> Lines<R> {
    pub fn new(reader: R, max: usize) -> Lines<R> {
        Lines {
            reader,
            max,
            after_cr: false,
            buf: Vec::new(),
        }
    }

    /// The next line (invalid UTF-8 replaced), or None at the end of the stream. A last line
    /// without a line end is still returned.
    pub fn next_line(&mut self) -> io::Result<Option<String>> {
        self.buf.clear();
        loop {
            let chunk = match self.reader.fill_buf() {
                Ok(c) => c,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if chunk.is_empty() {
                if self.buf.is_empty() {
                    return Ok(None);
                }
                return Ok(Some(String::from_utf8_lossy(&self.buf).into_owned()));
            }
            let mut start = 0;
            if self.after_cr {
                self.after_cr = false;
                if chunk[0] == b'\n' {
                    start = 1;
                }
            }
            let rest = &chunk[start..];
            match rest.iter().position(|&b| b == b'\n' || b == b'\r') {
                Some(end) => {
                    self.after_cr = rest[end] == b'\r';
                    push(&mut self.buf, self.max, &rest[..end])?;
                    self.reader.consume(start + end + 1);
                    return Ok(Some(String::from_utf8_lossy(&self.buf).into_owned()));
                }
                None => {
                    let n = rest.len();
                    push(&mut self.buf, self.max, &rest[..n])?;
                    self.reader.consume(start + n);
                }
            }
        }
    }
}

/// Adds to a line, refusing to make it longer than `max`.
fn push(line: &mut Vec<u8>, max: usize, bytes: &[u8]) -> io::Result<()> {
    if line.len() + bytes.len() > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a line longer than {} KiB", max / 1024),
        ));
    }
    line.extend_from_slice(bytes);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(bytes: &[u8], capacity: usize) -> Vec<String> {
        let reader = io::BufReader::with_capacity(capacity, bytes);
        let mut lines = Lines::new(reader, MAX_LINE);
        let mut out = Vec::new();
        while let Some(l) = lines.next_line().unwrap() {
            out.push(l);
        }
        out
    }

    fn events(text: &str) -> Vec<SseEvent> {
        let mut parser = SseParser::new();
        let mut out: Vec<SseEvent> = lines(text.as_bytes(), 8192)
            .iter()
            .filter_map(|l| parser.line(l))
            .collect();
        out.extend(parser.finish());
        out
    }

    fn data(event: &str, data: &str) -> SseEvent {
        SseEvent {
            event: event.into(),
            data: data.into(),
        }
    }

    #[test]
    fn every_line_end_and_any_buffer_size() {
        let text = b"a\nb\r\nc\rd\r\n\r\ne";
        let want = ["a", "b", "c", "d", "", "e"];
        // A buffer of 1 or 2 bytes splits `\r\n` across reads.
        for capacity in [1, 2, 3, 64] {
            assert_eq!(lines(text, capacity), want, "capacity {capacity}");
        }
    }

    #[test]
    fn an_overlong_line_is_an_error() {
        let long = [b'x'; 100];
        let mut lines = Lines::new(&long[..], 64);
        let err = lines.next_line().unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        let mut ok = Lines::new(&long[..], 100);
        assert_eq!(ok.next_line().unwrap().unwrap().len(), 100);
    }

    #[test]
    fn invalid_utf8_is_replaced() {
        assert_eq!(lines(b"a\xffb\n", 16), ["a\u{fffd}b"]);
    }

    #[test]
    fn events_end_at_blank_lines_and_join_data_lines() {
        let got = events("data: one\n\ndata: two\ndata:three\n\n");
        assert_eq!(got, [data("", "one"), data("", "two\nthree")]);
    }

    #[test]
    fn comments_ids_and_retries_are_dropped() {
        let got = events(": ping\n\nid: 7\nretry: 10\ndata: x\n\n: ping\n\n");
        assert_eq!(got, [data("", "x")]);
    }

    #[test]
    fn named_events_and_crlf() {
        let got = events("event: error\r\ndata: {\"message\":\"boom\"}\r\n\r\ndata: y\r\n\r\n");
        assert_eq!(
            got,
            [data("error", "{\"message\":\"boom\"}"), data("", "y")]
        );
    }

    #[test]
    fn the_last_event_without_a_blank_line() {
        assert_eq!(
            events("data: a\n\ndata: [DONE]\n"),
            [data("", "a"), data("", "[DONE]")]
        );
        assert_eq!(events("data: [DONE]"), [data("", "[DONE]")]);
    }

    #[test]
    fn the_event_name_does_not_leak_into_the_next_event() {
        let got = events("event: error\n\ndata: z\n\n");
        assert_eq!(got, [data("", "z")]);
    }

    #[test]
    fn an_empty_data_line_is_an_event_and_spaces_after_the_first_are_kept() {
        assert_eq!(
            events("data:\n\ndata:  two\n\n"),
            [data("", ""), data("", " two")]
        );
    }
}
