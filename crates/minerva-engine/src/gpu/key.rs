//! Keys that identify recorded work: the fields of an op call fed into a hasher, so that plans
//! and their dispatches are found again without formatting anything on the per-token path.

use crate::backend::{
    AttnParams, BufId, GatedFfn, KvId, Linear, MatView, RopeParams, VecRef, WeightId,
};
use minerva_formats::{Activation, RopeStyle};
use std::collections::hash_map::DefaultHasher;
use std::hash::Hash;

/// The most keys a query of a step in the attention's shape class sees: for a prompt, its last
/// position + 1 rounded up to a power of two (the matrix-core attention sizes its scores by it,
/// so that a short prompt in a long context keeps them small); none for one query, whose steps
/// share one class at every position.
pub fn attention_keys(p: &AttnParams) -> u32 {
    if p.n > 1 {
        ((p.pos + p.n) as u32).next_power_of_two()
    } else {
        0
    }
}

/// A value that can be fed into a key.
pub trait KeyPart {
    fn feed(&self, h: &mut DefaultHasher);
}

/// The key of a list of parts: `key!(a, b, c)`.
macro_rules! key {
    ($($e:expr),* $(,)?) => {{
        let mut h = std::collections::hash_map::DefaultHasher::new();
        $( $crate::gpu::key::KeyPart::feed(&$e, &mut h); )*
        std::hash::Hasher::finish(&h)
    }};
}
pub(crate) use key;

macro_rules! key_by_hash {
    ($($t:ty),*) => {
        $( impl KeyPart for $t {
            fn feed(&self, h: &mut DefaultHasher) {
                self.hash(h);
            }
        } )*
    };
}
key_by_hash!(str, u64, usize, u32, bool, BufId, WeightId, KvId);

impl<T: KeyPart + ?Sized> KeyPart for &T {
    fn feed(&self, h: &mut DefaultHasher) {
        (**self).feed(h);
    }
}

impl KeyPart for f32 {
    fn feed(&self, h: &mut DefaultHasher) {
        self.to_bits().hash(h);
    }
}

impl<T: KeyPart> KeyPart for Option<T> {
    fn feed(&self, h: &mut DefaultHasher) {
        match self {
            None => 0u32.hash(h),
            Some(v) => {
                1u32.hash(h);
                v.feed(h);
            }
        }
    }
}

impl<T: KeyPart> KeyPart for [T] {
    fn feed(&self, h: &mut DefaultHasher) {
        self.len().hash(h);
        for v in self {
            v.feed(h);
        }
    }
}

impl KeyPart for MatView {
    fn feed(&self, h: &mut DefaultHasher) {
        (
            self.weight,
            self.matrix,
            self.input_major,
            self.offset,
            self.stride,
            self.out_dim,
            self.in_dim,
        )
            .hash(h);
    }
}

impl KeyPart for VecRef {
    fn feed(&self, h: &mut DefaultHasher) {
        (self.weight, self.row, self.len).hash(h);
    }
}

impl KeyPart for Linear {
    fn feed(&self, h: &mut DefaultHasher) {
        self.w.feed(h);
        self.bias.feed(h);
    }
}

impl KeyPart for GatedFfn {
    fn feed(&self, h: &mut DefaultHasher) {
        self.gate.feed(h);
        self.up.feed(h);
        self.down.feed(h);
    }
}

impl KeyPart for Activation {
    fn feed(&self, h: &mut DefaultHasher) {
        match *self {
            Activation::Silu => 0u32.hash(h),
            Activation::GptOssClamped { alpha, limit } => {
                (1u32, alpha.to_bits(), limit.to_bits()).hash(h)
            }
        }
    }
}

impl KeyPart for RopeParams {
    fn feed(&self, h: &mut DefaultHasher) {
        (
            self.freqs,
            self.style == RopeStyle::Halves,
            self.dim,
            self.head_dim,
            self.attention_factor.to_bits(),
        )
            .hash(h);
    }
}

/// Everything of an attention call but its position, which the step uniform carries; for a
/// prompt, the power of two its keys fit in (`attention_keys`).
impl KeyPart for AttnParams {
    fn feed(&self, h: &mut DefaultHasher) {
        (
            attention_keys(self),
            self.n,
            self.n_heads,
            self.n_kv_heads,
            self.head_dim,
            self.window,
            self.scale.to_bits(),
        )
            .hash(h);
        self.sinks.feed(h);
    }
}
