//! matmul, matvec and linear on every device (Cpu, emulator wave 32 and 64,
//! a GPU when one answers) against a reference written here: the products
//! as plain f64 loops over torch.matmul's broadcasting rules, the
//! activations from their f64 formulas (erf by its Taylor series). None of
//! it shares code with the op library's Cpu path or the kernels.
//!
//! Tolerance: f32 accumulation of k products is within `k * 2^-23` of the
//! sum of their magnitudes; the result is then rounded once to the dtype.
//! Inputs are rounded to the dtype before the reference sees them.

mod common;

use common::devices;
use ferrocm::{
    Activation, DType, Device, EmulatorConfig, Error, Tensor, WaveSize, WithDType, bf16, f16,
};

/// Deterministic values in [-1, 1) (an LCG), rounded to `T`.
fn values<T: WithDType>(n: usize, seed: u64) -> Vec<T> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            T::from_f64(((s >> 40) as f64 / (1u64 << 24) as f64) * 2.0 - 1.0)
        })
        .collect()
}

fn row_major(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

/// erf by its Taylor series (|x| ≤ 6; ±1 past it, off by < 2e-17).
fn erf(x: f64) -> f64 {
    if x.abs() > 6.0 {
        return x.signum();
    }
    let (mut term, mut sum) = (x, x);
    for n in 1..200 {
        term *= -x * x / n as f64;
        sum += term / (2 * n + 1) as f64;
    }
    sum * 2.0 / std::f64::consts::PI.sqrt()
}

fn act_ref(v: f64, act: Option<Activation>) -> f64 {
    match act {
        None => v,
        Some(Activation::Relu) => v.max(0.0),
        Some(Activation::Gelu) => {
            0.5 * v
                * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (v + 0.044715 * v.powi(3))).tanh())
        }
        Some(Activation::GeluErf) => 0.5 * v * (1.0 + erf(v / std::f64::consts::SQRT_2)),
        Some(Activation::Silu) => v / (1.0 + (-v).exp()),
        // `Activation` is non-exhaustive: a new one needs a reference here.
        Some(other) => panic!("no reference for {other:?}"),
    }
}

/// torch.matmul on f64 (both at least 2-D): `(value, sum of |terms|)` per
/// output element, and the output shape.
fn matmul_ref(a: &[f64], sa: &[usize], b: &[f64], sb: &[usize]) -> (Vec<(f64, f64)>, Vec<usize>) {
    let (ra, rb) = (sa.len(), sb.len());
    let (m, k, n) = (sa[ra - 2], sa[ra - 1], sb[rb - 1]);
    assert_eq!(sb[rb - 2], k);
    let nb = (ra - 2).max(rb - 2);
    let dim = |s: &[usize], r: usize, d: usize| {
        if d + (r - 2) >= nb {
            s[d + (r - 2) - nb]
        } else {
            1
        }
    };
    let batch: Vec<usize> = (0..nb)
        .map(|d| dim(sa, ra, d).max(dim(sb, rb, d)))
        .collect();
    let (ta, tb) = (row_major(sa), row_major(sb));
    let count: usize = batch.iter().product();
    let mut out = Vec::new();
    for z in 0..count {
        // Batch coordinates, then each operand's offset (size-1 dims broadcast).
        let mut rem = z;
        let mut c = vec![0; nb];
        for d in (0..nb).rev() {
            c[d] = rem % batch[d];
            rem /= batch[d];
        }
        let off = |s: &[usize], t: &[usize], r: usize| {
            (0..nb)
                .filter(|&d| d + (r - 2) >= nb)
                .map(|d| {
                    let dd = d + (r - 2) - nb;
                    if s[dd] == 1 { 0 } else { c[d] * t[dd] }
                })
                .sum::<usize>()
        };
        let (oa, ob) = (off(sa, &ta, ra), off(sb, &tb, rb));
        for i in 0..m {
            for j in 0..n {
                let (mut v, mut mag) = (0.0, 0.0);
                for p in 0..k {
                    let t = a[oa + i * k + p] * b[ob + p * n + j];
                    v += t;
                    mag += t.abs();
                }
                out.push((v, mag));
            }
        }
    }
    let mut shape = batch;
    shape.extend([m, n]);
    (out, shape)
}

/// Rounding of one f32 -> T conversion, relative.
fn out_eps<T: WithDType>() -> f64 {
    match T::DTYPE {
        DType::F16 => 1.0 / 2048.0,
        DType::BF16 => 1.0 / 256.0,
        _ => 1.0 / (1u64 << 24) as f64,
    }
}

/// Checks `got` against `(value, magnitude)` pairs.
fn assert_close<T: WithDType>(what: &str, got: &[T], want: &[(f64, f64)], k: usize, dev: &Device) {
    assert_eq!(got.len(), want.len(), "{what} on {dev}: length");
    for (i, (g, &(v, mag))) in got.iter().zip(want).enumerate() {
        let g = g.to_f64();
        let tol = 2.0 * (k as f64 + 2.0) * mag / (1u64 << 23) as f64
            + 1.5 * out_eps::<T>() * v.abs()
            + 1e-6 * (1.0 + v.abs());
        assert!(
            (g - v).abs() <= tol || (g.is_nan() && v.is_nan()),
            "{what} on {dev} ({:?}): element {i} = {g}, want {v} (tol {tol})",
            T::DTYPE
        );
    }
}

fn f64s<T: WithDType>(v: &[T]) -> Vec<f64> {
    v.iter().map(|x| x.to_f64()).collect()
}

/// `a x b` of the given shapes (row-major data) against the reference.
fn check_shapes<T: WithDType>(dev: &Device, sa: &[usize], sb: &[usize], seed: u64) {
    let (na, nb) = (sa.iter().product(), sb.iter().product());
    let (va, vb) = (values::<T>(na, seed), values::<T>(nb, seed + 1));
    let a = Tensor::from_slice(&va, sa, dev).unwrap();
    let b = Tensor::from_slice(&vb, sb, dev).unwrap();
    let c = a.matmul(&b).unwrap();
    let (want, shape) = matmul_ref(&f64s(&va), sa, &f64s(&vb), sb);
    assert_eq!(c.shape(), &shape[..], "{sa:?} x {sb:?} shape");
    assert_close(
        &format!("{sa:?} x {sb:?}"),
        &c.to_vec().unwrap(),
        &want,
        sa[sa.len() - 1],
        dev,
    );
}

macro_rules! every_float {
    ($case:ident, $dev:expr) => {
        $case::<f32>($dev);
        $case::<f16>($dev);
        $case::<bf16>($dev);
    };
}

fn sizes_case<T: WithDType>(dev: &Device) {
    // Ones, primes, tile tails (the FMA GEMM's tiles are 64 x 64 x 16, the
    // wide f32 one's 128 x 64 x 16 with its two LDS stages going round, the
    // matrix-unit GEMM's 128 x 128 x 32), the GEMV's rows (m <= 8), k not a
    // multiple of the 16-byte word; the last three cross the 128-wide tiles
    // with rows that start on 16-byte words (the kernels' word loads), the
    // last with k = 0 (C is zeros).
    for (i, &(m, k, n)) in [
        (1, 1, 1),
        (1, 7, 5),
        (3, 17, 2),
        (8, 40, 70),
        (9, 16, 65),
        (65, 13, 67),
        (31, 37, 41),
        (70, 64, 1),
        (1, 200, 3),
        (130, 72, 136),
        (200, 48, 9),
        (130, 0, 70),
    ]
    .iter()
    .enumerate()
    {
        check_shapes::<T>(dev, &[m, k], &[k, n], i as u64);
    }
}

#[test]
fn sizes_against_the_f64_reference() {
    for dev in devices() {
        every_float!(sizes_case, &dev);
    }
}

fn layouts_case<T: WithDType>(dev: &Device) {
    // Odd sizes, then sizes crossing the matrix-unit GEMM's 128 x 128 x 32
    // tiles whose strides allow 16-byte word loads in every layout (where
    // the GPU copies asynchronously, the three-stage copied loop: 2 K
    // steps, then 6, the last partial, its stages going round twice); the
    // last is more columns than the Cpu widens at once for f16/bf16 (512
    // KiB of f32: 1872 at k = 70), so it crosses one of its blocks.
    for (m, k, n) in [(5, 24, 19), (136, 40, 144), (144, 168, 136), (9, 70, 1900)] {
        layouts_shape::<T>(dev, m, k, n);
    }
}

fn layouts_shape<T: WithDType>(dev: &Device, m: usize, k: usize, n: usize) {
    let va = values::<T>(m * k, 7);
    let vb = values::<T>(k * n, 8);
    let (want, _) = matmul_ref(&f64s(&va), &[m, k], &f64s(&vb), &[k, n]);
    // Stored transposed, used through transpose views (no copies).
    let tr = |v: &[T], r: usize, c: usize| -> Vec<T> {
        (0..c)
            .flat_map(|j| (0..r).map(move |i| v[i * c + j]))
            .collect()
    };
    let a = Tensor::from_slice(&va, &[m, k], dev).unwrap();
    let b = Tensor::from_slice(&vb, &[k, n], dev).unwrap();
    let at = Tensor::from_slice(&tr(&va, m, k), &[k, m], dev)
        .unwrap()
        .transpose(0, 1)
        .unwrap();
    let bt = Tensor::from_slice(&tr(&vb, k, n), &[n, k], dev)
        .unwrap()
        .transpose(0, 1)
        .unwrap();
    for (name, x, y) in [
        ("a x b", &a, &b),
        ("aT' x b", &at, &b),
        ("a x bT'", &a, &bt),
        ("aT' x bT'", &at, &bt),
    ] {
        let c = x.matmul(y).unwrap().to_vec().unwrap();
        assert_close(name, &c, &want, k, dev);
    }
    // A narrowed view (offset 1: not on a 16-byte boundary; rows 25 apart).
    let wide = values::<T>((k + 1) * n, 9);
    let w = Tensor::from_slice(&wide, &[n, k + 1], dev).unwrap();
    let wv = w.narrow(1, 1, k).unwrap();
    let wk: Vec<T> = (0..n)
        .flat_map(|j| (0..k).map(move |p| (j, p)))
        .map(|(j, p)| wide[j * (k + 1) + 1 + p])
        .collect();
    let (want, _) = matmul_ref(&f64s(&va), &[m, k], &f64s(&tr(&wk, n, k)), &[k, n]);
    let c = a
        .matmul(&wv.transpose(0, 1).unwrap())
        .unwrap()
        .to_vec()
        .unwrap();
    assert_close("a x narrowed wT", &c, &want, k, dev);
    // Neither stride 1: b's elements every other one of a [k, n, 2] buffer
    // (the second of each pair), as a batch of one.
    let pairs = values::<T>(k * n * 2, 10);
    let odd: Vec<T> = pairs.iter().skip(1).step_by(2).copied().collect();
    let (want, _) = matmul_ref(&f64s(&va), &[m, k], &f64s(&odd), &[k, n]);
    let bp = Tensor::from_slice(&pairs, &[k, n, 2], dev)
        .unwrap()
        .permute(&[2usize, 0, 1])
        .unwrap()
        .narrow(0, 1, 1)
        .unwrap();
    let c = a.matmul(&bp).unwrap().to_vec().unwrap();
    assert_close("a x b every other element", &c, &want, k, dev);
}

#[test]
fn transposed_and_narrowed_views() {
    for dev in devices() {
        every_float!(layouts_case, &dev);
    }
}

/// On a GPU whose BLAS loads, plain products go to it; this runs ferrocm's
/// own GEMM there too (the warpgroup-product GEMM on an H100/H200, the
/// matrix-unit one elsewhere) on every layout and size. The switch is
/// process-wide: tests running meanwhile take either path, both checked.
#[test]
fn own_kernels_on_gpus_with_a_vendor_blas() {
    let gpus: Vec<Device> = devices().into_iter().filter(|d| d.is_gpu()).collect();
    if gpus.is_empty() {
        eprintln!("no GPU answers: nothing to run");
        return;
    }
    // The setting as found comes back when the test ends, panicking too.
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            ferrocm::ops::matmul::set_vendor_blas(self.0);
        }
    }
    let _restore = Restore(ferrocm::ops::matmul::vendor_blas());
    ferrocm::ops::matmul::set_vendor_blas(false);
    for dev in &gpus {
        every_float!(layouts_case, dev);
        every_float!(sizes_case, dev);
        every_float!(batches_case, dev);
    }
}

/// The emulator at wave 32 takes the warpgroup-product GEMM
/// (`gemm_wgmma_*`, as an H100 does) where the operands allow the copied
/// K loop; this one runs that loop of `gemm_mma_*` instead, as NVIDIA GPUs
/// before Hopper do.
#[test]
fn the_copy_staged_loop_without_the_warpgroup_product() {
    let dev = Device::emulator_with(EmulatorConfig {
        warpgroup_mma: false,
        ..EmulatorConfig::new(WaveSize::Wave32)
    });
    assert!(dev.double_buffers_lds() && !dev.warpgroup_mma());
    every_float!(layouts_case, &dev);
    every_float!(sizes_case, &dev);
}

fn batches_case<T: WithDType>(dev: &Device) {
    for (i, (sa, sb)) in [
        (vec![1, 3, 6], vec![4, 6, 5]),
        (vec![4, 3, 6], vec![6, 5]),
        (vec![4, 9, 6], vec![6, 70]),
        (vec![2, 1, 3, 6], vec![1, 3, 6, 5]),
        (vec![3, 2, 10, 6], vec![3, 2, 6, 4]),
        (vec![2, 1, 6], vec![2, 6, 3]),
        // Batches through the 128 x 128 tiles with 16-byte rows (the
        // copied K loop, the warpgroup GEMM at wave 32): both operands
        // batched, then B broadcast.
        (vec![3, 136, 40], vec![3, 40, 144]),
        (vec![2, 130, 48], vec![48, 136]),
    ]
    .iter()
    .enumerate()
    {
        check_shapes::<T>(dev, sa, sb, 20 + i as u64);
    }
    // A permuted batch: [m, b, k] stored, used as [b, m, k].
    let (bt, m, k, n) = (3, 4, 8, 5);
    let v = values::<T>(m * bt * k, 30);
    let a = Tensor::from_slice(&v, &[m, bt, k], dev)
        .unwrap()
        .permute(&[1usize, 0, 2][..])
        .unwrap();
    let vb = values::<T>(k * n, 31);
    let b = Tensor::from_slice(&vb, &[k, n], dev).unwrap();
    let ap: Vec<T> = (0..bt)
        .flat_map(|z| (0..m).flat_map(move |i| (0..k).map(move |p| (z, i, p))))
        .map(|(z, i, p)| v[i * bt * k + z * k + p])
        .collect();
    let (want, _) = matmul_ref(&f64s(&ap), &[bt, m, k], &f64s(&vb), &[k, n]);
    assert_close(
        "permuted batch",
        &a.matmul(&b).unwrap().to_vec().unwrap(),
        &want,
        k,
        dev,
    );
}

#[test]
fn batches_broadcast_and_permuted() {
    for dev in devices() {
        every_float!(batches_case, &dev);
    }
}

fn vectors_case<T: WithDType>(dev: &Device) {
    let k = 13;
    let (va, vb) = (values::<T>(k, 40), values::<T>(k * 3, 41));
    let a = Tensor::from_slice(&va, &[k], dev).unwrap();
    let b = Tensor::from_slice(&vb, &[k, 3], dev).unwrap();
    // [k] x [k]: the dot product, rank 0.
    let dot = a.matmul(&a).unwrap();
    assert_eq!(dot.shape(), &[] as &[usize]);
    let (want, _) = matmul_ref(&f64s(&va), &[1, k], &f64s(&va), &[k, 1]);
    assert_close("dot", &dot.to_vec().unwrap(), &want, k, dev);
    // [k] x [k, 3] -> [3]
    let c = a.matmul(&b).unwrap();
    assert_eq!(c.shape(), &[3]);
    let (want, _) = matmul_ref(&f64s(&va), &[1, k], &f64s(&vb), &[k, 3]);
    assert_close("vec x mat", &c.to_vec().unwrap(), &want, k, dev);
    // [2, 3, k] x [k] -> [2, 3]; matvec with a batch of vectors [2, k] -> [2, 3].
    let vm = values::<T>(2 * 3 * k, 42);
    let mat = Tensor::from_slice(&vm, &[2, 3, k], dev).unwrap();
    let c = mat.matmul(&a).unwrap();
    assert_eq!(c.shape(), &[2, 3]);
    let (want, _) = matmul_ref(&f64s(&vm), &[2, 3, k], &f64s(&va), &[k, 1]);
    assert_close("batched mat x vec", &c.to_vec().unwrap(), &want, k, dev);
    // More than 8 rows times a vector: the matrix-vector kernel with the
    // roles swapped; once with a strided vector (a column of a matrix).
    let vb = values::<T>(3 * 20 * k, 44);
    let big = Tensor::from_slice(&vb, &[3, 20, k], dev).unwrap();
    let c = big.matmul(&a).unwrap();
    assert_eq!(c.shape(), &[3, 20]);
    let (want, _) = matmul_ref(&f64s(&vb), &[3, 20, k], &f64s(&va), &[k, 1]);
    assert_close("[3, 20, k] x [k]", &c.to_vec().unwrap(), &want, k, dev);
    let cols: Vec<T> = va.iter().flat_map(|&v| [v, T::from_f64(9.0)]).collect();
    let col = Tensor::from_slice(&cols, &[k, 2], dev)
        .unwrap()
        .narrow(1, 0, 1)
        .unwrap();
    let c = big.matmul(&col).unwrap();
    assert_eq!(c.shape(), &[3, 20, 1]);
    assert_close(
        "[3, 20, k] x strided [k, 1]",
        &c.to_vec().unwrap(),
        &want,
        k,
        dev,
    );
    let vv = values::<T>(2 * k, 43);
    let v2 = Tensor::from_slice(&vv, &[2, k], dev).unwrap();
    let c = mat.matvec(&v2).unwrap();
    assert_eq!(c.shape(), &[2, 3]);
    let (want, _) = matmul_ref(&f64s(&vm), &[2, 3, k], &f64s(&vv), &[2, k, 1]);
    assert_close("matvec", &c.to_vec().unwrap(), &want, k, dev);
}

#[test]
fn vectors_as_torch_matmul_treats_them() {
    for dev in devices() {
        every_float!(vectors_case, &dev);
    }
}

fn linear_case<T: WithDType>(dev: &Device) {
    // Rows 6 (the GEMV kernel) and 2 x 7 = 14 (the GEMM), k a multiple of
    // the 16-byte word and not.
    for (i, &(lead, inp, out)) in [
        (&[6usize][..], 32usize, 37usize),
        (&[2, 7][..], 16, 20),
        (&[3][..], 9, 11),
        // One output column over more rows than the GEMV takes: the op
        // turns `[m, k] x [k, 1]` into a row times a matrix, where the bias
        // (one element for every row) once read past its end (fuzzer).
        (&[3, 9][..], 3, 1),
        (&[12][..], 16, 1),
    ]
    .iter()
    .enumerate()
    {
        let rows: usize = lead.iter().product();
        let vx = values::<T>(rows * inp, 50 + i as u64);
        let vw = values::<T>(out * inp, 60 + i as u64);
        let vbias = values::<T>(out, 70 + i as u64);
        let mut shape = lead.to_vec();
        shape.push(inp);
        let x = Tensor::from_slice(&vx, &shape, dev).unwrap();
        let w = Tensor::from_slice(&vw, &[out, inp], dev).unwrap();
        let bias = Tensor::from_slice(&vbias, &[out], dev).unwrap();
        let wt: Vec<f64> = (0..inp)
            .flat_map(|p| (0..out).map(move |j| (p, j)))
            .map(|(p, j)| vw[j * inp + p].to_f64())
            .collect();
        let (prod, _) = matmul_ref(&f64s(&vx), &[rows, inp], &wt, &[inp, out]);
        for act in [
            None,
            Some(Activation::Relu),
            Some(Activation::Gelu),
            Some(Activation::GeluErf),
            Some(Activation::Silu),
        ] {
            for with_bias in [false, true] {
                let y = x.linear(&w, with_bias.then_some(&bias), act).unwrap();
                let mut want_shape = lead.to_vec();
                want_shape.push(out);
                assert_eq!(y.shape(), &want_shape[..]);
                let want: Vec<(f64, f64)> = prod
                    .iter()
                    .enumerate()
                    .map(|(e, &(v, mag))| {
                        let b = if with_bias {
                            vbias[e % out].to_f64()
                        } else {
                            0.0
                        };
                        // The activations' slopes are at most 1.13: the
                        // error bound of the sum carries through.
                        (act_ref(v + b, act), 1.2 * (mag + b.abs()))
                    })
                    .collect();
                assert_close(
                    &format!("linear {lead:?}x{inp}->{out} {act:?} bias {with_bias}"),
                    &y.to_vec().unwrap(),
                    &want,
                    inp,
                    dev,
                );
            }
        }
    }
}

#[test]
fn linear_with_bias_and_every_activation() {
    for dev in devices() {
        every_float!(linear_case, &dev);
    }
}

/// `linear_mixed`: x in `T`, the weight in `W`, against the f64 sums of
/// both as stored. Rows 1, 5 and 8 (the Cpu's matrix-vector rows), 9 and
/// 70 (its widened GEMM blocks, 70 x 1900 crossing one); the weight
/// contiguous, a narrowed view (rows k + 3 apart) and a transposed view.
fn linear_mixed_case<T: WithDType, W: WithDType>(dev: &Device) {
    for (i, &(lead, k, n)) in [
        (&[1usize][..], 37usize, 29usize),
        (&[5][..], 64, 17),
        (&[2, 4][..], 19, 33),
        (&[9][..], 70, 1900),
        (&[70][..], 41, 45),
    ]
    .iter()
    .enumerate()
    {
        let m: usize = lead.iter().product();
        let vx = values::<T>(m * k, 80 + i as u64);
        let wide = values::<W>(n * (k + 3), 90 + i as u64);
        let vw: Vec<W> = (0..n * k)
            .map(|e| wide[e / k * (k + 3) + 2 + e % k])
            .collect();
        let wt: Vec<f64> = (0..k * n)
            .map(|e| vw[(e % n) * k + e / n].to_f64())
            .collect();
        let (want, _) = matmul_ref(&f64s(&vx), &[m, k], &wt, &[k, n]);
        let mut shape = lead.to_vec();
        shape.push(k);
        let x = Tensor::from_slice(&vx, &shape, dev).unwrap();
        let whole = Tensor::from_slice(&vw, &[n, k], dev).unwrap();
        let narrowed = Tensor::from_slice(&wide, &[n, k + 3], dev)
            .unwrap()
            .narrow(1, 2, k)
            .unwrap();
        let transposed = Tensor::from_slice(
            &wt.iter().map(|v| W::from_f64(*v)).collect::<Vec<_>>(),
            &[k, n],
            dev,
        )
        .unwrap()
        .transpose(0, 1)
        .unwrap();
        for (name, w) in [
            ("whole", whole),
            ("narrowed", narrowed),
            ("transposed", transposed),
        ] {
            let y = x.linear_mixed(&w.into()).unwrap();
            let mut out = lead.to_vec();
            out.push(n);
            assert_eq!(y.shape(), &out[..]);
            let what = format!("{:?} x {name} {:?} [{n}, {k}]", T::DTYPE, W::DTYPE);
            assert_close(&what, &y.to_vec().unwrap(), &want, k, dev);
        }
    }
}

#[test]
fn linear_mixed_reads_weights_of_another_dtype() {
    for dev in devices() {
        linear_mixed_case::<f32, f16>(&dev);
        linear_mixed_case::<f32, bf16>(&dev);
        linear_mixed_case::<bf16, f16>(&dev);
        linear_mixed_case::<f16, f32>(&dev);
        linear_mixed_case::<f32, f32>(&dev);
    }
    let dev = Device::Cpu;
    let x = Tensor::from_slice(&[1.0f32; 6], &[2, 3], &dev).unwrap();
    let ints = Tensor::from_slice(&[1u32; 6], &[2, 3], &dev).unwrap();
    assert!(matches!(
        x.linear_mixed(&ints.into()),
        Err(Error::UnsupportedDType {
            op: "linear_mixed",
            dtype: DType::U32
        })
    ));
    let w = Tensor::from_slice(&[f16::ONE; 8], &[2, 4], &dev).unwrap();
    match x.linear_mixed(&w.into()) {
        Err(Error::ShapeMismatch {
            op: "linear_mixed",
            lhs,
            rhs,
        }) => {
            assert_eq!((lhs, rhs), (vec![2, 3], vec![2, 4]));
        }
        other => panic!("{other:?}"),
    }
    let w3 = Tensor::from_slice(&[f16::ONE; 6], &[1, 2, 3], &dev).unwrap();
    assert!(matches!(
        x.linear_mixed(&w3.into()),
        Err(Error::ShapeMismatch { .. })
    ));
    // Empty: no rows of x, and k = 0 (zeros).
    let none = Tensor::<f32>::zeros(&[0, 3], &dev).unwrap();
    let w = Tensor::from_slice(&[f16::ONE; 6], &[2, 3], &dev).unwrap();
    assert_eq!(
        none.linear_mixed(&w.clone().into()).unwrap().shape(),
        &[0, 2]
    );
    let x0 = Tensor::<f32>::zeros(&[2, 0], &dev).unwrap();
    let w0 = Tensor::<f16>::zeros(&[3, 0], &dev).unwrap();
    assert_eq!(
        x0.linear_mixed(&w0.into()).unwrap().to_vec().unwrap(),
        vec![0.0; 6]
    );
}

/// The gated unit fused into the product: `linear_glu` against the f64
/// reference `act(gate) * up` (each half an f64 sum; the tolerance carries
/// the halves' f32 sums and their rounding to `T` through the gate), and
/// bit for bit against the composition `linear` then `glu_halves` on the
/// same device (a different kernel pair on a GPU or the emulator).
fn linear_glu_case<T: WithDType>(dev: &Device) {
    // Rows 1 and 2 (the fused kernels: `gemv_glu1`, `gemv_glu2`), 3 and 9
    // (the composition); k in 16-byte words and not; x a view narrowed out
    // of wider rows; the weight stored transposed (the composition again).
    let cases: [(&[usize], usize, usize, bool, bool); 7] = [
        (&[1], 32, 37, false, false),
        (&[2], 9, 11, false, false),
        (&[1, 2], 16, 20, false, false),
        (&[3], 16, 7, false, false),
        (&[9], 16, 6, false, false),
        (&[2], 24, 5, true, false),
        (&[2], 8, 3, false, true),
    ];
    for (i, &(lead, k, d, narrow_x, w_transposed)) in cases.iter().enumerate() {
        let rows: usize = lead.iter().product();
        let vx = values::<T>(rows * (k + 3), 80 + i as u64);
        let vw = values::<T>(2 * d * k, 90 + i as u64);
        let mut wide = lead.to_vec();
        wide.push(k + 3);
        let xw = Tensor::from_slice(&vx, &wide, dev).unwrap();
        let x = if narrow_x {
            xw.narrow(lead.len(), 2, k).unwrap()
        } else {
            let mut shape = lead.to_vec();
            shape.push(k);
            Tensor::from_slice(&vx[..rows * k], &shape, dev).unwrap()
        };
        let xv = |r: usize, p: usize| -> f64 {
            if narrow_x {
                vx[r * (k + 3) + 2 + p].to_f64()
            } else {
                vx[r * k + p].to_f64()
            }
        };
        let w = if w_transposed {
            let t: Vec<T> = (0..k)
                .flat_map(|p| (0..2 * d).map(move |j| (p, j)))
                .map(|(p, j)| vw[j * k + p])
                .collect();
            Tensor::from_slice(&t, &[k, 2 * d], dev)
                .unwrap()
                .transpose(0, 1)
                .unwrap()
        } else {
            Tensor::from_slice(&vw, &[2 * d, k], dev).unwrap()
        };
        let dot = |r: usize, j: usize| -> (f64, f64) {
            (0..k).fold((0.0, 0.0), |(s, m), p| {
                let t = xv(r, p) * vw[j * k + p].to_f64();
                (s + t, m + t.abs())
            })
        };
        for act in [
            Activation::Relu,
            Activation::Gelu,
            Activation::GeluErf,
            Activation::Silu,
        ] {
            let y = x.linear_glu(&w, act).unwrap();
            let mut want_shape = lead.to_vec();
            want_shape.push(d);
            assert_eq!(y.shape(), &want_shape[..]);
            let got = y.to_vec().unwrap();
            let what = format!("linear_glu {lead:?}x{k}->{d} {act:?} case {i}");
            for r in 0..rows {
                for j in 0..d {
                    let ((g, gm), (u, um)) = (dot(r, j), dot(r, d + j));
                    let err = |v: f64, mag: f64| {
                        2.0 * (k as f64 + 2.0) * mag / (1u64 << 23) as f64
                            + out_eps::<T>() * v.abs()
                    };
                    let a = act_ref(g, Some(act));
                    let v = a * u;
                    let tol = 1.2 * err(g, gm) * (u.abs() + err(u, um))
                        + a.abs() * err(u, um)
                        + 1.5 * out_eps::<T>() * v.abs()
                        + 1e-6 * (1.0 + v.abs());
                    let e = got[r * d + j].to_f64();
                    assert!(
                        (e - v).abs() <= tol,
                        "{what} on {dev} ({:?}): [{r}, {j}] = {e}, want {v} (tol {tol})",
                        T::DTYPE
                    );
                }
            }
            let composed = x
                .linear(&w, None, None)
                .unwrap()
                .glu_halves(act)
                .unwrap()
                .to_vec()
                .unwrap();
            for (e, (a, b)) in got.iter().zip(&composed).enumerate() {
                assert!(
                    a.to_f64().to_bits() == b.to_f64().to_bits(),
                    "{what} on {dev} ({:?}): element {e} fused {a:?}, composed {b:?}",
                    T::DTYPE
                );
            }
        }
    }
    // A NaN in a row of x makes that row NaN; an inf gate with a zero up
    // is NaN too (silu(inf) * 0); the other row is untouched.
    let k = 16;
    let mut vx = vec![T::from_f64(0.5); 2 * k];
    vx[3] = T::from_f64(f64::NAN);
    let x = Tensor::from_slice(&vx, &[2, k], dev).unwrap();
    let mut vw = vec![T::from_f64(0.25); 4 * k];
    vw[k] = T::from_f64(f64::INFINITY); // gate row 1
    vw[3 * k..].iter_mut().for_each(|v| *v = T::from_f64(0.0)); // up row 1
    let w = Tensor::from_slice(&vw, &[4, k], dev).unwrap();
    let y = f64s(
        &x.linear_glu(&w, Activation::Silu)
            .unwrap()
            .to_vec()
            .unwrap(),
    );
    assert!(y[0].is_nan() && y[1].is_nan(), "NaN row on {dev}: {y:?}");
    let g = 0.5 * 0.25 * k as f64;
    let want = T::from_f64(g / (1.0 + (-g).exp())).to_f64() * g;
    assert!(
        (y[2] - want).abs() <= 4.0 * out_eps::<T>() * want,
        "clean row on {dev}: {y:?}"
    );
    assert!(y[3].is_nan(), "inf * 0 on {dev}: {y:?}");
}

#[test]
fn linear_glu_fuses_the_gated_unit() {
    for dev in devices() {
        every_float!(linear_glu_case, &dev);
    }
    // An odd number of weight rows, a mismatched inner dim: typed errors
    // naming the op and the shapes.
    let x = Tensor::<f32>::zeros(&[1, 4], &Device::Cpu).unwrap();
    let odd = Tensor::<f32>::zeros(&[3, 4], &Device::Cpu).unwrap();
    match x.linear_glu(&odd, Activation::Silu) {
        Err(Error::BadParameter { op, what }) => {
            assert_eq!(op, "linear_glu");
            assert!(what.contains("[3, 4]"), "{what}");
        }
        other => panic!("odd rows: {other:?}"),
    }
    let wide = Tensor::<f32>::zeros(&[4, 5], &Device::Cpu).unwrap();
    assert!(matches!(
        x.linear_glu(&wide, Activation::Silu),
        Err(Error::ShapeMismatch {
            op: "linear_glu",
            ..
        })
    ));
}

fn special_values_case<T: WithDType>(dev: &Device) {
    // NaN in a row of A makes that row NaN; inf times 0 is NaN; an inf with
    // finite partners stays inf; the other rows are untouched. Both kernels.
    for (m, n) in [(3usize, 5usize), (12, 70)] {
        let k = 8;
        let mut va = vec![T::from_f64(1.0); m * k];
        va[0] = T::from_f64(f64::NAN);
        va[k] = T::from_f64(f64::INFINITY); // row 1
        let mut vb = vec![T::from_f64(0.5); k * n];
        vb[1] = T::from_f64(0.0); // column 1 meets the inf with a zero
        let a = Tensor::from_slice(&va, &[m, k], dev).unwrap();
        let b = Tensor::from_slice(&vb, &[k, n], dev).unwrap();
        // The same B stored [n, k] and used transposed: the GEMV kernel's layout.
        let vbt: Vec<T> = (0..n)
            .flat_map(|j| (0..k).map(move |p| (j, p)))
            .map(|(j, p)| vb[p * n + j])
            .collect();
        let bt = Tensor::from_slice(&vbt, &[n, k], dev)
            .unwrap()
            .transpose(0, 1)
            .unwrap();
        for b in [&b, &bt] {
            let c = a.matmul(b).unwrap().to_vec().unwrap();
            for j in 0..n {
                assert!(c[j].to_f64().is_nan(), "NaN row, col {j} on {dev}");
                let r1 = c[n + j].to_f64();
                if j == 1 {
                    assert!(r1.is_nan(), "inf * 0 on {dev}");
                } else {
                    assert_eq!(r1, f64::INFINITY, "inf row, col {j} on {dev}");
                }
                let clean = if j == 1 { 3.5 } else { 4.0 };
                assert_eq!(c[2 * n + j].to_f64(), clean, "clean row on {dev}");
            }
        }
    }
}

#[test]
fn nan_and_inf_propagate() {
    for dev in devices() {
        every_float!(special_values_case, &dev);
    }
}

#[test]
fn empty_dims() {
    for dev in devices() {
        let z = |s: &[usize]| Tensor::<f32>::zeros(s, &dev).unwrap();
        assert_eq!(z(&[0, 3]).matmul(&z(&[3, 4])).unwrap().shape(), &[0, 4]);
        assert_eq!(z(&[2, 3]).matmul(&z(&[3, 0])).unwrap().shape(), &[2, 0]);
        assert_eq!(
            z(&[0, 2, 3]).matmul(&z(&[3, 4])).unwrap().shape(),
            &[0, 2, 4]
        );
        // k = 0: sums of nothing are zero; then the bias and activation.
        let ones = Tensor::<f32>::ones(&[2, 0], &dev).unwrap();
        assert_eq!(
            ones.matmul(&z(&[0, 3])).unwrap().to_vec().unwrap(),
            vec![0.0; 6]
        );
        let bias = Tensor::from_slice(&[-1.0f32, 2.0], &[2], &dev).unwrap();
        let y = ones
            .linear(&z(&[2, 0]), Some(&bias), Some(Activation::Relu))
            .unwrap();
        assert_eq!(y.to_vec().unwrap(), vec![0.0, 2.0, 0.0, 2.0]);
    }
}

#[test]
fn bad_inputs_are_typed_errors() {
    let dev = Device::Cpu;
    let t = |s: &[usize]| Tensor::<f32>::zeros(s, &dev).unwrap();
    assert!(matches!(
        t(&[2, 3]).matmul(&t(&[2, 3])),
        Err(Error::ShapeMismatch { op: "matmul", .. })
    ));
    assert!(matches!(
        t(&[2, 2, 3]).matmul(&t(&[3, 3, 4])),
        Err(Error::BroadcastIncompatible { op: "matmul", .. })
    ));
    assert!(matches!(
        t(&[]).matmul(&t(&[3])),
        Err(Error::ShapeMismatch { .. })
    ));
    let ints = Tensor::<u32>::zeros(&[2, 2], &dev).unwrap();
    assert!(matches!(
        ints.matmul(&ints),
        Err(Error::UnsupportedDType {
            op: "matmul",
            dtype: DType::U32
        })
    ));
    let emu = Device::emulator(ferrocm::WaveSize::Wave32);
    let e = Tensor::<f32>::zeros(&[3, 2], &emu).unwrap();
    assert!(matches!(
        t(&[2, 3]).matmul(&e),
        Err(Error::DeviceMismatch { op: "matmul", .. })
    ));
    // linear: weight not 2-D, inner dims, bias shape, bias device.
    assert!(matches!(
        t(&[2, 3]).linear(&t(&[3]), None, None),
        Err(Error::ShapeMismatch { op: "linear", .. })
    ));
    assert!(matches!(
        t(&[2, 3]).linear(&t(&[4, 2]), None, None),
        Err(Error::ShapeMismatch { op: "linear", .. })
    ));
    assert!(matches!(
        t(&[2, 3]).linear(&t(&[4, 3]), Some(&t(&[3])), None),
        Err(Error::ShapeMismatch { op: "linear", .. })
    ));
    let eb = Tensor::<f32>::zeros(&[4], &emu).unwrap();
    assert!(matches!(
        t(&[2, 3]).linear(&t(&[4, 3]), Some(&eb), None),
        Err(Error::DeviceMismatch { op: "linear", .. })
    ));
    assert!(matches!(
        t(&[3]).matvec(&t(&[3])),
        Err(Error::ShapeMismatch { op: "matvec", .. })
    ));
    // The message names the op and the shapes.
    let msg = t(&[2, 3]).matmul(&t(&[2, 3])).unwrap_err().to_string();
    assert!(msg.contains("matmul") && msg.contains("[2, 3]"), "{msg}");
}
