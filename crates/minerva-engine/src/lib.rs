//! The engine: one transformer over a Backend trait, the CPU and GPU backends, generation sessions.

pub mod gpu;
