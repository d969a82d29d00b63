// The kernels around a backward main loop (workspace.h), launched for mmabwd and simtbwd alike.
#pragma once

#include <hip/hip_runtime.h>

#include "fmha/bwd_params.h"
#include "kernels/mmabwd/workspace.h"

namespace fmha {
namespace mmabwd {

// On `stream`: the preprocess, then `main_loop()` (which returns its launch's status), then the
// convert; head_dim / 8 lanes a workspace row.
template <class Config, class MainLoop>
hipError_t launch_around(const BwdParams& p, hipStream_t stream, MainLoop main_loop) {
    constexpr int kRowThreads = 256;
    const int64_t row_threads = Workspace::rows(p) * (Config::head_dim / 8);
    const unsigned row_blocks = unsigned((row_threads + kRowThreads - 1) / kRowThreads);
    preprocess_kernel<Config><<<row_blocks, kRowThreads, 0, stream>>>(p);
    const hipError_t loop = main_loop();
    if (loop != hipSuccess) return loop;
    convert_kernel<Config><<<row_blocks, kRowThreads, 0, stream>>>(p);
    return hipGetLastError();
}

}  // namespace mmabwd
}  // namespace fmha
