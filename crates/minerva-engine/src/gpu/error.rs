//! Errors of the GPU backend: no adapter, a refused device, and failures the device reports
//! (out of memory, validation, loss) turned into values instead of panics.

use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq)]
pub enum GpuError {
    #[error("no GPU adapter found{0}")]
    NoAdapter(String),
    #[error("the GPU adapter {adapter} refused a device: {reason}")]
    RequestDevice { adapter: String, reason: String },
    #[error("the GPU ran out of memory: {0}")]
    OutOfMemory(String),
    #[error("the GPU rejected a command: {0}")]
    Validation(String),
    #[error("the GPU device was lost: {0}")]
    DeviceLost(String),
    #[error("the GPU backend cannot hold tensor {tensor}: {reason}")]
    Unsupported { tensor: String, reason: String },
    #[error("reading back from the GPU failed: {0}")]
    Readback(String),
}

pub type GpuResult<T> = std::result::Result<T, GpuError>;
