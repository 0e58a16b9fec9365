//! The server's routes on real HTTP, with the fixture models: reasoning returned apart from the
//! answer, the web UI's page and commands (and what a browser may not reach), the API key in a
//! header or the event stream's query, CORS only for allowed origins, /health and /metrics.

use minerva_server::{serve_on, ServeOptions, DEFAULT_BODY_LIMIT};
use reqwest::blocking::Client;
use serde_json::{json, Value};
use std::path::PathBuf;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures");

/// A server on a free loopback port, serving until the test process ends; its base URL.
fn serve(models: &[&str], key: Option<&str>, origins: &[&str]) -> String {
    // Another test may have installed it first.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let opts = ServeOptions {
        models: models
            .iter()
            .map(|m| PathBuf::from(FIXTURES).join(m))
            .collect(),
        allow_folders: Vec::new(),
        host: "127.0.0.1".into(),
        port: 0,
        ctx: Some(256),
        backend: "cpu".into(),
        api_key: key.map(String::from),
        ui: true,
        allow_origins: origins.iter().map(|o| o.to_string()).collect(),
        body_limit: DEFAULT_BODY_LIMIT,
        db: None,
    };
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let url = format!("http://{}", listener.local_addr().unwrap());
            let serving = serve_on(listener, opts, std::future::pending());
            tokio::pin!(serving);
            // Ready once /health answers: the models load before the first request is read.
            tokio::select! {
                r = &mut serving => panic!("the server stopped: {r:?}"),
                _ = async {
                    let _ = tx.send(url);
                    std::future::pending::<()>().await
                } => {}
            }
        });
    });
    let url = rx.recv().unwrap();
    let client = Client::new();
    for _ in 0..600 {
        if client
            .get(format!("{url}/health"))
            .send()
            .is_ok_and(|r| r.status() == 200)
        {
            return url;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("the server at {url} did not answer /health");
}

fn post(url: &str, path: &str, body: Value, key: Option<&str>) -> (u16, Value) {
    let mut req = Client::new().post(format!("{url}{path}")).json(&body);
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    let r = req.send().unwrap();
    let status = r.status().as_u16();
    (status, r.json().unwrap_or(Value::Null))
}

#[test]
fn reasoning_comes_apart_from_the_answer_whole_and_streamed() {
    let url = serve(&["thinking"], None, &[]);
    let body = json!({"model": "thinking", "temperature": 0, "max_tokens": 24,
        "messages": [{"role": "user", "content": "Why is the sky blue?"}]});
    let (status, whole) = post(&url, "/v1/chat/completions", body.clone(), None);
    assert_eq!(status, 200, "{whole}");
    let message = &whole["choices"][0]["message"];
    let reasoning = message["reasoning_content"].as_str().unwrap_or_default();
    assert!(!reasoning.is_empty(), "reasoning apart: {message}");
    assert!(
        !reasoning.contains("<think>") && !message["content"].as_str().unwrap().contains("<think>")
    );

    let mut streamed = body;
    streamed["stream"] = true.into();
    let text = Client::new()
        .post(format!("{url}/v1/chat/completions"))
        .json(&streamed)
        .send()
        .unwrap()
        .text()
        .unwrap();
    let chunks: Vec<Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let joined: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["reasoning_content"].as_str())
        .collect();
    assert_eq!(
        joined, reasoning,
        "the stream's reasoning = the whole answer's"
    );
    assert!(text.trim_end().ends_with("data: [DONE]"));
    assert!(chunks.last().unwrap()["usage"]["completion_tokens"].as_u64() > Some(0));
}

#[test]
fn the_web_ui_is_served_with_its_commands_and_no_other_file() {
    let url = serve(&["llama/f32"], Some("k3y"), &[]);
    let page = Client::new()
        .get(format!("{url}/"))
        .send()
        .unwrap()
        .text()
        .unwrap();
    assert!(
        page.contains(r#"<meta name="minerva-transport" content="http""#),
        "{page}"
    );
    // The commands need the key; then the loaded model is there.
    let (status, _) = post(&url, "/api/call/loaded_models", json!({}), None);
    assert_eq!(status, 401);
    let (status, loaded) = post(&url, "/api/call/loaded_models", json!({}), Some("k3y"));
    assert_eq!(status, 200);
    assert_eq!(loaded.as_array().unwrap().len(), 1, "{loaded}");
    // A file the server was not started with is refused, and nothing is written for a browser.
    let (status, err) = post(
        &url,
        "/api/call/open_model",
        json!({"path": "/etc/passwd"}),
        Some("k3y"),
    );
    assert_eq!(status, 403, "{err}");
    assert!(err["error"]["message"]
        .as_str()
        .unwrap()
        .contains("/etc/passwd"));
    let (status, _) = post(
        &url,
        "/api/call/save_png",
        json!({"path": "/tmp/x.png", "base64": ""}),
        Some("k3y"),
    );
    assert_eq!(status, 403);
    let (status, _) = post(&url, "/api/call/no_such_command", json!({}), Some("k3y"));
    assert_eq!(status, 404);
    // The model it was started with opens.
    let model = format!("{FIXTURES}/llama/f32");
    let (status, card) = post(
        &url,
        "/api/call/open_model",
        json!({"path": model}),
        Some("k3y"),
    );
    assert_eq!(status, 200, "{card}");
    // The event stream takes the key from its query (a browser's EventSource sends no header).
    let events = Client::new()
        .get(format!("{url}/api/events?api_key=k3y"))
        .send()
        .unwrap();
    assert_eq!(events.status(), 200);
    assert!(events.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let wrong = Client::new()
        .get(format!("{url}/api/events?api_key=nope"))
        .send()
        .unwrap();
    assert_eq!(wrong.status(), 401);
}

#[test]
fn cors_only_for_allowed_origins_and_metrics_as_prometheus_text() {
    let url = serve(&["llama/f32"], None, &["http://editor.example"]);
    let get = |origin: &str| {
        Client::new()
            .get(format!("{url}/v1/models"))
            .header("origin", origin)
            .send()
            .unwrap()
    };
    let allowed = get("http://editor.example");
    assert_eq!(
        allowed
            .headers()
            .get("access-control-allow-origin")
            .map(|v| v.to_str().unwrap()),
        Some("http://editor.example")
    );
    assert!(get("http://elsewhere.example")
        .headers()
        .get("access-control-allow-origin")
        .is_none());
    let metrics = Client::new().get(format!("{url}/metrics")).send().unwrap();
    assert!(metrics.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain; version=0.0.4"));
    let text = metrics.text().unwrap();
    assert!(
        text.contains("minerva_requests_total{endpoint=\"/v1/models\",status=\"200\"} 2"),
        "{text}"
    );
    let health: Value = Client::new()
        .get(format!("{url}/health"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(health["models_loaded"], 1);
}
