//! The client against a real HTTP server on the loopback, serving canned streams.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response as HttpResponse;
use axum::routing::{get, post};
use axum::Router;

use super::tests::{content, stream_deltas, stream_done, STREAM};
use super::*;

const KEY: &str = "sk-test";

/// What the server saw of the last chat request: its Authorization header and JSON body.
type Seen = Arc<Mutex<Option<(String, serde_json::Value)>>>;

/// Serves `router` on 127.0.0.1 from a runtime on a thread of its own; the base URL.
fn serve(router: Router) -> String {
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

fn sse(body: Body) -> HttpResponse {
    HttpResponse::builder()
        .header("content-type", "text/event-stream")
        .body(body)
        .unwrap()
}

fn json_reply(status: StatusCode, body: &str) -> HttpResponse {
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
fn slow_stream(count: usize, dropped: Arc<AtomicBool>) -> Body {
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

/// The chat route of [`server`]: what it does depends on the model asked for.
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

/// The server's model decides what it does: `chat` streams [`STREAM`], `slow` streams 50
/// chunks 100 ms apart and `slow-12` 12, `stall` sends a chunk and then nothing for 10 s,
/// `silent` sends nothing for 10 s, `done-then-hang` sends `[DONE]` and keeps the connection,
/// `page` answers a web page, `missing` is unknown (404), `broken` fails with llama.cpp's error body (500).
fn server(seen: Seen, dropped: Arc<AtomicBool>) -> String {
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
            .route("/v1/chat/completions", post(on_chat)),
    )
}

struct Fixture {
    url: String,
    seen: Seen,
    dropped: Arc<AtomicBool>,
}

fn fixture() -> Fixture {
    let seen = Seen::default();
    let dropped = Arc::new(AtomicBool::new(false));
    let url = server(seen.clone(), dropped.clone());
    Fixture { url, seen, dropped }
}

fn ask(
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

#[test]
fn models_are_listed() {
    let f = fixture();
    let engine = RemoteEngine::new(&f.url, Some(KEY)).unwrap();
    assert_eq!(engine.url(), format!("{}/v1", f.url));
    assert_eq!(engine.models().unwrap(), ["qwen3-4b", "llama-3.2-1b"]);
}

#[test]
fn a_streamed_chat_with_reasoning_and_usage() {
    let f = fixture();
    let engine = RemoteEngine::new(&format!("{}/v1/", f.url), Some(KEY)).unwrap();
    let (deltas, done) = ask(&engine, "chat", &AtomicBool::new(false));
    assert_eq!(deltas, stream_deltas());
    assert_eq!(done.unwrap(), stream_done());
    let (auth, body) = f.seen.lock().unwrap().clone().unwrap();
    assert_eq!(auth, "Bearer sk-test");
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"]["include_usage"], true);
    assert_eq!(body["max_tokens"], 16);
    assert_eq!(body["stop"], serde_json::json!(["</s>"]));
    assert_eq!(
        body["messages"][1],
        serde_json::json!({"role": "user", "content": "Hi"})
    );
    assert!(body.get("temperature").is_none() && body.get("logprobs").is_none());
}

#[test]
fn a_wrong_or_missing_key_is_refused() {
    let f = fixture();
    let wrong = RemoteEngine::new(&f.url, Some("sk-wrong")).unwrap();
    let e = ask(&wrong, "chat", &AtomicBool::new(false)).1.unwrap_err();
    let url = format!("{}/v1", f.url);
    assert_eq!(
        e,
        ServiceError::RemoteKey {
            url: url.clone(),
            sent: true
        }
    );
    assert_eq!(
        e.to_string(),
        format!("the engine at {url} refused the API key: check the key")
    );
    let none = RemoteEngine::new(&f.url, None).unwrap();
    assert_eq!(
        none.models().unwrap_err(),
        ServiceError::RemoteKey { url, sent: false }
    );
}

#[test]
fn an_unknown_model_and_a_server_error_say_what_the_server_said() {
    let f = fixture();
    let engine = RemoteEngine::new(&f.url, Some(KEY)).unwrap();
    let url = engine.url().to_string();
    let e = ask(&engine, "missing", &AtomicBool::new(false))
        .1
        .unwrap_err();
    assert_eq!(
        e,
        ServiceError::RemoteNoModel {
            url: url.clone(),
            model: "missing".into()
        }
    );
    let e = ask(&engine, "broken", &AtomicBool::new(false))
        .1
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("the engine at {url} answered 500 Internal Server Error: failed to load the model")
    );
}

#[test]
fn an_unreachable_port() {
    // A port that was just free: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let engine = RemoteEngine::new(&format!("http://127.0.0.1:{port}"), None).unwrap();
    let started = Instant::now();
    let e = engine.models().unwrap_err();
    assert!(
        matches!(&e, ServiceError::RemoteUnreachable { url, .. } if url.contains(&port.to_string())),
        "{e:?}"
    );
    assert!(
        e.to_string()
            .starts_with("cannot reach the engine at http://127.0.0.1:"),
        "{e}"
    );
    let e = ask(&engine, "chat", &AtomicBool::new(false)).1.unwrap_err();
    assert!(matches!(e, ServiceError::RemoteUnreachable { .. }), "{e:?}");
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[test]
fn cancel_mid_stream_returns_promptly_and_closes_the_connection() {
    let f = fixture();
    let engine = RemoteEngine::new(&f.url, Some(KEY)).unwrap();
    let cancel = Arc::new(AtomicBool::new(false));
    let cancelled_at = Arc::new(Mutex::new(None));
    {
        let (cancel, cancelled_at) = (cancel.clone(), cancelled_at.clone());
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(350));
            *cancelled_at.lock().unwrap() = Some(Instant::now());
            cancel.store(true, Ordering::Relaxed);
        });
    }
    let (deltas, done) = ask(&engine, "slow", &cancel);
    let returned = Instant::now();
    assert_eq!(done.unwrap().finish_reason.as_deref(), Some("cancelled"));
    let lag = returned - cancelled_at.lock().unwrap().unwrap();
    assert!(
        lag < Duration::from_millis(150),
        "returned {lag:?} after the cancel"
    );
    // About four of the fifty chunks came, in order.
    assert!((2..=6).contains(&deltas.len()), "{deltas:?}");
    assert_eq!(deltas[0], content("t0 "));
    // The server sees the connection closed within a chunk or two.
    let deadline = Instant::now() + Duration::from_millis(1500);
    while !f.dropped.load(Ordering::SeqCst) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(f.dropped.load(Ordering::SeqCst), "the server still streams");
}

#[test]
fn cancel_while_the_server_is_silent() {
    let f = fixture();
    let engine = RemoteEngine::new(&f.url, Some(KEY)).unwrap();
    let cancel = Arc::new(AtomicBool::new(false));
    let flag = cancel.clone();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        flag.store(true, Ordering::Relaxed);
    });
    let started = Instant::now();
    let (deltas, done) = ask(&engine, "silent", &cancel);
    assert_eq!(done.unwrap().finish_reason.as_deref(), Some("cancelled"));
    assert!(deltas.is_empty());
    assert!(
        started.elapsed() < Duration::from_millis(600),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn done_ends_the_reply_while_the_connection_stays_open() {
    let f = fixture();
    let engine = RemoteEngine::new(&f.url, Some(KEY)).unwrap();
    let started = Instant::now();
    let (deltas, done) = ask(&engine, "done-then-hang", &AtomicBool::new(false));
    assert_eq!(deltas, stream_deltas());
    assert_eq!(done.unwrap(), stream_done());
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn the_read_timeout_is_per_read_not_for_the_whole_stream() {
    let f = fixture();
    let timeout = Duration::from_millis(400);
    let engine = RemoteEngine::with_read_timeout(&f.url, Some(KEY), timeout).unwrap();
    // 1.1 s of chunks 100 ms apart: longer than the timeout in all, never between two reads.
    let (deltas, done) = ask(&engine, "slow-12", &AtomicBool::new(false));
    assert_eq!(deltas.len(), 12);
    assert_eq!(done.unwrap(), RemoteDone::default());
    // A server that goes quiet mid-stream.
    let started = Instant::now();
    let (deltas, done) = ask(&engine, "stall", &AtomicBool::new(false));
    assert_eq!(deltas, [content("a")]);
    let e = done.unwrap_err();
    assert!(
        e.to_string()
            .ends_with("stopped sending (nothing for 0.4 s)"),
        "{e}"
    );
    assert!(
        started.elapsed() < Duration::from_millis(1200),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn a_wrong_address_or_a_web_page_is_not_taken_for_a_reply() {
    let f = fixture();
    let engine = RemoteEngine::new(&f.url, Some(KEY)).unwrap();
    let e = ask(&engine, "page", &AtomicBool::new(false)).1.unwrap_err();
    assert!(
        e.to_string()
            .ends_with("is it an OpenAI-compatible server?"),
        "{e}"
    );
    // The server's routes are under /v1: /api/v1 has nothing.
    let wrong = RemoteEngine::new(&format!("{}/api/v1", f.url), Some(KEY)).unwrap();
    let e = wrong.models().unwrap_err();
    assert!(
        e.to_string()
            .contains("has nothing at /api/v1/models (404)"),
        "{e}"
    );
}
