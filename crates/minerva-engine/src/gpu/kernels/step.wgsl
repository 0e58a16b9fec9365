// The step's uniform (`ops::Step`), written once per step: the first position of its tokens and
// how many there are. Kernels whose dispatches are replayed at every position read them here.
struct Step {
    pos0: u32,
    tokens: u32,
    _pad0: u32,
    _pad1: u32,
}
