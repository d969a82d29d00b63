// A kernel's config tuple on the C++ side, and its name (see generator/catalogue.py).
#pragma once

#include <optional>
#include <string>
#include <string_view>

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

// Parses one token of the given axis; nullopt when it is not one of the axis' tokens.
template <class Enum>
std::optional<Enum> parse_token(std::string_view text);

std::string kernel_name(const KernelKey& key);
std::optional<KernelKey> parse_kernel_name(std::string_view name);

Platform platform_of(Arch arch);
int bytes_of(DType dtype);

}  // namespace fmha
