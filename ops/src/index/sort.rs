//! Sorting along the last dim (`sort`, `argsort`) and `topk`: API, Cpu
//! implementation, kernel path.
//!
//! Every dtype, ascending or descending, stable (equal elements keep their
//! order), NaN above every number as PyTorch ranks it (last ascending, first
//! descending), -0 equal to +0; rows of any length
//! up to `u32::MAX` (indices are u32). The order is the device layer's
//! [`SortKey`]: each element becomes an unsigned key, equal keys ordered by
//! index. `topk(k, largest)` is exactly the first `k` of
//! `sort(descending = largest)`.

use crate::core::dtype::WithDType;
use crate::core::error::{Error, Result};
use crate::core::tensor::Tensor;
use crate::engine::{self, Op};
use ferrocm_host::{Device, DeviceBuffer, In, LaunchConfig, Out};
use ferrocm_kernels::sort::{
    MERGE_TILE, SORT_BLOCK, SORT_TILE, SortKernels, SortKey, TOPK_LDS_BYTES, TOPK_MAX,
    TOPK_SEGMENT, merge_lds_bytes,
};
use rayon::prelude::*;

/// The key type of `T`'s kernel type.
type Key<T> = <<T as WithDType>::Kernel as SortKey>::Key;

impl<T: WithDType> Tensor<T> {
    /// Sorts each row (the last dim): the sorted values and, for each, its
    /// index in the row (u32). Stable; NaN ranks above every number, as in
    /// PyTorch: last ascending, first descending; a scalar is one row of
    /// one. A strided tensor is copied to contiguous first.
    ///
    /// ```
    /// # use ferrocm_ops::WaveSize;
    /// use ferrocm_ops::{Device, Tensor};
    /// let dev = Device::emulator(WaveSize::Wave64);
    /// let t = Tensor::from_slice(&[3.0f32, f32::NAN, -1.0, 3.0, 0.5, -0.0], &[2, 3], &dev)?;
    /// let (v, i) = t.sort(false)?;
    /// assert_eq!(i.to_vec()?, vec![2, 0, 1, 2, 1, 0]);
    /// let v = v.to_vec()?;
    /// assert_eq!((v[0], v[1]), (-1.0, 3.0));
    /// assert!(v[2].is_nan()); // NaN last
    /// let (_, d) = t.sort(true)?;
    /// assert_eq!(d.to_vec()?, vec![1, 0, 2, 0, 1, 2]); // NaN first descending
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::TooLarge`] when the last dim has more than `u32::MAX`
    /// elements; [`Error::Host`] when allocation or a launch fails.
    pub fn sort(&self, descending: bool) -> Result<(Self, Tensor<u32>)> {
        let (vals, idx) = self.sort_impl(descending, true)?;
        Ok((
            Tensor::from_parts(vals, self.shape()),
            Tensor::from_parts(idx, self.shape()),
        ))
    }

    fn sort_impl(
        &self,
        descending: bool,
        values: bool,
    ) -> Result<(DeviceBuffer<T>, DeviceBuffer<u32>)> {
        // The error names the op the caller called.
        let (x, rows, cols) = self.rows(if values { "sort" } else { "argsort" })?;
        let dev = self.device();
        let out = Sorted {
            vals: dev.alloc::<T>(if values { rows * cols } else { 0 })?,
            idx: dev.alloc::<u32>(rows * cols)?,
        };
        let op = Sort {
            x: &x,
            rows,
            cols,
            descending,
            out,
        };
        engine::run(dev, op)
    }

    /// The indices that sort each row (the last dim): [`Tensor::sort`]'s
    /// second result.
    ///
    /// ```
    /// # use ferrocm_ops::WaveSize;
    /// use ferrocm_ops::{Device, Tensor};
    /// let dev = Device::emulator(WaveSize::Wave32);
    /// let t = Tensor::from_slice(&[5i64, -2, 5, 7], &[4], &dev)?;
    /// assert_eq!(t.argsort(false)?.to_vec()?, vec![1, 0, 2, 3]);
    /// assert_eq!(t.argsort(true)?.to_vec()?, vec![3, 0, 2, 1]); // stable: 0 before 2
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Tensor::sort`].
    pub fn argsort(&self, descending: bool) -> Result<Tensor<u32>> {
        // The indices only: no values written.
        let (_, idx) = self.sort_impl(descending, false)?;
        Ok(Tensor::from_parts(idx, self.shape()))
    }

    /// The `k` largest (`largest`) or smallest elements of each row (the
    /// last dim) in order, and their indices: the first `k` of
    /// `sort(largest)` exactly (ties by lowest index; NaN counts as the
    /// largest, so `topk(k, true)` returns NaNs first, as PyTorch). For `k` up
    /// to 1024 the rows are not sorted: a radix select finds the `k`-th
    /// element and only the `k` winners are sorted.
    ///
    /// ```
    /// # use ferrocm_ops::WaveSize;
    /// use ferrocm_ops::{Device, Tensor};
    /// let dev = Device::emulator(WaveSize::Wave32);
    /// let t = Tensor::from_slice(&[1u8, 9, 4, 9, 0, 7], &[6], &dev)?;
    /// let (v, i) = t.topk(3, true)?;
    /// assert_eq!((v.to_vec()?, i.to_vec()?), (vec![9, 9, 7], vec![1, 3, 5]));
    /// let (v, _) = t.topk(2, false)?;
    /// assert_eq!(v.to_vec()?, vec![0, 1]);
    /// assert!(t.topk(7, true).is_err()); // k past the row
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::BadParameter`] when `k` is larger than the last dim; as
    /// [`Tensor::sort`] otherwise.
    pub fn topk(&self, k: usize, largest: bool) -> Result<(Self, Tensor<u32>)> {
        let (x, rows, cols) = self.rows("topk")?;
        if k > cols {
            return Err(Error::BadParameter {
                op: "topk",
                what: format!("k = {k} is larger than the last dim ({cols})"),
            });
        }
        let mut shape = if self.rank() == 0 {
            vec![1]
        } else {
            self.shape().to_vec()
        };
        *shape.last_mut().expect("rank >= 1") = k;
        if k > TOPK_MAX as usize && !matches!(self.device(), Device::Cpu) {
            // Past the select kernel's k: the first k of the sorted rows.
            let (v, i) = self.sort(largest)?;
            let v = v.reshape(&[rows, cols])?.narrow(1, 0, k)?.contiguous()?;
            let i = i.reshape(&[rows, cols])?.narrow(1, 0, k)?.contiguous()?;
            return Ok((v.reshape(&shape)?, i.reshape(&shape)?));
        }
        let seg = TOPK_SEGMENT as usize;
        if self.device().runs_kernels() && cols >= 4 * seg && k > 0 {
            // A long row: each segment's top k by its own workgroup, then
            // the top k of those winners (kept in segment order, so ties
            // still go to the lowest index) and their row indices.
            let n = (cols / seg) * k;
            let op = TopK {
                x: &x,
                rows,
                cols,
                seg,
                k,
                largest,
                out: Sorted::alloc(self.device(), rows * n)?,
            };
            let (vals, idx) = engine::run(self.device(), op)?;
            let (v, at) = Tensor::from_parts(vals, &[rows, n]).topk(k, largest)?;
            let i = Tensor::from_parts(idx, &[rows, n]).gather(1, &at)?;
            return Ok((v.reshape(&shape)?, i.reshape(&shape)?));
        }
        let op = TopK {
            x: &x,
            rows,
            cols,
            seg: cols.max(1),
            k,
            largest,
            out: Sorted::alloc(self.device(), rows * k)?,
        };
        let (vals, idx) = engine::run(self.device(), op)?;
        Ok((
            Tensor::from_parts(vals, &shape),
            Tensor::from_parts(idx, &shape),
        ))
    }

    /// `self` as contiguous rows of the last dim: (tensor, rows, cols).
    fn rows(&self, op: &'static str) -> Result<(Self, usize, usize)> {
        let cols = self.shape().last().copied().unwrap_or(1);
        if cols > u32::MAX as usize {
            return Err(Error::TooLarge {
                op,
                shape: self.shape().to_vec(),
            });
        }
        let rows = self.elem_count().checked_div(cols).unwrap_or(0);
        Ok((self.contiguous()?, rows, cols))
    }
}

/// The two outputs of a sort or top-k.
struct Sorted<T: WithDType> {
    vals: DeviceBuffer<T>,
    idx: DeviceBuffer<u32>,
}

impl<T: WithDType> Sorted<T> {
    fn alloc(dev: &Device, n: usize) -> Result<Self> {
        Ok(Self {
            vals: dev.alloc::<T>(n)?,
            idx: dev.alloc::<u32>(n)?,
        })
    }
}

/// The sorted `(key, index)` pairs of one row, on the Cpu.
fn sorted_pairs<T: WithDType>(
    row: &[T],
    descending: bool,
    pairs: &mut Vec<(Key<T>, u32)>,
    parallel: bool,
) {
    pairs.clear();
    pairs.extend(
        row.iter()
            .enumerate()
            .map(|(i, x)| (x.to_kernel().sort_key(descending), i as u32)),
    );
    // Distinct pairs: an unstable sort gives the stable order.
    if parallel {
        pairs.par_sort_unstable();
    } else {
        pairs.sort_unstable();
    }
}

struct Sort<'a, T: WithDType> {
    x: &'a Tensor<T>,
    rows: usize,
    cols: usize,
    descending: bool,
    out: Sorted<T>,
}

impl<T: WithDType> Op for Sort<'_, T> {
    type Output = (DeviceBuffer<T>, DeviceBuffer<u32>);

    fn cpu(mut self) -> Result<Self::Output> {
        let (cols, desc) = (self.cols, self.descending);
        if self.rows == 0 || cols == 0 {
            return Ok((self.out.vals, self.out.idx));
        }
        let x =
            &crate::engine::cpu::host(self.x.buf())[self.x.layout.offset()..][..self.rows * cols];
        // Few rows: each sorted by every thread; many: a row per task.
        let parallel = self.rows < rayon::current_num_threads();
        let vals = crate::engine::cpu::host_mut(&mut self.out.vals);
        let idx = crate::engine::cpu::host_mut(&mut self.out.idx);
        let indices = |pairs: &[(Key<T>, u32)], i: &mut [u32]| {
            for (i, &(_, at)) in i.iter_mut().zip(pairs) {
                *i = at;
            }
        };
        if vals.is_empty() {
            // argsort: the indices only.
            idx.par_chunks_mut(cols)
                .zip(x.par_chunks(cols))
                .for_each_init(Vec::new, |pairs, (i, row)| {
                    sorted_pairs(row, desc, pairs, parallel);
                    indices(pairs, i);
                });
        } else {
            vals.par_chunks_mut(cols)
                .zip(idx.par_chunks_mut(cols))
                .zip(x.par_chunks(cols))
                .for_each_init(Vec::new, |pairs, ((v, i), row)| {
                    sorted_pairs(row, desc, pairs, parallel);
                    indices(pairs, i);
                    for (v, &(_, at)) in v.iter_mut().zip(pairs.iter()) {
                        *v = row[at as usize];
                    }
                });
        }
        Ok((self.out.vals, self.out.idx))
    }

    fn kernels(self, dev: &Device) -> Result<Self::Output> {
        let (rows, cols) = (self.rows as u64, self.cols as u64);
        let desc = self.descending as u32;
        if rows == 0 || cols == 0 {
            return Ok((self.out.vals, self.out.idx));
        }
        // No values buffer (argsort): the kernels write indices only.
        let vals = || match self.out.vals.is_empty() {
            true => Out::null(),
            false => Out::new(self.out.vals.view_as::<T::Kernel>().expect("same size")),
        };
        let lds = SORT_TILE * (size_of::<Key<T>>() as u32 + 4);
        if cols <= SORT_TILE as u64 {
            dev.launch_typed(
                T::Kernel::SORT_ROWS,
                LaunchConfig::rows(rows, SORT_BLOCK, lds),
                (
                    vals(),
                    Out::new(&self.out.idx),
                    self.x.input(),
                    rows,
                    cols,
                    desc,
                ),
            )?;
            return Ok((self.out.vals, self.out.idx));
        }
        // Sorted tiles, then runs merged pairwise into twice their width.
        let n = self.rows * self.cols;
        let (mut keys, mut idx) = (dev.alloc::<Key<T>>(n)?, dev.alloc::<u32>(n)?);
        let (mut keys2, mut idx2) = (dev.alloc::<Key<T>>(n)?, dev.alloc::<u32>(n)?);
        dev.launch_typed(
            T::Kernel::SORT_TILES,
            LaunchConfig::rows(rows * cols.div_ceil(SORT_TILE as u64), SORT_BLOCK, lds),
            (
                Out::new(&keys),
                Out::new(&idx),
                self.x.input(),
                rows,
                cols,
                desc,
            ),
        )?;
        let mut width = SORT_TILE as u64;
        while width < cols {
            let last = 2 * width >= cols;
            let tiles = rows * cols.div_ceil(MERGE_TILE as u64);
            dev.launch_typed(
                T::Kernel::SORT_MERGE,
                LaunchConfig::rows(tiles, SORT_BLOCK, merge_lds_bytes::<Key<T>>()),
                (
                    if last { Out::null() } else { Out::new(&keys2) },
                    Out::new(if last { &self.out.idx } else { &idx2 }),
                    In::new(&keys),
                    In::new(&idx),
                    rows,
                    cols,
                    width,
                    vals(),
                    self.x.input(),
                    last as u32,
                ),
            )?;
            std::mem::swap(&mut keys, &mut keys2);
            std::mem::swap(&mut idx, &mut idx2);
            width *= 2;
        }
        Ok((self.out.vals, self.out.idx))
    }
}

struct TopK<'a, T: WithDType> {
    x: &'a Tensor<T>,
    rows: usize,
    cols: usize,
    /// Segment length (the kernels' `seg`; the Cpu takes whole rows).
    seg: usize,
    k: usize,
    largest: bool,
    out: Sorted<T>,
}

impl<T: WithDType> Op for TopK<'_, T> {
    type Output = (DeviceBuffer<T>, DeviceBuffer<u32>);

    fn cpu(mut self) -> Result<Self::Output> {
        let (cols, k, desc) = (self.cols, self.k, self.largest);
        if self.rows == 0 || k == 0 {
            return Ok((self.out.vals, self.out.idx));
        }
        let x =
            &crate::engine::cpu::host(self.x.buf())[self.x.layout.offset()..][..self.rows * cols];
        let vals = crate::engine::cpu::host_mut(&mut self.out.vals);
        let idx = crate::engine::cpu::host_mut(&mut self.out.idx);
        vals.par_chunks_mut(k)
            .zip(idx.par_chunks_mut(k))
            .zip(x.par_chunks(cols))
            .for_each_init(Vec::new, |pairs: &mut Vec<(Key<T>, u32)>, ((v, i), row)| {
                pairs.clear();
                pairs.extend(
                    row.iter()
                        .enumerate()
                        .map(|(i, x)| (x.to_kernel().sort_key(desc), i as u32)),
                );
                // The k smallest pairs, then those k in order.
                if k < cols {
                    pairs.select_nth_unstable(k - 1);
                }
                pairs[..k].sort_unstable();
                for ((v, i), &(_, at)) in v.iter_mut().zip(i.iter_mut()).zip(pairs.iter()) {
                    *v = row[at as usize];
                    *i = at;
                }
            });
        Ok((self.out.vals, self.out.idx))
    }

    fn kernels(self, dev: &Device) -> Result<Self::Output> {
        if self.rows > 0 && self.k > 0 {
            let vals = self.out.vals.view_as::<T::Kernel>().expect("same size");
            let nseg = (self.cols / self.seg).max(1);
            let units = self.rows * nseg;
            dev.launch_typed(
                T::Kernel::TOPK,
                LaunchConfig::rows(units as u64, SORT_BLOCK, TOPK_LDS_BYTES),
                (
                    Out::new(vals),
                    Out::new(&self.out.idx),
                    self.x.input(),
                    self.rows as u64,
                    self.cols as u64,
                    self.seg as u64,
                    nseg as u32,
                    self.k as u32,
                    self.largest as u32,
                ),
            )?;
        }
        Ok((self.out.vals, self.out.idx))
    }
}

impl crate::DynTensor {
    /// [`Tensor::sort`] along the last dim for a dtype known at run time:
    /// the sorted values and their u32 indices.
    ///
    /// ```
    /// use ferrocm_ops::{Device, Tensor};
    /// let t = Tensor::from_slice(&[3i64, 1, 2], &[3], &Device::Cpu)?.to_dyn();
    /// let (v, i) = t.sort(false)?;
    /// assert_eq!((v.to_f64_vec()?, i.to_f64_vec()?), (vec![1.0, 2.0, 3.0], vec![1.0, 2.0, 0.0]));
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Tensor::sort`].
    pub fn sort(&self, descending: bool) -> Result<(Self, Self)> {
        crate::core::dyn_tensor::with_dtype!(self, "sort", |t| {
            let (v, i) = t.sort(descending)?;
            Ok((v.into(), i.into()))
        })
    }

    /// [`Tensor::argsort`] along the last dim for a dtype known at run time.
    ///
    /// # Errors
    /// As [`Tensor::argsort`].
    pub fn argsort(&self, descending: bool) -> Result<Self> {
        crate::core::dyn_tensor::with_dtype!(self, "argsort", |t| Ok(t.argsort(descending)?.into()))
    }

    /// [`Tensor::topk`] along the last dim for a dtype known at run time:
    /// the `k` largest (or smallest) values and their u32 indices.
    ///
    /// # Errors
    /// As [`Tensor::topk`].
    pub fn topk(&self, k: usize, largest: bool) -> Result<(Self, Self)> {
        crate::core::dyn_tensor::with_dtype!(self, "topk", |t| {
            let (v, i) = t.topk(k, largest)?;
            Ok((v.into(), i.into()))
        })
    }
}
