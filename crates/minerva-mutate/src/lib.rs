//! A mutation harness on stable Rust: it damages the fixture models the way an attacker would
//! (header counts, lengths, dtype ids, offsets, shapes, JSON headers and configs, truncation,
//! bit flips) and runs each case through the readers, the spec, the card, the tokenizer, the
//! chat template and a first forward step, in-process. `minerva-mutate` drives it across
//! worker processes so that an abort or a hang is caught, saved and counted too.

pub mod alloc;
pub mod gguf_fields;
pub mod mutate;
pub mod rng;
pub mod run;
pub mod seeds;
