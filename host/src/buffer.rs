//! Typed device buffers.

use crate::device::Device;
use crate::error::{Error, Result};
use std::alloc::Layout;
use std::marker::PhantomData;
use std::ptr::NonNull;

use crate::memory::{MemoryStats, Pool, size_class};

/// Bytes of red zone on each side of an emulator buffer under the sanitizer.
pub const RED_ZONE: usize = 256;
/// Byte that fills fresh (uninitialised) buffers under the sanitizer: all-ones
/// is NaN for f32/f16/bf16 and the maximum for unsigned types, so an output
/// element a kernel forgot to write fails the comparison with the CPU.
pub const POISON: u8 = 0xff;

fn canary(i: usize) -> u8 {
    (i as u8) ^ 0x5a
}

/// Host memory for the Cpu and Emulator devices: 256-byte aligned, `capacity`
/// bytes of data (a size class), with red zones (filled with canaries) on both
/// sides of the `len_bytes` in use when the sanitizer is on.
pub(crate) struct HostAlloc {
    base: NonNull<u8>,
    layout: Layout,
    red_zone: usize,
    capacity: usize,
    len_bytes: usize,
}

// SAFETY: plain memory; access is synchronised by the launch API (launches are
// synchronous on host-memory devices).
unsafe impl Send for HostAlloc {}
unsafe impl Sync for HostAlloc {}

impl HostAlloc {
    /// A zero-filled block of `capacity` data bytes (zeroed so that stale
    /// reads of a reused block always see initialised memory).
    fn new(capacity: usize, red_zone: usize, what: &Device) -> Result<Self> {
        let oom = || Error::OutOfMemory {
            device: what.to_string(),
            bytes: capacity,
            free: None,
        };
        let total = capacity
            .checked_add(2 * red_zone)
            .and_then(|t| t.checked_next_multiple_of(256))
            .filter(|t| *t <= isize::MAX as usize / 2)
            .ok_or_else(oom)?;
        let layout = Layout::from_size_align(total.max(256), 256).map_err(|_| oom())?;
        // SAFETY: non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        let base = NonNull::new(p).ok_or_else(oom)?;
        Ok(Self {
            base,
            layout,
            red_zone,
            capacity,
            len_bytes: 0,
        })
    }

    /// Prepares the block for a buffer of `len_bytes` (at most the capacity):
    /// canaries right around those bytes, and the bytes set to `fill` if given.
    fn prepare(&mut self, len_bytes: usize, fill: Option<u8>) {
        debug_assert!(len_bytes <= self.capacity);
        self.len_bytes = len_bytes;
        let (p, red) = (self.base.as_ptr(), self.red_zone);
        // SAFETY: every write is inside the allocation (capacity + 2 red zones).
        unsafe {
            if let Some(b) = fill {
                std::ptr::write_bytes(p.add(red), b, len_bytes);
            }
            for i in 0..red {
                *p.add(i) = canary(i);
                *p.add(red + len_bytes + i) = canary(i);
            }
        }
    }

    pub(crate) fn ptr(&self) -> *mut u8 {
        // SAFETY: within the allocation.
        unsafe { self.base.as_ptr().add(self.red_zone) }
    }

    pub(crate) fn len_bytes(&self) -> usize {
        self.len_bytes
    }

    /// Counts changed canary bytes before and after the data.
    pub(crate) fn check_red_zones(&self) -> (usize, usize) {
        let mut before = 0;
        let mut after = 0;
        // SAFETY: within the allocation.
        unsafe {
            let p = self.base.as_ptr();
            for i in 0..self.red_zone {
                before += (*p.add(i) != canary(i)) as usize;
                after += (*p.add(self.red_zone + self.len_bytes + i) != canary(i)) as usize;
            }
        }
        (before, after)
    }
}

impl Drop for HostAlloc {
    fn drop(&mut self) {
        // SAFETY: allocated with this layout.
        unsafe { std::alloc::dealloc(self.base.as_ptr(), self.layout) }
    }
}

/// A block of device memory as the caches hold it.
pub(crate) enum Block {
    Host(HostAlloc),
    #[cfg(feature = "rocm")]
    Rocm(crate::rocm::RocmAlloc),
    #[cfg(feature = "cuda")]
    Cuda(crate::cuda::CudaAlloc),
}

/// The caches of the host-memory devices: the Cpu, and the emulator per wave
/// size and sanitizer setting (each is its own device).
static HOST_POOLS: [Pool<Block>; 5] = [
    Pool::new(),
    Pool::new(),
    Pool::new(),
    Pool::new(),
    Pool::new(),
];

impl Device {
    /// The cache and counters of this device.
    pub(crate) fn pool(&self) -> &Pool<Block> {
        match self {
            Device::Cpu => &HOST_POOLS[0],
            Device::Emulator(c) => {
                &HOST_POOLS[1
                    + (c.wave_size == crate::WaveSize::Wave64) as usize * 2
                    + c.sanitize as usize]
            }
            #[cfg(feature = "rocm")]
            Device::Rocm(r) => r.pool(),
            #[cfg(feature = "cuda")]
            Device::Cuda(c) => c.pool(),
        }
    }

    /// Caps the bytes this device's allocator may hold (live buffers plus its
    /// cache) at `limit`, or lifts the cap (`None`). An allocation past the cap
    /// first empties the cache, then fails with [`Error::OutOfMemory`]. Two
    /// handles on one device share the cap.
    ///
    /// ```
    /// use ferrocm_host::{Device, EmulatorConfig, Error, WaveSize};
    /// let dev = Device::emulator_with(EmulatorConfig { wave_size: WaveSize::Wave64, sanitize: false });
    /// dev.set_memory_limit(Some(dev.memory_stats().bytes_in_use + 4096));
    /// assert!(matches!(dev.alloc::<u8>(1 << 20), Err(Error::OutOfMemory { .. })));
    /// dev.set_memory_limit(None);
    /// assert!(dev.alloc::<u8>(1 << 20).is_ok());
    /// ```
    pub fn set_memory_limit(&self, limit: Option<u64>) {
        self.pool().set_limit(limit)
    }

    /// The cap set by [`Device::set_memory_limit`], if any.
    pub fn memory_limit(&self) -> Option<u64> {
        self.pool().limit()
    }

    /// Memory and launch statistics of this device: bytes in use and cached,
    /// the peak, fresh versus reused allocations, synchronisations, launches.
    /// Two handles on one device share them.
    ///
    /// ```
    /// use ferrocm_host::Device;
    /// let s = Device::Cpu.memory_stats();
    /// assert!(s.peak_bytes_in_use >= s.bytes_in_use);
    /// ```
    pub fn memory_stats(&self) -> MemoryStats {
        self.pool().stats()
    }

    /// Gives every cached (free) block back to the system. Live buffers are
    /// untouched. On a GPU, `hipFree` waits for the device.
    ///
    /// ```
    /// # use ferrocm_host::WaveSize;
    /// use ferrocm_host::Device;
    /// let dev = Device::emulator(WaveSize::Wave32);
    /// drop(dev.alloc::<u8>(100).unwrap());
    /// dev.empty_cache();
    /// assert_eq!(dev.memory_stats().bytes_cached, 0);
    /// ```
    pub fn empty_cache(&self) {
        self.pool().empty()
    }

    /// A buffer of `len_bytes` from the cache (or fresh), its bytes set to
    /// `fill` when given; otherwise they hold whatever the block held (always
    /// initialised memory).
    pub(crate) fn alloc_raw(&self, len_bytes: usize, fill: Option<u8>) -> Result<RawBuffer> {
        let class = size_class(len_bytes);
        let pool = self.pool();
        // A fresh block past the memory limit is out of memory (the pool then
        // empties its cache and tries once more).
        let within_limit = || match pool.room() {
            Some(room) if class as u64 > room => Err(Error::OutOfMemory {
                device: format!("{self} (memory limit {} bytes)", pool.limit().unwrap_or(0)),
                bytes: len_bytes,
                free: Some(room),
            }),
            _ => Ok(()),
        };
        let (mut block, _reused) = match self {
            Device::Cpu | Device::Emulator(_) => {
                let red = if self.sanitizer() { RED_ZONE } else { 0 };
                pool.take(class, || {
                    within_limit()?;
                    HostAlloc::new(class, red, self).map(Block::Host)
                })?
            }
            #[cfg(feature = "rocm")]
            Device::Rocm(r) => pool.take(class, || {
                within_limit()?;
                r.alloc(class).map(Block::Rocm)
            })?,
            #[cfg(feature = "cuda")]
            Device::Cuda(c) => pool.take(class, || {
                within_limit()?;
                c.alloc(class).map(Block::Cuda)
            })?,
        };
        match &mut block {
            Block::Host(h) => h.prepare(len_bytes, fill),
            #[cfg(feature = "rocm")]
            Block::Rocm(a) => {
                if let (Some(b), Device::Rocm(r)) = (fill, self) {
                    r.memset(a, b, len_bytes)?;
                }
            }
            #[cfg(feature = "cuda")]
            Block::Cuda(a) => {
                if let (Some(b), Device::Cuda(c)) = (fill, self) {
                    c.memset(a, b, len_bytes)?;
                }
            }
        }
        Ok(RawBuffer {
            block: Some(block),
            class,
            len_bytes,
            device: self.clone(),
        })
    }
}

/// Untyped device memory: `len_bytes` bytes on a [`Device`], from its caching
/// allocator (returned there on drop). [`DeviceBuffer<T>`] is its typed view;
/// a storage whose element type is known only at run time (or that holds
/// blocks of a quantized format) keeps a `RawBuffer`.
///
/// ```
/// use ferrocm_host::{Device, RawBuffer};
/// let b = Device::Cpu.upload(&[1u16, 2, 3]).unwrap();
/// let raw: RawBuffer = b.into_raw();
/// assert_eq!(raw.len_bytes(), 6);
/// assert_eq!(raw.typed::<u16>().unwrap().download().unwrap(), vec![1, 2, 3]);
/// assert!(raw.typed::<u32>().is_none()); // 6 bytes are no whole number of u32s
/// ```
pub struct RawBuffer {
    block: Option<Block>,
    class: usize,
    len_bytes: usize,
    device: Device,
}

impl Drop for RawBuffer {
    fn drop(&mut self) {
        if let Some(b) = self.block.take() {
            self.device.pool().give(self.class, b);
        }
    }
}

impl RawBuffer {
    /// Size in bytes.
    pub fn len_bytes(&self) -> usize {
        self.len_bytes
    }

    /// The device the memory is on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The address kernels see (host address for Cpu/Emulator, device address on a GPU).
    pub fn device_ptr(&self) -> u64 {
        match self.block.as_ref() {
            Some(Block::Host(h)) => h.ptr() as u64,
            #[cfg(feature = "rocm")]
            Some(Block::Rocm(r)) => r.ptr(),
            #[cfg(feature = "cuda")]
            Some(Block::Cuda(c)) => c.ptr(),
            None => 0,
        }
    }

    /// This memory viewed as `T`s: `None` unless the length is a whole number
    /// of `T`s (the alignment is always 256 bytes).
    pub fn typed<T: bytemuck::Pod>(&self) -> Option<&DeviceBuffer<T>> {
        if size_of::<T>() == 0 || !self.len_bytes.is_multiple_of(size_of::<T>()) {
            return None;
        }
        // SAFETY: DeviceBuffer<T> is a repr(transparent) RawBuffer; any bytes
        // are valid Ts (Pod), the length divides, blocks are 256-aligned.
        Some(unsafe { &*(self as *const RawBuffer as *const DeviceBuffer<T>) })
    }

    /// This memory viewed as mutable `T`s (see [`RawBuffer::typed`]).
    pub fn typed_mut<T: bytemuck::Pod>(&mut self) -> Option<&mut DeviceBuffer<T>> {
        self.typed::<T>()?;
        // SAFETY: as in `typed`; `&mut self` is unique.
        Some(unsafe { &mut *(self as *mut RawBuffer as *mut DeviceBuffer<T>) })
    }

    /// Into a typed buffer, or back unchanged when the length does not divide.
    ///
    /// # Errors
    /// Gives the raw buffer back when its device's bytes do not split into
    /// whole `T`s.
    pub fn into_typed<T: bytemuck::Pod>(self) -> std::result::Result<DeviceBuffer<T>, RawBuffer> {
        if self.typed::<T>().is_none() {
            return Err(self);
        }
        Ok(DeviceBuffer {
            raw: self,
            _t: PhantomData,
        })
    }

    pub(crate) fn host_alloc(&self) -> Option<&HostAlloc> {
        match self.block.as_ref() {
            Some(Block::Host(h)) => Some(h),
            _ => None,
        }
    }

    #[cfg(feature = "rocm")]
    pub(crate) fn rocm_alloc(&self) -> Option<&crate::rocm::RocmAlloc> {
        match self.block.as_ref() {
            Some(Block::Rocm(r)) => Some(r),
            _ => None,
        }
    }

    #[cfg(feature = "cuda")]
    pub(crate) fn cuda_alloc(&self) -> Option<&crate::cuda::CudaAlloc> {
        match self.block.as_ref() {
            Some(Block::Cuda(c)) => Some(c),
            _ => None,
        }
    }

    /// The bytes, for buffers in host memory.
    fn host_bytes(&self) -> Option<&[u8]> {
        // SAFETY: len_bytes initialised bytes (blocks are zeroed when made).
        self.host_alloc()
            .map(|h| unsafe { std::slice::from_raw_parts(h.ptr(), self.len_bytes) })
    }

    fn host_bytes_mut(&mut self) -> Option<&mut [u8]> {
        let len = self.len_bytes;
        // SAFETY: as above, and `&mut self` is unique.
        self.host_alloc()
            .map(|h| unsafe { std::slice::from_raw_parts_mut(h.ptr(), len) })
    }

    /// Copies the bytes to the host (waits for queued work on a GPU).
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] when `dst` is not the buffer's size;
    /// [`Error::Fault`] as [`DeviceBuffer::download`]; [`Error::Rocm`] /
    /// [`Error::Cuda`] when the copy fails.
    pub fn download_bytes(&self, dst: &mut [u8]) -> Result<()> {
        self.copy_to_host(dst)?;
        // A wait: the place a fault reported by a kernel since the last one surfaces.
        self.device.check_faults()
    }

    /// The copy of [`RawBuffer::download_bytes`] without the fault check.
    pub(crate) fn copy_to_host(&self, dst: &mut [u8]) -> Result<()> {
        if dst.len() != self.len_bytes {
            return Err(Error::LengthMismatch {
                what: "download".into(),
                expected: self.len_bytes,
                got: dst.len(),
            });
        }
        self.device.pool().count_sync();
        if let Some(b) = self.host_bytes() {
            dst.copy_from_slice(b);
            return Ok(());
        }
        #[cfg(feature = "rocm")]
        if let (Some(a), Device::Rocm(r)) = (self.rocm_alloc(), &self.device) {
            return r.copy_dtoh(a, dst);
        }
        #[cfg(feature = "cuda")]
        if let (Some(a), Device::Cuda(c)) = (self.cuda_alloc(), &self.device) {
            return c.copy_dtoh(a, dst);
        }
        Ok(())
    }

    /// Overwrites the bytes from the host and waits until the copy is done.
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] when `src` is not the buffer's size;
    /// [`Error::Rocm`] / [`Error::Cuda`] when the copy fails.
    pub fn write_bytes(&mut self, src: &[u8]) -> Result<()> {
        if src.len() != self.len_bytes {
            return Err(Error::LengthMismatch {
                what: "DeviceBuffer::write".into(),
                expected: self.len_bytes,
                got: src.len(),
            });
        }
        self.device.pool().count_sync();
        if let Some(b) = self.host_bytes_mut() {
            b.copy_from_slice(src);
            return Ok(());
        }
        #[cfg(feature = "rocm")]
        if let (Some(a), Device::Rocm(r)) = (self.rocm_alloc(), &self.device) {
            return r.copy_htod(a, src);
        }
        #[cfg(feature = "cuda")]
        if let (Some(a), Device::Cuda(c)) = (self.cuda_alloc(), &self.device) {
            return c.copy_htod(a, src);
        }
        Ok(())
    }
}

/// A typed buffer of `len` elements on a [`Device`]: a [`RawBuffer`] viewed as
/// `T`s (the same memory, returned to the device's cache on drop).
///
/// Fresh buffers from [`Device::alloc`] hold unspecified (but initialised)
/// values: under the sanitizer they are filled with [`POISON`].
///
/// ```
/// # use ferrocm_host::WaveSize;
/// use ferrocm_host::Device;
/// let dev = Device::emulator(WaveSize::Wave32);
/// let buf = dev.upload(&[1.0f32, 2.0, 3.0]).unwrap();
/// assert_eq!(buf.len(), 3);
/// assert_eq!(buf.download().unwrap(), vec![1.0, 2.0, 3.0]);
/// ```
#[repr(transparent)]
pub struct DeviceBuffer<T> {
    raw: RawBuffer,
    _t: PhantomData<T>,
}

// SAFETY: the buffer owns its memory; T is plain data.
unsafe impl<T: Send> Send for DeviceBuffer<T> {}
unsafe impl<T: Sync> Sync for DeviceBuffer<T> {}

impl Device {
    fn alloc_typed<T: bytemuck::Pod>(
        &self,
        len: usize,
        fill: Option<u8>,
    ) -> Result<DeviceBuffer<T>> {
        let bytes = len
            .checked_mul(size_of::<T>())
            .filter(|b| *b <= isize::MAX as usize / 2)
            .ok_or_else(|| Error::OutOfMemory {
                device: self.to_string(),
                bytes: usize::MAX,
                free: None,
            })?;
        Ok(DeviceBuffer {
            raw: self.alloc_raw(bytes, fill)?,
            _t: PhantomData,
        })
    }

    /// A buffer of `len` elements from the device's cache, for a kernel or op
    /// to write: its values are unspecified (stale or zero), except under the
    /// sanitizer, which fills it with [`POISON`] so an element never written
    /// shows up.
    ///
    /// ```
    /// let b = ferrocm_host::Device::Cpu.alloc::<u32>(4).unwrap();
    /// assert_eq!(b.len(), 4);
    /// ```
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] (with the free bytes where the driver says) when
    /// the device, or the pool limit, has no room; [`Error::Rocm`] /
    /// [`Error::Cuda`] for another driver failure.
    pub fn alloc<T: bytemuck::Pod>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        self.alloc_typed(len, self.sanitizer().then_some(POISON))
    }

    /// A zero-filled buffer of `len` elements.
    ///
    /// ```
    /// # use ferrocm_host::WaveSize;
    /// let b = ferrocm_host::Device::emulator(WaveSize::Wave64).alloc_zeroed::<f32>(2).unwrap();
    /// assert_eq!(b.download().unwrap(), vec![0.0, 0.0]);
    /// ```
    ///
    /// # Errors
    /// As [`Device::alloc`], and the device errors of the fill.
    pub fn alloc_zeroed<T: bytemuck::Pod>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        self.alloc_typed(len, Some(0))
    }

    /// A buffer holding a copy of `data`; waits until the copy is done (one
    /// synchronisation on a GPU). See [`Device::upload_async`] for the op path.
    ///
    /// ```
    /// let b = ferrocm_host::Device::Cpu.upload(&[1u8, 2]).unwrap();
    /// assert_eq!(b.as_slice(), Some(&[1u8, 2][..]));
    /// ```
    ///
    /// # Errors
    /// As [`Device::alloc`], and the device errors of the copy.
    pub fn upload<T: bytemuck::Pod>(&self, data: &[T]) -> Result<DeviceBuffer<T>> {
        let mut b = self.alloc_typed(data.len(), None)?;
        b.write(data)?;
        Ok(b)
    }

    /// A buffer holding a copy of `data`, queued in stream order without
    /// waiting: on a GPU the bytes go through pinned staging memory the
    /// device reuses once the copy has run; on the host devices it is a
    /// plain copy. Small metadata (a strided layout) reaches kernels this way.
    ///
    /// ```
    /// # use ferrocm_host::WaveSize;
    /// use ferrocm_host::Device;
    /// let dev = Device::emulator(WaveSize::Wave32);
    /// let syncs = dev.memory_stats().synchronizations;
    /// let b = dev.upload_async(&[4u64, 1]).unwrap();
    /// assert_eq!(dev.memory_stats().synchronizations, syncs);
    /// assert_eq!(b.download().unwrap(), vec![4, 1]);
    /// ```
    ///
    /// # Errors
    /// As [`Device::upload`].
    pub fn upload_async<T: bytemuck::Pod>(&self, data: &[T]) -> Result<DeviceBuffer<T>> {
        let mut b = self.alloc_typed::<T>(data.len(), None)?;
        let bytes: &[u8] = bytemuck::cast_slice(data);
        match &self {
            Device::Cpu | Device::Emulator(_) => {
                if let Some(d) = b.raw.host_bytes_mut() {
                    d.copy_from_slice(bytes);
                }
            }
            #[cfg(feature = "rocm")]
            Device::Rocm(r) => {
                if let Some(a) = b.raw.rocm_alloc() {
                    r.copy_htod_async(a, bytes)?;
                }
            }
            #[cfg(feature = "cuda")]
            Device::Cuda(c) => {
                if let Some(a) = b.raw.cuda_alloc() {
                    c.copy_htod_async(a, bytes)?;
                }
            }
        }
        Ok(b)
    }
}

impl<T: bytemuck::Pod> DeviceBuffer<T> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.raw.len_bytes / size_of::<T>()
    }

    /// Whether the buffer has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The device the buffer lives on.
    pub fn device(&self) -> &Device {
        &self.raw.device
    }

    /// Size in bytes.
    pub fn len_bytes(&self) -> usize {
        self.raw.len_bytes
    }

    /// The untyped memory.
    pub fn as_raw(&self) -> &RawBuffer {
        &self.raw
    }

    /// Into the untyped memory (no copy).
    pub fn into_raw(self) -> RawBuffer {
        self.raw
    }

    /// The same memory viewed as `U`s of the same size (e.g. `half::f16` as
    /// the kernels' `F16`).
    ///
    /// ```
    /// let b = ferrocm_host::Device::Cpu.upload(&[1.0f32]).unwrap();
    /// assert_eq!(b.view_as::<u32>().unwrap().download().unwrap(), vec![1.0f32.to_bits()]);
    /// ```
    pub fn view_as<U: bytemuck::Pod>(&self) -> Option<&DeviceBuffer<U>> {
        (size_of::<U>() == size_of::<T>()).then(|| self.raw.typed::<U>())?
    }

    /// The address kernels see (host address for Cpu/Emulator, device address on a GPU).
    pub fn device_ptr(&self) -> u64 {
        self.raw.device_ptr()
    }

    /// The elements, for buffers in host memory (Cpu and Emulator devices).
    ///
    /// ```
    /// let b = ferrocm_host::Device::Cpu.upload(&[3i64]).unwrap();
    /// assert_eq!(b.as_slice().unwrap()[0], 3);
    /// ```
    pub fn as_slice(&self) -> Option<&[T]> {
        self.raw.host_bytes().map(bytemuck::cast_slice)
    }

    /// Mutable elements, for buffers in host memory.
    pub fn as_mut_slice(&mut self) -> Option<&mut [T]> {
        self.raw.host_bytes_mut().map(bytemuck::cast_slice_mut)
    }

    /// Copies the buffer to a `Vec` (waits for queued work on a GPU).
    ///
    /// ```
    /// use ferrocm_host::{Device, WaveSize};
    /// let b = Device::emulator(WaveSize::Wave32).upload(&[1u32, 2])?;
    /// assert_eq!(b.download()?, vec![1, 2]);
    /// # Ok::<(), ferrocm_host::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Fault`] when a kernel on this device reported a fault since
    /// the last wait (see [`crate::fault`]; the copy itself succeeded);
    /// [`Error::Rocm`] / [`Error::Cuda`] when the copy fails.
    pub fn download(&self) -> Result<Vec<T>> {
        let mut v = vec![T::zeroed(); self.len()];
        self.raw.download_bytes(bytemuck::cast_slice_mut(&mut v))?;
        Ok(v)
    }

    /// [`DeviceBuffer::download`] without the fault check (for the status
    /// words themselves).
    pub(crate) fn download_unchecked(&self) -> Result<Vec<T>> {
        let mut v = vec![T::zeroed(); self.len()];
        self.raw.copy_to_host(bytemuck::cast_slice_mut(&mut v))?;
        Ok(v)
    }

    /// Overwrites the buffer with `data` (same length) and waits for the copy.
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] when `data` is not the buffer's length; the
    /// device errors of the copy.
    pub fn write(&mut self, data: &[T]) -> Result<()> {
        if data.len() != self.len() {
            return Err(Error::LengthMismatch {
                what: "DeviceBuffer::write".into(),
                expected: self.len(),
                got: data.len(),
            });
        }
        self.raw.write_bytes(bytemuck::cast_slice(data))
    }

    /// Sets every element to `value`.
    ///
    /// # Errors
    /// The device errors of the fill (a launch or a driver call).
    pub fn fill(&mut self, value: T) -> Result<()> {
        if let Some(s) = self.as_mut_slice() {
            s.fill(value);
            return Ok(());
        }
        let v = vec![value; self.len()];
        self.write(&v)
    }

    /// Copies all of `src` (same length, same device) into this buffer
    /// (queued in stream order on a GPU).
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] when the lengths differ;
    /// [`Error::DeviceMismatch`] when the buffers are on different devices (use
    /// [`DeviceBuffer::to_device`]); the device errors of the copy.
    pub fn copy_from(&mut self, src: &DeviceBuffer<T>) -> Result<()> {
        if src.len() != self.len() {
            return Err(Error::LengthMismatch {
                what: "DeviceBuffer::copy_from".into(),
                expected: self.len(),
                got: src.len(),
            });
        }
        if !src.device().same_device(self.device()) {
            return Err(Error::DeviceMismatch {
                what: "DeviceBuffer::copy_from".into(),
                buffer_device: src.device().to_string(),
                device: self.device().to_string(),
            });
        }
        if let (Some(d), Some(s)) = (self.raw.host_alloc(), src.raw.host_alloc()) {
            // SAFETY: distinct allocations (&mut self vs &src), same length.
            unsafe { std::ptr::copy_nonoverlapping(s.ptr(), d.ptr(), src.len_bytes()) };
            return Ok(());
        }
        #[cfg(feature = "rocm")]
        if let (Some(d), Some(s), Device::Rocm(r)) =
            (self.raw.rocm_alloc(), src.raw.rocm_alloc(), src.device())
        {
            return r.copy_dtod(d, s, src.len_bytes());
        }
        #[cfg(feature = "cuda")]
        if let (Some(d), Some(s), Device::Cuda(c)) =
            (self.raw.cuda_alloc(), src.raw.cuda_alloc(), src.device())
        {
            return c.copy_dtod(d, s, src.len_bytes());
        }
        Ok(())
    }

    /// Copies the buffer to another device.
    ///
    /// ```
    /// # use ferrocm_host::WaveSize;
    /// use ferrocm_host::Device;
    /// let b = Device::Cpu.upload(&[1.5f32]).unwrap();
    /// let e = b.to_device(&Device::emulator(WaveSize::Wave32)).unwrap();
    /// assert_eq!(e.download().unwrap(), vec![1.5]);
    /// ```
    ///
    /// # Errors
    /// As [`Device::alloc`] on `device`; a fault reported on this buffer's
    /// device (it waits there); the device errors of the copies.
    pub fn to_device(&self, device: &Device) -> Result<DeviceBuffer<T>> {
        if device.same_device(self.device()) {
            let mut b = device.alloc_typed(self.len(), None)?;
            b.copy_from(self)?;
            return Ok(b);
        }
        device.upload(&self.download()?)
    }

    pub(crate) fn host_alloc(&self) -> Option<&HostAlloc> {
        self.raw.host_alloc()
    }
}

impl<T> std::fmt::Debug for DeviceBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "DeviceBuffer<{}>[{} bytes] on {}",
            std::any::type_name::<T>(),
            self.raw.len_bytes,
            self.raw.device
        )
    }
}

impl std::fmt::Debug for RawBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RawBuffer[{} bytes] on {}", self.len_bytes, self.device)
    }
}
