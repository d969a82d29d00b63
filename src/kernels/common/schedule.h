// Work-item scheduling: 1-D grids over work items (so batch x heads is not bounded by grid y/z
// limits), and the device facts plans are made from.
#pragma once

#include <hip/hip_runtime.h>

#include <algorithm>
#include <cstdint>

namespace fmha {

// The grid for `units` units of work, `per_block` to a block, blocks dispatched in order (so
// the blocks resident at any time work on neighbouring memory; docs/decisions.md). Kernels
// loop over their work only past HIP's limit of 2^32 - 1 threads per grid.
inline unsigned grid_blocks(int64_t units, int per_block, int threads) {
    return unsigned(std::min((units + per_block - 1) / per_block, int64_t(UINT32_MAX) / threads));
}

// The current device's multiprocessors (compute units); 0 when there is no device. Asked of
// the runtime once per device: a launch must not pay a driver query.
inline int multiprocessor_count() {
    constexpr int kMaxDevices = 64;
    static int cached[kMaxDevices] = {};
    int device = 0, count = 0;
    if (hipGetDevice(&device) != hipSuccess) return 0;
    if (device < kMaxDevices && cached[device] > 0) return cached[device];
    if (hipDeviceGetAttribute(&count, hipDeviceAttributeMultiprocessorCount, device) != hipSuccess) return 0;
    if (device < kMaxDevices) cached[device] = count;
    return count;
}

}  // namespace fmha
