//! How a weight buffer's bytes come out of the checkpoint's: all of them, or one field of each
//! fixed-size block packed together (a GGUF block's codes, or its scale: weights.rs,
//! `BlockSplit`). The staging ring copies through it, so that a split costs no pass of its own.

/// The bytes a weight buffer takes from its source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Gather {
    /// The source as it is.
    All,
    /// From each block of `stride` bytes, the `len` bytes at `off`.
    Field {
        stride: usize,
        off: usize,
        len: usize,
    },
}

impl Gather {
    /// Bytes gathered from `src_len` bytes of source (whole blocks).
    pub fn packed_len(self, src_len: usize) -> usize {
        match self {
            Gather::All => src_len,
            Gather::Field { stride, len, .. } => src_len / stride * len,
        }
    }

    /// Writes the gathered bytes `from .. from + out.len()` of `src` into `out`.
    pub fn copy(self, src: &[u8], from: usize, out: &mut [u8]) {
        let Gather::Field { stride, off, len } = self else {
            out.copy_from_slice(&src[from..from + out.len()]);
            return;
        };
        // A partial block at each end field by field; the whole blocks between them by a
        // loop whose sizes are known at compile time for the layouts in use (a call per
        // 16-byte field would make gpt-oss-20b's 700 million blocks a second's work).
        let head = ((len - from % len) % len).min(out.len());
        self.copy_bytes(src, from, &mut out[..head]);
        let whole = (out.len() - head) / len * len;
        let (body, tail) = out[head..].split_at_mut(whole);
        let blocks = &src[(from + head) / len * stride..];
        match (stride, off, len) {
            (17, 1, 16) => fields::<17, 1, 16>(blocks, body),
            (17, 0, 1) => fields::<17, 0, 1>(blocks, body),
            (18, 2, 16) => fields::<18, 2, 16>(blocks, body),
            (18, 0, 2) => fields::<18, 0, 2>(blocks, body),
            (34, 2, 32) => fields::<34, 2, 32>(blocks, body),
            (34, 0, 2) => fields::<34, 0, 2>(blocks, body),
            (110, 0, 108) => fields::<110, 0, 108>(blocks, body),
            (110, 108, 2) => fields::<110, 108, 2>(blocks, body),
            (210, 0, 208) => fields::<210, 0, 208>(blocks, body),
            (210, 208, 2) => fields::<210, 208, 2>(blocks, body),
            _ => self.copy_bytes(src, from + head, body),
        }
        self.copy_bytes(src, from + head + whole, tail);
    }

    /// `copy` a byte at a time.
    fn copy_bytes(self, src: &[u8], from: usize, out: &mut [u8]) {
        let Gather::Field { stride, off, len } = self else {
            out.copy_from_slice(&src[from..from + out.len()]);
            return;
        };
        for (i, o) in out.iter_mut().enumerate() {
            let p = from + i;
            *o = src[p / len * stride + off + p % len];
        }
    }
}

/// Field `OFF .. OFF + LEN` of each `STRIDE`-byte block of `blocks`, into `out` (whole fields).
fn fields<const STRIDE: usize, const OFF: usize, const LEN: usize>(blocks: &[u8], out: &mut [u8]) {
    for (o, b) in out.chunks_exact_mut(LEN).zip(blocks.chunks_exact(STRIDE)) {
        o.copy_from_slice(&b[OFF..OFF + LEN]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every range of every layout, fast paths and the byte-wise one, against gathering the
    /// whole source field by field.
    #[test]
    fn any_range_of_a_field_matches_the_whole_gather() {
        let src: Vec<u8> = (0..210 * 12).map(|i| (i * 7 + i / 13) as u8).collect();
        let layouts = [
            (17, 1, 16),
            (17, 0, 1),
            (18, 0, 2),
            (34, 2, 32),
            (110, 108, 2),
            (210, 0, 208),
            (210, 208, 2),
            (6, 1, 3),
        ];
        for (stride, off, len) in layouts {
            let g = Gather::Field { stride, off, len };
            let whole: Vec<u8> = src
                .chunks_exact(stride)
                .flat_map(|b| b[off..off + len].to_vec())
                .collect();
            assert_eq!(g.packed_len(src.len()), whole.len());
            for from in [0, 1, len - 1, len, 3 * len + 1, whole.len() / 2] {
                for n in [0, 1, len, 2 * len + 3, whole.len() - from] {
                    let n = n.min(whole.len() - from);
                    let mut out = vec![0xAA; n];
                    g.copy(&src, from, &mut out);
                    assert_eq!(out, whole[from..from + n], "{g:?} from {from}, {n} bytes");
                }
            }
        }
        let mut out = vec![0; 5];
        Gather::All.copy(&src, 3, &mut out);
        assert_eq!(out, src[3..8]);
    }
}
