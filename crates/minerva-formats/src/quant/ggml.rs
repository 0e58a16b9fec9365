//! ggml block quants (GGUF): decoders for each block type.

use crate::dtype::DType;

/// Decodes one row of ggml blocks; false when the dtype is not a ggml block type.
pub fn dequant_row(dtype: DType, src: &[u8], out: &mut [f32]) -> bool {
    let _ = (src, out);
    match dtype {
        _ => false,
    }
}
