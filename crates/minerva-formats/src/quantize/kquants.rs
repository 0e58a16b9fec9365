//! ggml K-quants (256-value super-blocks with quantized sub-block scales): Q4_K, Q5_K, Q6_K.
//! Sub-block scales come from a weighted least-squares search over a few candidate grids, the
//! same search family llama.cpp uses without an importance matrix.

use half::f16;

fn nearest(v: f32) -> i32 {
    super::round_even(v) as i32
}

fn f16_round(v: f32) -> f32 {
    f16::from_f32(v).to_f32()
}

/// Fits `x ≈ scale·L + min` with L in 0..=nmax and min ≤ 0, weighted least squares over a few
/// grid stretches. Returns (scale, −min) and leaves the codes in `l`.
fn fit_scale_min(
    x: &[f32],
    w: &[f32],
    nmax: i32,
    l: &mut [u8],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
) -> (f32, f32) {
    let n = x.len();
    let (mut min, mut max) = (x[0], x[0]);
    let (mut sum_w, mut sum_x) = (0f32, 0f32);
    for i in 0..n {
        min = min.min(x[i]);
        max = max.max(x[i]);
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l.fill(0);
        return (0.0, -min);
    }
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_err = 0f32;
    for i in 0..n {
        let q = nearest(iscale * (x[i] - min)).clamp(0, nmax);
        l[i] = q as u8;
        let diff = scale * q as f32 + min - x[i];
        best_err += w[i] * diff * diff;
    }
    let mut trial = [0u8; 32];
    for step in 0..=nstep {
        iscale = (rmin + rdelta * step as f32 + nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0f32, 0f32, 0f32);
        for i in 0..n {
            let q = nearest(iscale * (x[i] - min)).clamp(0, nmax);
            trial[i] = q as u8;
            let qf = q as f32;
            sum_l += w[i] * qf;
            sum_l2 += w[i] * qf * qf;
            sum_xl += w[i] * qf * x[i];
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut err = 0f32;
            for i in 0..n {
                let diff = this_scale * trial[i] as f32 + this_min - x[i];
                err += w[i] * diff * diff;
            }
            if err < best_err {
                l[..n].copy_from_slice(&trial[..n]);
                best_err = err;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// Fits a symmetric scale for signed codes in −nmax..nmax−1 (weights x²), trying grid stretches
/// around the extreme value. Returns the scale; codes (offset by nmax) go to `l`.
fn fit_symmetric(x: &[f32], nmax: i32, l: &mut [u8]) -> f32 {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax < 1e-15 {
        l.fill(0);
        return 0.0;
    }
    let sums = |iscale: f32| {
        let (mut sumlx, mut suml2) = (0f32, 0f32);
        for &v in x {
            let q = nearest(iscale * v).clamp(-nmax, nmax - 1) as f32;
            let w = v * v;
            sumlx += w * v * q;
            suml2 += w * q * q;
        }
        (sumlx, suml2)
    };
    let codes = |iscale: f32, l: &mut [u8]| {
        for (o, &v) in l.iter_mut().zip(x) {
            *o = (nearest(iscale * v).clamp(-nmax, nmax - 1) + nmax) as u8;
        }
    };
    let iscale0 = -(nmax as f32) / max;
    codes(iscale0, l);
    let (sumlx, suml2) = sums(iscale0);
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for step in -9..=9 {
        if step == 0 {
            continue;
        }
        let iscale = -(nmax as f32 + 0.1 * step as f32) / max;
        let (sumlx, suml2) = sums(iscale);
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            codes(iscale, l);
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// Importance weights of a 32-value sub-block: its RMS plus each value's magnitude.
fn subblock_weights(x: &[f32], w: &mut [f32; 32]) {
    let sum_x2: f32 = x.iter().map(|v| v * v).sum();
    let av = (sum_x2 / 32.0).sqrt();
    for (o, &v) in w.iter_mut().zip(x) {
        *o = av + v.abs();
    }
}

/// Packs eight 6-bit scales and eight 6-bit mins into ggml's 12-byte layout.
fn pack_scales_mins(sc: &[u8; 8], mn: &[u8; 8], out: &mut [u8]) {
    out[..12].fill(0);
    for j in 0..8 {
        let (ls, lm) = (sc[j], mn[j]);
        if j < 4 {
            out[j] = ls;
            out[j + 4] = lm;
        } else {
            out[j + 4] = (ls & 0x0F) | ((lm & 0x0F) << 4);
            out[j - 4] |= (ls >> 4) << 6;
            out[j] |= (lm >> 4) << 6;
        }
    }
}

/// Fills the 6-bit sub-block scales/mins of a Q4_K/Q5_K super-block and re-derives the codes
/// from the rounded scales. Returns the codes of the 256 values.
fn scale_min_superblock(x: &[f32], nmax: i32, rmin: f32, nstep: i32, head: &mut [u8]) -> [u8; 256] {
    let mut l = [0u8; 256];
    let mut scales = [0f32; 8];
    let mut mins = [0f32; 8];
    let mut w = [0f32; 32];
    let (mut max_scale, mut max_min) = (0f32, 0f32);
    for j in 0..8 {
        let xs = &x[32 * j..32 * j + 32];
        subblock_weights(xs, &mut w);
        let (s, m) = fit_scale_min(xs, &w, nmax, &mut l[32 * j..32 * j + 32], rmin, 0.1, nstep);
        scales[j] = s;
        mins[j] = m;
        max_scale = max_scale.max(s);
        max_min = max_min.max(m);
    }
    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let mut sc = [0u8; 8];
    let mut mn = [0u8; 8];
    for j in 0..8 {
        sc[j] = nearest(inv_scale * scales[j]).min(63) as u8;
        mn[j] = nearest(inv_min * mins[j]).min(63) as u8;
    }
    let d = f16_round(max_scale / 63.0);
    let dmin = f16_round(max_min / 63.0);
    head[0..2].copy_from_slice(&f16::from_f32(max_scale / 63.0).to_le_bytes());
    head[2..4].copy_from_slice(&f16::from_f32(max_min / 63.0).to_le_bytes());
    pack_scales_mins(&sc, &mn, &mut head[4..16]);
    for j in 0..8 {
        let dj = d * sc[j] as f32;
        if dj == 0.0 {
            continue;
        }
        let mj = dmin * mn[j] as f32;
        for i in 32 * j..32 * j + 32 {
            l[i] = nearest((x[i] + mj) / dj).clamp(0, nmax) as u8;
        }
    }
    l
}

/// Q4_K super-block (144 bytes): d, dmin, 12 bytes of scales/mins, 128 bytes of nibbles.
pub fn q4_k(x: &[f32], out: &mut [u8]) {
    let l = scale_min_superblock(x, 15, -1.0, 20, &mut out[..16]);
    let qs = &mut out[16..144];
    for c in 0..4 {
        for i in 0..32 {
            qs[32 * c + i] = l[64 * c + i] | (l[64 * c + 32 + i] << 4);
        }
    }
}

/// Q5_K super-block (176 bytes): as Q4_K plus 32 bytes holding each value's fifth bit.
pub fn q5_k(x: &[f32], out: &mut [u8]) {
    let l = scale_min_superblock(x, 31, -0.5, 15, &mut out[..16]);
    let (qh, qs) = out[16..176].split_at_mut(32);
    qh.fill(0);
    for c in 0..4 {
        let (m1, m2) = (1u8 << (2 * c), 2u8 << (2 * c));
        for i in 0..32 {
            let (a, b) = (l[64 * c + i], l[64 * c + 32 + i]);
            if a > 15 {
                qh[i] |= m1;
            }
            if b > 15 {
                qh[i] |= m2;
            }
            qs[32 * c + i] = (a & 0x0F) | ((b & 0x0F) << 4);
        }
    }
}

/// Q6_K super-block (210 bytes): 128 bytes of low nibbles, 64 of high 2-bit pairs, sixteen
/// signed 8-bit sub-block scales, f16 d.
pub fn q6_k(x: &[f32], out: &mut [u8]) {
    let mut l = [0u8; 256];
    let mut scales = [0f32; 16];
    let (mut max_scale, mut max_abs) = (0f32, 0f32);
    for (ib, s) in scales.iter_mut().enumerate() {
        *s = fit_symmetric(&x[16 * ib..16 * ib + 16], 32, &mut l[16 * ib..16 * ib + 16]);
        if s.abs() > max_abs {
            max_abs = s.abs();
            max_scale = *s;
        }
    }
    out.fill(0);
    if max_abs < 1e-15 {
        return;
    }
    let iscale = -128.0 / max_scale;
    out[208..210].copy_from_slice(&f16::from_f32(1.0 / iscale).to_le_bytes());
    let d = f16_round(1.0 / iscale);
    let mut sc = [0i8; 16];
    for (o, &s) in sc.iter_mut().zip(&scales) {
        *o = nearest(iscale * s).min(127) as i8;
    }
    for j in 0..16 {
        out[192 + j] = sc[j] as u8;
        let dj = d * sc[j] as f32;
        if dj == 0.0 {
            continue;
        }
        for i in 16 * j..16 * j + 16 {
            l[i] = (nearest(x[i] / dj).clamp(-32, 31) + 32) as u8;
        }
    }
    let (ql, rest) = out.split_at_mut(128);
    let qh = &mut rest[..64];
    for half in 0..2 {
        let (lb, qlb, qhb) = (128 * half, 64 * half, 32 * half);
        for i in 0..32 {
            let q = [l[lb + i], l[lb + i + 32], l[lb + i + 64], l[lb + i + 96]];
            ql[qlb + i] = (q[0] & 0x0F) | ((q[2] & 0x0F) << 4);
            ql[qlb + i + 32] = (q[1] & 0x0F) | ((q[3] & 0x0F) << 4);
            qh[qhb + i] =
                (q[0] >> 4) | ((q[1] >> 4) << 2) | ((q[2] >> 4) << 4) | ((q[3] >> 4) << 6);
        }
    }
}
