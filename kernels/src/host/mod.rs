//! Host-only support for the kernels: the emulator's per-workitem context the
//! device layer's host bodies read, and the kernel table (names, argument
//! kinds, entry points) the launcher checks arguments against.
//!
//! Nothing here is compiled for the GPU (`build.rs` takes only `src/*.rs`).

pub mod emu;

/// The marker before a commented-out PTX instruction of sm_90 and newer in
/// the PTX module (the device layer's `sm90_only!`): the CUDA device
/// removes it, making the instruction real, when it loads the module for
/// an sm_90 or newer GPU.
///
/// ```
/// assert_eq!(ferrocm_kernels::host::SM90_ONLY, "// ferrocm-sm90: ");
/// ```
pub const SM90_ONLY: &str = "// ferrocm-sm90: ";

/// The marker before a commented-out PTX line of sm_90a (the warpgroup
/// product, `ferrocm_kernels::mma::wg_mma`): the CUDA device removes it
/// when it loads the module for a GPU of compute capability 9.0 exactly
/// (the `a` targets run on that one only).
///
/// ```
/// assert_eq!(ferrocm_kernels::host::SM90A_ONLY, "// ferrocm-sm90a: ");
/// ```
pub const SM90A_ONLY: &str = "// ferrocm-sm90a: ";

include!("matrix_unit.rs");

/// How a kernel argument is passed: its kind and size in the kernarg segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ArgKind {
    /// A global pointer; `mutable` for `*mut T`. `elem_size` is `size_of::<T>()`.
    Ptr { mutable: bool, elem_size: usize },
    /// `u32`.
    U32,
    /// `i32`.
    I32,
    /// `u64`.
    U64,
    /// `i64`.
    I64,
    /// `f32`.
    F32,
}

impl ArgKind {
    /// Size in bytes of the argument in the kernarg segment (also its alignment).
    ///
    /// ```
    /// use ferrocm_kernels::host::ArgKind;
    /// assert_eq!(ArgKind::U32.size(), 4);
    /// assert_eq!(ArgKind::Ptr { mutable: false, elem_size: 2 }.size(), 8);
    /// ```
    pub const fn size(self) -> usize {
        match self {
            ArgKind::Ptr { .. } | ArgKind::U64 | ArgKind::I64 => 8,
            ArgKind::U32 | ArgKind::I32 | ArgKind::F32 => 4,
        }
    }

    /// A short name for messages (`*mut [4-byte]`, `u32`, ...).
    pub fn describe(self) -> String {
        match self {
            ArgKind::Ptr { mutable, elem_size } => {
                format!(
                    "*{} [{elem_size}-byte]",
                    if mutable { "mut" } else { "const" }
                )
            }
            ArgKind::U32 => "u32".into(),
            ArgKind::I32 => "i32".into(),
            ArgKind::U64 => "u64".into(),
            ArgKind::I64 => "i64".into(),
            ArgKind::F32 => "f32".into(),
        }
    }
}

/// A type a kernel may take as an argument: a raw pointer or a scalar.
///
/// Arguments travel as 64-bit slots to the emulator's entry points; the ROCm
/// backend packs them by [`ArgKind::size`] at natural alignment.
pub trait KernelArg: Sized {
    /// The argument's kind.
    const KIND: ArgKind;
    /// Rebuilds the argument from its 64-bit slot.
    fn from_raw(raw: u64) -> Self;
}

impl<T> KernelArg for *const T {
    const KIND: ArgKind = ArgKind::Ptr {
        mutable: false,
        elem_size: size_of::<T>(),
    };
    fn from_raw(raw: u64) -> Self {
        raw as usize as *const T
    }
}

impl<T> KernelArg for *mut T {
    const KIND: ArgKind = ArgKind::Ptr {
        mutable: true,
        elem_size: size_of::<T>(),
    };
    fn from_raw(raw: u64) -> Self {
        raw as usize as *mut T
    }
}

macro_rules! scalar_arg {
    ($t:ty, $kind:ident, |$r:ident| $conv:expr) => {
        impl KernelArg for $t {
            const KIND: ArgKind = ArgKind::$kind;
            fn from_raw($r: u64) -> Self {
                $conv
            }
        }
    };
}
scalar_arg!(u32, U32, |r| r as u32);
scalar_arg!(i32, I32, |r| r as u32 as i32);
scalar_arg!(u64, U64, |r| r);
scalar_arg!(i64, I64, |r| r as i64);
scalar_arg!(f32, F32, |r| f32::from_bits(r as u32));

/// One kernel as the host sees it: its symbol name, its arguments, and the
/// host copy of its body that the emulator runs per workitem.
///
/// Every kernel declared with [`kernels!`](crate::kernels) has one, in a
/// `static`, reached through the kernel's typed handle ([`Kernel::INFO`]).
#[derive(Clone, Copy)]
pub struct KernelInfo {
    /// Symbol name in the code objects (`{op}_{dtype}`).
    pub name: &'static str,
    /// Argument kinds, in order.
    pub args: &'static [ArgKind],
    /// The host copy: called once per workitem with the argument slots.
    pub entry: fn(&[u64]),
    /// The device code the kernel is in ([`crate::KERNEL_MODULE`] for
    /// ferrocm's own kernels); `None` for a kernel that exists only on the
    /// host, which only the emulator can run (a kernel under development:
    /// see [`KernelInfo::host_only`]).
    pub module: Option<&'static crate::KernelModule>,
}

impl KernelInfo {
    /// A kernel with no device code: the emulator runs `entry`, a GPU
    /// refuses the launch. For a kernel under development, before it is in
    /// any code object.
    ///
    /// ```
    /// use ferrocm_kernels::host::{ArgKind, KernelInfo};
    /// fn entry(_: &[u64]) {}
    /// static K: KernelInfo = KernelInfo::host_only("k", &[ArgKind::U32], entry);
    /// assert!(K.module.is_none());
    /// ```
    pub const fn host_only(
        name: &'static str,
        args: &'static [ArgKind],
        entry: fn(&[u64]),
    ) -> Self {
        Self {
            name,
            args,
            entry,
            module: None,
        }
    }
}

impl std::fmt::Debug for KernelInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelInfo")
            .field("name", &self.name)
            .field("args", &self.args)
            .field("module", &self.module.map(|m| m.name))
            .finish()
    }
}

/// A kernel's typed handle. [`kernels!`](crate::kernels) generates, for each
/// kernel `fn name(a: A, b: B, ...)`, a zero-sized type `name` (in the type
/// namespace, beside the function) implementing this trait with
/// `Args = (A, B, ...)`. The host's typed launch takes the arguments as the
/// host-side counterparts of `Args`, so rustc checks their number and types at
/// the call site; [`Kernel::INFO`] is a `'static` reference resolved at compile
/// time, never looked up by name.
///
/// ```
/// use ferrocm_kernels::host::Kernel;
/// use ferrocm_kernels::elementwise::unary::unary_exp_f32;
/// assert_eq!(<unary_exp_f32 as Kernel>::INFO.name, "unary_exp_f32");
/// fn takes_f32_map<K: Kernel<Args = ferrocm_kernels::elementwise::unary::UnaryArgs<f32>>>() {}
/// takes_f32_map::<unary_exp_f32>(); // a kernel of another signature would not compile
/// ```
pub trait Kernel: 'static {
    /// The kernel's parameter types, as a tuple.
    type Args: 'static;
    /// Name, argument kinds and the emulator's entry point.
    const INFO: &'static KernelInfo;
}

/// A kernel handle as a value: the [`KernelInfo`] of a kernel whose
/// parameter types are `A`. Families map a dtype to one of these (see
/// [`crate::elementwise::unary::UnaryKernels`]); `None` where a family has no kernel for a
/// dtype.
///
/// ```
/// use ferrocm_kernels::host::KernelRef;
/// use ferrocm_kernels::elementwise::unary::{Exp, UnaryKernels};
/// let k = <f32 as UnaryKernels>::kernel::<Exp>().unwrap();
/// assert_eq!(k.info.name, "unary_exp_f32");
/// assert!(<u8 as UnaryKernels>::kernel::<Exp>().is_none());
/// # let _: KernelRef<_> = k;
/// ```
pub struct KernelRef<A> {
    /// The kernel.
    pub info: &'static KernelInfo,
    _args: std::marker::PhantomData<fn(A)>,
}

impl<A> Clone for KernelRef<A> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<A> Copy for KernelRef<A> {}

impl<A> std::fmt::Debug for KernelRef<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KernelRef({})", self.info.name)
    }
}

impl<A: 'static> KernelRef<A> {
    /// The handle of kernel type `K`.
    pub const fn of<K: Kernel<Args = A>>() -> Self {
        Self {
            info: K::INFO,
            _args: std::marker::PhantomData,
        }
    }
}

// The device layer's f16/bf16 are plain bits: buffers of them are Pod.
// SAFETY: repr(transparent) over u16; every bit pattern is valid.
unsafe impl bytemuck::Zeroable for crate::elem::F16 {}
unsafe impl bytemuck::Pod for crate::elem::F16 {}
unsafe impl bytemuck::Zeroable for crate::elem::Bf16 {}
unsafe impl bytemuck::Pod for crate::elem::Bf16 {}
unsafe impl bytemuck::Zeroable for crate::elem::W128 {}
unsafe impl bytemuck::Pod for crate::elem::W128 {}
