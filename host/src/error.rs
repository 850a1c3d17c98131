//! The host layer's error type.

/// Everything that can go wrong on the host side: device discovery, memory,
/// argument checks, and what the emulator or a GPU reports about a launch.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum Error {
    /// No GPU answered (driver or library missing, no device, or ordinal too large).
    #[error("no GPU available: {reason}")]
    NoGpu {
        /// Why.
        reason: String,
    },
    /// The binary was built without the `rocm` feature.
    #[error("ROCm support is not compiled in (build with `--features rocm`)")]
    RocmNotCompiled,
    /// The binary was built without the `cuda` feature.
    #[error("CUDA support is not compiled in (build with `--features cuda`)")]
    CudaNotCompiled,
    /// A device name that does not parse (see `Device::from_str`).
    #[error("unknown device `{name}`: {detail}")]
    UnknownDevice {
        /// The name given.
        name: String,
        /// What is accepted.
        detail: String,
    },
    /// No embedded code object fits the GPU's arch.
    #[error("no code object for {device} (arch {arch}); this build embeds: {built}")]
    NoCodeObject {
        /// Device name.
        device: String,
        /// Its gcnArchName.
        arch: String,
        /// The embedded archs, comma separated.
        built: String,
    },
    /// An allocation did not fit (after emptying the device's cache and
    /// trying once more).
    #[error("out of memory on {device}: {bytes} bytes requested{}", match free {
        Some(f) => format!(", {f} bytes free"),
        None => String::new(),
    })]
    OutOfMemory {
        /// Device.
        device: String,
        /// Requested size.
        bytes: usize,
        /// Free bytes on the device (or under its memory limit), when known.
        free: Option<u64>,
    },
    /// No kernel with this name is declared.
    #[error("unknown kernel `{kernel}`")]
    UnknownKernel {
        /// The name asked for.
        kernel: String,
    },
    /// The arguments do not match the kernel's signature.
    #[error("kernel `{kernel}`: {detail}")]
    ArgumentMismatch {
        /// Kernel.
        kernel: String,
        /// What differs.
        detail: String,
    },
    /// Grid, block or LDS outside the device's limits.
    #[error("kernel `{kernel}`: bad launch configuration: {detail}")]
    BadLaunchConfig {
        /// Kernel.
        kernel: String,
        /// What is wrong.
        detail: String,
    },
    /// A buffer of one device passed to another.
    #[error("{what}: buffer lives on {buffer_device}, launch is on {device}")]
    DeviceMismatch {
        /// Kernel or operation.
        what: String,
        /// Where the buffer is.
        buffer_device: String,
        /// Where it was used.
        device: String,
    },
    /// Sizes of a copy or upload do not agree.
    #[error("{what}: length mismatch ({expected} vs {got})")]
    LengthMismatch {
        /// Operation.
        what: String,
        /// Expected length.
        expected: usize,
        /// Given length.
        got: usize,
    },
    /// A buffer argument whose declared range (`offset..offset + extent`
    /// elements) does not lie inside its buffer: refused before the launch.
    #[error("kernel `{kernel}`: argument {arg} covers elements {offset}..{} of a buffer of {len}", match extent {
        Some(e) => offset.checked_add(*e).map_or_else(|| format!("{offset} + {e} (overflows)"), |end| end.to_string()),
        None => "its end".into(),
    })]
    ArgumentOutOfBounds {
        /// Kernel.
        kernel: String,
        /// Argument index.
        arg: usize,
        /// First element.
        offset: usize,
        /// Elements from `offset` (None: to the end of the buffer).
        extent: Option<usize>,
        /// The buffer's length in elements.
        len: usize,
    },
    /// Sanitizer: a kernel read or wrote global memory outside every buffer
    /// range its launch was given (or wrote through a read-only argument).
    #[error("sanitizer: kernel `{kernel}` {detail}")]
    OutOfBoundsAccess {
        /// Kernel.
        kernel: String,
        /// The access and where it fell relative to the nearest argument.
        detail: String,
    },
    /// Sanitizer: a kernel wrote outside a buffer (a red zone canary changed).
    #[error(
        "sanitizer: kernel `{kernel}` wrote out of bounds of argument {arg} ({len_bytes}-byte buffer), {bytes_changed} byte(s) past its {side}"
    )]
    OutOfBoundsWrite {
        /// Kernel.
        kernel: String,
        /// Argument index of the buffer.
        arg: usize,
        /// Buffer size in bytes.
        len_bytes: usize,
        /// "end" or "start".
        side: &'static str,
        /// Canary bytes found changed.
        bytes_changed: usize,
    },
    /// Sanitizer: an LDS access past the launch's LDS size.
    #[error("sanitizer: kernel `{kernel}` accessed LDS bytes {byte_offset}..{end} but the launch gave {lds_len} bytes", end = byte_offset + access_bytes)]
    LdsOutOfBounds {
        /// Kernel.
        kernel: String,
        /// First byte.
        byte_offset: usize,
        /// Access size.
        access_bytes: usize,
        /// The launch's LDS size.
        lds_len: usize,
    },
    /// A barrier or wave operation that not every workitem reached.
    #[error("kernel `{kernel}` deadlocked in workgroup {workgroup:?}: {detail}")]
    Deadlock {
        /// Kernel.
        kernel: String,
        /// Workgroup id.
        workgroup: [u32; 3],
        /// Which workitems waited where.
        detail: String,
    },
    /// A kernel panicked in the emulator (index out of bounds, overflow, ...).
    #[error(
        "kernel `{kernel}` panicked in workgroup {workgroup:?}, workitem {workitem:?}: {message}"
    )]
    KernelPanic {
        /// Kernel.
        kernel: String,
        /// Workgroup id.
        workgroup: [u32; 3],
        /// Workitem id.
        workitem: [u32; 3],
        /// Panic message.
        message: String,
    },
    /// An error a kernel found on the device (an integer division by zero,
    /// an id past its dim), reported at the next wait after the launch
    /// (`synchronize`, a download): see the `fault` module.
    #[error("{op}: {what} at element {index} (found on {device})")]
    Fault {
        /// The op whose launch found it.
        op: String,
        /// What went wrong.
        what: String,
        /// The element (of the op's output) where one instance was found.
        index: u64,
        /// Device.
        device: String,
    },
    /// An id past the dim it indexes (or negative) given to an indexing op
    /// (`index_select`, `embedding`, `gather`, `scatter`, ...): found by the
    /// Cpu in the op itself, by a kernel on a GPU or the emulator (which
    /// skips that element, never reading or writing out of bounds) and then
    /// reported at the next wait, like [`Error::Fault`].
    #[error(
        "{op}: id {id} at position {position} is out of range for a dim of size {size} (found on {device})"
    )]
    IdOutOfRange {
        /// The op.
        op: String,
        /// The id as given (u8, u32 and i64 ids all fit).
        id: i64,
        /// Its position in the ids, in logical (row-major) order. The Cpu
        /// reports the first bad id; a GPU the first one a workitem found
        /// (the lowest position when there is only one).
        position: u64,
        /// The size of the dim the id indexes.
        size: u64,
        /// Device.
        device: String,
    },
    /// A vendor BLAS call whose operands do not fit their buffers or break
    /// BLAS's rules (see [`crate::blas`]); nothing was queued.
    #[error("BLAS GEMM on {device} refused: {why}")]
    BadBlasCall {
        /// Device.
        device: String,
        /// What is wrong, with the values.
        why: String,
    },
    /// A DNN-library call (see [`crate::dnn`]) that breaks the library's
    /// rules or reaches past a buffer; nothing was queued.
    #[error("DNN call on {device} refused: {why}")]
    BadDnnCall {
        /// Device.
        device: String,
        /// What is wrong, with the values.
        why: String,
    },
    /// Work a [`Graph`](crate::Graph) cannot record (a copy from or to the
    /// host, a wait) was asked for while the thread records; the recording
    /// is abandoned and nothing of it runs.
    #[error("{what} on {device} cannot be recorded into a graph")]
    NotRecordable {
        /// Device.
        device: String,
        /// What was asked (`a copy to the host`, `a wait`, ...).
        what: &'static str,
    },
    /// A HIP / rocBLAS / MIOpen call failed.
    #[error("{call} failed on {device}: {message}")]
    Rocm {
        /// The API call.
        call: String,
        /// Device.
        device: String,
        /// The runtime's message.
        message: String,
    },
    /// A CUDA driver call failed.
    #[error("{call} failed on {device}: {message}")]
    Cuda {
        /// The API call.
        call: String,
        /// Device.
        device: String,
        /// The driver's error name and message.
        message: String,
    },
}

/// `Result` with the host [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
