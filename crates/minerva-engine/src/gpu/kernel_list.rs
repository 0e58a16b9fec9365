//! The kernels a model's first steps asked for, listed on disk per model, adapter and kernel
//! sources, so that the next process that loads the model builds them on a thread while its
//! weights upload instead of one after another in its throwaway step (benches/GPU.md, entry
//! 106). Only processes that keep devices (`device_pool`: the app, the server, the bench's
//! children) read and write lists; a list that cannot be read or written costs nothing but the
//! head start.

use super::shader::Defines;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

/// A kernel as `Pipelines` builds it: file, defines, each weight's decoder defines, entry point.
pub type Kernel = (String, Defines, Vec<Defines>, String);

/// Lists kept at most per file (a model's steps ask for a few dozen).
const MOST: usize = 512;

/// The key of a model's list: the model's own signature, the adapter and what the kernels
/// specialise on (`GpuContext::describe`), and the kernels' sources.
pub fn key(model: u64, adapter: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    model.hash(&mut h);
    adapter.hash(&mut h);
    super::shader::sources_hash().hash(&mut h);
    h.finish()
}

/// The folder lists live in: the platform's cache folder's `minerva/kernels`.
fn folder() -> Option<PathBuf> {
    Some(dirs::cache_dir()?.join("minerva").join("kernels"))
}

/// The kernels listed under `key`; none where there is no readable list.
pub fn read(key: u64) -> Vec<Kernel> {
    folder().map_or_else(Vec::new, |f| read_in(&f, key))
}

/// Lists `kernels` under `key`, replacing the list there was.
pub fn write(key: u64, kernels: &[Kernel]) {
    if let Some(f) = folder() {
        write_in(&f, key, kernels);
    }
}

fn file(folder: &Path, key: u64) -> PathBuf {
    folder.join(format!("{key:016x}.txt"))
}

fn read_in(folder: &Path, key: u64) -> Vec<Kernel> {
    let Ok(text) = std::fs::read_to_string(file(folder, key)) else {
        return Vec::new();
    };
    text.lines().take(MOST).filter_map(parse).collect()
}

/// Written to a temporary file, then renamed over the old list, so that a reader never sees
/// half a list.
fn write_in(folder: &Path, key: u64, kernels: &[Kernel]) {
    let path = file(folder, key);
    let text: String = kernels
        .iter()
        .take(MOST)
        .filter_map(line)
        .map(|l| l + "\n")
        .collect();
    let tmp = path.with_extension(format!("{}.tmp", std::process::id()));
    let written = std::fs::create_dir_all(folder)
        .and_then(|_| std::fs::write(&tmp, text))
        .and_then(|_| std::fs::rename(&tmp, &path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

/// One kernel as a line: file, entry, defines and each weight's defines, tab-separated, a set
/// of defines as `name=value` joined by `;` and weights by `|`. A kernel whose names or values
/// hold one of those characters is not listed.
fn line(k: &Kernel) -> Option<String> {
    let clean = |s: &str| !s.contains(['\t', ';', '|', '=', '\n']);
    let set = |d: &Defines| -> Option<String> {
        d.iter()
            .map(|(n, v)| (clean(n) && clean(v)).then(|| format!("{n}={v}")))
            .collect::<Option<Vec<_>>>()
            .map(|v| v.join(";"))
    };
    let (file, defs, weights, entry) = k;
    if !clean(file) || !clean(entry) {
        return None;
    }
    let weights: Vec<String> = weights.iter().map(set).collect::<Option<_>>()?;
    Some(format!(
        "{file}\t{entry}\t{}\t{}",
        set(defs)?,
        weights.join("|")
    ))
}

fn parse(line: &str) -> Option<Kernel> {
    let set = |s: &str| -> Option<Defines> {
        s.split(';')
            .filter(|p| !p.is_empty())
            .map(|p| {
                p.split_once('=')
                    .map(|(n, v)| (n.to_string(), v.to_string()))
            })
            .collect()
    };
    let mut cols = line.split('\t');
    let (file, entry, defs, weights) = (cols.next()?, cols.next()?, cols.next()?, cols.next()?);
    let weights = if weights.is_empty() {
        Vec::new()
    } else {
        weights.split('|').map(set).collect::<Option<_>>()?
    };
    Some((file.to_string(), set(defs)?, weights, entry.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defs(pairs: &[(&str, &str)]) -> Defines {
        pairs
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    /// Kernels with and without weights go through a line and back; one whose define holds a
    /// separator is left out rather than listed wrong; a damaged line is skipped.
    #[test]
    fn kernels_round_trip_through_lines() {
        let plain: Kernel = (
            "norm.wgsl".into(),
            defs(&[("PLAIN", "")]),
            vec![],
            "main".into(),
        );
        let multi: Kernel = (
            "matvec_multi.wgsl".into(),
            defs(&[("GLU", ""), ("WG", "256u")]),
            vec![
                defs(&[("DECODER", "blocks_ggml.wgsl"), ("DT_Q4_0", "")]),
                defs(&[("DECODER", "blocks_ggml.wgsl"), ("DT_Q8_0", "")]),
            ],
            "main".into(),
        );
        for k in [&plain, &multi] {
            let l = line(k).expect("listed");
            assert_eq!(parse(&l).as_ref(), Some(k), "{l}");
        }
        let odd: Kernel = (
            "x.wgsl".into(),
            defs(&[("A", "1;2")]),
            vec![],
            "main".into(),
        );
        assert_eq!(line(&odd), None);
        assert_eq!(parse("norm.wgsl\tmain"), None);
        assert_eq!(parse("norm.wgsl\tmain\tNOEQUALS\t"), None);
    }

    /// A list written is read back whole, a second write replaces it, another key has none,
    /// and a folder that cannot be made costs nothing.
    #[test]
    fn lists_are_written_and_read_back() {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let folder = dir.path().join("minerva").join("kernels");
        let a: Kernel = (
            "norm.wgsl".into(),
            defs(&[("PLAIN", "")]),
            vec![],
            "main".into(),
        );
        let b: Kernel = ("rope.wgsl".into(), Defines::new(), vec![], "main".into());
        assert!(read_in(&folder, 7).is_empty());
        write_in(&folder, 7, &[a.clone(), b.clone()]);
        assert_eq!(read_in(&folder, 7), vec![a.clone(), b.clone()]);
        write_in(&folder, 7, std::slice::from_ref(&b));
        assert_eq!(read_in(&folder, 7), vec![b]);
        assert!(read_in(&folder, 8).is_empty());
        let blocked = dir.path().join("a file");
        std::fs::write(&blocked, "not a folder").expect("a file");
        write_in(&blocked.join("kernels"), 7, &[a]);
        assert!(read_in(&blocked.join("kernels"), 7).is_empty());
    }
}
