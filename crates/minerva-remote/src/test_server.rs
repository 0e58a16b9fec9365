//! A real HTTP server on the loopback for the client's tests, serving canned streams.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response as HttpResponse;
use axum::routing::{get, post};
use axum::Router;

use super::tests::STREAM;
use super::*;

pub(super) const KEY: &str = "sk-test";

/// What the server saw of the last chat request: its Authorization header and JSON body.
pub(super) type Seen = Arc<Mutex<Option<(String, serde_json::Value)>>>;

/// Serves `router` on 127.0.0.1 from a runtime on a thread of its own; the base URL.
pub(super) fn serve(router: Router) -> String {
    let (tx, rx) = std::sync::mpsc::channel::<SocketAddr>();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap()).unwrap();
            axum::serve(listener, router).await.unwrap();
        });
    });
    format!("http://{}", rx.recv().unwrap())
}

pub(super) fn sse(body: Body) -> HttpResponse {
    HttpResponse::builder()
        .header("content-type", "text/event-stream")
        .body(body)
        .unwrap()
}

pub(super) fn json_reply(status: StatusCode, body: &str) -> HttpResponse {
    HttpResponse::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap()
}

/// Sets its flag when dropped: the server has let go of a stream (its client went away).
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// One chunk every 100 ms, `count` of them; `dropped` is set once the server drops the stream.
pub(super) fn slow_stream(count: usize, dropped: Arc<AtomicBool>) -> Body {
    let flag = DropFlag(dropped);
    Body::from_stream(futures_util::stream::unfold(
        (0, flag),
        move |(i, flag)| async move {
            if i == count {
                return None;
            }
            if i > 0 {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let chunk =
                format!("data: {{\"choices\":[{{\"delta\":{{\"content\":\"t{i} \"}}}}]}}\n\n");
            Some((Ok::<_, Infallible>(chunk), (i + 1, flag)))
        },
    ))
}

/// The chat route: what it does depends on the model asked for. `chat` streams [`STREAM`],
/// `slow` streams 50 chunks 100 ms apart and `slow-12` 12, `stall` sends a chunk and then
/// nothing for 10 s, `silent` sends nothing for 10 s, `done-then-hang` sends `[DONE]` and keeps
/// the connection, `whole` answers in one JSON piece, `page` answers a web page, `missing` is
/// unknown (404), and any other model fails with llama.cpp's error body (500).
async fn chat(
    headers: HeaderMap,
    body: String,
    seen: Seen,
    dropped: Arc<AtomicBool>,
) -> HttpResponse {
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    if auth != format!("Bearer {KEY}") {
        return json_reply(
            StatusCode::UNAUTHORIZED,
            r#"{"error":{"message":"Incorrect API key provided","type":"invalid_request_error"}}"#,
        );
    }
    let body: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    let model = body["model"].as_str().unwrap_or_default().to_string();
    *seen.lock().unwrap() = Some((auth, body));
    match model.as_str() {
        "chat" => sse(Body::from(STREAM)),
        "slow" => sse(slow_stream(50, dropped)),
        "slow-12" => sse(slow_stream(12, dropped)),
        "stall" => {
            let stream = futures_util::stream::unfold(0, |i| async move {
                if i > 0 {
                    tokio::time::sleep(Duration::from_secs(10)).await;
                    return None;
                }
                let chunk = "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n";
                Some((Ok::<_, Infallible>(chunk), 1))
            });
            sse(Body::from_stream(stream))
        }
        "silent" => {
            tokio::time::sleep(Duration::from_secs(10)).await;
            sse(Body::from(STREAM))
        }
        "done-then-hang" => {
            let stream = futures_util::stream::unfold(0, |i| async move {
                match i {
                    0 => Some((Ok::<_, Infallible>(STREAM.to_string()), 1)),
                    _ => {
                        tokio::time::sleep(Duration::from_secs(10)).await;
                        None
                    }
                }
            });
            sse(Body::from_stream(stream))
        }
        "whole" => json_reply(
            StatusCode::OK,
            r#"{"choices":[{"index":0,"message":{"role":"assistant","content":"Hi",
            "reasoning_content":"r"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1}}"#,
        ),
        "page" => HttpResponse::builder()
            .header("content-type", "text/html")
            .body(Body::from("<html>\n<p>style: none</p>\n</html>\n"))
            .unwrap(),
        "missing" => json_reply(
            StatusCode::NOT_FOUND,
            r#"{"error":{"message":"The model `missing` does not exist.","type":"NotFoundError","code":404}}"#,
        ),
        _ => json_reply(
            StatusCode::INTERNAL_SERVER_ERROR,
            r#"{"error":{"code":500,"message":"failed to load the model","type":"server_error"}}"#,
        ),
    }
}

/// A completion's stream: text with vLLM's legacy logprobs, a finish reason, then usage.
pub(super) const COMPLETION: &str = concat!(
    "data: {\"choices\":[{\"index\":0,\"text\":\"Hello\",\"logprobs\":{\"tokens\":[\"Hello\"],",
    "\"token_logprobs\":[-0.5],\"top_logprobs\":[{\"Hello\":-0.5}],\"text_offset\":[0]}}]}\n\n",
    "data: {\"choices\":[{\"index\":0,\"text\":\" world\",\"finish_reason\":\"length\"}]}\n\n",
    "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}\n\n",
    "data: [DONE]\n\n",
);

/// A server of models, chats and completions that wants the key [`KEY`]; its base URL.
pub(super) fn server(seen: Seen, dropped: Arc<AtomicBool>) -> String {
    let on_complete = {
        let seen = seen.clone();
        move |body: String| {
            let seen = seen.clone();
            async move {
                let body: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
                *seen.lock().unwrap() = Some((String::new(), body));
                sse(Body::from(COMPLETION))
            }
        }
    };
    let on_chat = move |headers: HeaderMap, body: String| {
        let (seen, dropped) = (seen.clone(), dropped.clone());
        async move { chat(headers, body, seen, dropped).await }
    };
    let models = |headers: HeaderMap| async move {
        if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some("Bearer sk-test") {
            return json_reply(
                StatusCode::UNAUTHORIZED,
                r#"{"error":{"message":"no key"}}"#,
            );
        }
        json_reply(
            StatusCode::OK,
            r#"{"object":"list","data":[{"id":"qwen3-4b","object":"model"},{"id":"llama-3.2-1b"}]}"#,
        )
    };
    serve(
        Router::new()
            .route("/v1/models", get(models))
            .route("/v1/chat/completions", post(on_chat))
            .route("/v1/completions", post(on_complete)),
    )
}

pub(super) struct Fixture {
    pub(super) url: String,
    pub(super) seen: Seen,
    pub(super) dropped: Arc<AtomicBool>,
}

pub(super) fn fixture() -> Fixture {
    let seen = Seen::default();
    let dropped = Arc::new(AtomicBool::new(false));
    let url = server(seen.clone(), dropped.clone());
    Fixture { url, seen, dropped }
}

pub(super) fn ask(
    engine: &RemoteEngine,
    model: &str,
    cancel: &AtomicBool,
) -> (Vec<RemoteDelta>, Result<RemoteDone>) {
    let req = RemoteChat {
        model: model.into(),
        messages: vec![
            RemoteMessage::new("system", "Be brief."),
            RemoteMessage::new("user", "Hi"),
        ],
        max_tokens: Some(16),
        stop: vec!["</s>".into()],
        ..RemoteChat::default()
    };
    let mut deltas = Vec::new();
    let done = engine.chat(&req, cancel, &mut |d| deltas.push(d));
    (deltas, done)
}
