//! Integer arithmetic on every device (the Cpu, the emulator at both wave
//! sizes, any GPU that answers): overflow wraps as Rust's `wrapping_*` ops,
//! and an integer division by zero is an error naming the op — from the op
//! itself on the Cpu, from the next wait (`to_vec`, `synchronize`) on a device
//! that runs kernels, which never waits after each op. Expected values are
//! written out here (exact integers).

mod common;

use common::{devices, one_at_a_time};
use ferrocm::host::Error as HostError;
use ferrocm::ops::Error;
use ferrocm::{Device, Tensor};

/// The division-by-zero fault of `op`, at one of `indices`.
fn assert_div_fault(e: Error, dev: &Device, indices: &[u64]) {
    match e {
        Error::Host(HostError::Fault {
            op,
            what,
            index,
            device,
        }) => {
            assert_eq!(
                (op.as_str(), what.as_str()),
                ("div", "integer division by zero")
            );
            assert!(indices.contains(&index), "index {index} not in {indices:?}");
            assert_eq!(device, dev.to_string());
        }
        other => panic!("{dev}: expected a division-by-zero fault, got {other}"),
    }
}

macro_rules! division_by_zero {
    ($name:ident, $t:ty) => {
        #[test]
        fn $name() {
            let _turn = one_at_a_time();
            for dev in devices() {
                let a = Tensor::<$t>::from_slice(&[7, 8, 9, 10], &[4], &dev).unwrap();
                let b = Tensor::<$t>::from_slice(&[2, 0, 3, 0], &[4], &dev).unwrap();
                let ok = Tensor::<$t>::from_slice(&[2, 1, 3, 5], &[4], &dev).unwrap();
                // Without a zero divisor: truncating division, exactly.
                assert_eq!(a.div(&ok).unwrap().to_vec().unwrap(), vec![3, 8, 3, 2]);
                if dev == Device::Cpu {
                    // The Cpu runs the op at once: the op is the error.
                    assert_div_fault(a.div(&b).unwrap_err(), &dev, &[1]);
                    assert_div_fault(a.div_scalar(0).unwrap_err(), &dev, &[0]);
                    continue;
                }
                // A kernel device queues the op; the next wait reports it.
                let q = a.div(&b).unwrap();
                assert_div_fault(q.to_vec().unwrap_err(), &dev, &[1, 3]);
                // Reported once: later waits are clean, and the elements at
                // fault hold 0.
                assert_eq!(q.to_vec().unwrap(), vec![3, 0, 3, 0]);
                dev.synchronize().unwrap();
                // A broadcast zero divisor, found by synchronize.
                let _q = a.div_scalar(0).unwrap();
                assert_div_fault(dev.synchronize().unwrap_err().into(), &dev, &[0, 1, 2, 3]);
                // An unrelated download also waits, so it reports the fault.
                let _q = a.div(&b).unwrap();
                let other = a.add(&ok).unwrap();
                assert_div_fault(other.to_vec().unwrap_err(), &dev, &[1, 3]);
                assert_eq!(other.to_vec().unwrap(), vec![9, 9, 12, 15]);
                // Strided divisors: a transposed view with zeros on one row.
                let m = Tensor::<$t>::from_slice(&[1, 0, 2, 0], &[2, 2], &dev)
                    .unwrap()
                    .transpose(0, 1)
                    .unwrap();
                let q = Tensor::<$t>::ones(&[2, 2], &dev).unwrap().div(&m).unwrap();
                assert_div_fault(q.to_vec().unwrap_err(), &dev, &[2, 3]);
            }
        }
    };
}

division_by_zero!(u8_division_by_zero_is_an_error_naming_the_op, u8);
division_by_zero!(u32_division_by_zero_is_an_error_naming_the_op, u32);
division_by_zero!(i64_division_by_zero_is_an_error_naming_the_op, i64);

/// Floats divide by zero as IEEE 754 says: no error.
#[test]
fn float_division_by_zero_is_inf_or_nan() {
    let _turn = one_at_a_time();
    for dev in devices() {
        let a = Tensor::<f32>::from_slice(&[1.0, -1.0, 0.0], &[3], &dev).unwrap();
        let q = a.div_scalar(0.0).unwrap().to_vec().unwrap();
        assert_eq!((q[0], q[1]), (f32::INFINITY, f32::NEG_INFINITY), "{dev}");
        assert!(q[2].is_nan(), "{dev}");
        dev.synchronize().unwrap();
    }
}

/// Overflow wraps (two's complement), as `wrapping_add/sub/mul/div`.
#[test]
fn integer_overflow_wraps_on_every_device() {
    let _turn = one_at_a_time();
    for dev in devices() {
        let a = Tensor::<u8>::from_slice(&[200, 3, 16, 255], &[4], &dev).unwrap();
        let b = Tensor::<u8>::from_slice(&[100, 5, 17, 255], &[4], &dev).unwrap();
        assert_eq!(
            a.add(&b).unwrap().to_vec().unwrap(),
            vec![44, 8, 33, 254],
            "{dev}"
        );
        assert_eq!(
            a.sub(&b).unwrap().to_vec().unwrap(),
            vec![100, 254, 255, 0],
            "{dev}"
        );
        assert_eq!(
            a.mul(&b).unwrap().to_vec().unwrap(),
            vec![32, 15, 16, 1],
            "{dev}"
        );

        let u = Tensor::<u32>::from_slice(&[0, u32::MAX, 1 << 31], &[3], &dev).unwrap();
        assert_eq!(
            u.sub_scalar(1).unwrap().to_vec().unwrap(),
            vec![u32::MAX, u32::MAX - 1, (1 << 31) - 1],
            "{dev}"
        );
        assert_eq!(
            u.mul_scalar(2).unwrap().to_vec().unwrap(),
            vec![0, u32::MAX - 1, 0],
            "{dev}"
        );

        let i = Tensor::<i64>::from_slice(&[i64::MIN, i64::MAX, -7, 7], &[4], &dev).unwrap();
        let m1 = Tensor::<i64>::from_slice(&[-1, 1, 2, -2], &[4], &dev).unwrap();
        // MIN / -1 wraps to MIN; division truncates toward zero.
        assert_eq!(
            i.div(&m1).unwrap().to_vec().unwrap(),
            vec![i64::MIN, i64::MAX, -3, -3],
            "{dev}"
        );
        assert_eq!(
            i.add_scalar(1).unwrap().to_vec().unwrap(),
            vec![i64::MIN + 1, i64::MIN, -6, 8],
            "{dev}"
        );
        assert_eq!(
            i.mul(&m1).unwrap().to_vec().unwrap(),
            vec![i64::MIN, i64::MAX, -14, -14],
            "{dev}"
        );
        // Nothing here faulted.
        dev.synchronize().unwrap();
    }
}
