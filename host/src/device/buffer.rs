//! Device memory: [`RawBuffer`] (bytes of a device, from its caching
//! allocator) and [`DeviceBuffer<T>`] (its typed view), with the copies
//! between host and device; every length checked here, once, for every
//! backend.

use super::Device;
use crate::error::{Error, Result};
use crate::memory::{Block, HostAlloc, POISON, RED_ZONE, size_class};
use std::marker::PhantomData;
use std::sync::Arc;

impl Device {
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
        let label = || self.to_string();
        let (mut block, _reused) = match self.gpu() {
            None => {
                let red = if self.sanitizer() { RED_ZONE } else { 0 };
                pool.take(class, || {
                    within_limit()?;
                    HostAlloc::new(class, red, &label()).map(Block::Host)
                })?
            }
            Some(gpu) => pool.take(class, || {
                within_limit()?;
                gpu.alloc(class).map(Block::Gpu)
            })?,
        };
        match (&mut block, fill) {
            (Block::Host(h), fill) => h.prepare(len_bytes, fill),
            (Block::Gpu(g), Some(byte)) => {
                let gpu = self.gpu().expect("a GPU block comes from a GPU");
                let _turn = self.turn();
                // SAFETY: `len_bytes` fit the block's size class.
                unsafe { gpu.memset(g.ptr(), byte, len_bytes)? };
            }
            (Block::Gpu(_), None) => {}
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
        self.block.as_ref().map_or(0, Block::ptr)
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
        self.device.refuse_in_recording("a copy to the host")?;
        let _turn = self.device.turn();
        match self.device.gpu() {
            // SAFETY: `dst` has the buffer's length, checked above.
            Some(gpu) => unsafe { gpu.copy_dtoh(self.device_ptr(), dst) },
            None => Ok(()),
        }
    }

    /// Queues a copy of the bytes to the host behind the work queued so far
    /// and returns without waiting for it (on the Cpu and the emulator the
    /// bytes are copied at once): [`QueuedDownload::wait`] waits for that
    /// copy only, so work queued after this call can run meanwhile. Unlike
    /// [`RawBuffer::download_bytes`] the wait reports no kernel fault:
    /// those surface at the next wait of the device.
    ///
    /// # Errors
    /// A copy inside a graph recording; [`Error::Rocm`] / [`Error::Cuda`]
    /// when queueing fails.
    pub fn download_queued(&self) -> Result<QueuedDownload<u8>> {
        self.device.pool().count_sync();
        if let Some(b) = self.host_bytes() {
            return Ok(QueuedDownload::done(b.to_vec()));
        }
        self.device.refuse_in_recording("a copy to the host")?;
        let _turn = self.device.turn();
        match self.device.gpu() {
            // SAFETY: the buffer's own range. Its memory stays the
            // buffer's or goes back to the device's cache, which hands it
            // only to work queued after this copy on the same stream.
            Some(gpu) => Ok(QueuedDownload {
                read: Some(unsafe { gpu.copy_dtoh_queued(self.device_ptr(), self.len_bytes)? }),
                done: Vec::new(),
                elem: PhantomData,
            }),
            None => Ok(QueuedDownload::done(Vec::new())),
        }
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
        self.device.refuse_in_recording("a copy from the host")?;
        let _turn = self.device.turn();
        match self.device.gpu() {
            // SAFETY: `src` has the buffer's length, checked above.
            Some(gpu) => unsafe { gpu.copy_htod(self.device_ptr(), src) },
            None => Ok(()),
        }
    }
}

/// A copy to the host queued by [`DeviceBuffer::download_queued`] (or
/// [`RawBuffer::download_queued`]); dropping it unwaited waits for the copy.
pub struct QueuedDownload<T> {
    read: Option<Box<dyn crate::gpu::QueuedRead>>,
    done: Vec<u8>,
    elem: PhantomData<T>,
}

impl<T: bytemuck::Pod> QueuedDownload<T> {
    fn done(bytes: Vec<u8>) -> Self {
        QueuedDownload {
            read: None,
            done: bytes,
            elem: PhantomData,
        }
    }

    fn retyped<U>(self) -> QueuedDownload<U> {
        QueuedDownload {
            read: self.read,
            done: self.done,
            elem: PhantomData,
        }
    }

    /// Waits for the copy (not for work queued after it) and returns the
    /// elements.
    ///
    /// # Errors
    /// [`Error::Rocm`] / [`Error::Cuda`] when the wait fails (a kernel
    /// fault of the driver's kind surfaces here).
    pub fn wait(self) -> Result<Vec<T>> {
        let bytes = match self.read {
            Some(r) => r.wait()?,
            None => self.done,
        };
        let mut v = vec![T::zeroed(); bytes.len() / size_of::<T>().max(1)];
        bytemuck::cast_slice_mut::<T, u8>(&mut v).copy_from_slice(&bytes);
        Ok(v)
    }
}

impl<T> std::fmt::Debug for QueuedDownload<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = if self.read.is_some() {
            "queued"
        } else {
            "done"
        };
        write!(f, "QueuedDownload({state})")
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
        // A recorded copy would read the host bytes when the graph runs.
        self.refuse_in_recording("a copy from the host")?;
        let mut b = self.alloc_typed::<T>(data.len(), None)?;
        let _turn = self.turn();
        let bytes: &[u8] = bytemuck::cast_slice(data);
        match self.gpu() {
            None => {
                if let Some(d) = b.raw.host_bytes_mut() {
                    d.copy_from_slice(bytes);
                }
            }
            // SAFETY: the buffer holds exactly `bytes.len()` bytes.
            Some(gpu) => unsafe { gpu.copy_htod_async(b.device_ptr(), bytes)? },
        }
        Ok(b)
    }
}

/// Most word lists [`Device::upload_words`] keeps across all GPUs, and most
/// bytes: past either, a list is uploaded for its call alone.
const WORDS_CACHE_ENTRIES: usize = 4096;
const WORDS_CACHE_BYTES: usize = 16 << 20;

/// A word list's key: the device it lives on and the words themselves.
type WordsKey = (super::DeviceKey, Box<[u64]>);

/// The word lists uploaded by [`Device::upload_words`], by device and content.
#[derive(Default)]
struct WordsCache {
    lists: std::collections::HashMap<WordsKey, Arc<DeviceBuffer<u64>>>,
    bytes: usize,
}

static WORDS_CACHE: std::sync::LazyLock<std::sync::Mutex<WordsCache>> =
    std::sync::LazyLock::new(Default::default);

impl Device {
    /// A buffer holding `words` for kernels to read (an op's geometry, its
    /// window tables): on a GPU uploaded once per device and content, in
    /// stream order ([`Device::upload_async`]), and kept for the process, so
    /// a repeated shape queues no copy (one fewer command and host-to-device
    /// transfer ahead of each launch) and its op can be recorded into a graph
    /// once it has run outside one. The buffer must not be written. Past 4096
    /// lists or 16 MiB in all, further lists are uploaded per call. The Cpu
    /// and the emulator copy per call (a host copy).
    ///
    /// ```
    /// # use ferrocm_host::WaveSize;
    /// let dev = ferrocm_host::Device::emulator(WaveSize::Wave32);
    /// let g = dev.upload_words(&[3, 1, 4]).unwrap();
    /// assert_eq!(g.download().unwrap(), vec![3, 1, 4]);
    /// ```
    ///
    /// # Errors
    /// As [`Device::upload_async`] (a list not yet cached cannot be uploaded
    /// while a graph is recorded).
    pub fn upload_words(&self, words: &[u64]) -> Result<Arc<DeviceBuffer<u64>>> {
        if self.gpu().is_none() {
            return Ok(Arc::new(self.upload_async(words)?));
        }
        let key = (self.key(), Box::<[u64]>::from(words));
        // A poisoned lock only means another thread panicked between two
        // consistent states of the map: keep using it.
        let cache = || WORDS_CACHE.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(b) = cache().lists.get(&key) {
            return Ok(Arc::clone(b));
        }
        // Uploaded without the lock held: the copy waits for the stream's
        // turn, which a thread holding it may need the lock to give back.
        let b = Arc::new(self.upload_async(words)?);
        let bytes = size_of_val(words);
        let mut cache = cache();
        if let Some(first) = cache.lists.get(&key) {
            // Another thread cached the same list meanwhile.
            return Ok(Arc::clone(first));
        }
        if cache.lists.len() < WORDS_CACHE_ENTRIES && cache.bytes + bytes <= WORDS_CACHE_BYTES {
            cache.bytes += bytes;
            cache.lists.insert(key, Arc::clone(&b));
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

    /// Queues a copy of the buffer to the host and returns without waiting
    /// (see [`RawBuffer::download_queued`]): a decode loop reads a step's
    /// token while the next step runs.
    ///
    /// ```
    /// use ferrocm_host::{Device, WaveSize};
    /// let b = Device::emulator(WaveSize::Wave32).upload(&[7u32, 8])?;
    /// let queued = b.download_queued()?;
    /// // ... more work queued here runs meanwhile on a GPU ...
    /// assert_eq!(queued.wait()?, vec![7, 8]);
    /// # Ok::<(), ferrocm_host::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`RawBuffer::download_queued`].
    pub fn download_queued(&self) -> Result<QueuedDownload<T>> {
        Ok(self.raw.download_queued()?.retyped())
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
        let _turn = self.device().turn();
        match self.device().gpu() {
            // SAFETY: both buffers are this device's and hold `len_bytes`.
            Some(gpu) => unsafe {
                gpu.copy_dtod(self.device_ptr(), src.device_ptr(), src.len_bytes())
            },
            None => Ok(()),
        }
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
