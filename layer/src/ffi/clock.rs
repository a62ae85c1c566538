//! Timing dispatches inside their shaders (the `dispatch` level's shader clocks).
//!
//! On a device with a shader device clock (VK_KHR_shader_clock), buffer device addresses and
//! 64-bit buffer atomics, the layer:
//!
//! 1. enables those features at `vkCreateDevice` where the program has not ([`plan`]): in
//!    structures of its own chained before the program's, or, where one of the program's own
//!    structures turns a feature off, in that structure for the length of the call (restored
//!    after it); the device is timed by interval, saying why, where it cannot;
//! 2. extends every pipeline layout's compute push-constant range by 16 bytes at
//!    [`ShaderClock::push_offset`], past anything the program pushes
//!    ([`create_pipeline_layout`]);
//! 3. instruments each compute pipeline's SPIR-V ([`crate::spirv`]) at
//!    `vkCreateComputePipelines`, from a copy of its module's code kept since
//!    `vkCreateShaderModule` (a module it cannot instrument, or a driver that refuses the
//!    result, keeps the program's code and is timed by interval);
//! 4. before each dispatch of an instrumented pipeline, pushes the address of the dispatch's
//!    clock record (one per timestamp pair, in device memory) and a tag ([`ShaderClock::arm`]);
//!    the first workgroup writes the start and the tag, every workgroup raises the end as it
//!    returns; at the end of the command buffer a copy puts its records in host memory, which
//!    the layer reads once the submission is complete ([`ShaderClock::take`]);
//! 5. brackets each command buffer's clocked dispatches with two timestamps, onto which the
//!    clocks are mapped ([`crate::state::ClockMap`]).
//!
//! Two timestamps a command buffer replace one a barrier; the clocks cost each workgroup two
//! atomics and its first invocation a few instructions.

use std::ffi::{CStr, c_char, c_void};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use ash::vk::{self, Handle};

use super::features::{Patch, named, offered, writable};
use super::{InstanceData, Next, dev, slice};
use crate::spirv::{self, RECORD_BYTES};
use crate::state::{FastMap, MAX_POOLS, POOL_PAIRS, RECHECK};

/// Clock records a device has: one per timestamp pair the layer can hold.
const RECORDS: u64 = MAX_POOLS as u64 * POOL_PAIRS as u64;

/// What `vkCreateDevice` adds for shader clocks: structures chained before the program's own,
/// a features copy, extensions. Kept alive until the call returns.
pub(super) struct ClockPlan {
    clock: Box<vk::PhysicalDeviceShaderClockFeaturesKHR<'static>>,
    bda: Box<vk::PhysicalDeviceBufferDeviceAddressFeatures<'static>>,
    atomics: Box<vk::PhysicalDeviceShaderAtomicInt64Features<'static>>,
    features: Box<vk::PhysicalDeviceFeatures>,
    add_clock: bool,
    add_bda: bool,
    add_atomics: bool,
    set_features: bool,
    /// Extensions to add to the program's.
    pub extensions: Vec<&'static CStr>,
    /// The byte offset of the 16 bytes of push constants the layer uses.
    pub push_offset: u32,
    /// `vkGetBufferDeviceAddressKHR` rather than the core entry point.
    khr_address: bool,
    /// The program's own feature fields the layer turns on during the call.
    patches: Vec<Patch>,
    /// The program enables `vulkanMemoryModelDeviceScope` (which modules of the Vulkan memory
    /// model need once instrumented).
    device_scope: bool,
}

/// What the device must offer and the program must not turn off for shader clocks; the
/// reason in one phrase when it cannot have them.
pub(super) unsafe fn plan(
    inst: &InstanceData,
    pd: vk::PhysicalDevice,
    info: &vk::DeviceCreateInfo<'_>,
    requested: &[*const c_char],
    available: &[vk::ExtensionProperties],
) -> Result<ClockPlan, String> {
    let supports = |name: &CStr| offered(available, name);
    let props = inst.fns.get_physical_device_properties(pd);
    if props.api_version < vk::API_VERSION_1_1 {
        return Err("the device is Vulkan 1.0".into());
    }
    if !supports(ash::khr::shader_clock::NAME) {
        return Err("the device has no VK_KHR_shader_clock".into());
    }
    let core12 = props.api_version >= vk::API_VERSION_1_2;
    let khr_bda = supports(ash::khr::buffer_device_address::NAME);
    let khr_atomics = supports(ash::khr::shader_atomic_int64::NAME);
    if !(core12 || khr_bda && khr_atomics) {
        return Err("the device has no buffer device address or 64-bit atomics".into());
    }
    if named(requested, ash::ext::buffer_device_address::NAME) {
        return Err("the program enables VK_EXT_buffer_device_address".into());
    }
    let mut clock = vk::PhysicalDeviceShaderClockFeaturesKHR::default();
    let mut bda = vk::PhysicalDeviceBufferDeviceAddressFeatures::default();
    let mut atomics = vk::PhysicalDeviceShaderAtomicInt64Features::default();
    let mut f2 = vk::PhysicalDeviceFeatures2::default()
        .push_next(&mut clock)
        .push_next(&mut bda)
        .push_next(&mut atomics);
    (inst.fns.fp_v1_1().get_physical_device_features2)(pd, &mut f2);
    let shader_int64 = f2.features.shader_int64;
    let missing = [
        (clock.shader_device_clock, "shaderDeviceClock"),
        (bda.buffer_device_address, "bufferDeviceAddress"),
        (
            atomics.shader_buffer_int64_atomics,
            "shaderBufferInt64Atomics",
        ),
        (shader_int64, "shaderInt64"),
    ];
    if let Some((_, name)) = missing.iter().find(|(on, _)| *on != vk::TRUE) {
        return Err(format!("the device has no {name}"));
    }
    let max_push = props.limits.max_push_constants_size;
    if max_push < 32 {
        return Err(format!("maxPushConstantsSize is {max_push}"));
    }
    let push_offset = (max_push - 16) & !7;

    // The program's own structures: a feature one of them leaves off is turned on in place for
    // the length of the call and restored after it ([`Patch`]).
    let (mut has_f2, mut has_v12, mut has_bda, mut has_atomics, mut has_clock) =
        (false, false, false, false, false);
    let mut device_scope = false;
    let mut patches = Vec::new();
    let mut p = info.p_next as *const vk::BaseInStructure<'_>;
    while !p.is_null() {
        let fields: Vec<(*const vk::Bool32, &str)> = match (*p).s_type {
            vk::StructureType::PHYSICAL_DEVICE_FEATURES_2 => {
                has_f2 = true;
                let s = p as *const vk::PhysicalDeviceFeatures2<'_>;
                vec![(&raw const (*s).features.shader_int64, "shaderInt64")]
            }
            vk::StructureType::PHYSICAL_DEVICE_VULKAN_1_2_FEATURES => {
                has_v12 = true;
                let s = p as *const vk::PhysicalDeviceVulkan12Features<'_>;
                device_scope |= (*s).vulkan_memory_model_device_scope == vk::TRUE;
                vec![
                    (&raw const (*s).buffer_device_address, "bufferDeviceAddress"),
                    (
                        &raw const (*s).shader_buffer_int64_atomics,
                        "shaderBufferInt64Atomics",
                    ),
                ]
            }
            vk::StructureType::PHYSICAL_DEVICE_BUFFER_DEVICE_ADDRESS_FEATURES => {
                has_bda = true;
                let s = p as *const vk::PhysicalDeviceBufferDeviceAddressFeatures<'_>;
                vec![(&raw const (*s).buffer_device_address, "bufferDeviceAddress")]
            }
            vk::StructureType::PHYSICAL_DEVICE_SHADER_ATOMIC_INT64_FEATURES => {
                has_atomics = true;
                let s = p as *const vk::PhysicalDeviceShaderAtomicInt64Features<'_>;
                vec![(
                    &raw const (*s).shader_buffer_int64_atomics,
                    "shaderBufferInt64Atomics",
                )]
            }
            vk::StructureType::PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES => {
                let s = p as *const vk::PhysicalDeviceVulkanMemoryModelFeatures<'_>;
                device_scope |= (*s).vulkan_memory_model_device_scope == vk::TRUE;
                Vec::new()
            }
            vk::StructureType::PHYSICAL_DEVICE_SHADER_CLOCK_FEATURES_KHR => {
                has_clock = true;
                let s = p as *const vk::PhysicalDeviceShaderClockFeaturesKHR<'_>;
                vec![(&raw const (*s).shader_device_clock, "shaderDeviceClock")]
            }
            _ => Vec::new(),
        };
        for (field, name) in fields {
            if *field == vk::TRUE {
                continue;
            }
            if !writable(field as usize, std::mem::size_of::<vk::Bool32>()) {
                return Err(format!(
                    "the program's device features leave {name} off, in memory the layer \
                     cannot write"
                ));
            }
            patches.push(Patch {
                field: field as *mut vk::Bool32,
                was: *field,
            });
        }
        p = (*p).p_next;
    }
    let mut features = Box::<vk::PhysicalDeviceFeatures>::default();
    let mut set_features = false;
    if !has_f2 {
        if let Some(f) = info.p_enabled_features.as_ref() {
            *features = *f;
        }
        if features.shader_int64 != vk::TRUE {
            features.shader_int64 = vk::TRUE;
            set_features = true;
        }
    }
    let mut extensions = Vec::new();
    if !named(requested, ash::khr::shader_clock::NAME) {
        extensions.push(ash::khr::shader_clock::NAME);
    }
    // The promoted extensions too where the driver has them: the program's instance may ask
    // for less than Vulkan 1.2, where they are not core.
    let khr_address = khr_bda && khr_atomics;
    if khr_address {
        for n in [
            ash::khr::buffer_device_address::NAME,
            ash::khr::shader_atomic_int64::NAME,
        ] {
            if !named(requested, n) {
                extensions.push(n);
            }
        }
    }
    Ok(ClockPlan {
        clock: Box::new(
            vk::PhysicalDeviceShaderClockFeaturesKHR::default().shader_device_clock(true),
        ),
        bda: Box::new(
            vk::PhysicalDeviceBufferDeviceAddressFeatures::default().buffer_device_address(true),
        ),
        atomics: Box::new(
            vk::PhysicalDeviceShaderAtomicInt64Features::default()
                .shader_buffer_int64_atomics(true),
        ),
        features,
        add_clock: !has_clock,
        add_bda: !has_v12 && !has_bda,
        add_atomics: !has_v12 && !has_atomics,
        set_features,
        extensions,
        push_offset,
        khr_address,
        patches,
        device_scope,
    })
}

impl ClockPlan {
    /// Gives the program's structures back their own values (after `vkCreateDevice`).
    pub(super) unsafe fn restore(&self) {
        for p in &self.patches {
            // SAFETY: as in `apply`.
            p.field.write(p.was);
        }
    }

    /// Chains the structures the program lacks in front of its own chain in `ci` (a copy of its
    /// create info), and points it at the features copy where that changed.
    pub(super) unsafe fn apply(&mut self, ci: &mut vk::DeviceCreateInfo<'_>) {
        for p in &self.patches {
            // SAFETY: the field is in the program's structure, in writable memory (`writable`),
            // which the program does not touch while it waits for vkCreateDevice.
            p.field.write(vk::TRUE);
        }
        let mut head = ci.p_next as *mut c_void;
        if self.add_clock {
            self.clock.p_next = head;
            head = (&mut *self.clock as *mut vk::PhysicalDeviceShaderClockFeaturesKHR<'_>).cast();
        }
        if self.add_bda {
            self.bda.p_next = head;
            head =
                (&mut *self.bda as *mut vk::PhysicalDeviceBufferDeviceAddressFeatures<'_>).cast();
        }
        if self.add_atomics {
            self.atomics.p_next = head;
            head =
                (&mut *self.atomics as *mut vk::PhysicalDeviceShaderAtomicInt64Features<'_>).cast();
        }
        ci.p_next = head;
        if self.set_features {
            ci.p_enabled_features = &*self.features;
        }
    }
}

/// One buffer of the layer's with its memory and device address.
struct Buffer {
    buffer: vk::Buffer,
    memory: vk::DeviceMemory,
    address: u64,
}

/// A device's shader-clock state: the record buffer and its host copy, the layouts the layer
/// extended, the code of the program's modules and the pipelines it instrumented.
pub(super) struct ShaderClock {
    pub push_offset: u32,
    /// One record per timestamp pair, in device memory: the dispatches' atomics stay on the GPU.
    records: Buffer,
    /// Where each command buffer's end copies its records, in host memory.
    readback: Buffer,
    /// The readback's mapping (host-coherent, `RECORDS` x `RECORD_BYTES`), as an address.
    readback_host: usize,
    /// The tag each record's current dispatch writes (0: none), and the next tag.
    tags: Box<[AtomicU32]>,
    next_tag: AtomicU32,
    /// Pipeline layouts whose push constants the layer extended: the stage flags its pushes
    /// name.
    layouts: Mutex<FastMap<u64, u32>>,
    /// The program's shader modules' code, for instrumenting at pipeline creation.
    modules: Mutex<FastMap<u64, Arc<[u32]>>>,
    /// Instrumented pipelines: their layout and the stage flags of the layer's pushes.
    pipelines: RwLock<FastMap<u64, (u64, u32)>>,
    /// Why modules were left as they were, each said once.
    refusals: Mutex<Vec<String>>,
    /// The clock is established on the timestamps' time line
    /// ([`ClockMap::established`](crate::state::ClockMap::established)): recordings go
    /// without a bracket, but for one in [`RECHECK`].
    established: AtomicBool,
    /// Recordings that asked for a bracket since the time line was established.
    unbracketed: AtomicU32,
    /// The device has `vulkanMemoryModelDeviceScope` enabled.
    device_scope: bool,
    /// Parts of pipeline names whose pipelines are left as they are (`DECODESCOPE_CLOCK_EXCLUDE`).
    exclude: Vec<String>,
    /// The most workgroups a dispatch of an instrumented pipeline reads the clock with
    /// (`DECODESCOPE_CLOCK_MAX_GROUPS`); a wider one is timed by interval.
    max_groups: u32,
}

/// The memory type for `bits` with the first of `want` the driver offers, else the first with
/// `need`.
fn memory_type(
    props: &vk::PhysicalDeviceMemoryProperties,
    bits: u32,
    want: &[vk::MemoryPropertyFlags],
    need: vk::MemoryPropertyFlags,
) -> Option<u32> {
    let types = &props.memory_types[..props.memory_type_count as usize];
    let allowed = |i: usize| bits & (1 << i) != 0;
    for w in want {
        if let Some(i) =
            (0..types.len()).find(|&i| allowed(i) && types[i].property_flags.contains(*w))
        {
            return Some(i as u32);
        }
    }
    (0..types.len())
        .find(|&i| allowed(i) && types[i].property_flags.contains(need))
        .map(|i| i as u32)
}

impl ShaderClock {
    /// Creates the record buffer and its host copy (mapped for good) on `device`.
    pub(super) unsafe fn create(
        next: &Next,
        device: vk::Device,
        memory: &vk::PhysicalDeviceMemoryProperties,
        plan: &ClockPlan,
    ) -> Result<ShaderClock, String> {
        use vk::BufferUsageFlags as U;
        use vk::MemoryPropertyFlags as M;
        let size = RECORDS * RECORD_BYTES;
        let (records, _) = Self::buffer(
            next,
            device,
            memory,
            size,
            U::STORAGE_BUFFER | U::SHADER_DEVICE_ADDRESS | U::TRANSFER_SRC,
            (&[M::DEVICE_LOCAL], M::empty()),
            plan.khr_address,
        )?;
        let visible = M::HOST_VISIBLE | M::HOST_COHERENT;
        let readback = Self::buffer(
            next,
            device,
            memory,
            size,
            U::TRANSFER_DST,
            (&[visible | M::HOST_CACHED], visible),
            plan.khr_address,
        );
        let (readback, host) = match readback {
            Ok((b, Some(host))) => (b, host),
            other => {
                Self::free(next, device, &records);
                if let Ok((b, _)) = other {
                    Self::free(next, device, &b);
                }
                return Err("the clock records' host copy could not be made".into());
            }
        };
        Ok(ShaderClock {
            push_offset: plan.push_offset,
            records,
            readback,
            readback_host: host,
            tags: (0..RECORDS).map(|_| AtomicU32::new(0)).collect(),
            next_tag: AtomicU32::new(1),
            layouts: Mutex::default(),
            modules: Mutex::default(),
            pipelines: RwLock::default(),
            refusals: Mutex::default(),
            established: AtomicBool::new(false),
            unbracketed: AtomicU32::new(0),
            device_scope: plan.device_scope,
            exclude: super::config().clock_exclude.clone(),
            max_groups: super::config().clock_max_groups,
        })
    }

    /// A buffer of `size` bytes for `usage`, in memory of the first of `types.0` the driver
    /// offers (else any with `types.1`), with its device address when `usage` asks for one:
    /// the buffer, and its mapping when the memory is host-visible.
    unsafe fn buffer(
        next: &Next,
        device: vk::Device,
        memory: &vk::PhysicalDeviceMemoryProperties,
        size: u64,
        usage: vk::BufferUsageFlags,
        types: (&[vk::MemoryPropertyFlags], vk::MemoryPropertyFlags),
        khr_address: bool,
    ) -> Result<(Buffer, Option<usize>), String> {
        let missing = |f: &str| format!("the driver has no {f}");
        let create = next
            .create_buffer
            .ok_or_else(|| missing("vkCreateBuffer"))?;
        let reqs = next
            .get_buffer_memory_requirements
            .ok_or_else(|| missing("vkGetBufferMemoryRequirements"))?;
        let alloc = next
            .allocate_memory
            .ok_or_else(|| missing("vkAllocateMemory"))?;
        let bind = next
            .bind_buffer_memory
            .ok_or_else(|| missing("vkBindBufferMemory"))?;
        let map = next.map_memory.ok_or_else(|| missing("vkMapMemory"))?;
        let address = if khr_address {
            next.get_buffer_device_address_khr
        } else {
            next.get_buffer_device_address
        }
        .or(next.get_buffer_device_address)
        .ok_or_else(|| missing("vkGetBufferDeviceAddress"))?;
        let info = vk::BufferCreateInfo::default().size(size).usage(usage);
        let mut buffer = vk::Buffer::null();
        if create(device, &info, std::ptr::null(), &mut buffer) != vk::Result::SUCCESS {
            return Err("vkCreateBuffer failed for the clock records".into());
        }
        let mut r = vk::MemoryRequirements::default();
        reqs(device, buffer, &mut r);
        let mut made = Buffer {
            buffer,
            memory: vk::DeviceMemory::null(),
            address: 0,
        };
        let Some(ty) = memory_type(memory, r.memory_type_bits, types.0, types.1) else {
            Self::free(next, device, &made);
            return Err("no memory type for the clock records".into());
        };
        let with_address = usage.contains(vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS);
        let mut flags =
            vk::MemoryAllocateFlagsInfo::default().flags(vk::MemoryAllocateFlags::DEVICE_ADDRESS);
        let mut ai = vk::MemoryAllocateInfo::default()
            .allocation_size(r.size)
            .memory_type_index(ty);
        if with_address {
            ai = ai.push_next(&mut flags);
        }
        if alloc(device, &ai, std::ptr::null(), &mut made.memory) != vk::Result::SUCCESS {
            made.memory = vk::DeviceMemory::null();
            Self::free(next, device, &made);
            return Err("vkAllocateMemory failed for the clock records".into());
        }
        if bind(device, buffer, made.memory, 0) != vk::Result::SUCCESS {
            Self::free(next, device, &made);
            return Err("the clock records could not be bound".into());
        }
        let host_visible = memory.memory_types[ty as usize]
            .property_flags
            .contains(vk::MemoryPropertyFlags::HOST_VISIBLE);
        let mut host: *mut c_void = std::ptr::null_mut();
        if host_visible
            && (map(
                device,
                made.memory,
                0,
                vk::WHOLE_SIZE,
                vk::MemoryMapFlags::empty(),
                &mut host,
            ) != vk::Result::SUCCESS
                || host.is_null())
        {
            Self::free(next, device, &made);
            return Err("the clock records could not be mapped".into());
        }
        if with_address {
            let ai = vk::BufferDeviceAddressInfo::default().buffer(buffer);
            made.address = address(device, &ai);
        }
        Ok((made, (!host.is_null()).then_some(host as usize)))
    }

    /// Destroys one of the layer's buffers and frees its memory.
    unsafe fn free(next: &Next, device: vk::Device, b: &Buffer) {
        if let Some(f) = next.destroy_buffer {
            f(device, b.buffer, std::ptr::null());
        }
        if b.memory != vk::DeviceMemory::null()
            && let Some(f) = next.free_memory
        {
            f(device, b.memory, std::ptr::null());
        }
    }

    /// Frees the buffers (the device is being destroyed).
    pub(super) unsafe fn destroy(&self, next: &Next, device: vk::Device) {
        if let Some(f) = next.unmap_memory {
            f(device, self.readback.memory);
        }
        Self::free(next, device, &self.records);
        Self::free(next, device, &self.readback);
    }

    /// The layout and push stages of `pipeline` when it is instrumented.
    #[inline]
    pub(super) fn pipeline(&self, pipeline: u64) -> Option<(u64, u32)> {
        self.pipelines
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&pipeline)
            .copied()
    }

    /// Whether a dispatch of `groups` workgroups of an instrumented pipeline reads the clock:
    /// each of its workgroups raises the record's end with an atomic as it returns, which a
    /// dispatch of tens of thousands of short workgroups pays for in tens of microseconds (an
    /// LLM's output matvec on an H100: 150 against 112 us), more than two timestamps cost.
    #[inline]
    pub(super) fn clocks(&self, groups: u32) -> bool {
        groups <= self.max_groups
    }

    /// Whether a recording whose first clocked dispatch is recorded now brackets its clocked
    /// dispatches with two timestamps: until the clock's time line is established, and then
    /// one recording in [`RECHECK`].
    pub(super) fn wants_bracket(&self) -> bool {
        !self.established.load(Ordering::Relaxed)
            || self
                .unbracketed
                .fetch_add(1, Ordering::Relaxed)
                .is_multiple_of(RECHECK)
    }

    /// Records whether the clock's time line is established, after reading a bracket.
    pub(super) fn establish(&self, established: bool) {
        self.established.store(established, Ordering::Relaxed);
    }

    /// Says once why a module was left as it was.
    fn refuse(&self, why: String) {
        let mut r = self.refusals.lock().unwrap_or_else(|e| e.into_inner());
        if !r.contains(&why) {
            eprintln!("decodescope layer: {why}; its dispatches are timed by interval");
            r.push(why);
        }
    }

    /// Before a dispatch of an instrumented pipeline (`target`: its layout and push stages)
    /// recorded into `cb`: with timestamp pair `pair` (the dispatch reads the clock), a new tag
    /// for the pair's record and a push of the record's address and the tag; without one (too
    /// wide, [`ShaderClock::clocks`]), a push of the skip word, so that its workgroups touch no
    /// record.
    pub(super) unsafe fn arm(
        &self,
        next: &Next,
        cb: vk::CommandBuffer,
        target: (u64, u32),
        pair: Option<u32>,
    ) {
        let push: [u32; 4] = match pair {
            Some(pair) => {
                let Some(slot) = self.tags.get(pair as usize) else {
                    return;
                };
                let tag = self.next_tag.fetch_add(1, Ordering::Relaxed).max(1);
                slot.store(tag, Ordering::Relaxed);
                let address = self.records.address + pair as u64 * RECORD_BYTES;
                [address as u32, (address >> 32) as u32, tag, 0]
            }
            None => [0, 0, 0, 1],
        };
        if let Some(f) = next.cmd_push_constants {
            f(
                cb,
                vk::PipelineLayout::from_raw(target.0),
                vk::ShaderStageFlags::from_raw(target.1),
                self.push_offset,
                spirv::PUSH_BYTES,
                push.as_ptr().cast(),
            );
        }
    }

    /// At the end of a recording whose clocked dispatches have pairs `pairs`: copies their
    /// records to the host copy once every dispatch before is done, visible to the host.
    pub(super) unsafe fn copy_back(&self, next: &Next, cb: vk::CommandBuffer, pairs: &mut [u32]) {
        let (Some(barrier), Some(copy)) = (next.cmd_pipeline_barrier, next.cmd_copy_buffer) else {
            return;
        };
        pairs.sort_unstable();
        let mut regions: Vec<vk::BufferCopy> = Vec::new();
        for &p in pairs.iter() {
            if p as u64 >= RECORDS {
                continue;
            }
            let at = p as u64 * RECORD_BYTES;
            match regions.last_mut() {
                Some(r) if r.src_offset + r.size == at => r.size += RECORD_BYTES,
                _ => regions.push(vk::BufferCopy {
                    src_offset: at,
                    dst_offset: at,
                    size: RECORD_BYTES,
                }),
            }
        }
        if regions.is_empty() {
            return;
        }
        // One memory barrier from `src` to `dst`.
        let memory = |src: (vk::PipelineStageFlags, vk::AccessFlags),
                      dst: (vk::PipelineStageFlags, vk::AccessFlags)| {
            let b = [vk::MemoryBarrier::default()
                .src_access_mask(src.1)
                .dst_access_mask(dst.1)];
            // SAFETY: `cb` is recording (its end is being intercepted) and `b` outlives the
            // call.
            unsafe {
                barrier(
                    cb,
                    src.0,
                    dst.0,
                    vk::DependencyFlags::empty(),
                    1,
                    b.as_ptr(),
                    0,
                    std::ptr::null(),
                    0,
                    std::ptr::null(),
                )
            };
        };
        use vk::{AccessFlags as A, PipelineStageFlags as P};
        memory(
            (P::COMPUTE_SHADER, A::SHADER_WRITE),
            (P::TRANSFER, A::TRANSFER_READ),
        );
        copy(
            cb,
            self.records.buffer,
            self.readback.buffer,
            regions.len() as u32,
            regions.as_ptr(),
        );
        memory((P::TRANSFER, A::TRANSFER_WRITE), (P::HOST, A::HOST_READ));
    }

    /// The clocks pair `pair`'s dispatch wrote (its first workgroup's start and the latest
    /// end, in ticks), once its submission is complete; `None` when the record in the host copy
    /// is not that dispatch's (its tag differs: the dispatch never ran, or an earlier one's).
    pub(super) unsafe fn take(&self, pair: u32) -> Option<(u64, u64)> {
        let tag = self.tags.get(pair as usize)?.load(Ordering::Relaxed);
        // SAFETY: the host copy is mapped for the device's life and entry `pair` is inside it;
        // the submission that copied it is complete.
        let r = (self.readback_host as *const u8).add((pair as u64 * RECORD_BYTES) as usize);
        let start = (r as *const u64).read_volatile();
        let end = (r.add(8) as *const u64).read_volatile();
        let written = (r.add(16) as *const u32).read_volatile();
        (tag != 0 && written == tag && end != 0).then_some((start, end))
    }
}

pub(super) unsafe extern "system" fn create_pipeline_layout(
    device: vk::Device,
    info: *const vk::PipelineLayoutCreateInfo<'_>,
    alloc: *const vk::AllocationCallbacks<'_>,
    out: *mut vk::PipelineLayout,
) -> vk::Result {
    let Some(d) = dev(device) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    let Some(f) = d.next.create_pipeline_layout else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    let Some(c) = d.clock.as_ref().filter(|_| !info.is_null()) else {
        return f(device, info, alloc, out);
    };
    let i = &*info;
    let x = c.push_offset;
    let mut ranges = slice(i.p_push_constant_ranges, i.push_constant_range_count).to_vec();
    let compute: Vec<usize> = (0..ranges.len())
        .filter(|&k| {
            ranges[k]
                .stage_flags
                .contains(vk::ShaderStageFlags::COMPUTE)
        })
        .collect();
    let extended = match compute.as_slice() {
        [] => {
            ranges.push(vk::PushConstantRange {
                stage_flags: vk::ShaderStageFlags::COMPUTE,
                offset: x,
                size: 16,
            });
            true
        }
        &[k] if ranges[k].offset + ranges[k].size <= x => {
            ranges[k].size = x + 16 - ranges[k].offset;
            true
        }
        _ => false,
    };
    if !extended {
        c.refuse(format!(
            "a pipeline layout's compute push constants reach past byte {x}"
        ));
        return f(device, info, alloc, out);
    }
    // A push must name every stage of every range that holds its bytes.
    let stages = ranges
        .iter()
        .filter(|r| r.offset < x + 16 && r.offset + r.size > x)
        .fold(vk::ShaderStageFlags::empty(), |s, r| s | r.stage_flags);
    let mut ci = *i;
    ci.push_constant_range_count = ranges.len() as u32;
    ci.p_push_constant_ranges = ranges.as_ptr();
    let r = f(device, &ci, alloc, out);
    if r == vk::Result::SUCCESS {
        c.layouts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert((*out).as_raw(), stages.as_raw());
    }
    r
}

impl ShaderClock {
    /// `vkCreateShaderModule`: keeps a copy of the code.
    pub(super) unsafe fn module_created(
        &self,
        module: vk::ShaderModule,
        code: *const u32,
        size: usize,
    ) {
        if code.is_null() || size < 20 {
            return;
        }
        let words: Arc<[u32]> = std::slice::from_raw_parts(code, size / 4).into();
        self.modules
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(module.as_raw(), words);
    }

    pub(super) fn module_destroyed(&self, module: vk::ShaderModule) {
        self.modules
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&module.as_raw());
    }

    /// `vkCreateComputePipelines` with every pipeline whose layout the layer extended built
    /// from instrumented code; the others, and all of them where the driver refuses the
    /// instrumented ones, from the program's. Returns the driver's answer.
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn create_pipelines(
        &self,
        next: &Next,
        device: vk::Device,
        cache: vk::PipelineCache,
        count: u32,
        infos: *const vk::ComputePipelineCreateInfo<'_>,
        alloc: *const vk::AllocationCallbacks<'_>,
        out: *mut vk::Pipeline,
        names: &[String],
    ) -> vk::Result {
        let Some(f) = next.create_compute_pipelines else {
            return vk::Result::ERROR_INITIALIZATION_FAILED;
        };
        let given = slice(infos, count);
        let mut mine = given.to_vec();
        let mut targets: Vec<Option<(u64, u32)>> = vec![None; mine.len()];
        let mut temporary = Vec::new();
        for (k, info) in mine.iter_mut().enumerate() {
            let layout = info.layout.as_raw();
            let Some(stages) = self
                .layouts
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&layout)
                .copied()
            else {
                continue;
            };
            let name = names.get(k).map_or("a pipeline", String::as_str);
            if let Some(part) = self.exclude.iter().find(|p| name.contains(p.as_str())) {
                self.refuse(format!(
                    "{name}: excluded by DECODESCOPE_CLOCK_EXCLUDE ({part})"
                ));
                continue;
            }
            if info.stage.module == vk::ShaderModule::null() {
                self.refuse(format!("{name}: its code is chained into the pipeline"));
                continue;
            }
            let code = self
                .modules
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&info.stage.module.as_raw())
                .cloned();
            let Some(code) = code else { continue };
            if !self.device_scope && spirv::uses_vulkan_memory_model(&code) {
                self.refuse(format!(
                    "{name}: it uses the Vulkan memory model, and the device was created \
                     without vulkanMemoryModelDeviceScope"
                ));
                continue;
            }
            let words = match spirv::instrument(&code, self.push_offset) {
                Ok(w) => w,
                Err(e) => {
                    self.refuse(format!("{name}: {}", e.reason()));
                    continue;
                }
            };
            let Some(create) = next.create_shader_module else {
                continue;
            };
            let mi = vk::ShaderModuleCreateInfo::default().code(&words);
            let mut m = vk::ShaderModule::null();
            if create(device, &mi, std::ptr::null(), &mut m) != vk::Result::SUCCESS {
                self.refuse(format!(
                    "{name}: the driver refused its instrumented module"
                ));
                continue;
            }
            temporary.push(m);
            info.stage.module = m;
            targets[k] = Some((layout, stages));
        }
        let mut r = if temporary.is_empty() {
            f(device, cache, count, infos, alloc, out)
        } else {
            f(device, cache, count, mine.as_ptr(), alloc, out)
        };
        if !temporary.is_empty()
            && r != vk::Result::SUCCESS
            && r != vk::Result::PIPELINE_COMPILE_REQUIRED
        {
            // The driver refused the instrumented pipelines: the program's own, untimed by clock.
            let made = std::slice::from_raw_parts_mut(out, count as usize);
            for p in made.iter_mut() {
                if *p != vk::Pipeline::null() {
                    if let Some(d) = next.destroy_pipeline {
                        d(device, *p, std::ptr::null());
                    }
                    *p = vk::Pipeline::null();
                }
            }
            self.refuse(format!("the driver refused instrumented pipelines ({r:?})"));
            targets.iter_mut().for_each(|t| *t = None);
            r = f(device, cache, count, infos, alloc, out);
        }
        if let Some(destroy) = next.destroy_shader_module {
            for m in temporary {
                destroy(device, m, std::ptr::null());
            }
        }
        let made = slice(out, count);
        let mut pipelines = self.pipelines.write().unwrap_or_else(|e| e.into_inner());
        for (p, t) in made.iter().zip(&targets) {
            if *p == vk::Pipeline::null() {
                continue;
            }
            match t {
                Some(t) => pipelines.insert(p.as_raw(), *t),
                None => pipelines.remove(&p.as_raw()),
            };
        }
        r
    }
}
