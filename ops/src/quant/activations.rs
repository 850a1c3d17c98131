//! Activations in the 8-bit form the quantized products take
//! ([`Q8Activations`]): `x` rounded per group of 16 to codes `round(v /
//! d)` with `d = amax / 127`, as llama.cpp's mmvq rounds its activations to
//! Q8_1. [`QTensor::forward`](crate::QTensor::forward) rounds `x` itself; a
//! model that produces `x` with an op that can store this form directly
//! ([`Tensor::rms_norm_q8`], [`Tensor::add_rms_norm_q8`],
//! [`Tensor::glu_halves_q8`]) skips that pass and hands the result to
//! [`QTensor::forward_q8`](crate::QTensor::forward_q8): the same bits, one
//! launch fewer per product on a GPU.

use crate::engine::{self, Op};
use crate::{DType, Device, Error, Result, Tensor, WithDType};
use ferrocm_host::{DeviceBuffer, In, LaunchConfig, Out};
use ferrocm_kernels::elem::Elem;
use ferrocm_kernels::quant::matvec::{QuantizeXKernel, quantize_x_group, x_code_words};
use rayon::prelude::*;

/// A tensor `[.., k]` (`k` a multiple of 16) in 8-bit form: per group of 16
/// consecutive elements of a row, the codes and `(d, d * Σ codes)` (see
/// [`ferrocm_kernels::quant::matvec::quantize_x_group`], the one definition
/// the Cpu and the kernels share). A group holding NaN or ±inf has `d` =
/// NaN, so the products it feeds are NaN.
///
/// ```
/// # use ferrocm_ops::WaveSize;
/// use ferrocm_ops::quant::Q8Activations;
/// use ferrocm_ops::{Device, Tensor};
/// let dev = Device::emulator(WaveSize::Wave32);
/// let mut v = vec![0.0f32; 16];
/// v[0] = 1.0;
/// v[1] = -0.5;
/// let q = Q8Activations::quantize(&Tensor::from_slice(&v, &[1, 16], &dev)?)?;
/// let (codes, scales) = q.to_host()?;
/// assert_eq!((codes[0], codes[1], codes[2]), (127, -64, 0)); // round(-63.5) = -64
/// assert_eq!(scales, vec![1.0 / 127.0]);
/// # Ok::<(), ferrocm_ops::Error>(())
/// ```
#[derive(Debug)]
pub struct Q8Activations {
    /// Four codes per word, four words per group, in row order; on a
    /// device that runs kernels, then the paired copy where rows hold
    /// whole units of 32
    /// ([`X8Out`](ferrocm_kernels::quant::matvec::X8Out)).
    pub(crate) codes: DeviceBuffer<u32>,
    /// Per group: `d` in the low 32 bits, `d * Σ codes` in the high (f32 bits).
    pub(crate) meta: DeviceBuffer<u64>,
    shape: Vec<usize>,
}

impl Q8Activations {
    /// `x` (f32, f16 or bf16, any layout) rounded to 8 bits per group of 16
    /// along its last dim.
    ///
    /// # Errors
    /// [`Error::UnsupportedDType`] for an integer `x`; [`Error::BadParameter`]
    /// for a rank-0 `x` or a last dim that is not a multiple of 16;
    /// [`Error::Host`] (memory, launch).
    pub fn quantize<T: WithDType>(x: &Tensor<T>) -> Result<Self> {
        Self::quantize_with(x, true)
    }

    /// [`Q8Activations::quantize`], with the paired copy of the codes only
    /// where `paired` asks for it (and the device runs kernels).
    pub(crate) fn quantize_with<T: WithDType>(x: &Tensor<T>, paired: bool) -> Result<Self> {
        let op = "Q8Activations::quantize";
        check_shape::<T>(op, x.shape())?;
        let x = x.contiguous()?;
        let dev = x.device();
        let q = Self::alloc_on(dev, x.shape(), paired && !matches!(dev, Device::Cpu))?;
        let (codes, meta) = engine::run(
            dev,
            QuantizeX {
                x: &x,
                codes: q.codes,
                meta: q.meta,
            },
        )?;
        Ok(Self::from_parts(codes, meta, x.shape()))
    }

    /// Storage for `shape`'s groups, filled by a kernel that produces them
    /// (on a device that runs kernels, with room for the paired copy of
    /// the codes, [`x_code_words`]).
    pub(crate) fn alloc(dev: &Device, shape: &[usize]) -> Result<Self> {
        Self::alloc_on(dev, shape, !matches!(dev, Device::Cpu))
    }

    /// Storage for `shape`'s groups, with room for the paired copy where
    /// `paired` asks for it and rows hold whole units.
    fn alloc_on(dev: &Device, shape: &[usize], paired: bool) -> Result<Self> {
        let elems = shape.iter().product::<usize>();
        let words = if paired {
            x_code_words(elems, shape.last().copied().unwrap_or(0))
        } else {
            elems / 4
        };
        Ok(Self::from_parts(
            dev.alloc::<u32>(words)?,
            dev.alloc::<u64>(elems / 16)?,
            shape,
        ))
    }

    pub(crate) fn from_parts(
        codes: DeviceBuffer<u32>,
        meta: DeviceBuffer<u64>,
        shape: &[usize],
    ) -> Self {
        Self {
            codes,
            meta,
            shape: shape.to_vec(),
        }
    }

    /// Whether the codes hold their paired copy after the row order.
    pub(crate) fn paired(&self) -> bool {
        self.codes.len() > 4 * self.meta.len()
    }

    /// The shape of the tensor this rounds, `[.., k]`.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The device the codes live on.
    pub fn device(&self) -> &Device {
        self.codes.device()
    }

    /// The codes (one per element, row-major) and each group's scale `d`,
    /// read back to the host: element `i` stands for `codes[i] *
    /// scales[i / 16]`.
    ///
    /// # Errors
    /// [`Error::Host`] when the read-back fails (or a kernel on the device
    /// reported a fault since the last wait).
    pub fn to_host(&self) -> Result<(Vec<i8>, Vec<f32>)> {
        let words = self.codes.download()?;
        let meta = self.meta.download()?;
        // The row order (a paired copy may follow).
        let codes = words[..4 * meta.len()]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .map(|b| b as i8)
            .collect();
        let scales = meta.iter().map(|&m| f32::from_bits(m as u32)).collect();
        Ok((codes, scales))
    }
}

/// The shape and dtype checks of every op that makes [`Q8Activations`].
pub(crate) fn check_shape<T: WithDType>(op: &'static str, shape: &[usize]) -> Result<()> {
    if !matches!(T::DTYPE, DType::F32 | DType::F16 | DType::BF16) {
        return Err(Error::UnsupportedDType {
            op,
            dtype: T::DTYPE,
        });
    }
    match shape.last() {
        Some(k) if k % 16 == 0 => Ok(()),
        _ => Err(Error::BadParameter {
            op,
            what: format!(
                "the last dim must be a multiple of 16 (the groups of the 8-bit form), shape {shape:?}"
            ),
        }),
    }
}

/// `x` (contiguous) into 8-bit form.
/// A run of groups of 16 of `x` into their codes and meta on the Cpu.
struct QuantizeGroups<'a, T> {
    codes: &'a mut [u32],
    meta: &'a mut [u64],
    x: &'a [T],
}

impl<T: WithDType> crate::engine::cpu::Task for QuantizeGroups<'_, T> {
    type Out = ();
    #[inline(always)]
    fn run(self) {
        for ((c, m), g) in self
            .codes
            .as_chunks_mut::<4>()
            .0
            .iter_mut()
            .zip(self.meta.iter_mut())
            .zip(self.x.as_chunks::<16>().0)
        {
            let v: [f32; 16] = std::array::from_fn(|i| g[i].to_kernel().to_f32());
            let (words, meta) = quantize_x_group(v);
            c.copy_from_slice(&words);
            *m = meta;
        }
    }
}

struct QuantizeX<'a, T: WithDType> {
    x: &'a Tensor<T>,
    codes: DeviceBuffer<u32>,
    meta: DeviceBuffer<u64>,
}

impl<T: WithDType> Op for QuantizeX<'_, T> {
    type Output = (DeviceBuffer<u32>, DeviceBuffer<u64>);

    fn cpu(mut self) -> Result<Self::Output> {
        let off = self.x.layout().offset();
        let x = &crate::engine::cpu::host(self.x.buf())[off..off + self.x.elem_count()];
        let codes = crate::engine::cpu::host_mut(&mut self.codes);
        let meta = crate::engine::cpu::host_mut(&mut self.meta);
        // 256 groups a task, each compiled for AVX2 where the CPU has it
        // (`round` then takes a few vector instructions, not a call).
        codes
            .par_chunks_mut(4 * 256)
            .zip(meta.par_chunks_mut(256))
            .zip(x.par_chunks(16 * 256))
            .for_each(|((codes, meta), x)| {
                crate::engine::cpu::vectorized(QuantizeGroups { codes, meta, x })
            });
        Ok((self.codes, self.meta))
    }

    fn kernels(self, dev: &Device) -> Result<Self::Output> {
        let groups = self.meta.len();
        if groups == 0 {
            return Ok((self.codes, self.meta));
        }
        // Four workitems per group.
        let cfg = LaunchConfig::linear(4 * groups as u64, 256).starting_early();
        let (offset, len) = (self.x.layout().offset(), self.x.elem_count());
        // Rows of k elements; 0: no paired copy to store.
        let k = if self.codes.len() > 4 * groups {
            *self.x.shape().last().expect("rank checked") as u64
        } else {
            0
        };
        macro_rules! go {
            ($t:ty) => {{
                let x = In::range(
                    self.x.buf().view_as::<$t>().expect("same size"),
                    offset,
                    len,
                );
                dev.launch_typed(
                    <$t as QuantizeXKernel>::QUANTIZE_X,
                    cfg,
                    (
                        Out::new(&self.codes),
                        Out::new(&self.meta),
                        x,
                        groups as u64,
                        k,
                    ),
                )?
            }};
        }
        match T::DTYPE {
            DType::F32 => go!(f32),
            DType::F16 => go!(ferrocm_kernels::elem::F16),
            DType::BF16 => go!(ferrocm_kernels::elem::Bf16),
            dtype => {
                return Err(Error::UnsupportedDType {
                    op: "Q8Activations::quantize",
                    dtype,
                });
            }
        }
        Ok((self.codes, self.meta))
    }
}
