//! Errors as OpenAI's API sends them: a status and `{"error": {"message", "type", "param",
//! "code"}}`, so that every client shows the words.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub kind: &'static str,
    pub code: Option<&'static str>,
    pub message: String,
}

impl ApiError {
    pub fn invalid(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            kind: "invalid_request_error",
            code: None,
            message: message.into(),
        }
    }

    pub fn unknown_model(model: &str, known: &[String]) -> ApiError {
        ApiError {
            status: StatusCode::NOT_FOUND,
            kind: "invalid_request_error",
            code: Some("model_not_found"),
            message: format!(
                "the model '{model}' does not exist here; this server has: {}",
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            ),
        }
    }

    pub fn unauthorized() -> ApiError {
        ApiError {
            status: StatusCode::UNAUTHORIZED,
            kind: "authentication_error",
            code: Some("invalid_api_key"),
            message: "a valid API key is required: send it as `Authorization: Bearer KEY`".into(),
        }
    }

    pub fn too_large(limit: usize) -> ApiError {
        ApiError {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            kind: "invalid_request_error",
            code: Some("request_too_large"),
            message: format!(
                "the request body is larger than this server's limit of {limit} bytes"
            ),
        }
    }

    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            kind: "server_error",
            code: None,
            message: message.into(),
        }
    }

    pub fn with_status(mut self, status: StatusCode) -> ApiError {
        self.status = status;
        self
    }
}

impl From<minerva_service::ServiceError> for ApiError {
    fn from(e: minerva_service::ServiceError) -> ApiError {
        use minerva_service::ServiceError as E;
        match &e {
            E::ContextFull { ctx, needed } => ApiError {
                status: StatusCode::BAD_REQUEST,
                kind: "invalid_request_error",
                code: Some("context_length_exceeded"),
                message: format!(
                    "this model's context holds {ctx} tokens, but the request needs {needed} \
                     (its prompt and max_tokens): shorten the messages or ask for fewer tokens"
                ),
            },
            E::Invalid(_) | E::Model(_) => ApiError::invalid(e.to_string()),
            _ => ApiError::internal(e.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": {
            "message": self.message,
            "type": self.kind,
            "param": null,
            "code": self.code,
        }});
        (self.status, Json(body)).into_response()
    }
}
