#include "fmha/kernel_key.h"

namespace fmha {

const char* token(DType v) { return kDTypeTokens[static_cast<int>(v)]; }
const char* token(HeadsKind v) { return kHeadsKindTokens[static_cast<int>(v)]; }
const char* token(Mask v) { return kMaskTokens[static_cast<int>(v)]; }
const char* token(Family v) { return kFamilyTokens[static_cast<int>(v)]; }
const char* token(Arch v) { return kArchTokens[static_cast<int>(v)]; }
const char* token(Platform v) { return kPlatformTokens[static_cast<int>(v)]; }

Platform platform_of(Arch arch) { return kArchFacts[static_cast<int>(arch)].platform; }

int bytes_of(DType) { return 2; }  // fp16 and bf16

}  // namespace fmha
