// The simtbwd family: attention's backward on the CUDA cores, for any arch. The mmabwd family's
// three launches (preprocess, the main loop over key tiles, convert) and workspace, with a main
// loop of plain arithmetic (simtbwd/simt_kernel.h): the fallback where no matrix-core loop serves
// a call, and AMD's backward until mmabwd has an MFMA loop. It has no deterministic loop.
#pragma once

#include <hip/hip_runtime.h>

#include "fmha/bwd_params.h"
#include "kernels/config.h"
#include "kernels/mmabwd/around_loop.h"
#include "kernels/simtbwd/simt_kernel.h"

namespace fmha {
namespace simtbwd {

// The backward's rules for the tensors and the workspace (mmabwd/workspace.h), without a
// deterministic loop.
template <class Config>
bool supports(const BwdParams& p) {
    return mmabwd::supports<Config>(p, Family::simtbwd) && !p.deterministic;
}

template <class Config>
size_t workspace_size(const BwdParams& p) {
    return Workspace::bytes(p, Config::head_dim);
}

template <class Config, bool kWithDeterministic = false>
hipError_t launch(const BwdParams& p, hipStream_t stream) {
    static_assert(!kWithDeterministic, "generator/catalogue.py: simtbwd has no deterministic loop");
    if (!supports<Config>(p)) return hipErrorInvalidValue;
    using T = SimtTiles<Config>;
    return mmabwd::launch_around<Config>(p, stream, [&] {
        const unsigned blocks = unsigned(KeyTile::count(p, T::kKeys));
        if (has_scoring_options(p)) simt_kernel<Config, true><<<blocks, T::kThreads, T::kSharedBytes, stream>>>(p);
        else simt_kernel<Config, false><<<blocks, T::kThreads, T::kSharedBytes, stream>>>(p);
        return hipGetLastError();
    });
}

}  // namespace simtbwd
}  // namespace fmha
