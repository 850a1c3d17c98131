//! Kernels on a CUDA GPU: PTX modules prepared once each (ferrocm's at
//! open, a kernel crate's at the first launch of one of its kernels), each
//! kernel compiled by the driver at its first lookup from a module cut to it
//! (or the whole module with `FERROCM_CUDA_MODULES=whole`), its parameters
//! checked against the PTX, and the launch itself (a programmatic dependent
//! launch where the kernel starts early and was compiled for sm_90).

use super::CudaDevice;
use super::driver::{Handle, describe};
use crate::error::{Error, Result};
use crate::launch::LaunchConfig;
use crate::ptx::PtxEntry;
use cudarc::driver::result as cu;
use cudarc::driver::sys;
use ferrocm_kernels::KernelModule;
use ferrocm_kernels::host::KernelInfo;
use std::ffi::{CString, c_void};
use std::sync::Arc;

/// One PTX module of a GPU: by default each kernel is compiled the first
/// time it is looked up, from a module cut to that kernel (the JIT of all of
/// ferrocm's kernels takes tens of seconds on a cold machine; a model needs a
/// few dozen). `FERROCM_CUDA_MODULES=whole` compiles the whole module at
/// once instead, as earlier versions did.
pub(super) struct LoadedModule {
    /// The module as built.
    plain: &'static str,
    /// Its sm_90 form when the GPU is one and early starts are wanted, or
    /// its sm_90a form (see `sm90a`).
    sm90: Option<String>,
    /// `sm90` is the sm_90a form: the GPU is of compute capability 9.0
    /// and the module has warpgroup-product lines (kernels with those
    /// lines load from this form only).
    pub(super) sm90a: bool,
    /// The `sm90` form's early-start lines are real.
    sm90_early: bool,
    /// The kernels with warpgroup-product (sm_90a) lines: compiled from
    /// the sm_90a form or not at all.
    needs_sm90a: Vec<&'static str>,
    /// The items of `plain` and of `sm90` (same items, different text).
    index: Option<(crate::ptx::PtxIndex, Option<crate::ptx::PtxIndex>)>,
    /// The whole module, compiled once (whole mode, or a module that would
    /// not cut), and whether it is the sm_90 form.
    whole: std::sync::OnceLock<std::result::Result<(Handle<sys::CUmodule>, bool), String>>,
    /// Per-kernel modules compiled so far (unloaded with the device).
    parts: std::sync::Mutex<Vec<Handle<sys::CUmodule>>>,
    /// Kernel parameter sizes per entry, read from the PTX.
    pub(super) entries: Vec<PtxEntry>,
    /// The module's name.
    name: &'static str,
    /// What `ferrocm info` says of it.
    pub(super) description: String,
}

/// A looked-up kernel: its function, whether its module starts early, and
/// the most threads per block its compile allows (what a launch checks).
#[derive(Clone, Copy)]
pub(super) struct Function {
    f: Handle<sys::CUfunction>,
    early_start: bool,
    max_threads: u32,
}

/// Most parameters a kernel launch passes (ferrocm's kernels take at most
/// 28): the argument slots live on the stack, not in a vector per launch.
const MAX_PARAMS: usize = 32;

/// What the driver's compile of one kernel uses on this GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelResources {
    /// Registers per thread.
    pub registers: u32,
    /// Local memory per thread (spills, stack): 0 is the goal.
    pub local_bytes: u32,
    /// Static shared memory (dynamic shared memory comes with the launch).
    pub static_shared_bytes: u32,
    /// Most threads per block the compile allows.
    pub max_threads: u32,
}

/// Prepares `module`'s PTX for a GPU of compute capability `cc` (`major *
/// 10 + minor`): on sm_90 and newer its kernels are compiled with their
/// sm_90 instructions made real (early-start launches), and on 9.0 exactly
/// (H100, H200) as sm_90a with the warpgroup product's lines real too;
/// else (or when that form does not load) as built, so a driver that
/// refuses it costs only the overlap, except for the kernels with
/// warpgroup-product lines, which then do not load at all.
/// `FERROCM_EARLY_START=0` leaves the early-start lines comments,
/// `FERROCM_WGMMA=0` the sm_90a form out. Nothing is compiled here unless
/// `FERROCM_CUDA_MODULES=whole`.
pub(super) fn load(module: &KernelModule, cc: u32, label: &str) -> Result<LoadedModule> {
    let ptx = module.ptx.ok_or_else(|| Error::NoCodeObject {
        device: label.into(),
        arch: format!("sm_{cc}"),
        built: format!(
            "no PTX module in {} (built with FERROCM_PTX=off)",
            module.name
        ),
    })?;
    let target: u32 = ptx.target.trim_start_matches("sm_").parse().unwrap_or(0);
    if cc < target {
        return Err(Error::NoCodeObject {
            device: label.into(),
            arch: format!("sm_{cc}"),
            built: format!("{}: PTX for {} and newer", module.name, ptx.target),
        });
    }
    let wanted = std::env::var("FERROCM_EARLY_START").map_or(true, |v| v.trim() != "0");
    let early = wanted && cc >= 90;
    // The warpgroup product (sm_90a) on a GPU of compute capability 9.0
    // unless `FERROCM_WGMMA=0`.
    let wgmma = cc == 90 && std::env::var("FERROCM_WGMMA").map_or(true, |v| v.trim() != "0");
    let sm90a = wgmma
        .then(|| crate::ptx::specialise_for_sm90a(ptx.text, early))
        .flatten();
    let sm90a_form = sm90a.is_some();
    let sm90 = sm90a.or_else(|| {
        early
            .then(|| crate::ptx::specialise_for_sm90(ptx.text))
            .flatten()
    });
    let sm90_early = early && sm90.is_some();
    let whole_mode = std::env::var("FERROCM_CUDA_MODULES").is_ok_and(|v| v.trim() == "whole");
    let index = (!whole_mode)
        .then(|| {
            let plain = crate::ptx::PtxIndex::parse(ptx.text)?;
            let special = match &sm90 {
                Some(text) => Some(crate::ptx::PtxIndex::parse(text)?),
                None => None,
            };
            Some((plain, special))
        })
        .flatten();
    let loaded = LoadedModule {
        plain: ptx.text,
        sm90,
        sm90a: sm90a_form,
        sm90_early,
        needs_sm90a: crate::ptx::entries_marked(ptx.text, ferrocm_kernels::host::SM90A_ONLY),
        index,
        whole: std::sync::OnceLock::new(),
        parts: std::sync::Mutex::new(Vec::new()),
        entries: crate::ptx::entries(ptx.text),
        name: module.name,
        description: String::new(),
    };
    let form = match (loaded.sm90a, loaded.sm90_early) {
        (true, true) => "sm_90a (warpgroup products, early-start launches)",
        (true, false) => "sm_90a (warpgroup products)",
        _ => "sm_90 (early-start launches)",
    };
    let mut special_loaded = true;
    let description = if loaded.index.is_some() {
        format!(
            "ptx {}, each kernel compiled at its first launch{}",
            ptx.target,
            if loaded.sm90.is_some() {
                format!(" as {form}")
            } else {
                String::new()
            }
        )
    } else {
        // Compiled now, as one module: its errors surface at open.
        match loaded.whole_module() {
            Ok((_, true)) => format!("ptx {}, loaded as {form}", ptx.target),
            Ok((_, false)) if loaded.sm90.is_some() => {
                special_loaded = false;
                format!(
                    "ptx {} (its {form} form did not load: launches do not overlap, no warpgroup products)",
                    ptx.target
                )
            }
            Ok(_) => format!("ptx {}", ptx.target),
            Err(message) => {
                return Err(Error::Cuda {
                    call: format!("cuModuleLoadDataEx (PTX JIT of {})", module.name),
                    device: label.into(),
                    message,
                });
            }
        }
    };
    Ok(LoadedModule {
        description,
        // The whole module as built: its sm_90a lines are comments.
        sm90a: loaded.sm90a && special_loaded,
        ..loaded
    })
}

impl LoadedModule {
    /// The whole module compiled (once): its sm_90 (or sm_90a) form when
    /// there is one and the driver takes it, else as built; and whether it
    /// is that form.
    fn whole_module(&self) -> std::result::Result<(sys::CUmodule, bool), String> {
        let r = self.whole.get_or_init(|| {
            if let Some(m) = self.sm90.as_deref().and_then(|t| load_ptx(t).ok()) {
                return Ok((Handle(m), true));
            }
            load_ptx(self.plain).map(|m| (Handle(m), false))
        });
        match r {
            Ok((m, early)) => Ok((m.0, *early)),
            Err(e) => Err(e.clone()),
        }
    }

    /// The compiled module holding `kernel` and whether it starts early: a
    /// module of that kernel alone (sm_90 form first), or the whole one.
    /// A kernel with warpgroup-product lines comes from the sm_90a form or
    /// not at all: as built, those lines are comments.
    fn module_for(&self, kernel: &str) -> std::result::Result<(sys::CUmodule, bool), String> {
        let needs_sm90a = self.needs_sm90a(kernel);
        if needs_sm90a && !self.sm90a {
            return Err(format!(
                "`{kernel}` runs Hopper's warpgroup product: it needs a GPU of compute capability 9.0 \
                 (and FERROCM_WGMMA not 0)"
            ));
        }
        let Some((plain, special)) = &self.index else {
            let (m, special) = self.whole_module()?;
            if needs_sm90a && !special {
                return Err(format!(
                    "`{kernel}` runs Hopper's warpgroup product and the module's sm_90a form did not load"
                ));
            }
            return Ok((m, special && self.sm90_early));
        };
        let mut refused = None;
        if let (Some(text), Some(index)) = (&self.sm90, special)
            && let Some(cut) = index.kernel_module(text, kernel)
        {
            match load_ptx(&cut) {
                Ok(m) => return Ok((self.keep(m), self.sm90_early)),
                Err(why) if needs_sm90a => return Err(format!("its sm_90a form: {why}")),
                Err(why) => refused = Some(why),
            }
        }
        if needs_sm90a {
            return Err(format!(
                "`{kernel}` is not in the sm_90a form of {}",
                self.name
            ));
        }
        match plain.kernel_module(self.plain, kernel) {
            Some(cut) => load_ptx(&cut)
                .map(|m| (self.keep(m), false))
                .map_err(|e| match refused {
                    Some(why) => format!("{e} (its sm_90 form: {why})"),
                    None => e,
                }),
            None => Err(format!("`{kernel}` is not in the PTX of {}", self.name)),
        }
    }

    /// Whether `kernel` has warpgroup-product lines (see `needs_sm90a`).
    pub(super) fn needs_sm90a(&self, kernel: &str) -> bool {
        self.needs_sm90a.contains(&kernel)
    }

    /// Whether `kernel` can run from this module as loaded: not one with
    /// warpgroup-product lines unless the module is in its sm_90a form.
    pub(super) fn runs(&self, kernel: &str) -> bool {
        self.sm90a || !self.needs_sm90a(kernel)
    }

    fn keep(&self, m: sys::CUmodule) -> sys::CUmodule {
        self.parts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Handle(m));
        m
    }

    /// Unloads every compiled module (the context must be current).
    pub(super) fn unload(&self) {
        let parts = std::mem::take(&mut *self.parts.lock().unwrap_or_else(|e| e.into_inner()));
        for m in parts.into_iter().chain(
            self.whole
                .get()
                .and_then(|r| r.as_ref().ok())
                .map(|(m, _)| Handle(m.0)),
        ) {
            // SAFETY: loaded by cuModuleLoadDataEx, unloaded once.
            let _ = unsafe { cu::module::unload(m.0) };
        }
    }
}

/// Loads PTX text, with the driver's JIT error log on failure.
fn load_ptx(ptx: &str) -> std::result::Result<sys::CUmodule, String> {
    let text = CString::new(ptx).map_err(|_| "the PTX holds a NUL byte".to_string())?;
    const LOG: usize = 16 * 1024;
    let mut error_log = vec![0u8; LOG];
    let mut options = [
        sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER,
        sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
    ];
    let mut values: [*mut c_void; 2] = [error_log.as_mut_ptr().cast(), LOG as *mut c_void];
    let mut module = std::mem::MaybeUninit::uninit();
    // SAFETY: NUL-terminated PTX; the option values are a buffer and its size.
    let r = unsafe {
        sys::cuModuleLoadDataEx(
            module.as_mut_ptr(),
            text.as_ptr().cast(),
            options.len() as u32,
            options.as_mut_ptr(),
            values.as_mut_ptr(),
        )
    };
    match r.result() {
        // SAFETY: written on success.
        Ok(()) => Ok(unsafe { module.assume_init() }),
        Err(e) => {
            let end = error_log.iter().position(|&b| b == 0).unwrap_or(0);
            Err(format!(
                "{}: {}",
                describe(&e),
                String::from_utf8_lossy(&error_log[..end])
            ))
        }
    }
}

impl CudaDevice {
    /// The loaded module `kernel` is in: ferrocm's (loaded at open), or a
    /// kernel crate's, loaded the first time one of its kernels launches.
    fn module_of(&self, kernel: &KernelInfo) -> Result<Arc<LoadedModule>> {
        let module = kernel.module.ok_or_else(|| Error::NoCodeObject {
            device: self.label.clone(),
            arch: self.info.arch.clone(),
            built: format!("kernel `{}` is host-only (KernelInfo::host_only): the emulator runs it, no GPU does", kernel.name),
        })?;
        let key = module as *const KernelModule as usize;
        let mut modules = self.modules.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(m) = modules.get(&key) {
            return Ok(m.clone());
        }
        self.current()?;
        let loaded = Arc::new(load(module, self.cc, &self.label)?);
        modules.insert(key, loaded.clone());
        Ok(loaded)
    }

    /// Whether `kernel` can run on this GPU as its module is loaded: false
    /// for a kernel built on the warpgroup product (`gemm_wgmma_*`,
    /// `conv_wgmma_*`) unless the module is in its sm_90a form (compute
    /// capability 9.0).
    ///
    /// # Errors
    /// As a launch's when the kernel's module cannot be prepared.
    pub fn runs_kernel(&self, kernel: &KernelInfo) -> Result<bool> {
        Ok(self.module_of(kernel)?.runs(kernel.name))
    }

    /// The loaded kernel, looked up once: its PTX parameters are checked
    /// against its signature first, and its dynamic shared memory limit is
    /// raised to the device's LDS limit.
    pub(super) fn function(&self, kernel: &KernelInfo) -> Result<Function> {
        let key = kernel as *const KernelInfo as usize;
        if let Some(f) = self
            .functions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            return Ok(*f);
        }
        let module = self.module_of(kernel)?;
        crate::ptx::check_entry(&module.entries, kernel).map_err(|detail| {
            Error::ArgumentMismatch {
                kernel: kernel.name.into(),
                detail,
            }
        })?;
        let name = CString::new(kernel.name).map_err(|_| Error::UnknownKernel {
            kernel: kernel.name.into(),
        })?;
        self.current()?;
        let (compiled, early_start) =
            module
                .module_for(kernel.name)
                .map_err(|message| Error::Cuda {
                    call: format!("cuModuleLoadDataEx (PTX JIT of `{}`)", kernel.name),
                    device: self.label.clone(),
                    message,
                })?;
        // SAFETY: our module.
        let f = self.check(
            unsafe { cu::module::get_function(compiled, name) },
            &format!("cuModuleGetFunction({})", kernel.name),
        )?;
        // SAFETY: a function of our module.
        self.check(
            unsafe {
                cu::function::set_function_attribute(
                    f,
                    sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    self.info.max_lds_bytes as i32,
                )
            },
            "cuFuncSetAttribute(max dynamic shared memory)",
        )?;
        // SAFETY: a function of our module.
        let max_threads = self.check(
            unsafe {
                cu::function::get_function_attribute(
                    f,
                    sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                )
            },
            "cuFuncGetAttribute(max threads)",
        )?;
        let function = Function {
            f: Handle(f),
            early_start,
            max_threads: max_threads.max(0) as u32,
        };
        self.functions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, function);
        Ok(function)
    }

    /// Registers, local (stack) bytes and static shared bytes of a kernel as
    /// the driver compiled it for this GPU.
    ///
    /// # Errors
    /// [`Error::UnknownKernel`] when the module has no such entry;
    /// [`Error::Cuda`] when an attribute query fails.
    pub fn kernel_resources(&self, kernel: &KernelInfo) -> Result<KernelResources> {
        let key = kernel as *const KernelInfo as usize;
        if let Some(r) = self
            .resources
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            return Ok(*r);
        }
        let f = self.function(kernel)?.f.0;
        self.current()?;
        use sys::CUfunction_attribute as F;
        let get = |a: F, what: &str| {
            // SAFETY: a function of our module.
            self.check(
                unsafe { cu::function::get_function_attribute(f, a) },
                &format!("cuFuncGetAttribute({what})"),
            )
        };
        let r = KernelResources {
            registers: get(F::CU_FUNC_ATTRIBUTE_NUM_REGS, "registers")?.max(0) as u32,
            local_bytes: get(F::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, "local size")?.max(0) as u32,
            static_shared_bytes: get(F::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, "shared size")?.max(0)
                as u32,
            max_threads: get(F::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, "max threads")?.max(0)
                as u32,
        };
        self.resources
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, r);
        Ok(r)
    }

    /// Queues `kernel` on the stream. `raw_args` holds one 64-bit slot per
    /// argument; the driver reads each parameter's size (4 or 8 bytes,
    /// checked against the PTX at the first lookup) from the start of its
    /// slot, which is the value on a little-endian host.
    ///
    /// # Safety
    /// The launch check proved `raw_args` against the signature and every
    /// buffer range (see `GpuBackend::launch`).
    pub(super) unsafe fn launch_raw(
        &self,
        kernel: &KernelInfo,
        cfg: &LaunchConfig,
        raw_args: &[u64],
    ) -> Result<()> {
        let function = self.function(kernel)?;
        let max_threads = function.max_threads;
        if cfg.block_size() > max_threads as u64 {
            return Err(Error::BadLaunchConfig {
                kernel: kernel.name.into(),
                detail: format!(
                    "block {:?} has {} threads; the driver's compile for {} allows {max_threads}",
                    cfg.block,
                    cfg.block_size(),
                    self.info.arch
                ),
            });
        }
        if raw_args.len() > MAX_PARAMS {
            return Err(Error::ArgumentMismatch {
                kernel: kernel.name.into(),
                detail: format!(
                    "takes {} parameters; a launch passes at most {MAX_PARAMS}",
                    raw_args.len()
                ),
            });
        }
        self.current()?;
        let mut slots = [0u64; MAX_PARAMS];
        slots[..raw_args.len()].copy_from_slice(raw_args);
        let mut all = [std::ptr::null_mut::<c_void>(); MAX_PARAMS];
        for (p, s) in all.iter_mut().zip(slots.iter_mut()) {
            *p = s as *mut u64 as *mut c_void;
        }
        let params = &mut all[..raw_args.len()];
        if cfg.early_start && function.early_start {
            return self.launch_early(kernel, function.f.0, cfg, params);
        }
        // SAFETY: one pointer per parameter, each to 8 readable bytes; the
        // driver copies the values before returning.
        let r = unsafe {
            cu::launch_kernel(
                function.f.0,
                (cfg.grid[0], cfg.grid[1], cfg.grid[2]),
                (cfg.block[0], cfg.block[1], cfg.block[2]),
                cfg.lds_bytes,
                self.stream.0,
                params,
            )
        };
        // The call's name is formatted only for an error.
        r.map_err(|e| self.launch_error(kernel, "cuLaunchKernel", e))
    }

    /// Queues `kernel` as a programmatic dependent launch
    /// (`CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION`): its
    /// workgroups may be scheduled before the previous kernel on the stream
    /// has finished, and wait for it in `wait_prior_grids` (the promise
    /// [`LaunchConfig::early_start`] makes).
    fn launch_early(
        &self,
        kernel: &KernelInfo,
        f: sys::CUfunction,
        cfg: &LaunchConfig,
        params: &mut [*mut c_void],
    ) -> Result<()> {
        // SAFETY: all-zero is a valid attribute (id 0, value bytes 0).
        let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
        attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attr.value.programmaticStreamSerializationAllowed = 1;
        let config = sys::CUlaunchConfig {
            gridDimX: cfg.grid[0],
            gridDimY: cfg.grid[1],
            gridDimZ: cfg.grid[2],
            blockDimX: cfg.block[0],
            blockDimY: cfg.block[1],
            blockDimZ: cfg.block[2],
            sharedMemBytes: cfg.lds_bytes,
            hStream: self.stream.0,
            attrs: &mut attr,
            numAttrs: 1,
        };
        // SAFETY: the config and its one attribute outlive the call; one
        // pointer per parameter as in `launch_raw`. cuLaunchKernelEx is in
        // every driver that runs sm_90 (CUDA 11.8 and newer).
        let r =
            unsafe { sys::cuLaunchKernelEx(&config, f, params.as_mut_ptr(), std::ptr::null_mut()) };
        r.result()
            .map_err(|e| self.launch_error(kernel, "cuLaunchKernelEx", e))
    }

    /// The error of a failed launch call, naming the kernel.
    fn launch_error(&self, kernel: &KernelInfo, call: &str, e: cu::DriverError) -> Error {
        Error::Cuda {
            call: format!("{call}({})", kernel.name),
            device: self.label.clone(),
            message: describe(&e),
        }
    }
}
