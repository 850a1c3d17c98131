//! Kernel arguments: buffers with the range a kernel may touch ([`In`],
//! [`Out`], [`Arg`]), scalars, and the typed tuples ([`Params`]) that let
//! rustc check a launch against the kernel's signature.

use super::Device;
use super::buffer::DeviceBuffer;
use crate::memory::HostAlloc;
use std::marker::PhantomData;

/// A buffer argument: the buffer, the element the kernel's pointer starts at
/// and how many elements from there the launch may touch.
///
/// Nothing here is trusted until the launch check (`Device::launch_kernel`) has proved the range
/// inside the buffer (`offset + extent <= len`, checked arithmetic).
#[derive(Clone, Copy)]
pub struct BufferArg<'a> {
    base: u64,
    /// First element the kernel's pointer points at.
    pub(crate) offset: usize,
    /// Elements from `offset` the kernel may access (`None`: to the end).
    pub(crate) extent: Option<usize>,
    /// The buffer's length in elements.
    pub(crate) len: usize,
    pub(crate) elem_size: usize,
    pub(crate) device: &'a Device,
    pub(crate) host: Option<&'a HostAlloc>,
}

impl BufferArg<'_> {
    /// The kernel's pointer (only meaningful once the range is checked).
    pub(crate) fn ptr(&self) -> u64 {
        self.base
            .wrapping_add((self.offset as u64).wrapping_mul(self.elem_size as u64))
    }

    /// Elements the kernel may access from its pointer, when that range
    /// lies inside the buffer.
    pub(crate) fn checked_extent(&self) -> Option<usize> {
        let room = self.len.checked_sub(self.offset)?;
        match self.extent {
            None => Some(room),
            Some(e) if e <= room => Some(e),
            Some(_) => None,
        }
    }
}

/// One kernel argument.
///
/// ```
/// use ferrocm_host::{Arg, Device, WaveSize};
/// let dev = Device::emulator(WaveSize::Wave32);
/// let x = dev.upload(&[1.0f32; 8]).unwrap();
/// let args = [Arg::input(&x), Arg::U64(8), Arg::F32(2.0)];
/// assert_eq!(args.len(), 3);
/// ```
#[derive(Clone, Copy)]
#[non_exhaustive]
pub enum Arg<'a> {
    /// A buffer the kernel reads (`*const T`).
    In(BufferArg<'a>),
    /// A buffer the kernel writes (`*mut T`).
    Out(BufferArg<'a>),
    /// A null pointer (an optional argument left out, e.g. the layout of a contiguous input).
    Null,
    /// `u32` scalar.
    U32(u32),
    /// `i32` scalar.
    I32(i32),
    /// `u64` scalar.
    U64(u64),
    /// `i64` scalar.
    I64(i64),
    /// `f32` scalar.
    F32(f32),
}

impl<'a> Arg<'a> {
    fn buffer<T: bytemuck::Pod>(
        b: &'a DeviceBuffer<T>,
        offset: usize,
        extent: Option<usize>,
    ) -> BufferArg<'a> {
        BufferArg {
            base: b.device_ptr(),
            offset,
            extent,
            len: b.len(),
            elem_size: size_of::<T>(),
            device: b.device(),
            host: b.host_alloc(),
        }
    }

    /// An input buffer: the kernel may read all of it.
    pub fn input<T: bytemuck::Pod>(b: &'a DeviceBuffer<T>) -> Self {
        Arg::In(Self::buffer(b, 0, None))
    }

    /// An input buffer from element `offset` to its end. An offset past the
    /// end is refused when the launch is checked.
    pub fn input_at<T: bytemuck::Pod>(b: &'a DeviceBuffer<T>, offset: usize) -> Self {
        Arg::In(Self::buffer(b, offset, None))
    }

    /// Elements `offset..offset + extent` of an input buffer: the kernel's
    /// pointer is at `offset`, and the launch is refused unless the whole
    /// range lies in the buffer. (In the emulator with the sanitizer on, an
    /// access outside the range is an error.)
    pub fn input_range<T: bytemuck::Pod>(
        b: &'a DeviceBuffer<T>,
        offset: usize,
        extent: usize,
    ) -> Self {
        Arg::In(Self::buffer(b, offset, Some(extent)))
    }

    /// An output buffer: the kernel may write all of it.
    pub fn output<T: bytemuck::Pod>(b: &'a DeviceBuffer<T>) -> Self {
        Arg::Out(Self::buffer(b, 0, None))
    }

    /// An output buffer from element `offset` to its end.
    pub fn output_at<T: bytemuck::Pod>(b: &'a DeviceBuffer<T>, offset: usize) -> Self {
        Arg::Out(Self::buffer(b, offset, None))
    }

    /// Elements `offset..offset + extent` of an output buffer, as
    /// [`Arg::input_range`].
    pub fn output_range<T: bytemuck::Pod>(
        b: &'a DeviceBuffer<T>,
        offset: usize,
        extent: usize,
    ) -> Self {
        Arg::Out(Self::buffer(b, offset, Some(extent)))
    }

    pub(crate) fn describe(&self) -> String {
        match self {
            Arg::In(b) => format!("input buffer [{}-byte]", b.elem_size),
            Arg::Out(b) => format!("output buffer [{}-byte]", b.elem_size),
            Arg::Null => "null".into(),
            Arg::U32(_) => "u32".into(),
            Arg::I32(_) => "i32".into(),
            Arg::U64(_) => "u64".into(),
            Arg::I64(_) => "i64".into(),
            Arg::F32(_) => "f32".into(),
        }
    }

    /// What the emulator needs of the argument: its slot, and for a buffer
    /// the byte range it may touch (checked by the sanitizer) and its host
    /// block (whose red zones the sanitizer checks after the launch).
    pub(crate) fn emulated(&self) -> crate::emulator::EmulatedArg<'a> {
        let buffer = match self {
            Arg::In(b) => Some((b, false)),
            Arg::Out(b) => Some((b, true)),
            _ => None,
        };
        crate::emulator::EmulatedArg {
            raw: self.raw(),
            range: buffer.and_then(|(b, writable)| {
                let start = b.ptr() as usize;
                let bytes = b.checked_extent()? * b.elem_size;
                Some((start, start + bytes, writable))
            }),
            host: buffer.and_then(|(b, _)| b.host),
        }
    }

    pub(crate) fn raw(&self) -> u64 {
        match *self {
            Arg::In(b) | Arg::Out(b) => b.ptr(),
            Arg::Null => 0,
            Arg::U32(v) => v as u64,
            Arg::I32(v) => v as u32 as u64,
            Arg::U64(v) => v,
            Arg::I64(v) => v as u64,
            Arg::F32(v) => v.to_bits() as u64,
        }
    }
}

/// An input buffer argument for a `*const T` kernel parameter (or a null
/// pointer, for an optional input such as the layout of a contiguous tensor).
///
/// ```
/// # use ferrocm_host::WaveSize;
/// use ferrocm_host::{Device, In};
/// let x = Device::emulator(WaveSize::Wave32).upload(&[1.0f32, 2.0]).unwrap();
/// let _whole = In::new(&x);
/// let _from_1 = In::at(&x, 1);
/// let _none = In::<u64>::null();
/// ```
#[derive(Clone, Copy)]
pub struct In<'a, T>(Arg<'a>, PhantomData<fn() -> T>);

impl<'a, T: bytemuck::Pod> In<'a, T> {
    /// All of `b`.
    pub fn new(b: &'a DeviceBuffer<T>) -> Self {
        Self(Arg::input(b), PhantomData)
    }
    /// `b` from element `offset` to its end (an offset past the end is
    /// refused at launch).
    pub fn at(b: &'a DeviceBuffer<T>, offset: usize) -> Self {
        Self(Arg::input_at(b, offset), PhantomData)
    }
    /// Elements `offset..offset + extent` of `b` (see [`Arg::input_range`]).
    pub fn range(b: &'a DeviceBuffer<T>, offset: usize, extent: usize) -> Self {
        Self(Arg::input_range(b, offset, extent), PhantomData)
    }
    /// A null pointer.
    pub fn null() -> Self {
        Self(Arg::Null, PhantomData)
    }
    /// `b` if given, else null.
    pub fn opt(b: Option<&'a DeviceBuffer<T>>) -> Self {
        b.map(Self::new).unwrap_or_else(Self::null)
    }
}

/// An output buffer argument for a `*mut T` kernel parameter.
///
/// ```
/// # use ferrocm_host::WaveSize;
/// use ferrocm_host::{Device, Out};
/// let y = Device::emulator(WaveSize::Wave32).alloc::<u32>(4).unwrap();
/// let _ = Out::new(&y);
/// ```
#[derive(Clone, Copy)]
pub struct Out<'a, T>(Arg<'a>, PhantomData<fn() -> T>);

impl<'a, T: bytemuck::Pod> Out<'a, T> {
    /// A null pointer (an optional output left out, e.g. the status words
    /// of a launch that cannot fault).
    pub fn null() -> Self {
        Self(Arg::Null, PhantomData)
    }
    /// All of `b`.
    pub fn new(b: &'a DeviceBuffer<T>) -> Self {
        Self(Arg::output(b), PhantomData)
    }
    /// `b` from element `offset` to its end (an offset past the end is
    /// refused at launch).
    pub fn at(b: &'a DeviceBuffer<T>, offset: usize) -> Self {
        Self(Arg::output_at(b, offset), PhantomData)
    }
    /// Elements `offset..offset + extent` of `b` (see [`Arg::input_range`]).
    pub fn range(b: &'a DeviceBuffer<T>, offset: usize, extent: usize) -> Self {
        Self(Arg::output_range(b, offset, extent), PhantomData)
    }
}

/// The host-side value of one kernel parameter type: [`In`] for `*const T`,
/// [`Out`] for `*mut T`, the scalar itself for `u32 i32 u64 i64 f32`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a kernel parameter type",
    note = "kernel parameters are `*const T`, `*mut T`, u32, i32, u64, i64 or f32"
)]
pub trait Param<'a> {
    /// What the host passes.
    type Host;
    /// As an untyped argument.
    fn arg(host: Self::Host) -> Arg<'a>;
}

impl<'a, T: bytemuck::Pod> Param<'a> for *const T {
    type Host = In<'a, T>;
    fn arg(host: In<'a, T>) -> Arg<'a> {
        host.0
    }
}

impl<'a, T: bytemuck::Pod> Param<'a> for *mut T {
    type Host = Out<'a, T>;
    fn arg(host: Out<'a, T>) -> Arg<'a> {
        host.0
    }
}

macro_rules! scalar_param {
    ($($t:ty => $v:ident),*) => {$(
        impl<'a> Param<'a> for $t {
            type Host = $t;
            fn arg(host: $t) -> Arg<'a> {
                Arg::$v(host)
            }
        }
    )*};
}
scalar_param!(u32 => U32, i32 => I32, u64 => U64, i64 => I64, f32 => F32);

/// A kernel's parameter tuple: its host-side counterpart is the tuple of
/// each parameter's [`Param::Host`].
pub trait Params<'a> {
    /// The host-side tuple.
    type Host;
    /// Calls `f` with the untyped arguments.
    fn with_args<R>(host: Self::Host, f: impl FnOnce(&[Arg<'a>]) -> R) -> R;
}

macro_rules! params_tuple {
    ($($p:ident $h:ident),*) => {
        impl<'a, $($p: Param<'a>),*> Params<'a> for ($($p,)*) {
            type Host = ($($p::Host,)*);
            #[allow(non_snake_case)]
            fn with_args<R>(host: Self::Host, f: impl FnOnce(&[Arg<'a>]) -> R) -> R {
                let ($($h,)*) = host;
                f(&[$($p::arg($h)),*])
            }
        }
    };
}
params_tuple!(A a);
params_tuple!(A a, B b);
params_tuple!(A a, B b, C c);
params_tuple!(A a, B b, C c, D d);
params_tuple!(A a, B b, C c, D d, E e);
params_tuple!(A a, B b, C c, D d, E e, F f);
params_tuple!(A a, B b, C c, D d, E e, F f, G g);
params_tuple!(A a, B b, C c, D d, E e, F f, G g, H h);
params_tuple!(A a, B b, C c, D d, E e, F f, G g, H h, I i);
params_tuple!(A a, B b, C c, D d, E e, F f, G g, H h, I i, J j);
params_tuple!(A a, B b, C c, D d, E e, F f, G g, H h, I i, J j, K k);
params_tuple!(A a, B b, C c, D d, E e, F f, G g, H h, I i, J j, K k, L l);
params_tuple!(A a, B b, C c, D d, E e, F f, G g, H h, I i, J j, K k, L l, M m);
params_tuple!(A a, B b, C c, D d, E e, F f, G g, H h, I i, J j, K k, L l, M m, N n);
params_tuple!(A a, B b, C c, D d, E e, F f, G g, H h, I i, J j, K k, L l, M m, N n, O o);
params_tuple!(A a, B b, C c, D d, E e, F f, G g, H h, I i, J j, K k, L l, M m, N n, O o, P p);
params_tuple!(A a, B b, C c, D d, E e, F f, G g, H h, I i, J j, K k, L l, M m, N n, O o, P p, Q q);
params_tuple!(A a, B b, C c, D d, E e, F f, G g, H h, I i, J j, K k, L l, M m, N n, O o, P p, Q q, P18 p18);
params_tuple!(A a, B b, C c, D d, E e, F f, G g, H h, I i, J j, K k, L l, M m, N n, O o, P p, Q q, P18 p18, P19 p19);
params_tuple!(A a, B b, C c, D d, E e, F f, G g, H h, I i, J j, K k, L l, M m, N n, O o, P p, Q q, P18 p18, P19 p19, P20 p20);
params_tuple!(A a, B b, C c, D d, E e, F f, G g, H h, I i, J j, K k, L l, M m, N n, O o, P p, Q q, P18 p18, P19 p19, P20 p20, P21 p21);
params_tuple!(A a, B b, C c, D d, E e, F f, G g, H h, I i, J j, K k, L l, M m, N n, O o, P p, Q q, P18 p18, P19 p19, P20 p20, P21 p21, P22 p22);
params_tuple!(A a, B b, C c, D d, E e, F f, G g, H h, I i, J j, K k, L l, M m, N n, O o, P p, Q q, P18 p18, P19 p19, P20 p20, P21 p21, P22 p22, P23 p23);
params_tuple!(A a, B b, C c, D d, E e, F f, G g, H h, I i, J j, K k, L l, M m, N n, O o, P p, Q q, P18 p18, P19 p19, P20 p20, P21 p21, P22 p22, P23 p23, P24 p24);
params_tuple!(A a, B b, C c, D d, E e, F f, G g, H h, I i, J j, K k, L l, M m, N n, O o, P p, Q q, P18 p18, P19 p19, P20 p20, P21 p21, P22 p22, P23 p23, P24 p24, P25 p25);
params_tuple!(A a, B b, C c, D d, E e, F f, G g, H h, I i, J j, K k, L l, M m, N n, O o, P p, Q q, P18 p18, P19 p19, P20 p20, P21 p21, P22 p22, P23 p23, P24 p24, P25 p25, P26 p26);
params_tuple!(A a, B b, C c, D d, E e, F f, G g, H h, I i, J j, K k, L l, M m, N n, O o, P p, Q q, P18 p18, P19 p19, P20 p20, P21 p21, P22 p22, P23 p23, P24 p24, P25 p25, P26 p26, P27 p27);
params_tuple!(A a, B b, C c, D d, E e, F f, G g, H h, I i, J j, K k, L l, M m, N n, O o, P p, Q q, P18 p18, P19 p19, P20 p20, P21 p21, P22 p22, P23 p23, P24 p24, P25 p25, P26 p26, P27 p27, P28 p28);
