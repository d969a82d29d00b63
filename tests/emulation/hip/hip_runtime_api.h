// The HIP runtime names that host declarations beside emulated kernels use (fmha/kv_append.h's
// launcher), for tests/emulation: nothing here is called.
#pragma once

using hipError_t = int;
using hipStream_t = void*;
