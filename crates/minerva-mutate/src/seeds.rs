//! The seed models: small fixture models in the three formats, held in memory, and the working
//! copy on disk that each case damages one file of and then restores.

use crate::gguf_fields::{self, Field};
use std::io;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeedFormat {
    Gguf,
    Safetensors,
    Mlx,
}

impl SeedFormat {
    pub fn name(self) -> &'static str {
        match self {
            SeedFormat::Gguf => "gguf",
            SeedFormat::Safetensors => "safetensors",
            SeedFormat::Mlx => "mlx",
        }
    }
}

/// Fixture paths under `tests/fixtures`: a GGUF file or a model folder.
const SEEDS: [(&str, SeedFormat); 9] = [
    ("llama/gguf-q4_0/llama-Q4_0.gguf", SeedFormat::Gguf),
    ("qwen3/gguf-q8_0/qwen3-Q8_0.gguf", SeedFormat::Gguf),
    ("mixtral/gguf-q4_k_m/mixtral-Q4_K_M.gguf", SeedFormat::Gguf),
    (
        "gpt_oss/gguf-mxfp4_moe/gpt_oss-MXFP4_MOE.gguf",
        SeedFormat::Gguf,
    ),
    ("llama/f16", SeedFormat::Safetensors),
    ("qwen3/f32", SeedFormat::Safetensors),
    ("gpt_oss/f32", SeedFormat::Safetensors),
    ("mixtral/f32", SeedFormat::Safetensors),
    ("llama/mlx-4bit", SeedFormat::Mlx),
];

/// Files a model folder's readers look at (references and other extras are left out).
const FOLDER_FILES: [&str; 7] = [
    "config.json",
    "model.safetensors",
    "model.safetensors.index.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "generation_config.json",
    "chat_template.jinja",
];

pub struct Seed {
    /// Short name: the fixture path with `/` as `-`.
    pub name: String,
    pub format: SeedFormat,
    /// (file name, bytes): one entry for GGUF, the folder's files otherwise.
    pub files: Vec<(String, Vec<u8>)>,
    /// The GGUF header's fields and its end.
    pub gguf: Option<(Vec<Field>, usize)>,
}

impl Seed {
    pub fn file(&self, name: &str) -> Option<&[u8]> {
        self.files
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, b)| b.as_slice())
    }
}

pub fn load(fixtures: &Path) -> io::Result<Vec<Seed>> {
    let mut out = Vec::new();
    for (rel, format) in SEEDS {
        let path = fixtures.join(rel);
        let name = rel.replace('/', "-");
        let (files, gguf) = if format == SeedFormat::Gguf {
            let bytes = std::fs::read(&path)?;
            let fields = gguf_fields::fields(&bytes);
            if fields.is_none() {
                return Err(io::Error::other(format!(
                    "{}: not a GGUF we can map",
                    path.display()
                )));
            }
            (vec![("model.gguf".to_string(), bytes)], fields)
        } else {
            let mut files = Vec::new();
            for f in FOLDER_FILES {
                let p = path.join(f);
                if p.is_file() {
                    files.push((f.to_string(), std::fs::read(&p)?));
                }
            }
            (files, None)
        };
        out.push(Seed {
            name,
            format,
            files,
            gguf,
        });
    }
    Ok(out)
}

/// A worker's copy of every seed on disk; a case overwrites one file and [`Workspace::restore`]
/// puts it back.
pub struct Workspace {
    pub root: PathBuf,
}

impl Workspace {
    pub fn create(root: PathBuf, seeds: &[Seed]) -> io::Result<Workspace> {
        if root.exists() {
            std::fs::remove_dir_all(&root)?;
        }
        for s in seeds {
            let dir = root.join(&s.name);
            std::fs::create_dir_all(&dir)?;
            for (f, b) in &s.files {
                std::fs::write(dir.join(f), b)?;
            }
        }
        Ok(Workspace { root })
    }

    /// The path a case opens: the GGUF file or the model folder.
    pub fn model_path(&self, seed: &Seed) -> PathBuf {
        let dir = self.root.join(&seed.name);
        match seed.format {
            SeedFormat::Gguf => dir.join("model.gguf"),
            _ => dir,
        }
    }

    pub fn write(&self, seed: &Seed, file: &str, bytes: &[u8]) -> io::Result<()> {
        std::fs::write(self.root.join(&seed.name).join(file), bytes)
    }

    pub fn restore(&self, seed: &Seed, file: &str) -> io::Result<()> {
        match seed.file(file) {
            Some(b) => self.write(seed, file, b),
            None => std::fs::remove_file(self.root.join(&seed.name).join(file)),
        }
    }
}
