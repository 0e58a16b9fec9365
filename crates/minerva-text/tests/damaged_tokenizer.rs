//! A tokenizer.json cut anywhere in its decoder section (where the tokenizers crate used to
//! panic) gives an error that names the file, never a panic.

use minerva_text::Tokenizer;
use std::path::Path;

#[test]
fn every_cut_in_the_decoder_section_is_an_error_naming_the_file() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
    let text = std::fs::read_to_string(fixtures.join("llama/f16/tokenizer.json")).unwrap();
    let start = text.find("\"decoder\"").unwrap();
    let end = text.find("\"model\"").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokenizer.json");
    for cut in start..end {
        std::fs::write(&path, &text[..cut]).unwrap();
        let e = Tokenizer::from_folder(dir.path())
            .err()
            .map(|e| e.to_string());
        let e = e.unwrap_or_else(|| panic!("a cut at byte {cut} was accepted"));
        assert!(e.contains("tokenizer.json"), "cut at {cut}: {e}");
    }
}
