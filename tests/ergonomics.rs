//! The conveniences a Rust tensor user reaches for first: operators, scalar
//! ops, `to_scalar`, `allclose`, `Display`, softmax over any dim. Expected
//! values are written here.

use ferrocm::{Device, Tensor};

mod common;

use common::devices;

#[test]
fn operators_and_scalar_ops() {
    for dev in devices() {
        let a = Tensor::from_slice(&[1.0f32, -2.0, 3.0, 4.0], &[2, 2], &dev).unwrap();
        let b = Tensor::from_slice(&[10.0f32, 20.0], &[2], &dev).unwrap();
        assert_eq!(
            (&a + &b).unwrap().to_vec().unwrap(),
            vec![11.0, 18.0, 13.0, 24.0]
        );
        assert_eq!(
            (&a - &b).unwrap().to_vec().unwrap(),
            vec![-9.0, -22.0, -7.0, -16.0]
        );
        assert_eq!(
            (&a * 2.0).unwrap().to_vec().unwrap(),
            vec![2.0, -4.0, 6.0, 8.0]
        );
        assert_eq!(
            (&a / 2.0).unwrap().to_vec().unwrap(),
            vec![0.5, -1.0, 1.5, 2.0]
        );
        assert_eq!(
            (-&a).unwrap().to_vec().unwrap(),
            vec![-1.0, 2.0, -3.0, -4.0]
        );
        // A Result on the left chains without `?` in between.
        let c = ((&a + &b) * &b).unwrap();
        assert_eq!(c.to_vec().unwrap(), vec![110.0, 360.0, 130.0, 480.0]);
        // Owned operands.
        assert_eq!((a.clone() + b.clone()).unwrap().shape(), &[2, 2]);
        // Inherent methods still win on an owned receiver.
        let owned = Tensor::from_slice(&[1.0f32], &[1], &dev).unwrap();
        assert_eq!(owned.add(&b).unwrap().to_vec().unwrap(), vec![11.0, 21.0]);
        assert_eq!(owned.to_vec().unwrap(), vec![1.0]);
        // Errors stay errors.
        let bad = Tensor::<f32>::zeros(&[3], &dev).unwrap();
        assert!((&a + &bad).is_err());
        // Integers: exact, wrapping.
        let u = Tensor::from_slice(&[0u32, 5, u32::MAX], &[3], &dev).unwrap();
        assert_eq!(u.add_scalar(1).unwrap().to_vec().unwrap(), vec![1, 6, 0]);
        assert_eq!(
            u.mul_scalar(3).unwrap().to_vec().unwrap(),
            vec![0, 15, u32::MAX.wrapping_mul(3)]
        );
        assert_eq!(
            u.maximum_scalar(4).unwrap().to_vec().unwrap(),
            vec![4, 5, u32::MAX]
        );
        assert_eq!(
            u.minimum_scalar(4).unwrap().to_vec().unwrap(),
            vec![0, 4, 4]
        );
        assert_eq!((-&u).unwrap().to_vec().unwrap(), vec![0, u32::MAX - 4, 1]);
        let i = Tensor::from_slice(&[7i64, -7], &[2], &dev).unwrap();
        assert_eq!(i.div_scalar(2).unwrap().to_vec().unwrap(), vec![3, -3]);
        assert_eq!(i.sub_scalar(10).unwrap().to_vec().unwrap(), vec![-3, -17]);
        // Comparisons with a scalar, NaN unequal to everything.
        let f = Tensor::from_slice(&[1.0f32, 2.0, f32::NAN, -0.0], &[2, 2], &dev).unwrap();
        let cmp = |t: Result<Tensor<u8>, ferrocm::Error>| t.unwrap().to_vec().unwrap();
        assert_eq!(cmp(f.eq_scalar(2.0)), vec![0, 1, 0, 0]);
        assert_eq!(cmp(f.ne_scalar(2.0)), vec![1, 0, 1, 1]);
        assert_eq!(cmp(f.lt_scalar(2.0)), vec![1, 0, 0, 1]);
        assert_eq!(cmp(f.le_scalar(2.0)), vec![1, 1, 0, 1]);
        assert_eq!(cmp(f.gt_scalar(1.0)), vec![0, 1, 0, 0]);
        assert_eq!(cmp(f.ge_scalar(0.0)), vec![1, 1, 0, 1]); // -0 >= 0
        assert_eq!(cmp(u.gt_scalar(5)), vec![0, 0, 1]);
        assert_eq!(cmp(i.le_scalar(-7)), vec![0, 1]);
    }
}

#[test]
fn to_scalar_and_allclose() {
    for dev in devices() {
        let x = Tensor::from_slice(&[1.5f32, 2.5], &[2], &dev).unwrap();
        assert_eq!(x.sum(&[0], false).unwrap().to_scalar().unwrap(), 4.0);
        assert_eq!(x.narrow(0, 1, 1).unwrap().to_scalar().unwrap(), 2.5);
        assert!(x.to_scalar().is_err());
        let y = Tensor::from_slice(&[1.5f32, 2.5 + 1e-6], &[2], &dev).unwrap();
        assert!(x.allclose(&y, 1e-5, 0.0).unwrap());
        assert!(!x.allclose(&y, 1e-8, 0.0).unwrap());
        let nan = Tensor::from_slice(&[f32::NAN, 2.5], &[2], &dev).unwrap();
        assert!(!nan.allclose(&nan, 1.0, 1.0).unwrap(), "NaN is never close");
        let inf = Tensor::from_slice(&[f32::INFINITY], &[1], &dev).unwrap();
        assert!(inf.allclose(&inf, 0.0, 0.0).unwrap());
        // Broadcast, and shapes that do not.
        let one = Tensor::from_slice(&[1.5f32], &[1], &dev).unwrap();
        assert!(!x.allclose(&one, 0.0, 0.5).unwrap());
        assert!(x.allclose(&one, 0.0, 1.0).unwrap());
        assert!(
            x.allclose(&Tensor::zeros(&[3], &dev).unwrap(), 0.0, 0.0)
                .is_err()
        );
    }
}

#[test]
fn display_prints_values_like_pytorch() {
    let dev = Device::Cpu;
    let s = Tensor::from_slice(&[3.5f32], &[], &dev).unwrap();
    assert_eq!(s.to_string(), "tensor(3.5000, dtype=f32, device=cpu)");
    let v = Tensor::from_slice(&[1u8, 20, 3], &[3], &dev).unwrap();
    assert_eq!(v.to_string(), "tensor([ 1, 20,  3], dtype=u8, device=cpu)");
    let m = Tensor::from_slice(&[1e-6f32, 1.0, 1e9, f32::NAN], &[2, 2], &dev).unwrap();
    assert_eq!(
        m.to_string(),
        "tensor([[1.0000e-6,    1.0000],\n        [ 1.0000e9,       NaN]], dtype=f32, device=cpu)"
    );
    // Over 1000 elements: summarised.
    let big = Tensor::<i64>::arange(0, 2000, &dev)
        .unwrap()
        .reshape(&[2, 1000])
        .unwrap();
    let text = big.to_string();
    assert!(
        text.starts_with("tensor([[   0,    1,    2, ...,  997,  998,  999],\n        [1000,"),
        "{text}"
    );
    assert!(text.ends_with("1999]], dtype=i64, device=cpu)"), "{text}");
    // Empty, with a dim too large to lay out (found by the fuzzer: it
    // panicked allocating one slot per index of the huge dim).
    let empty = Tensor::<f32>::zeros(&[1 << 60, 0], &dev).unwrap();
    assert_eq!(
        empty.to_string(),
        "tensor([], shape=[1152921504606846976, 0], dtype=f32, device=cpu)"
    );
    let t3 = Tensor::<u32>::arange(0, 8, &dev)
        .unwrap()
        .reshape(&[2, 2, 2])
        .unwrap();
    assert_eq!(
        t3.to_string(),
        "tensor([[[0, 1],\n         [2, 3]],\n\n        [[4, 5],\n         [6, 7]]], dtype=u32, device=cpu)"
    );
}

#[test]
fn softmax_over_any_dim() {
    for dev in devices() {
        let v: Vec<f32> = (0..24).map(|i| (i as f32 * 0.37).sin() * 3.0).collect();
        let x = Tensor::from_slice(&v, &[2, 3, 4], &dev).unwrap();
        for dim in [0isize, 1, 2, -1, -2, -3] {
            let d = if dim < 0 {
                (dim + 3) as usize
            } else {
                dim as usize
            };
            let got = x.softmax_dim(dim).unwrap().to_vec().unwrap();
            let lgot = x.log_softmax_dim(dim).unwrap().to_vec().unwrap();
            let shape = [2usize, 3, 4];
            let strides = [12usize, 4, 1];
            for i in 0..24 {
                // Reference in f64: the slice through element i along d.
                let base = i - (i / strides[d] % shape[d]) * strides[d];
                let xs: Vec<f64> = (0..shape[d])
                    .map(|k| v[base + k * strides[d]] as f64)
                    .collect();
                let m = xs.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let s: f64 = xs.iter().map(|x| (x - m).exp()).sum();
                let want = (v[i] as f64 - m).exp() / s;
                assert!(
                    (got[i] as f64 - want).abs() <= 1e-6,
                    "{dev} dim {dim} [{i}]: {} vs {want}",
                    got[i]
                );
                let lwant = v[i] as f64 - m - s.ln();
                assert!(
                    (lgot[i] as f64 - lwant).abs() <= 1e-5,
                    "{dev} dim {dim} [{i}]"
                );
            }
        }
        assert!(x.softmax_dim(3).is_err());
        assert!(x.softmax_dim(-4).is_err());
        let s = Tensor::from_slice(&[2.0f32], &[], &dev).unwrap();
        assert_eq!(s.softmax_dim(-1).unwrap().to_vec().unwrap(), vec![1.0]);
    }
}

/// `reshape` of a strided view is a view when the dims it merges or splits
/// are contiguous among themselves (as `torch.view`), else a copy; the
/// values are those of the contiguous copy either way.
#[test]
fn reshape_keeps_views_where_strides_allow() {
    for dev in devices() {
        let data: Vec<f32> = (0..24).map(|v| v as f32).collect();
        let t = Tensor::from_slice(&data, &[2, 3, 4], &dev).unwrap();
        let cases: Vec<(Tensor<f32>, Vec<usize>, bool)> = vec![
            // A column: [3, 1] with stride 4 -> [3] stays strided.
            (
                t.narrow(0, 1, 1)
                    .unwrap()
                    .narrow(2, 2, 1)
                    .unwrap()
                    .reshape(&[3, 1])
                    .unwrap(),
                vec![3],
                true,
            ),
            // Splitting and merging inside the contiguous last two dims of a narrowed view.
            (
                t.narrow(2, 0, 4).unwrap().narrow(0, 1, 1).unwrap(),
                vec![12],
                false,
            ),
            (t.narrow(1, 0, 2).unwrap(), vec![2, 8], true),
            (t.narrow(1, 0, 2).unwrap(), vec![2, 2, 2, 2], true),
            (t.narrow(1, 0, 2).unwrap(), vec![1, 2, 1, 8, 1], true),
            // Transposed: the swapped dims cannot merge (a copy), a split of one can.
            (t.transpose(0, 2).unwrap(), vec![4, 6], false),
            (t.transpose(0, 2).unwrap(), vec![2, 2, 3, 2], true),
        ];
        for (view, shape, stays_view) in cases {
            let want = view.contiguous().unwrap().to_vec().unwrap();
            let r = view.reshape(&shape).unwrap();
            assert_eq!(r.shape(), &shape[..]);
            assert_eq!(
                r.to_vec().unwrap(),
                want,
                "{dev} {:?} -> {shape:?}",
                view.shape()
            );
            if stays_view {
                assert!(
                    !r.is_contiguous(),
                    "{dev} {:?} -> {shape:?} copied",
                    view.shape()
                );
            }
        }
        // Broadcast views reshape too.
        let b = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[1, 3], &dev)
            .unwrap()
            .broadcast_as(&[4, 3])
            .unwrap();
        let r = b.reshape(&[2, 2, 3]).unwrap();
        assert_eq!(r.to_vec().unwrap(), [1.0, 2.0, 3.0].repeat(4));
        assert_eq!(
            b.reshape(&[12]).unwrap().to_vec().unwrap(),
            [1.0, 2.0, 3.0].repeat(4)
        );
    }
}
