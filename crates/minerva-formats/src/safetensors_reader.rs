//! SafeTensors reader: one file or a sharded set, through the `safetensors` crate over mmap.
