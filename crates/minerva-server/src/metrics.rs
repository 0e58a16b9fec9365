//! `/metrics` in Prometheus' text format: requests by endpoint and status, tokens in and out,
//! the requests waiting for a model, the last request's decode speed, and a histogram of the
//! time to first token.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub endpoint: String,
    pub status: u16,
}

pub struct Metrics {
    registry: Registry,
    pub requests: Family<RequestLabels, Counter>,
    pub prompt_tokens: Counter,
    pub generated_tokens: Counter,
    /// Requests queued behind another on their model.
    pub queued: Gauge,
    /// Requests generating now.
    pub running: Gauge,
    pub decode_tokens_per_second: Gauge<f64, AtomicU64>,
    pub time_to_first_token: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("minerva");
        let requests = Family::<RequestLabels, Counter>::default();
        // Counters get `_total` appended when encoded: their names here must not end in it.
        registry.register(
            "requests",
            "HTTP requests by endpoint and status",
            requests.clone(),
        );
        let prompt_tokens = Counter::default();
        registry.register(
            "prompt_tokens",
            "Prompt tokens of completions",
            prompt_tokens.clone(),
        );
        let generated_tokens = Counter::default();
        registry.register(
            "generated_tokens",
            "Tokens generated",
            generated_tokens.clone(),
        );
        let queued = Gauge::default();
        registry.register(
            "queued_requests",
            "Completions waiting for their model",
            queued.clone(),
        );
        let running = Gauge::default();
        registry.register(
            "running_requests",
            "Completions generating now",
            running.clone(),
        );
        let decode_tokens_per_second = Gauge::<f64, AtomicU64>::default();
        registry.register(
            "decode_tokens_per_second",
            "Decode speed of the last finished completion",
            decode_tokens_per_second.clone(),
        );
        let time_to_first_token = Histogram::new(exponential_buckets(0.005, 2.0, 14));
        registry.register(
            "time_to_first_token_seconds",
            "From a completion's arrival to its first token, queueing included",
            time_to_first_token.clone(),
        );
        Metrics {
            registry,
            requests,
            prompt_tokens,
            generated_tokens,
            queued,
            running,
            decode_tokens_per_second,
            time_to_first_token,
        }
    }
}

impl Metrics {
    pub fn count(&self, endpoint: &str, status: u16) {
        self.requests
            .get_or_create(&RequestLabels {
                endpoint: endpoint.to_string(),
                status,
            })
            .inc();
    }

    pub fn text(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry);
        out
    }
}
