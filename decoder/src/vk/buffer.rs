//! Buffers created from a small description plus a debug name.

use std::sync::Arc;

use ash::vk;
use gpu_allocator::MemoryLocation;
use gpu_allocator::vulkan::{Allocation, AllocationCreateDesc, AllocationScheme};

use super::context::{Gpu, Shared};
use super::error::{VkError, VkResult, call};

/// Where a buffer lives and how the host reaches it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Memory {
    /// Device-local; reached only through copies.
    Device,
    /// Host-visible, written by the host and read by the device (staging, per-token params).
    Upload,
    /// Host-visible, written by the device and read by the host (readbacks).
    Readback,
}

/// A buffer's description: its size and memory. `Copy + Hash + Eq`, usable as a cache key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BufferDesc {
    pub bytes: u64,
    pub memory: Memory,
}

impl BufferDesc {
    pub fn device(bytes: u64) -> Self {
        BufferDesc {
            bytes,
            memory: Memory::Device,
        }
    }
    pub fn upload(bytes: u64) -> Self {
        BufferDesc {
            bytes,
            memory: Memory::Upload,
        }
    }
    pub fn readback(bytes: u64) -> Self {
        BufferDesc {
            bytes,
            memory: Memory::Readback,
        }
    }
}

/// A storage buffer with its memory. Destroyed when dropped.
pub struct Buffer {
    shared: Arc<Shared>,
    pub(crate) handle: vk::Buffer,
    allocation: Option<Allocation>,
    desc: BufferDesc,
    name: String,
}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Buffer")
            .field("name", &self.name)
            .field("desc", &self.desc)
            .finish()
    }
}

impl Buffer {
    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn bytes(&self) -> u64 {
        self.desc.bytes
    }
    pub fn desc(&self) -> BufferDesc {
        self.desc
    }

    fn check(&self, offset: u64, len: u64) -> VkResult<()> {
        if offset
            .checked_add(len)
            .is_none_or(|end| end > self.desc.bytes)
        {
            return Err(VkError::OutOfRange {
                name: self.name.clone(),
                offset,
                end: offset.saturating_add(len),
                size: self.desc.bytes,
            });
        }
        Ok(())
    }

    /// Copies `data` into the mapped memory at `offset` (host-visible buffers only).
    /// The buffer's device address, for shaders that reach buffers through pointers (the
    /// persistent token kernel); `None` where the device lacks buffer device addresses.
    pub fn device_address(&self) -> Option<u64> {
        if !self.shared.info.grid_sync {
            return None;
        }
        let info = vk::BufferDeviceAddressInfo::default().buffer(self.handle);
        // SAFETY: the buffer is alive, was created with SHADER_DEVICE_ADDRESS usage (grid_sync)
        // and its memory was allocated with the device-address flag (the allocator's setting).
        Some(unsafe { self.shared.device.get_buffer_device_address(&info) })
    }

    pub(crate) fn write_mapped(&mut self, offset: u64, data: &[u8]) -> VkResult<()> {
        self.check(offset, data.len() as u64)?;
        let name = self.name.clone();
        let slice = self
            .allocation
            .as_mut()
            .and_then(|a| a.mapped_slice_mut())
            .ok_or(VkError::NotMapped { name })?;
        slice[offset as usize..offset as usize + data.len()].copy_from_slice(data);
        Ok(())
    }

    /// Copies mapped memory at `offset` into `out` (host-visible buffers only).
    pub(crate) fn read_mapped(&self, offset: u64, out: &mut [u8]) -> VkResult<()> {
        self.check(offset, out.len() as u64)?;
        let slice = self
            .allocation
            .as_ref()
            .and_then(|a| a.mapped_slice())
            .ok_or(VkError::NotMapped {
                name: self.name.clone(),
            })?;
        out.copy_from_slice(&slice[offset as usize..offset as usize + out.len()]);
        Ok(())
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        if let Some(a) = self.allocation.take()
            && let Ok(mut alloc) = self.shared.allocator.lock()
            && let Some(alloc) = alloc.as_mut()
        {
            let _ = alloc.free(a);
        }
        // SAFETY: the buffer was created on this device and is no longer in use (callers wait for
        // the work that uses it before dropping it).
        unsafe { self.shared.device.destroy_buffer(self.handle, None) };
    }
}

impl Gpu {
    /// Creates a storage buffer described by `desc`, named `name` for debug tools.
    pub fn create_buffer(&self, desc: BufferDesc, name: &str) -> VkResult<Buffer> {
        let s = &self.shared;
        let bytes = desc.bytes.max(4);
        if bytes > s.info.max_storage_buffer_range {
            return Err(VkError::BufferTooLarge {
                name: name.to_string(),
                bytes,
                max: s.info.max_storage_buffer_range,
            });
        }
        let mut usage = vk::BufferUsageFlags::STORAGE_BUFFER
            | vk::BufferUsageFlags::TRANSFER_SRC
            | vk::BufferUsageFlags::TRANSFER_DST;
        if s.info.grid_sync {
            usage |= vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS;
        }
        let families: Vec<u32> = std::iter::once(s.compute_family)
            .chain(s.transfer.map(|(f, _)| f))
            .collect();
        let mut info = vk::BufferCreateInfo::default().size(bytes).usage(usage);
        info = if families.len() > 1 {
            info.sharing_mode(vk::SharingMode::CONCURRENT)
                .queue_family_indices(&families)
        } else {
            info.sharing_mode(vk::SharingMode::EXCLUSIVE)
        };
        // SAFETY: valid create-info; the buffer is destroyed in Drop or below on failure.
        let handle =
            unsafe { s.device.create_buffer(&info, None) }.map_err(call("vkCreateBuffer"))?;
        // SAFETY: `handle` was just created on this device.
        let requirements = unsafe { s.device.get_buffer_memory_requirements(handle) };
        let location = match desc.memory {
            Memory::Device => MemoryLocation::GpuOnly,
            Memory::Upload => MemoryLocation::CpuToGpu,
            Memory::Readback => MemoryLocation::GpuToCpu,
        };
        let alloc_err = |message: String| VkError::Alloc {
            name: name.to_string(),
            bytes,
            message,
        };
        let allocation = {
            let mut guard = s
                .allocator
                .lock()
                .map_err(|_| alloc_err("allocator lock poisoned".into()))?;
            let Some(alloc) = guard.as_mut() else {
                return Err(alloc_err("the device is being destroyed".into()));
            };
            alloc.allocate(&AllocationCreateDesc {
                name,
                requirements,
                location,
                linear: true,
                allocation_scheme: AllocationScheme::GpuAllocatorManaged,
            })
        };
        let allocation = match allocation {
            Ok(a) => a,
            Err(e) => {
                // SAFETY: the buffer has no memory bound and is not used.
                unsafe { s.device.destroy_buffer(handle, None) };
                return Err(alloc_err(e.to_string()));
            }
        };
        // SAFETY: memory and offset come from an allocation that satisfies `requirements`.
        if let Err(e) = unsafe {
            s.device
                .bind_buffer_memory(handle, allocation.memory(), allocation.offset())
        } {
            if let Ok(mut g) = s.allocator.lock()
                && let Some(a) = g.as_mut()
            {
                let _ = a.free(allocation);
            }
            // SAFETY: not used by anything.
            unsafe { s.device.destroy_buffer(handle, None) };
            return Err(call("vkBindBufferMemory")(e));
        }
        self.set_name(handle, name);
        Ok(Buffer {
            shared: self.shared.clone(),
            handle,
            allocation: Some(allocation),
            desc: BufferDesc { bytes, ..desc },
            name: name.to_string(),
        })
    }
}
