//! `DynTensor` runs every op `Tensor<T>` has: each entry, for every dtype
//! it takes, gives exactly (bit for bit) what the typed op gives on the same
//! device, on the Cpu and the emulator; the typed ops themselves are
//! checked against independent references in `reference.rs`, `llm.rs`,
//! `matmul.rs`, `indexing.rs`. Mismatched dtypes and integer inputs to float
//! ops are typed errors naming the op.

use ferrocm::ops::attention::DynAttentionOptions;
use ferrocm::{
    Activation, AttentionOptions, DType, Device, DynTensor, Error, Tensor, WaveSize, WithDType,
    bf16, f16,
};

fn devices() -> [Device; 2] {
    [Device::Cpu, Device::emulator(WaveSize::Wave32)]
}

/// The same bits (NaN included).
fn same<T: WithDType>(typed: &Tensor<T>, dynamic: &DynTensor) {
    assert_eq!(dynamic.dtype().unwrap(), T::DTYPE);
    assert_eq!(dynamic.shape(), typed.shape());
    let d: Tensor<T> = dynamic.typed().unwrap();
    let (a, b) = (typed.to_vec().unwrap(), d.to_vec().unwrap());
    let bits = |v: &[T]| -> Vec<u8> { bytemuck::cast_slice(v).to_vec() };
    assert_eq!(bits(&a), bits(&b), "{:?}", T::DTYPE);
}

fn rand<T: WithDType>(shape: &[usize], seed: u64, dev: &Device) -> Tensor<T> {
    Tensor::<f32>::randn(shape, 0.0, 1.0, seed, dev)
        .unwrap()
        .to_dtype::<T>()
        .unwrap()
}

fn floats<T: WithDType>(dev: &Device) {
    let x = rand::<T>(&[3, 64], 1, dev);
    let w = rand::<T>(&[5, 64], 2, dev);
    let b = rand::<T>(&[5], 3, dev);
    let g = rand::<T>(&[64], 4, dev);
    let (xd, wd, bd, gd) = (x.to_dyn(), w.to_dyn(), b.to_dyn(), g.to_dyn());
    // Matrix products.
    let sq = rand::<T>(&[64, 64], 5, dev);
    same(&x.matmul(&sq).unwrap(), &xd.matmul(&sq.to_dyn()).unwrap());
    same(&w.matvec(&g).unwrap(), &wd.matvec(&gd).unwrap());
    same(
        &x.linear(&w, Some(&b), Some(Activation::Gelu)).unwrap(),
        &xd.linear(&wd, Some(&bd), Some(Activation::Gelu)).unwrap(),
    );
    same(
        &x.linear(&w, None, None).unwrap(),
        &xd.linear(&wd, None, None).unwrap(),
    );
    // Norms.
    same(
        &x.rms_norm(&g, 1e-6).unwrap(),
        &xd.rms_norm(&gd, 1e-6).unwrap(),
    );
    same(
        &x.layer_norm(&g, Some(&g), 1e-5).unwrap(),
        &xd.layer_norm(&gd, Some(&gd), 1e-5).unwrap(),
    );
    let r = rand::<T>(&[3, 64], 6, dev);
    let (s, y) = x.add_rms_norm(&r, &g, 1e-6).unwrap();
    let (sd, yd) = xd.add_rms_norm(&r.to_dyn(), &gd, 1e-6).unwrap();
    same(&s, &sd);
    same(&y, &yd);
    let (s, y) = x.add_layer_norm(&r, &g, None, 1e-5).unwrap();
    let (sd, yd) = xd.add_layer_norm(&r.to_dyn(), &gd, None, 1e-5).unwrap();
    same(&s, &sd);
    same(&y, &yd);
    // Gated activations.
    same(&x.swiglu(&r).unwrap(), &xd.swiglu(&r.to_dyn()).unwrap());
    same(
        &x.glu(&r, Activation::Relu).unwrap(),
        &xd.glu(&r.to_dyn(), Activation::Relu).unwrap(),
    );
    same(
        &x.glu_halves(Activation::Silu).unwrap(),
        &xd.glu_halves(Activation::Silu).unwrap(),
    );
    // Rotary embeddings: (b, h, t, d) with a [t, d/2] table; thd as (b, t, h, d).
    let q = rand::<T>(&[1, 2, 4, 8], 7, dev);
    let (cos, sin) = (rand::<T>(&[6, 4], 8, dev), rand::<T>(&[6, 4], 9, dev));
    let (qd, cd, sd) = (q.to_dyn(), cos.to_dyn(), sin.to_dyn());
    same(
        &q.rope(&cos, &sin, 1).unwrap(),
        &qd.rope(&cd, &sd, 1).unwrap(),
    );
    same(
        &q.rope_i(&cos, &sin, 2).unwrap(),
        &qd.rope_i(&cd, &sd, 2).unwrap(),
    );
    same(
        &q.rope_thd(&cos, &sin, 0).unwrap(),
        &qd.rope_thd(&cd, &sd, 0).unwrap(),
    );
    // Attention, with a mask of the inputs' dtype.
    let q = rand::<T>(&[1, 2, 3, 64], 10, dev);
    let k = rand::<T>(&[1, 1, 5, 64], 11, dev);
    let m = rand::<T>(&[1, 1, 3, 5], 12, dev);
    let typed = q
        .attention(&k, &k, &AttentionOptions::new().causal().mask(&m))
        .unwrap();
    let md = m.to_dyn();
    let dynamic = q
        .to_dyn()
        .attention(
            &k.to_dyn(),
            &k.to_dyn(),
            &DynAttentionOptions::new().causal().mask(&md),
        )
        .unwrap();
    same(&typed, &dynamic);
}

fn every_dtype<T: WithDType>(dev: &Device) {
    let t = rand::<T>(&[4, 7], 20, dev);
    let td = t.to_dyn();
    // Indexing with every id type.
    let ids32 = Tensor::from_slice(&[3u32, 0, 3], &[3], dev).unwrap();
    let ids8 = Tensor::from_slice(&[1u8, 2], &[2], dev).unwrap();
    let ids64 = Tensor::from_slice(&[6i64, 0, 2, 2], &[4], dev).unwrap();
    same(
        &t.index_select(0, &ids32).unwrap(),
        &td.index_select(0, &ids32.to_dyn()).unwrap(),
    );
    same(
        &t.index_select(1, &ids64).unwrap(),
        &td.index_select(1, &ids64.to_dyn()).unwrap(),
    );
    same(
        &t.embedding(&ids8).unwrap(),
        &td.embedding(&ids8.to_dyn()).unwrap(),
    );
    let gids = Tensor::from_slice(&[0u32, 6, 1, 5, 2, 4, 3, 3], &[4, 2], dev).unwrap();
    same(
        &t.gather(1, &gids).unwrap(),
        &td.gather(1, &gids.to_dyn()).unwrap(),
    );
    let src = rand::<T>(&[4, 2], 21, dev);
    let sids = Tensor::from_slice(&[0i64, 6, 1, 5, 2, 4, 3, 1], &[4, 2], dev).unwrap();
    same(
        &t.scatter(1, &sids, &src).unwrap(),
        &td.scatter(1, &sids.to_dyn(), &src.to_dyn()).unwrap(),
    );
    same(
        &t.scatter_add(1, &sids, &src).unwrap(),
        &td.scatter_add(1, &sids.to_dyn(), &src.to_dyn()).unwrap(),
    );
    let rows = rand::<T>(&[2, 7], 22, dev);
    let aids = Tensor::from_slice(&[3u32, 3], &[2], dev).unwrap();
    same(
        &t.index_add(0, &aids, &rows).unwrap(),
        &td.index_add(0, &aids.to_dyn(), &rows.to_dyn()).unwrap(),
    );
    // Sorting.
    let (v, i) = t.sort(true).unwrap();
    let (vd, id) = td.sort(true).unwrap();
    same(&v, &vd);
    same(&i, &id);
    same(&t.argsort(false).unwrap(), &td.argsort(false).unwrap());
    let (v, i) = t.topk(3, true).unwrap();
    let (vd, id) = td.topk(3, true).unwrap();
    same(&v, &vd);
    same(&i, &id);
    // slice_set, in place, through the DynTensor's own storage.
    let mut a = t.copy().unwrap();
    let mut ad = t.copy().unwrap().to_dyn();
    a.slice_set(&rows, 0, 1).unwrap();
    ad.slice_set(&rows.to_dyn(), 0, 1).unwrap();
    same(&a, &ad);
}

#[test]
fn float_ops_match_the_typed_ops_bit_for_bit() {
    for dev in devices() {
        floats::<f32>(&dev);
        floats::<f16>(&dev);
        floats::<bf16>(&dev);
    }
}

#[test]
fn indexing_and_sorting_match_the_typed_ops_for_every_dtype() {
    for dev in devices() {
        every_dtype::<f32>(&dev);
        every_dtype::<f16>(&dev);
        every_dtype::<bf16>(&dev);
        every_dtype::<u8>(&dev);
        every_dtype::<u32>(&dev);
        every_dtype::<i64>(&dev);
    }
}

#[test]
fn slice_set_writes_in_place_when_nothing_else_shares_the_storage() {
    let dev = Device::emulator(WaveSize::Wave64);
    let mut cache = Tensor::<f32>::zeros(&[2, 8], &dev).unwrap().to_dyn();
    let before = std::sync::Arc::as_ptr(cache.shared_storage());
    let kv = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2], &dev)
        .unwrap()
        .to_dyn();
    cache.slice_set(&kv, 1, 3).unwrap();
    assert_eq!(std::sync::Arc::as_ptr(cache.shared_storage()), before);
    let mut want = vec![0.0; 16];
    (want[3], want[4], want[11], want[12]) = (1.0, 2.0, 3.0, 4.0);
    assert_eq!(cache.to_f64_vec().unwrap(), want);
    // Shared: copy on write, the other view unchanged.
    let view = cache.clone();
    cache.slice_set(&kv, 1, 0).unwrap();
    assert_eq!(view.to_f64_vec().unwrap(), want);
    assert_ne!(std::sync::Arc::as_ptr(cache.shared_storage()), before);
}

#[test]
fn mismatched_and_integer_inputs_are_typed_errors() {
    let dev = Device::Cpu;
    let x = Tensor::<f32>::zeros(&[2, 64], &dev).unwrap().to_dyn();
    let h = Tensor::<f16>::zeros(&[64], &dev).unwrap().to_dyn();
    let i = Tensor::<u32>::zeros(&[2, 64], &dev).unwrap().to_dyn();
    let iw = Tensor::<u32>::zeros(&[64], &dev).unwrap().to_dyn();
    assert!(matches!(
        x.rms_norm(&h, 1e-6),
        Err(Error::DTypeMismatch {
            op: "rms_norm",
            lhs: DType::F32,
            rhs: DType::F16
        })
    ));
    assert!(matches!(
        i.rms_norm(&iw, 1e-6),
        Err(Error::UnsupportedDType {
            dtype: DType::U32,
            ..
        })
    ));
    assert!(matches!(
        x.matmul(&h),
        Err(Error::DTypeMismatch { op: "matmul", .. })
    ));
    assert!(matches!(
        i.matmul(&i),
        Err(Error::UnsupportedDType {
            dtype: DType::U32,
            ..
        })
    ));
    // Float ids are refused, naming the ids.
    assert!(matches!(
        x.index_select(0, &x),
        Err(Error::UnsupportedDType {
            op: "index_select (ids)",
            dtype: DType::F32
        })
    ));
    let q = Tensor::<f32>::zeros(&[1, 1, 2, 64], &dev).unwrap().to_dyn();
    let qh = Tensor::<f16>::zeros(&[1, 1, 2, 64], &dev).unwrap().to_dyn();
    assert!(matches!(
        q.attention(&qh, &qh, &DynAttentionOptions::new()),
        Err(Error::DTypeMismatch {
            op: "attention",
            ..
        })
    ));
    let mut cache = x.clone();
    assert!(matches!(
        cache.slice_set(&h, 0, 0),
        Err(Error::DTypeMismatch {
            op: "slice_set",
            ..
        })
    ));
}
