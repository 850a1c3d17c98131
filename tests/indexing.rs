//! index_select, embedding, gather, slice_set, sort, argsort and topk on
//! every device (Cpu, emulator wave 32 and 64, a GPU when one answers)
//! against references written here: plain loops over f64 values and a
//! stable `sort_by` with an explicit NaN-last comparator. None of them
//! shares code with the op library's Cpu path or kernels.

mod common;

use common::devices;
use ferrocm::host::Error as HostError;
use ferrocm::{Device, Error, IdType, Tensor, WithDType, bf16, f16};
use std::cmp::Ordering;
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

/// A device's fault words are the device's (an emulator's are shared by
/// every test of this binary): tests that make ops fault run alone.
static FAULTS: RwLock<()> = RwLock::new(());

fn shared() -> RwLockReadGuard<'static, ()> {
    FAULTS.read().unwrap_or_else(|e| e.into_inner())
}

fn alone() -> RwLockWriteGuard<'static, ()> {
    FAULTS.write().unwrap_or_else(|e| e.into_inner())
}

/// Values exact in every dtype (integers below 200).
fn values<T: WithDType>(n: usize, seed: u64) -> Vec<T> {
    (0..n)
        .map(|i| T::from_f64(((i as u64 * 37 + seed * 11) % 200) as f64))
        .collect()
}

fn as_f64<T: WithDType>(v: &[T]) -> Vec<f64> {
    v.iter().map(|x| x.to_f64()).collect()
}

/// Row-major strides of `shape`.
fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

/// Coordinates of flat index `i` in `shape`.
fn coords(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut c = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        c[d] = i % shape[d];
        i /= shape[d];
    }
    c
}

/// `$case::<T, I>($dev)` for every value dtype and id type.
macro_rules! every_pair {
    ($case:ident, $dev:expr) => {
        every_pair!(@ids $case, $dev, f32, f16, bf16, u8, u32, i64)
    };
    (@ids $case:ident, $dev:expr, $($t:ty),*) => {$(
        $case::<$t, u8>($dev);
        $case::<$t, u32>($dev);
        $case::<$t, i64>($dev);
    )*};
}

fn index_select_case<T: WithDType, I: IdType>(dev: &Device) {
    let shape = [4usize, 5, 3];
    let data = values::<T>(60, 1);
    let src = Tensor::from_slice(&data, &shape, dev).unwrap();
    for dim in 0..3 {
        let size = shape[dim];
        // Repeats, the last id, and a reversed order.
        let ids: Vec<usize> = vec![size - 1, 0, size - 1, 1 % size, 0];
        let id_t = Tensor::from_slice(
            &ids.iter()
                .map(|&i| I::from_f64(i as f64))
                .collect::<Vec<_>>(),
            &[ids.len()],
            dev,
        )
        .unwrap();
        let got = src.index_select(dim, &id_t).unwrap();
        let mut out_shape = shape.to_vec();
        out_shape[dim] = ids.len();
        assert_eq!(got.shape(), &out_shape[..]);
        let got = as_f64(&got.to_vec().unwrap());
        let st = strides(&shape);
        for (e, g) in got.iter().enumerate() {
            let mut c = coords(e, &out_shape);
            c[dim] = ids[c[dim]];
            let want = data[c.iter().zip(&st).map(|(a, b)| a * b).sum::<usize>()].to_f64();
            assert_eq!(*g, want, "{dev} {} dim {dim} at {e}", T::DTYPE);
        }
    }
    // A transposed source and an empty id list.
    let t = src.transpose(0, 2).unwrap(); // [3, 5, 4]
    let id_t = Tensor::from_slice(&[I::from_f64(2.0), I::from_f64(0.0)], &[2], dev).unwrap();
    let got = as_f64(&t.index_select(-1, &id_t).unwrap().to_vec().unwrap());
    for (e, g) in got.iter().enumerate() {
        let c = coords(e, &[3, 5, 2]);
        let k = [2, 0][c[2]];
        assert_eq!(*g, data[k * 15 + c[1] * 3 + c[0]].to_f64());
    }
    let none = Tensor::<I>::zeros(&[0], dev).unwrap();
    let e = src.index_select(1, &none).unwrap();
    assert_eq!((e.shape(), e.to_vec().unwrap().len()), (&[4, 0, 3][..], 0));
}

#[test]
fn index_select_every_dtype_and_id_type() {
    let _turn = shared();
    for dev in devices() {
        every_pair!(index_select_case, &dev);
    }
}

#[test]
fn embedding_rows_of_every_width() {
    let _turn = shared();
    for dev in devices() {
        // Hidden sizes of 1 and 3 elements, 16-byte rows (f32 x 4, bf16 x 8,
        // the vector path), and a row longer than a workgroup.
        for hidden in [1usize, 3, 4, 8, 520] {
            let vocab = 11;
            let data = values::<bf16>(vocab * hidden, 2);
            let table = Tensor::from_slice(&data, &[vocab, hidden], &dev).unwrap();
            let ids = [10u32, 0, 3, 3, 7, 10];
            let id_t = Tensor::from_slice(&ids, &[2, 3], &dev).unwrap();
            let e = table.embedding(&id_t).unwrap();
            assert_eq!(e.shape(), &[2, 3, hidden]);
            let got = e.to_vec().unwrap();
            for (p, &id) in ids.iter().enumerate() {
                assert_eq!(
                    &got[p * hidden..(p + 1) * hidden],
                    &data[id as usize * hidden..(id as usize + 1) * hidden],
                    "{dev} hidden {hidden}"
                );
            }
            // Transposed (strided) ids give the same rows in their logical order.
            let idt = Tensor::from_slice(&ids, &[3, 2], &dev)
                .unwrap()
                .transpose(0, 1)
                .unwrap();
            let got = table.embedding(&idt).unwrap().to_vec().unwrap();
            let order = [10u32, 3, 7, 0, 3, 10];
            for (p, &id) in order.iter().enumerate() {
                assert_eq!(
                    got[p * hidden],
                    data[id as usize * hidden],
                    "{dev} strided ids"
                );
            }
            let f = Tensor::from_slice(&values::<f32>(vocab * hidden, 3), &[vocab, hidden], &dev)
                .unwrap();
            let got = f.embedding(&id_t.to_dtype::<i64>().unwrap()).unwrap();
            let want = values::<f32>(vocab * hidden, 3);
            assert_eq!(got.to_vec().unwrap()[hidden..2 * hidden], want[..hidden]);
        }
    }
}

fn embedding_case<T: WithDType, I: IdType>(dev: &Device) {
    let (vocab, hidden) = (7usize, 5usize);
    let data = values::<T>(vocab * hidden, 4);
    let table = Tensor::from_slice(&data, &[vocab, hidden], dev).unwrap();
    let ids = [6usize, 0, 3, 3, 6, 1];
    let as_ids = |v: &[usize]| v.iter().map(|&i| I::from_f64(i as f64)).collect::<Vec<I>>();
    let want = |order: &[usize]| -> Vec<f64> {
        order
            .iter()
            .flat_map(|&id| as_f64(&data[id * hidden..(id + 1) * hidden]))
            .collect()
    };
    let id_t = Tensor::from_slice(&as_ids(&ids), &[2, 3], dev).unwrap();
    let e = table.embedding(&id_t).unwrap();
    assert_eq!(e.shape(), &[2, 3, hidden]);
    assert_eq!(
        as_f64(&e.to_vec().unwrap()),
        want(&ids),
        "{dev} {} ids {}",
        T::DTYPE,
        I::DTYPE
    );
    // Transposed ids: rows in the view's logical order.
    let idt = Tensor::from_slice(&as_ids(&ids), &[3, 2], dev)
        .unwrap()
        .transpose(0, 1)
        .unwrap();
    assert!(!idt.is_contiguous());
    let got = table.embedding(&idt).unwrap();
    assert_eq!(got.shape(), &[2, 3, hidden]);
    assert_eq!(
        as_f64(&got.to_vec().unwrap()),
        want(&[6, 3, 6, 0, 3, 1]),
        "{dev} strided ids"
    );
    // No ids: an empty result of the right shape.
    for shape in [&[0usize][..], &[2, 0]] {
        let none = Tensor::<I>::zeros(shape, dev).unwrap();
        let e = table.embedding(&none).unwrap();
        let mut want_shape = shape.to_vec();
        want_shape.push(hidden);
        assert_eq!((e.shape(), e.to_vec().unwrap().len()), (&want_shape[..], 0));
    }
}

#[test]
fn embedding_every_dtype_and_id_type() {
    let _turn = shared();
    for dev in devices() {
        every_pair!(embedding_case, &dev);
    }
}

/// The error `op` must give: the id, its position, the dim's size.
fn assert_id_error(r: Result<Vec<f32>, Error>, op: &str, id: i64, position: u64, size: u64) {
    match r {
        Err(Error::Host(HostError::IdOutOfRange {
            op: o,
            id: i,
            position: p,
            size: s,
            ..
        })) => assert_eq!((o.as_str(), i, p, s), (op, id, position, size)),
        other => panic!("{op}: expected IdOutOfRange, got {other:?}"),
    }
}

#[test]
fn bad_ids_are_errors_naming_op_id_position_and_size() {
    let _turn = alone();
    for dev in devices() {
        let t = Tensor::from_slice(&values::<f32>(12, 1), &[4, 3], &dev).unwrap();
        let past = Tensor::from_slice(&[0u32, 3, 4, 1], &[4], &dev).unwrap();
        assert_id_error(
            t.index_select(0, &past).and_then(|r| r.to_vec()),
            "index_select",
            4,
            2,
            4,
        );
        let neg = Tensor::from_slice(&[1i64, 2, -1], &[3], &dev).unwrap();
        assert_id_error(
            t.index_select(1, &neg).and_then(|r| r.to_vec()),
            "index_select",
            -1,
            2,
            3,
        );
        let ids = Tensor::from_slice(&[0u8, 200], &[1, 2], &dev).unwrap();
        assert_id_error(
            t.embedding(&ids).and_then(|r| r.to_vec()),
            "embedding",
            200,
            1,
            4,
        );
        let g = Tensor::from_slice(&[0i64, 1, 2, 3, 2, 1], &[2, 3], &dev).unwrap();
        assert_id_error(t.gather(1, &g).and_then(|r| r.to_vec()), "gather", 3, 3, 3);
        // The device is usable afterwards, and the error was reported once.
        let ok = Tensor::from_slice(&[3u32], &[1], &dev).unwrap();
        assert_eq!(t.index_select(0, &ok).unwrap().to_vec().unwrap().len(), 3);
    }
}

fn gather_case<T: WithDType, I: IdType>(dev: &Device) {
    let shape = [3usize, 4, 5];
    let data = values::<T>(60, 4);
    let st = strides(&shape);
    let src = Tensor::from_slice(&data, &shape, dev).unwrap();
    for dim in 0..3 {
        // ids smaller than the source in the other dims, with repeats.
        let mut ishape = [2usize, 3, 4];
        ishape[dim] = 6;
        let n: usize = ishape.iter().product();
        let ids: Vec<usize> = (0..n).map(|i| (i * 7 + 1) % shape[dim]).collect();
        let id_t = Tensor::from_slice(
            &ids.iter()
                .map(|&i| I::from_f64(i as f64))
                .collect::<Vec<_>>(),
            &ishape,
            dev,
        )
        .unwrap();
        let got = as_f64(&src.gather(dim, &id_t).unwrap().to_vec().unwrap());
        for (e, g) in got.iter().enumerate() {
            let mut c = coords(e, &ishape);
            c[dim] = ids[e];
            let want = data[c.iter().zip(&st).map(|(a, b)| a * b).sum::<usize>()].to_f64();
            assert_eq!(
                *g,
                want,
                "{dev} {} {} gather dim {dim} at {e}",
                T::DTYPE,
                I::DTYPE
            );
        }
    }
    // A transposed source and broadcast ids.
    let t = src.transpose(0, 2).unwrap(); // [5, 4, 3]
    let ids = Tensor::from_slice(&[2i64, 0, 1], &[1, 1, 3], &dev.clone())
        .unwrap()
        .broadcast_as(&[5, 2, 3])
        .unwrap();
    let got = as_f64(&t.gather(1, &ids).unwrap().to_vec().unwrap());
    for (e, g) in got.iter().enumerate() {
        let c = coords(e, &[5, 2, 3]);
        let j = [2, 0, 1][c[2]];
        assert_eq!(*g, data[c[2] * 20 + j * 5 + c[0]].to_f64());
    }
}

#[test]
fn gather_every_dtype_along_every_dim() {
    let _turn = shared();
    for dev in devices() {
        every_pair!(gather_case, &dev);
    }
}

#[test]
fn shape_errors_are_typed() {
    let _turn = shared();
    let dev = Device::Cpu;
    let t = Tensor::<f32>::zeros(&[2, 3], &dev).unwrap();
    let ids2 = Tensor::<u32>::zeros(&[1, 1], &dev).unwrap();
    assert!(matches!(
        t.index_select(0, &ids2),
        Err(Error::BadParameter {
            op: "index_select",
            ..
        })
    ));
    assert!(matches!(
        t.index_select(2, &Tensor::<u32>::zeros(&[1], &dev).unwrap()),
        Err(Error::DimOutOfRange { .. })
    ));
    assert!(matches!(
        Tensor::<f32>::zeros(&[2], &dev).unwrap().embedding(&ids2),
        Err(Error::BadParameter {
            op: "embedding",
            ..
        })
    ));
    // ids larger than the source in a dim other than `dim`.
    let big = Tensor::<u32>::zeros(&[3, 1], &dev).unwrap();
    assert!(matches!(
        t.gather(1, &big),
        Err(Error::ShapeMismatch { .. })
    ));
    let emu = Device::emulator(ferrocm::WaveSize::Wave32);
    let other = Tensor::<u32>::zeros(&[1], &emu).unwrap();
    assert!(matches!(
        t.index_select(0, &other),
        Err(Error::DeviceMismatch { .. })
    ));
    let mut c = Tensor::<f32>::zeros(&[2, 4], &dev).unwrap();
    let s = Tensor::<f32>::zeros(&[2, 2], &dev).unwrap();
    assert!(matches!(
        c.slice_set(&s, 1, 3),
        Err(Error::NarrowOutOfRange { .. })
    ));
    assert!(matches!(
        c.slice_set(&s, 1, usize::MAX),
        Err(Error::NarrowOutOfRange { .. })
    ));
    assert!(matches!(
        c.slice_set(&s, 0, 0),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(matches!(
        c.slice_set(&s, 2, 0),
        Err(Error::DimOutOfRange { .. })
    ));
    assert!(matches!(t.topk(4, true), Err(Error::BadParameter { .. })));
}

#[test]
fn slice_set_writes_in_place_and_copies_on_write() {
    let _turn = shared();
    for dev in devices() {
        // A KV cache [b, h, max_t, d] and two appends.
        let (b, h, max_t, d) = (2, 3, 6, 4);
        let mut cache = Tensor::<bf16>::zeros(&[b, h, max_t, d], &dev).unwrap();
        let mut want = vec![0.0f64; b * h * max_t * d];
        let mut pos = 0;
        for (t, seed) in [(2usize, 1u64), (1, 2)] {
            let kv_data = values::<bf16>(b * h * t * d, seed);
            let kv = Tensor::from_slice(&kv_data, &[b, h, t, d], &dev).unwrap();
            let storage = std::sync::Arc::as_ptr(cache.shared_storage());
            cache.slice_set(&kv, 2, pos).unwrap();
            // Nothing else held the cache's storage: written in place.
            assert_eq!(std::sync::Arc::as_ptr(cache.shared_storage()), storage);
            for (e, x) in kv_data.iter().enumerate() {
                let c = coords(e, &[b, h, t, d]);
                want[((c[0] * h + c[1]) * max_t + pos + c[2]) * d + c[3]] = x.to_f64();
            }
            pos += t;
        }
        assert_eq!(as_f64(&cache.to_vec().unwrap()), want, "{dev}");
        // A view held elsewhere: the write goes to a copy, the view is unchanged.
        let view = cache.narrow(2, 0, 3).unwrap();
        let before = view.to_vec().unwrap();
        let kv = Tensor::<bf16>::ones(&[b, h, 1, d], &dev).unwrap();
        cache.slice_set(&kv, 2, 0).unwrap();
        assert_eq!(view.to_vec().unwrap(), before);
        assert_eq!(
            cache.narrow(2, 0, 1).unwrap().to_vec().unwrap(),
            vec![bf16::ONE; b * h * d]
        );
        // A transposed source into a narrowed (strided) destination.
        let mut m = Tensor::<i64>::zeros(&[3, 5], &dev)
            .unwrap()
            .narrow(1, 1, 4)
            .unwrap();
        let src = Tensor::from_slice(&[1i64, 2, 3, 4, 5, 6], &[2, 3], &dev)
            .unwrap()
            .transpose(0, 1)
            .unwrap();
        m.slice_set(&src, 1, 1).unwrap();
        assert_eq!(
            m.to_vec().unwrap(),
            vec![0, 1, 4, 0, 0, 2, 5, 0, 0, 3, 6, 0]
        );
        // A broadcast destination becomes its own contiguous copy.
        let mut bc = Tensor::from_slice(&[7u8, 8], &[1, 2], &dev)
            .unwrap()
            .broadcast_as(&[3, 2])
            .unwrap();
        bc.slice_set(&Tensor::from_slice(&[1u8, 2], &[1, 2], &dev).unwrap(), 0, 1)
            .unwrap();
        assert_eq!(bc.to_vec().unwrap(), vec![7, 8, 1, 2, 7, 8]);
    }
}

/// The stable order of `v` as PyTorch ranks it: NaN above every number
/// (last ascending, first descending), -0 == +0.
fn ref_order(v: &[f64], desc: bool) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..v.len()).collect();
    idx.sort_by(|&a, &b| {
        let (x, y) = (v[a], v[b]);
        let nan_first = if desc {
            Ordering::Less
        } else {
            Ordering::Greater
        };
        match (x.is_nan(), y.is_nan()) {
            (true, true) => Ordering::Equal,
            (true, false) => nan_first,
            (false, true) => nan_first.reverse(),
            _ if desc => y.partial_cmp(&x).unwrap(),
            _ => x.partial_cmp(&y).unwrap(),
        }
    });
    idx
}

/// Values with ties, and for floats NaN, ±inf, ±0 and subnormals.
fn sort_input<T: WithDType>(n: usize, seed: u64) -> Vec<T> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|i| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let special = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0, 0.0, 1e-40];
            if T::DTYPE.is_float() && s.is_multiple_of(13) {
                T::from_f64(special[(s / 13 % 6) as usize])
            } else if T::DTYPE.is_float() {
                T::from_f64((s % 2001) as f64 / 8.0 - 125.0)
            } else {
                T::from_f64(((s >> 3) % 250) as f64 + if i % 5 == 0 { 0.0 } else { 1.0 })
            }
        })
        .collect()
}

fn check_sorted<T: WithDType>(dev: &Device, rows: usize, cols: usize, desc: bool) {
    let data = sort_input::<T>(rows * cols, (rows * 31 + cols) as u64);
    let x = Tensor::from_slice(&data, &[rows, cols], dev).unwrap();
    let (v, i) = x.sort(desc).unwrap();
    let (v, i) = (v.to_vec().unwrap(), i.to_vec().unwrap());
    for r in 0..rows {
        let row = as_f64(&data[r * cols..(r + 1) * cols]);
        let want = ref_order(&row, desc);
        for c in 0..cols {
            let at = r * cols + c;
            assert_eq!(
                i[at] as usize,
                want[c],
                "{dev} {} {rows}x{cols} desc={desc} row {r} col {c}",
                T::DTYPE
            );
            // The value is the input's element, bit for bit (-0 stays -0).
            assert_eq!(
                bytemuck::bytes_of(&v[at]),
                bytemuck::bytes_of(&data[r * cols + want[c]])
            );
        }
    }
}

#[test]
fn sort_rows_of_every_length_class() {
    let _turn = shared();
    for dev in devices() {
        for cols in [1usize, 2, 3, 1023, 1025, 4097] {
            for desc in [false, true] {
                check_sorted::<f32>(&dev, 3, cols, desc);
                check_sorted::<i64>(&dev, 2, cols, desc);
            }
            // Every other dtype at every length, one order each.
            let desc = cols % 2 == 1;
            check_sorted::<f16>(&dev, 2, cols, desc);
            check_sorted::<bf16>(&dev, 2, cols, !desc);
            check_sorted::<u8>(&dev, 2, cols, desc);
            check_sorted::<u32>(&dev, 2, cols, !desc);
        }
        for desc in [false, true] {
            check_sorted::<f16>(&dev, 4, 2049, desc);
            check_sorted::<bf16>(&dev, 5, 300, desc);
            check_sorted::<u8>(&dev, 2, 5000, desc);
            check_sorted::<u32>(&dev, 7, 129, desc);
        }
    }
}

#[test]
fn sort_a_row_of_100000() {
    let _turn = shared();
    for dev in devices() {
        check_sorted::<f32>(&dev, 1, 100_000, true);
    }
}

/// The longest rows the issue names: 2^24 elements (13 merge passes on a
/// GPU). On the Cpu and real GPUs; the emulator runs the same kernels on
/// the 100,000-element row above (six merge passes), as 2^24 would take it
/// many minutes.
#[test]
fn sort_a_row_of_2_pow_24() {
    let _turn = shared();
    for dev in devices() {
        if !matches!(dev, Device::Cpu) && !dev.is_gpu() {
            eprintln!("sort_a_row_of_2_pow_24: skipped on {dev} (see the doc comment)");
            continue;
        }
        let n = 1usize << 24;
        // Keys with ties (n / 4 distinct), checked against a stable sort of
        // (key, index) done here.
        let keys: Vec<f32> = (0..n)
            .map(|i| ((i as u64 * 2_654_435_761) % (n as u64 / 4)) as f32)
            .collect();
        let x = Tensor::from_slice(&keys, &[1, n], &dev).unwrap();
        let idx = x.argsort(false).unwrap().to_vec().unwrap();
        let mut want: Vec<u32> = (0..n as u32).collect();
        want.sort_by(|&a, &b| keys[a as usize].total_cmp(&keys[b as usize]));
        assert!(
            idx == want,
            "{dev}: argsort of 2^24 differs from the reference"
        );
    }
}

#[test]
fn argsort_matches_sort_and_scalars_and_empties() {
    let _turn = shared();
    for dev in devices() {
        let x = Tensor::from_slice(&[2u32, 1, 2, 0], &[2, 2], &dev).unwrap();
        assert_eq!(
            x.argsort(false).unwrap().to_vec().unwrap(),
            vec![1, 0, 1, 0]
        );
        let s = Tensor::full(5.0f32, &[], &dev).unwrap();
        let (v, i) = s.sort(false).unwrap();
        assert_eq!(
            (v.to_vec().unwrap(), i.to_vec().unwrap()),
            (vec![5.0], vec![0])
        );
        let e = Tensor::<f32>::zeros(&[3, 0], &dev).unwrap();
        assert_eq!(e.argsort(true).unwrap().shape(), &[3, 0]);
        let t = Tensor::from_slice(&[3.0f32, 1.0, 2.0, 0.0], &[2, 2], &dev)
            .unwrap()
            .transpose(0, 1)
            .unwrap(); // rows [3, 2] and [1, 0]
        assert_eq!(
            t.argsort(false).unwrap().to_vec().unwrap(),
            vec![1, 0, 1, 0]
        );
    }
}

fn check_topk<T: WithDType>(dev: &Device, rows: usize, cols: usize, k: usize, largest: bool) {
    let data = sort_input::<T>(rows * cols, (rows + cols * 3 + k) as u64);
    let x = Tensor::from_slice(&data, &[rows, cols], dev).unwrap();
    let (v, i) = x.topk(k, largest).unwrap();
    assert_eq!(v.shape(), &[rows, k]);
    let (v, i) = (v.to_vec().unwrap(), i.to_vec().unwrap());
    for r in 0..rows {
        let row = as_f64(&data[r * cols..(r + 1) * cols]);
        let want = ref_order(&row, largest);
        for c in 0..k {
            assert_eq!(
                i[r * k + c] as usize,
                want[c],
                "{dev} {} topk({k}) of {rows}x{cols} largest={largest} row {r} at {c}",
                T::DTYPE
            );
            assert_eq!(
                bytemuck::bytes_of(&v[r * k + c]),
                bytemuck::bytes_of(&data[r * cols + want[c]])
            );
        }
    }
}

#[test]
fn topk_is_the_first_k_of_the_sort() {
    let _turn = shared();
    for dev in devices() {
        for (cols, k) in [
            (1usize, 1usize),
            (7, 7),
            (100, 1),
            (1000, 50),
            (3001, 1024),
            (1500, 1100),
        ] {
            check_topk::<f32>(&dev, 2, cols, k, true);
            check_topk::<f32>(&dev, 2, cols, k, false);
        }
        // Rows long enough to be cut into segments (a workgroup each): ties
        // across segments still go to the lowest index.
        check_topk::<f32>(&dev, 2, 40_000, 50, true);
        check_topk::<u8>(&dev, 1, 33_000, 700, false);
        check_topk::<bf16>(&dev, 3, 500, 20, true);
        check_topk::<f16>(&dev, 2, 700, 9, false);
        check_topk::<u8>(&dev, 2, 900, 300, true); // many ties at the threshold
        check_topk::<u32>(&dev, 2, 64, 5, false);
        check_topk::<i64>(&dev, 2, 2000, 33, true);
        let z = Tensor::<f32>::zeros(&[2, 5], &dev).unwrap();
        assert_eq!(z.topk(0, true).unwrap().0.shape(), &[2, 0]);
        // All equal: the lowest indices win.
        assert_eq!(
            z.topk(3, true).unwrap().1.to_vec().unwrap(),
            vec![0, 1, 2, 0, 1, 2]
        );
    }
}

fn scatter_case<T: WithDType, I: IdType>(dev: &Device) {
    let shape = [3usize, 4, 5];
    let base = values::<T>(60, 5);
    let st = strides(&shape);
    let t = Tensor::from_slice(&base, &shape, dev).unwrap();
    for dim in 0..3 {
        // ids [2, 3, 4] but 6 along dim (repeats certain), src [3, 6, 5]-ish.
        let mut ishape = [2usize, 3, 4];
        ishape[dim] = 6;
        let mut sshape = [3usize, 4, 5];
        sshape[dim] = 7;
        let n: usize = ishape.iter().product();
        let ids: Vec<usize> = (0..n).map(|i| (i * 5 + 2) % shape[dim]).collect();
        let id_t = Tensor::from_slice(
            &ids.iter()
                .map(|&i| I::from_f64(i as f64))
                .collect::<Vec<_>>(),
            &ishape,
            dev,
        )
        .unwrap();
        let sdata = values::<T>(sshape.iter().product(), 6);
        let src = Tensor::from_slice(&sdata, &sshape, dev).unwrap();
        let sst = strides(&sshape);
        for add in [false, true] {
            let got = if add {
                t.scatter_add(dim, &id_t, &src)
            } else {
                t.scatter(dim, &id_t, &src)
            }
            .unwrap();
            // Reference: in logical order, replace or add (wrapping for
            // integers; the values are small integers, exact in f32).
            let mut want = as_f64(&base);
            for (p, &id) in ids.iter().enumerate() {
                let c = coords(p, &ishape);
                let mut o = c.clone();
                o[dim] = id;
                let at: usize = o.iter().zip(&st).map(|(a, b)| a * b).sum();
                let v = sdata[c.iter().zip(&sst).map(|(a, b)| a * b).sum::<usize>()].to_f64();
                want[at] = if add { want[at] + v } else { v };
            }
            let want: Vec<f64> = want
                .iter()
                .map(|&w| T::from_f64(wrap::<T>(w)).to_f64())
                .collect();
            assert_eq!(
                as_f64(&got.to_vec().unwrap()),
                want,
                "{dev} {} scatter(add={add}) dim {dim}",
                T::DTYPE
            );
        }
    }
    // Transposed ids (the same logical ids as a view) and no ids at all.
    for dim in 0..3 {
        let ishape = [2usize, 3, 2];
        let n: usize = ishape.iter().product();
        let ids: Vec<usize> = (0..n).map(|i| (i * 3 + 1) % shape[dim]).collect();
        // Stored as [c2][c1][c0], seen through transpose(0, 2) as ishape.
        let mut stored = vec![I::from_f64(0.0); n];
        for (p, &id) in ids.iter().enumerate() {
            let c = coords(p, &ishape);
            stored[c[2] * 6 + c[1] * 2 + c[0]] = I::from_f64(id as f64);
        }
        let view = Tensor::from_slice(&stored, &[2, 3, 2], dev)
            .unwrap()
            .transpose(0, 2)
            .unwrap();
        assert!(!view.is_contiguous());
        let contiguous = Tensor::from_slice(
            &ids.iter()
                .map(|&i| I::from_f64(i as f64))
                .collect::<Vec<_>>(),
            &ishape,
            dev,
        )
        .unwrap();
        let src = Tensor::from_slice(&values::<T>(n, 8), &ishape, dev).unwrap();
        for add in [false, true] {
            let run = |i: &Tensor<I>| {
                if add {
                    t.scatter_add(dim, i, &src)
                } else {
                    t.scatter(dim, i, &src)
                }
                .unwrap()
                .to_vec()
                .unwrap()
            };
            assert_eq!(
                as_f64(&run(&view)),
                as_f64(&run(&contiguous)),
                "{dev} {} strided ids, add={add} dim {dim}",
                T::DTYPE
            );
        }
        let mut eshape = ishape;
        eshape[dim] = 0;
        let none = Tensor::<I>::zeros(&eshape, dev).unwrap();
        let esrc = Tensor::<T>::zeros(&eshape, dev).unwrap();
        for add in [false, true] {
            let got = if add {
                t.scatter_add(dim, &none, &esrc)
            } else {
                t.scatter(dim, &none, &esrc)
            }
            .unwrap();
            assert_eq!(
                as_f64(&got.to_vec().unwrap()),
                as_f64(&base),
                "{dev} no ids"
            );
        }
    }
    // index_add with no ids, and with ids as a strided 1-D view (every
    // other element of a buffer).
    let none = Tensor::<I>::zeros(&[0], dev).unwrap();
    let esrc = Tensor::<T>::zeros(&[3, 4, 0], dev).unwrap();
    let got = t.index_add(2, &none, &esrc).unwrap();
    assert_eq!(
        as_f64(&got.to_vec().unwrap()),
        as_f64(&base),
        "{dev} index_add of no ids"
    );
    let pairs: Vec<I> = [3usize, 9, 1, 9, 3, 9]
        .iter()
        .map(|&i| I::from_f64(i as f64))
        .collect();
    let every_other = Tensor::from_slice(&pairs, &[3, 2], dev)
        .unwrap()
        .narrow(1, 0, 1)
        .unwrap()
        .reshape(&[3])
        .unwrap();
    assert!(!every_other.is_contiguous());
    let sdata = values::<T>(36, 9);
    let src = Tensor::from_slice(&sdata, &[3, 3, 4], dev)
        .unwrap()
        .transpose(1, 2)
        .unwrap(); // [3, 4, 3]
    let got = t.index_add(2, &every_other, &src).unwrap();
    let mut want = as_f64(&base);
    for i in 0..3 {
        for j in 0..4 {
            for (k, id) in [3usize, 1, 3].into_iter().enumerate() {
                want[i * 20 + j * 5 + id] += sdata[i * 12 + k * 4 + j].to_f64();
            }
        }
    }
    let want: Vec<f64> = want
        .iter()
        .map(|&w| T::from_f64(wrap::<T>(w)).to_f64())
        .collect();
    assert_eq!(
        as_f64(&got.to_vec().unwrap()),
        want,
        "{dev} {} index_add, strided ids",
        T::DTYPE
    );
    // index_add with repeats, and a transposed source.
    let ids = [4usize, 0, 4, 4, 1];
    let id_t = Tensor::from_slice(
        &ids.iter()
            .map(|&i| I::from_f64(i as f64))
            .collect::<Vec<_>>(),
        &[5],
        dev,
    )
    .unwrap();
    let sdata = values::<T>(60, 7);
    let src = Tensor::from_slice(&sdata, &[5, 4, 3], dev)
        .unwrap()
        .transpose(0, 2)
        .unwrap(); // [3, 4, 5]
    let got = t.index_add(2, &id_t, &src).unwrap();
    let mut want = as_f64(&base);
    for i in 0..3 {
        for j in 0..4 {
            for (k, &id) in ids.iter().enumerate() {
                want[i * 20 + j * 5 + id] += sdata[k * 12 + j * 3 + i].to_f64();
            }
        }
    }
    let want: Vec<f64> = want
        .iter()
        .map(|&w| T::from_f64(wrap::<T>(w)).to_f64())
        .collect();
    assert_eq!(
        as_f64(&got.to_vec().unwrap()),
        want,
        "{dev} {} index_add",
        T::DTYPE
    );
}

/// `w` wrapped into `T`'s range for integer types (sums of u8 wrap).
fn wrap<T: WithDType>(w: f64) -> f64 {
    match T::DTYPE {
        ferrocm::DType::U8 => w.rem_euclid(256.0),
        _ => w,
    }
}

#[test]
fn scatter_scatter_add_and_index_add_every_dtype() {
    let _turn = shared();
    for dev in devices() {
        every_pair!(scatter_case, &dev);
    }
}

#[test]
fn scatter_add_is_deterministic_and_matches_the_cpu_bit_for_bit() {
    let _turn = shared();
    // Floats that round differently in another order: many duplicates.
    let n = 5000;
    let src: Vec<f32> = (0..n).map(|i| 1.0 / (1.0 + i as f32)).collect();
    let ids: Vec<u32> = (0..n).map(|i| (i % 7) as u32).collect();
    let on = |dev: &Device| {
        let t = Tensor::<f32>::zeros(&[7], dev).unwrap();
        t.scatter_add(
            0,
            &Tensor::from_slice(&ids, &[n], dev).unwrap(),
            &Tensor::from_slice(&src, &[n], dev).unwrap(),
        )
        .unwrap()
        .to_vec()
        .unwrap()
    };
    let cpu = on(&Device::Cpu);
    for dev in devices() {
        let a = on(&dev);
        assert_eq!(a, on(&dev), "{dev}: run to run");
        assert_eq!(a, cpu, "{dev} vs the Cpu");
    }
    // And close to the exact sums.
    for (r, got) in cpu.iter().enumerate() {
        let exact: f64 = (r..n).step_by(7).map(|i| 1.0 / (1.0 + i as f64)).sum();
        assert!((*got as f64 - exact).abs() < 1e-5 * exact, "{r}");
    }
}

#[test]
fn scatter_bad_ids_and_shapes() {
    let _turn = alone();
    for dev in devices() {
        let t = Tensor::<f32>::zeros(&[2, 3], &dev).unwrap();
        let ids = Tensor::from_slice(&[0i64, 5, 1], &[1, 3], &dev).unwrap();
        let src = Tensor::<f32>::ones(&[1, 3], &dev).unwrap();
        match t.scatter_add(1, &ids, &src).and_then(|r| r.to_vec()) {
            Err(Error::Host(HostError::IdOutOfRange {
                id: 5,
                position: 1,
                size: 3,
                ..
            })) => {}
            other => panic!("{dev}: {other:?}"),
        }
        let line = Tensor::from_slice(&[2u32], &[1], &dev).unwrap();
        let row = Tensor::<f32>::ones(&[1, 3], &dev).unwrap();
        match t.index_add(0, &line, &row).and_then(|r| r.to_vec()) {
            Err(Error::Host(HostError::IdOutOfRange {
                id: 2,
                position: 0,
                size: 2,
                ..
            })) => {}
            other => panic!("{dev}: {other:?}"),
        }
        assert!(matches!(
            t.index_add(0, &line, &Tensor::<f32>::ones(&[2, 3], &dev).unwrap()),
            Err(Error::BadParameter {
                op: "index_add",
                ..
            })
        ));
        let big = Tensor::<u32>::zeros(&[3, 1], &dev).unwrap();
        assert!(matches!(
            t.scatter(1, &big, &Tensor::<f32>::ones(&[3, 1], &dev).unwrap()),
            Err(Error::ShapeMismatch { .. })
        ));
    }
}

/// `torch.scatter` (`add`: `scatter_add`) over f64 values in logical order,
/// the reference for the random cases: `ids` and `src` row-major in
/// `ishape` and `sshape`.
#[allow(clippy::too_many_arguments)]
fn scatter_ref(
    base: &[f64],
    shape: &[usize],
    ids: &[usize],
    ishape: &[usize],
    src: &[f64],
    sshape: &[usize],
    dim: usize,
    add: bool,
) -> Vec<f64> {
    let (st, sst) = (strides(shape), strides(sshape));
    let mut out = base.to_vec();
    for (p, &id) in ids.iter().enumerate() {
        let c = coords(p, ishape);
        let mut o = c.clone();
        o[dim] = id;
        let at: usize = o.iter().zip(&st).map(|(a, b)| a * b).sum();
        let v = src[c.iter().zip(&sst).map(|(a, b)| a * b).sum::<usize>()];
        out[at] = if add { out[at] + v } else { v };
    }
    out
}

/// Seeded random shapes (empty dims included), dims and ids: gather,
/// scatter, scatter_add, index_select and index_add (f32 and wrapping u8)
/// on every device against loops written here.
#[test]
fn random_indexing_cases_agree_with_the_references() {
    let _turn = shared();
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(12);
    for dev in devices() {
        for case in 0..16 {
            let rank = rng.random_range(1..=3);
            let shape: Vec<usize> = (0..rank).map(|_| rng.random_range(1..7)).collect();
            let dim = rng.random_range(0..rank);
            let n: usize = shape.iter().product();
            let base: Vec<f64> = (0..n).map(|i| ((i * 7 + case) % 100) as f64).collect();
            // ids no larger than self outside `dim`, any length along it (0 too).
            let ishape: Vec<usize> = (0..rank)
                .map(|d| {
                    if d == dim {
                        rng.random_range(0..9)
                    } else {
                        rng.random_range(0..=shape[d])
                    }
                })
                .collect();
            let sshape: Vec<usize> = ishape.iter().map(|&e| e + rng.random_range(0..2)).collect();
            let m: usize = ishape.iter().product();
            let ids: Vec<usize> = (0..m).map(|_| rng.random_range(0..shape[dim])).collect();
            let src: Vec<f64> = (0..sshape.iter().product::<usize>())
                .map(|i| ((i * 13 + 5) % 90) as f64)
                .collect();
            let id_t = Tensor::from_slice(
                &ids.iter().map(|&i| i as i64).collect::<Vec<_>>(),
                &ishape,
                &dev,
            )
            .unwrap();
            let what =
                format!("{dev} case {case}: {shape:?} dim {dim} ids {ishape:?} src {sshape:?}");
            // f32 (small integers: sums exact) and u8 (sums wrap).
            let t32 = Tensor::from_slice(
                &base.iter().map(|&v| v as f32).collect::<Vec<_>>(),
                &shape,
                &dev,
            )
            .unwrap();
            let s32 = Tensor::from_slice(
                &src.iter().map(|&v| v as f32).collect::<Vec<_>>(),
                &sshape,
                &dev,
            )
            .unwrap();
            let t8 = t32.to_dtype::<u8>().unwrap();
            let s8 = s32.to_dtype::<u8>().unwrap();
            for add in [false, true] {
                let want = scatter_ref(&base, &shape, &ids, &ishape, &src, &sshape, dim, add);
                let got = if add {
                    t32.scatter_add(dim, &id_t, &s32)
                } else {
                    t32.scatter(dim, &id_t, &s32)
                };
                assert_eq!(
                    as_f64(&got.unwrap().to_vec().unwrap()),
                    want,
                    "{what} add={add}"
                );
                let got = if add {
                    t8.scatter_add(dim, &id_t, &s8)
                } else {
                    t8.scatter(dim, &id_t, &s8)
                };
                let want8: Vec<f64> = want.iter().map(|w| w.rem_euclid(256.0)).collect();
                assert_eq!(
                    as_f64(&got.unwrap().to_vec().unwrap()),
                    want8,
                    "{what} u8 add={add}"
                );
            }
            // gather with the same ids (its ids need no src).
            if ishape
                .iter()
                .enumerate()
                .all(|(d, &e)| d == dim || e <= shape[d])
            {
                let st = strides(&shape);
                let want: Vec<f64> = ids
                    .iter()
                    .enumerate()
                    .map(|(p, &id)| {
                        let mut c = coords(p, &ishape);
                        c[dim] = id;
                        base[c.iter().zip(&st).map(|(a, b)| a * b).sum::<usize>()]
                    })
                    .collect();
                let got = t32.gather(dim, &id_t).unwrap();
                assert_eq!(got.shape(), &ishape[..], "{what}");
                assert_eq!(as_f64(&got.to_vec().unwrap()), want, "{what} gather");
            }
            // index_select and index_add along `dim` with the first ids.
            let k = ids.len().min(7);
            let flat = Tensor::from_slice(
                &ids[..k].iter().map(|&i| i as u32).collect::<Vec<_>>(),
                &[k],
                &dev,
            )
            .unwrap();
            let sel = t32.index_select(dim, &flat).unwrap();
            let mut oshape = shape.clone();
            oshape[dim] = k;
            assert_eq!(sel.shape(), &oshape[..], "{what}");
            let st = strides(&shape);
            let sel = as_f64(&sel.to_vec().unwrap());
            let mut added = base.clone();
            for (p, &v) in sel.iter().enumerate() {
                let mut c = coords(p, &oshape);
                assert_eq!(
                    v,
                    {
                        let mut cs = c.clone();
                        cs[dim] = ids[c[dim]];
                        base[cs.iter().zip(&st).map(|(a, b)| a * b).sum::<usize>()]
                    },
                    "{what} index_select at {p}"
                );
                c[dim] = ids[c[dim]];
                added[c.iter().zip(&st).map(|(a, b)| a * b).sum::<usize>()] += v;
            }
            let sel_t = t32.index_select(dim, &flat).unwrap();
            let got = t32.index_add(dim, &flat, &sel_t).unwrap();
            assert_eq!(as_f64(&got.to_vec().unwrap()), added, "{what} index_add");
        }
    }
}

/// Seeded random shapes, views and parameters: sort, topk and argsort of
/// transposed views on every device against the references above.
#[test]
fn random_cases_agree_with_the_references() {
    let _turn = shared();
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    for dev in devices() {
        for case in 0..12 {
            let (rows, cols) = (rng.random_range(1..6), rng.random_range(1..3000));
            let desc = rng.random_bool(0.5);
            check_sorted::<f32>(&dev, rows, cols, desc);
            let k = rng.random_range(0..=cols.min(1100));
            if k > 0 {
                check_topk::<bf16>(&dev, rows, cols, k, desc);
            }
            // A transposed view sorts as its contiguous copy does.
            let t = Tensor::from_slice(&sort_input::<u32>(rows * cols, case), &[cols, rows], &dev)
                .unwrap()
                .transpose(0, 1)
                .unwrap();
            let want = t
                .contiguous()
                .unwrap()
                .argsort(desc)
                .unwrap()
                .to_vec()
                .unwrap();
            assert_eq!(
                t.argsort(desc).unwrap().to_vec().unwrap(),
                want,
                "{dev} case {case}"
            );
            let got = t.contiguous().unwrap().to_vec().unwrap();
            let mut rows_sorted = want.clone();
            for r in 0..rows {
                let row: Vec<f64> = got[r * cols..(r + 1) * cols]
                    .iter()
                    .map(|&x| x as f64)
                    .collect();
                for (c, i) in ref_order(&row, desc).into_iter().enumerate() {
                    rows_sorted[r * cols + c] = i as u32;
                }
            }
            assert_eq!(want, rows_sorted, "{dev} case {case}");
        }
    }
}
