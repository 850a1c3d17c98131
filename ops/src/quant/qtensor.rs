//! [`QTensor`]: a block-quantized tensor on any device (GGUF's weights), and
//! dequantize: its blocks to f32, f16 or bf16, on the Cpu (rayon) or the
//! `dequant_{format}_{dtype}` kernels, both through the one definition of
//! each format's values in `ferrocm_kernels::quant::blocks`.

use crate::core::layout::checked_count;
use crate::core::storage::{Format, Storage};
use crate::engine::{self, Op};
use crate::quant::format::{QuantFormat, with_block};
use crate::{DType, Device, DynTensor, Error, Result, Tensor, WithDType};
use ferrocm_host::{DeviceBuffer, In, LaunchConfig, Out};
use ferrocm_kernels::elem::{Bf16, Elem, F16};
use ferrocm_kernels::quant::dequant::DequantKernels;
use rayon::prelude::*;
use std::sync::Arc;

/// A block-quantized tensor: GGML blocks of one [`QuantFormat`] holding a
/// row-major `shape` (the last dim is a row, a whole number of blocks; a
/// weight matrix is `[out_features, in_features]`, as GGUF stores it).
///
/// ```
/// use ferrocm_ops::{Device, QTensor, QuantFormat};
/// // Two rows of one Q8_0 block each: d = 1.0 (f16 0x3c00), codes 0..32 and -1.
/// let mut bytes = vec![0x00, 0x3c];
/// bytes.extend((0..32u8).map(|q| q));
/// bytes.extend([0x00, 0x3c]);
/// bytes.extend([0xffu8; 32]);
/// let w = QTensor::from_bytes(&bytes, QuantFormat::Q8_0, &[2, 32], &Device::Cpu)?;
/// assert_eq!((w.rows(), w.cols()), (2, 32));
/// let x = w.dequantize::<f32>()?.to_vec()?;
/// assert_eq!((x[1], x[31], x[32]), (1.0, 31.0, -1.0));
/// // A row that is not whole blocks is refused.
/// assert!(QTensor::from_bytes(&bytes, QuantFormat::Q8_0, &[4, 16], &Device::Cpu).is_err());
/// # Ok::<(), ferrocm_ops::Error>(())
/// ```
#[derive(Clone)]
pub struct QTensor {
    storage: Arc<Storage>,
    format: QuantFormat,
    shape: Vec<usize>,
}

impl std::fmt::Debug for QTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "QTensor<{}>{:?} on {}",
            self.format,
            self.shape,
            self.device()
        )
    }
}

/// Checks `shape` for blocks of `format` and returns its byte size.
pub(crate) fn block_bytes_of(
    op: &'static str,
    format: QuantFormat,
    shape: &[usize],
) -> Result<usize> {
    let n = checked_count(op, shape, 1)?;
    let bad = |what: String| Error::BadParameter { op, what };
    let Some(&row) = shape.last() else {
        return Err(bad(format!(
            "a {format} tensor needs at least one dim (shape [])"
        )));
    };
    if !row.is_multiple_of(format.block_elems()) {
        return Err(bad(format!(
            "shape {shape:?}: rows of {row} elements are not a whole number of {format} blocks of {}",
            format.block_elems()
        )));
    }
    format.bytes_for(n).ok_or(Error::TooLarge {
        op,
        shape: shape.to_vec(),
    })
}

impl QTensor {
    /// Blocks of `format` holding `shape` (row-major), from their bytes as
    /// GGML lays them out (a GGUF tensor's data).
    ///
    /// # Errors
    /// [`Error::BadParameter`] naming the values when the last dim is not a
    /// whole number of blocks, the shape is empty (rank 0), or `bytes` is
    /// not exactly the blocks' size; [`Error::TooLarge`] when the size
    /// overflows; [`Error::Host`] when the upload fails.
    pub fn from_bytes(
        bytes: &[u8],
        format: QuantFormat,
        shape: &[usize],
        device: &Device,
    ) -> Result<Self> {
        let op = "QTensor::from_bytes";
        let want = block_bytes_of(op, format, shape)?;
        if want != bytes.len() {
            return Err(Error::BadParameter {
                op,
                what: format!(
                    "{} bytes given; shape {shape:?} in {format} blocks takes {want}",
                    bytes.len()
                ),
            });
        }
        let buffer = device.upload(bytes)?.into_raw();
        Ok(Self {
            storage: Arc::new(Storage::blocks(buffer, format)),
            format,
            shape: shape.to_vec(),
        })
    }

    /// A quantized view of a [`DynTensor`] holding blocks (no copy).
    ///
    /// ```
    /// use ferrocm_ops::{Device, DynTensor, QTensor, QuantFormat};
    /// let d = DynTensor::from_blocks(&[0u8; 36], QuantFormat::Q4_0, &[2, 32], &Device::Cpu)?;
    /// let q = QTensor::from_dyn(&d)?;
    /// assert_eq!(q.format(), QuantFormat::Q4_0);
    /// assert_eq!(q.to_dyn().shape(), &[2, 32]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::BadParameter`] for dense storage or a view that is not the
    /// whole contiguous storage.
    pub fn from_dyn(t: &DynTensor) -> Result<Self> {
        let op = "QTensor::from_dyn";
        let Format::Blocks(format) = t.format() else {
            return Err(Error::BadParameter {
                op,
                what: format!("{} storage holds no quantized blocks", t.format()),
            });
        };
        let whole = t.layout().is_contiguous()
            && t.layout().offset() == 0
            && block_bytes_of(op, format, t.shape())? == t.shared_storage().len_bytes();
        if !whole {
            return Err(Error::BadParameter {
                op,
                what: format!(
                    "a view {:?} of {format} blocks is not their whole storage",
                    t.layout()
                ),
            });
        }
        Ok(Self {
            storage: t.shared_storage().clone(),
            format,
            shape: t.shape().to_vec(),
        })
    }

    /// As a [`DynTensor`] (same storage).
    pub fn to_dyn(&self) -> DynTensor {
        DynTensor::from_block_storage(self.storage.clone(), &self.shape)
    }

    /// `x` quantized to `format` with GGML's reference quantizer (bit-exact
    /// with `quantize_row_*_ref` for finite input), on the host (rayon),
    /// the blocks then placed on `x`'s device; the last dim must be a whole
    /// number of blocks. Formats with a quantizer: Q4_0, Q4_1, Q5_0, Q5_1,
    /// Q8_0, Q8_1, and Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K with GGML's
    /// non-imatrix reference algorithms (bit-exact with GGML's C compiled
    /// without floating-point contraction).
    ///
    /// ```
    /// use ferrocm_ops::{Device, QTensor, QuantFormat, Tensor};
    /// let x = Tensor::from_slice(&(0..64).map(|i| i as f32 - 32.0).collect::<Vec<_>>(), &[2, 32], &Device::Cpu)?;
    /// let q = QTensor::quantize(&x, QuantFormat::Q8_0)?;
    /// assert_eq!(q.len_bytes(), 2 * 34);
    /// let back = q.dequantize::<f32>()?.to_vec()?;
    /// assert!(back.iter().zip(x.to_vec()?).all(|(a, b)| (a - b).abs() <= 0.13));
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::UnsupportedDType`] for an `x` other than f32, f16, bf16;
    /// [`Error::BadParameter`] for a format without a quantizer or rows
    /// that are not whole blocks; [`Error::Host`] when reading `x` or
    /// uploading fails.
    pub fn quantize<T: WithDType>(x: &Tensor<T>, format: QuantFormat) -> Result<Self> {
        let op = "quantize";
        if !matches!(T::DTYPE, DType::F32 | DType::F16 | DType::BF16) {
            return Err(Error::UnsupportedDType {
                op,
                dtype: T::DTYPE,
            });
        }
        block_bytes_of(op, format, x.shape())?;
        let values: Vec<f32> = x
            .to_vec()?
            .into_iter()
            .map(|v| v.to_kernel().to_f32())
            .collect();
        let bytes = quantize_values(op, &values, format)?;
        Self::from_bytes(&bytes, format, x.shape(), x.device())
    }

    /// The format.
    pub fn format(&self) -> QuantFormat {
        self.format
    }

    /// The logical shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Elements per row (the last dim).
    pub fn cols(&self) -> usize {
        *self.shape.last().expect("rank >= 1 (checked at creation)")
    }

    /// Rows: the product of the dims before the last.
    pub fn rows(&self) -> usize {
        self.shape[..self.shape.len() - 1].iter().product()
    }

    /// Logical elements.
    pub fn elem_count(&self) -> usize {
        self.shape.iter().product()
    }

    /// The device.
    pub fn device(&self) -> &Device {
        self.storage.device()
    }

    /// The blocks' bytes (the storage's size).
    pub fn len_bytes(&self) -> usize {
        self.storage.len_bytes()
    }

    /// The shared storage.
    pub fn shared_storage(&self) -> &Arc<Storage> {
        &self.storage
    }

    /// The blocks' bytes, copied to the host.
    ///
    /// # Errors
    /// [`Error::Host`] when reading back fails.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let raw = self
            .storage
            .raw()
            .typed::<u8>()
            .expect("bytes always divide");
        Ok(raw.download()?)
    }

    /// A copy on `device`, byte for byte.
    ///
    /// ```
    /// # use ferrocm_ops::WaveSize;
    /// use ferrocm_ops::{Device, QTensor, QuantFormat};
    /// let w = QTensor::from_bytes(&[1u8; 17], QuantFormat::Mxfp4, &[32], &Device::Cpu)?;
    /// let e = w.to_device(&Device::emulator(WaveSize::Wave32))?;
    /// assert_eq!(e.to_bytes()?, vec![1u8; 17]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Host`] when reading back, allocating or uploading fails.
    pub fn to_device(&self, device: &Device) -> Result<Self> {
        let raw = self
            .storage
            .raw()
            .typed::<u8>()
            .expect("bytes always divide");
        let buffer = raw.to_device(device)?.into_raw();
        Ok(Self {
            storage: Arc::new(Storage::blocks(buffer, self.format)),
            format: self.format,
            shape: self.shape.clone(),
        })
    }

    /// The values as `T` (f32, f16 or bf16), same shape: each computed in
    /// f32 as GGML's `dequantize_row_*` does, then rounded to `T`.
    ///
    /// ```
    /// # use ferrocm_ops::WaveSize;
    /// use ferrocm_ops::{Device, QTensor, QuantFormat, bf16};
    /// // MXFP4: scale 2^(128 - 127) = 2; code 0x7 is 6.0 (E2M1), 0xF is -6.0.
    /// let mut b = vec![128u8];
    /// b.extend([0xF7u8; 16]);
    /// let w = QTensor::from_bytes(&b, QuantFormat::Mxfp4, &[1, 32], &Device::emulator(WaveSize::Wave64))?;
    /// let x = w.dequantize::<bf16>()?.to_vec()?;
    /// assert_eq!((x[0].to_f32(), x[16].to_f32()), (12.0, -12.0));
    /// assert!(w.dequantize::<u32>().is_err()); // float types only
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::UnsupportedDType`] for a `T` other than f32, f16, bf16;
    /// [`Error::Host`] when allocation or the launch fails.
    pub fn dequantize<T: WithDType>(&self) -> Result<Tensor<T>> {
        let op = "dequantize";
        if !matches!(T::DTYPE, DType::F32 | DType::F16 | DType::BF16) {
            return Err(Error::UnsupportedDType {
                op,
                dtype: T::DTYPE,
            });
        }
        let dev = self.device();
        let out = dev.alloc::<T>(self.elem_count())?;
        let buf = with_block!(self.format, B => {
            let blocks = self.storage.raw().typed::<B>().expect("a whole number of blocks (checked at creation)");
            engine::run(dev, Dequantize { blocks, out })?
        });
        Ok(Tensor::from_parts(buf, &self.shape))
    }

    /// The blocks as `B` (the caller matched `B` to the format, as
    /// `with_block!` does).
    pub(crate) fn blocks<B: bytemuck::Pod>(&self) -> &DeviceBuffer<B> {
        self.storage
            .raw()
            .typed::<B>()
            .expect("a whole number of blocks (checked at creation)")
    }

    /// Rows of a 2-D quantized table (`[vocab, hidden]`, a GGUF's
    /// `token_embd.weight`) at `ids` of any shape, dequantized to `T`
    /// (f32, f16 or bf16): shape `ids.shape() + [hidden]`, each value as
    /// [`QTensor::dequantize`] gives it. Only the chosen rows' blocks are
    /// read: they are gathered as bytes (the `index_select` kernels), then
    /// dequantized.
    ///
    /// ```
    /// # use ferrocm_ops::WaveSize;
    /// use ferrocm_ops::{Device, QTensor, QuantFormat, Tensor};
    /// let dev = Device::emulator(WaveSize::Wave32);
    /// let table: Vec<f32> = (0..4 * 32).map(|i| (i / 32) as f32).collect(); // row r holds r
    /// let t = Tensor::from_slice(&table, &[4, 32], &dev)?;
    /// let q = QTensor::quantize(&t, QuantFormat::Q8_0)?;
    /// let ids = Tensor::from_slice(&[3u32, 0, 2], &[3], &dev)?;
    /// let e = q.embedding::<f32, u32>(&ids)?;
    /// assert_eq!(e.shape(), &[3, 32]);
    /// // 3.0 as Q8_0 keeps: 127 times an f16 scale of 3/127.
    /// assert!(e.to_vec()?[..32].iter().all(|v| (v - 3.0).abs() < 1e-3));
    /// // An id past the table is an error naming it (from the next wait on a kernel device).
    /// let bad = Tensor::from_slice(&[4u32], &[1], &dev)?;
    /// assert!(q.embedding::<f32, u32>(&bad).and_then(|e| Ok(e.to_vec()?)).is_err());
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::BadParameter`] naming the shape when the table is not 2-D;
    /// [`Error::UnsupportedDType`] for a `T` other than f32, f16, bf16;
    /// [`Error::DeviceMismatch`]; an id outside `0..vocab` as for
    /// [`Tensor::index_select`]; [`Error::Host`] when allocation or a
    /// launch fails.
    pub fn embedding<T: WithDType, I: crate::index::indexing::IdType>(
        &self,
        ids: &Tensor<I>,
    ) -> Result<Tensor<T>> {
        let op = "QTensor::embedding";
        if self.shape.len() != 2 {
            return Err(Error::BadParameter {
                op,
                what: format!(
                    "the table must be 2-D (vocab, hidden), got shape {:?}",
                    self.shape
                ),
            });
        }
        if !matches!(T::DTYPE, DType::F32 | DType::F16 | DType::BF16) {
            return Err(Error::UnsupportedDType {
                op,
                dtype: T::DTYPE,
            });
        }
        let (rows, cols) = (self.rows(), self.cols());
        let row_bytes = self.format.bytes_for(cols).expect("checked at creation");
        let flat = ids.contiguous()?;
        let bytes = self
            .storage
            .raw()
            .typed::<u8>()
            .expect("bytes always divide");
        let picked =
            crate::index::indexing::select_buffer_rows(op, bytes, 0, rows, row_bytes, &flat)?;
        let picked = QTensor {
            storage: Arc::new(Storage::blocks(picked.into_raw(), self.format)),
            format: self.format,
            shape: vec![flat.elem_count(), cols],
        };
        let mut shape = ids.shape().to_vec();
        shape.push(cols);
        picked.dequantize::<T>()?.reshape(&shape)
    }

    /// [`QTensor::dequantize`] to a run-time `dtype`.
    ///
    /// # Errors
    /// As [`QTensor::dequantize`].
    pub fn dequantize_to(&self, dtype: DType) -> Result<DynTensor> {
        Ok(match dtype {
            DType::F32 => self.dequantize::<f32>()?.into(),
            DType::F16 => self.dequantize::<half::f16>()?.into(),
            DType::BF16 => self.dequantize::<half::bf16>()?.into(),
            _ => {
                return Err(Error::UnsupportedDType {
                    op: "dequantize",
                    dtype,
                });
            }
        })
    }
}

/// Every block of `blocks` into `out` (f32, f16 or bf16: checked by the caller).
struct Dequantize<'a, B, T> {
    blocks: &'a DeviceBuffer<B>,
    out: DeviceBuffer<T>,
}

/// Blocks per Cpu task: enough work to amortise rayon's split.
const BLOCKS_PER_TASK: usize = 64;

/// A run of blocks dequantized on the Cpu, compiled for AVX2 where the CPU
/// has it (the groups' 16 lanes and the rounding to f16/bf16 then go in
/// vectors).
struct DequantizeBlocks<'a, B, T> {
    dst: &'a mut [T],
    src: &'a [B],
}

impl<B: ferrocm_kernels::quant::blocks::QuantBlock, T: WithDType> crate::engine::cpu::Task
    for DequantizeBlocks<'_, B, T>
{
    type Out = ();
    #[inline(always)]
    fn run(self) {
        for (o, b) in self.dst.chunks_exact_mut(B::ELEMS).zip(self.src) {
            for (g, o) in o.as_chunks_mut::<16>().0.iter_mut().enumerate() {
                for (o, v) in o.iter_mut().zip(b.group16(g)) {
                    *o = T::from_kernel(T::Kernel::from_f32(v));
                }
            }
        }
    }
}

impl<B: DequantKernels + Sync, T: WithDType> Op for Dequantize<'_, B, T> {
    type Output = DeviceBuffer<T>;

    fn cpu(mut self) -> Result<DeviceBuffer<T>> {
        let src = crate::engine::cpu::host(self.blocks);
        let dst = crate::engine::cpu::host_mut(&mut self.out);
        dst.par_chunks_mut(B::ELEMS * BLOCKS_PER_TASK)
            .zip(src.par_chunks(BLOCKS_PER_TASK))
            .for_each(|(dst, src)| crate::engine::cpu::vectorized(DequantizeBlocks { dst, src }));
        Ok(self.out)
    }

    fn kernels(self, dev: &Device) -> Result<DeviceBuffer<T>> {
        let groups = (self.blocks.len() * B::GROUPS) as u64;
        // One or two groups a workitem (`dequant_body`).
        let items = groups.div_ceil(B::DEQUANT_GROUPS as u64);
        let cfg = LaunchConfig::linear(items, 256).starting_early();
        let src = In::new(self.blocks);
        match T::DTYPE {
            DType::F32 => {
                let out = self.out.view_as::<f32>().expect("same size");
                dev.launch_typed(B::TO_F32, cfg, (Out::new(out), src, groups))?
            }
            DType::F16 => {
                let out = self.out.view_as::<F16>().expect("same size");
                dev.launch_typed(B::TO_F16, cfg, (Out::new(out), src, groups))?
            }
            DType::BF16 => {
                let out = self.out.view_as::<Bf16>().expect("same size");
                dev.launch_typed(B::TO_BF16, cfg, (Out::new(out), src, groups))?
            }
            dtype => {
                return Err(Error::UnsupportedDType {
                    op: "dequantize",
                    dtype,
                });
            }
        }
        Ok(self.out)
    }
}

/// `values` (a whole number of blocks) quantized block by block, as bytes.
/// `values` (a whole number of `format` blocks) quantized with GGML's
/// reference quantizer of `format`, rayon across blocks.
pub(crate) fn quantize_values(
    op: &'static str,
    values: &[f32],
    format: QuantFormat,
) -> Result<Vec<u8>> {
    use ferrocm_kernels::quant::blocks::*;
    Ok(match format {
        QuantFormat::Q4_0 => quantize_blocks::<BlockQ4_0>(values),
        QuantFormat::Q4_1 => quantize_blocks::<BlockQ4_1>(values),
        QuantFormat::Q5_0 => quantize_blocks::<BlockQ5_0>(values),
        QuantFormat::Q5_1 => quantize_blocks::<BlockQ5_1>(values),
        QuantFormat::Q8_0 => quantize_blocks::<BlockQ8_0>(values),
        QuantFormat::Q8_1 => quantize_blocks::<BlockQ8_1>(values),
        QuantFormat::Q2K => quantize_blocks::<BlockQ2K>(values),
        QuantFormat::Q3K => quantize_blocks::<BlockQ3K>(values),
        QuantFormat::Q4K => quantize_blocks::<BlockQ4K>(values),
        QuantFormat::Q5K => quantize_blocks::<BlockQ5K>(values),
        QuantFormat::Q6K => quantize_blocks::<BlockQ6K>(values),
        QuantFormat::Q8K => quantize_blocks::<BlockQ8K>(values),
        other => {
            return Err(Error::BadParameter {
                op,
                what: format!(
                    "no quantizer for {other} yet (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1 and Q2_K..Q6_K, Q8_K have one)"
                ),
            });
        }
    })
}

fn quantize_blocks<B: ferrocm_kernels::quant::blocks::QuantizeBlock + bytemuck::Pod + Send>(
    values: &[f32],
) -> Vec<u8> {
    let blocks: Vec<B> = values.par_chunks(B::ELEMS).map(B::quantize).collect();
    bytemuck::cast_slice(&blocks).to_vec()
}
