// kernels/numeric.h includes it; the shim has the fp16 conversions.
#pragma once
#include "hip/hip_runtime.h"
