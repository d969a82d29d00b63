#include "platform/device.h"

#include <hip/hip_runtime_api.h>

#include <sstream>
#include <unistd.h>

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

namespace {

// Why the runtime found no device, naming the cause: no driver, or a driver that sees no GPU.
std::string no_device_cause(hipError_t err) {
    if (build_platform() == Platform::nvidia) {
        int driver = 0, runtime = 0;
        (void)hipDriverGetVersion(&driver);  // 0 when no NVIDIA driver is installed
        (void)hipRuntimeGetVersion(&runtime);
        if (driver == 0) return "no NVIDIA driver is installed: libcuda.so.1 not found";
        if (err == hipErrorNoDevice) return "the NVIDIA driver sees no GPU";
        auto version = [](int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); };
        return "the NVIDIA driver (CUDA " + version(driver) + ") with this build's runtime (CUDA " + version(runtime) +
               "): " + hipGetErrorString(err);
    }
    // The amdgpu kernel driver creates /dev/kfd, which the HIP runtime opens.
    if (access("/dev/kfd", F_OK) != 0) return "no AMD GPU driver: /dev/kfd does not exist, so no amdgpu module is loaded or there is no AMD GPU";
    if (access("/dev/kfd", R_OK | W_OK) != 0) return "no access to /dev/kfd (is the user in the render group?)";
    return std::string("the AMD driver sees no GPU: ") + hipGetErrorString(err);
}

std::string arch_name_of(const hipDeviceProp_t& prop) {
    if (build_platform() == Platform::nvidia) return "sm_" + std::to_string(prop.major) + std::to_string(prop.minor);
    const std::string name = prop.gcnArchName;
    return name.substr(0, name.find(':'));  // "gfx90a:sramecc+:xnack-"
}

}  // namespace

std::string device_arch_name(int device, std::string* error) {
    hipDeviceProp_t prop;
    if (const hipError_t err = hipGetDeviceProperties(&prop, device); err != hipSuccess) {
        *error = std::string("device ") + std::to_string(device) + ": " + hipGetErrorString(err);
        return "";
    }
    return arch_name_of(prop);
}

DeviceInfo query_device() {
    DeviceInfo info;
    int count = 0;
    hipError_t err = hipGetDeviceCount(&count);
    if (err != hipSuccess || count == 0) {
        info.error = no_device_cause(err != hipSuccess ? err : hipErrorNoDevice);
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
    info.arch_name = arch_name_of(prop);
    info.arch = arch_for_device(info.arch_name);
    info.multiprocessors = prop.multiProcessorCount;
    info.l2_bytes = static_cast<size_t>(prop.l2CacheSize);
    // DDR: two transfers per clock; clock in kHz, bus width in bits.
    info.peak_gbps = 2.0 * prop.memoryClockRate * 1e3 * (prop.memoryBusWidth / 8.0) / 1e9;
    return info;
}

}  // namespace fmha
