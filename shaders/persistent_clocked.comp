#version 460
// The persistent token kernel with phase clocks (`--timestamps dispatch`): workgroup 0 reads the
// device clock as it leaves each grid barrier; its text is shaders/persistent.glsl.
#define PHASE_CLOCKS 1
#include "persistent.glsl"
