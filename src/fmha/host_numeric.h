// Host-side conversions between fp32 and the 16-bit element types (IEEE binary16, bfloat16),
// written out so that host code never depends on a device header's host support.
#pragma once

#include <cstdint>

#include "fmha_catalogue.h"

namespace fmha {

float half_to_float(uint16_t bits);
uint16_t float_to_half(float value);   // round to nearest even
float bf16_to_float(uint16_t bits);
uint16_t float_to_bf16(float value);   // round to nearest even

inline float to_float(DType dtype, uint16_t bits) {
    return dtype == DType::fp16 ? half_to_float(bits) : bf16_to_float(bits);
}
inline uint16_t from_float(DType dtype, float value) {
    return dtype == DType::fp16 ? float_to_half(value) : float_to_bf16(value);
}

}  // namespace fmha
