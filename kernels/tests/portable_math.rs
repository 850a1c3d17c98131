//! The portable f32 math (the NVPTX bodies of exp, log, sin, cos and pow)
//! against the host's libm in f64, rounded once to f32: at most 1 ulp over
//! sampled sweeps of every binade, special values bit for bit.

use ferrocm_kernels::math::portable as pm;

/// Distance in ulps through the ordered integer map of f32 bit patterns; NaN
/// equals NaN; a zero or an infinity must match bit for bit (sign included).
fn ulps(got: f32, want: f32) -> u64 {
    if got.is_nan() && want.is_nan() {
        return 0;
    }
    if got.is_nan() || want.is_nan() {
        return u64::MAX;
    }
    if want.is_infinite() || got.is_infinite() || (want == 0.0 && got == 0.0) {
        return if got.to_bits() == want.to_bits() {
            0
        } else {
            u64::MAX
        };
    }
    let key = |v: f32| {
        let b = v.to_bits() as i64;
        if b & 0x8000_0000 != 0 {
            -(b & 0x7fff_ffff)
        } else {
            b
        }
    };
    (key(got) - key(want)).unsigned_abs()
}

/// Every `step`-th f32 bit pattern from `lo_bits` to `hi_bits`, both signs when asked.
fn sweep(lo_bits: u32, hi_bits: u32, step: u32, both_signs: bool) -> Vec<f32> {
    let mut v = Vec::new();
    let mut b = lo_bits;
    while b <= hi_bits {
        v.push(f32::from_bits(b));
        if both_signs {
            v.push(-f32::from_bits(b));
        }
        b = match b.checked_add(step) {
            Some(n) => n,
            None => break,
        };
    }
    v
}

const SPECIALS: &[f32] = &[
    0.0,
    -0.0,
    f32::INFINITY,
    f32::NEG_INFINITY,
    f32::NAN,
    f32::MIN_POSITIVE,
    1e-45,
    -1e-45,
    1.0,
    -1.0,
    0.5,
    2.0,
    88.72,
    88.7228,
    -87.33,
    -103.9,
    -104.0,
    89.0,
    f32::MAX,
    -f32::MAX,
    std::f32::consts::PI,
    std::f32::consts::FRAC_PI_2,
    1e5,
    1048576.0,
    3.0e38,
];

fn check(name: &str, xs: &[f32], got: impl Fn(f32) -> f32, want: impl Fn(f64) -> f64) {
    let mut worst = (0u64, 0f32);
    for &x in xs.iter().chain(SPECIALS) {
        let w = want(x as f64) as f32;
        let d = ulps(got(x), w);
        if d > worst.0 {
            worst = (d, x);
        }
    }
    assert!(
        worst.0 <= 1,
        "{name}: {} ulp at x = {:e} (got {:e}, libm {:e})",
        worst.0,
        worst.1,
        got(worst.1),
        want(worst.1 as f64) as f32
    );
}

#[test]
fn exp_within_1_ulp() {
    // |x| up to 104 (beyond: inf or 0), every binade from the subnormals.
    let xs: Vec<f32> = sweep(1, 104f32.to_bits(), 4099, true);
    check("exp", &xs, pm::exp_f32, f64::exp);
    check("exp (f32 fma)", &xs, pm::exp_f32_fma, f64::exp);
    // Every f32 where e^x overflows to inf or rounds to 0 or into the
    // subnormals (the fma body gets there by clamping and scaling, not by
    // comparing against thresholds), and far beyond both.
    let mut edges: Vec<f32> = sweep(88.0f32.to_bits(), 90.0f32.to_bits(), 1, false);
    edges.extend(
        sweep(85.0f32.to_bits(), 110.0f32.to_bits(), 1, false)
            .into_iter()
            .map(|x| -x),
    );
    edges.extend(sweep(90.0f32.to_bits(), f32::MAX.to_bits(), 9973, true));
    check(
        "exp (f32 fma) at its range's ends",
        &edges,
        pm::exp_f32_fma,
        f64::exp,
    );
}

#[test]
fn log_within_1_ulp() {
    let mut xs = sweep(1, f32::INFINITY.to_bits(), 4099, false);
    xs.extend([-1.0f32, -1e-30, -f32::INFINITY]);
    check("log", &xs, pm::log_f32, f64::ln);
}

#[test]
fn sin_cos_within_1_ulp_for_every_finite_f32() {
    let xs = sweep(1, f32::MAX.to_bits(), 2053, true);
    check("sin", &xs, pm::sin_f32, f64::sin);
    check("cos", &xs, pm::cos_f32, f64::cos);
    assert!(pm::sin_f32(-0.0).is_sign_negative());
}

#[test]
fn pow_within_1_ulp_and_special_cases_exact() {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut worst = (0u64, 0f32, 0f32);
    for i in 0..200_000 {
        let x = f32::from_bits(next() as u32);
        let x = if i % 2 == 0 { (x % 100.0).abs() } else { x };
        let y = match i % 4 {
            0 => ((next() % 20_001) as f32 - 10_000.0) / 200.0,
            1 => (next() % 21) as f32 - 10.0,
            2 => [0.5f32, -0.5, 1.5, -1.5, 2.0, 3.0][(next() % 6) as usize],
            _ => f32::from_bits(next() as u32) % 50.0,
        };
        if !x.is_finite() || !y.is_finite() {
            continue;
        }
        // glibc's powf does not round exact halfway results to even; the f64
        // power of an integer exponent with a small base is exact in f64.
        let want = (x as f64).powf(y as f64) as f32;
        let d = ulps(pm::pow_f32(x, y), want);
        if d > worst.0 {
            worst = (d, x, y);
        }
    }
    assert!(
        worst.0 <= 1,
        "pow: {} ulp at ({:e}, {:e})",
        worst.0,
        worst.1,
        worst.2
    );
    let vals = [
        0.0f32,
        -0.0,
        1.0,
        -1.0,
        0.5,
        -0.5,
        2.0,
        -2.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -3.0,
        3.0,
        2.5,
    ];
    for &x in &vals {
        for &y in &vals {
            let (got, want) = (pm::pow_f32(x, y), x.powf(y));
            assert_eq!(
                ulps(got, want),
                0,
                "pow({x:e}, {y:e}) = {got:e}, libm {want:e}"
            );
        }
    }
}
