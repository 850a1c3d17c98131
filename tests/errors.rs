//! Bad input gets a typed error naming the op and the values, never a panic.

use ferrocm::ops::{Error, Reduce, Tensor, Unary};
use ferrocm::{Device, WaveSize, f16};
use rand::{Rng, SeedableRng};

fn emu() -> Device {
    Device::emulator(WaveSize::Wave64)
}

#[test]
fn shape_and_broadcast_errors_name_the_op_and_shapes() {
    let d = emu();
    let a = Tensor::<f32>::zeros(&[2, 3], &d).unwrap();
    let b = Tensor::<f32>::zeros(&[4], &d).unwrap();
    let e = a.add(&b).unwrap_err();
    assert!(
        matches!(e, Error::BroadcastIncompatible { op: "add", .. }),
        "{e}"
    );
    assert_eq!(e.to_string(), "add: shapes [2, 3] and [4] do not broadcast");
    let m = Tensor::<u8>::zeros(&[5], &d).unwrap();
    let e = m.where_cond(&a, &a).unwrap_err();
    assert!(e.to_string().starts_with("where_cond: shapes"), "{e}");
    assert!(matches!(
        a.reshape(&[4]).unwrap_err(),
        Error::ReshapeIncompatible { .. }
    ));
    assert!(matches!(
        a.broadcast_as(&[3, 3]).unwrap_err(),
        Error::BroadcastIncompatible { .. }
    ));
    assert!(matches!(
        Tensor::from_slice(&[1.0f32; 5], &[2, 3], &d).unwrap_err(),
        Error::DataLength { .. }
    ));
}

#[test]
fn device_mismatch() {
    let a = Tensor::<f32>::zeros(&[3], &Device::Cpu).unwrap();
    let b = Tensor::<f32>::zeros(&[3], &emu()).unwrap();
    let e = a.mul(&b).unwrap_err();
    assert!(matches!(e, Error::DeviceMismatch { op: "mul", .. }), "{e}");
    assert!(
        e.to_string().contains("cpu") && e.to_string().contains("emulator"),
        "{e}"
    );
    let w32 = Tensor::<f32>::zeros(&[3], &Device::emulator(WaveSize::Wave32)).unwrap();
    assert!(b.add(&w32).is_err());
}

#[test]
fn dim_errors() {
    let t = Tensor::<f32>::zeros(&[2, 3], &emu()).unwrap();
    let e = t.sum(&[2], false).unwrap_err();
    assert_eq!(
        e.to_string(),
        "sum: dim 2 out of range for a rank-2 tensor of shape [2, 3]"
    );
    assert!(matches!(
        t.max(&[1, 1], false).unwrap_err(),
        Error::DuplicateDim { .. }
    ));
    assert!(matches!(
        t.transpose(0, 5).unwrap_err(),
        Error::DimOutOfRange {
            op: "transpose",
            ..
        }
    ));
    assert!(matches!(
        t.narrow(1, 2, 2).unwrap_err(),
        Error::NarrowOutOfRange { .. }
    ));
    assert!(matches!(
        t.permute(&[0, 0]).unwrap_err(),
        Error::BadPermutation { .. }
    ));
    // A rank-0 tensor is one element over a dim of one: softmax 1, not an
    // error (PyTorch; tests/nan_and_accuracy.rs checks every device).
    let s = Tensor::<f32>::zeros(&[], &emu()).unwrap();
    assert_eq!(s.softmax().unwrap().to_vec().unwrap(), vec![1.0]);
}

#[test]
fn empty_reductions_without_a_value_are_errors() {
    let t = Tensor::<f32>::zeros(&[3, 0], &emu()).unwrap();
    for r in [t.max(&[1], false), t.min(&[1], true)] {
        assert!(matches!(r.unwrap_err(), Error::EmptyReduction { .. }));
    }
    assert!(matches!(
        t.argmax(&[1], false).unwrap_err(),
        Error::EmptyReduction { op: "argmax", .. }
    ));
    // Sum of nothing is 0; reducing only non-empty dims of an empty tensor is fine.
    assert_eq!(t.sum(&[1], false).unwrap().to_vec().unwrap(), vec![0.0; 3]);
    assert_eq!(t.max(&[0], false).unwrap().shape(), &[0]);
}

#[test]
fn dtype_errors() {
    let u = Tensor::<u8>::zeros(&[3], &emu()).unwrap();
    assert_eq!(
        u.exp().unwrap_err().to_string(),
        "exp: not supported for dtype u8"
    );
    assert!(matches!(
        u.mean(&[0], false).unwrap_err(),
        Error::UnsupportedDType { op: "mean", .. }
    ));
    assert!(u.softmax().is_err());
}

#[test]
fn tensors_too_large_are_errors() {
    let e = Tensor::<f32>::zeros(&[usize::MAX, 2], &emu()).unwrap_err();
    assert!(matches!(e, Error::TooLarge { .. }), "{e}");
    let e = Tensor::<f32>::zeros(&[1 << 40, 1 << 20], &Device::Cpu).unwrap_err();
    assert!(matches!(e, Error::TooLarge { .. } | Error::Host(_)), "{e}");
}

/// Random shapes, strides and dims fed to every op: Ok or Err, never a panic.
#[test]
fn fuzz_random_inputs_never_panic() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(99);
    for dev in [Device::Cpu, emu()] {
        for _ in 0..300 {
            let rank = rng.random_range(0..4);
            let shape: Vec<usize> = (0..rank).map(|_| rng.random_range(0..6)).collect();
            let other: Vec<usize> = shape
                .iter()
                .map(|&d| {
                    if rng.random_bool(0.3) {
                        1
                    } else if rng.random_bool(0.1) {
                        d + 1
                    } else {
                        d
                    }
                })
                .collect();
            let dims: Vec<usize> = (0..rng.random_range(0..3))
                .map(|_| rng.random_range(0..5))
                .collect();
            let r = std::panic::catch_unwind(|| -> Result<(), Error> {
                let a = Tensor::<f32>::rand(&shape, -2.0, 2.0, 1, &dev)?;
                let b = Tensor::<f32>::rand(&other, -2.0, 2.0, 2, &dev)?;
                let a = if rank >= 2 {
                    a.transpose(0, rank - 1)?
                } else {
                    a
                };
                let _ = a.add(&b);
                let _ = a.cmp(&b, ferrocm::ops::Cmp::Ge);
                let _ = a.unary(Unary::Gelu, 0.0);
                let _ = a.sum(&dims, true);
                let _ = a.reduce(Reduce::Max, &dims, false);
                let _ = a.argmin(&dims, false);
                let _ = a.softmax();
                let _ = a.to_dtype::<f16>().and_then(|h| h.log_softmax());
                let _ = a.to_dtype::<u8>().and_then(|m| m.where_cond(&a, &b));
                let _ = a.narrow(dims.first().copied().unwrap_or(0), 1, 2);
                let _ = a.reshape(&other);
                let _ = a.copy2d(2, 2, 3, 1);
                let _ = a.permute(&dims);
                Ok(())
            });
            assert!(
                r.is_ok(),
                "panic for shape {shape:?} other {other:?} dims {dims:?} on {dev}"
            );
        }
    }
}
