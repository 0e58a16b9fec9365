//! What is in model files: GGUF, SafeTensors and MLX readers over memory maps, the dtypes they
//! hold, CPU dequantization, and the normalized ModelSpec.

pub mod architecture;
pub mod checkpoint;
pub mod dequant;
pub mod detect;
pub mod dtype;
pub mod error;
pub mod gguf;
pub mod guard;
pub mod metadata;
pub mod mlx;
pub mod names;
pub mod quant;
pub mod quantize;
pub mod safetensors_reader;
pub mod spec;
pub mod synth;
pub mod tensor;
pub mod write;

pub use checkpoint::{Checkpoint, Format, Mapping, ModelFile};
pub use dequant::{dequantize, dequantize_rows};
pub use dtype::DType;
pub use error::{FormatError, Result};
pub use metadata::{MetaValue, Metadata};
pub use spec::{Activation, Architecture, ModelSpec, MoeSpec, RopeScaling, RopeSpec, RopeStyle};
pub use tensor::{TensorData, TensorView};
