//! The GPU backend over wgpu: device setup, weights uploaded in their stored layout, WGSL kernels
//! composed from `kernels/`, and a step graph of ops planned into fused kernels (`fusion.rs`)
//! and replayed as one compute pass per step.

pub mod adapters;
pub mod backend;
mod buffers;
pub mod context;
mod costs;
pub mod device_pool;
mod encode;
mod encode_moe;
pub mod error;
pub mod fusion;
mod gather;
pub mod graph;
mod kernel_list;
pub(crate) mod key;
pub mod ops;
pub mod pipelines;
pub mod plan;
pub mod profile;
pub mod shader;
mod spirv;
mod staging;
pub mod weights;

pub use backend::GpuBackend;
pub use context::{Capabilities, GpuContext, GpuOptions};
pub use error::{GpuError, GpuResult};
pub use ops::{
    moe_max_tiles, moe_tile_pairs, AttnShape, Bias, Eltwise, ExpertSel, ExpertTiles, Folds,
    KvCache, MatSel, MatmulTile, Multi, NormFold, Ops, Region, RouteIn, Step, HALVES_SHAPE,
    IN_FLIGHT, LONG_ROW, PRODUCT_SHAPE, SCORES_BYTES, SMALL_PRODUCT,
};
pub use weights::GpuWeight;
