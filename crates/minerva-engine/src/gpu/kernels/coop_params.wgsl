// The parameters of the matrix-core products (matmul_coop.wgsl, matmul_staged.wgsl), as
// `CoopParams` in ops/matmul.rs writes them.
struct Params {
    rows: u32,      // a multiple of the kernel's rows per workgroup
    k: u32,         // halves per row of w16 and x16: a multiple of 32
    y_offset: u32,  // a multiple of 4
    y_stride: u32,  // a multiple of 4
    first_expert: u32,
    experts: u32,
    k_split: u32,       // halves of k per workgroup z (all of k unless the product is split)
    split_stride: u32,  // values of y between workgroup z's partial sums (a multiple of 4)
    cols: u32,          // the weight rows' values (EXPERTS of matmul_staged.wgsl)
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}
