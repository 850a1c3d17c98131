//! Typed device buffers.

use crate::device::Device;
use crate::error::{Error, Result};
use std::alloc::Layout;
use std::marker::PhantomData;
use std::ptr::NonNull;

/// Bytes of red zone on each side of an emulator buffer under the sanitizer.
pub const RED_ZONE: usize = 256;
/// Byte that fills fresh (uninitialised) buffers under the sanitizer: all-ones
/// is NaN for f32/f16/bf16 and the maximum for unsigned types, so an output
/// element a kernel forgot to write fails the comparison with the CPU.
pub const POISON: u8 = 0xff;

fn canary(i: usize) -> u8 {
    (i as u8) ^ 0x5a
}

/// Host memory for the Cpu and Emulator devices: 256-byte aligned, with red
/// zones (filled with canaries) on both sides when the sanitizer is on.
pub(crate) struct HostAlloc {
    base: NonNull<u8>,
    layout: Layout,
    red_zone: usize,
    len_bytes: usize,
}

// SAFETY: plain memory; access is synchronised by the launch API (launches are
// synchronous on host-memory devices).
unsafe impl Send for HostAlloc {}
unsafe impl Sync for HostAlloc {}

impl HostAlloc {
    fn new(len_bytes: usize, red_zone: usize, fill: u8, what: &Device) -> Result<Self> {
        let total = len_bytes
            .checked_add(2 * red_zone)
            .and_then(|t| t.checked_next_multiple_of(256))
            .filter(|t| *t <= isize::MAX as usize / 2)
            .ok_or_else(|| Error::OutOfMemory {
                device: what.to_string(),
                bytes: len_bytes,
            })?;
        let layout =
            Layout::from_size_align(total.max(256), 256).map_err(|_| Error::OutOfMemory {
                device: what.to_string(),
                bytes: len_bytes,
            })?;
        // SAFETY: non-zero size.
        let p = unsafe { std::alloc::alloc(layout) };
        let base = NonNull::new(p).ok_or_else(|| Error::OutOfMemory {
            device: what.to_string(),
            bytes: len_bytes,
        })?;
        // SAFETY: the whole allocation is ours.
        unsafe {
            std::ptr::write_bytes(p.add(red_zone), fill, len_bytes);
            for i in 0..red_zone {
                *p.add(i) = canary(i);
                *p.add(red_zone + len_bytes + i) = canary(i);
            }
        }
        Ok(Self {
            base,
            layout,
            red_zone,
            len_bytes,
        })
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

pub(crate) enum Storage {
    Host(HostAlloc),
    #[cfg(feature = "rocm")]
    Rocm(crate::rocm::RocmAlloc),
}

/// A typed buffer of `len` elements on a [`Device`].
///
/// Fresh buffers from [`Device::alloc`] are uninitialised: under the sanitizer
/// they are filled with [`POISON`].
///
/// ```
/// use ferrocm_host::Device;
/// let dev = Device::emulator(32);
/// let buf = dev.upload(&[1.0f32, 2.0, 3.0]).unwrap();
/// assert_eq!(buf.len(), 3);
/// assert_eq!(buf.download().unwrap(), vec![1.0, 2.0, 3.0]);
/// ```
pub struct DeviceBuffer<T> {
    pub(crate) storage: Storage,
    len: usize,
    device: Device,
    _t: PhantomData<T>,
}

// SAFETY: the buffer owns its memory; T is plain data.
unsafe impl<T: Send> Send for DeviceBuffer<T> {}
unsafe impl<T: Sync> Sync for DeviceBuffer<T> {}

impl Device {
    fn alloc_filled<T: bytemuck::Pod>(&self, len: usize, fill: u8) -> Result<DeviceBuffer<T>> {
        let bytes = len
            .checked_mul(size_of::<T>())
            .ok_or_else(|| Error::OutOfMemory {
                device: self.to_string(),
                bytes: usize::MAX,
            })?;
        let storage = match self {
            Device::Cpu => Storage::Host(HostAlloc::new(bytes, 0, fill, self)?),
            Device::Emulator(c) => Storage::Host(HostAlloc::new(
                bytes,
                if c.sanitize { RED_ZONE } else { 0 },
                fill,
                self,
            )?),
            #[cfg(feature = "rocm")]
            Device::Rocm(r) => {
                let a = r.alloc(bytes)?;
                r.memset(&a, fill)?;
                Storage::Rocm(a)
            }
        };
        Ok(DeviceBuffer {
            storage,
            len,
            device: self.clone(),
            _t: PhantomData,
        })
    }

    /// An uninitialised buffer of `len` elements (poisoned under the sanitizer,
    /// zeroed elsewhere).
    ///
    /// ```
    /// let b = ferrocm_host::Device::Cpu.alloc::<u32>(4).unwrap();
    /// assert_eq!(b.len(), 4);
    /// ```
    pub fn alloc<T: bytemuck::Pod>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        self.alloc_filled(len, if self.sanitizer() { POISON } else { 0 })
    }

    /// A zero-filled buffer of `len` elements.
    ///
    /// ```
    /// let b = ferrocm_host::Device::emulator(64).alloc_zeroed::<f32>(2).unwrap();
    /// assert_eq!(b.download().unwrap(), vec![0.0, 0.0]);
    /// ```
    pub fn alloc_zeroed<T: bytemuck::Pod>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        self.alloc_filled(len, 0)
    }

    /// A buffer holding a copy of `data`.
    ///
    /// ```
    /// let b = ferrocm_host::Device::Cpu.upload(&[1u8, 2]).unwrap();
    /// assert_eq!(b.as_slice(), Some(&[1u8, 2][..]));
    /// ```
    pub fn upload<T: bytemuck::Pod>(&self, data: &[T]) -> Result<DeviceBuffer<T>> {
        let mut b = self.alloc_filled(data.len(), 0)?;
        b.write(data)?;
        Ok(b)
    }
}

impl<T: bytemuck::Pod> DeviceBuffer<T> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The device the buffer lives on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Size in bytes.
    pub fn len_bytes(&self) -> usize {
        self.len * size_of::<T>()
    }

    /// The address kernels see (host address for Cpu/Emulator, device address for ROCm).
    pub fn device_ptr(&self) -> u64 {
        match &self.storage {
            Storage::Host(h) => h.ptr() as u64,
            #[cfg(feature = "rocm")]
            Storage::Rocm(r) => r.ptr(),
        }
    }

    /// The elements, for buffers in host memory (Cpu and Emulator devices).
    ///
    /// ```
    /// let b = ferrocm_host::Device::Cpu.upload(&[3i64]).unwrap();
    /// assert_eq!(b.as_slice().unwrap()[0], 3);
    /// ```
    pub fn as_slice(&self) -> Option<&[T]> {
        match &self.storage {
            // SAFETY: len elements, aligned, initialised (alloc fills them).
            Storage::Host(h) => {
                Some(unsafe { std::slice::from_raw_parts(h.ptr() as *const T, self.len) })
            }
            #[cfg(feature = "rocm")]
            Storage::Rocm(_) => None,
        }
    }

    /// Mutable elements, for buffers in host memory.
    pub fn as_mut_slice(&mut self) -> Option<&mut [T]> {
        match &mut self.storage {
            // SAFETY: as above, and `&mut self` is unique.
            Storage::Host(h) => {
                Some(unsafe { std::slice::from_raw_parts_mut(h.ptr() as *mut T, self.len) })
            }
            #[cfg(feature = "rocm")]
            Storage::Rocm(_) => None,
        }
    }

    /// Copies the buffer to a `Vec`.
    pub fn download(&self) -> Result<Vec<T>> {
        match &self.storage {
            Storage::Host(_) => Ok(self.as_slice().unwrap_or(&[]).to_vec()),
            #[cfg(feature = "rocm")]
            Storage::Rocm(a) => {
                let mut v = vec![T::zeroed(); self.len];
                if let Device::Rocm(r) = &self.device {
                    r.copy_dtoh(a, bytemuck::cast_slice_mut(&mut v))?;
                }
                Ok(v)
            }
        }
    }

    /// Overwrites the buffer with `data` (same length).
    pub fn write(&mut self, data: &[T]) -> Result<()> {
        if data.len() != self.len {
            return Err(Error::LengthMismatch {
                what: "DeviceBuffer::write".into(),
                expected: self.len,
                got: data.len(),
            });
        }
        match &mut self.storage {
            Storage::Host(_) => {
                if let Some(s) = self.as_mut_slice() {
                    s.copy_from_slice(data);
                }
                Ok(())
            }
            #[cfg(feature = "rocm")]
            Storage::Rocm(a) => match &self.device {
                Device::Rocm(r) => r.copy_htod(a, bytemuck::cast_slice(data)),
                _ => Ok(()),
            },
        }
    }

    /// Sets every element to `value`.
    pub fn fill(&mut self, value: T) -> Result<()> {
        let v = vec![value; self.len];
        self.write(&v)
    }

    /// Copies all of `src` (same length, same device) into this buffer.
    pub fn copy_from(&mut self, src: &DeviceBuffer<T>) -> Result<()> {
        if src.len != self.len {
            return Err(Error::LengthMismatch {
                what: "DeviceBuffer::copy_from".into(),
                expected: self.len,
                got: src.len,
            });
        }
        if !src.device.same_device(&self.device) {
            return Err(Error::DeviceMismatch {
                what: "DeviceBuffer::copy_from".into(),
                buffer_device: src.device.to_string(),
                device: self.device.to_string(),
            });
        }
        match (&mut self.storage, &src.storage) {
            (Storage::Host(d), Storage::Host(s)) => {
                // SAFETY: distinct allocations (&mut self vs &src), same length.
                unsafe { std::ptr::copy_nonoverlapping(s.ptr(), d.ptr(), s.len_bytes()) };
                Ok(())
            }
            #[cfg(feature = "rocm")]
            (Storage::Rocm(d), Storage::Rocm(s)) => match &self.device {
                Device::Rocm(r) => r.copy_dtod(d, s),
                _ => Ok(()),
            },
            #[cfg(feature = "rocm")]
            _ => Ok(()),
        }
    }

    /// Copies the buffer to another device.
    ///
    /// ```
    /// use ferrocm_host::Device;
    /// let b = Device::Cpu.upload(&[1.5f32]).unwrap();
    /// let e = b.to_device(&Device::emulator(32)).unwrap();
    /// assert_eq!(e.download().unwrap(), vec![1.5]);
    /// ```
    pub fn to_device(&self, device: &Device) -> Result<DeviceBuffer<T>> {
        if device.same_device(&self.device) {
            let mut b = device.alloc_filled(self.len, 0)?;
            b.copy_from(self)?;
            return Ok(b);
        }
        device.upload(&self.download()?)
    }

    pub(crate) fn host_alloc(&self) -> Option<&HostAlloc> {
        match &self.storage {
            Storage::Host(h) => Some(h),
            #[cfg(feature = "rocm")]
            Storage::Rocm(_) => None,
        }
    }
}

impl<T> std::fmt::Debug for DeviceBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "DeviceBuffer<{}>[{}] on {}",
            std::any::type_name::<T>(),
            self.len,
            self.device
        )
    }
}
