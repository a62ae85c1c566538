//! Errors of the Vulkan layer. Each says what failed and what the user can do.

/// An error from the Vulkan layer.
#[derive(Debug, thiserror::Error)]
pub enum VkError {
    #[error(
        "cannot load the Vulkan loader (libvulkan.so.1): {0}; install it with scripts/setup.sh (Debian package libvulkan1)"
    )]
    Loader(String),
    #[error(
        "the Khronos validation layer (VK_LAYER_KHRONOS_validation) was asked for but is not installed; install it with scripts/setup.sh (Debian package vulkan-validationlayers)"
    )]
    NoValidationLayer,
    #[error(
        "no Vulkan device was found; install lavapipe with scripts/setup.sh (Debian package mesa-vulkan-drivers)"
    )]
    NoDevice,
    #[error(
        "no Vulkan device matches --device {0:?}; `decoder devices` lists the devices with their index and name"
    )]
    DeviceNotFound(String),
    #[error(
        "device {device:?} lacks {feature}, which decodescope needs; pick another with --device"
    )]
    MissingFeature { device: String, feature: String },
    #[error("{call} failed: {result}")]
    Call { call: &'static str, result: String },
    #[error(
        "the GPU was lost (VK_ERROR_DEVICE_LOST) while running the work submitted after the dispatch labelled {last_label:?}"
    )]
    DeviceLost { last_label: String },
    #[error("allocating {bytes} bytes for buffer {name:?}: {message}")]
    Alloc {
        name: String,
        bytes: u64,
        message: String,
    },
    #[error(
        "buffer {name:?} of {bytes} bytes exceeds this device's maxStorageBufferRange of {max} bytes"
    )]
    BufferTooLarge { name: String, bytes: u64, max: u64 },
    #[error(
        "buffer {name:?} is not host-visible; only upload, readback and params buffers can be mapped"
    )]
    NotMapped { name: String },
    #[error("access to bytes {offset}..{end} of buffer {name:?}, which holds {size} bytes")]
    OutOfRange {
        name: String,
        offset: u64,
        end: u64,
        size: u64,
    },
    #[error("shader {shader}: {message}")]
    Shader {
        shader: &'static str,
        message: String,
    },
    #[error("{0}")]
    Unsupported(String),
}

pub type VkResult<T> = Result<T, VkError>;

pub(crate) fn call(call: &'static str) -> impl Fn(ash::vk::Result) -> VkError {
    move |r| VkError::Call {
        call,
        result: format!("{r:?}"),
    }
}
