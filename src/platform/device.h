// The GPU fmha runs on, as far as the host needs to know it.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "fmha_catalogue.h"

namespace fmha {

// The platform this binary was built for (hipcc: amd; nvcc with our HIP-on-CUDA header: nvidia).
Platform build_platform();

struct DeviceInfo {
    bool found = false;
    std::string error;          // why no device was found
    std::string name;           // marketing name
    std::string arch_name;      // as the runtime reports it: "gfx90a", "sm_90"
    std::optional<Arch> arch;   // the catalogue arch, when it is one we know
    int multiprocessors = 0;
    size_t total_bytes = 0;
    size_t free_bytes = 0;
    size_t l2_bytes = 0;
    double peak_gbps = 0;       // from memory clock and bus width
};

DeviceInfo query_device();

// The runtime's arch name of a device ("sm_90", "gfx90a"); empty, with *error set, on failure.
std::string device_arch_name(int device, std::string* error);

// The catalogue arch whose device names include arch_name ("sm_90" -> sm90), if any.
std::optional<Arch> arch_for_device(const std::string& arch_name);

}  // namespace fmha
