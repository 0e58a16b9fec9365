//! A minimal GGUF writer for tests: key/values given as (type id, encoded value) and tensors as
//! raw bytes, laid out like llama.cpp lays them out (aligned data section: 32 bytes, or a valid u32
//! `general.alignment` key).

#![allow(dead_code)]

pub const ALIGN: usize = 32;

/// Encoded GGUF values (without their type id).
pub mod val {
    pub fn u16(v: u16) -> (u32, Vec<u8>) {
        (2, v.to_le_bytes().to_vec())
    }
    pub fn u32(v: u32) -> (u32, Vec<u8>) {
        (4, v.to_le_bytes().to_vec())
    }
    pub fn i32(v: i32) -> (u32, Vec<u8>) {
        (5, v.to_le_bytes().to_vec())
    }
    pub fn f32(v: f32) -> (u32, Vec<u8>) {
        (6, v.to_le_bytes().to_vec())
    }
    pub fn bool(v: bool) -> (u32, Vec<u8>) {
        (7, vec![v as u8])
    }
    pub fn string(s: &str) -> (u32, Vec<u8>) {
        (8, super::gguf_string(s))
    }
    /// An array of values that share one type id.
    pub fn array(elem_type: u32, items: &[Vec<u8>]) -> (u32, Vec<u8>) {
        let mut b = elem_type.to_le_bytes().to_vec();
        b.extend((items.len() as u64).to_le_bytes());
        items.iter().for_each(|i| b.extend(i));
        (9, b)
    }
}

pub fn gguf_string(s: &str) -> Vec<u8> {
    let mut b = (s.len() as u64).to_le_bytes().to_vec();
    b.extend(s.as_bytes());
    b
}

pub struct Tensor {
    pub name: String,
    pub ne: Vec<u64>,
    pub ggml_type: u32,
    pub data: Vec<u8>,
}

#[derive(Default)]
pub struct Gguf {
    pub kv: Vec<(String, (u32, Vec<u8>))>,
    pub tensors: Vec<Tensor>,
}

impl Gguf {
    pub fn kv(mut self, key: &str, value: (u32, Vec<u8>)) -> Self {
        self.kv.push((key.to_string(), value));
        self
    }

    /// An F32 tensor of the given ggml shape holding `values`.
    pub fn f32_tensor(mut self, name: &str, ne: &[u64], values: &[f32]) -> Self {
        self.tensors.push(Tensor {
            name: name.into(),
            ne: ne.to_vec(),
            ggml_type: 0,
            data: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        });
        self
    }

    pub fn bytes(&self) -> Vec<u8> {
        let align = self
            .kv
            .iter()
            .find(|(k, (t, _))| k == "general.alignment" && *t == 4)
            .map(|(_, (_, v))| u32::from_le_bytes(v[..4].try_into().unwrap()) as usize)
            // Invalid values (for error tests) leave the layout at the default.
            .filter(|a| a.is_power_of_two())
            .unwrap_or(ALIGN);
        let mut b = b"GGUF".to_vec();
        b.extend(3u32.to_le_bytes());
        b.extend((self.tensors.len() as u64).to_le_bytes());
        b.extend((self.kv.len() as u64).to_le_bytes());
        for (k, (t, v)) in &self.kv {
            b.extend(gguf_string(k));
            b.extend(t.to_le_bytes());
            b.extend(v);
        }
        let mut offset = 0usize;
        for t in &self.tensors {
            b.extend(gguf_string(&t.name));
            b.extend((t.ne.len() as u32).to_le_bytes());
            t.ne.iter().for_each(|d| b.extend(d.to_le_bytes()));
            b.extend(t.ggml_type.to_le_bytes());
            b.extend((offset as u64).to_le_bytes());
            offset = (offset + t.data.len()).next_multiple_of(align);
        }
        b.resize(b.len().next_multiple_of(align), 0);
        for t in &self.tensors {
            b.extend(&t.data);
            b.resize(b.len().next_multiple_of(align), 0);
        }
        b
    }
}
