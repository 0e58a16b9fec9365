//! The app's web UI for a browser (`minerva serve --ui`): its built files (ui/dist, embedded
//! in the binary), the service's commands at `POST /api/call/{command}` and its events as
//! server-sent events at `GET /api/events` — the HTTP side of the UI's one transport
//! interface, whose other side is the app's Tauri commands and events.

use crate::error::ApiError;
use crate::Shared;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{header, StatusCode, Uri};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::StreamExt;
use minerva_service::commands::{self, CommandError};
use serde_json::Value;
use std::convert::Infallible;

#[derive(rust_embed::Embed)]
#[folder = "../../ui/dist"]
struct Dist;

/// Tells the UI's code to use the HTTP transport (it picks Tauri's in the app, a mock in a
/// development server).
const TRANSPORT_TAG: &str = r#"<meta name="minerva-transport" content="http" />"#;

/// A file of the UI; any path that is not one gets the page (the UI routes by itself).
pub async fn file(uri: Uri) -> Response {
    let path = uri.path().trim_start_matches('/');
    let (name, file) = match Dist::get(path) {
        Some(f) if !path.is_empty() => (path, f),
        _ => match Dist::get("index.html") {
            Some(f) => ("index.html", f),
            None => {
                return (
                    StatusCode::NOT_FOUND,
                    "this server was built without the web UI (build ui/ first)",
                )
                    .into_response()
            }
        },
    };
    if name == "index.html" {
        let page = String::from_utf8_lossy(&file.data).replacen(
            "<head>",
            &format!("<head>\n    {TRANSPORT_TAG}"),
            1,
        );
        return (
            [(header::CACHE_CONTROL, "no-cache")],
            axum::response::Html(page),
        )
            .into_response();
    }
    let mime = mime_guess::from_path(name).first_or_octet_stream();
    (
        [(header::CONTENT_TYPE, mime.as_ref().to_string())],
        file.data.into_owned(),
    )
        .into_response()
}

/// One of the service's commands, with the browser's access (see `Access::Served`).
pub async fn call(
    State(state): State<Shared>,
    Path(command): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let args: Value = match body {
        Ok(b) if b.is_empty() => Value::Null,
        Ok(b) => serde_json::from_slice(&b)
            .map_err(|e| ApiError::invalid(format!("the arguments are not JSON: {e}")))?,
        Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            return Err(ApiError::too_large(state.body_limit))
        }
        Err(e) => return Err(ApiError::invalid(e.body_text())),
    };
    let svc = state.pool.svc.clone();
    let caller = state.caller.clone();
    let answer = tokio::task::spawn_blocking(move || commands::call(&svc, &caller, &command, args))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?;
    answer.map(Json).map_err(|e| {
        let status = match &e {
            CommandError::Unknown(_) => StatusCode::NOT_FOUND,
            CommandError::Refused(_) => StatusCode::FORBIDDEN,
            CommandError::BadArguments(_) | CommandError::Failed(_) => StatusCode::BAD_REQUEST,
        };
        ApiError::invalid(e.to_string()).with_status(status)
    })
}

/// The service's events, named as the app's Tauri events are, with the same payloads.
pub async fn events(State(state): State<Shared>) -> impl IntoResponse {
    let rx = state.events.subscribe();
    let events = futures_util::stream::unfold(rx, |mut rx| async move {
        loop {
            match rx.recv().await {
                Ok(e) => {
                    let event = Event::default()
                        .event(e.name())
                        .data(e.for_ui().to_string());
                    return Some((Ok::<_, Infallible>(event), rx));
                }
                // A browser too slow to read loses the oldest events, not the connection.
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
            }
        }
    });
    let shutdown = state.shutdown.clone();
    let events = events.take_until(async move { crate::stopped(shutdown).await });
    Sse::new(events).keep_alive(KeepAlive::default())
}
