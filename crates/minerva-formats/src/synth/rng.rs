//! A fast seeded generator for synthetic weights: every row of every tensor has its own
//! stream derived from (seed, tensor, row), so any chunking and any thread order give the same
//! values, and every format written from one seed holds the same weights.

/// SplitMix64 finalizer: spreads a key over all 64 bits.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// wyrand: one multiply per 64 random bits.
pub struct Rng(u64);

impl Rng {
    pub fn for_row(seed: u64, tensor: u64, row: u64) -> Rng {
        Rng(mix(seed
            ^ mix(tensor.wrapping_add(0x9e37_79b9_7f4a_7c15))
            ^ mix(row.wrapping_mul(0xd1b5_4a32_d192_ed03))))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0xa076_1d64_78bd_642f);
        let t = (self.0 as u128).wrapping_mul((self.0 ^ 0xe703_7ed1_a0b4_28db) as u128);
        ((t >> 64) ^ t) as u64
    }

    /// Approximately standard normal: the sum of four 16-bit uniforms (Irwin–Hall), centred
    /// and scaled to unit variance. Bounded tails (|x| < 3.5), bell-shaped like trained weights.
    pub fn normal(&mut self) -> f32 {
        let r = self.next_u64();
        let s = (r & 0xFFFF) + ((r >> 16) & 0xFFFF) + ((r >> 32) & 0xFFFF) + (r >> 48);
        (s as f32 - 131_070.0) * (1.0 / 37_837.23)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normal_has_unit_variance_and_streams_differ() {
        let mut r = Rng::for_row(1, 2, 3);
        let n = 200_000;
        let xs: Vec<f32> = (0..n).map(|_| r.normal()).collect();
        let mean = xs.iter().sum::<f32>() / n as f32;
        let var = xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f32>() / n as f32;
        assert!(mean.abs() < 0.01, "mean {mean}");
        assert!((var - 1.0).abs() < 0.02, "variance {var}");
        assert_ne!(
            Rng::for_row(1, 2, 3).next_u64(),
            Rng::for_row(1, 2, 4).next_u64()
        );
        assert_ne!(
            Rng::for_row(1, 2, 3).next_u64(),
            Rng::for_row(1, 3, 3).next_u64()
        );
    }
}
