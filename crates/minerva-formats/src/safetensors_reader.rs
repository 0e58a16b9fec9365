//! SafeTensors reader: one file or a sharded set, through the `safetensors` crate over mmap.
//! Weight files are picked by name (`model.safetensors`, `model.safetensors.index.json`,
//! `model-0000X-of-0000N.safetensors`), never by globbing: model folders also hold other
//! safetensors files (references, adapters).

mod header_check;

use crate::checkpoint::{map_file, Layout, ModelFile, Span, TensorEntry};
use crate::dtype::DType;
use crate::error::{FormatError, Result};
use memmap2::Mmap;
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

pub const SINGLE_FILE: &str = "model.safetensors";
pub const INDEX_FILE: &str = "model.safetensors.index.json";

/// One tensor of a safetensors header, with its byte range in the whole file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawTensor {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub start: usize,
    pub end: usize,
}

/// Why a header was refused, before a file name is attached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderError {
    Malformed(String),
    Unsupported(String),
}

impl HeaderError {
    fn at(self, path: &Path) -> FormatError {
        match self {
            HeaderError::Malformed(w) => FormatError::malformed(path, w),
            HeaderError::Unsupported(w) => FormatError::unsupported(path, w),
        }
    }
}

/// Parses the header of a whole safetensors file held in `bytes`; tensors come in file order.
/// The crate checks the length field, the JSON, contiguous non-overlapping offsets, shape
/// overflow and that the data ends exactly at the end of the buffer.
pub fn parse_header(bytes: &[u8]) -> std::result::Result<Vec<RawTensor>, HeaderError> {
    let (header_len, meta) = safetensors::SafeTensors::read_metadata(bytes).map_err(|e| {
        // The crate's message names no tensor; ours does where the header lets us.
        let named = header_check::diagnose(bytes);
        HeaderError::Malformed(named.unwrap_or_else(|| format!("invalid safetensors header: {e}")))
    })?;
    // The crate reads the header into a map, so a name given twice would silently lose one.
    if let Some(name) = header_check::repeated_name(bytes) {
        return Err(HeaderError::Malformed(format!(
            "tensor '{name}' appears twice in the header"
        )));
    }
    let base = 8 + header_len;
    let infos = meta.tensors();
    let mut out = Vec::with_capacity(infos.len());
    for name in meta.offset_keys() {
        let info = infos[&name];
        let dtype_name = format!("{:?}", info.dtype);
        let dtype = DType::from_safetensors(&dtype_name).ok_or_else(|| {
            HeaderError::Unsupported(format!("tensor '{name}' has dtype {dtype_name}"))
        })?;
        let (s, e) = info.data_offsets;
        out.push(RawTensor {
            name,
            dtype,
            shape: info.shape.clone(),
            start: base + s,
            end: base + e,
        });
    }
    Ok(out)
}

/// Parses a header and attaches the file's path to any error.
pub fn read_header(path: &Path, bytes: &[u8]) -> Result<Vec<RawTensor>> {
    parse_header(bytes).map_err(|e| e.at(path))
}

/// `model-00002-of-00005.safetensors` → (2, 5, digits of the shard number).
fn shard_numbers(name: &str) -> Option<(usize, usize, usize)> {
    let rest = name.strip_prefix("model-")?.strip_suffix(".safetensors")?;
    let (i, n) = rest.split_once("-of-")?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(i) || !digits(n) {
        return None;
    }
    Some((i.parse().ok()?, n.parse().ok()?, i.len()))
}

/// The weight files of a folder, and the index's (tensor, file) pairs when there is one.
pub struct WeightFiles {
    pub paths: Vec<PathBuf>,
    pub index: Option<Vec<(String, String)>>,
}

fn read_index(index: &Path) -> Result<Vec<(String, String)>> {
    let text = std::fs::read_to_string(index).map_err(|e| FormatError::io(index, e))?;
    let json: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| FormatError::malformed(index, format!("invalid JSON: {e}")))?;
    let map = json
        .get("weight_map")
        .and_then(|m| m.as_object())
        .ok_or_else(|| FormatError::malformed(index, "no \"weight_map\" object"))?;
    let mut pairs = Vec::with_capacity(map.len());
    for (tensor, file) in map {
        let file = file.as_str().ok_or_else(|| {
            FormatError::malformed(
                index,
                format!("weight_map entry '{tensor}' is not a file name"),
            )
        })?;
        if file.is_empty() || file.contains(['/', '\\']) || file == "." || file == ".." {
            return Err(FormatError::malformed(
                index,
                format!("weight_map names '{file}', not a file in the folder"),
            ));
        }
        pairs.push((tensor.clone(), file.to_string()));
    }
    if pairs.is_empty() {
        return Err(FormatError::malformed(index, "weight_map is empty"));
    }
    Ok(pairs)
}

/// The weight files of a model folder, in shard order; None when the folder names none.
/// Every file an index or a shard name promises must exist.
pub fn weight_files(dir: &Path) -> Result<Option<WeightFiles>> {
    let index = dir.join(INDEX_FILE);
    if index.is_file() {
        let pairs = read_index(&index)?;
        let names: BTreeSet<&str> = pairs.iter().map(|(_, f)| f.as_str()).collect();
        let paths: Vec<PathBuf> = names.into_iter().map(|n| dir.join(n)).collect();
        if let Some(missing) = paths.iter().find(|p| !p.is_file()) {
            return Err(FormatError::not_a_model(
                dir,
                format!(
                    "shard {} named by {INDEX_FILE} is missing",
                    missing.file_name().unwrap_or_default().to_string_lossy()
                ),
            ));
        }
        return Ok(Some(WeightFiles {
            paths,
            index: Some(pairs),
        }));
    }
    let single = dir.join(SINGLE_FILE);
    if single.is_file() {
        return Ok(Some(WeightFiles {
            paths: vec![single],
            index: None,
        }));
    }
    let entries = std::fs::read_dir(dir).map_err(|e| FormatError::io(dir, e))?;
    let mut shards: Vec<(usize, usize, usize, String)> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            shard_numbers(&name).map(|(i, n, w)| (i, n, w, name))
        })
        .collect();
    if shards.is_empty() {
        return Ok(None);
    }
    shards.sort();
    let (total, width) = (shards[0].1, shards[0].2);
    if shards.iter().any(|s| s.1 != total) {
        return Err(FormatError::not_a_model(
            dir,
            "shards of different sets (different -of-N counts)",
        ));
    }
    let mut paths = Vec::with_capacity(shards.len());
    for i in 1..=total {
        match shards.iter().find(|s| s.0 == i) {
            Some(s) => paths.push(dir.join(&s.3)),
            None => {
                return Err(FormatError::not_a_model(
                    dir,
                    format!("shard model-{i:0width$}-of-{total:0width$}.safetensors is missing"),
                ))
            }
        }
    }
    Ok(Some(WeightFiles { paths, index: None }))
}

/// config.json of a folder, if present.
pub fn read_config(dir: &Path) -> Result<Option<serde_json::Value>> {
    let path = dir.join("config.json");
    if !path.is_file() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(&path).map_err(|e| FormatError::io(&path, e))?;
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| FormatError::malformed(&path, format!("invalid JSON: {e}")))?;
    if !value.is_object() {
        return Err(FormatError::malformed(&path, "not a JSON object"));
    }
    Ok(Some(value))
}

/// The mapped weight files of a folder and every tensor they hold.
pub struct ShardSet {
    pub dir: PathBuf,
    pub files: Vec<ModelFile>,
    pub maps: Vec<Mmap>,
    /// (file index, tensor), in file order.
    pub tensors: Vec<(usize, RawTensor)>,
}

impl ShardSet {
    /// Maps the files and parses their headers; a tensor name found twice is an error.
    pub fn read(dir: &Path, paths: &[PathBuf]) -> Result<ShardSet> {
        let mut files = Vec::with_capacity(paths.len());
        let mut maps = Vec::with_capacity(paths.len());
        let mut tensors = Vec::new();
        let mut seen: HashMap<String, usize> = HashMap::new();
        for (fi, path) in paths.iter().enumerate() {
            let map = map_file(path)?;
            for t in read_header(path, &map)? {
                if let Some(prev) = seen.insert(t.name.clone(), fi) {
                    return Err(FormatError::malformed(
                        path,
                        format!(
                            "tensor '{}' also appears in {}",
                            t.name,
                            paths[prev].display()
                        ),
                    ));
                }
                tensors.push((fi, t));
            }
            files.push(ModelFile {
                path: path.clone(),
                size: map.len() as u64,
            });
            maps.push(map);
        }
        Ok(ShardSet {
            dir: dir.to_path_buf(),
            files,
            maps,
            tensors,
        })
    }

    /// Every tensor the index names must be in the shard it names.
    pub fn check_index(&self, index: &Path, pairs: &[(String, String)]) -> Result<()> {
        let found: HashMap<&str, &Path> = self
            .tensors
            .iter()
            .map(|(f, t)| (t.name.as_str(), self.path(*f)))
            .collect();
        for (tensor, file) in pairs {
            match found.get(tensor.as_str()) {
                Some(p) if p.file_name().is_some_and(|n| n == file.as_str()) => {}
                Some(p) => {
                    return Err(FormatError::malformed(
                        index,
                        format!(
                            "tensor '{tensor}' is listed in {file} but stored in {}",
                            p.display()
                        ),
                    ))
                }
                None => {
                    return Err(FormatError::malformed(
                        index,
                        format!("tensor '{tensor}' is not in {file}"),
                    ))
                }
            }
        }
        Ok(())
    }

    pub fn span(file: usize, t: &RawTensor) -> Span {
        Span {
            file,
            start: t.start,
            end: t.end,
        }
    }

    pub fn path(&self, file: usize) -> &Path {
        &self.files[file].path
    }

    /// Plain entries, with gpt-oss `X_blocks` + `X_scales` pairs joined into one `X`.
    pub fn plain_entries(&self) -> Result<Vec<TensorEntry>> {
        let by_name: HashMap<&str, usize> = self
            .tensors
            .iter()
            .enumerate()
            .map(|(i, (_, t))| (t.name.as_str(), i))
            .collect();
        let mut used = vec![false; self.tensors.len()];
        let mut entries = Vec::with_capacity(self.tensors.len());
        for (i, (fi, t)) in self.tensors.iter().enumerate() {
            if used[i] {
                continue;
            }
            if let Some(base) = t.name.strip_suffix("_blocks") {
                if let Some(&si) = by_name.get(format!("{base}_scales").as_str()) {
                    let (sf, s) = &self.tensors[si];
                    entries.push(hf_mxfp4_entry(self.path(*fi), base, (*fi, t), (*sf, s))?);
                    used[si] = true;
                    continue;
                }
            }
            if t.name.ends_with("_scales") {
                let base = &t.name[..t.name.len() - "_scales".len()];
                if let Some(&bi) = by_name.get(format!("{base}_blocks").as_str()) {
                    let (bf, b) = &self.tensors[bi];
                    entries.push(hf_mxfp4_entry(self.path(*bf), base, (*bf, b), (*fi, t))?);
                    used[bi] = true;
                    continue;
                }
            }
            entries.push(TensorEntry {
                name: t.name.clone(),
                shape: t.shape.clone(),
                dtype: t.dtype,
                layout: Layout::Plain,
                spans: vec![Self::span(*fi, t)],
            });
        }
        Ok(entries)
    }
}

/// gpt-oss MXFP4: blocks u8 [.., rows, in/32, 16] and scales u8 [.., rows, in/32] → `X` [.., rows, in].
fn hf_mxfp4_entry(
    path: &Path,
    base: &str,
    blocks: (usize, &RawTensor),
    scales: (usize, &RawTensor),
) -> Result<TensorEntry> {
    let (b, s) = (blocks.1, scales.1);
    let bad =
        |what: String| FormatError::malformed(path, format!("tensor '{base}_blocks': {what}"));
    if b.dtype != DType::U8 || s.dtype != DType::U8 {
        return Err(bad(format!(
            "MXFP4 blocks and scales must be U8, found {} and {}",
            b.dtype.name(),
            s.dtype.name()
        )));
    }
    let n = b.shape.len();
    if n < 2 || b.shape[n - 1] != 16 {
        return Err(bad(format!(
            "shape {:?} does not end in 16-byte blocks",
            b.shape
        )));
    }
    if s.shape.as_slice() != &b.shape[..n - 1] {
        return Err(bad(format!(
            "scales '{base}_scales' have shape {:?}, expected {:?}",
            s.shape,
            &b.shape[..n - 1]
        )));
    }
    let mut shape = b.shape[..n - 1].to_vec();
    let last = shape.last_mut().expect("n >= 2");
    *last = last
        .checked_mul(32)
        .ok_or_else(|| bad("shape overflows".into()))?;
    Ok(TensorEntry {
        name: base.to_string(),
        shape,
        dtype: DType::HfMxfp4,
        layout: Layout::HfMxfp4,
        spans: vec![ShardSet::span(blocks.0, b), ShardSet::span(scales.0, s)],
    })
}
