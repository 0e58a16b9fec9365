//! Fuzzes the SafeTensors header parser: any bytes give tensors whose spans lie inside the
//! buffer, in order and without overlap, or an error; never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use minerva_formats::safetensors_reader::parse_header;

fuzz_target!(|data: &[u8]| {
    if let Ok(tensors) = parse_header(data) {
        let mut end = 0;
        for t in &tensors {
            assert!(end <= t.start && t.start <= t.end && t.end <= data.len());
            end = t.end;
        }
    }
});
