//! Bad inputs a new user tried (issue 14) that panicked or misreported: each
//! is a typed error naming the op and the values now, on every device (the
//! Cpu, the emulator, any GPU that answers).

use ferrocm::WaveSize;
use ferrocm::ops::Error;
use ferrocm::{Device, Tensor};

mod common;

use common::devices;

#[test]
fn copy2d_bad_ranges_are_errors_that_say_why() {
    for dev in devices() {
        let t = Tensor::<f32>::arange(0, 6, &dev).unwrap();
        let e = t.copy2d(2, 3, usize::MAX, 0).unwrap_err();
        assert!(matches!(e, Error::BadParameter { op: "copy2d", .. }), "{e}");
        assert!(e.to_string().contains("overflow"), "{e}");
        let e = t.copy2d(2, 3, 2, 0).unwrap_err();
        assert_eq!(
            e.to_string(),
            "copy2d: rows of 3 elements overlap at a stride of 2"
        );
        let e = t.copy2d(2, 3, 3, 1).unwrap_err();
        assert!(
            e.to_string().contains("need 7 elements, the source has 6"),
            "{e}"
        );
        // In range: still fine.
        assert_eq!(
            t.copy2d(2, 2, 3, 1).unwrap().to_vec().unwrap(),
            vec![1.0, 2.0, 4.0, 5.0]
        );
    }
}

#[test]
fn broadcast_to_a_shape_too_large_is_an_error() {
    let s = Tensor::<f32>::zeros(&[1, 1], &Device::Cpu).unwrap();
    let e = s.broadcast_as(&[1 << 33, 1 << 31]).unwrap_err();
    assert!(
        matches!(
            e,
            Error::TooLarge {
                op: "broadcast_as",
                ..
            }
        ),
        "{e}"
    );
    let e = s.broadcast_as(&[usize::MAX, 2]).unwrap_err();
    assert!(matches!(e, Error::TooLarge { .. }), "{e}");
}

#[test]
fn narrow_error_prints_without_overflow() {
    let t = Tensor::<f32>::zeros(&[6], &Device::Cpu).unwrap();
    let e = t.narrow(0, usize::MAX, 2).unwrap_err();
    let text = e.to_string(); // used to panic: start + len overflowed
    assert!(
        text.contains(&format!("{} + 2 (overflows)", usize::MAX)),
        "{text}"
    );
    assert_eq!(
        t.narrow(0, 5, 2).unwrap_err().to_string(),
        "narrow: range 5..7 out of bounds for dim 0 of size 6"
    );
}

#[test]
fn reductions_into_a_shape_too_large_say_so() {
    for dev in devices() {
        let z = Tensor::<f32>::zeros(&[0, usize::MAX], &dev).unwrap();
        for e in [
            z.sum(&[0], false).unwrap_err(),
            z.mean(&[0], true).unwrap_err(),
        ] {
            assert!(matches!(e, Error::TooLarge { .. }), "{dev}: {e}");
        }
        // max/argmax over an empty dim have no value: that error comes first.
        let e = z.argmax(&[0], false).unwrap_err();
        assert!(
            matches!(e, Error::EmptyReduction { op: "argmax", .. }),
            "{dev}: {e}"
        );
    }
}

/// Every method that takes a dim takes a negative one (counted from the
/// end, as PyTorch); results are those of the positive dim, values checked
/// against sums written out here.
#[test]
fn negative_dims_name_the_same_dims_as_positive_ones() {
    for dev in devices() {
        // x[i][j][k] = 100 i + 10 j + k, shape [2, 3, 4].
        let data: Vec<f32> = (0..24)
            .map(|n| (100 * (n / 12) + 10 * ((n / 4) % 3) + n % 4) as f32)
            .collect();
        let x = Tensor::from_slice(&data, &[2, 3, 4], &dev).unwrap();
        // Sum over k: 4 * (100 i + 10 j) + 6.
        let want: Vec<f32> = (0..6)
            .map(|r| (4 * (100 * (r / 3) + 10 * (r % 3)) + 6) as f32)
            .collect();
        assert_eq!(x.sum(&[-1], false).unwrap().to_vec().unwrap(), want);
        assert_eq!(x.sum(&[2i64], false).unwrap().to_vec().unwrap(), want);
        assert_eq!(
            x.max(&[-3, -1], true).unwrap().shape(),
            x.max(&[0, 2], true).unwrap().shape()
        );
        assert_eq!(
            x.argmax(&[-2], false).unwrap().to_vec().unwrap(),
            vec![2; 8]
        );
        let t = x.transpose(0, -1).unwrap();
        assert_eq!(t.shape(), &[4, 3, 2]);
        assert_eq!(
            t.to_vec().unwrap(),
            x.transpose(0, 2).unwrap().to_vec().unwrap()
        );
        assert_eq!(x.permute(&[-1, 0, 1]).unwrap().shape(), &[4, 2, 3]);
        let n = x.narrow(-1, 1, 2).unwrap();
        assert_eq!(n.to_vec().unwrap()[..2], [1.0, 2.0]);
        assert_eq!(
            x.softmax_dim(-2).unwrap().to_vec().unwrap(),
            x.softmax_dim(1).unwrap().to_vec().unwrap()
        );
        let dims: Vec<usize> = vec![0, 1];
        assert_eq!(x.sum(&dims, false).unwrap().shape(), &[4]);

        // Out of range either way: the dim as given, the rank and the shape.
        for (e, given) in [
            (x.sum(&[-4], false).unwrap_err(), -4),
            (x.transpose(3, 0).unwrap_err(), 3),
            (x.narrow(-7, 0, 1).unwrap_err(), -7),
            (x.permute(&[0, 1, 5]).unwrap_err(), 5),
            (
                x.log_softmax_dim(usize::MAX).unwrap_err(),
                usize::MAX as i128,
            ),
        ] {
            match e {
                Error::DimOutOfRange { dim, rank: 3, .. } => assert_eq!(dim, given),
                other => panic!("{other}"),
            }
        }
        // -1 and 2 are the same dim.
        assert!(matches!(
            x.sum(&[-1, 2], false),
            Err(Error::DuplicateDim { dim: 2, .. })
        ));
        let d = x.to_dyn();
        assert_eq!(
            d.reduce(ferrocm::Reduce::Sum, &[-1], false)
                .unwrap()
                .shape(),
            &[2, 3]
        );
        assert_eq!(d.transpose(-1, -2).unwrap().shape(), &[2, 4, 3]);
    }
}

/// Found by the fuzzer: arange over a huge range built the whole range on
/// the host before any size check (an abort: "memory allocation of ... bytes
/// failed"). The length is checked first now, then the device allocation.
#[test]
fn arange_over_a_huge_range_is_an_error_not_an_abort() {
    for dev in devices() {
        assert!(matches!(
            Tensor::<u8>::arange(i64::MIN, i64::MAX, &dev),
            Err(Error::TooLarge { op: "arange", .. })
        ));
        // Within the size rules but past a memory limit: out of memory.
        let limited = Device::emulator(WaveSize::Wave32);
        limited.set_memory_limit(Some(1 << 20));
        let e = Tensor::<f32>::arange(0, 1 << 40, &limited).unwrap_err();
        limited.set_memory_limit(None);
        assert!(e.to_string().contains("out of memory"), "{e}");
        assert_eq!(
            Tensor::<i64>::arange(i64::MAX - 2, i64::MAX, &dev)
                .unwrap()
                .to_vec()
                .unwrap(),
            vec![i64::MAX - 2, i64::MAX - 1]
        );
    }
}

/// Found by the fuzzer's slow-unit report: a reduction whose reduced dims
/// all have size 1 (or that reduces no dim) launched one workgroup per
/// element. Each output is its one input, exactly; argmax/argmin are 0; no
/// kernel runs.
#[test]
fn reductions_over_size_one_dims_are_the_input_without_a_launch() {
    for dev in devices() {
        let v = [1.5f32, f32::NAN, -0.0, f32::INFINITY, 7.25, -3.0];
        let x = Tensor::from_slice(&v, &[3, 1, 2], &dev).unwrap();
        for op in [
            ferrocm::Reduce::Sum,
            ferrocm::Reduce::Mean,
            ferrocm::Reduce::Max,
        ] {
            let y = x.reduce(op, &[1], false).unwrap();
            assert_eq!(y.shape(), &[3, 2]);
            let got = y.to_vec().unwrap();
            for (g, w) in got.iter().zip(&v) {
                assert!(g.to_bits() == w.to_bits(), "{op:?} on {dev}: {got:?}");
            }
            assert_eq!(
                x.reduce(op, &[] as &[usize], true).unwrap().shape(),
                &[3, 1, 2]
            );
        }
        assert_eq!(x.argmax(&[-2], true).unwrap().to_vec().unwrap(), vec![0; 6]);
        assert_eq!(
            x.argmin(&[] as &[usize], false).unwrap().shape(),
            &[3, 1, 2]
        );
    }
    // No kernel runs: counted on a device no other test here uses.
    let dev = Device::emulator_with(ferrocm::EmulatorConfig {
        sanitize: false,
        ..ferrocm::EmulatorConfig::new(WaveSize::Wave64)
    });
    let x = Tensor::<f32>::ones(&[4, 1, 3], &dev).unwrap();
    let launches = dev.memory_stats().launches;
    x.sum(&[1], false).unwrap();
    x.max(&[] as &[usize], true).unwrap();
    assert_eq!(dev.memory_stats().launches, launches);
}
