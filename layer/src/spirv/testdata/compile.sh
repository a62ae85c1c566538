#!/bin/sh
# Compiles the test shaders of src/spirv/tests.rs with the system's glslc (Debian's glslc
# package, glslang 11.13); run from this folder after changing a source.
set -e
c() { glslc -fshader-stage="$1" --target-env="$2" $3 -o "$4" "$5"; }
c comp vulkan1.2 -O0 early_returns.spv early_returns.comp
c comp vulkan1.2 -O early_returns_opt.spv early_returns.comp
c comp vulkan1.0 -O0 early_returns_vk10.spv early_returns.comp
c comp vulkan1.3 -O early_returns_vk13.spv early_returns.comp
c comp vulkan1.1 -O0 late_types.spv late_types.comp
c comp vulkan1.0 -O no_push_vk10.spv no_push.comp
c comp vulkan1.2 -O no_push.spv no_push.comp
c comp vulkan1.2 -O llama_like.spv llama_like.comp
c vert vulkan1.2 -O vertex.spv vertex.vert
