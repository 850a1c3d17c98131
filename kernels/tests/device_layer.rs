//! Host bodies of the device layer: conversions (exhaustive over every f16 and
//! bf16 bit pattern) and math against libm.

use ferrocm_kernels::elem::*;
use ferrocm_kernels::math;
use half::{bf16, f16};
use rand::{Rng, SeedableRng};

fn same_f32(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

#[test]
fn f16_to_f32_is_exact_for_all_65536_patterns() {
    for bits in 0..=u16::MAX {
        let want = f16::from_bits(bits).to_f32();
        let got = f16_bits_to_f32(bits);
        assert!(
            same_f32(got, want),
            "f16 {bits:#06x}: got {got:e}, want {want:e}"
        );
        if want.is_nan() {
            // Sign and payload kept.
            assert_eq!(got.to_bits() >> 31, (bits >> 15) as u32);
            assert_eq!((got.to_bits() >> 13) & 0x3ff, (bits & 0x3ff) as u32);
        }
    }
}

#[test]
fn bf16_to_f32_is_exact_for_all_65536_patterns() {
    for bits in 0..=u16::MAX {
        let want = bf16::from_bits(bits).to_f32();
        let got = bf16_bits_to_f32(bits);
        assert!(same_f32(got, want), "bf16 {bits:#06x}");
        assert_eq!(got.to_bits(), (bits as u32) << 16);
    }
}

/// Every f16/bf16 value round-trips, and so do the midpoints between
/// neighbours (which must round to even), checked against the half crate.
#[test]
fn f32_to_f16_and_bf16_round_to_nearest_even_for_all_patterns() {
    for bits in 0..=u16::MAX {
        let h = f16::from_bits(bits);
        let x = h.to_f32();
        if x.is_nan() {
            let r = f32_to_f16_bits(x);
            assert!(
                f16::from_bits(r).is_nan() && r >> 15 == bits >> 15,
                "NaN {bits:#06x} -> {r:#06x}"
            );
        } else {
            assert_eq!(f32_to_f16_bits(x), bits, "f16 {bits:#06x} round trip");
            // Midpoint to the next pattern up (same sign).
            let next = f16::from_bits(bits.wrapping_add(1)).to_f32();
            if next.is_finite() && (bits & 0x7fff) != 0x7bff {
                let mid = f32::from_bits(
                    (x.to_bits() >> 1) + (next.to_bits() >> 1) + (x.to_bits() & next.to_bits() & 1),
                );
                let mid = if (x + next) / 2.0 == mid {
                    mid
                } else {
                    (x + next) / 2.0
                };
                assert_eq!(
                    f32_to_f16_bits(mid),
                    f16::from_f32(mid).to_bits(),
                    "midpoint above {bits:#06x}"
                );
            }
        }
        let b = bf16::from_bits(bits);
        let y = b.to_f32();
        if y.is_nan() {
            let r = f32_to_bf16_bits(y);
            assert!(bf16::from_bits(r).is_nan() && r >> 15 == bits >> 15);
        } else {
            assert_eq!(f32_to_bf16_bits(y), bits, "bf16 {bits:#06x} round trip");
        }
    }
}

#[test]
fn f32_to_f16_and_bf16_match_half_over_random_f32() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for _ in 0..2_000_000 {
        let x = f32::from_bits(rng.random());
        let h = f32_to_f16_bits(x);
        let b = f32_to_bf16_bits(x);
        if x.is_nan() {
            assert!(f16::from_bits(h).is_nan() && bf16::from_bits(b).is_nan());
            continue;
        }
        assert_eq!(
            h,
            f16::from_f32(x).to_bits(),
            "f16 of {x:e} ({:#010x})",
            x.to_bits()
        );
        assert_eq!(b, bf16::from_f32(x).to_bits(), "bf16 of {x:e}");
    }
}

/// Distance in units in the last place between two finite f32 of the same sign region.
fn ulps(a: f32, b: f32) -> u32 {
    let key = |x: f32| {
        let i = x.to_bits() as i32;
        if i < 0 { i32::MIN - i } else { i }
    };
    (key(a) as i64 - key(b) as i64).unsigned_abs() as u32
}

fn max_ulps(
    f: fn(f32) -> f32,
    reference: fn(f64) -> f64,
    lo: f32,
    hi: f32,
    steps: u32,
) -> (u32, f32) {
    let mut worst = (0, 0.0);
    for i in 0..=steps {
        let x = lo + (hi - lo) * (i as f32 / steps as f32);
        let want = reference(x as f64) as f32;
        let got = f(x);
        let u = ulps(got, want);
        if u > worst.0 {
            worst = (u, x);
        }
    }
    worst
}

#[test]
fn tanh_is_within_a_few_ulp_of_libm() {
    let (u, at) = max_ulps(math::tanh, libm::tanh, -10.0, 10.0, 400_000);
    assert!(u <= 4, "tanh: {u} ulp at {at}");
    let (u, at) = max_ulps(math::tanh, libm::tanh, -1e-3, 1e-3, 100_000);
    assert!(u <= 2, "tanh near 0: {u} ulp at {at}");
    assert_eq!(math::tanh(0.0), 0.0);
    assert!(math::tanh(f32::NAN).is_nan());
    assert_eq!(math::tanh(f32::INFINITY), 1.0);
    assert_eq!(math::tanh(f32::NEG_INFINITY), -1.0);
}

#[test]
fn erf_is_within_a_few_ulp_of_libm() {
    let (u, at) = max_ulps(math::erf, libm::erf, -6.0, 6.0, 400_000);
    assert!(u <= 8, "erf: {u} ulp at {at}");
    let (u, at) = max_ulps(math::erf, libm::erf, -1e-3, 1e-3, 100_000);
    assert!(u <= 2, "erf near 0: {u} ulp at {at}");
    assert!(math::erf(f32::NAN).is_nan());
    assert_eq!(math::erf(f32::INFINITY), 1.0);
}

#[test]
fn libm_backed_functions_match_libm() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    for _ in 0..100_000 {
        let x: f32 = rng.random_range(-50.0..50.0);
        assert!(same_f32(math::exp(x), libm::expf(x)) || ulps(math::exp(x), libm::expf(x)) <= 1);
        let p = x.abs() + 1e-3;
        assert!(ulps(math::log(p), libm::logf(p)) <= 1);
        assert!(ulps(math::sqrt(p), libm::sqrtf(p)) == 0);
        assert!(ulps(math::sin(x), libm::sinf(x)) <= 1);
        assert!(ulps(math::cos(x), libm::cosf(x)) <= 1);
        assert!(ulps(math::rsqrt(p), (1.0 / (p as f64).sqrt()) as f32) <= 1);
        assert_eq!(math::fma(x, 2.0, 1.0), x.mul_add(2.0, 1.0));
    }
}

#[test]
fn casts_follow_rust_as() {
    assert_eq!(300.0f32.convert::<u8>(), 255);
    assert_eq!((-3.0f32).convert::<u32>(), 0);
    assert_eq!(f32::NAN.convert::<i64>(), 0);
    assert_eq!(300u32.convert::<u8>(), 44);
    assert_eq!((-1i64).convert::<u32>(), u32::MAX);
    assert_eq!(F16(0x3c00).convert::<Bf16>(), Bf16(0x3f80));
    assert_eq!(7u8.div(0), 0);
    assert_eq!(i64::MIN.div(-1), i64::MIN);
}

/// The one list of matrix units (included by the build helper too).
#[test]
fn matrix_units_per_arch() {
    use ferrocm_kernels::host::{matrix_unit_of, transposed_loads};
    assert_eq!(matrix_unit_of("gfx942"), Some("mfma"));
    assert_eq!(matrix_unit_of("gfx90a"), Some("mfma"));
    assert_eq!(matrix_unit_of("gfx1100"), Some("wmma11"));
    assert_eq!(matrix_unit_of("gfx1201"), Some("wmma12"));
    assert_eq!(matrix_unit_of("sm_80"), Some("sync"));
    assert_eq!(matrix_unit_of("sm_75"), None);
    assert_eq!(matrix_unit_of("gfx1030"), None);
    assert!(transposed_loads("sync"));
    assert!(!transposed_loads("mfma"));
}
