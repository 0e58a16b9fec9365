//! The engine: one transformer over a Backend trait, the CPU and GPU backends, generation sessions.

pub mod arch;
pub mod backend;
pub mod cpu;
pub mod devices;
pub mod error;
pub mod gpu;
pub mod load;
pub mod model;
pub mod rope;
pub mod sampler;
pub mod session;

pub use backend::{Backend, DeviceMemory};
pub use cpu::CpuBackend;
pub use devices::{Adapter, BackendChoice, BackendKind};
pub use error::{EngineError, Result};
pub use gpu::GpuBackend;
pub use load::{load, load_observed, Loaded};
pub use model::{KvCache, Model};
pub use sampler::{Sampler, SamplerConfig};
pub use session::{
    Event, Request, Session, SessionHandle, Stats, StopReason, TokenLogprobs, TokenText,
    MAX_TOP_LOGPROBS,
};
