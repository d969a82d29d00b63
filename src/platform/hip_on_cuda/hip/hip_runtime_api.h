// HIP-on-CUDA, host side: the subset of the HIP runtime API that fmha uses, mapped onto the
// CUDA runtime. Our own replacement for HIP's nvidia_detail headers, which do not compile
// against CUDA 13. Compiles with g++ (host files) and nvcc (kernel files).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdio>

#ifndef __HIP_PLATFORM_NVIDIA__
#define __HIP_PLATFORM_NVIDIA__ 1
#endif

using hipError_t = cudaError_t;
using hipStream_t = cudaStream_t;
using hipEvent_t = cudaEvent_t;
using hipMemcpyKind = cudaMemcpyKind;

inline constexpr hipError_t hipSuccess = cudaSuccess;
inline constexpr hipError_t hipErrorNoDevice = cudaErrorNoDevice;
inline constexpr hipError_t hipErrorInvalidValue = cudaErrorInvalidValue;
inline constexpr hipError_t hipErrorOutOfMemory = cudaErrorMemoryAllocation;
inline constexpr hipMemcpyKind hipMemcpyHostToDevice = cudaMemcpyHostToDevice;
inline constexpr hipMemcpyKind hipMemcpyDeviceToHost = cudaMemcpyDeviceToHost;
inline constexpr hipMemcpyKind hipMemcpyDeviceToDevice = cudaMemcpyDeviceToDevice;

// The fields of HIP's device properties that fmha reads. CUDA 13 dropped the clock and
// memory-bus fields from cudaDeviceProp, so those come from device attributes.
struct hipDeviceProp_t {
    char name[256];
    char gcnArchName[256];  // AMD only; empty here
    size_t totalGlobalMem;
    size_t sharedMemPerBlock;
    int multiProcessorCount;
    int warpSize;
    int l2CacheSize;
    int major;
    int minor;
    int memoryClockRate;    // kHz
    int memoryBusWidth;     // bits
};

inline hipError_t hipGetDeviceProperties(hipDeviceProp_t* prop, int device) {
    cudaDeviceProp p;
    hipError_t err = cudaGetDeviceProperties(&p, device);
    if (err != cudaSuccess) return err;
    *prop = hipDeviceProp_t{};
    snprintf(prop->name, sizeof(prop->name), "%s", p.name);
    prop->totalGlobalMem = p.totalGlobalMem;
    prop->sharedMemPerBlock = p.sharedMemPerBlock;
    prop->multiProcessorCount = p.multiProcessorCount;
    prop->warpSize = p.warpSize;
    prop->l2CacheSize = p.l2CacheSize;
    prop->major = p.major;
    prop->minor = p.minor;
    err = cudaDeviceGetAttribute(&prop->memoryClockRate, cudaDevAttrMemoryClockRate, device);
    if (err != cudaSuccess) return err;
    return cudaDeviceGetAttribute(&prop->memoryBusWidth, cudaDevAttrGlobalMemoryBusWidth, device);
}

using hipDeviceAttribute_t = cudaDeviceAttr;
inline constexpr hipDeviceAttribute_t hipDeviceAttributeMultiprocessorCount = cudaDevAttrMultiProcessorCount;
inline hipError_t hipDeviceGetAttribute(int* value, hipDeviceAttribute_t attribute, int device) {
    return cudaDeviceGetAttribute(value, attribute, device);
}

template <class Kernel>
inline hipError_t hipOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, Kernel kernel, int threads, size_t shared_bytes) {
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, kernel, threads, shared_bytes);
}

inline hipError_t hipGetDeviceCount(int* count) { return cudaGetDeviceCount(count); }
inline hipError_t hipDriverGetVersion(int* version) { return cudaDriverGetVersion(version); }
inline hipError_t hipRuntimeGetVersion(int* version) { return cudaRuntimeGetVersion(version); }
inline hipError_t hipGetDevice(int* device) { return cudaGetDevice(device); }
inline hipError_t hipSetDevice(int device) { return cudaSetDevice(device); }
inline hipError_t hipDeviceSynchronize() { return cudaDeviceSynchronize(); }
inline hipError_t hipStreamSynchronize(hipStream_t stream) { return cudaStreamSynchronize(stream); }
inline hipError_t hipMemGetInfo(size_t* free, size_t* total) { return cudaMemGetInfo(free, total); }
inline hipError_t hipMalloc(void** ptr, size_t bytes) { return cudaMalloc(ptr, bytes); }
inline hipError_t hipFree(void* ptr) { return cudaFree(ptr); }
inline hipError_t hipMemcpy(void* dst, const void* src, size_t bytes, hipMemcpyKind kind) {
    return cudaMemcpy(dst, src, bytes, kind);
}
inline hipError_t hipMemset(void* dst, int value, size_t bytes) { return cudaMemset(dst, value, bytes); }
inline hipError_t hipMemsetAsync(void* dst, int value, size_t bytes, hipStream_t stream = nullptr) {
    return cudaMemsetAsync(dst, value, bytes, stream);
}
inline hipError_t hipGetLastError() { return cudaGetLastError(); }
inline hipError_t hipPeekAtLastError() { return cudaPeekAtLastError(); }
inline const char* hipGetErrorString(hipError_t err) { return cudaGetErrorString(err); }
inline const char* hipGetErrorName(hipError_t err) { return cudaGetErrorName(err); }
inline hipError_t hipEventCreate(hipEvent_t* event) { return cudaEventCreate(event); }
inline hipError_t hipEventDestroy(hipEvent_t event) { return cudaEventDestroy(event); }
inline hipError_t hipEventRecord(hipEvent_t event, hipStream_t stream = nullptr) {
    return cudaEventRecord(event, stream);
}
inline hipError_t hipEventSynchronize(hipEvent_t event) { return cudaEventSynchronize(event); }
inline hipError_t hipEventElapsedTime(float* ms, hipEvent_t start, hipEvent_t stop) {
    return cudaEventElapsedTime(ms, start, stop);
}
