//! SplitMix64: a small, fast, seedable generator; every case is a pure function of its seed.

#[derive(Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The generator of case `index` of worker `worker` in a run seeded with `seed`.
    pub fn for_case(seed: u64, worker: u64, index: u64) -> Rng {
        let mut r = Rng(seed ^ worker.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        r.0 ^= index.wrapping_mul(0xD1B5_4A32_D192_ED03);
        r.next();
        r
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in 0..n (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// A count an attacker would try: boundaries, powers of two, the huge values that overflow
    /// products, and now and then anything.
    pub fn count(&mut self) -> u64 {
        const EDGES: [u64; 26] = [
            0,
            1,
            2,
            3,
            7,
            16,
            255,
            256,
            4095,
            65535,
            65536,
            (1 << 31) - 1,
            1 << 31,
            (1 << 32) - 1,
            1 << 32,
            1 << 40,
            100_000_000,
            4_000_000_000,
            1 << 48,
            1 << 62,
            (1 << 63) - 1,
            1 << 63,
            u64::MAX - 1,
            u64::MAX,
            1_000_000,
            12_345,
        ];
        if self.chance(80) {
            *self.pick(&EDGES)
        } else {
            self.next() >> self.below(64)
        }
    }

    /// A float an attacker would try.
    pub fn float(&mut self) -> f64 {
        const EDGES: [f64; 14] = [
            0.0,
            -0.0,
            -1.0,
            1.0,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            1e-45,
            1e-30,
            1e30,
            3.5e38,
            -7.0,
            0.5,
            1e300,
        ];
        *self.pick(&EDGES)
    }
}
