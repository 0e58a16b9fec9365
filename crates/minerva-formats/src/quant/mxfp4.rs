//! MXFP4 (OCP microscaling FP4): 4-bit E2M1 codes sharing one E8M0 power-of-two scale per 32
//! values. The three formats store the same numbers with different nibble orders.

/// E2M1 code → value (sign bit 3, exponent bits 2..1, mantissa bit 0).
pub const E2M1: [f32; 16] = [
    0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0,
];

/// E8M0 scale byte → 2^(e − 127). 0xFF is NaN in the spec; it never occurs in real weights
/// and is decoded as 2^128 = inf rather than trapping.
pub fn e8m0_to_f32(e: u8) -> f32 {
    if e == 0 {
        // 2^-127 is subnormal in f32: build it from bits.
        f32::from_bits(0x0040_0000)
    } else {
        f32::from_bits((e as u32) << 23)
    }
}

/// gpt-oss Hugging Face layout: per block, 16 bytes where byte i holds element 2i in its low
/// nibble and element 2i+1 in its high nibble; `scales` has one byte per block.
pub fn dequant_hf_row(blocks: &[u8], scales: &[u8], out: &mut [f32]) {
    for ((blk, &e), o) in blocks
        .chunks_exact(16)
        .zip(scales)
        .zip(out.chunks_exact_mut(32))
    {
        let s = e8m0_to_f32(e);
        for (i, &b) in blk.iter().enumerate() {
            o[2 * i] = E2M1[(b & 0x0F) as usize] * s;
            o[2 * i + 1] = E2M1[(b >> 4) as usize] * s;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e8m0_powers_of_two() {
        assert_eq!(e8m0_to_f32(127), 1.0);
        assert_eq!(e8m0_to_f32(128), 2.0);
        assert_eq!(e8m0_to_f32(126), 0.5);
        assert_eq!(e8m0_to_f32(0), 2f32.powi(-127));
    }

    #[test]
    fn hf_nibble_order() {
        let mut blocks = [0u8; 16];
        blocks[0] = 0x72; // element 0 → code 2 (1.0), element 1 → code 7 (6.0)
        let mut out = [0f32; 32];
        dequant_hf_row(&blocks, &[128], &mut out);
        assert_eq!(&out[..3], &[2.0, 12.0, 0.0]);
    }
}
