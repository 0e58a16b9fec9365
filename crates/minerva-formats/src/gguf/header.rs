//! GGUF header parsing from a byte slice: key/values, tensor infos and the data section start.
//! The bytes are hostile: every count and length is checked against what remains before
//! anything is allocated for it, so a header can never make the reader allocate more than a
//! small multiple of its own size.

use crate::error::{FormatError, Result};
use crate::metadata::{MetaValue, Metadata};
use std::path::Path;

pub const MAGIC: &[u8; 4] = b"GGUF";
/// ggml's GGML_MAX_DIMS.
pub const MAX_DIMS: usize = 4;
/// Arrays of arrays deeper than this are refused (real files use one level).
pub const MAX_ARRAY_DEPTH: usize = 4;
pub const DEFAULT_ALIGNMENT: u64 = 32;

/// One tensor info record as stored: `ne` is ggml's order, fastest dimension first, and
/// `offset` is relative to the data section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    pub ne: Vec<u64>,
    pub ggml_type: u32,
    pub offset: u64,
}

#[derive(Debug, Clone)]
pub struct Header {
    pub version: u32,
    pub metadata: Metadata,
    pub tensors: Vec<TensorInfo>,
    pub alignment: u64,
    /// Bytes of the header proper (magic to the last tensor info), before the padding.
    pub header_len: u64,
    /// Absolute byte offset of the (aligned) tensor data section.
    pub data_start: u64,
}

/// Smallest encoded size of a value of each GGUF type id (used to bound counts).
fn min_value_size(type_id: u32) -> Option<usize> {
    Some(match type_id {
        0 | 1 | 7 => 1,
        2 | 3 => 2,
        4..=6 => 4,
        8 => 8,     // string: its u64 length
        9 => 4 + 8, // array: element type and u64 count
        10..=12 => 8,
        _ => return None,
    })
}

/// What a read is for, as its error names it: the parts joined, and formatted only when the
/// read fails (a vocabulary's tens of thousands of strings are read without a label each).
#[derive(Clone, Copy)]
struct What<'w> {
    /// The length of a string read for the rest.
    length: bool,
    lead: &'static str,
    name: &'w str,
    tail: &'static str,
}

impl<'w> What<'w> {
    /// "`lead` 'K'", where `lead` ends in "key '".
    fn of_key(lead: &'static str, key: &'w str) -> What<'w> {
        What {
            length: false,
            lead,
            name: key,
            tail: "'",
        }
    }
}

impl<'w> From<&'w str> for What<'w> {
    fn from(name: &'w str) -> What<'w> {
        What {
            length: false,
            lead: "",
            name,
            tail: "",
        }
    }
}

impl std::fmt::Display for What<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let length = if self.length { "length of " } else { "" };
        write!(f, "{length}{}{}{}", self.lead, self.name, self.tail)
    }
}

struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
    path: &'a Path,
}

impl<'a> Cursor<'a> {
    fn err(&self, what: impl Into<String>) -> FormatError {
        FormatError::malformed(self.path, what.into())
    }

    fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    fn take<'w>(&mut self, n: usize, what: impl Into<What<'w>>) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(self.err(format!(
                "truncated GGUF header: {} needs {n} bytes at offset {}, {} left",
                what.into(),
                self.pos,
                self.remaining()
            )));
        }
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<'w, const N: usize>(&mut self, what: impl Into<What<'w>>) -> Result<[u8; N]> {
        Ok(self
            .take(N, what)?
            .try_into()
            .expect("take returned N bytes"))
    }

    fn u32<'w>(&mut self, what: impl Into<What<'w>>) -> Result<u32> {
        self.array(what).map(u32::from_le_bytes)
    }

    fn u64<'w>(&mut self, what: impl Into<What<'w>>) -> Result<u64> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// A count of items of at least `min_size` bytes each, checked against the bytes left.
    fn count<'w>(&mut self, min_size: usize, what: impl Into<What<'w>>) -> Result<usize> {
        let what = what.into();
        let n = self.u64(what)?;
        let fits = usize::try_from(n).ok().filter(|&n| {
            n.checked_mul(min_size)
                .is_some_and(|b| b <= self.remaining())
        });
        fits.ok_or_else(|| {
            self.err(format!(
                "{what} is {n}, more than the {} bytes left in the file can hold",
                self.remaining()
            ))
        })
    }

    fn string<'w>(&mut self, what: impl Into<What<'w>>) -> Result<String> {
        let what = what.into();
        let len = self.count(
            1,
            What {
                length: true,
                ..what
            },
        )?;
        let at = self.pos;
        let raw = self.take(len, what)?;
        String::from_utf8(raw.to_vec())
            .map_err(|_| self.err(format!("{what} at offset {at} is not valid UTF-8")))
    }

    fn value(&mut self, type_id: u32, depth: usize, key: &str) -> Result<MetaValue> {
        let v = match type_id {
            0 => MetaValue::U8(self.array::<1>(key)?[0]),
            1 => MetaValue::I8(self.array::<1>(key)?[0] as i8),
            2 => MetaValue::U16(u16::from_le_bytes(self.array(key)?)),
            3 => MetaValue::I16(i16::from_le_bytes(self.array(key)?)),
            4 => MetaValue::U32(self.u32(key)?),
            5 => MetaValue::I32(i32::from_le_bytes(self.array(key)?)),
            6 => MetaValue::F32(f32::from_le_bytes(self.array(key)?)),
            7 => match self.array::<1>(key)?[0] {
                0 => MetaValue::Bool(false),
                1 => MetaValue::Bool(true),
                b => {
                    return Err(self.err(format!("key '{key}': bool value {b} is neither 0 nor 1")))
                }
            },
            8 => MetaValue::String(self.string(What::of_key("value of key '", key))?),
            9 => {
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(self.err(format!(
                        "key '{key}': arrays nested deeper than {MAX_ARRAY_DEPTH}"
                    )));
                }
                let elem = self.u32(key)?;
                let min = min_value_size(elem).ok_or_else(|| {
                    self.err(format!("key '{key}': unknown array element type {elem}"))
                })?;
                let n = self.count(min, What::of_key("element count of key '", key))?;
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    items.push(self.value(elem, depth + 1, key)?);
                }
                MetaValue::Array(items)
            }
            10 => MetaValue::U64(self.u64(key)?),
            11 => MetaValue::I64(i64::from_le_bytes(self.array(key)?)),
            12 => MetaValue::F64(f64::from_le_bytes(self.array(key)?)),
            t => return Err(self.err(format!("key '{key}': unknown value type {t}"))),
        };
        Ok(v)
    }
}

/// Parses the header of a GGUF file whose bytes are `bytes`; `path` names it in errors.
pub fn parse_header(bytes: &[u8], path: &Path) -> Result<Header> {
    let mut c = Cursor {
        bytes,
        pos: 0,
        path,
    };
    if c.take(4, "magic")? != MAGIC {
        return Err(c.err("not a GGUF file (magic is not 'GGUF')"));
    }
    let version = c.u32("version")?;
    match version {
        2 | 3 => {}
        1 => return Err(c.err("GGUF version 1 is not supported (only versions 2 and 3)")),
        v if v.swap_bytes() == 2 || v.swap_bytes() == 3 => {
            return Err(c.err("big-endian GGUF files are not supported"))
        }
        v => return Err(c.err(format!("unknown GGUF version {v} (only versions 2 and 3)"))),
    }
    // Smallest tensor info: name length, n_dims, type, offset.
    let n_tensors = c.count(8 + 4 + 4 + 8, "tensor count")?;
    // Smallest key/value: key length, value type, one byte of value.
    let n_kv = c.count(8 + 4 + 1, "key/value count")?;

    let mut metadata = Metadata::default();
    for _ in 0..n_kv {
        let key = c.string("metadata key")?;
        let t = c.u32(key.as_str())?;
        let value = c.value(t, 0, &key)?;
        if metadata.0.insert(key.clone(), value).is_some() {
            return Err(c.err(format!("key '{key}' appears twice")));
        }
    }

    let alignment = match metadata.get("general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some(v) => match v.as_u64() {
            Some(a) if a.is_power_of_two() => a,
            _ => {
                return Err(c.err(format!(
                    "general.alignment must be a power of two, found {v:?} ({})",
                    v.type_name()
                )))
            }
        },
    };

    let mut tensors = Vec::with_capacity(n_tensors);
    for _ in 0..n_tensors {
        let name = c.string("tensor name")?;
        let n_dims = c.u32(name.as_str())? as usize;
        if n_dims > MAX_DIMS {
            return Err(c.err(format!(
                "tensor '{name}': {n_dims} dimensions (at most {MAX_DIMS})"
            )));
        }
        let mut ne = Vec::with_capacity(n_dims);
        for _ in 0..n_dims {
            ne.push(c.u64(name.as_str())?);
        }
        if ne
            .iter()
            .try_fold(1u64, |a, &d| a.checked_mul(d))
            .is_none_or(|n| usize::try_from(n).is_err())
        {
            return Err(c.err(format!(
                "tensor '{name}': element count of dimensions {ne:?} overflows"
            )));
        }
        let ggml_type = c.u32(name.as_str())?;
        let offset = c.u64(name.as_str())?;
        if offset % alignment != 0 {
            return Err(c.err(format!(
                "tensor '{name}': offset {offset} is not a multiple of the alignment {alignment}"
            )));
        }
        tensors.push(TensorInfo {
            name,
            ne,
            ggml_type,
            offset,
        });
    }

    let data_start = (c.pos as u64)
        .checked_next_multiple_of(alignment)
        .ok_or_else(|| {
            c.err(format!(
                "alignment {alignment} puts the data section past any file size"
            ))
        })?;
    Ok(Header {
        version,
        metadata,
        tensors,
        alignment,
        header_len: c.pos as u64,
        data_start,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_read_as_the_errors_name_them() {
        let key = What::of_key("value of key '", "general.name");
        assert_eq!(key.to_string(), "value of key 'general.name'");
        let len = What {
            length: true,
            ..key
        };
        assert_eq!(len.to_string(), "length of value of key 'general.name'");
        assert_eq!(What::from("tensor name").to_string(), "tensor name");
        // A string longer than the bytes left names what it was read for.
        let bytes = 5u64.to_le_bytes();
        let mut c = Cursor {
            bytes: &bytes,
            pos: 0,
            path: Path::new("m.gguf"),
        };
        let e = c.string(key).unwrap_err().to_string();
        assert!(
            e.contains("length of value of key 'general.name' is 5, more than the 0 bytes"),
            "{e}"
        );
    }

    #[test]
    fn every_value_type_has_a_size_bound() {
        assert!((0..13).all(|t| min_value_size(t).is_some()));
        assert_eq!(min_value_size(13), None);
    }
}
