//! Convolution (`conv1d`, `conv2d`, `conv3d`) and transposed convolution
//! (`conv_transpose1d` .. `3d`) against direct-loop f64 references written
//! here from PyTorch's definitions (the transposed one scatters each input
//! into the outputs it reaches, the way the definition reads, where the
//! kernels gather), on every device (the
//! Cpu's im2col + GEMM and direct paths, the emulator at wave 32 and 64
//! with the sanitizer on running the implicit-GEMM and direct kernels, any
//! GPU that answers) and every float dtype. The reference takes the inputs
//! as rounded to the dtype; the bound is the f32 accumulation's worst case
//! (`K · 2^-24 · Σ|w·x|`) plus the final rounding's half ulp, well below the
//! smallest term a wrong tap, padding or group would move the sum by.
//! Where a GPU's DNN library (cuDNN, MIOpen) runs an f16/bf16 convolution
//! with a bias, the library rounds its sums to the dtype before ferrocm
//! adds the bias (as documented on `Tensor::conv`): that second rounding's
//! half ulp of the bias-free sum is added to the bound, and only there.

// The reference is index loops on purpose: it reads as the definition.
#![allow(clippy::needless_range_loop)]

mod common;

use ferrocm::ops::WithDType;
use ferrocm::ops::conv::ConvOptions;
use ferrocm::{Device, Error, Tensor, bf16, f16};

/// Deterministic values in `[-1, 1]` (an LCG, shared with nothing).
fn values(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
        })
        .collect()
}

/// One convolution's shapes and parameters, spatial lists of 1 to 3 dims.
#[derive(Clone, Debug)]
struct Case {
    n: usize,
    cin: usize,
    cout: usize,
    groups: usize,
    spatial: Vec<usize>,
    kernel: Vec<usize>,
    stride: Vec<usize>,
    pad: Vec<(usize, usize)>,
    dilation: Vec<usize>,
    bias: bool,
    /// A transposed convolution, with this output padding.
    transposed: Option<Vec<usize>>,
}

impl Case {
    fn new(n: usize, cin: usize, cout: usize, spatial: &[usize], kernel: &[usize]) -> Self {
        let d = spatial.len();
        Case {
            n,
            cin,
            cout,
            groups: 1,
            spatial: spatial.to_vec(),
            kernel: kernel.to_vec(),
            stride: vec![1; d],
            pad: vec![(0, 0); d],
            dilation: vec![1; d],
            bias: true,
            transposed: None,
        }
    }
    /// A transposed convolution with `output_padding`.
    fn transposed(mut self, output_padding: &[usize]) -> Self {
        self.transposed = Some(output_padding.to_vec());
        self
    }
    fn stride(mut self, s: &[usize]) -> Self {
        self.stride = s.to_vec();
        self
    }
    fn pad(mut self, p: &[(usize, usize)]) -> Self {
        self.pad = p.to_vec();
        self
    }
    fn dilation(mut self, d: &[usize]) -> Self {
        self.dilation = d.to_vec();
        self
    }
    fn groups(mut self, g: usize) -> Self {
        self.groups = g;
        self
    }
    fn no_bias(mut self) -> Self {
        self.bias = false;
        self
    }
    fn options(&self) -> ConvOptions {
        let o = ConvOptions::new()
            .stride(&self.stride)
            .padding_each_side(&self.pad)
            .dilation(&self.dilation)
            .groups(self.groups);
        match &self.transposed {
            Some(op) => o.output_padding(op),
            None => o,
        }
    }
    fn run<T: WithDType>(
        &self,
        x: &Tensor<T>,
        w: &Tensor<T>,
        b: Option<&Tensor<T>>,
    ) -> ferrocm::Result<Tensor<T>> {
        match self.transposed {
            Some(_) => x.conv_transpose(w, b, &self.options()),
            None => x.conv(w, b, &self.options()),
        }
    }
    fn x_shape(&self) -> Vec<usize> {
        [vec![self.n, self.cin], self.spatial.clone()].concat()
    }
    fn w_shape(&self) -> Vec<usize> {
        match self.transposed {
            Some(_) => [vec![self.cin, self.cout / self.groups], self.kernel.clone()].concat(),
            None => [vec![self.cout, self.cin / self.groups], self.kernel.clone()].concat(),
        }
    }
    fn out_spatial(&self) -> Vec<usize> {
        (0..self.spatial.len())
            .map(|d| {
                if let Some(op) = &self.transposed {
                    // Signed: the padding may pass `(in - 1) · stride`.
                    let o = ((self.spatial[d] - 1) * self.stride[d]) as isize
                        - (self.pad[d].0 + self.pad[d].1) as isize
                        + (self.dilation[d] * (self.kernel[d] - 1) + op[d] + 1) as isize;
                    return o as usize;
                }
                let padded = self.spatial[d] + self.pad[d].0 + self.pad[d].1;
                let span = self.dilation[d] * (self.kernel[d] - 1) + 1;
                (padded - span) / self.stride[d] + 1
            })
            .collect()
    }
}

/// The convolution in f64, straight from its definition: `y[n, co, o] =
/// b[co] + Σ_{ci in co's group, t} w[co, ci, t] · x[n, g·cin_g + ci, o·s -
/// pad_before + t·dil]`, out-of-range inputs zero. Returns the outputs
/// (NC-spatial order) and each one's `Σ|w·x|` (for the error bound).
fn reference(c: &Case, x: &[f64], w: &[f64], b: &[f64]) -> (Vec<f64>, Vec<f64>) {
    if c.transposed.is_some() {
        return reference_transposed(c, x, w, b);
    }
    // Spatial dims padded to three at the front.
    let lead = 3 - c.spatial.len();
    let three = |v: &[usize], fill: usize| {
        let mut t = vec![fill; lead];
        t.extend_from_slice(v);
        t
    };
    let (inp, ker, st, dil) = (
        three(&c.spatial, 1),
        three(&c.kernel, 1),
        three(&c.stride, 1),
        three(&c.dilation, 1),
    );
    let pad = three(&c.pad.iter().map(|p| p.0).collect::<Vec<_>>(), 0);
    let out = three(&c.out_spatial(), 1);
    let (cin_g, cout_g) = (c.cin / c.groups, c.cout / c.groups);
    let (vin, vk, vout) = (
        inp.iter().product::<usize>(),
        ker.iter().product::<usize>(),
        out.iter().product::<usize>(),
    );
    let mut y = Vec::new();
    let mut mag = Vec::new();
    for n in 0..c.n {
        for co in 0..c.cout {
            let g = co / cout_g;
            for o0 in 0..out[0] {
                for o1 in 0..out[1] {
                    for o2 in 0..out[2] {
                        let mut acc = if c.bias { b[co] } else { 0.0 };
                        let mut m = acc.abs();
                        for ci in 0..cin_g {
                            for t0 in 0..ker[0] {
                                for t1 in 0..ker[1] {
                                    for t2 in 0..ker[2] {
                                        let i = [
                                            (o0 * st[0] + t0 * dil[0]) as isize - pad[0] as isize,
                                            (o1 * st[1] + t1 * dil[1]) as isize - pad[1] as isize,
                                            (o2 * st[2] + t2 * dil[2]) as isize - pad[2] as isize,
                                        ];
                                        if (0..3).any(|d| i[d] < 0 || i[d] >= inp[d] as isize) {
                                            continue;
                                        }
                                        let xi = (n * c.cin + g * cin_g + ci) * vin
                                            + (i[0] as usize * inp[1] + i[1] as usize) * inp[2]
                                            + i[2] as usize;
                                        let wi = (co * cin_g + ci) * vk
                                            + (t0 * ker[1] + t1) * ker[2]
                                            + t2;
                                        acc += w[wi] * x[xi];
                                        m += (w[wi] * x[xi]).abs();
                                    }
                                }
                            }
                        }
                        y.push(acc);
                        mag.push(m);
                    }
                }
            }
        }
    }
    assert_eq!(y.len(), c.n * c.cout * vout);
    (y, mag)
}

/// The transposed convolution in f64, as PyTorch defines it: every input
/// `x[n, g·cin_g + ci, i]` adds `x · w[g·cin_g + ci, co, t]` to output
/// `y[n, g·cout_g + co, i·s - pad_before + t·dil]` when that lies inside,
/// after `b[co]`. Returns the outputs and each one's `Σ|w·x|`.
fn reference_transposed(c: &Case, x: &[f64], w: &[f64], b: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let lead = 3 - c.spatial.len();
    let three = |v: &[usize], fill: usize| {
        let mut t = vec![fill; lead];
        t.extend_from_slice(v);
        t
    };
    let (inp, ker, st, dil) = (
        three(&c.spatial, 1),
        three(&c.kernel, 1),
        three(&c.stride, 1),
        three(&c.dilation, 1),
    );
    let pad = three(&c.pad.iter().map(|p| p.0).collect::<Vec<_>>(), 0);
    let out = three(&c.out_spatial(), 1);
    let (cin_g, cout_g) = (c.cin / c.groups, c.cout / c.groups);
    let (vin, vk, vout) = (
        inp.iter().product::<usize>(),
        ker.iter().product::<usize>(),
        out.iter().product::<usize>(),
    );
    let mut y = vec![0.0; c.n * c.cout * vout];
    let mut mag = vec![0.0; c.n * c.cout * vout];
    for n in 0..c.n {
        for co in 0..c.cout {
            let at = (n * c.cout + co) * vout;
            let b = if c.bias { b[co] } else { 0.0 };
            for v in 0..vout {
                y[at + v] = b;
                mag[at + v] = b.abs();
            }
        }
        for ci in 0..c.cin {
            let g = ci / cin_g;
            for i0 in 0..inp[0] {
                for i1 in 0..inp[1] {
                    for i2 in 0..inp[2] {
                        let xv = x[(n * c.cin + ci) * vin + (i0 * inp[1] + i1) * inp[2] + i2];
                        for co in 0..cout_g {
                            for t0 in 0..ker[0] {
                                for t1 in 0..ker[1] {
                                    for t2 in 0..ker[2] {
                                        let o = [
                                            (i0 * st[0] + t0 * dil[0]) as isize - pad[0] as isize,
                                            (i1 * st[1] + t1 * dil[1]) as isize - pad[1] as isize,
                                            (i2 * st[2] + t2 * dil[2]) as isize - pad[2] as isize,
                                        ];
                                        if (0..3).any(|d| o[d] < 0 || o[d] >= out[d] as isize) {
                                            continue;
                                        }
                                        let wv = w[(ci * cout_g + co) * vk
                                            + (t0 * ker[1] + t1) * ker[2]
                                            + t2];
                                        let yi = (n * c.cout + g * cout_g + co) * vout
                                            + (o[0] as usize * out[1] + o[1] as usize) * out[2]
                                            + o[2] as usize;
                                        y[yi] += wv * xv;
                                        mag[yi] += (wv * xv).abs();
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    (y, mag)
}

fn rounded<T: WithDType>(v: &[f64]) -> (Vec<T>, Vec<f64>) {
    let t: Vec<T> = v.iter().map(|&x| T::from_f64(x)).collect();
    let r = t.iter().map(|x| x.to_f64()).collect();
    (t, r)
}

/// Half an ulp of the dtype, relative.
fn half_ulp<T: WithDType>() -> f64 {
    match T::DTYPE {
        ferrocm::ops::DType::F32 => 2f64.powi(-24),
        ferrocm::ops::DType::F16 => 2f64.powi(-11),
        _ => 2f64.powi(-8),
    }
}

/// Whether `dev`'s DNN library may run `c` in `T`, rounding the sums before
/// the bias is added: the rounded bias values, then.
fn rounds_twice<'b, T: WithDType>(c: &Case, dev: &Device, bias: &'b [f64]) -> Option<&'b [f64]> {
    let library = dev.dnn().is_some() && ferrocm::ops::conv::vendor_dnn();
    (library && c.bias && T::DTYPE != ferrocm::ops::DType::F32).then_some(bias)
}

/// `got` against the reference within the bound of the module doc; with
/// `twice` (the bias, when a library rounds before adding it), plus half an
/// ulp of each bias-free sum.
fn check<T: WithDType>(
    c: &Case,
    got: &Tensor<T>,
    want: &[f64],
    mag: &[f64],
    what: &str,
    twice: Option<&[f64]>,
) {
    let mut shape = vec![c.n, c.cout];
    shape.extend(c.out_spatial());
    assert_eq!(got.shape(), &shape[..], "{what}: shape");
    let k = (c.cin / c.groups * c.kernel.iter().product::<usize>()) as f64;
    let got = got.to_vec().unwrap();
    for (i, (g, (&w, &m))) in got.iter().zip(want.iter().zip(mag)).enumerate() {
        let g = g.to_f64();
        if w.is_nan() {
            assert!(
                g.is_nan(),
                "{what} [{}] element {i}: got {g}, want NaN",
                T::DTYPE
            );
            continue;
        }
        let positions: usize = c.out_spatial().iter().product();
        let first = twice.map_or(0.0, |b| {
            half_ulp::<T>() * (w - b[(i / positions.max(1)) % c.cout]).abs()
        });
        let bound = (k + 2.0) * 2f64.powi(-24) * m + half_ulp::<T>() * w.abs() + first + 1e-30;
        assert!(
            (g - w).abs() <= bound,
            "{what} [{}] element {i}: got {g}, want {w} (bound {bound:e})",
            T::DTYPE
        );
    }
}

/// Runs one case on a device: contiguous input, then the same values in
/// channels-last memory (an NCHW view of NHWC), then unbatched when n = 1.
fn run_case<T: WithDType>(c: &Case, dev: &Device, seed: u64) {
    let xs = c.x_shape();
    let (x, xr) = rounded::<T>(&values(xs.iter().product(), seed));
    let (w, wr) = rounded::<T>(&values(c.w_shape().iter().product(), seed + 1));
    let (b, br) = rounded::<T>(&values(c.cout, seed + 2));
    let (want, mag) = reference(c, &xr, &wr, &br);
    let xt = Tensor::from_vec(x.clone(), &xs, dev).unwrap();
    let wt = Tensor::from_vec(w, &c.w_shape(), dev).unwrap();
    let bt = Tensor::from_vec(b, &[c.cout], dev).unwrap();
    let bias = c.bias.then_some(&bt);
    let what = format!("{c:?} on {dev}");
    let y = c.run(&xt, &wt, bias).unwrap();
    let twice = rounds_twice::<T>(c, dev, &br);
    check(c, &y, &want, &mag, &what, twice);
    // The same input in channels-last memory, read in place.
    let r = xs.len();
    let mut to_last: Vec<usize> = vec![0];
    to_last.extend(2..r);
    to_last.push(1);
    let mut to_first = vec![0, r - 1];
    to_first.extend(1..r - 1);
    let nhwc = xt.permute(&to_last).unwrap().contiguous().unwrap();
    let view = nhwc.permute(&to_first).unwrap();
    assert_eq!(view.shape(), &xs[..]);
    let y = c.run(&view, &wt, bias).unwrap();
    check(c, &y, &want, &mag, &format!("{what}, channels-last"), twice);
    if c.cin > 1 {
        assert_eq!(y.layout().strides()[1], 1, "{what}: channels-last output");
    }
    if c.n == 1 {
        let un = xt.reshape(&xs[1..]).unwrap();
        let y = c.run(&un, &wt, bias).unwrap();
        let mut shape = vec![c.cout];
        shape.extend(c.out_spatial());
        assert_eq!(y.shape(), &shape[..], "{what}: unbatched");
        let mut full = vec![1];
        full.extend_from_slice(y.shape());
        check(
            c,
            &y.reshape(&full).unwrap(),
            &want,
            &mag,
            &format!("{what}, unbatched"),
            twice,
        );
    }
}

/// The cases: kernel sizes 1/3/5/7, strides 1 and 2, symmetric and
/// asymmetric padding, dilation, groups and depthwise, odd and prime
/// sizes, batch 1 and 3, 1-d to 3-d; output channels per group on both
/// sides of the implicit GEMM's threshold (16), reductions not a multiple
/// of its K step (16), positions not a multiple of its tile (64).
fn cases() -> Vec<Case> {
    vec![
        // conv2d through the implicit GEMM (32 outputs, one group).
        Case::new(3, 5, 32, &[9, 11], &[3, 3]).pad(&[(1, 1), (1, 1)]),
        Case::new(1, 3, 17, &[13, 12], &[7, 7])
            .stride(&[2, 2])
            .pad(&[(3, 3), (3, 3)]),
        Case::new(1, 7, 20, &[8, 9], &[5, 3])
            .stride(&[2, 1])
            .pad(&[(0, 2), (1, 0)])
            .dilation(&[1, 2]),
        Case::new(3, 4, 16, &[6, 7], &[1, 1]).no_bias(),
        Case::new(1, 6, 32, &[5, 5], &[3, 3])
            .groups(2)
            .pad(&[(1, 1), (1, 1)]),
        // Few outputs per group: the direct kernel and loops.
        Case::new(3, 8, 8, &[7, 9], &[3, 3])
            .groups(8)
            .pad(&[(1, 1), (1, 1)]),
        Case::new(1, 6, 12, &[10, 7], &[3, 3])
            .groups(3)
            .stride(&[2, 2])
            .dilation(&[2, 1]),
        Case::new(1, 2, 3, &[5, 6], &[5, 5])
            .pad(&[(2, 2), (2, 2)])
            .no_bias(),
        // conv1d and conv3d, both paths.
        Case::new(3, 4, 24, &[23], &[5]).stride(&[2]).pad(&[(2, 1)]),
        Case::new(1, 5, 5, &[17], &[3])
            .groups(5)
            .dilation(&[3])
            .pad(&[(3, 3)]),
        Case::new(1, 3, 16, &[5, 6, 7], &[3, 3, 3]).pad(&[(1, 1), (1, 1), (0, 1)]),
        Case::new(3, 2, 4, &[4, 5, 3], &[2, 3, 1]).stride(&[1, 2, 1]),
        // Input channels per group a multiple of 8: f16/bf16 on the matrix
        // units (`conv_mma_*`, 128 x 128 tiles, K = (tap, ci) in steps of
        // 32): rows and columns past a tile, a K step cut short, groups,
        // strides, dilation, 1-d and 3-d, a 1x1 kernel.
        Case::new(3, 16, 40, &[9, 13], &[3, 3]).pad(&[(1, 1), (1, 1)]),
        Case::new(1, 24, 136, &[37], &[3])
            .stride(&[2])
            .pad(&[(1, 0)]),
        Case::new(2, 16, 32, &[11, 10], &[5, 3])
            .groups(2)
            .stride(&[2, 1])
            .dilation(&[1, 2])
            .pad(&[(2, 2), (0, 3)]),
        Case::new(1, 8, 16, &[4, 5, 6], &[3, 3, 3]).pad(&[(1, 1), (1, 1), (1, 1)]),
        Case::new(3, 32, 24, &[7, 6], &[1, 1]).no_bias(),
        // One tile and a long reduction: `conv_gemm_*` splits it (on the
        // emulator, grids under 8 workgroups; K = 333 in 7 chunks of 48,
        // the last 45), the chunks' sums added by `conv_split_sum_*`; the
        // 1-tile cases above with K >= 64 split too. 37 input channels keep
        // f16/bf16 off the matrix units.
        Case::new(1, 37, 24, &[6, 5], &[3, 3]).pad(&[(1, 1), (1, 1)]),
        Case::new(2, 37, 20, &[4, 3], &[3, 3]).no_bias(),
        // Depthwise over more images x channels than the direct kernel's
        // grid has rows of workgroups (workitems loop over several).
        Case::new(1, 1100, 1100, &[3, 4], &[3, 3])
            .groups(1100)
            .pad(&[(1, 1), (1, 1)]),
        // Outputs the Cpu cuts into blocks of lines (several tasks per
        // image, the last block short; 3-d blocks across depth slices).
        Case::new(1, 3, 16, &[47, 37], &[3, 3]).pad(&[(1, 1), (2, 0)]),
        Case::new(2, 4, 32, &[5, 9, 40], &[3, 3, 3])
            .groups(2)
            .pad(&[(1, 1), (0, 1), (1, 1)]),
    ]
}

fn conv_cases<T: WithDType>(dev: &Device) {
    for (i, c) in cases().iter().enumerate() {
        run_case::<T>(c, dev, 100 + i as u64);
    }
}

/// Transposed cases: strides 1 to 3 (taps between inputs), kernels larger
/// and smaller than the stride, padding past the kernel's reach (the
/// window's corner after the output's start), asymmetric padding, output
/// padding below the stride and (stride 1) below the dilation, groups and
/// depthwise, both kernels' sides of the 16-channel threshold, 1-d to 3-d,
/// batch 1 and 3.
fn transposed_cases() -> Vec<Case> {
    vec![
        // The 2x upsampling layer: kernel 4, stride 2, padding 1 (GEMM).
        Case::new(3, 5, 16, &[5, 6], &[4, 4])
            .stride(&[2, 2])
            .pad(&[(1, 1), (1, 1)])
            .transposed(&[0, 0]),
        Case::new(1, 7, 20, &[4, 5], &[3, 3])
            .stride(&[2, 3])
            .pad(&[(1, 0), (0, 2)])
            .transposed(&[1, 2]),
        Case::new(1, 4, 32, &[6, 5], &[3, 2])
            .dilation(&[2, 3])
            .pad(&[(5, 1), (0, 0)])
            .transposed(&[1, 0]),
        Case::new(3, 6, 32, &[3, 4], &[1, 1])
            .stride(&[3, 2])
            .groups(2)
            .no_bias()
            .transposed(&[2, 1]),
        // Few outputs per group: the direct kernel.
        Case::new(3, 6, 6, &[5, 4], &[3, 3])
            .groups(6)
            .stride(&[2, 2])
            .pad(&[(1, 1), (1, 1)])
            .transposed(&[1, 1]),
        Case::new(1, 4, 6, &[7, 3], &[2, 5])
            .groups(2)
            .stride(&[1, 2])
            .dilation(&[2, 1])
            .pad(&[(3, 0), (2, 2)])
            .transposed(&[1, 1]),
        // 1-d and 3-d.
        Case::new(3, 3, 17, &[11], &[5])
            .stride(&[3])
            .pad(&[(2, 4)])
            .transposed(&[2]),
        Case::new(1, 2, 4, &[3, 4, 2], &[2, 3, 3])
            .stride(&[2, 1, 2])
            .pad(&[(0, 0), (1, 1), (1, 0)])
            .transposed(&[1, 0, 1]),
        // Input channels a multiple of 8: the matrix-unit kernel, every
        // phase in one launch.
        Case::new(2, 16, 24, &[5, 7], &[4, 4])
            .stride(&[2, 2])
            .pad(&[(1, 1), (1, 1)])
            .transposed(&[0, 0]),
        // One launch whose phases differ in outputs (output padding): the
        // first row of phases has two 64-column tiles, the second one (its
        // workgroups past it return).
        Case::new(1, 8, 20, &[8, 8], &[4, 4])
            .stride(&[2, 2])
            .pad(&[(1, 1), (1, 1)])
            .transposed(&[1, 0]),
        // Four phases of one tile, K = 160: the reduction split in two
        // chunks a phase (f32 on the emulator's 4 units).
        Case::new(1, 40, 20, &[3, 3], &[4, 4])
            .stride(&[2, 2])
            .pad(&[(1, 1), (1, 1)])
            .transposed(&[1, 0]),
        // Groups in one launch: per group and phase the weights' offset,
        // on the GEMM kernels (16 outputs a group; one tap a phase) and
        // on the direct kernel (4 outputs a group).
        Case::new(1, 16, 32, &[4, 5], &[2, 2])
            .groups(2)
            .stride(&[2, 2])
            .transposed(&[0, 0]),
        Case::new(2, 8, 8, &[5, 6], &[4, 4])
            .groups(2)
            .stride(&[2, 2])
            .pad(&[(1, 1), (1, 1)])
            .transposed(&[1, 0]),
        // Phases taking 1, 2, 2 and 4 taps: a launch a phase, the longer
        // reductions split.
        Case::new(1, 48, 20, &[3, 4], &[3, 3])
            .stride(&[2, 2])
            .pad(&[(1, 1), (1, 1)])
            .transposed(&[1, 1]),
    ]
}

fn conv_transpose_cases<T: WithDType>(dev: &Device) {
    for (i, c) in transposed_cases().iter().enumerate() {
        run_case::<T>(c, dev, 200 + i as u64);
    }
}

#[test]
fn conv_transpose_matches_a_scattering_f64_reference_on_every_device_and_dtype() {
    for dev in common::devices() {
        conv_transpose_cases::<f32>(&dev);
        conv_transpose_cases::<f16>(&dev);
        conv_transpose_cases::<bf16>(&dev);
    }
}

#[test]
fn conv_matches_a_direct_f64_reference_on_every_device_and_dtype() {
    for dev in common::devices() {
        conv_cases::<f32>(&dev);
        conv_cases::<f16>(&dev);
        conv_cases::<bf16>(&dev);
    }
}

/// The emulator at wave 32 runs the f16/bf16 matrix-unit cases on the
/// warpgroup product (`conv_wgmma_*`, as an H100 does); this one runs them
/// on `conv_mma_*`'s wave-32 tiles instead, as NVIDIA GPUs before Hopper
/// and RDNA do.
#[test]
fn conv_on_the_matrix_units_without_the_warpgroup_product() {
    let dev = Device::emulator_with(ferrocm::EmulatorConfig {
        warpgroup_mma: false,
        ..ferrocm::EmulatorConfig::new(ferrocm::WaveSize::Wave32)
    });
    assert!(!dev.warpgroup_mma());
    conv_cases::<f16>(&dev);
    conv_cases::<bf16>(&dev);
}

/// NaN and infinity reach exactly the outputs whose windows hold them (a
/// padded tap is a zero that is never multiplied, as in PyTorch: 0 · inf
/// appears only from a real zero weight).
#[test]
fn conv_propagates_nan_and_inf_only_through_their_windows() {
    for dev in common::devices() {
        for c in [
            Case::new(1, 2, 16, &[6, 7], &[3, 3]).pad(&[(1, 1), (1, 1)]),
            Case::new(1, 2, 2, &[6, 7], &[3, 3])
                .groups(2)
                .pad(&[(1, 1), (1, 1)]),
            Case::new(1, 2, 16, &[6, 7], &[3, 3])
                .stride(&[2, 2])
                .pad(&[(1, 1), (1, 1)])
                .transposed(&[1, 0]),
            Case::new(1, 2, 2, &[6, 7], &[3, 3])
                .groups(2)
                .stride(&[2, 1])
                .transposed(&[0, 0]),
        ] {
            let mut x = values(c.x_shape().iter().product(), 7);
            x[3] = f64::NAN;
            x[7 * 6 + 20] = f64::INFINITY;
            x[40] = f64::NEG_INFINITY;
            let mut w = values(c.w_shape().iter().product(), 8);
            w[4] = 0.0;
            let b = values(c.cout, 9);
            let (want, mag) = reference(&c, &x, &w, &b);
            let xt = Tensor::from_vec(x.iter().map(|&v| v as f32).collect(), &c.x_shape(), &dev)
                .unwrap();
            let wt = Tensor::from_vec(w.iter().map(|&v| v as f32).collect(), &c.w_shape(), &dev)
                .unwrap();
            let bt =
                Tensor::from_vec(b.iter().map(|&v| v as f32).collect(), &[c.cout], &dev).unwrap();
            let y = c.run(&xt, &wt, Some(&bt)).unwrap();
            let got = y.to_vec().unwrap();
            for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
                let what = format!("{c:?} on {dev}: element {i}");
                if w.is_nan() {
                    assert!(g.is_nan(), "{what}: got {g}, want NaN");
                } else if w.is_infinite() {
                    assert_eq!(g as f64, w, "{what}");
                } else {
                    assert!(
                        (g as f64 - w).abs() <= 1e-5 * (mag[i] + 1.0),
                        "{what}: got {g}, want {w}"
                    );
                }
            }
            assert!(want.iter().any(|v| v.is_nan()) && want.iter().any(|v| v.is_finite()));
        }
    }
}

/// Views: an input narrowed to an odd offset and a transposed spatial view
/// run in place and match the same values made contiguous; an empty batch
/// gives an empty output.
#[test]
fn conv_reads_views_and_empty_batches() {
    for dev in common::devices() {
        let c = Case::new(2, 3, 16, &[9, 8], &[3, 3]).pad(&[(1, 1), (1, 1)]);
        let big = Tensor::<f32>::from_vec(
            values(2 * 3 * 9 * 9, 11)
                .iter()
                .map(|&v| v as f32)
                .collect(),
            &[2, 3, 9, 9],
            &dev,
        )
        .unwrap();
        let w = Tensor::<f32>::from_vec(
            values(16 * 3 * 9, 12).iter().map(|&v| v as f32).collect(),
            &[16, 3, 3, 3],
            &dev,
        )
        .unwrap();
        for view in [
            big.narrow(3, 1, 8).unwrap(),
            big.transpose(2, 3).unwrap().narrow(3, 0, 8).unwrap(),
        ] {
            let dense = view.contiguous().unwrap();
            let xr: Vec<f64> = dense.to_vec().unwrap().iter().map(|&v| v as f64).collect();
            let wr: Vec<f64> = w.to_vec().unwrap().iter().map(|&v| v as f64).collect();
            let (want, mag) = reference(&c.clone().no_bias(), &xr, &wr, &[]);
            let y = view.conv(&w, None, &c.options()).unwrap();
            check(&c, &y, &want, &mag, &format!("strided view on {dev}"), None);
        }
        // A weight that is the second half of a larger buffer (contiguous,
        // at an offset: what a DNN library must be handed from there).
        let halves = Tensor::<f32>::from_vec(
            values(32 * 3 * 9, 14).iter().map(|&v| v as f32).collect(),
            &[32, 3, 3, 3],
            &dev,
        )
        .unwrap();
        let second = halves.narrow(0, 16, 16).unwrap();
        assert!(second.is_contiguous() && second.layout().offset() > 0);
        let x = big.narrow(3, 1, 8).unwrap().contiguous().unwrap();
        let xr: Vec<f64> = x.to_vec().unwrap().iter().map(|&v| v as f64).collect();
        let wr: Vec<f64> = second.to_vec().unwrap().iter().map(|&v| v as f64).collect();
        let (want, mag) = reference(&c.clone().no_bias(), &xr, &wr, &[]);
        let y = x.conv(&second, None, &c.options()).unwrap();
        check(
            &c,
            &y,
            &want,
            &mag,
            &format!("offset weight on {dev}"),
            None,
        );
        // Transposed, over the same views.
        let t = Case::new(2, 3, 16, &[9, 8], &[3, 3])
            .stride(&[2, 1])
            .pad(&[(1, 0), (0, 1)])
            .transposed(&[1, 0]);
        let wt = Tensor::<f32>::from_vec(
            values(3 * 16 * 9, 13).iter().map(|&v| v as f32).collect(),
            &[3, 16, 3, 3],
            &dev,
        )
        .unwrap();
        for view in [
            big.narrow(3, 1, 8).unwrap(),
            big.transpose(2, 3).unwrap().narrow(3, 0, 8).unwrap(),
        ] {
            let xr: Vec<f64> = view
                .contiguous()
                .unwrap()
                .to_vec()
                .unwrap()
                .iter()
                .map(|&v| v as f64)
                .collect();
            let wr: Vec<f64> = wt.to_vec().unwrap().iter().map(|&v| v as f64).collect();
            let (want, mag) = reference(&t.clone().no_bias(), &xr, &wr, &[]);
            let y = t.run(&view, &wt, None).unwrap();
            check(
                &t,
                &y,
                &want,
                &mag,
                &format!("transposed view on {dev}"),
                None,
            );
        }
        let empty = Tensor::<f32>::zeros(&[0, 3, 9, 8], &dev).unwrap();
        let y = empty.conv(&w, None, &c.options()).unwrap();
        assert_eq!(y.shape(), &[0, 16, 9, 8]);
        let y = t.run(&empty, &wt, None).unwrap();
        assert_eq!(y.shape(), &[0, 16, 19, 9]);
        // No input channels: the bias alone.
        let none = Tensor::<f32>::zeros(&[1, 0, 2, 2], &dev).unwrap();
        let w0 = Tensor::<f32>::zeros(&[0, 2, 2, 2], &dev).unwrap();
        let b = Tensor::from_slice(&[1.5f32, -2.0], &[2], &dev).unwrap();
        let y = none
            .conv_transpose2d(&w0, Some(&b), &ConvOptions::new())
            .unwrap();
        assert_eq!(y.shape(), &[1, 2, 3, 3]);
        assert_eq!(y.to_vec().unwrap(), [[1.5f32; 9], [-2.0; 9]].concat());
    }
}

#[test]
fn conv_refuses_bad_inputs_with_typed_errors() {
    let dev = Device::Cpu;
    let x = Tensor::<f32>::zeros(&[1, 4, 5, 5], &dev).unwrap();
    let w = Tensor::<f32>::zeros(&[6, 2, 3, 3], &dev).unwrap();
    let o = ConvOptions::new().groups(2);
    assert!(x.conv2d(&w, None, &o).is_ok());
    let bad = |r: ferrocm::Result<Tensor<f32>>, needle: &str| match r {
        Err(Error::BadParameter { op, what }) => {
            assert!(op.starts_with("conv"), "{op}");
            assert!(what.contains(needle), "{what} lacks {needle}");
        }
        other => panic!("expected BadParameter with {needle}, got {other:?}"),
    };
    // Channels not divisible by groups, or a weight for other groups.
    bad(
        x.conv2d(&w, None, &ConvOptions::new().groups(3)),
        "groups 3",
    );
    bad(
        x.conv2d(&w, None, &ConvOptions::new().groups(0)),
        "groups 0",
    );
    bad(x.conv2d(&w, None, &ConvOptions::new()), "input channels");
    // A kernel larger than the padded input: an output below 1.
    let big = Tensor::<f32>::zeros(&[6, 2, 7, 3], &dev).unwrap();
    bad(x.conv2d(&big, None, &o), "padded input");
    assert!(x.conv2d(&big, None, &o.clone().padding(&[1, 0])).is_ok());
    bad(
        x.conv2d(&w, None, &o.clone().dilation(&[3])),
        "padded input",
    );
    // Stride and dilation of 0, lists of the wrong length.
    bad(x.conv2d(&w, None, &o.clone().stride(&[0])), "at least 1");
    bad(
        x.conv2d(&w, None, &o.clone().dilation(&[1, 0])),
        "at least 1",
    );
    bad(x.conv2d(&w, None, &o.clone().stride(&[1, 1, 1])), "stride");
    // Ranks: the weight's, the input's against it, conv1d with a 2-d weight.
    bad(
        x.conv(&Tensor::zeros(&[6, 2], &dev).unwrap(), None, &o),
        "rank 3, 4 or 5",
    );
    bad(x.conv1d(&w, None, &o), "rank 3");
    bad(
        Tensor::<f32>::zeros(&[5, 5], &dev)
            .unwrap()
            .conv2d(&w, None, &o),
        "input must have rank",
    );
    // The bias's shape.
    let b = Tensor::<f32>::zeros(&[5], &dev).unwrap();
    bad(x.conv2d(&w, Some(&b), &o), "bias");
    // A kernel dim of 0.
    bad(
        x.conv2d(&Tensor::zeros(&[6, 2, 0, 3], &dev).unwrap(), None, &o),
        "non-empty",
    );
    // Integers, and a device mismatch.
    let xi = Tensor::<u32>::zeros(&[1, 4, 5, 5], &dev).unwrap();
    let wi = Tensor::<u32>::zeros(&[6, 2, 3, 3], &dev).unwrap();
    assert!(matches!(
        xi.conv2d(&wi, None, &o),
        Err(Error::UnsupportedDType { op: "conv2d", .. })
    ));
    let we = w
        .to_device(&Device::emulator(ferrocm::WaveSize::Wave32))
        .unwrap();
    assert!(matches!(
        x.conv2d(&we, None, &o),
        Err(Error::DeviceMismatch { op: "conv2d", .. })
    ));
    // Past the kernels' 32-bit window coordinates: refused on a kernel
    // device, computed on the Cpu (two outputs along the padded dim).
    let huge = ConvOptions::new()
        .padding_each_side(&[(0, 0), (1 << 31, 0)])
        .stride(&[1, 1 << 31])
        .groups(2);
    let xk = x.to_device(&we.device().clone()).unwrap();
    assert!(matches!(
        xk.conv2d(&we, None, &huge),
        Err(Error::TooLarge { op: "conv2d", .. })
    ));
    let y = x
        .conv2d(&Tensor::ones(&[6, 2, 3, 3], &dev).unwrap(), None, &huge)
        .unwrap();
    assert_eq!(
        (y.shape(), y.to_vec().unwrap()[1]),
        (&[1, 6, 3, 2][..], 0.0)
    );
    // The dynamic form checks dtypes.
    let wd = Tensor::<f16>::zeros(&[6, 2, 3, 3], &dev).unwrap().to_dyn();
    assert!(matches!(
        x.to_dyn().conv(&wd, None, &o),
        Err(Error::DTypeMismatch { op: "conv", .. })
    ));
    // Output padding is a transposed convolution's only.
    bad(
        x.conv2d(&w, None, &o.clone().output_padding(&[1])),
        "applies only to a transposed",
    );
}

#[test]
fn conv_transpose_refuses_bad_inputs_with_typed_errors() {
    let dev = Device::Cpu;
    let x = Tensor::<f32>::zeros(&[1, 4, 5, 5], &dev).unwrap();
    // (C_in, C_out / groups, kernel..): 4 -> 6 channels in two groups.
    let w = Tensor::<f32>::zeros(&[4, 3, 3, 3], &dev).unwrap();
    let o = ConvOptions::new().groups(2).stride(&[2]);
    assert_eq!(
        x.conv_transpose2d(&w, None, &o).unwrap().shape(),
        &[1, 6, 11, 11]
    );
    let bad = |r: ferrocm::Result<Tensor<f32>>, needle: &str| match r {
        Err(Error::BadParameter { op, what }) => {
            assert!(op.starts_with("conv_transpose"), "{op}");
            assert!(what.contains(needle), "{what} lacks {needle}");
        }
        other => panic!("expected BadParameter with {needle}, got {other:?}"),
    };
    bad(
        x.conv_transpose2d(&w, None, &o.clone().groups(3)),
        "groups 3",
    );
    bad(
        x.conv_transpose2d(&w, None, &o.clone().groups(0)),
        "groups 0",
    );
    let w5 = Tensor::<f32>::zeros(&[5, 3, 3, 3], &dev).unwrap();
    bad(x.conv_transpose2d(&w5, None, &o), "C_in = 4");
    // Output padding at or past both the stride and the dilation.
    bad(
        x.conv_transpose2d(&w, None, &o.clone().output_padding(&[2])),
        "below the stride",
    );
    bad(
        x.conv_transpose2d(&w, None, &o.clone().stride(&[1]).output_padding(&[1])),
        "below the stride",
    );
    assert!(
        x.conv_transpose2d(
            &w,
            None,
            &o.clone().stride(&[1]).dilation(&[2]).output_padding(&[1])
        )
        .is_ok()
    );
    bad(
        x.conv_transpose2d(&w, None, &o.clone().output_padding(&[1, 1, 1])),
        "output_padding",
    );
    // Padding that cuts the whole output away.
    bad(
        x.conv_transpose2d(&w, None, &o.clone().stride(&[1]).padding(&[4])),
        "at least 1",
    );
    bad(
        x.conv_transpose2d(&Tensor::zeros(&[4, 3, 0, 3], &dev).unwrap(), None, &o),
        "non-empty",
    );
    // Ranks, the bias, stride 0.
    bad(
        x.conv_transpose1d(&w, None, &o),
        "rank 3 (C_in, C_out / groups",
    );
    bad(
        x.conv_transpose(&Tensor::zeros(&[4, 3], &dev).unwrap(), None, &o),
        "rank 3, 4 or 5",
    );
    let b = Tensor::<f32>::zeros(&[3], &dev).unwrap();
    bad(
        x.conv_transpose2d(&w, Some(&b), &o),
        "bias must have shape [6]",
    );
    bad(
        x.conv_transpose2d(&w, None, &o.clone().stride(&[0])),
        "at least 1",
    );
    // Integers, a device mismatch, the dynamic form's dtypes.
    let xi = Tensor::<u32>::zeros(&[1, 4, 5, 5], &dev).unwrap();
    assert!(matches!(
        xi.conv_transpose2d(&Tensor::zeros(&[4, 3, 3, 3], &dev).unwrap(), None, &o),
        Err(Error::UnsupportedDType {
            op: "conv_transpose2d",
            ..
        })
    ));
    let emu = Device::emulator(ferrocm::WaveSize::Wave64);
    let we = w.to_device(&emu).unwrap();
    assert!(matches!(
        x.conv_transpose2d(&we, None, &o),
        Err(Error::DeviceMismatch {
            op: "conv_transpose2d",
            ..
        })
    ));
    let wd = Tensor::<bf16>::zeros(&[4, 3, 3, 3], &dev).unwrap().to_dyn();
    assert!(matches!(
        x.to_dyn().conv_transpose(&wd, None, &o),
        Err(Error::DTypeMismatch {
            op: "conv_transpose",
            ..
        })
    ));
    // A window reaching past the kernels' 32-bit coordinates (dilation and
    // padding 2^30): refused on a kernel device, computed on the Cpu, where
    // only the middle tap lands (ones: 4 channels summed).
    let huge = ConvOptions::new()
        .dilation(&[1, 1 << 30])
        .padding_each_side(&[(0, 0), (1 << 30, 1 << 30)]);
    let ones = Tensor::<f32>::ones(&[1, 4, 5, 5], &dev).unwrap();
    let w1 = Tensor::<f32>::ones(&[4, 3, 1, 3], &dev).unwrap();
    let y = ones.conv_transpose2d(&w1, None, &huge).unwrap();
    assert_eq!(y.shape(), &[1, 3, 5, 5]);
    assert!(y.to_vec().unwrap().iter().all(|&v| v == 4.0));
    assert!(matches!(
        ones.to_device(&emu)
            .unwrap()
            .conv_transpose2d(&w1.to_device(&emu).unwrap(), None, &huge),
        Err(Error::TooLarge {
            op: "conv_transpose2d",
            ..
        })
    ));
}
