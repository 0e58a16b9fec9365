//! The weights as the CPU backend holds them: in place in the mapped file, copied onto huge
//! pages (packed eight rows at a time where the fast products take them), or owned; and the
//! products against them.

use super::{matmul, quant, resident};
use crate::backend::{Linear, VecRef, WeightId};
use crate::error::{EngineError, Result};
use minerva_formats::{dequantize_rows, DType, Mapping, TensorData, TensorView};
use quant::packed::Turn;

/// A weight buffer: in place in a mapped file, copied from it onto huge pages
/// ([`resident`]), or owned (made on the CPU, or from a source outside the shared mappings).
enum Bytes {
    Mapped {
        map: Mapping,
        range: std::ops::Range<usize>,
    },
    Resident(std::sync::Arc<resident::Resident>),
    Owned(Vec<u8>),
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Mapped { map, range } => &map[range.clone()],
            Bytes::Resident(m) => m,
            Bytes::Owned(v) => v,
        }
    }
}

/// A weight's bytes as stored, never widened.
pub(super) struct Stored {
    name: String,
    shape: Vec<usize>,
    dtype: DType,
    /// The buffers of `TensorData`, in its field order.
    bufs: Vec<Bytes>,
    kind: Kind,
    /// How its rows are packed eight at a time for the products, where they are.
    turn: Option<Turn>,
}

#[derive(Clone, Copy)]
enum Kind {
    Plain,
    MlxAffine(DType),
    MlxMxfp4,
    HfMxfp4,
}

impl Stored {
    /// Row `j` as f32, unpacked first where the rows are packed.
    pub(super) fn dequantize_row(&self, j: usize, out: &mut [f32]) -> Result<()> {
        let view = self.view();
        let Some(turn) = self.turn else {
            return Ok(dequantize_rows(&view, j, 1, out)?);
        };
        let row_bytes = view.dtype.row_bytes(view.row_len()).unwrap_or(0);
        if j >= view.rows() || row_bytes == 0 {
            return Err(EngineError::Backend(format!(
                "row {j} of '{}' ({} rows)",
                view.name,
                view.rows()
            )));
        }
        let mut row = vec![0u8; row_bytes];
        turn.unpack_row(&self.bufs[0], row_bytes, j, &mut row);
        let one = TensorView {
            shape: vec![1, view.row_len()],
            data: TensorData::Plain(&row),
            ..view
        };
        Ok(dequantize_rows(&one, 0, 1, out)?)
    }

    pub(super) fn view(&self) -> TensorView<'_> {
        let b = &self.bufs;
        let data = match self.kind {
            Kind::Plain => TensorData::Plain(&b[0]),
            Kind::MlxAffine(scale_dtype) => TensorData::MlxAffine {
                weight: &b[0],
                scales: &b[1],
                biases: &b[2],
                scale_dtype,
            },
            Kind::MlxMxfp4 => TensorData::MlxMxfp4 {
                weight: &b[0],
                scales: &b[1],
            },
            Kind::HfMxfp4 => TensorData::HfMxfp4 {
                blocks: &b[0],
                scales: &b[1],
            },
        };
        TensorView {
            name: &self.name,
            shape: self.shape.clone(),
            dtype: self.dtype,
            data,
        }
    }
}

/// The uploaded weights, the files they lie in, and the fast products' scratch (None on the
/// reference path).
pub struct Weights {
    list: Vec<Stored>,
    maps: Vec<Mapping>,
    /// Copies on huge pages by where their bytes lie in a mapping and whether they are
    /// packed (a tensor uploaded twice, as tied embeddings are, is copied once).
    resident: std::collections::HashMap<(usize, usize, bool), std::sync::Arc<resident::Resident>>,
    fast: Option<std::sync::Mutex<matmul::Scratch>>,
}

impl Weights {
    /// None yet; `fast` picks the fast products, else the reference path.
    pub(super) fn new(fast: bool) -> Weights {
        Weights {
            list: Vec::new(),
            maps: Vec::new(),
            resident: Default::default(),
            fast: fast.then(Default::default),
        }
    }

    /// Whether the fast products run (else the reference path).
    pub(super) fn fast(&self) -> bool {
        self.fast.is_some()
    }

    /// The files whose bytes weights may be kept in place of.
    pub(super) fn share_mappings(&mut self, maps: &[Mapping]) {
        self.maps = maps.to_vec();
    }

    pub(super) fn get(&self, id: WeightId) -> Result<TensorView<'_>> {
        self.stored(id).map(Stored::view)
    }

    pub(super) fn stored(&self, id: WeightId) -> Result<&Stored> {
        self.list
            .get(id.0 as usize)
            .ok_or_else(|| EngineError::Backend(format!("unknown weight handle {}", id.0)))
    }

    /// `b` where it lies inside a shared mapping: on the fast path copied onto huge pages
    /// where the system has them, else in place; outside the mappings, a copy. Where `pack`
    /// is given (a turn and the bytes per row), the fast path's copy is packed, and the
    /// second value says whether it was.
    fn keep(&mut self, b: &[u8], pack: Option<(Turn, usize)>) -> (Bytes, bool) {
        let (start, end) = (b.as_ptr() as usize, b.as_ptr() as usize + b.len());
        for map in &self.maps {
            let base = map.as_ptr() as usize;
            if start >= base && end <= base + map.len() {
                let range = start - base..end - base;
                if self.fast.is_some() {
                    let key = (start, b.len(), pack.is_some());
                    if let Some(m) = self.resident.get(&key) {
                        return (Bytes::Resident(m.clone()), pack.is_some());
                    }
                    if let Some(m) = resident::copy(map, range.clone(), pack) {
                        let m = std::sync::Arc::new(m);
                        self.resident.insert(key, m.clone());
                        return (Bytes::Resident(m), pack.is_some());
                    }
                    if let (Some((turn, row_bytes)), true) = (pack, resident::releases()) {
                        // Too small for huge pages, or none here: packed on the heap, and
                        // the file's pages of it let go, so it is still held once.
                        let mut packed = vec![0u8; b.len()];
                        turn.pack(b, &mut packed, row_bytes);
                        resident::release(map, range);
                        return (Bytes::Owned(packed), true);
                    }
                }
                let mapped = Bytes::Mapped {
                    map: map.clone(),
                    range,
                };
                return (mapped, false);
            }
        }
        (Bytes::Owned(b.to_vec()), false)
    }

    pub(super) fn vec(&self, v: &VecRef) -> Result<Vec<f32>> {
        matmul::read_vec(&self.get(v.weight)?, v)
    }

    /// `out = x · Wᵀ + b` over `n` rows.
    pub fn linear(&self, x: &[f32], n: usize, lin: &Linear, out: &mut [f32]) -> Result<()> {
        let stored = self.stored(lin.w.weight)?;
        let w = matmul::Matrix {
            view: stored.view(),
            turn: stored.turn,
        };
        let b = lin.bias.map(|b| self.get(b.weight)).transpose()?;
        // The lock is never contended: one backend runs one op at a time.
        let mut scratch = self
            .fast
            .as_ref()
            .map(|m| m.lock().unwrap_or_else(|e| e.into_inner()));
        matmul::linear(x, n, &w, lin, b.as_ref(), out, scratch.as_deref_mut())
    }

    /// How a weight's rows would be packed for the fast products, with its bytes per row;
    /// None where they stay as stored (the reference path, or a type or shape that the
    /// packed kernels do not take).
    fn packing(&self, view: &TensorView) -> Option<(Turn, usize)> {
        self.fast.as_ref()?;
        let rows = if view.shape.len() >= 2 {
            view.shape[view.shape.len() - 2]
        } else {
            return None;
        };
        let turn = quant::packed::packs(view.dtype, rows, quant::Lanes::chosen())?;
        let row_bytes = view.dtype.row_bytes(view.row_len())?;
        // Only whole rows of whole blocks, as many as the shape says.
        let TensorData::Plain(bytes) = view.data else {
            return None;
        };
        let whole = row_bytes > 0 && view.rows().checked_mul(row_bytes) == Some(bytes.len());
        whole.then_some((turn, row_bytes))
    }

    /// Keeps a weight as stored (packed where the fast products take it), and checks that
    /// its type decodes.
    pub(super) fn upload(&mut self, view: &TensorView) -> Result<WeightId> {
        let mut keep = |b: &[u8]| self.keep(b, None).0;
        let mut turn = None;
        let (bufs, kind) = match view.data {
            TensorData::Plain(b) => {
                let pack = self.packing(view);
                let (bytes, packed) = self.keep(b, pack);
                turn = pack.filter(|_| packed).map(|(t, _)| t);
                (vec![bytes], Kind::Plain)
            }
            TensorData::MlxAffine {
                weight,
                scales,
                biases,
                scale_dtype,
            } => (
                vec![keep(weight), keep(scales), keep(biases)],
                Kind::MlxAffine(scale_dtype),
            ),
            TensorData::MlxMxfp4 { weight, scales } => {
                (vec![keep(weight), keep(scales)], Kind::MlxMxfp4)
            }
            TensorData::HfMxfp4 { blocks, scales } => {
                (vec![keep(blocks), keep(scales)], Kind::HfMxfp4)
            }
        };
        let stored = Stored {
            name: view.name.to_string(),
            shape: view.shape.clone(),
            dtype: view.dtype,
            bufs,
            kind,
            turn,
        };
        // Decode one row now, so an unsupported dtype fails at load, naming the tensor.
        if view.elements() > 0 {
            let mut row = vec![0f32; view.row_len()];
            stored.dequantize_row(0, &mut row)?;
        }
        self.list.push(stored);
        Ok(WeightId(self.list.len() as u32 - 1))
    }

    pub(super) fn upload_f32(
        &mut self,
        name: &str,
        shape: &[usize],
        data: &[f32],
    ) -> Result<WeightId> {
        if shape.iter().product::<usize>() != data.len() {
            return Err(EngineError::Backend(format!(
                "'{name}': {} values for shape {shape:?}",
                data.len()
            )));
        }
        let bytes = data.iter().flat_map(|v| v.to_le_bytes()).collect();
        let stored = Stored {
            name: name.to_string(),
            shape: shape.to_vec(),
            dtype: DType::F32,
            bufs: vec![Bytes::Owned(bytes)],
            kind: Kind::Plain,
            turn: None,
        };
        self.list.push(stored);
        Ok(WeightId(self.list.len() as u32 - 1))
    }

    /// Whether weight `id` is held packed.
    #[cfg(test)]
    pub(super) fn packed(&self, id: WeightId) -> bool {
        self.stored(id).is_ok_and(|s| s.turn.is_some())
    }
}
