//! Fuzz target: arbitrary bytes as a GGUF header must give a header or an error, never a panic
//! or an allocation out of proportion to the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let _ = minerva_formats::gguf::parse_header(data, Path::new("fuzz.gguf"));
});
