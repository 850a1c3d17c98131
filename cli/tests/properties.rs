//! Property tests: random shapes and strides (seeded), emulator against Cpu.

use ferrocm_cli::check::{compare, tolerance};
use ferrocm_ops::{DType, Tensor};
use ferrocm_ops::{Device, WaveSize};
use rand::{Rng, SeedableRng};

fn random_view(rng: &mut rand::rngs::StdRng, seed: u64, dev: &Device) -> Tensor<f32> {
    let rank = rng.random_range(1..5);
    let shape: Vec<usize> = (0..rank).map(|_| rng.random_range(1..9)).collect();
    let mut t = Tensor::<f32>::randn(&shape, 0.0, 1.0, seed, dev).unwrap();
    // A random permutation and a random narrow.
    let mut perm: Vec<usize> = (0..rank).collect();
    for i in (1..rank).rev() {
        perm.swap(i, rng.random_range(0..=i));
    }
    t = t.permute(&perm).unwrap();
    let d = rng.random_range(0..rank);
    let size = t.shape()[d];
    if size > 1 {
        let start = rng.random_range(0..size - 1);
        t = t.narrow(d, start, size - start).unwrap();
    }
    t
}

#[test]
fn random_strided_views_agree_with_cpu() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(2024);
    let tol = tolerance(DType::F32);
    for case in 0..60 {
        let wave = WaveSize::ALL[(case % 2) as usize];
        let emu = Device::emulator(wave);
        let mut r1 = rng.clone();
        let a_cpu = random_view(&mut r1, case, &Device::Cpu);
        let a_emu = random_view(&mut rng, case, &emu);
        assert_eq!(a_cpu.shape(), a_emu.shape());
        let rank = a_cpu.rank();
        let dims: Vec<usize> = (0..rank).filter(|_| rng.random_bool(0.5)).collect();
        let pairs = [
            (a_cpu.exp().unwrap(), a_emu.exp().unwrap()),
            (
                a_cpu.sum(&dims, true).unwrap(),
                a_emu.sum(&dims, true).unwrap(),
            ),
            (a_cpu.softmax().unwrap(), a_emu.softmax().unwrap()),
            (
                a_cpu.mul(&a_cpu.sqr().unwrap()).unwrap(),
                a_emu.mul(&a_emu.sqr().unwrap()).unwrap(),
            ),
            (
                a_cpu.affine(0.5, -1.0).unwrap(),
                a_emu.affine(0.5, -1.0).unwrap(),
            ),
        ];
        for (i, (c, e)) in pairs.iter().enumerate() {
            assert_eq!(c.shape(), e.shape());
            let (abs, rel, ok) = compare(&e.to_vec().unwrap(), &c.to_vec().unwrap(), tol);
            assert!(
                ok,
                "case {case} op {i} shape {:?} strides {:?}: abs {abs} rel {rel}",
                a_cpu.shape(),
                a_cpu.layout().strides()
            );
        }
        if !dims.is_empty() {
            let (c, e) = (
                a_cpu.argmax(&dims, false).unwrap(),
                a_emu.argmax(&dims, false).unwrap(),
            );
            assert_eq!(c.to_vec().unwrap(), e.to_vec().unwrap());
        }
    }
}
