// cos and sin of a rotary angle, reduced to [-π, π] first. GPUs' sin and cos lose precision for
// large arguments (NVIDIA's are off by ~1e-4 at a few thousand radians: positions times the
// fastest frequency), so the multiple of 2π is taken out exactly: k · TAU_HI is exact for any k
// below 2^15 (TAU_HI has 8 significant bits) and TAU_LO carries the rest of 2π.
const TAU_HI: f32 = 6.28125;
const TAU_LO: f32 = 0.0019353071795864769;

fn cos_sin(angle: f32) -> vec2<f32> {
    let k = round(angle * 0.15915494309189535);
    let r = (angle - k * TAU_HI) - k * TAU_LO;
    return vec2<f32>(cos(r), sin(r));
}
