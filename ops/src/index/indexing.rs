//! Indexing: `index_select`, `embedding`, `gather` and `slice_set` (the one
//! in-place op): API, Cpu implementation, kernel path.
//!
//! The kernels move elements as words of their width (one kernel per width
//! and id type serves every dtype). An id outside its dim is
//! [`HostError::IdOutOfRange`](ferrocm_host::Error::IdOutOfRange) naming the
//! op, the id, its position in the ids and the dim's size: from the op
//! itself on the Cpu; on a kernel device from the next wait (`to_vec`,
//! `synchronize`), as the kernel reports it through the device's fault
//! words without making the op wait. A kernel never uses a bad id as an
//! offset (it writes zeros there instead).

use crate::core::dim::Dim;
use crate::core::dtype::WithDType;
use crate::core::error::{Error, Result};
use crate::core::layout::Layout;
use crate::core::storage::Storage;
use crate::core::tensor::{BLOCK, Tensor};
use crate::engine::kernels::Strided;
use crate::engine::{self, Op};
use ferrocm_host::{Device, DeviceBuffer, ID_OUT_OF_RANGE, In, LaunchConfig, Out};
use ferrocm_kernels::elem::Elem;
use ferrocm_kernels::index::{CopyIntoKernel, IdKernels, ScatterKernels, W128};
use rayon::prelude::*;
use std::sync::Arc;

/// A type that can be an id: u8, u32 or i64 (a negative i64 id is out of
/// range, as is any id not below its dim's size).
///
/// ```
/// use ferrocm_ops::{Device, IdType, Tensor};
/// fn first_rows<I: IdType>(t: &Tensor<f32>, ids: &Tensor<I>) -> ferrocm_ops::Result<Tensor<f32>> {
///     t.index_select(0, ids)
/// }
/// let t = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3, 1], &Device::Cpu)?;
/// let ids = Tensor::from_slice(&[2i64, 0], &[2], &Device::Cpu)?;
/// assert_eq!(first_rows(&t, &ids)?.to_vec()?, vec![3.0, 1.0]);
/// # Ok::<(), ferrocm_ops::Error>(())
/// ```
pub trait IdType: WithDType<Kernel: IdKernels + Elem> {}
impl IdType for u8 {}
impl IdType for u32 {}
impl IdType for i64 {}

/// The error of `id` at `position` of the ids given to `op`, for a dim of `size`.
pub(crate) fn id_error(
    op: &'static str,
    id: i64,
    position: usize,
    size: usize,
    dev: &Device,
) -> Error {
    Error::Host(ferrocm_host::Error::IdOutOfRange {
        op: op.into(),
        id,
        position: position as u64,
        size: size as u64,
        device: dev.to_string(),
    })
}

/// The ids of a contiguous host slice as i64, and the first outside `0..size`.
fn first_bad_id<I: IdType>(ids: &[I], size: usize) -> Option<(usize, i64)> {
    ids.iter().enumerate().find_map(|(p, &id)| {
        let id = id.to_kernel().to_i64();
        (id < 0 || id as u64 >= size as u64).then_some((p, id))
    })
}

/// A dense buffer's memory as words of `W` (same bytes).
fn words<W: bytemuck::Pod, T: WithDType>(b: &DeviceBuffer<T>) -> &DeviceBuffer<W> {
    b.as_raw()
        .typed::<W>()
        .expect("the width divides the buffer")
}

impl<T: WithDType> Tensor<T> {
    /// The slices of `self` at `ids` along `dim`: the result has `self`'s
    /// shape with `dim` replaced by `ids.len()`, and its slice `i` along
    /// `dim` is `self`'s slice `ids[i]` (as `torch.index_select`). Ids may
    /// repeat; a strided `self` is copied to contiguous first.
    ///
    /// ```
    /// # use ferrocm_ops::WaveSize;
    /// use ferrocm_ops::{Device, Tensor};
    /// let dev = Device::emulator(WaveSize::Wave32);
    /// let t = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2], &dev)?;
    /// let ids = Tensor::from_slice(&[2u32, 0, 2], &[3], &dev)?;
    /// assert_eq!(t.index_select(0, &ids)?.to_vec()?, vec![5.0, 6.0, 1.0, 2.0, 5.0, 6.0]);
    /// assert_eq!(t.index_select(-1, &ids.narrow(0, 1, 1)?)?.to_vec()?, vec![1.0, 3.0, 5.0]);
    /// // An id past the dim: an error naming the op, the id, its position and
    /// // the size (on the Cpu from the op, on a kernel device from the next wait).
    /// let (t, bad) = (t.to_device(&Device::Cpu)?, Tensor::from_slice(&[0i64, 3], &[2], &Device::Cpu)?);
    /// let e = t.index_select(0, &bad).unwrap_err();
    /// assert!(e.to_string().contains("index_select: id 3 at position 1 is out of range for a dim of size 3"));
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::DimOutOfRange`]; [`Error::BadParameter`] when `ids` is not
    /// 1-D; [`Error::DeviceMismatch`]; an id outside `0..self.shape()[dim]`
    /// is [`HostError::IdOutOfRange`](ferrocm_host::Error::IdOutOfRange)
    /// (from this call on the Cpu, from the next wait on a kernel device);
    /// [`Error::Host`] when allocation or the launch fails.
    pub fn index_select<I: IdType>(&self, dim: impl Dim, ids: &Tensor<I>) -> Result<Self> {
        let dim = crate::core::dim::resolve("index_select", dim, self.shape())?;
        if ids.rank() != 1 {
            return Err(Error::BadParameter {
                op: "index_select",
                what: format!("ids must be 1-D, got shape {:?}", ids.shape()),
            });
        }
        self.select_rows("index_select", dim, ids)
    }

    /// Rows of a 2-D table (`[vocab, hidden]`) at `ids` of any shape: the
    /// result has shape `ids.shape() + [hidden]` (an embedding lookup;
    /// `index_select` along dim 0 of the flattened ids).
    ///
    /// ```
    /// # use ferrocm_ops::WaveSize;
    /// use ferrocm_ops::{Device, Tensor, bf16};
    /// let dev = Device::emulator(WaveSize::Wave64);
    /// let table = Tensor::<bf16>::arange(0, 12, &dev)?.reshape(&[4, 3])?;
    /// let ids = Tensor::from_slice(&[3u32, 1, 1, 0], &[2, 2], &dev)?;
    /// let e = table.embedding(&ids)?;
    /// assert_eq!(e.shape(), &[2, 2, 3]);
    /// assert_eq!(e.to_vec()?[..3], [bf16::from_f32(9.0), bf16::from_f32(10.0), bf16::from_f32(11.0)]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::BadParameter`] naming the shape when `self` is not 2-D; otherwise as
    /// [`Tensor::index_select`].
    pub fn embedding<I: IdType>(&self, ids: &Tensor<I>) -> Result<Self> {
        if self.rank() != 2 {
            return Err(Error::BadParameter {
                op: "embedding",
                what: format!(
                    "the table must be 2-D (vocab, hidden), got shape {:?}",
                    self.shape()
                ),
            });
        }
        let flat = ids.contiguous()?.reshape(&[ids.elem_count()])?;
        let mut shape = ids.shape().to_vec();
        shape.push(self.shape()[1]);
        self.select_rows("embedding", 0, &flat)?.reshape(&shape)
    }

    fn select_rows<I: IdType>(
        &self,
        op: &'static str,
        dim: usize,
        ids: &Tensor<I>,
    ) -> Result<Self> {
        self.same_device(op, ids)?;
        let src = self.contiguous()?;
        let ids = ids.contiguous()?;
        let shape = self.shape();
        let mut out_shape = shape.to_vec();
        out_shape[dim] = ids.elem_count();
        let out = self
            .device()
            .alloc::<T>(crate::core::layout::checked_count(
                op,
                &out_shape,
                size_of::<T>(),
            )?)?;
        let sel = IndexSelect {
            op,
            src: src.buf(),
            src_offset: src.layout.offset(),
            ids: &ids,
            outer: shape[..dim].iter().product(),
            size: shape[dim],
            inner: shape[dim + 1..].iter().product(),
            out,
        };
        Ok(Tensor::from_parts(
            engine::run(self.device(), sel)?,
            &out_shape,
        ))
    }
}

/// Rows `ids` (contiguous, any shape, on `src`'s device) of a buffer of
/// `rows` rows of `inner` elements from element `offset`: a buffer of
/// `ids.elem_count()` rows (quantized `embedding`: rows of block bytes).
/// An id outside `0..rows` is an error as for [`Tensor::index_select`].
pub(crate) fn select_buffer_rows<T: WithDType, I: IdType>(
    op: &'static str,
    src: &DeviceBuffer<T>,
    offset: usize,
    rows: usize,
    inner: usize,
    ids: &Tensor<I>,
) -> Result<DeviceBuffer<T>> {
    let dev = src.device();
    if ids.device() != dev {
        return Err(Error::DeviceMismatch {
            op,
            lhs: dev.to_string(),
            rhs: ids.device().to_string(),
        });
    }
    let n = ids.elem_count();
    let out = dev.alloc::<T>(crate::core::layout::checked_count(
        op,
        &[n, inner],
        size_of::<T>(),
    )?)?;
    let sel = IndexSelect {
        op,
        src,
        src_offset: offset,
        ids,
        outer: 1,
        size: rows,
        inner,
        out,
    };
    engine::run(dev, sel)
}

/// `out[o, i, :] = src[o, ids[i], :]` over a contiguous `[outer, size, inner]` source.
struct IndexSelect<'a, T: WithDType, I: IdType> {
    op: &'static str,
    src: &'a DeviceBuffer<T>,
    src_offset: usize,
    ids: &'a Tensor<I>,
    outer: usize,
    size: usize,
    inner: usize,
    out: DeviceBuffer<T>,
}

impl<T: WithDType, I: IdType> Op for IndexSelect<'_, T, I> {
    type Output = DeviceBuffer<T>;

    fn cpu(mut self) -> Result<DeviceBuffer<T>> {
        let n = self.ids.elem_count();
        let ids = &crate::engine::cpu::host(self.ids.buf())[self.ids.layout.offset()..][..n];
        if let Some((p, id)) = first_bad_id(ids, self.size) {
            return Err(id_error(self.op, id, p, self.size, &Device::Cpu));
        }
        let (inner, size) = (self.inner, self.size);
        if inner == 0 || n == 0 {
            return Ok(self.out);
        }
        let src = &crate::engine::cpu::host(self.src)[self.src_offset..];
        // Rows of `inner`, grouped so each task moves at least ~16K elements.
        let per_task = (1 << 14) / inner + 1;
        crate::engine::cpu::host_mut(&mut self.out)
            .par_chunks_mut(per_task * inner)
            .enumerate()
            .for_each(|(t, chunk)| {
                for (k, row) in chunk.chunks_mut(inner).enumerate() {
                    let r = t * per_task + k;
                    let (o, i) = (r / n, r % n);
                    let from = (o * size + ids[i].to_kernel().to_i64() as usize) * inner;
                    row.copy_from_slice(&src[from..from + inner]);
                }
            });
        Ok(self.out)
    }

    fn kernels(self, dev: &Device) -> Result<DeviceBuffer<T>> {
        let n = self.ids.elem_count();
        if self.out.is_empty() {
            return Ok(self.out);
        }
        let bytes = size_of::<T>();
        let row_bytes = self.inner * bytes;
        let at = self.src_offset * bytes;
        // 16-byte words when rows, the source's start and its buffer allow.
        if row_bytes.is_multiple_of(16)
            && at.is_multiple_of(16)
            && self.src.as_raw().len_bytes().is_multiple_of(16)
        {
            self.launch::<W128>(dev, I::Kernel::SELECT_W128, n, row_bytes / 16, at / 16)?;
        } else {
            match bytes {
                1 => self.launch::<u8>(dev, I::Kernel::SELECT_W8, n, self.inner, at)?,
                2 => self.launch::<u16>(dev, I::Kernel::SELECT_W16, n, self.inner, at / 2)?,
                4 => self.launch::<u32>(dev, I::Kernel::SELECT_W32, n, self.inner, at / 4)?,
                _ => self.launch::<u64>(dev, I::Kernel::SELECT_W64, n, self.inner, at / 8)?,
            }
        }
        Ok(self.out)
    }
}

impl<T: WithDType, I: IdType> IndexSelect<'_, T, I> {
    /// Launches `index_select_{W}`: rows of `inner` words, the source from word `at`.
    fn launch<W: bytemuck::Pod>(
        &self,
        dev: &Device,
        kernel: ferrocm_kernels::host::KernelRef<
            ferrocm_kernels::index::IndexSelectArgs<W, I::Kernel>,
        >,
        n: usize,
        inner: usize,
        at: usize,
    ) -> Result<()> {
        let rows = (self.outer * n) as u64;
        // Rows shorter than the workgroup share one.
        let per_group = (BLOCK as usize / inner).max(1) as u64;
        let src_words = self.outer * self.size * inner;
        let channel = dev.fault_channel(self.op, ID_OUT_OF_RANGE)?;
        dev.launch_typed(
            kernel,
            // The kernel waits for the prior grids first: the next launch
            // overlaps this one's last workgroups (embedding on an H100:
            // see docs/h100-bench.md).
            LaunchConfig::rows(rows.div_ceil(per_group), BLOCK, 0).starting_early(),
            (
                Out::new(words::<W, T>(&self.out)),
                In::range(words::<W, T>(self.src), at, src_words),
                self.ids.input(),
                self.outer as u64,
                n as u64,
                self.size as u64,
                inner as u64,
                channel.status(),
                channel.tag(),
            ),
        )?;
        Ok(())
    }
}

impl<T: WithDType> Tensor<T> {
    /// Elements of `self` picked along `dim` by `ids` (as `torch.gather`):
    /// the result has `ids`' shape and `out[.., j, ..] = self[.., ids[.., j,
    /// ..], ..]` with `j` at `dim` and every other coordinate the same.
    /// `ids` has `self`'s rank and is no larger than `self` in every other
    /// dim. Strided and broadcast `self` and `ids` are read in place.
    ///
    /// ```
    /// # use ferrocm_ops::WaveSize;
    /// use ferrocm_ops::{Device, Tensor};
    /// let dev = Device::emulator(WaveSize::Wave32);
    /// let t = Tensor::from_slice(&[10u32, 11, 12, 20, 21, 22], &[2, 3], &dev)?;
    /// let ids = Tensor::from_slice(&[2i64, 0, 1, 1], &[2, 2], &dev)?;
    /// assert_eq!(t.gather(1, &ids)?.to_vec()?, vec![12, 10, 21, 21]);
    /// let rows = Tensor::from_slice(&[1u8, 0, 1], &[1, 3], &dev)?;
    /// assert_eq!(t.gather(0, &rows)?.to_vec()?, vec![20, 11, 22]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::DimOutOfRange`]; [`Error::ShapeMismatch`] when the ranks
    /// differ or `ids` is larger than `self` in a dim other than `dim`;
    /// [`Error::DeviceMismatch`]; an id outside `0..self.shape()[dim]` as in
    /// [`Tensor::index_select`]; [`Error::Host`].
    pub fn gather<I: IdType>(&self, dim: impl Dim, ids: &Tensor<I>) -> Result<Self> {
        let op = "gather";
        let dim = crate::core::dim::resolve(op, dim, self.shape())?;
        self.same_device(op, ids)?;
        let (shape, ishape) = (self.shape(), ids.shape());
        if ishape.len() != shape.len() || (0..shape.len()).any(|d| d != dim && ishape[d] > shape[d])
        {
            return Err(Error::ShapeMismatch {
                op,
                lhs: shape.to_vec(),
                rhs: ishape.to_vec(),
            });
        }
        // The source with `ids`' shape, `dim`'s stride zeroed: its element at
        // a position is the base the id's offset is added to.
        let mut strides = self.layout.strides().to_vec();
        let dim_stride = std::mem::replace(&mut strides[dim], 0);
        let base = Layout::new(ishape.to_vec(), strides, self.layout.offset())?;
        let out = self.device().alloc::<T>(ids.elem_count())?;
        let g = Gather {
            src: self,
            base,
            dim_stride,
            size: shape[dim],
            ids,
            out,
        };
        Ok(Tensor::from_parts(engine::run(self.device(), g)?, ishape))
    }
}

struct Gather<'a, T: WithDType, I: IdType> {
    src: &'a Tensor<T>,
    /// The source at `ids`' positions with the gathered dim's stride 0.
    base: Layout,
    dim_stride: usize,
    size: usize,
    ids: &'a Tensor<I>,
    out: DeviceBuffer<T>,
}

impl<T: WithDType, I: IdType> Op for Gather<'_, T, I> {
    type Output = DeviceBuffer<T>;

    fn cpu(mut self) -> Result<DeviceBuffer<T>> {
        let ids = self.ids.contiguous()?;
        let ids = &crate::engine::cpu::host(ids.buf())[ids.layout.offset()..][..ids.elem_count()];
        if let Some((p, id)) = first_bad_id(ids, self.size) {
            return Err(id_error("gather", id, p, self.size, &Device::Cpu));
        }
        let src = crate::engine::cpu::host(self.src.buf());
        let (base, ds) = (&self.base, self.dim_stride);
        // Rows of the ids' last dim: one coordinate walk per row, then a
        // stride (0 when gathering along the last dim) per element.
        let last = base.shape().last().copied().unwrap_or(1).max(1);
        let step = base.strides().last().copied().unwrap_or(0);
        let rows_per_task = (1 << 14) / last + 1;
        crate::engine::cpu::host_mut(&mut self.out)
            .par_chunks_mut(rows_per_task * last)
            .enumerate()
            .for_each(|(t, chunk)| {
                for (k, row) in chunk.chunks_mut(last).enumerate() {
                    let e0 = (t * rows_per_task + k) * last;
                    let at = base.offset_of(e0);
                    for (j, (o, id)) in row.iter_mut().zip(&ids[e0..]).enumerate() {
                        *o = src[at + j * step + id.to_kernel().to_i64() as usize * ds];
                    }
                }
            });
        Ok(self.out)
    }

    fn kernels(self, dev: &Device) -> Result<DeviceBuffer<T>> {
        let n = self.out.len();
        if n == 0 {
            return Ok(self.out);
        }
        match size_of::<T>() {
            1 => self.launch::<u8>(dev, I::Kernel::GATHER_W8)?,
            2 => self.launch::<u16>(dev, I::Kernel::GATHER_W16)?,
            4 => self.launch::<u32>(dev, I::Kernel::GATHER_W32)?,
            _ => self.launch::<u64>(dev, I::Kernel::GATHER_W64)?,
        }
        Ok(self.out)
    }
}

impl<T: WithDType, I: IdType> Gather<'_, T, I> {
    fn launch<W: bytemuck::Pod>(
        &self,
        dev: &Device,
        kernel: ferrocm_kernels::host::KernelRef<ferrocm_kernels::index::GatherArgs<W, I::Kernel>>,
    ) -> Result<()> {
        let n = self.out.len();
        // Offsets are relative to the view's first element; every base plus
        // an in-range id's offset lies inside the view's extent.
        let src = In::range(
            words::<W, T>(self.src.buf()),
            self.src.layout.offset(),
            self.src.layout.extent(),
        );
        let s = Strided::in_memory(dev, self.ids.shape(), [&self.base, &self.ids.layout])?;
        let channel = dev.fault_channel("gather", ID_OUT_OF_RANGE)?;
        dev.launch_typed(
            kernel,
            LaunchConfig::elementwise(n as u64, BLOCK),
            (
                Out::new(words::<W, T>(&self.out)),
                src,
                self.ids.input(),
                n as u64,
                self.size as u64,
                self.dim_stride as u64,
                s.ndim(),
                s.arg(),
                channel.status(),
                channel.tag(),
            ),
        )?;
        Ok(())
    }
}

impl<T: WithDType> Tensor<T> {
    /// Writes `src` into `self` at `start..start + src.shape()[dim]` along
    /// `dim` (every other dim the same size), in place: the one op that
    /// changes a tensor. For a KV cache: `cache.slice_set(&new_kv, 2, pos)`
    /// appends `[b, h, t, d]` at position `pos` of a `[b, h, max_t, d]`
    /// cache without copying the rest.
    ///
    /// Safe by copy-on-write: when another tensor (a clone, a view such as
    /// `narrow` or `transpose`, a `DynTensor`) shares `self`'s storage, or
    /// `self` is a broadcast view (one memory element at several
    /// positions), `self` first becomes a contiguous copy of itself, so no
    /// other tensor changes. Drop other views of a cache before writing to
    /// keep the write in place.
    ///
    /// ```
    /// # use ferrocm_ops::WaveSize;
    /// use ferrocm_ops::{Device, Tensor};
    /// let dev = Device::emulator(WaveSize::Wave32);
    /// let mut cache = Tensor::<f32>::zeros(&[2, 4], &dev)?;
    /// let kv = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2], &dev)?;
    /// let before = cache.shared_storage().clone();
    /// cache.slice_set(&kv, 1, 1)?;
    /// assert_eq!(cache.to_vec()?, vec![0.0, 1.0, 2.0, 0.0, 0.0, 3.0, 4.0, 0.0]);
    /// // `before` shared the storage, so the write went to a copy.
    /// drop(before);
    /// let view = cache.clone();
    /// cache.slice_set(&kv.narrow(1, 0, 1)?, -1, 3)?;
    /// assert_eq!(view.to_vec()?, vec![0.0, 1.0, 2.0, 0.0, 0.0, 3.0, 4.0, 0.0]); // unchanged
    /// assert_eq!(cache.to_vec()?, vec![0.0, 1.0, 2.0, 1.0, 0.0, 3.0, 4.0, 3.0]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::DimOutOfRange`]; [`Error::ShapeMismatch`] when the ranks or
    /// the other dims differ; [`Error::NarrowOutOfRange`] when the region
    /// passes the end of `dim`; [`Error::DeviceMismatch`]; [`Error::Host`].
    /// On an error `self` is unchanged.
    pub fn slice_set(&mut self, src: &Tensor<T>, dim: impl Dim, start: usize) -> Result<()> {
        Self::slice_set_parts(&mut self.storage, &mut self.layout, src, dim, start)
    }

    /// [`Tensor::slice_set`] on the parts of a tensor (its storage and
    /// layout), which a `DynTensor` holds too.
    pub(crate) fn slice_set_parts(
        storage: &mut Arc<Storage>,
        layout: &mut Layout,
        src: &Tensor<T>,
        dim: impl Dim,
        start: usize,
    ) -> Result<()> {
        let op = "slice_set";
        let dim = crate::core::dim::resolve(op, dim, layout.shape())?;
        let dev = storage.device().clone();
        if !dev.same_device(src.device()) {
            return Err(Error::DeviceMismatch {
                op,
                lhs: dev.to_string(),
                rhs: src.device().to_string(),
            });
        }
        let (shape, sshape) = (layout.shape(), src.shape());
        if sshape.len() != shape.len()
            || (0..shape.len()).any(|d| d != dim && sshape[d] != shape[d])
        {
            return Err(Error::ShapeMismatch {
                op,
                lhs: shape.to_vec(),
                rhs: sshape.to_vec(),
            });
        }
        let len = sshape[dim];
        if start.checked_add(len).is_none_or(|end| end > shape[dim]) {
            return Err(Error::NarrowOutOfRange {
                op,
                dim,
                start,
                len,
                size: shape[dim],
            });
        }
        if src.elem_count() == 0 {
            return Ok(());
        }
        if Arc::strong_count(storage) > 1 || Arc::weak_count(storage) > 0 || layout.overlaps() {
            let copy = Tensor::<T>::from_storage(storage.clone(), layout.clone())?.copy()?;
            *storage = copy.storage;
            *layout = copy.layout;
        }
        let region = layout.narrow(dim, start, len)?;
        let storage = Arc::get_mut(storage).expect("unique: copied above otherwise");
        match &dev {
            Device::Cpu => {
                let dst: &mut [T] = storage
                    .raw_mut()
                    .typed_mut::<T>()
                    .and_then(|b| b.as_mut_slice())
                    .expect("a Cpu storage of T's");
                let from = crate::engine::cpu::host(src.buf());
                // A run of the innermost (merged) dim at a time: whole rows
                // by memcpy where both sides hold them contiguously.
                let walk = crate::engine::cpu::Walk::new([&region, &src.layout]);
                let [ds, ss] = walk.inner_strides();
                for (_, [d, s], n) in walk.runs(0, src.elem_count()) {
                    if ds == 1 && ss == 1 {
                        dst[d..d + n].copy_from_slice(&from[s..s + n]);
                    } else {
                        for e in 0..n {
                            dst[d + e * ds] = from[s + e * ss];
                        }
                    }
                }
            }
            _ => {
                let dst = storage.raw();
                match size_of::<T>() {
                    1 => copy_into::<u8, T>(&dev, dst, &region, src)?,
                    2 => copy_into::<u16, T>(&dev, dst, &region, src)?,
                    4 => copy_into::<u32, T>(&dev, dst, &region, src)?,
                    _ => copy_into::<u64, T>(&dev, dst, &region, src)?,
                }
            }
        }
        Ok(())
    }
}

/// Launches `copy_into_{W}`: `src` into the `region` of `dst`.
fn copy_into<W: bytemuck::Pod + CopyIntoKernel, T: WithDType>(
    dev: &Device,
    dst: &ferrocm_host::RawBuffer,
    region: &Layout,
    src: &Tensor<T>,
) -> Result<()> {
    let n = src.elem_count() as u64;
    let s = Strided::new(dev, src.shape(), [region, &src.layout])?;
    let [d0, d1] = s.dims();
    let ([a0, a1], [b0, b1]) = (s.strides(0), s.strides(1));
    let dst = dst.typed::<W>().expect("the width divides the buffer");
    dev.launch_typed(
        W::COPY_INTO,
        LaunchConfig::elementwise(n, BLOCK).starting_early(),
        (
            Out::range(dst, region.offset(), region.extent()),
            In::range(
                words::<W, T>(src.buf()),
                src.layout.offset(),
                src.layout.extent(),
            ),
            n,
            s.ndim(),
            s.arg(),
            d0,
            d1,
            a0,
            a1,
            b0,
            b1,
        ),
    )?;
    Ok(())
}

impl<T: WithDType> Tensor<T> {
    /// A copy of `self` with `src`'s elements written at `ids` along `dim`
    /// (as `torch.scatter`): for every position `p` of `ids`, `out[p with
    /// dim = ids[p]] = src[p]`. `ids`, `src` and `self` have one rank; `ids`
    /// is no larger than `src` in any dim and than `self` in the others.
    /// When ids repeat in a column, the last one (along `dim`) wins, on
    /// every device.
    ///
    /// ```
    /// # use ferrocm_ops::WaveSize;
    /// use ferrocm_ops::{Device, Tensor};
    /// let dev = Device::emulator(WaveSize::Wave64);
    /// let t = Tensor::<f32>::zeros(&[2, 4], &dev)?;
    /// let ids = Tensor::from_slice(&[3u32, 0, 3, 1, 1, 2], &[2, 3], &dev)?;
    /// let src = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3], &dev)?;
    /// assert_eq!(t.scatter(1, &ids, &src)?.to_vec()?, vec![2.0, 0.0, 0.0, 3.0, 0.0, 5.0, 6.0, 0.0]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::DimOutOfRange`]; [`Error::ShapeMismatch`] for the shapes
    /// above; [`Error::DeviceMismatch`]; an id outside `0..self.shape()[dim]`
    /// as in [`Tensor::index_select`]; [`Error::Host`].
    pub fn scatter<I: IdType>(
        &self,
        dim: impl Dim,
        ids: &Tensor<I>,
        src: &Tensor<T>,
    ) -> Result<Self> {
        self.scatter_impl("scatter", dim, ids, src, false)
    }

    /// A copy of `self` plus `src`'s elements summed at `ids` along `dim`
    /// (as `torch.scatter_add`; shapes as in [`Tensor::scatter`]). Repeated
    /// ids add up in order along `dim`, deterministically: the same bits on
    /// every run, integers exactly as on the Cpu (wrapping), floats summed
    /// in f32 in the same order as on the Cpu.
    ///
    /// ```
    /// # use ferrocm_ops::WaveSize;
    /// use ferrocm_ops::{Device, Tensor};
    /// let dev = Device::emulator(WaveSize::Wave32);
    /// let t = Tensor::from_slice(&[10u32, 20, 30], &[3], &dev)?;
    /// let ids = Tensor::from_slice(&[2i64, 0, 2, 2], &[4], &dev)?;
    /// let src = Tensor::from_slice(&[1u32, 2, 3, 4], &[4], &dev)?;
    /// assert_eq!(t.scatter_add(0, &ids, &src)?.to_vec()?, vec![12, 20, 38]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Tensor::scatter`].
    pub fn scatter_add<I: IdType>(
        &self,
        dim: impl Dim,
        ids: &Tensor<I>,
        src: &Tensor<T>,
    ) -> Result<Self> {
        self.scatter_impl("scatter_add", dim, ids, src, true)
    }

    /// A copy of `self` plus `src`'s slices added at `ids` along `dim` (as
    /// `torch.index_add`): `out[.., ids[k], ..] += src[.., k, ..]`, with
    /// `ids` 1-D and `src` of `self`'s shape but `ids.len()` along `dim`.
    /// Deterministic as [`Tensor::scatter_add`].
    ///
    /// ```
    /// # use ferrocm_ops::WaveSize;
    /// use ferrocm_ops::{Device, Tensor};
    /// let dev = Device::emulator(WaveSize::Wave64);
    /// let t = Tensor::<f32>::ones(&[3, 2], &dev)?;
    /// let ids = Tensor::from_slice(&[2u8, 2], &[2], &dev)?;
    /// let src = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2], &dev)?;
    /// assert_eq!(t.index_add(0, &ids, &src)?.to_vec()?, vec![1.0, 1.0, 1.0, 1.0, 5.0, 7.0]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::BadParameter`] naming the shapes when `ids` is not 1-D or `src`'s shape is
    /// not as above; otherwise as [`Tensor::scatter`].
    pub fn index_add<I: IdType>(
        &self,
        dim: impl Dim,
        ids: &Tensor<I>,
        src: &Tensor<T>,
    ) -> Result<Self> {
        let op = "index_add";
        let d = crate::core::dim::resolve(op, dim, self.shape())?;
        if ids.rank() != 1 {
            return Err(Error::BadParameter {
                op,
                what: format!("ids must be 1-D, got shape {:?}", ids.shape()),
            });
        }
        let mut want = self.shape().to_vec();
        want[d] = ids.elem_count();
        if src.shape() != &want[..] {
            return Err(Error::BadParameter {
                op,
                what: format!(
                    "src must have shape {want:?} (self's {:?} with dim {d} the {} ids), got {:?}",
                    self.shape(),
                    ids.elem_count(),
                    src.shape()
                ),
            });
        }
        // The ids as one id per source position (a broadcast view): the
        // same scatter, whose columns all share one sorted id list.
        let mut shape = vec![1; self.rank()];
        shape[d] = ids.elem_count();
        let grid = ids.reshape(&shape)?.broadcast_as(&want)?;
        self.scatter_run(op, d, &grid, Some(ids), src, true)
    }

    fn scatter_impl<I: IdType>(
        &self,
        op: &'static str,
        dim: impl Dim,
        ids: &Tensor<I>,
        src: &Tensor<T>,
        add: bool,
    ) -> Result<Self> {
        let dim = crate::core::dim::resolve(op, dim, self.shape())?;
        let (shape, ishape, sshape) = (self.shape(), ids.shape(), src.shape());
        let fits = ishape.len() == shape.len()
            && sshape.len() == shape.len()
            && (0..shape.len())
                .all(|d| ishape[d] <= sshape[d] && (d == dim || ishape[d] <= shape[d]));
        if !fits {
            return Err(Error::ShapeMismatch {
                op,
                lhs: ishape.to_vec(),
                rhs: sshape.to_vec(),
            });
        }
        self.scatter_run(op, dim, ids, None, src, add)
    }

    /// `scatter` / `scatter_add` / `index_add`: `ids` has one id per source
    /// position (for `index_add`, a broadcast of `line`, the 1-D ids).
    fn scatter_run<I: IdType>(
        &self,
        op: &'static str,
        dim: usize,
        ids: &Tensor<I>,
        line: Option<&Tensor<I>>,
        src: &Tensor<T>,
        add: bool,
    ) -> Result<Self> {
        self.same_device(op, ids)?;
        self.same_device(op, src)?;
        let out = self.copy()?;
        if ids.elem_count() == 0 {
            return Ok(out);
        }
        let size = self.shape()[dim];
        let run = Scatter {
            op,
            dim,
            size,
            ids,
            line,
            src,
            add,
            out,
        };
        engine::run(self.device(), run)
    }
}

/// `scatter` / `scatter_add` / `index_add` into `out`, a fresh contiguous
/// copy of the input.
struct Scatter<'a, T: WithDType, I: IdType> {
    op: &'static str,
    dim: usize,
    size: usize,
    /// One id per source position (logical order).
    ids: &'a Tensor<I>,
    /// `index_add`'s 1-D ids (`ids` broadcasts them).
    line: Option<&'a Tensor<I>>,
    src: &'a Tensor<T>,
    add: bool,
    out: Tensor<T>,
}

impl<T: WithDType, I: IdType> Op for Scatter<'_, T, I> {
    type Output = Tensor<T>;

    fn cpu(mut self) -> Result<Tensor<T>> {
        type Acc<T> = <<T as WithDType>::Kernel as Elem>::Acc;
        let checked = self.line.unwrap_or(self.ids).contiguous()?;
        let flat = &crate::engine::cpu::host(checked.buf())[checked.layout.offset()..]
            [..checked.elem_count()];
        if let Some((p, id)) = first_bad_id(flat, self.size) {
            return Err(id_error(self.op, id, p, self.size, &Device::Cpu));
        }
        let (ids, src) = (
            crate::engine::cpu::host(self.ids.buf()),
            crate::engine::cpu::host(self.src.buf()),
        );
        let (grid, dim) = (self.ids.shape().to_vec(), self.dim);
        let ostrides = Layout::contiguous(self.out.shape()).strides().to_vec();
        let storage = Arc::get_mut(&mut self.out.storage).expect("a fresh copy");
        let out = storage
            .raw_mut()
            .typed_mut::<T>()
            .and_then(|b| b.as_mut_slice())
            .expect("a Cpu storage of T's");
        // In logical order of the ids: for one output and column, the
        // positions along `dim` come in increasing order.
        let mut acc: Vec<Acc<T>> = match self.add {
            true => out.iter().map(|x| x.to_kernel().convert()).collect(),
            false => Vec::new(),
        };
        let mut c = vec![0usize; grid.len()];
        for p in 0..self.ids.elem_count() {
            let id = ids[self.ids.layout.offset_of(p)].to_kernel().to_i64() as usize;
            let at: usize = (0..grid.len())
                .map(|d| if d == dim { id } else { c[d] } * ostrides[d])
                .sum();
            let v = src[self.src.layout.offset_of(p_in(&c, self.src.shape()))];
            if self.add {
                acc[at] = acc[at].add(v.to_kernel().convert());
            } else {
                out[at] = v;
            }
            // Next coordinates in the ids' shape.
            for d in (0..grid.len()).rev() {
                c[d] += 1;
                if c[d] < grid[d] {
                    break;
                }
                c[d] = 0;
            }
        }
        if self.add {
            for (o, a) in out.iter_mut().zip(acc) {
                *o = T::from_kernel(a.convert());
            }
        }
        Ok(self.out)
    }

    fn kernels(self, dev: &Device) -> Result<Tensor<T>> {
        // Prove the ids in range first (the scatter kernel skips bad ones).
        let checked = self.line.unwrap_or(self.ids).contiguous()?;
        {
            let channel = dev.fault_channel(self.op, ID_OUT_OF_RANGE)?;
            dev.launch_typed(
                I::Kernel::CHECK,
                LaunchConfig::elementwise(checked.elem_count() as u64, BLOCK),
                (
                    checked.input(),
                    checked.elem_count() as u64,
                    self.size as u64,
                    channel.status(),
                    channel.tag(),
                ),
            )?;
        }
        // Each column's ids sorted (stable): one list for index_add, else
        // the ids with `dim` moved last.
        let rank = self.out.rank();
        let (sorted, perm, k) = match self.line {
            Some(line) => {
                let (s, p) = line.sort(false)?;
                (s, p, line.elem_count())
            }
            None => {
                let mut order: Vec<usize> = (0..rank).filter(|&d| d != self.dim).collect();
                order.push(self.dim);
                let (s, p) = self.ids.permute(&order)?.sort(false)?;
                (s, p, self.ids.shape()[self.dim])
            }
        };
        // Per dim: size, ids extent, column stride in `sorted`, source stride.
        let (shape, ishape) = (self.out.shape(), self.ids.shape());
        let mut col_stride = vec![0usize; rank];
        if self.line.is_none() {
            let mut step = k;
            for d in (0..rank).rev().filter(|&d| d != self.dim) {
                col_stride[d] = step;
                step *= ishape[d];
            }
        }
        let mut words = Vec::with_capacity(4 * rank);
        for d in 0..rank {
            words.extend([
                shape[d] as u64,
                ishape[d] as u64,
                col_stride[d] as u64,
                self.src.layout.strides()[d] as u64,
            ]);
        }
        let layout = dev.upload_words(&words)?;
        let (sorted, perm) = (&sorted, &perm);
        match size_of::<I>() {
            1 => launch_scatter(&self, dev, T::Kernel::SCATTER_U8, sorted, perm, k, &layout)?,
            4 => launch_scatter(&self, dev, T::Kernel::SCATTER_U32, sorted, perm, k, &layout)?,
            _ => launch_scatter(&self, dev, T::Kernel::SCATTER_I64, sorted, perm, k, &layout)?,
        }
        Ok(self.out)
    }
}

/// The position of coordinates `c` in a row-major `shape`.
fn p_in(c: &[usize], shape: &[usize]) -> usize {
    c.iter().zip(shape).fold(0, |acc, (&x, &d)| acc * d + x)
}

/// Launches `scatter_{T}_{J}` (`J`: the id type's word, the same bits as `I`).
fn launch_scatter<T: WithDType, I: IdType, J: bytemuck::Pod>(
    s: &Scatter<'_, T, I>,
    dev: &Device,
    kernel: ferrocm_kernels::host::KernelRef<ferrocm_kernels::index::ScatterArgs<T::Kernel, J>>,
    sorted: &Tensor<I>,
    perm: &Tensor<u32>,
    k: usize,
    layout: &DeviceBuffer<u64>,
) -> Result<()> {
    let n = s.out.elem_count() as u64;
    let src = &s.src.layout;
    dev.launch_typed(
        kernel,
        LaunchConfig::elementwise(n, BLOCK),
        (
            Out::new(s.out.kbuf()),
            In::range(s.src.kbuf(), src.offset(), src.extent()),
            In::new(sorted.buf().view_as::<J>().expect("the id type's width")),
            perm.input(),
            n,
            k as u64,
            s.dim as u32,
            s.out.rank() as u32,
            In::new(layout),
            s.add as u32,
        ),
    )?;
    Ok(())
}

impl crate::DynTensor {
    /// [`Tensor::index_select`] for a dtype and an id type (u8, u32, i64)
    /// known at run time.
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let t = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3], &Device::Cpu)?.to_dyn();
    /// let ids = Tensor::from_slice(&[2u32, 0], &[2], &Device::Cpu)?.to_dyn();
    /// assert_eq!(t.index_select(0, &ids)?.to_f64_vec()?, vec![3.0, 1.0]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::UnsupportedDType`] for ids of another type; as
    /// [`Tensor::index_select`].
    pub fn index_select(&self, dim: impl Dim, ids: &Self) -> Result<Self> {
        crate::core::dyn_tensor::with_ids!(ids, "index_select", |i| {
            crate::core::dyn_tensor::with_dtype!(self, "index_select", |t| Ok(t
                .index_select(dim, &i)?
                .into()))
        })
    }

    /// [`Tensor::embedding`] (rows of a `[vocab, hidden]` table) for a dtype
    /// and an id type known at run time.
    ///
    /// # Errors
    /// [`Error::UnsupportedDType`] for ids of another type; as
    /// [`Tensor::embedding`].
    pub fn embedding(&self, ids: &Self) -> Result<Self> {
        crate::core::dyn_tensor::with_ids!(ids, "embedding", |i| {
            crate::core::dyn_tensor::with_dtype!(self, "embedding", |t| Ok(t.embedding(&i)?.into()))
        })
    }

    /// [`Tensor::gather`] for a dtype and an id type known at run time.
    ///
    /// # Errors
    /// [`Error::UnsupportedDType`] for ids of another type; as
    /// [`Tensor::gather`].
    pub fn gather(&self, dim: impl Dim, ids: &Self) -> Result<Self> {
        crate::core::dyn_tensor::with_ids!(ids, "gather", |i| {
            crate::core::dyn_tensor::with_dtype!(self, "gather", |t| Ok(t.gather(dim, &i)?.into()))
        })
    }

    /// [`Tensor::scatter`] for a dtype and an id type known at run time.
    ///
    /// # Errors
    /// [`Error::DTypeMismatch`] when `src`'s dtype differs; as
    /// [`Tensor::scatter`].
    pub fn scatter(&self, dim: impl Dim, ids: &Self, src: &Self) -> Result<Self> {
        self.same_dtype("scatter", src)?;
        crate::core::dyn_tensor::with_ids!(ids, "scatter", |i| {
            crate::core::dyn_tensor::with_dtype!(self, "scatter", |t| Ok(t
                .scatter(dim, &i, &src.typed()?)?
                .into()))
        })
    }

    /// [`Tensor::scatter_add`] for a dtype and an id type known at run time.
    ///
    /// # Errors
    /// [`Error::DTypeMismatch`] when `src`'s dtype differs; as
    /// [`Tensor::scatter_add`].
    pub fn scatter_add(&self, dim: impl Dim, ids: &Self, src: &Self) -> Result<Self> {
        self.same_dtype("scatter_add", src)?;
        crate::core::dyn_tensor::with_ids!(ids, "scatter_add", |i| {
            crate::core::dyn_tensor::with_dtype!(self, "scatter_add", |t| Ok(t
                .scatter_add(dim, &i, &src.typed()?)?
                .into()))
        })
    }

    /// [`Tensor::index_add`] for a dtype and an id type known at run time.
    ///
    /// # Errors
    /// [`Error::DTypeMismatch`] when `src`'s dtype differs; as
    /// [`Tensor::index_add`].
    pub fn index_add(&self, dim: impl Dim, ids: &Self, src: &Self) -> Result<Self> {
        self.same_dtype("index_add", src)?;
        crate::core::dyn_tensor::with_ids!(ids, "index_add", |i| {
            crate::core::dyn_tensor::with_dtype!(self, "index_add", |t| Ok(t
                .index_add(dim, &i, &src.typed()?)?
                .into()))
        })
    }

    /// [`Tensor::slice_set`] for a dtype known at run time: writes `src`
    /// into `self` at `start..` along `dim`, in place (copy-on-write when
    /// another tensor shares the storage, as for `Tensor`).
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let mut cache = Tensor::<f32>::zeros(&[4], &Device::Cpu)?.to_dyn();
    /// let kv = Tensor::from_slice(&[1.0f32, 2.0], &[2], &Device::Cpu)?.to_dyn();
    /// cache.slice_set(&kv, 0, 1)?;
    /// assert_eq!(cache.to_f64_vec()?, vec![0.0, 1.0, 2.0, 0.0]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::DTypeMismatch`] when `src`'s dtype differs; as
    /// [`Tensor::slice_set`]. On an error `self` is unchanged.
    pub fn slice_set(&mut self, src: &Self, dim: impl Dim, start: usize) -> Result<()> {
        self.same_dtype("slice_set", src)?;
        let (storage, layout) = self.parts_mut();
        crate::core::dyn_tensor::with_dtype!(src, "slice_set", |s| {
            Tensor::slice_set_parts(storage, layout, &s, dim, start)
        })
    }
}
