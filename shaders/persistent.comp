#version 460
// The persistent token kernel; its text is shaders/persistent.glsl.
#include "persistent.glsl"
