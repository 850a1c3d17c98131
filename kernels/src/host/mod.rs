//! Host-only support for the kernels: the emulator's per-workitem context the
//! device layer's host bodies read, and the kernel table (names, argument
//! kinds, entry points) the launcher checks arguments against.
//!
//! Nothing here is compiled for the GPU (`build.rs` takes only `src/*.rs`).

pub mod emu;

/// How a kernel argument is passed: its kind and size in the kernarg segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
#[derive(Clone, Copy)]
pub struct KernelInfo {
    /// Symbol name in the code objects (`{op}_{dtype}`).
    pub name: &'static str,
    /// Argument kinds, in order.
    pub args: &'static [ArgKind],
    /// The host copy: called once per workitem with the argument slots.
    pub entry: fn(&[u64]),
}

impl std::fmt::Debug for KernelInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelInfo")
            .field("name", &self.name)
            .field("args", &self.args)
            .finish()
    }
}
