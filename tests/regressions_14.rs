//! Bad inputs a new user tried (issue 14) that panicked or misreported: each
//! is a typed error naming the op and the values now, on the Cpu and the
//! emulator.

use ferrocm::WaveSize;
use ferrocm::ops::Error;
use ferrocm::{Device, Tensor};

fn devices() -> Vec<Device> {
    vec![
        Device::Cpu,
        Device::emulator(WaveSize::Wave32),
        Device::emulator(WaveSize::Wave64),
    ]
}

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
