// Per-sequence lengths (-min-s, variable lengths): what every family reads first.
#pragma once

#include <hip/hip_runtime.h>

#include <cstdint>

namespace fmha {

// A sequence's length: lengths[batch] (variable lengths), else the maximum. The lengths never
// exceed the maximum, so min() changes no value; without it the AMD compiler can turn
// `lengths ? lengths[batch] : maximum` into one load through a pointer to the kernel argument,
// which it then copies to scratch memory.
__device__ inline int sequence_length(const int* lengths, int64_t batch, int maximum) {
    return lengths ? min(lengths[batch], maximum) : maximum;
}

}  // namespace fmha
