//! Hostile GGUF input: a corpus built from the fixture GGUFs (truncations at every header byte,
//! corrupted counts, lengths, type ids, offsets and shapes) and from hand-written files
//! (deep arrays, bad alignment). Each must give an error naming the file, without a panic and
//! without an allocation larger than the file could justify.

mod gguf_writer;

use gguf_writer::{gguf_string, val, Gguf};
use minerva_formats::gguf::{self, parse_header, Header};
use minerva_formats::{DType, MetaValue};
use std::alloc::{GlobalAlloc, Layout, System};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Records the largest single allocation, so a test can bound what parsing asked for.
struct Counting;
static LARGEST: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LARGEST.fetch_max(l.size(), Ordering::Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        LARGEST.fetch_max(new, Ordering::Relaxed);
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// The most a parse may ask for in one allocation: one metadata value per byte of input.
fn allocation_cap(input_len: usize) -> usize {
    std::mem::size_of::<MetaValue>() * input_len + 4096
}

fn fixture_ggufs() -> Vec<PathBuf> {
    fn walk(dir: &Path, found: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, found);
            } else if p.extension().is_some_and(|e| e == "gguf") {
                found.push(p);
            }
        }
    }
    let mut found = Vec::new();
    walk(
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures")),
        &mut found,
    );
    found.sort();
    found
}

/// Writes `bytes` as `<dir>/<label>.gguf`, opens it and checks the error.
fn expect_open_err(dir: &Path, label: &str, bytes: &[u8], says: &str) {
    let path = dir.join(format!("{label}.gguf"));
    std::fs::write(&path, bytes).unwrap();
    LARGEST.store(0, Ordering::Relaxed);
    let result = gguf::open(&path);
    let largest = LARGEST.load(Ordering::Relaxed);
    let e = result.expect_err(label).to_string();
    assert!(
        e.contains(&format!("{label}.gguf")),
        "{label}: error does not name the file: {e}"
    );
    assert!(e.contains(says), "{label}: expected '{says}' in: {e}");
    assert!(
        largest <= allocation_cap(bytes.len()),
        "{label}: allocated {largest} bytes for a {}-byte file",
        bytes.len()
    );
    std::fs::remove_file(&path).unwrap();
}

fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn find(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len())
        .position(|w| w == needle)
        .expect("pattern in header")
}

/// Where each tensor info starts: the infos end the header, in order.
fn tensor_info_starts(h: &Header) -> Vec<usize> {
    let sizes: Vec<usize> = h
        .tensors
        .iter()
        .map(|t| 8 + t.name.len() + 4 + 8 * t.ne.len() + 4 + 8)
        .collect();
    let mut at = h.header_len as usize - sizes.iter().sum::<usize>();
    sizes
        .iter()
        .map(|s| {
            let start = at;
            at += s;
            start
        })
        .collect()
}

fn tensor_bytes(t: &gguf::TensorInfo) -> u64 {
    let dtype = DType::from_ggml_type(t.ggml_type).unwrap();
    let rows: u64 = t.ne[1..].iter().product();
    dtype.row_bytes(t.ne[0] as usize).unwrap() as u64 * rows
}

/// Every mutation of one fixture file.
fn corrupt_fixture(dir: &Path, tag: &str, orig: &[u8]) {
    let h = parse_header(orig, Path::new("fixture.gguf")).unwrap();
    let header_len = h.header_len as usize;
    let infos = tensor_info_starts(&h);
    let mutate = |label: &str, says: &str, f: &dyn Fn(&mut Vec<u8>)| {
        let mut b = orig.to_vec();
        f(&mut b);
        expect_open_err(dir, &format!("{tag}-{label}"), &b, says);
    };

    // Every truncation inside the header, parsed in memory (a file per byte would be slow).
    for cut in 0..header_len {
        LARGEST.store(0, Ordering::Relaxed);
        let e =
            parse_header(&orig[..cut], Path::new("cut.gguf")).expect_err("truncated header parsed");
        assert!(e.to_string().contains("cut.gguf"), "{e}");
        assert!(LARGEST.load(Ordering::Relaxed) <= allocation_cap(cut));
    }
    // Truncations as files, across the header and the tensor data.
    let data_end = h
        .tensors
        .iter()
        .map(|t| h.data_start + t.offset + tensor_bytes(t))
        .max()
        .unwrap() as usize;
    for k in 0..40 {
        let cut = (data_end - 1) * k / 39;
        // In the header the first check that fails varies (a count, a length, a read).
        let says = if cut < header_len { "" } else { "past the end" };
        expect_open_err(dir, &format!("{tag}-cut{cut}"), &orig[..cut.max(1)], says);
    }

    mutate("magic", "magic", &|b| b[0] = b'X');
    mutate("v1", "version 1", &|b| put_u32(b, 4, 1));
    mutate("v9", "version 9", &|b| put_u32(b, 4, 9));
    mutate("big-endian", "big-endian", &|b| {
        put_u32(b, 4, 3u32.swap_bytes())
    });
    for (i, v) in [u64::MAX, 1 << 40, orig.len() as u64]
        .into_iter()
        .enumerate()
    {
        mutate(&format!("tensor-count{i}"), "tensor count", &|b| {
            put_u64(b, 8, v)
        });
        mutate(&format!("kv-count{i}"), "key/value count", &|b| {
            put_u64(b, 16, v)
        });
        mutate(&format!("key-len{i}"), "length of metadata key", &|b| {
            put_u64(b, 24, v)
        });
    }
    mutate("key-utf8", "UTF-8", &|b| b[32] = 0xFF);
    let first_key_len = u64::from_le_bytes(orig[24..32].try_into().unwrap()) as usize;
    mutate("value-type", "unknown value type 77", &|b| {
        put_u32(b, 32 + first_key_len, 77)
    });

    // A string array (the vocabulary in the model files): its count and first string's length.
    let (key, _) = h
        .metadata
        .0
        .iter()
        .find(|(_, v)| matches!(v.as_array(), Some([MetaValue::String(_), ..])))
        .expect("a string array");
    let at = find(&orig[..header_len], &gguf_string(key)) + 8 + key.len();
    for (i, v) in [u64::MAX, 1 << 40, orig.len() as u64]
        .into_iter()
        .enumerate()
    {
        mutate(&format!("array-len{i}"), "element count", &|b| {
            put_u64(b, at + 8, v)
        });
        mutate(&format!("string-len{i}"), "length of value", &|b| {
            put_u64(b, at + 16, v)
        });
    }
    mutate("array-elem-type", "unknown array element type", &|b| {
        put_u32(b, at + 4, 13)
    });

    // Tensor infos: name, n_dims, ne[], type, offset.
    let field = |i: usize, what: &str| {
        let t = &h.tensors[i];
        let dims = infos[i] + 8 + t.name.len();
        match what {
            "n_dims" => dims,
            "ne" => dims + 4,
            "type" => dims + 4 + 8 * t.ne.len(),
            _ => dims + 4 + 8 * t.ne.len() + 4,
        }
    };
    let last = h.tensors.len() - 1;
    let name0 = &h.tensors[0].name;
    mutate(
        "type-id",
        &format!("tensor '{name0}': ggml type id 99"),
        &|b| put_u32(b, field(0, "type"), 99),
    );
    mutate("type-id-removed", "ggml type id 4", &|b| {
        put_u32(b, field(0, "type"), 4)
    });
    mutate("n-dims", "9 dimensions", &|b| {
        put_u32(b, field(0, "n_dims"), 9)
    });
    let past_end = (orig.len() as u64).next_multiple_of(h.alignment);
    mutate("offset-past-end", "past the end", &|b| {
        put_u64(b, field(last, "offset"), past_end)
    });
    mutate("offset-huge", "past the end", &|b| {
        put_u64(b, field(last, "offset"), !(h.alignment - 1))
    });
    let off0 = h.tensors[0].offset;
    mutate("overlap", "overlap", &|b| {
        put_u64(b, field(1, "offset"), off0)
    });
    mutate("misaligned", "not a multiple of the alignment", &|b| {
        put_u64(b, field(1, "offset"), h.tensors[1].offset + 1)
    });
    let two_d = h
        .tensors
        .iter()
        .position(|t| t.ne.len() >= 2)
        .expect("a matrix");
    mutate("ne-overflow", "overflows", &|b| {
        put_u64(b, field(two_d, "ne"), 1 << 40);
        put_u64(b, field(two_d, "ne") + 8, 1 << 40);
    });
    mutate("ne-huge", "past the end", &|b| {
        put_u64(b, field(two_d, "ne") + 8, 1 << 40)
    });
}

/// `depth` arrays nested inside each other around one u32.
fn nested(depth: usize) -> (u32, Vec<u8>) {
    let mut v = val::u32(7);
    for _ in 0..depth {
        v = val::array(v.0, &[v.1]);
    }
    v
}

fn small(kv: &[(&str, (u32, Vec<u8>))]) -> Vec<u8> {
    let mut g = Gguf::default();
    for (k, v) in kv {
        g = g.kv(k, v.clone());
    }
    g.f32_tensor("w", &[8], &[1.0; 8]).bytes()
}

fn hand_written(dir: &Path) {
    // Positive controls: the writer's files open, with the deepest allowed nesting.
    let ok_path = dir.join("ok.gguf");
    std::fs::write(
        &ok_path,
        small(&[
            ("deep", nested(gguf::MAX_ARRAY_DEPTH)),
            ("general.alignment", val::u32(64)),
        ]),
    )
    .unwrap();
    let ckpt = gguf::open(&ok_path).unwrap();
    assert_eq!(ckpt.tensor("w").unwrap().shape, vec![8]);

    expect_open_err(
        dir,
        "deep",
        &small(&[("deep", nested(gguf::MAX_ARRAY_DEPTH + 1))]),
        "nested deeper",
    );
    for (label, a) in [
        ("align0", val::u32(0)),
        ("align24", val::u32(24)),
        ("align-str", val::string("32")),
    ] {
        expect_open_err(
            dir,
            label,
            &small(&[("general.alignment", a)]),
            "general.alignment must be a power of two",
        );
    }
    expect_open_err(
        dir,
        "bool2",
        &small(&[("flag", (7, vec![2]))]),
        "neither 0 nor 1",
    );
    let twice = small(&[("k", val::u32(1)), ("k", val::u32(2))]);
    expect_open_err(dir, "twice", &twice, "appears twice");
    // A tensor declared Q8_0 (rows of 32 values) with a row of 16.
    let mut odd_row = Gguf::default().f32_tensor("q", &[16], &[0.0; 4]).bytes();
    let h = parse_header(&odd_row, Path::new("odd.gguf")).unwrap();
    let type_at = tensor_info_starts(&h)[0] + 8 + 1 + 4 + 8;
    put_u32(&mut odd_row, type_at, 8);
    expect_open_err(dir, "partial-block", &odd_row, "not whole Q8_0 blocks");
}

#[test]
fn hostile_corpus_gives_errors_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    hand_written(dir.path());
    let fixtures = fixture_ggufs();
    assert!(fixtures.len() >= 6);
    for (i, p) in fixtures.iter().enumerate() {
        let orig = std::fs::read(p).unwrap();
        corrupt_fixture(dir.path(), &format!("f{i}"), &orig);
    }
}
