#include "fmha/host_numeric.h"

#include <cmath>
#include <cstring>

namespace fmha {
namespace {

uint32_t bits_of(float value) {
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof(bits));
    return bits;
}

float float_of(uint32_t bits) {
    float value;
    std::memcpy(&value, &bits, sizeof(value));
    return value;
}

}  // namespace

float half_to_float(uint16_t bits) {
    const int exponent = (bits >> 10) & 0x1f;
    const int mantissa = bits & 0x3ff;
    const float sign = (bits & 0x8000) ? -1.f : 1.f;
    if (exponent == 0x1f) return mantissa ? NAN : sign * INFINITY;
    if (exponent == 0) return sign * std::ldexp(static_cast<float>(mantissa), -24);  // subnormal
    return sign * std::ldexp(static_cast<float>(mantissa | 0x400), exponent - 25);
}

uint16_t float_to_half(float value) {
    const uint32_t f = bits_of(value);
    const uint16_t sign = static_cast<uint16_t>((f >> 16) & 0x8000);
    const float magnitude = std::fabs(value);
    if (std::isnan(value)) return sign | 0x7e00;
    if (magnitude >= 65520.f) return sign | 0x7c00;  // rounds to infinity
    if (magnitude < std::ldexp(1.f, -14)) {          // subnormal (or zero): multiples of 2^-24
        return sign | static_cast<uint16_t>(std::nearbyint(magnitude * std::ldexp(1.f, 24)));
    }
    int exponent;
    const float fraction = std::frexp(magnitude, &exponent);  // magnitude = fraction * 2^exponent, fraction in [0.5, 1)
    // 11 significant bits; nearbyint rounds half to even in the default rounding mode.
    uint32_t significand = static_cast<uint32_t>(std::nearbyint(std::ldexp(fraction, 11)));
    if (significand == 2048) significand = 1024, ++exponent;
    return sign | static_cast<uint16_t>(((exponent + 14) << 10) | (significand & 0x3ff));
}

float bf16_to_float(uint16_t bits) { return float_of(static_cast<uint32_t>(bits) << 16); }

uint16_t float_to_bf16(float value) {
    const uint32_t u = bits_of(value);
    if (std::isnan(value)) return static_cast<uint16_t>((u >> 16) | 0x40);
    return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

}  // namespace fmha
