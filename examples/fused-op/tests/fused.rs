//! The fused op against an f64 reference written here (not the kernel's
//! scalar function), on the Cpu and on the emulator at wave 32 and 64 with
//! the sanitizer on, every float dtype, odd and prime shapes, NaN, ±inf,
//! ±0, huge and tiny values; then every GPU that answers. And its errors.

use ferrocm::{Device, Error, Tensor, WaveSize, WithDType, bf16, f16};
use ferrocm_example_fused_op::bias_gelu_residual;

/// `gelu(x + b) + r`, tanh form, in f64 after the sum `x + b`, which the
/// op defines in f32 (so `-3e38 + -3e38` is -inf there, and gelu(-inf) is
/// NaN, as PyTorch's formula gives).
fn reference(x: f64, b: f64, r: f64) -> f64 {
    let v = (x as f32 + b as f32) as f64;
    0.5 * v * (1.0 + (0.797_884_560_802_865_4 * (v + 0.044_715 * v * v * v)).tanh()) + r
}

/// Inputs that break things: zeros of both signs, NaN, infinities,
/// subnormals, huge and ordinary values.
fn values(n: usize, seed: u64) -> Vec<f32> {
    let special = [
        0.0,
        -0.0,
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        1e-40,
        -3e38,
        3e38,
        1.0,
        -1.0,
        5.5,
        -7.25,
    ];
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|i| {
            if i % 7 == 3 {
                special[(i / 7) % special.len()]
            } else {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 8.0
            }
        })
        .collect()
}

/// `got` within `ulps` units in the last place of `T` (relative, at the
/// reference's magnitude) or an absolute floor for results near 0 (where
/// `x + b` cancels), NaN where the reference is NaN, the same infinity.
fn close(got: f64, want: f64, eps: f64) -> bool {
    if want.is_nan() {
        return got.is_nan();
    }
    if want.is_infinite() {
        return got == want;
    }
    (got - want).abs() <= eps * want.abs().max(1.0)
}

fn check<T>(dev: &Device, rows: usize, cols: usize, eps: f64)
where
    T: WithDType<Kernel: ferrocm_example_fused_op::fused::FusedKernel>,
{
    let (xs, bs, rs) = (
        values(rows * cols, 1),
        values(cols, 2),
        values(rows * cols, 3),
    );
    let to = |v: &[f32]| v.iter().map(|&x| T::from_f64(x as f64)).collect::<Vec<T>>();
    let (xt, bt, rt) = (to(&xs), to(&bs), to(&rs));
    let x = Tensor::from_slice(&xt, &[rows, cols], dev).unwrap();
    let b = Tensor::from_slice(&bt, &[cols], dev).unwrap();
    let r = Tensor::from_slice(&rt, &[rows, cols], dev).unwrap();
    let y = bias_gelu_residual(&x, &b, &r).unwrap().to_vec().unwrap();
    for (i, got) in y.iter().enumerate() {
        // Rounded once to T, as the op promises (a sum past T's range is
        // its infinity); the kernel's f32 arithmetic and tanh are within
        // `eps` of the f64 value before that.
        let want = T::from_f64(reference(
            xt[i].to_f64(),
            bt[i % cols].to_f64(),
            rt[i].to_f64(),
        ))
        .to_f64();
        assert!(
            close(got.to_f64(), want, eps),
            "{dev} {:?} [{rows}, {cols}] element {i}: x {:?} b {:?} r {:?}: got {got:?}, want {want}",
            T::DTYPE,
            xt[i],
            bt[i % cols],
            rt[i]
        );
    }
}

fn devices() -> Vec<Device> {
    let mut d = vec![
        Device::Cpu,
        Device::emulator(WaveSize::Wave32),
        Device::emulator(WaveSize::Wave64),
    ];
    d.extend(ferrocm::host::devices().into_iter().filter(|d| d.is_gpu()));
    d
}

#[test]
fn matches_the_f64_reference_on_every_device_and_dtype() {
    for dev in devices() {
        assert!(!dev.sanitizer() || matches!(dev, Device::Emulator(_)));
        for (rows, cols) in [(1, 1), (3, 5), (7, 129), (2, 1031), (0, 4)] {
            check::<f32>(&dev, rows, cols, 1e-5);
            check::<f16>(&dev, rows, cols, 2e-3);
            check::<bf16>(&dev, rows, cols, 1.6e-2);
        }
    }
}

#[test]
fn views_are_read_in_logical_order() {
    for dev in devices() {
        let x = Tensor::<f32>::randn(&[6, 4], 0.0, 1.0, 5, &dev).unwrap();
        let r = Tensor::<f32>::randn(&[6, 4], 0.0, 1.0, 6, &dev).unwrap();
        let b = Tensor::<f32>::randn(&[6], 0.0, 1.0, 7, &dev).unwrap();
        // Transposed views: [4, 6] read through strides.
        let (xt, rt) = (x.transpose(0, 1).unwrap(), r.transpose(0, 1).unwrap());
        let y = bias_gelu_residual(&xt, &b, &rt).unwrap().to_vec().unwrap();
        let (xv, rv, bv) = (
            xt.contiguous().unwrap().to_vec().unwrap(),
            rt.contiguous().unwrap().to_vec().unwrap(),
            b.to_vec().unwrap(),
        );
        for (i, got) in y.iter().enumerate() {
            let want = reference(xv[i] as f64, bv[i % 6] as f64, rv[i] as f64);
            assert!(close(*got as f64, want, 1e-5), "{dev} element {i}");
        }
    }
}

#[test]
fn bad_input_is_a_typed_error_naming_the_op_and_shapes() {
    let dev = Device::emulator(WaveSize::Wave32);
    let x = Tensor::<f32>::zeros(&[2, 3], &dev).unwrap();
    let bias = Tensor::<f32>::zeros(&[4], &dev).unwrap();
    let e = bias_gelu_residual(&x, &bias, &x).unwrap_err();
    assert!(
        matches!(&e, Error::ShapeMismatch { op: "bias_gelu_residual", lhs, rhs } if lhs == &[2, 3] && rhs == &[4]),
        "{e}"
    );
    let r = Tensor::<f32>::zeros(&[3, 2], &dev).unwrap();
    let b3 = Tensor::<f32>::zeros(&[3], &dev).unwrap();
    assert!(matches!(
        bias_gelu_residual(&x, &b3, &r),
        Err(Error::ShapeMismatch { .. })
    ));
    let cpu = Tensor::<f32>::zeros(&[3], &Device::Cpu).unwrap();
    assert!(matches!(
        bias_gelu_residual(&x, &cpu, &x),
        Err(Error::DeviceMismatch { .. })
    ));
    let scalar = Tensor::<f32>::zeros(&[], &dev).unwrap();
    assert!(bias_gelu_residual(&scalar, &b3, &scalar).is_err());
}

/// The crate's module holds the kernel for every target of the build, with
/// the argument layout its signature declares (checked as ferrocm checks
/// its own kernels).
#[test]
fn the_module_holds_every_kernel_for_every_target() {
    let module = &ferrocm_example_fused_op::KERNEL_MODULE;
    assert_eq!(module.name, "ferrocm-example-fused-op");
    assert!(!module.code_objects.is_empty());
    ferrocm::host::codeobject::check_module(module, ferrocm_example_fused_op::fused::KERNELS)
        .unwrap();
}
