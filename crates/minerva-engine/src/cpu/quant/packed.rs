//! Weights stored eight rows at a time, turned, for the kernels that read eight rows at once.
//!
//! In a file, each row's blocks follow each other. A kernel over eight rows then loads each
//! row's scale and values apart and turns them into lanes (a row per lane) block after block,
//! for every product. Stored packed, the eight rows' block `b` lie together and already
//! turned: each 4-byte word of the block holds, for the eight rows side by side, that word of
//! each (32 bytes, lane r for row r), and each 2-byte field (an f16 scale) the eight rows'
//! fields side by side (16 bytes). A scale for eight rows is then one load, and a register of
//! values one load, with no turning. The bytes are the file's, moved: the same size, and the
//! kernels compute the same integer sums in the same order, so the same bits.
//!
//! Only matrices whose rows come in whole groups of eight are packed, so every group is whole.

use minerva_formats::DType;

/// Rows per packed group.
pub const ROWS: usize = 8;

/// How a block type's bytes are turned: its 2-byte fields at the start and at the end, and
/// the 4-byte words between.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Turn {
    block: usize,
    lead: usize,
    tail: usize,
}

impl Turn {
    /// The turn of a block type whose kernels read it packed, or None.
    pub fn of(dtype: DType) -> Option<Turn> {
        let (lead, tail) = match dtype {
            DType::Q4_0 | DType::Q8_0 => (2, 0),
            DType::Q4_1 | DType::Q4_K | DType::Q5_K => (0, 0),
            DType::Q6_K => (0, 2),
            _ => return None,
        };
        let block = dtype.block_bytes();
        debug_assert!((block - lead - tail).is_multiple_of(4));
        Some(Turn { block, lead, tail })
    }

    /// Where byte `i` of row `r`'s block lies in the eight rows' packed block.
    fn place(&self, r: usize, i: usize) -> usize {
        let words_end = self.block - self.tail;
        if i < self.lead {
            (i / 2) * 2 * ROWS + 2 * r + i % 2
        } else if i < words_end {
            let w = i - self.lead;
            ROWS * self.lead + (w / 4) * 4 * ROWS + 4 * r + w % 4
        } else {
            let f = i - words_end;
            ROWS * words_end + (f / 2) * 2 * ROWS + 2 * r + f % 2
        }
    }

    /// The field or word that byte `i` starts, and its size: bytes move a field at a time.
    fn fields(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        let words_end = self.block - self.tail;
        let lead = (0..self.lead).step_by(2).map(|i| (i, 2));
        let words = (self.lead..words_end).step_by(4).map(|i| (i, 4));
        let tail = (words_end..self.block).step_by(2).map(|i| (i, 2));
        lead.chain(words).chain(tail)
    }

    /// Packs groups of eight rows of `row_bytes` each, `src` into `dst` (the same length, a
    /// whole number of groups).
    pub fn pack(&self, src: &[u8], dst: &mut [u8], row_bytes: usize) {
        debug_assert_eq!(src.len(), dst.len());
        if row_bytes == 0 {
            return;
        }
        let group = ROWS * row_bytes;
        for (s, d) in src.chunks_exact(group).zip(dst.chunks_exact_mut(group)) {
            for (b, out) in d.chunks_exact_mut(ROWS * self.block).enumerate() {
                for r in 0..ROWS {
                    let blk = &s[r * row_bytes + b * self.block..][..self.block];
                    for (i, n) in self.fields() {
                        move_field(out, self.place(r, i), blk, i, n);
                    }
                }
            }
        }
    }

    /// A packed tensor's bytes as the file stores them.
    pub fn unpack(&self, packed: &[u8], row_bytes: usize) -> Vec<u8> {
        let mut out = vec![0u8; packed.len()];
        if row_bytes == 0 {
            return out;
        }
        for (j, row) in out.chunks_exact_mut(row_bytes).enumerate() {
            self.unpack_row(packed, row_bytes, j, row);
        }
        out
    }

    /// Row `j`'s bytes, as the file stores them, from a packed matrix.
    pub fn unpack_row(&self, packed: &[u8], row_bytes: usize, j: usize, out: &mut [u8]) {
        let (g, r) = (j / ROWS, j % ROWS);
        let group = &packed[g * ROWS * row_bytes..(g + 1) * ROWS * row_bytes];
        for (b, blk) in out[..row_bytes].chunks_exact_mut(self.block).enumerate() {
            let src = &group[b * ROWS * self.block..(b + 1) * ROWS * self.block];
            for (i, n) in self.fields() {
                move_field(blk, i, src, self.place(r, i), n);
            }
        }
    }
}

/// `src[from..from + n]` to `dst[to..]`, for fields of 2 or 4 bytes: moves of a known size,
/// not a call to copy a few bytes (the load packs every weight).
#[inline(always)]
fn move_field(dst: &mut [u8], to: usize, src: &[u8], from: usize, n: usize) {
    if n == 4 {
        dst[to..to + 4].copy_from_slice(&src[from..from + 4]);
    } else {
        dst[to..to + 2].copy_from_slice(&src[from..from + 2]);
    }
}

/// How a matrix of `dtype` with `rows` rows per matrix is stored packed where the products
/// run on `lanes`, or None where it is not: its type needs a packed kernel there and its rows
/// must come in groups of eight.
pub fn packs(dtype: DType, rows: usize, lanes: super::Lanes) -> Option<Turn> {
    let kernel = super::packed_kernel_on(dtype, lanes);
    if kernel.is_none() || rows == 0 || !rows.is_multiple_of(ROWS) {
        return None;
    }
    Turn::of(dtype)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packing_moves_every_byte_once_and_rows_unpack_as_stored() {
        for dtype in [
            DType::Q4_0,
            DType::Q4_1,
            DType::Q8_0,
            DType::Q4_K,
            DType::Q6_K,
        ] {
            let turn = Turn::of(dtype).unwrap();
            let row_bytes = 3 * dtype.block_bytes();
            let src: Vec<u8> = (0..2 * ROWS * row_bytes)
                .map(|i| (i * 31 + i / 251) as u8)
                .collect();
            let mut dst = vec![0u8; src.len()];
            turn.pack(&src, &mut dst, row_bytes);
            let mut a = src.clone();
            let mut b = dst.clone();
            a.sort_unstable();
            b.sort_unstable();
            assert_eq!(
                a,
                b,
                "{}: the packed bytes are the stored ones",
                dtype.name()
            );
            let mut row = vec![0u8; row_bytes];
            for j in 0..2 * ROWS {
                turn.unpack_row(&dst, row_bytes, j, &mut row);
                let want = &src[j * row_bytes..(j + 1) * row_bytes];
                assert_eq!(row, want, "{}: row {j}", dtype.name());
            }
            // The scales of a block's eight rows lie side by side at its start: each row's
            // f16 scale, or its word of scale and min.
            let head = if turn.lead > 0 { 2 } else { 4 };
            let first: Vec<u8> = (0..ROWS)
                .flat_map(|r| src[r * row_bytes..r * row_bytes + head].to_vec())
                .collect();
            assert_eq!(&dst[..head * ROWS], &first[..], "{}: scales", dtype.name());
        }
    }
}
