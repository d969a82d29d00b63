#include "platform/device.h"

#include <hip/hip_runtime_api.h>

#include <sstream>

namespace fmha {

Platform build_platform() {
#if defined(__HIP_PLATFORM_NVIDIA__)
    return Platform::nvidia;
#else
    return Platform::amd;
#endif
}

std::optional<Arch> arch_for_device(const std::string& arch_name) {
    for (size_t i = 0; i < std::size(kArchFacts); ++i) {
        std::istringstream names(kArchFacts[i].device_names);
        for (std::string name; std::getline(names, name, ',');)
            if (name == arch_name) return static_cast<Arch>(i);
    }
    return std::nullopt;
}

DeviceInfo query_device() {
    DeviceInfo info;
    int count = 0;
    hipError_t err = hipGetDeviceCount(&count);
    if (err != hipSuccess || count == 0) {
        info.error = err != hipSuccess ? hipGetErrorString(err) : "the runtime reports 0 devices";
        return info;
    }
    int device = 0;
    hipDeviceProp_t prop;
    if ((err = hipGetDevice(&device)) != hipSuccess || (err = hipGetDeviceProperties(&prop, device)) != hipSuccess ||
        (err = hipMemGetInfo(&info.free_bytes, &info.total_bytes)) != hipSuccess) {
        info.error = hipGetErrorString(err);
        return info;
    }
    info.found = true;
    info.name = prop.name;
    if (build_platform() == Platform::nvidia) {
        info.arch_name = "sm_" + std::to_string(prop.major) + std::to_string(prop.minor);
    } else {
        info.arch_name = prop.gcnArchName;
        info.arch_name = info.arch_name.substr(0, info.arch_name.find(':'));  // "gfx90a:sramecc+:xnack-"
    }
    info.arch = arch_for_device(info.arch_name);
    info.multiprocessors = prop.multiProcessorCount;
    info.l2_bytes = static_cast<size_t>(prop.l2CacheSize);
    // DDR: two transfers per clock; clock in kHz, bus width in bits.
    info.peak_gbps = 2.0 * prop.memoryClockRate * 1e3 * (prop.memoryBusWidth / 8.0) / 1e9;
    return info;
}

}  // namespace fmha
