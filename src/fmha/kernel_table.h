// The kernel table: generated rows (generated/kernel_table_<platform>.cpp), exact-key lookup.
#pragma once

#include <hip/hip_runtime_api.h>

#include <string>
#include <string_view>
#include <vector>

#include "fmha/bwd_params.h"
#include "fmha/kernel_key.h"
#include "fmha/params.h"

namespace fmha {

using LaunchFn = hipError_t (*)(const FwdParams& params, hipStream_t stream);
// Device bytes the launcher needs in params.workspace for these params on the current device.
using WorkspaceFn = size_t (*)(const FwdParams& params);
// How the launcher divides these params' work on the current device, in words (fmha.exe -v).
using DescribeFn = std::string (*)(const FwdParams& params);

struct KernelEntry {
    KernelKey key;
    LaunchFn launch;
    WorkspaceFn workspace;
    DescribeFn describe = nullptr;  // optional: tests build entries without one
    const char* name = "";          // the generator's name (generator/catalogue.py); tests' entries have none
};

// A backward kernel: the same key (its family is a backward one), its own params.
using BwdLaunchFn = hipError_t (*)(const BwdParams& params, hipStream_t stream);
using BwdWorkspaceFn = size_t (*)(const BwdParams& params);

struct BwdKernelEntry {
    KernelKey key;
    BwdLaunchFn launch;
    BwdWorkspaceFn workspace;
    const char* name = "";
    bool deterministic = false;  // also has the deterministic main loop (unless setup.py --no-deterministic-backward)
};

// Every kernel this build holds (one platform's archs): forward, and backward.
const std::vector<KernelEntry>& kernel_table();
const std::vector<BwdKernelEntry>& bwd_kernel_table();

// The generator options that made this build's catalogue (generated/selection.json), as JSON.
const char* catalogue_selection();

// The entry with exactly this key, or nullptr.
const KernelEntry* find_kernel(const KernelKey& key);
// The entry of this name (fmha.exe -kernel, the GPU tests' ids), or nullptr.
const KernelEntry* find_kernel_named(std::string_view name);
const BwdKernelEntry* find_bwd_kernel(const KernelKey& key);

}  // namespace fmha
