// HIP-on-CUDA: HIP's fp16 header maps onto CUDA's (same names: __half, __half2, conversions).
#pragma once

#include <cuda_fp16.h>
