//! Vulkan layer (being written).
