//! Second reading of a SafeTensors JSON header, for what the `safetensors` crate's map-based
//! reading cannot tell: a tensor name given twice, and which tensor a refused entry is.

use crate::dtype::DType;
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::Value;

/// The JSON text of the header, when the length field fits the buffer.
fn header_json(bytes: &[u8]) -> Option<&[u8]> {
    let len = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?);
    let end = usize::try_from(len).ok()?.checked_add(8)?;
    bytes.get(8..end)
}

/// The header's top-level entries in file order, duplicates kept.
struct Entries(Vec<(String, Value)>);

impl<'de> serde::Deserialize<'de> for Entries {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Entries;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entries, A::Error> {
                let mut out = Vec::new();
                while let Some(k) = map.next_key::<String>()? {
                    if k == "__metadata__" {
                        map.next_value::<IgnoredAny>()?;
                        continue;
                    }
                    out.push((k, map.next_value::<Value>()?));
                }
                Ok(Entries(out))
            }
        }
        d.deserialize_map(V)
    }
}

fn entries(bytes: &[u8]) -> Option<Vec<(String, Value)>> {
    serde_json::from_slice::<Entries>(header_json(bytes)?)
        .ok()
        .map(|e| e.0)
}

/// A tensor name the header gives more than once.
pub(super) fn repeated_name(bytes: &[u8]) -> Option<String> {
    let mut seen = std::collections::HashSet::new();
    entries(bytes)?
        .into_iter()
        .map(|(name, _)| name)
        .find(|name| !seen.insert(name.clone()))
}

/// What is wrong with the first entry whose dtype, shape and offsets do not agree, in words
/// that name the tensor; None when no single entry is at fault.
pub(super) fn diagnose(bytes: &[u8]) -> Option<String> {
    let data_len = bytes.len().checked_sub(8 + header_json(bytes)?.len())?;
    for (name, v) in entries(bytes)? {
        let what = entry_fault(&v, data_len);
        if let Some(what) = what {
            return Some(format!("tensor '{name}': {what}"));
        }
    }
    None
}

fn entry_fault(v: &Value, data_len: usize) -> Option<String> {
    let Some(dtype) = v.get("dtype").and_then(Value::as_str) else {
        return Some("no dtype".into());
    };
    let Some(shape) = v.get("shape").and_then(Value::as_array) else {
        return Some("no shape".into());
    };
    let dims: Option<Vec<usize>> = shape
        .iter()
        .map(|d| d.as_u64().and_then(|d| usize::try_from(d).ok()))
        .collect();
    let Some(dims) = dims else {
        return Some(format!("shape {shape:?} is not a list of sizes"));
    };
    let offsets = v.get("data_offsets").and_then(Value::as_array);
    let Some([start, end]) = offsets.map(|o| o.as_slice()) else {
        return Some("data_offsets is not a [start, end] pair".into());
    };
    let (Some(start), Some(end)) = (start.as_u64(), end.as_u64()) else {
        return Some("data_offsets are not byte positions".into());
    };
    if start > end || end > data_len as u64 {
        return Some(format!(
            "data_offsets [{start}, {end}] lie outside the {data_len} data bytes"
        ));
    }
    // Dtypes this engine does not read are refused later, by name.
    let dtype_id = DType::from_safetensors(dtype)?;
    let row = dims.last().copied().unwrap_or(1);
    let bytes = dims[..dims.len().saturating_sub(1)]
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .and_then(|rows| rows.checked_mul(dtype_id.row_bytes(row)?));
    match bytes {
        Some(b) if b as u64 == end - start => None,
        Some(b) => Some(format!(
            "shape {dims:?} of {dtype} needs {b} bytes, data_offsets give {}",
            end - start
        )),
        None => Some(format!("shape {dims:?} of {dtype} is too large")),
    }
}
