//! OpenAI's harmony format (gpt-oss): rendering the system, developer and conversation messages,
//! and parsing the model's streamed output into its `analysis` and `final` channels.
//!
//! History follows the format's rule: earlier assistant turns keep only their final answer (the
//! analysis is dropped), each closed by `<|end|>` even though the model ended it with `<|return|>`.

use crate::markers::{MarkerStream, Segment};
use crate::template::Message;
use crate::tokenizer::Tokenizer;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReasoningEffort {
    Low,
    #[default]
    Medium,
    High,
}

impl ReasoningEffort {
    pub fn name(self) -> &'static str {
        match self {
            ReasoningEffort::Low => "low",
            ReasoningEffort::Medium => "medium",
            ReasoningEffort::High => "high",
        }
    }

    pub fn parse(s: &str) -> Option<ReasoningEffort> {
        match s.to_ascii_lowercase().as_str() {
            "low" => Some(ReasoningEffort::Low),
            "medium" => Some(ReasoningEffort::Medium),
            "high" => Some(ReasoningEffort::High),
            _ => None,
        }
    }
}

/// What goes into the harmony system message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HarmonyOptions {
    pub model_identity: String,
    pub reasoning_effort: ReasoningEffort,
    /// "2024-06" for the released gpt-oss models.
    pub knowledge_cutoff: Option<String>,
    /// "YYYY-MM-DD"; the line is left out when None.
    pub current_date: Option<String>,
}

impl Default for HarmonyOptions {
    fn default() -> Self {
        HarmonyOptions {
            model_identity: "You are ChatGPT, a large language model trained by OpenAI.".to_owned(),
            reasoning_effort: ReasoningEffort::Medium,
            knowledge_cutoff: Some("2024-06".to_owned()),
            current_date: None,
        }
    }
}

pub const START: &str = "<|start|>";
pub const END: &str = "<|end|>";
pub const MESSAGE: &str = "<|message|>";
pub const CHANNEL: &str = "<|channel|>";
pub const RETURN: &str = "<|return|>";
pub const CALL: &str = "<|call|>";
pub const CONSTRAIN: &str = "<|constrain|>";

/// Ids of the tokens that end a harmony reply (`<|return|>`, `<|call|>`) in this vocabulary.
pub fn stop_token_ids(tokenizer: &Tokenizer) -> Vec<u32> {
    [RETURN, CALL]
        .iter()
        .filter_map(|t| tokenizer.token_to_id(t))
        .collect()
}

fn push_message(out: &mut String, header: &str, content: &str) {
    out.push_str(START);
    out.push_str(header);
    out.push_str(MESSAGE);
    out.push_str(content);
    out.push_str(END);
}

/// The prompt for `messages`: the harmony system message, the caller's system messages as the
/// developer message's instructions, then the conversation. Assistant messages are earlier final
/// answers. With `add_generation_prompt` it ends with `<|start|>assistant`.
pub fn render(
    messages: &[Message],
    options: &HarmonyOptions,
    add_generation_prompt: bool,
) -> String {
    let mut system = options.model_identity.clone();
    if let Some(cutoff) = &options.knowledge_cutoff {
        system.push_str(&format!("\nKnowledge cutoff: {cutoff}"));
    }
    if let Some(date) = &options.current_date {
        system.push_str(&format!("\nCurrent date: {date}"));
    }
    system.push_str(&format!(
        "\n\nReasoning: {}",
        options.reasoning_effort.name()
    ));
    system.push_str("\n\n# Valid channels: analysis, commentary, final. Channel must be included for every message.");
    let mut out = String::new();
    push_message(&mut out, "system", &system);

    let instructions: Vec<&str> = messages
        .iter()
        .filter(|m| m.role == "system" || m.role == "developer")
        .map(|m| m.content.as_str())
        .collect();
    if !instructions.is_empty() {
        push_message(
            &mut out,
            "developer",
            &format!("# Instructions\n\n{}", instructions.join("\n\n")),
        );
    }
    for m in messages
        .iter()
        .filter(|m| m.role != "system" && m.role != "developer")
    {
        match m.role.as_str() {
            "assistant" => push_message(&mut out, "assistant<|channel|>final", &m.content),
            role => push_message(&mut out, role, &m.content),
        }
    }
    if add_generation_prompt {
        out.push_str(START);
        out.push_str("assistant");
    }
    out
}

/// Why a harmony reply ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HarmonyStop {
    /// `<|return|>`: the final answer is complete.
    Return,
    /// `<|call|>`: the model calls a tool.
    Call,
}

/// What the parser reports as output streams in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HarmonyEvent {
    /// Text of the current message in `channel` ("analysis", "final", "commentary", …).
    Delta {
        channel: String,
        text: String,
    },
    /// The message in `channel` ended with `<|end|>`.
    MessageEnd {
        channel: String,
    },
    Stop(HarmonyStop),
}

/// One parsed message of the reply.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HarmonyMessage {
    pub channel: String,
    /// `to=…` of a tool call, if any.
    pub recipient: Option<String>,
    pub content: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// Reading a message header (role, `<|channel|>name`, `to=…`) up to `<|message|>`.
    Header(String),
    Body,
    Done,
}

/// Longest header text accepted before the output is taken as plain final text.
const MAX_HEADER: usize = 256;

/// Streaming parser of a harmony reply (the text generated after `<|start|>assistant`, special
/// tokens included).
#[derive(Debug, Clone)]
pub struct HarmonyParser {
    stream: MarkerStream,
    state: State,
    messages: Vec<HarmonyMessage>,
    stop: Option<HarmonyStop>,
}

impl Default for HarmonyParser {
    fn default() -> Self {
        HarmonyParser::new()
    }
}

const MARKERS: [&str; 7] = [START, END, MESSAGE, CHANNEL, RETURN, CALL, CONSTRAIN];

impl HarmonyParser {
    pub fn new() -> HarmonyParser {
        HarmonyParser {
            stream: MarkerStream::new(MARKERS),
            state: State::Header(String::new()),
            messages: Vec::new(),
            stop: None,
        }
    }

    /// Feeds decoded output text; returns what it completes.
    pub fn push(&mut self, text: &str) -> Vec<HarmonyEvent> {
        let segments = self.stream.push(text);
        self.apply(segments)
    }

    /// The output ended (e.g. at the token limit): returns what was held back.
    pub fn finish(&mut self) -> Vec<HarmonyEvent> {
        let segments = self.stream.finish();
        self.apply(segments)
    }

    fn apply(&mut self, segments: Vec<Segment>) -> Vec<HarmonyEvent> {
        let mut events = Vec::new();
        for seg in segments {
            match (&mut self.state, seg) {
                (State::Done, _) => {}
                (State::Header(h), Segment::Text(t)) => {
                    h.push_str(&t);
                    if h.len() > MAX_HEADER {
                        // Not a header at all: show it as the answer.
                        let text = std::mem::take(h);
                        self.open("final", None);
                        self.state = State::Body;
                        self.body_text(text, &mut events);
                    }
                }
                (State::Header(h), Segment::Marker(i)) => match MARKERS[i] {
                    MESSAGE => {
                        let (channel, recipient) = parse_header(h);
                        self.open(&channel, recipient);
                        self.state = State::Body;
                    }
                    CHANNEL => h.push_str(" channel="),
                    CONSTRAIN => h.push_str(" constrain="),
                    START => h.clear(),
                    RETURN | CALL => self.stop(MARKERS[i], &mut events),
                    _ => {}
                },
                (State::Body, Segment::Text(t)) => self.body_text(t, &mut events),
                (State::Body, Segment::Marker(i)) => match MARKERS[i] {
                    END => {
                        let channel = self.current_channel();
                        events.push(HarmonyEvent::MessageEnd { channel });
                        self.state = State::Header(String::new());
                    }
                    RETURN | CALL => self.stop(MARKERS[i], &mut events),
                    // A new message without the previous one closed.
                    START => self.state = State::Header(String::new()),
                    other => self.body_text(other.to_owned(), &mut events),
                },
            }
        }
        events
    }

    fn open(&mut self, channel: &str, recipient: Option<String>) {
        self.messages.push(HarmonyMessage {
            channel: channel.to_owned(),
            recipient,
            content: String::new(),
        });
    }

    fn current_channel(&self) -> String {
        self.messages
            .last()
            .map(|m| m.channel.clone())
            .unwrap_or_default()
    }

    fn body_text(&mut self, text: String, events: &mut Vec<HarmonyEvent>) {
        if text.is_empty() {
            return;
        }
        if let Some(m) = self.messages.last_mut() {
            m.content.push_str(&text);
            events.push(HarmonyEvent::Delta {
                channel: m.channel.clone(),
                text,
            });
        }
    }

    fn stop(&mut self, marker: &str, events: &mut Vec<HarmonyEvent>) {
        let stop = if marker == CALL {
            HarmonyStop::Call
        } else {
            HarmonyStop::Return
        };
        self.stop = Some(stop);
        self.state = State::Done;
        events.push(HarmonyEvent::Stop(stop));
    }

    /// Every message parsed so far, in order.
    pub fn messages(&self) -> &[HarmonyMessage] {
        &self.messages
    }

    /// All `analysis` text (the reasoning, shown folded).
    pub fn analysis(&self) -> String {
        self.channel_text("analysis")
    }

    /// The `final` channel: the answer.
    pub fn final_text(&self) -> String {
        self.channel_text("final")
    }

    fn channel_text(&self, channel: &str) -> String {
        self.messages
            .iter()
            .filter(|m| m.channel == channel)
            .map(|m| m.content.as_str())
            .collect()
    }

    pub fn stop_reason(&self) -> Option<HarmonyStop> {
        self.stop
    }

    /// The reply as the conversation history keeps it: the final answer only.
    pub fn history_message(&self) -> Message {
        Message::assistant(self.final_text())
    }
}

/// Channel and recipient of a header such as `assistant channel=final` or
/// ` channel=commentary to=functions.get_weather constrain=json`.
fn parse_header(h: &str) -> (String, Option<String>) {
    let mut channel = String::new();
    let mut recipient = None;
    for word in h.split_whitespace() {
        if let Some(c) = word.strip_prefix("channel=") {
            channel = c.to_owned();
        } else if let Some(r) = word.strip_prefix("to=") {
            recipient = Some(r.to_owned());
        }
    }
    if channel.is_empty() {
        channel = "final".to_owned();
    }
    (channel, recipient)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_developer_and_history_follow_the_format() {
        let options = HarmonyOptions {
            reasoning_effort: ReasoningEffort::High,
            current_date: Some("2025-06-28".into()),
            ..HarmonyOptions::default()
        };
        let messages = [
            Message::system("Answer in French."),
            Message::user("Hi"),
            Message::assistant("Bonjour"),
            Message::user("2+2?"),
        ];
        let out = render(&messages, &options, true);
        assert_eq!(
            out,
            "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n\
             Knowledge cutoff: 2024-06\nCurrent date: 2025-06-28\n\nReasoning: high\n\n\
             # Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|>\
             <|start|>developer<|message|># Instructions\n\nAnswer in French.<|end|>\
             <|start|>user<|message|>Hi<|end|>\
             <|start|>assistant<|channel|>final<|message|>Bonjour<|end|>\
             <|start|>user<|message|>2+2?<|end|><|start|>assistant"
        );
    }

    #[test]
    fn no_developer_message_without_instructions() {
        let out = render(&[Message::user("Hi")], &HarmonyOptions::default(), false);
        assert!(!out.contains("developer"));
        assert!(out.contains("Reasoning: medium"));
        assert!(out.ends_with("<|start|>user<|message|>Hi<|end|>"));
    }

    #[test]
    fn streamed_output_splits_into_channels() {
        let output = "<|channel|>analysis<|message|>User asks 2+2. Easy.<|end|>\
                      <|start|>assistant<|channel|>final<|message|>4<|return|>ignored";
        // Feed in three-byte pieces (at char boundaries) to cut through every marker.
        let mut p = HarmonyParser::new();
        let mut events = Vec::new();
        let mut rest = output;
        while !rest.is_empty() {
            let mut cut = rest.len().min(3);
            while !rest.is_char_boundary(cut) {
                cut += 1;
            }
            events.extend(p.push(&rest[..cut]));
            rest = &rest[cut..];
        }
        events.extend(p.finish());
        assert_eq!(p.analysis(), "User asks 2+2. Easy.");
        assert_eq!(p.final_text(), "4");
        assert_eq!(p.stop_reason(), Some(HarmonyStop::Return));
        assert!(events.contains(&HarmonyEvent::MessageEnd {
            channel: "analysis".into()
        }));
        assert_eq!(
            events.last(),
            Some(&HarmonyEvent::Stop(HarmonyStop::Return))
        );
        let deltas: String = events
            .iter()
            .filter_map(|e| match e {
                HarmonyEvent::Delta { channel, text } if channel == "final" => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(deltas, "4");
        // History keeps the final answer only, closed by <|end|> rather than <|return|>.
        let history = render(
            &[Message::user("2+2?"), p.history_message()],
            &HarmonyOptions::default(),
            false,
        );
        assert!(
            history.ends_with("<|start|>assistant<|channel|>final<|message|>4<|end|>"),
            "{history}"
        );
        assert!(!history.contains("Easy"));
    }

    #[test]
    fn tool_calls_stop_on_call() {
        let mut p = HarmonyParser::new();
        p.push("<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"SF\"}<|call|>");
        assert_eq!(p.stop_reason(), Some(HarmonyStop::Call));
        let m = &p.messages()[0];
        assert_eq!(m.channel, "commentary");
        assert_eq!(m.recipient.as_deref(), Some("functions.get_weather"));
        assert_eq!(m.content, "{\"city\":\"SF\"}");
    }
}
