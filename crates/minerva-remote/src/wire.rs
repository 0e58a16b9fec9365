//! What OpenAI-compatible servers send and take, as serde types, read leniently: every field
//! may be missing or null, and unknown fields are ignored, since each server adds its own.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use std::collections::BTreeMap;

use super::{RemoteChat, RemoteCompletion, RemoteLogprob, RemoteMessage};

/// The body of `POST /chat/completions`.
#[derive(Debug, Serialize)]
pub struct ChatRequest<'a> {
    pub model: &'a str,
    pub messages: &'a [RemoteMessage],
    pub stream: bool,
    pub stream_options: StreamOptions,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    pub stop: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_logprobs: Option<usize>,
}

#[derive(Debug, Serialize)]
pub struct StreamOptions {
    /// Asks for a last chunk with the token counts.
    pub include_usage: bool,
}

impl<'a> ChatRequest<'a> {
    pub fn streamed(chat: &'a RemoteChat) -> ChatRequest<'a> {
        ChatRequest {
            model: &chat.model,
            messages: &chat.messages,
            stream: true,
            stream_options: StreamOptions {
                include_usage: true,
            },
            max_tokens: chat.max_tokens,
            temperature: chat.temperature,
            top_p: chat.top_p,
            seed: chat.seed,
            stop: &chat.stop,
            logprobs: chat.logprobs.map(|_| true),
            top_logprobs: chat.logprobs,
        }
    }
}

/// The body of `POST /completions`.
#[derive(Debug, Serialize)]
pub struct CompletionRequest<'a> {
    pub model: &'a str,
    pub prompt: &'a str,
    pub stream: bool,
    pub stream_options: StreamOptions,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    pub stop: &'a [String],
    /// The legacy API's number of alternatives per token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<usize>,
}

impl<'a> CompletionRequest<'a> {
    pub fn streamed(req: &'a RemoteCompletion) -> CompletionRequest<'a> {
        CompletionRequest {
            model: &req.model,
            prompt: &req.prompt,
            stream: true,
            stream_options: StreamOptions {
                include_usage: true,
            },
            max_tokens: req.max_tokens,
            temperature: req.temperature,
            seed: req.seed,
            stop: &req.stop,
            logprobs: req.logprobs,
        }
    }
}

/// The answer of `GET /models`.
#[derive(Debug, Deserialize)]
pub struct ModelList {
    pub data: Vec<ModelEntry>,
}

#[derive(Debug, Deserialize)]
pub struct ModelEntry {
    pub id: String,
}

/// One streamed chunk, or (with `message` instead of `delta`) a whole answer from a server
/// that ignored `stream: true`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Chunk {
    #[serde(deserialize_with = "null_as_default")]
    pub choices: Vec<Choice>,
    pub usage: Option<Usage>,
    /// Some servers report a failure mid-stream as a chunk of its own.
    pub error: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Choice {
    pub index: usize,
    #[serde(alias = "message")]
    pub delta: Option<Delta>,
    /// A completion's text (chat replies send `delta` instead).
    pub text: Option<String>,
    pub finish_reason: Option<String>,
    pub logprobs: Option<Logprobs>,
}

/// New text. The first chunk often holds only the role, with `content: null`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Delta {
    pub content: Option<String>,
    /// llama.cpp's and Minerva's name for the thinking text.
    pub reasoning_content: Option<String>,
    /// vLLM's name for it. Two fields rather than a serde alias: a server that sends both
    /// names (one of them null) would make an alias fail as a duplicate field.
    pub reasoning: Option<String>,
}

impl Delta {
    pub fn reasoning(&mut self) -> Option<String> {
        self.reasoning_content.take().or(self.reasoning.take())
    }
}

/// A chunk's log-probabilities: a chat's `content` list, or a completion's parallel lists
/// (the legacy API's, which vLLM sends; llama.cpp sends `content` for both).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Logprobs {
    #[serde(deserialize_with = "null_as_default")]
    pub content: Vec<TokenLogprob>,
    #[serde(deserialize_with = "null_as_default")]
    pub tokens: Vec<String>,
    #[serde(deserialize_with = "null_as_default")]
    pub token_logprobs: Vec<Option<f32>>,
    /// Per token, its alternatives as a map of token to logprob (or null).
    #[serde(deserialize_with = "null_as_default")]
    pub top_logprobs: Vec<Option<BTreeMap<String, Option<f32>>>>,
}

impl Logprobs {
    /// The tokens of either shape; a missing logprob is NaN, alternatives most likely first.
    pub fn into_tokens(self) -> Vec<RemoteLogprob> {
        if !self.content.is_empty() {
            return self.content.into_iter().map(Into::into).collect();
        }
        let mut lps = self.token_logprobs.into_iter();
        let mut tops = self.top_logprobs.into_iter();
        self.tokens
            .into_iter()
            .map(|token| {
                let logprob = lps.next().flatten().unwrap_or(f32::NAN);
                let mut top: Vec<(String, f32)> = tops
                    .next()
                    .flatten()
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(t, lp)| (t, lp.unwrap_or(f32::NAN)))
                    .collect();
                // A JSON object has no order: the most likely first, as in a chat's list.
                top.sort_by(|a, b| b.1.total_cmp(&a.1));
                RemoteLogprob {
                    token,
                    logprob,
                    top,
                }
            })
            .collect()
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct TokenLogprob {
    pub token: String,
    pub logprob: f32,
    #[serde(deserialize_with = "null_as_default")]
    pub top_logprobs: Vec<TopLogprob>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct TopLogprob {
    pub token: String,
    pub logprob: f32,
}

impl From<TokenLogprob> for RemoteLogprob {
    fn from(t: TokenLogprob) -> RemoteLogprob {
        RemoteLogprob {
            token: t.token,
            logprob: t.logprob,
            top: t
                .top_logprobs
                .into_iter()
                .map(|a| (a.token, a.logprob))
                .collect(),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Usage {
    pub prompt_tokens: Option<usize>,
    pub completion_tokens: Option<usize>,
}

fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// The message in an error body or event: OpenAI's and llama.cpp's `{"error": {"message"}}`,
/// `{"error": "text"}`, `{"message": …}`, FastAPI's `{"detail": …}`, or short plain text.
pub fn error_message(body: &str) -> Option<String> {
    let body = body.trim();
    match serde_json::from_str::<Value>(body) {
        Ok(v) => message_of(&v),
        // An HTML error page says nothing useful in a line of text.
        Err(_) if !body.is_empty() && !body.starts_with('<') => Some(clip(body, 300)),
        Err(_) => None,
    }
}

/// The message of an `error` value or of an object holding one.
pub fn message_of(v: &Value) -> Option<String> {
    let text = match v {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => ["error", "message", "detail", "msg"]
            .iter()
            .find_map(|k| o.get(*k).and_then(message_of)),
        Value::Array(a) => a.first().and_then(message_of),
        _ => None,
    }?;
    let text = text.trim();
    (!text.is_empty()).then(|| clip(text, 1000))
}

/// At most `max` characters of `s`, marked when cut.
pub fn clip(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(json: &str) -> Chunk {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn a_vllm_chunk_with_reasoning() {
        let mut c = chunk(
            r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"q",
            "choices":[{"index":0,"delta":{"reasoning":"Let me think","content":null},
            "logprobs":null,"finish_reason":null}]}"#,
        );
        let d = c.choices[0].delta.as_mut().unwrap();
        assert_eq!(d.reasoning().as_deref(), Some("Let me think"));
        assert_eq!(d.content, None);
        assert!(c.usage.is_none());
    }

    #[test]
    fn a_llama_cpp_chunk_with_reasoning_content() {
        let mut c = chunk(
            r#"{"choices":[{"finish_reason":null,"index":0,"delta":{"reasoning_content":"hm"}}],
            "created":1,"id":"x","model":"m","system_fingerprint":"b1","object":"chat.completion.chunk"}"#,
        );
        assert_eq!(
            c.choices[0].delta.as_mut().unwrap().reasoning().as_deref(),
            Some("hm")
        );
    }

    #[test]
    fn both_reasoning_names_in_one_delta() {
        let mut c = chunk(r#"{"choices":[{"delta":{"reasoning_content":null,"reasoning":"r"}}]}"#);
        assert_eq!(
            c.choices[0].delta.as_mut().unwrap().reasoning().as_deref(),
            Some("r")
        );
    }

    #[test]
    fn a_role_only_first_chunk() {
        let c = chunk(r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":null}}]}"#);
        let d = c.choices[0].delta.as_ref().unwrap();
        assert_eq!(
            (d.content.as_deref(), d.reasoning_content.as_deref()),
            (None, None)
        );
    }

    #[test]
    fn a_usage_only_chunk() {
        let c = chunk(
            r#"{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":34,"total_tokens":46}}"#,
        );
        assert!(c.choices.is_empty());
        let u = c.usage.unwrap();
        assert_eq!((u.prompt_tokens, u.completion_tokens), (Some(12), Some(34)));
        // Servers that send `usage: null` and `choices: null`.
        let c = chunk(r#"{"choices":null,"usage":null}"#);
        assert!(c.choices.is_empty() && c.usage.is_none());
    }

    #[test]
    fn a_finish_reason_chunk() {
        let c = chunk(r#"{"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}"#);
        assert_eq!(c.choices[0].finish_reason.as_deref(), Some("length"));
    }

    #[test]
    fn logprobs_with_alternatives() {
        let c = chunk(
            r#"{"choices":[{"delta":{"content":"Hi"},"logprobs":{"content":[{"token":"Hi",
            "logprob":-0.25,"bytes":[72,105],"top_logprobs":[{"token":"Hi","logprob":-0.25},
            {"token":"Hello","logprob":-1.5}]}]}}]}"#,
        );
        let lp: Vec<RemoteLogprob> = c
            .choices
            .into_iter()
            .flat_map(|c| c.logprobs.unwrap().content)
            .map(Into::into)
            .collect();
        assert_eq!(lp.len(), 1);
        assert_eq!((lp[0].token.as_str(), lp[0].logprob), ("Hi", -0.25));
        assert_eq!(
            lp[0].top,
            [("Hi".to_string(), -0.25), ("Hello".to_string(), -1.5)]
        );
    }

    #[test]
    fn a_completion_chunk_with_legacy_logprobs() {
        let c = chunk(
            r#"{"object":"text_completion","choices":[{"index":0,"text":"the cat",
            "logprobs":{"tokens":["the"," cat"],"token_logprobs":[-0.5,null],
            "top_logprobs":[{"a":-2.0,"the":-0.5},null],"text_offset":[0,3]},
            "finish_reason":null}]}"#,
        );
        let choice = c.choices.into_iter().next().unwrap();
        assert_eq!(choice.text.as_deref(), Some("the cat"));
        let lp = choice.logprobs.unwrap().into_tokens();
        assert_eq!(lp.len(), 2);
        assert_eq!((lp[0].token.as_str(), lp[0].logprob), ("the", -0.5));
        assert_eq!(
            lp[0].top,
            [("the".to_string(), -0.5), ("a".to_string(), -2.0)]
        );
        assert_eq!(lp[1].token, " cat");
        assert!(lp[1].logprob.is_nan() && lp[1].top.is_empty());
    }

    #[test]
    fn the_completion_request_sends_the_legacy_logprobs_count() {
        let req = RemoteCompletion {
            model: "m".into(),
            prompt: "Once".into(),
            max_tokens: Some(4),
            temperature: Some(0.0),
            logprobs: Some(1),
            ..RemoteCompletion::default()
        };
        let v = serde_json::to_value(CompletionRequest::streamed(&req)).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"model": "m", "prompt": "Once", "stream": true,
                "stream_options": {"include_usage": true}, "max_tokens": 4,
                "temperature": 0.0, "logprobs": 1})
        );
    }

    #[test]
    fn an_error_chunk() {
        let c = chunk(r#"{"error":{"message":"out of memory","type":"server_error","code":500}}"#);
        assert_eq!(
            message_of(c.error.as_ref().unwrap()).as_deref(),
            Some("out of memory")
        );
    }

    #[test]
    fn error_messages_of_each_shape() {
        let m = |s: &str| error_message(s);
        assert_eq!(
            m(r#"{"error":{"message":"Incorrect API key provided","type":"invalid_request_error"}}"#)
                .as_deref(),
            Some("Incorrect API key provided")
        );
        assert_eq!(
            m(r#"{"error":{"code":400,"message":"the request exceeds the context size","type":"exceed_context_size_error"}}"#)
                .as_deref(),
            Some("the request exceeds the context size")
        );
        assert_eq!(
            m(r#"{"error":"model not loaded"}"#).as_deref(),
            Some("model not loaded")
        );
        assert_eq!(m(r#"{"detail":"Not Found"}"#).as_deref(), Some("Not Found"));
        assert_eq!(
            m("upstream timed out").as_deref(),
            Some("upstream timed out")
        );
        assert_eq!(m("<html><body>502</body></html>"), None);
        assert_eq!(m(""), None);
        assert_eq!(m(r#"{"error":{"code":500}}"#), None);
    }

    #[test]
    fn the_request_asks_for_usage_and_leaves_unset_fields_out() {
        let chat = RemoteChat {
            model: "m".into(),
            messages: vec![RemoteMessage::new("user", "hi")],
            logprobs: Some(3),
            ..RemoteChat::default()
        };
        let v = serde_json::to_value(ChatRequest::streamed(&chat)).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                "stream": true, "stream_options": {"include_usage": true},
                "logprobs": true, "top_logprobs": 3})
        );
    }

    #[test]
    fn clip_counts_characters() {
        assert_eq!(clip("héllo", 2), "hé…");
        assert_eq!(clip("hi", 2), "hi");
    }
}
