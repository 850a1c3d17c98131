//! Resizing images: PyTorch's `upsample_nearest2d` and `upsample_bilinear2d`
//! (`F.interpolate(x, size | scale_factor, mode="nearest" | "bilinear",
//! align_corners)`): API, Cpu implementation, kernel path.
//!
//! f32, f16 and bf16 (bilinear blends in f32 and rounds once). Inputs `(N,
//! C, H, W)` at any strides; a channels-last input gives a channels-last
//! output. The source index and weight of every output row and column
//! are computed here once with PyTorch's formulas, in f32 as PyTorch's
//! kernels compute them, into the table `ferrocm_kernels::conv::resample`
//! describes; the kernels and the Cpu path both read it.

use crate::core::dtype::WithDType;
use crate::core::error::{Error, Result};
use crate::core::tensor::Tensor;
use crate::engine::{self, Op};
use ferrocm_host::launch::MAX_GRID_X;
use ferrocm_host::{Device, DeviceBuffer, In, LaunchConfig, Out};
use ferrocm_kernels::conv::resample::{
    R_CHANNELS, R_CHUNKS, R_OUT, R_ROWS, R_TABLE, R_X_STRIDES, R_Y_STRIDES, ResampleKernels,
    bilinear_blend, resample_entry, resample_unpack,
};
use ferrocm_kernels::device::CHUNK;
use rayon::prelude::*;

use super::{is_channels_last, narrow, out_strides, spatial_output, store_rows, widen};

/// The output size of a resize: given outright, or as a scale factor per
/// spatial dim (output `floor(in · scale)`; the source positions then
/// follow `1 / scale`, as PyTorch's `interpolate` with
/// `recompute_scale_factor` unset).
///
/// ```
/// use ferrocm_ops::conv::Resize;
/// let twice = Resize::Scale([2.0, 2.0]);
/// assert_eq!(twice.output_size([3, 5]), Some([6, 10]));
/// assert_eq!(Resize::Size([4, 4]).output_size([3, 5]), Some([4, 4]));
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Resize {
    /// The output's `(height, width)`.
    Size([usize; 2]),
    /// Factors on `(height, width)`, positive and finite.
    Scale([f64; 2]),
}

impl Resize {
    /// The output's `(height, width)` for an input of `(h, w)`; None for a
    /// factor that is not positive and finite or a size past `usize`.
    pub fn output_size(&self, input: [usize; 2]) -> Option<[usize; 2]> {
        match *self {
            Resize::Size(s) => Some(s),
            Resize::Scale(f) => {
                let one = |i: usize, f: f64| {
                    let v = (i as f64 * f).floor();
                    (f.is_finite() && f > 0.0 && v < 9.0e15).then_some(v as usize)
                };
                Some([one(input[0], f[0])?, one(input[1], f[1])?])
            }
        }
    }

    fn scale(&self, d: usize) -> Option<f64> {
        match *self {
            Resize::Size(_) => None,
            Resize::Scale(f) => Some(f[d]),
        }
    }
}

/// PyTorch's `compute_scales_value`: `1 / scale` when a factor was given,
/// else `in / out`, in f32.
fn scales_value(scale: Option<f64>, inp: usize, out: usize) -> f32 {
    match scale {
        Some(s) if s > 0.0 => (1.0 / s) as f32,
        _ => inp as f32 / out as f32,
    }
}

/// Nearest: the source of output `o` (PyTorch's `nearest_idx`).
fn nearest_entry(o: usize, inp: usize, out: usize, scale: Option<f64>) -> u64 {
    let i = if out == inp {
        o
    } else if out == 2 * inp {
        o >> 1
    } else {
        let s = scales_value(scale, inp, out);
        ((o as f32 * s).floor() as usize).min(inp - 1)
    };
    resample_entry(i as u32, 0, 0.0)
}

/// Bilinear: the two sources of output `o` and the second's weight
/// (PyTorch's `area_pixel_compute_scale`, `area_pixel_compute_source_index`
/// and `guard_index_and_lambda`).
fn bilinear_entry(o: usize, inp: usize, out: usize, scale: Option<f64>, corners: bool) -> u64 {
    let s = if corners {
        if out > 1 {
            (inp - 1) as f32 / (out - 1) as f32
        } else {
            0.0
        }
    } else {
        scales_value(scale, inp, out)
    };
    let real = if corners {
        s * o as f32
    } else {
        (s * (o as f32 + 0.5) - 0.5).max(0.0)
    };
    let i0 = (real.floor() as usize).min(inp - 1);
    let lambda = (real - i0 as f32).clamp(0.0, 1.0);
    let step = u32::from(i0 < inp - 1);
    resample_entry(i0 as u32, step, lambda)
}

impl<T: WithDType> Tensor<T> {
    /// Nearest-neighbour resizing of `(N, C, H, W)` (PyTorch's
    /// `upsample_nearest2d`, `interpolate(mode="nearest")`): output row `o`
    /// copies input row `min(floor(o · scale), H - 1)`, `scale` being `1 /
    /// factor` or `H / OH`, and the same for columns.
    ///
    /// ```
    /// use ferrocm_ops::conv::Resize;
    /// use ferrocm_ops::{Device, Tensor};
    /// let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[1, 1, 2, 2], &Device::Cpu)?;
    /// let y = x.upsample_nearest2d(Resize::Scale([1.0, 2.0]))?;
    /// assert_eq!(y.to_vec()?, vec![1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 4.0, 4.0]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::UnsupportedDType`] for integer dtypes; [`Error::BadParameter`]
    /// for an input not of rank 4, an empty spatial dim, an output size of
    /// 0 or a factor that is not positive and finite; [`Error::TooLarge`]
    /// past the kernels' 32-bit limits; [`Error::Host`].
    pub fn upsample_nearest2d(&self, size: Resize) -> Result<Self> {
        self.resample("upsample_nearest2d", size, None)
    }

    /// Bilinear resizing of `(N, C, H, W)` (PyTorch's `upsample_bilinear2d`,
    /// `interpolate(mode="bilinear", align_corners)`): each output blends
    /// the 2 x 2 inputs around its source position, in f32. With
    /// `align_corners` the corner pixels' centres line up (source
    /// `o · (H - 1) / (OH - 1)`); without, the pixels' edges do (source
    /// `(o + 0.5) · scale - 0.5`, at least 0).
    ///
    /// ```
    /// use ferrocm_ops::conv::Resize;
    /// use ferrocm_ops::{Device, Tensor};
    /// let x = Tensor::from_slice(&[0.0f32, 4.0], &[1, 1, 1, 2], &Device::Cpu)?;
    /// let y = x.upsample_bilinear2d(Resize::Size([1, 3]), true)?;
    /// assert_eq!(y.to_vec()?, vec![0.0, 2.0, 4.0]);
    /// let y = x.upsample_bilinear2d(Resize::Size([1, 4]), false)?;
    /// assert_eq!(y.to_vec()?, vec![0.0, 1.0, 3.0, 4.0]);
    /// # Ok::<(), ferrocm_ops::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Tensor::upsample_nearest2d`].
    pub fn upsample_bilinear2d(&self, size: Resize, align_corners: bool) -> Result<Self> {
        self.resample("upsample_bilinear2d", size, Some(align_corners))
    }

    fn resample(&self, op: &'static str, size: Resize, bilinear: Option<bool>) -> Result<Self> {
        if !T::DTYPE.is_float() {
            return Err(Error::UnsupportedDType {
                op,
                dtype: T::DTYPE,
            });
        }
        let bad = |what: String| Error::BadParameter { op, what };
        if self.rank() != 4 || self.shape()[2] == 0 || self.shape()[3] == 0 {
            return Err(bad(format!(
                "the input must be (N, C, H, W) with H and W at least 1, shape {:?}",
                self.shape()
            )));
        }
        let (h, w) = (self.shape()[2], self.shape()[3]);
        let out = match size.output_size([h, w]) {
            Some(o) if o[0] > 0 && o[1] > 0 => o,
            _ => {
                return Err(bad(format!(
                    "{size:?} must give an output of at least 1 x 1 from {h} x {w}"
                )));
            }
        };
        let (batch, channels) = (self.shape()[0], self.shape()[1]);
        let shape = [batch, channels, out[0], out[1]];
        let n_out = crate::core::layout::checked_count(op, &shape, size_of::<T>())?;
        let entry = |d: usize, o: usize, inp: usize| match bilinear {
            None => nearest_entry(o, inp, out[d], size.scale(d)),
            Some(c) => bilinear_entry(o, inp, out[d], size.scale(d), c),
        };
        // An entry per output row and column: asked-for sizes bound it, so
        // it is reserved, not assumed.
        let mut table = Vec::new();
        out[0]
            .checked_add(out[1])
            .and_then(|n| table.try_reserve_exact(n).ok())
            .ok_or_else(|| Error::TooLarge {
                op,
                shape: self.shape().to_vec(),
            })?;
        table.extend((0..out[0]).map(|o| entry(0, o, h)));
        table.extend((0..out[1]).map(|o| entry(1, o, w)));
        let channels_last = is_channels_last(self);
        let dev = self.device().clone();
        let buf = engine::run(
            &dev,
            Resample {
                op,
                bilinear: bilinear.is_some(),
                x: self,
                shape,
                table,
                channels_last,
                out: dev.alloc::<T>(n_out)?,
            },
        )?;
        spatial_output(buf, &shape, channels_last)
    }
}

impl crate::DynTensor {
    /// [`Tensor::upsample_nearest2d`] for a dtype known at run time.
    ///
    /// # Errors
    /// As [`Tensor::upsample_nearest2d`].
    pub fn upsample_nearest2d(&self, size: Resize) -> Result<Self> {
        crate::core::dyn_tensor::with_dtype!(self, "upsample_nearest2d", |t| Ok(t
            .upsample_nearest2d(size)?
            .into()))
    }

    /// [`Tensor::upsample_bilinear2d`] for a dtype known at run time.
    ///
    /// # Errors
    /// As [`Tensor::upsample_bilinear2d`].
    pub fn upsample_bilinear2d(&self, size: Resize, align_corners: bool) -> Result<Self> {
        crate::core::dyn_tensor::with_dtype!(self, "upsample_bilinear2d", |t| Ok(t
            .upsample_bilinear2d(size, align_corners)?
            .into()))
    }
}

/// One resize: the table built, the output allocated.
struct Resample<'a, T: WithDType> {
    op: &'static str,
    bilinear: bool,
    x: &'a Tensor<T>,
    shape: [usize; 4],
    /// An entry per output row, then one per output column.
    table: Vec<u64>,
    channels_last: bool,
    out: DeviceBuffer<T>,
}

impl<T: WithDType> Op for Resample<'_, T> {
    type Output = DeviceBuffer<T>;

    fn cpu(mut self) -> Result<DeviceBuffer<T>> {
        let [batch, channels, oh, ow] = self.shape;
        let positions = oh * ow;
        let rows = batch * channels;
        if rows * positions == 0 {
            return Ok(self.out);
        }
        let xh = &engine::cpu::host(self.x.buf())[self.x.layout().offset()..];
        let xs = self.x.layout().strides();
        let (rows_t, cols_t) = self.table.split_at(oh);
        let cols: Vec<_> = cols_t.iter().map(|&e| resample_unpack(e)).collect();
        let mut vals = vec![T::default(); rows * positions];
        vals.par_chunks_mut(positions)
            .enumerate()
            .for_each(|(r, vrow)| {
                let xb = (r / channels) * xs[0] + (r % channels) * xs[1];
                for (oy, line) in vrow.chunks_mut(ow).enumerate() {
                    let (y0, y1, h0, h1) = resample_unpack(rows_t[oy]);
                    let (r0, r1) = (xb + y0 as usize * xs[2], xb + y1 as usize * xs[2]);
                    for (v, &(x0, x1, w0, w1)) in line.iter_mut().zip(&cols) {
                        let (c0, c1) = (x0 as usize * xs[3], x1 as usize * xs[3]);
                        *v = if self.bilinear {
                            let q = [xh[r0 + c0], xh[r0 + c1], xh[r1 + c0], xh[r1 + c1]];
                            narrow(bilinear_blend(q.map(widen), (h0, h1), (w0, w1)))
                        } else {
                            xh[r0 + c0]
                        };
                    }
                }
            });
        let out = engine::cpu::host_mut(&mut self.out);
        store_rows(out, &vals, channels, positions, self.channels_last);
        Ok(self.out)
    }

    fn kernels(self, dev: &Device) -> Result<DeviceBuffer<T>> {
        let [batch, channels, oh, ow] = self.shape;
        let positions = oh * ow;
        let rows = batch * channels;
        if rows * positions == 0 {
            return Ok(self.out);
        }
        let fits = |v: usize| v < (1 << 31);
        let ys = out_strides(&self.shape, self.channels_last);
        // A chunk of output columns a workitem where each output row is whole
        // chunks, contiguous, from a chunk-aligned start (the output is
        // fresh, so its start is).
        let chunk = CHUNK as usize;
        let chunks = ys[3] == 1 && ys[..3].iter().all(|s| s % chunk == 0) && ow % chunk == 0;
        let blocks = positions
            .div_ceil(if chunks { chunk } else { 1 })
            .div_ceil(256);
        if !fits(rows)
            || !fits(positions)
            || !fits(self.x.shape()[2])
            || !fits(self.x.shape()[3])
            || blocks > MAX_GRID_X as usize
        {
            return Err(Error::TooLarge {
                op: self.op,
                shape: self.x.shape().to_vec(),
            });
        }
        let xs = self.x.layout().strides();
        let mut geom = vec![0u64; R_TABLE];
        geom[R_CHUNKS] = chunks as u64;
        geom[R_ROWS] = rows as u64;
        geom[R_CHANNELS] = channels as u64;
        geom[R_OUT] = oh as u64;
        geom[R_OUT + 1] = ow as u64;
        for d in 0..4 {
            geom[R_X_STRIDES + d] = xs[d] as u64;
            geom[R_Y_STRIDES + d] = ys[d] as u64;
        }
        geom.extend_from_slice(&self.table);
        let geom = dev.upload_words(&geom)?;
        let kernel = if self.bilinear {
            T::Kernel::BILINEAR
        } else {
            T::Kernel::NEAREST
        }
        .ok_or(Error::UnsupportedDType {
            op: self.op,
            dtype: T::DTYPE,
        })?;
        let cfg = LaunchConfig {
            grid: [blocks as u32, super::row_groups(rows, blocks), 1],
            block: [256, 1, 1],
            lds_bytes: 0,
            early_start: false,
        };
        let y = Out::new(self.out.view_as::<T::Kernel>().expect("same size"));
        dev.launch_typed(kernel, cfg, (y, self.x.input(), In::new(&geom)))?;
        Ok(self.out)
    }
}
