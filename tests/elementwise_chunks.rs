//! The contiguous elementwise kernels move eight elements per workitem step
//! with vector loads when every buffer is aligned to the load width
//! (`device::grid_stride_chunks`), and fall back to element loads otherwise.
//! These tests cross the seams of that split on every device: lengths below,
//! at and around multiples of eight (the tail), views that start on an
//! aligned element and ones that do not, every dtype. Expected values are
//! exact integers computed here from the element's index.

mod common;

use ferrocm::{Device, Tensor, bf16, f16};

/// Lengths below, at and around multiples of the chunk of eight, and some
/// with several chunks; 8192 and 12317 give the maps of 1- and 2-byte
/// elements (one input or two) two chunks a workitem (a grid of half the chunks: every
/// workitem takes a pair at 8192; at 12317, 1539 chunks on 1024 workitems,
/// the first 515 a pair, the rest one, then a tail of five).
const LENS: [usize; 12] = [0, 1, 7, 8, 9, 15, 16, 23, 64, 67, 8192, 12317];
/// View offsets: 0 (aligned), 1 (never aligned), 8 (aligned for every
/// dtype: 8 elements are at least 8 bytes, 16 from 2-byte elements on).
const OFFSETS: [usize; 3] = [0, 1, 8];

/// An element type with the exact integers the tests use.
trait Exact: ferrocm::ops::WithDType + PartialEq + std::fmt::Debug {
    fn of(v: i64) -> Self;
    const SIGNED: bool;
}

macro_rules! exact {
    ($($t:ty: $signed:expr, |$v:ident| $e:expr;)*) => {$(
        impl Exact for $t {
            fn of($v: i64) -> Self { $e }
            const SIGNED: bool = $signed;
        }
    )*};
}

exact! {
    f32: true, |v| v as f32;
    f16: true, |v| f16::from_f32(v as f32);
    bf16: true, |v| bf16::from_f32(v as f32);
    u8: false, |v| v as u8;
    u32: false, |v| v as u32;
    i64: true, |v| v;
}

/// Element `i` of input `which`: small integers (exact in every dtype, sums
/// and `2x + 1` too), signed where the dtype is.
fn value<T: Exact>(which: i64, i: usize) -> i64 {
    let v = ((i as i64 + 3 * which) * 7) % 61;
    if T::SIGNED { v - 30 } else { v }
}

/// A view of `len` elements starting `off` elements into a fresh buffer.
fn view<T: Exact>(dev: &Device, which: i64, off: usize, len: usize) -> Tensor<T> {
    let data: Vec<T> = (0..off + len + 5)
        .map(|i| T::of(value::<T>(which, i)))
        .collect();
    let all = Tensor::from_vec(data, &[off + len + 5], dev).unwrap();
    all.narrow(0, off, len).unwrap()
}

fn expect<T: Exact>(got: Tensor<T>, want: impl Fn(usize) -> i64, what: &str) {
    let got = got.to_vec().unwrap();
    let want: Vec<T> = (0..got.len()).map(|i| T::of(want(i))).collect();
    assert_eq!(got, want, "{what}");
}

fn maps_of<T: Exact>() {
    for dev in common::devices() {
        for len in LENS {
            for off in OFFSETS {
                let ctx = |op: &str| format!("{op} {:?} len {len} offset {off} on {dev}", T::DTYPE);
                let x = view::<T>(&dev, 0, off, len);
                let y = view::<T>(&dev, 1, 8 - off.min(8), len);
                let xv = |i: usize| value::<T>(0, off + i);
                let yv = |i: usize| value::<T>(1, 8 - off.min(8) + i);
                expect(x.copy().unwrap(), xv, &ctx("copy"));
                expect(
                    x.affine(2.0, 1.0).unwrap(),
                    |i| 2 * xv(i) + 1,
                    &ctx("affine"),
                );
                expect(x.add(&y).unwrap(), |i| xv(i) + yv(i), &ctx("add"));
                let lt = x.lt(&y).unwrap().to_vec().unwrap();
                let want: Vec<u8> = (0..len).map(|i| (xv(i) < yv(i)) as u8).collect();
                assert_eq!(lt, want, "{}", ctx("lt"));
                let mask = x.lt(&y).unwrap();
                let picked = mask.where_cond(&x, &y).unwrap();
                expect(picked, |i| xv(i).min(yv(i)), &ctx("where"));
                let as_f32 = x.to_dtype::<f32>().unwrap().to_vec().unwrap();
                let want: Vec<f32> = (0..len).map(|i| xv(i) as f32).collect();
                assert_eq!(as_f32, want, "{}", ctx("cast to f32"));
                let from_f32 = view::<f32>(&dev, 0, off, len).to_dtype::<T>().unwrap();
                // f32's values are signed: a float cast saturates (`as`),
                // so the unsigned dtypes get 0 for the negative ones.
                let sat = |v: i64| if T::SIGNED { v } else { v.max(0) };
                expect(
                    from_f32,
                    |i| sat(value::<f32>(0, off + i)),
                    &ctx("cast from f32"),
                );
                let full = Tensor::full(T::of(5), &[len], &dev).unwrap();
                expect(full, |_| 5, &ctx("fill"));
            }
        }
    }
}

#[test]
fn maps_cross_the_chunk_seams_f32() {
    maps_of::<f32>();
}

#[test]
fn maps_cross_the_chunk_seams_f16_bf16() {
    maps_of::<f16>();
    maps_of::<bf16>();
}

#[test]
fn maps_cross_the_chunk_seams_integers() {
    maps_of::<u8>();
    maps_of::<u32>();
    maps_of::<i64>();
}

/// The float maps (one unary op through the chunked body) against values
/// written here, on aligned and unaligned views: `neg` and `relu` are exact.
#[test]
fn unary_float_maps_cross_the_chunk_seams() {
    for dev in common::devices() {
        for len in LENS {
            for off in OFFSETS {
                let x = view::<bf16>(&dev, 2, off, len);
                let xv = |i: usize| value::<bf16>(2, off + i);
                expect(
                    x.neg().unwrap(),
                    |i| -xv(i),
                    &format!("neg len {len} off {off} on {dev}"),
                );
                let x = view::<f32>(&dev, 2, off, len);
                expect(
                    x.relu().unwrap(),
                    |i| xv(i).max(0),
                    &format!("relu len {len} off {off} on {dev}"),
                );
            }
        }
    }
}
