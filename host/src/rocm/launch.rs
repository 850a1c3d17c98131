//! Kernels on a ROCm GPU: code objects loaded once each (ferrocm's at open,
//! a kernel crate's at the first launch of one of its kernels), kernels
//! looked up once with their argument layout checked against the code
//! object's metadata, the kernarg packing, and the launch.
//!
//! Launches pass `kernelParams` (an array of pointers, one per argument) to
//! `hipModuleLaunchKernel`, not the `extra` buffer. Both are copied by the
//! runtime before the call returns, but they differ in who decides the
//! layout: with `kernelParams` the runtime copies each value to the offset
//! the code object's own metadata gives for that argument; with `extra` it
//! reads the caller's buffer at those metadata offsets (and ignores
//! `HIP_LAUNCH_PARAM_BUFFER_SIZE`), so any disagreement between our packing
//! and the compiler's layout would silently corrupt arguments. (Read from
//! ROCm's `clr`, `hipamd/src/hip_module.cpp`, `ihipLaunchKernelCommand`;
//! the HIP reference only says `extra` "must be in the memory layout and
//! alignment expected by the kernel" and leaves `kernelParams` undescribed,
//! following CUDA's `cuLaunchKernel`.) The runtime reads one pointer per
//! argument the metadata declares, so before a kernel's first launch its
//! metadata is checked against its [`KernelInfo`] and the layout
//! [`pack_args`] gives (`crate::codeobject::check_args`); a mismatch is an
//! error, not a launch.

use super::{RocmDevice, ffi, hip_check};
use crate::codeobject::{KernelResources, check_args, parse_code_object};
use crate::error::{Error, Result};
use crate::gpu::select_code_object;
use crate::launch::LaunchConfig;
use ferrocm_kernels::KernelModule;
use ferrocm_kernels::host::{ArgKind, KernelInfo};
use rocm_rs::hip::bindings as hb;
use std::ffi::CString;
use std::os::raw::c_void;
use std::ptr::null_mut;
use std::sync::Arc;

/// Packs kernel arguments into one kernarg byte buffer.
///
/// Each argument takes [`ArgKind::size`] bytes (pointers, `u64`, `i64`: 8;
/// `u32`, `i32`, `f32`: 4) at the previous end rounded up to its size, holding
/// the low bytes of its 64-bit slot in `raw`, little-endian (the GPU's byte
/// order). The buffer is padded to a multiple of 8 bytes. Returns the buffer and
/// each argument's offset in it. A missing slot packs as 0 and surplus slots
/// are ignored (callers check the count first).
///
/// ```
/// use ferrocm_host::rocm::pack_args;
/// use ferrocm_kernels::host::ArgKind;
/// let (bytes, offsets) = pack_args(&[ArgKind::U32, ArgKind::U64], &[7, 9]);
/// assert_eq!(offsets, vec![0, 8]);
/// assert_eq!(bytes.len(), 16);
/// assert_eq!(bytes[0], 7);
/// assert_eq!(bytes[8], 9);
/// ```
pub fn pack_args(kinds: &[ArgKind], raw: &[u64]) -> (Vec<u8>, Vec<usize>) {
    let mut bytes = Vec::with_capacity(kinds.len() * 8);
    let mut offsets = Vec::with_capacity(kinds.len());
    for (i, kind) in kinds.iter().enumerate() {
        let size = kind.size();
        let offset = bytes.len().next_multiple_of(size);
        bytes.resize(offset, 0);
        let value = raw.get(i).copied().unwrap_or(0);
        bytes.extend_from_slice(&value.to_le_bytes()[..size]);
        offsets.push(offset);
    }
    bytes.resize(bytes.len().next_multiple_of(8), 0);
    (bytes, offsets)
}

/// A loaded code object.
pub(super) struct Module {
    raw: hb::hipModule_t,
    hip: &'static ffi::Hip,
}

// SAFETY: an opaque handle into the HIP runtime, which synchronises its use
// from several threads itself (see the module docs, "Threads").
unsafe impl Send for Module {}
// SAFETY: as above.
unsafe impl Sync for Module {}

impl Drop for Module {
    fn drop(&mut self) {
        // SAFETY: loaded by hipModuleLoadData, unloaded once. Errors are ignored.
        unsafe { (self.hip.hipModuleUnload)(self.raw) };
    }
}

/// A kernel of a loaded module.
#[derive(Clone, Copy)]
pub(super) struct Function(hb::hipFunction_t);

// SAFETY: an opaque handle owned by its module (which outlives every use: the
// device keeps its modules); HIP serialises concurrent launches of one
// function itself (see the module docs).
unsafe impl Send for Function {}

/// The embedded code object copied to 8-byte-aligned memory: `include_bytes!`
/// data has alignment 1, and the runtime reads ELF headers in place. It must
/// outlive the module loaded from it.
pub(super) struct Image(Vec<u64>);

impl Image {
    fn new(bytes: &[u8]) -> Self {
        let mut words = vec![0u64; bytes.len().div_ceil(8)];
        bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..bytes.len()].copy_from_slice(bytes);
        Image(words)
    }

    fn as_ptr(&self) -> *const c_void {
        self.0.as_ptr().cast()
    }
}

/// One loaded code object: the module, the image it was loaded from (which
/// must outlive it: field order drops the module first), and its kernels'
/// metadata (argument layouts), or why that could not be read.
pub(super) struct LoadedModule {
    pub(super) module: Module,
    _image: Image,
    pub(super) meta: std::result::Result<Vec<KernelResources>, String>,
    /// The arch of the code object chosen (`gfx942`, `gfx11-generic`).
    pub(super) chosen: &'static str,
}

/// Loads the code object of `module` that runs on `arch_full` (the exact
/// arch, else its generic family).
pub(super) fn load(
    hip: &'static ffi::Hip,
    module: &KernelModule,
    arch_full: &str,
    device: &str,
) -> Result<LoadedModule> {
    let built = module.archs();
    let no_code_object = || Error::NoCodeObject {
        device: device.into(),
        arch: arch_full.into(),
        built: format!("{}: {}", module.name, built.join(", ")),
    };
    let chosen = select_code_object(arch_full, &built).ok_or_else(no_code_object)?;
    let code_object = module.code_object(chosen).ok_or_else(no_code_object)?;
    let meta = parse_code_object(chosen, code_object.bytes).map_err(|e| e.to_string());
    let image = Image::new(code_object.bytes);
    let mut raw: hb::hipModule_t = null_mut();
    // SAFETY: `image` is a complete code object and outlives the module
    // (both in the LoadedModule, the module dropped first).
    let code = unsafe { (hip.hipModuleLoadData)(&mut raw, image.as_ptr()) };
    hip_check(
        hip,
        code,
        &format!("hipModuleLoadData({} code object {chosen})", module.name),
        device,
    )?;
    Ok(LoadedModule {
        module: Module { raw, hip },
        _image: image,
        meta,
        chosen,
    })
}

impl RocmDevice {
    /// The loaded module `kernel` is in: ferrocm's (loaded at open), or a
    /// kernel crate's, loaded the first time one of its kernels launches.
    fn module_of(&self, kernel: &KernelInfo) -> Result<Arc<LoadedModule>> {
        let module = kernel.module.ok_or_else(|| Error::NoCodeObject {
            device: self.label.clone(),
            arch: self.info.arch_full.clone(),
            built: format!(
                "kernel `{}` is host-only (KernelInfo::host_only): the emulator runs it, no GPU does",
                kernel.name
            ),
        })?;
        let key = module as *const KernelModule as usize;
        let mut modules = self.modules.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(m) = modules.get(&key) {
            return Ok(m.clone());
        }
        self.set_device()?;
        let loaded = Arc::new(load(self.hip, module, &self.info.arch_full, &self.label)?);
        modules.insert(key, loaded.clone());
        Ok(loaded)
    }

    /// The kernel, looked up once and cached. Before the first lookup, its
    /// argument layout in the code object's metadata is checked against the
    /// one [`pack_args`] produces: `kernelParams` makes the runtime read one
    /// value per argument the metadata declares, so a kernel whose metadata
    /// disagrees with its [`KernelInfo`] is refused rather than launched.
    fn function(&self, kernel: &KernelInfo) -> Result<Function> {
        let key = kernel as *const KernelInfo as usize;
        if let Some((f, args)) = self
            .functions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            && *args == kernel.args
        {
            return Ok(*f);
        }
        let module = self.module_of(kernel)?;
        let mismatch = |detail: String| Error::ArgumentMismatch {
            kernel: kernel.name.into(),
            detail,
        };
        let rows = module.meta.as_ref().map_err(|e| {
            mismatch(format!(
                "cannot read the argument layout of {}'s code object: {e}",
                self.label
            ))
        })?;
        check_args(rows, kernel).map_err(mismatch)?;
        let c_name = CString::new(kernel.name).map_err(|_| Error::UnknownKernel {
            kernel: kernel.name.into(),
        })?;
        let mut raw: hb::hipFunction_t = null_mut();
        // SAFETY: our module; writes one handle.
        let code = unsafe {
            (self.hip.hipModuleGetFunction)(&mut raw, module.module.raw, c_name.as_ptr())
        };
        self.check(code, &format!("hipModuleGetFunction({})", kernel.name))?;
        self.functions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, (Function(raw), kernel.args));
        Ok(Function(raw))
    }

    /// Queues `kernel` on the device's stream (`hipModuleLaunchKernel`):
    /// `cfg.grid` workgroups of `cfg.block` workitems with `cfg.lds_bytes`
    /// of dynamic LDS. `raw_args` holds one 64-bit slot per argument (see
    /// [`pack_args`]).
    ///
    /// # Safety
    /// The launch check proved `raw_args` against the signature and every
    /// buffer range (see `GpuBackend::launch`): a pointer to memory the
    /// kernel may not touch is a GPU memory fault, which the ROCm runtime
    /// reports by ending the process.
    pub(super) unsafe fn launch_raw(
        &self,
        kernel: &KernelInfo,
        cfg: &LaunchConfig,
        raw_args: &[u64],
    ) -> Result<()> {
        self.set_device()?;
        let function = self.function(kernel)?;
        let (mut kernarg, offsets) = pack_args(kernel.args, raw_args);
        let base = kernarg.as_mut_ptr();
        // SAFETY: every offset is inside `kernarg` (each argument has at least
        // 4 bytes there).
        let mut params: Vec<*mut c_void> = offsets
            .iter()
            .map(|&o| unsafe { base.add(o) }.cast())
            .collect();
        // SAFETY: `params` has one pointer per kernel argument, each to a value
        // of the argument's size; HIP copies them before returning.
        let code = unsafe {
            (self.hip.hipModuleLaunchKernel)(
                function.0,
                cfg.grid[0],
                cfg.grid[1],
                cfg.grid[2],
                cfg.block[0],
                cfg.block[1],
                cfg.block[2],
                cfg.lds_bytes,
                self.stream.raw,
                params.as_mut_ptr(),
                null_mut(),
            )
        };
        // The call's name is formatted only for an error.
        if code == hb::hipError_t_hipSuccess {
            return Ok(());
        }
        self.check(code, &format!("hipModuleLaunchKernel({})", kernel.name))
    }
}
