//! The Tokenizer: text to ids and back for any model, built from tokenizer.json (SafeTensors and
//! MLX folders) or from a GGUF's embedded vocabulary, with its BOS/EOS/PAD ids.

use crate::error::{Result, TextError};
use crate::{gguf_vocab, hf_config};
use minerva_formats::{Checkpoint, Format, Metadata};
use std::path::Path;

/// Special token ids and the text of BOS/EOS (what chat templates see as `bos_token`/`eos_token`).
#[derive(Debug, Clone, Default)]
pub struct SpecialTokens {
    pub bos: Option<u32>,
    /// Every token that ends generation (models often name several).
    pub eos: Vec<u32>,
    pub pad: Option<u32>,
    pub unk: Option<u32>,
    pub bos_token: Option<String>,
    pub eos_token: Option<String>,
}

#[derive(Clone)]
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    specials: SpecialTokens,
    origin: String,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("origin", &self.origin)
            .field("vocab_size", &self.vocab_size())
            .field("specials", &self.specials)
            .finish()
    }
}

/// Added tokens that tokenizer_config.json lists but tokenizer.json lacks, appended at the ids
/// the config gives them (an id that does not come next is an error, not a silent shift).
fn add_config_tokens(
    inner: &mut tokenizers::Tokenizer,
    tokens: &[(u32, String, bool)],
    origin: &str,
) -> Result<()> {
    for (id, content, special) in tokens {
        match inner.token_to_id(content) {
            Some(have) if have == *id => continue,
            Some(have) => {
                return Err(TextError::malformed(
                    origin,
                    format!("tokenizer_config.json gives '{content}' id {id}, tokenizer.json has it as {have}"),
                ))
            }
            None => {}
        }
        let next = inner.get_vocab_size(true) as u32;
        if *id != next {
            return Err(TextError::malformed(
                origin,
                format!("tokenizer_config.json adds '{content}' as id {id}, but the next free id is {next}"),
            ));
        }
        let token = tokenizers::AddedToken::from(content.as_str(), *special).normalized(false);
        if *special {
            inner.add_special_tokens(&[token]);
        } else {
            inner.add_tokens(&[token]);
        }
    }
    Ok(())
}

impl Tokenizer {
    /// The tokenizer of an opened model: a GGUF's own vocabulary, or the folder's tokenizer.json.
    pub fn from_checkpoint(ckpt: &Checkpoint) -> Result<Tokenizer> {
        match ckpt.format {
            Format::Gguf => Tokenizer::from_gguf_metadata(
                &ckpt.metadata,
                &ckpt.main_path().display().to_string(),
            ),
            Format::Safetensors | Format::Mlx => Tokenizer::from_folder(&ckpt.dir),
        }
    }

    /// tokenizer.json of a Hugging Face or MLX folder, with the special tokens its config files name.
    pub fn from_folder(dir: &Path) -> Result<Tokenizer> {
        let path = dir.join("tokenizer.json");
        if !path.is_file() {
            return Err(TextError::missing(
                dir.display(),
                "no tokenizer.json in the model folder",
            ));
        }
        // The tokenizers crate panics on some damaged files; the guard makes that an error.
        let mut inner = minerva_formats::guard::catch(|| tokenizers::Tokenizer::from_file(&path))
            .map_err(|panic| {
                TextError::malformed(
                    path.display(),
                    format!("not a valid tokenizer.json: {panic}"),
                )
            })?
            .map_err(|e| {
                TextError::malformed(path.display(), format!("not a valid tokenizer.json: {e}"))
            })?;
        let found = hf_config::read_folder_specials(dir)?;
        let origin = dir.display().to_string();
        add_config_tokens(&mut inner, &found.added_tokens, &origin)?;
        let n = inner.get_vocab_size(true);
        let by_name = |name: &Option<String>, what: &str| -> Result<Option<u32>> {
            match name {
                None => Ok(None),
                Some(t) => inner.token_to_id(t).map(Some).ok_or_else(|| {
                    TextError::malformed(
                        &origin,
                        format!("{what} token '{t}' named by the config is not in tokenizer.json"),
                    )
                }),
            }
        };
        let check_id = |id: u64, what: &str| -> Result<u32> {
            u32::try_from(id)
                .ok()
                .filter(|&i| inner.id_to_token(i).is_some())
                .ok_or_else(|| {
                    TextError::malformed(
                        &origin,
                        format!("{what} id {id} is not in the vocabulary of {n} tokens"),
                    )
                })
        };
        let bos = match by_name(&found.bos_token, "bos")? {
            Some(id) => Some(id),
            None => found
                .bos_id
                .map(|id| check_id(id, "bos_token_id"))
                .transpose()?,
        };
        let mut eos = Vec::new();
        if let Some(id) = by_name(&found.eos_token, "eos")? {
            eos.push(id);
        }
        for &id in &found.eos_ids {
            let id = check_id(id, "eos_token_id")?;
            if !eos.contains(&id) {
                eos.push(id);
            }
        }
        let pad = match by_name(&found.pad_token, "pad")? {
            Some(id) => Some(id),
            None => found
                .pad_id
                .map(|id| check_id(id, "pad_token_id"))
                .transpose()?,
        };
        let unk = by_name(&found.unk_token, "unk")?;
        let specials = SpecialTokens {
            bos,
            eos,
            pad,
            unk,
            bos_token: found.bos_token.clone(),
            eos_token: found.eos_token.clone(),
        };
        Ok(Tokenizer {
            inner,
            specials,
            origin: path.display().to_string(),
        })
    }

    /// The tokenizer a GGUF's metadata describes; `origin` names the file in messages.
    pub fn from_gguf_metadata(meta: &Metadata, origin: &str) -> Result<Tokenizer> {
        let (inner, g) = minerva_formats::guard::catch(|| gguf_vocab::build(meta, origin))
            .map_err(|panic| TextError::malformed(origin, format!("bad vocabulary: {panic}")))??;
        let text = |id: Option<u32>| id.and_then(|i| inner.id_to_token(i));
        let specials = SpecialTokens {
            bos_token: text(g.bos),
            eos_token: text(g.eos.first().copied()),
            bos: g.bos,
            eos: g.eos,
            pad: g.pad,
            unk: g.unk,
        };
        Ok(Tokenizer {
            inner,
            specials,
            origin: origin.to_owned(),
        })
    }

    /// Token ids of `text`. Special tokens written in the text are always recognized;
    /// `add_special` adds what the model adds around a sequence (BOS for llama-style models).
    pub fn encode(&self, text: &str, add_special: bool) -> Result<Vec<u32>> {
        self.inner
            .encode(text, add_special)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| TextError::Tokenize(format!("{}: cannot encode: {e}", self.origin)))
    }

    /// Ids with their token strings (as stored in the vocabulary).
    pub fn encode_with_tokens(
        &self,
        text: &str,
        add_special: bool,
    ) -> Result<(Vec<u32>, Vec<String>)> {
        let e = self
            .inner
            .encode(text, add_special)
            .map_err(|e| TextError::Tokenize(format!("{}: cannot encode: {e}", self.origin)))?;
        Ok((e.get_ids().to_vec(), e.get_tokens().to_vec()))
    }

    /// Text of `ids`; ids outside the vocabulary are left out.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        self.inner
            .decode(ids, skip_special)
            .map_err(|e| TextError::Tokenize(format!("{}: cannot decode: {e}", self.origin)))
    }

    pub fn bos_id(&self) -> Option<u32> {
        self.specials.bos
    }

    pub fn eos_ids(&self) -> &[u32] {
        &self.specials.eos
    }

    pub fn pad_id(&self) -> Option<u32> {
        self.specials.pad
    }

    pub fn specials(&self) -> &SpecialTokens {
        &self.specials
    }

    pub fn is_eos(&self, id: u32) -> bool {
        self.specials.eos.contains(&id)
    }

    /// The vocabulary entry of `id` (byte-level or '▁' form, not decoded text).
    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// Number of ids, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// Refuses a tokenizer that can produce ids the model has no embedding for, naming the
    /// tokenizer's file and the first such token.
    pub fn check_fits(&self, model_vocab: usize) -> Result<()> {
        let beyond = self
            .inner
            .get_vocab(true)
            .into_iter()
            .filter(|&(_, id)| id as usize >= model_vocab)
            .min_by_key(|&(_, id)| id);
        match beyond {
            None => Ok(()),
            Some((token, id)) => Err(TextError::malformed(
                &self.origin,
                format!(
                    "token {token:?} has id {id}, beyond the model's vocabulary of {model_vocab}"
                ),
            )),
        }
    }

    /// The file or folder this tokenizer came from.
    pub fn origin(&self) -> &str {
        &self.origin
    }
}
