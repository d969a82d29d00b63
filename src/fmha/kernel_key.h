// A kernel's config tuple on the C++ side, and its fields' tokens. The tuple's name is the
// generator's (generator/catalogue.py), carried by its kernel-table row (kernel_table.h).
#pragma once

#include "fmha_catalogue.h"

namespace fmha {

struct KernelKey {
    DType dtype;
    int head_dim;
    HeadsKind heads;
    Mask mask;
    Family family;
    Arch arch;

    friend bool operator==(const KernelKey& a, const KernelKey& b) {
        return a.dtype == b.dtype && a.head_dim == b.head_dim && a.heads == b.heads &&
               a.mask == b.mask && a.family == b.family && a.arch == b.arch;
    }
    friend bool operator!=(const KernelKey& a, const KernelKey& b) { return !(a == b); }
};

const char* token(DType v);
const char* token(HeadsKind v);
const char* token(Mask v);
const char* token(Family v);
const char* token(Arch v);
const char* token(Platform v);

Platform platform_of(Arch arch);
int bytes_of(DType dtype);

}  // namespace fmha
