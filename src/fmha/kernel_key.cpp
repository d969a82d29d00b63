#include "fmha/kernel_key.h"

#include <iterator>
#include <vector>

namespace fmha {
namespace {

template <class Enum, size_t N>
std::optional<Enum> find_token(const char* const (&tokens)[N], std::string_view text) {
    for (size_t i = 0; i < N; ++i)
        if (text == tokens[i]) return static_cast<Enum>(i);
    return std::nullopt;
}

std::vector<std::string_view> split(std::string_view text, char separator) {
    std::vector<std::string_view> parts;
    size_t start = 0;
    for (size_t pos; (pos = text.find(separator, start)) != std::string_view::npos; start = pos + 1)
        parts.push_back(text.substr(start, pos - start));
    parts.push_back(text.substr(start));
    return parts;
}

constexpr std::string_view kNamePrefix = "fmha_fwd_";

}  // namespace

const char* token(DType v) { return kDTypeTokens[static_cast<int>(v)]; }
const char* token(HeadsKind v) { return kHeadsKindTokens[static_cast<int>(v)]; }
const char* token(Mask v) { return kMaskTokens[static_cast<int>(v)]; }
const char* token(Family v) { return kFamilyTokens[static_cast<int>(v)]; }
const char* token(Arch v) { return kArchTokens[static_cast<int>(v)]; }
const char* token(Platform v) { return kPlatformTokens[static_cast<int>(v)]; }

template <> std::optional<DType> parse_token<DType>(std::string_view t) { return find_token<DType>(kDTypeTokens, t); }
template <> std::optional<HeadsKind> parse_token<HeadsKind>(std::string_view t) { return find_token<HeadsKind>(kHeadsKindTokens, t); }
template <> std::optional<Mask> parse_token<Mask>(std::string_view t) { return find_token<Mask>(kMaskTokens, t); }
template <> std::optional<Family> parse_token<Family>(std::string_view t) { return find_token<Family>(kFamilyTokens, t); }
template <> std::optional<Arch> parse_token<Arch>(std::string_view t) { return find_token<Arch>(kArchTokens, t); }

std::string kernel_name(const KernelKey& key) {
    return std::string(kNamePrefix) + token(key.dtype) + "_d" + std::to_string(key.head_dim) + "_" +
           token(key.heads) + "_" + token(key.mask) + "_" + token(key.family) + "_" + token(key.arch);
}

std::optional<KernelKey> parse_kernel_name(std::string_view name) {
    if (name.substr(0, kNamePrefix.size()) != kNamePrefix) return std::nullopt;
    const auto parts = split(name.substr(kNamePrefix.size()), '_');
    if (parts.size() != 6 || parts[1].size() < 2 || parts[1][0] != 'd') return std::nullopt;
    int head_dim = 0;
    for (char c : parts[1].substr(1)) {
        if (c < '0' || c > '9' || head_dim > 100000) return std::nullopt;
        head_dim = head_dim * 10 + (c - '0');
    }
    const auto dtype = parse_token<DType>(parts[0]);
    const auto heads = parse_token<HeadsKind>(parts[2]);
    const auto mask = parse_token<Mask>(parts[3]);
    const auto family = parse_token<Family>(parts[4]);
    const auto arch = parse_token<Arch>(parts[5]);
    if (!dtype || !heads || !mask || !family || !arch || head_dim == 0) return std::nullopt;
    return KernelKey{*dtype, head_dim, *heads, *mask, *family, *arch};
}

Platform platform_of(Arch arch) { return kArchFacts[static_cast<int>(arch)].platform; }

int bytes_of(DType) { return 2; }  // fp16 and bf16

}  // namespace fmha
