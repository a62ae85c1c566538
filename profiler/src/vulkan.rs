//! A Vulkan device's properties in the trace's words ([`crate::trace::DeviceMeta`]): pure
//! functions of the plain values the driver reports, for the two writers that read them from a
//! driver, the decoder's device probe and the capture layer (neither depends on the other, and
//! the profiler on no Vulkan crate).

use std::ffi::c_char;

/// A fixed-size, NUL-terminated name the driver filled in (`deviceName`, `driverName`,
/// `driverInfo`, `extensionName`); bytes that are not UTF-8 are replaced.
pub fn c_string(bytes: &[c_char]) -> String {
    let b: Vec<u8> = bytes
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&b).into_owned()
}

/// A packed `VK_MAKE_API_VERSION` value as `major.minor.patch` (the variant bits dropped).
pub fn api_version(v: u32) -> String {
    format!("{}.{}.{}", (v >> 22) & 0x7f, (v >> 12) & 0x3ff, v & 0xfff)
}

/// `VkPhysicalDeviceType` (its raw value) as [`crate::trace::DeviceMeta::device_type`] names
/// it: `discrete`, `integrated`, `virtual`, `cpu` or `other`.
pub fn device_type(raw: i32) -> &'static str {
    match raw {
        1 => "integrated",
        2 => "discrete",
        3 => "virtual",
        4 => "cpu",
        _ => "other",
    }
}

/// [`crate::trace::DeviceMeta::driver`]: `driverName` and `driverInfo`, a space between.
pub fn driver(name: &str, info: &str) -> String {
    format!("{name} {info}").trim().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_read_as_the_trace_names_them() {
        let name: Vec<c_char> = b"llvmpipe\0junk".iter().map(|&b| b as c_char).collect();
        assert_eq!(c_string(&name), "llvmpipe");
        // VK_MAKE_API_VERSION(0, 1, 3, 255).
        assert_eq!(api_version((1 << 22) | (3 << 12) | 255), "1.3.255");
        assert_eq!(
            [0, 1, 2, 3, 4, 5].map(device_type),
            ["other", "integrated", "discrete", "virtual", "cpu", "other"]
        );
        assert_eq!(driver("llvmpipe", ""), "llvmpipe");
        assert_eq!(driver("NVIDIA", "580.1"), "NVIDIA 580.1");
    }
}
