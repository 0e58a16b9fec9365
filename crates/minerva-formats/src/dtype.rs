//! Every stored element type the engine reads: plain floats and integers, GGUF block quants and
//! MLX packs. Quant formats are data here (block size, bytes per block); decoders live in `quant`.

use serde::Serialize;

#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum DType {
    F64,
    F32,
    F16,
    BF16,
    I64,
    I32,
    I16,
    I8,
    U64,
    U32,
    U16,
    U8,
    Bool,
    /// GGUF block quants (ggml layout, blocks along the row).
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
    Q8_K,
    /// GGUF MXFP4: 17-byte blocks (E8M0 scale, then 16 bytes: element j low nibble, j+16 high).
    MXFP4,
    /// MLX affine pack: u32 words (values from the least significant bits), one scale and one
    /// bias per group along the row.
    MlxAffine {
        bits: u8,
        group: u16,
    },
    /// MLX mxfp4 pack: u32 words of E2M1 codes, one u8 E8M0 scale per group of 32.
    MlxMxfp4,
    /// gpt-oss Hugging Face checkpoint: `_blocks` [.., 16 bytes per 32 values, even element in
    /// the low nibble] + `_scales` (u8 E8M0 per 32 values).
    HfMxfp4,
}

impl DType {
    /// The name users see: GGUF's own names, `mlx-affine-{bits}-g{group}`, `mlx-mxfp4`.
    pub fn name(&self) -> String {
        match self {
            DType::MlxAffine { bits, group } => format!("mlx-affine-{bits}-g{group}"),
            DType::MlxMxfp4 => "mlx-mxfp4".to_string(),
            DType::HfMxfp4 => "hf-mxfp4".to_string(),
            other => format!("{other:?}"),
        }
    }

    /// Elements per block (1 for plain types; the group for MLX packs).
    pub fn block_elems(&self) -> usize {
        use DType::*;
        match self {
            Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | Q8_1 | MXFP4 | MlxMxfp4 | HfMxfp4 => 32,
            Q2_K | Q3_K | Q4_K | Q5_K | Q6_K | Q8_K => 256,
            MlxAffine { group, .. } => *group as usize,
            _ => 1,
        }
    }

    /// Bytes per block of the main buffer (packed values only, for MLX and HF MXFP4 packs).
    pub fn block_bytes(&self) -> usize {
        use DType::*;
        match self {
            F64 | I64 | U64 => 8,
            F32 | I32 | U32 => 4,
            F16 | BF16 | I16 | U16 => 2,
            I8 | U8 | Bool => 1,
            Q4_0 => 18,
            Q4_1 => 20,
            Q5_0 => 22,
            Q5_1 => 24,
            Q8_0 => 34,
            Q8_1 => 36,
            Q2_K => 84,
            Q3_K => 110,
            Q4_K => 144,
            Q5_K => 176,
            Q6_K => 210,
            Q8_K => 292,
            MXFP4 => 17,
            MlxAffine { bits, group } => *bits as usize * *group as usize / 8,
            MlxMxfp4 | HfMxfp4 => 16,
        }
    }

    /// Bytes of the main buffer for a row of `n` elements, or None when `n` is not a whole
    /// number of blocks.
    pub fn row_bytes(&self, n: usize) -> Option<usize> {
        let b = self.block_elems();
        if !n.is_multiple_of(b) {
            return None;
        }
        (n / b).checked_mul(self.block_bytes())
    }

    pub fn is_quantized(&self) -> bool {
        self.block_elems() > 1
    }

    pub fn is_float(&self) -> bool {
        matches!(self, DType::F64 | DType::F32 | DType::F16 | DType::BF16)
    }

    /// ggml's type id (GGUF tensor info), for the types GGUF can hold.
    pub fn ggml_type(&self) -> Option<u32> {
        use DType::*;
        Some(match self {
            F32 => 0,
            F16 => 1,
            Q4_0 => 2,
            Q4_1 => 3,
            Q5_0 => 6,
            Q5_1 => 7,
            Q8_0 => 8,
            Q8_1 => 9,
            Q2_K => 10,
            Q3_K => 11,
            Q4_K => 12,
            Q5_K => 13,
            Q6_K => 14,
            Q8_K => 15,
            I8 => 24,
            I16 => 25,
            I32 => 26,
            I64 => 27,
            F64 => 28,
            BF16 => 30,
            MXFP4 => 39,
            _ => return None,
        })
    }

    pub fn from_ggml_type(id: u32) -> Option<DType> {
        use DType::*;
        Some(match id {
            0 => F32,
            1 => F16,
            2 => Q4_0,
            3 => Q4_1,
            6 => Q5_0,
            7 => Q5_1,
            8 => Q8_0,
            9 => Q8_1,
            10 => Q2_K,
            11 => Q3_K,
            12 => Q4_K,
            13 => Q5_K,
            14 => Q6_K,
            15 => Q8_K,
            24 => I8,
            25 => I16,
            26 => I32,
            27 => I64,
            28 => F64,
            30 => BF16,
            39 => MXFP4,
            _ => return None,
        })
    }

    /// The safetensors header's dtype string.
    pub fn from_safetensors(s: &str) -> Option<DType> {
        use DType::*;
        Some(match s {
            "F64" => F64,
            "F32" => F32,
            "F16" => F16,
            "BF16" => BF16,
            "I64" => I64,
            "I32" => I32,
            "I16" => I16,
            "I8" => I8,
            "U64" => U64,
            "U32" => U32,
            "U16" => U16,
            "U8" => U8,
            "BOOL" => Bool,
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ggml_ids_round_trip() {
        for id in 0..64 {
            if let Some(d) = DType::from_ggml_type(id) {
                assert_eq!(d.ggml_type(), Some(id));
            }
        }
        assert_eq!(DType::from_ggml_type(39), Some(DType::MXFP4));
        assert_eq!(DType::from_ggml_type(4), None);
    }

    #[test]
    fn names_and_row_bytes() {
        assert_eq!(DType::Q4_K.name(), "Q4_K");
        assert_eq!(
            DType::MlxAffine { bits: 4, group: 64 }.name(),
            "mlx-affine-4-g64"
        );
        assert_eq!(DType::Q4_0.row_bytes(64), Some(36));
        assert_eq!(DType::Q4_0.row_bytes(33), None);
        assert_eq!(
            DType::MlxAffine { bits: 3, group: 32 }.row_bytes(64),
            Some(24)
        );
    }
}
