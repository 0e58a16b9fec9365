//! Where each field of a GGUF header lies, read from a valid seed file, so mutations can hit a
//! count, a length, a type tag, a dtype id, an offset or a dimension exactly.

/// What a field holds; mutations pick a kind, then one field of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// tensor_count or kv_count (u64).
    Count,
    /// Length of a key or a string value (u64).
    Length,
    /// Length of a string inside an array, such as one vocabulary entry (u64).
    ItemLength,
    /// Element count of an array (u64).
    ArrayLength,
    /// Type tag of a value or of an array's elements (u32).
    ValueType,
    /// A numeric metadata value (`array`: an element of an array, such as a token score).
    Number { float: bool, array: bool },
    /// Dimension count of a tensor (u32).
    NDims,
    /// One dimension of a tensor (u64).
    Dim,
    /// A tensor's ggml type id (u32).
    DType,
    /// A tensor's data offset (u64).
    Offset,
}

#[derive(Debug, Clone, Copy)]
pub struct Field {
    pub kind: Kind,
    pub pos: usize,
    pub width: usize,
}

/// The fields of a GGUF's header and where its header ends; None if `b` is not one we read.
pub fn fields(b: &[u8]) -> Option<(Vec<Field>, usize)> {
    let mut r = Reader {
        b,
        pos: 0,
        out: Vec::new(),
    };
    if b.get(..4)? != b"GGUF" {
        return None;
    }
    r.pos = 8;
    let tensors = r.field(Kind::Count, 8)?;
    let kvs = r.field(Kind::Count, 8)?;
    for _ in 0..kvs {
        r.string(Kind::Length)?;
        let ty = r.field(Kind::ValueType, 4)? as u32;
        r.value(ty, false)?;
    }
    for _ in 0..tensors {
        r.string(Kind::Length)?;
        let n = r.field(Kind::NDims, 4)?;
        for _ in 0..n {
            r.field(Kind::Dim, 8)?;
        }
        r.field(Kind::DType, 4)?;
        r.field(Kind::Offset, 8)?;
    }
    Some((r.out, r.pos))
}

struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
    out: Vec<Field>,
}

impl Reader<'_> {
    fn field(&mut self, kind: Kind, width: usize) -> Option<u64> {
        let bytes = self.b.get(self.pos..self.pos + width)?;
        let mut v = [0u8; 8];
        v[..width].copy_from_slice(bytes);
        self.out.push(Field {
            kind,
            pos: self.pos,
            width,
        });
        self.pos += width;
        Some(u64::from_le_bytes(v))
    }

    fn string(&mut self, kind: Kind) -> Option<()> {
        let n = self.field(kind, 8)? as usize;
        self.pos = self.pos.checked_add(n).filter(|&p| p <= self.b.len())?;
        Some(())
    }

    fn value(&mut self, ty: u32, array: bool) -> Option<()> {
        let int = Kind::Number {
            float: false,
            array,
        };
        let float = Kind::Number { float: true, array };
        match ty {
            0 | 1 | 7 => self.field(int, 1).map(drop),
            2 | 3 => self.field(int, 2).map(drop),
            4 | 5 => self.field(int, 4).map(drop),
            6 => self.field(float, 4).map(drop),
            10 | 11 => self.field(int, 8).map(drop),
            12 => self.field(float, 8).map(drop),
            8 if array => self.string(Kind::ItemLength),
            8 => self.string(Kind::Length),
            9 => {
                let elem = self.field(Kind::ValueType, 4)? as u32;
                let n = self.field(Kind::ArrayLength, 8)?;
                for _ in 0..n {
                    self.value(elem, true)?;
                }
                Some(())
            }
            _ => None,
        }
    }
}
