//! Device features the layer turns on at `vkCreateDevice` beside the program's own: the
//! program's feature structures are patched in place for the length of the call (a second
//! structure of the same type in the chain would be invalid), and the layer's own structures
//! are chained in front where the program has none. [`super::clock`] plans shader clocks this
//! way; [`HostReset`] plans `hostQueryReset`, which lets the layer reset its queries from the
//! host rather than in the program's command buffers.

use std::ffi::{CStr, c_char, c_void};

use ash::vk;

use super::InstanceData;

/// A `VkBool32` in one of the program's feature structures that the layer turns on for the
/// length of `vkCreateDevice` and restores once the call returns.
pub(super) struct Patch {
    pub field: *mut vk::Bool32,
    pub was: vk::Bool32,
}

/// True when `len` bytes at `addr` lie in a writable mapping of this process (the program's
/// structures are `const` to Vulkan, and may be in read-only memory).
pub(super) fn writable(addr: usize, len: usize) -> bool {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return false;
    };
    maps.lines().any(|l| {
        let mut f = l.split_whitespace();
        let (Some(range), Some(perms)) = (f.next(), f.next()) else {
            return false;
        };
        let Some((a, b)) = range.split_once('-') else {
            return false;
        };
        let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) else {
            return false;
        };
        a <= addr && addr + len <= b && perms.as_bytes().get(1) == Some(&b'w')
    })
}

/// Whether `name` is among the `requested` extension names.
pub(super) unsafe fn named(requested: &[*const c_char], name: &CStr) -> bool {
    requested
        .iter()
        .any(|&p| !p.is_null() && CStr::from_ptr(p) == name)
}

/// Whether the device offers the extension `name` (among its `available` ones).
pub(super) fn offered(available: &[vk::ExtensionProperties], name: &CStr) -> bool {
    available
        .iter()
        .any(|e| e.extension_name_as_c_str().is_ok_and(|n| n == name))
}

/// What `vkCreateDevice` adds for `hostQueryReset`: the program's own feature field turned on,
/// or the layer's `VkPhysicalDeviceHostQueryResetFeatures` chained in front, and
/// `VK_EXT_host_query_reset` where the device has it (the program's instance may ask for less
/// than Vulkan 1.2, where the feature is not core).
pub(super) struct HostReset {
    features: Box<vk::PhysicalDeviceHostQueryResetFeatures<'static>>,
    add: bool,
    patch: Option<Patch>,
    /// The extension to add to the program's, if it does not ask for it.
    pub extension: Option<&'static CStr>,
}

impl HostReset {
    /// The plan for a device of `pd` created with `info`; the reason in one phrase when the
    /// layer cannot have the feature (its queries are then reset in command buffers).
    pub(super) unsafe fn plan(
        inst: &InstanceData,
        pd: vk::PhysicalDevice,
        info: &vk::DeviceCreateInfo<'_>,
        requested: &[*const c_char],
        available: &[vk::ExtensionProperties],
    ) -> Result<HostReset, String> {
        let name = ash::ext::host_query_reset::NAME;
        let has_ext = offered(available, name);
        let props = inst.fns.get_physical_device_properties(pd);
        if props.api_version < vk::API_VERSION_1_1 {
            return Err("the device is Vulkan 1.0".into());
        }
        if props.api_version < vk::API_VERSION_1_2 && !has_ext {
            return Err("the device has no VK_EXT_host_query_reset".into());
        }
        let mut f = vk::PhysicalDeviceHostQueryResetFeatures::default();
        let mut f2 = vk::PhysicalDeviceFeatures2::default().push_next(&mut f);
        (inst.fns.fp_v1_1().get_physical_device_features2)(pd, &mut f2);
        if f.host_query_reset != vk::TRUE {
            return Err("the device has no hostQueryReset".into());
        }
        // The program's own structure holding the feature, if it has one.
        let mut field: Option<*const vk::Bool32> = None;
        let mut p = info.p_next as *const vk::BaseInStructure<'_>;
        while !p.is_null() {
            match (*p).s_type {
                vk::StructureType::PHYSICAL_DEVICE_VULKAN_1_2_FEATURES => {
                    let s = p as *const vk::PhysicalDeviceVulkan12Features<'_>;
                    field = Some(&raw const (*s).host_query_reset);
                }
                vk::StructureType::PHYSICAL_DEVICE_HOST_QUERY_RESET_FEATURES => {
                    let s = p as *const vk::PhysicalDeviceHostQueryResetFeatures<'_>;
                    field = Some(&raw const (*s).host_query_reset);
                }
                _ => {}
            }
            p = (*p).p_next;
        }
        let patch = match field {
            Some(f) if *f == vk::TRUE => None,
            Some(f) if writable(f as usize, std::mem::size_of::<vk::Bool32>()) => Some(Patch {
                field: f as *mut vk::Bool32,
                was: *f,
            }),
            Some(_) => {
                return Err(
                    "the program's device features leave hostQueryReset off, in memory the \
                     layer cannot write"
                        .into(),
                );
            }
            None => None,
        };
        Ok(HostReset {
            features: Box::new(
                vk::PhysicalDeviceHostQueryResetFeatures::default().host_query_reset(true),
            ),
            add: field.is_none(),
            patch,
            extension: (has_ext && !named(requested, name)).then_some(name),
        })
    }

    /// Turns the feature on in `ci` (a copy of the program's create info).
    pub(super) unsafe fn apply(&mut self, ci: &mut vk::DeviceCreateInfo<'_>) {
        if let Some(p) = &self.patch {
            // SAFETY: the field is in the program's structure, in writable memory (`writable`),
            // which the program does not touch while it waits for vkCreateDevice.
            p.field.write(vk::TRUE);
        }
        if self.add {
            self.features.p_next = ci.p_next as *mut c_void;
            ci.p_next =
                (&mut *self.features as *mut vk::PhysicalDeviceHostQueryResetFeatures<'_>).cast();
        }
    }

    /// Gives the program's structure back its own value (after `vkCreateDevice`).
    pub(super) unsafe fn restore(&self) {
        if let Some(p) = &self.patch {
            // SAFETY: as in `apply`.
            p.field.write(p.was);
        }
    }
}
