#include "fmha/heuristics.h"

#include <algorithm>
#include <cstdlib>

#include "kernels/decode/limits.h"

namespace fmha {
namespace {

// A GQA kernel handles any heads_q / heads_kv ratio, MHA and MQA included; the MHA and MQA
// kernels drop the head division and are preferred when they fit.
bool heads_fit(HeadsKind kernel, const Problem& p) {
    return kernel == HeadsKind::gqa || kernel == p.heads_kind();
}

struct FamilyChoice {
    Family family;
    std::string why;
};

// Families in order of preference for the problem, with the reason for the order. The order
// is about speed: every family computes every shape it has a kernel for (kernel_supports).
std::vector<FamilyChoice> family_preference(const Problem& p) {
    const int rows = p.heads_q / p.heads_kv * p.seqlen_q;
    const std::string count = std::to_string(rows) + " query row(s) per KV head (" + std::to_string(p.heads_q / p.heads_kv) +
                              " head(s) x seqlen_q " + std::to_string(p.seqlen_q) + ")";
    const std::string limit = std::to_string(decode::kMaxRowsPerKvHead);
    if (rows <= decode::kMaxRowsPerKvHead) {
        const std::string why = count + " <= " + limit + ": memory-bound";
        return {{Family::decode, why}, {Family::mmaprefill, why}, {Family::prefill, why}};
    }
    const std::string why = count + " > " + limit + ": compute-bound";
    return {{Family::mmaprefill, why}, {Family::prefill, why}, {Family::decode, why}};
}

}  // namespace

bool kernel_supports(const KernelKey& key, const Problem& p, std::string* why_not) {
    std::string why;
    if (key.dtype != p.dtype) why = std::string("dtype is ") + token(key.dtype);
    else if (key.head_dim != p.head_dim) why = "head_dim is " + std::to_string(key.head_dim);
    else if (key.mask != p.mask()) why = std::string("mask is ") + token(key.mask);
    else if (key.family == Family::mmaprefill && !(p.softmax_scale() > 0.f))
        why = "the tensor-core family takes a positive softmax scale only";
    else if (!heads_fit(key.heads, p))
        why = std::string("a ") + token(key.heads) + " kernel cannot run " + token(p.heads_kind()) + " (h=" +
              std::to_string(p.heads_q) + ", h_kv=" + std::to_string(p.heads_kv) + ")";
    if (why_not) *why_not = why;
    return why.empty();
}

Selection select_kernel(const Problem& p, Arch arch) {
    std::string passed_over;  // the preferred families this build cannot use here, and why
    for (const FamilyChoice& choice : family_preference(p)) {
        std::string why_not = "no kernel for it in this build";
        for (HeadsKind heads : {p.heads_kind(), HeadsKind::gqa}) {
            const KernelEntry* entry = find_kernel({p.dtype, p.head_dim, heads, p.mask(), choice.family, arch});
            if (!entry || !kernel_supports(entry->key, p, &why_not)) continue;
            std::string reason = std::string(token(choice.family)) + " family, " + choice.why + passed_over + "; " +
                                 kFamilyDescriptions[static_cast<int>(choice.family)];
            if (heads != p.heads_kind())
                reason += std::string("; no ") + token(p.heads_kind()) + " kernel, the gqa kernel covers it";
            return {entry, reason};
        }
        passed_over += std::string("; not ") + token(choice.family) + ": " + why_not;
    }
    return {nullptr, std::string("no kernel in this build for ") + p.describe() + " on " + token(arch)};
}

bool catalogue_covers(const Problem& p) {
    return std::any_of(kernel_table().begin(), kernel_table().end(),
                       [&](const KernelEntry& e) { return kernel_supports(e.key, p); });
}

std::vector<std::string> nearest_kernels(const Problem& p, size_t count) {
    // Distance: dtype and mask mismatches weigh most, then head_dim difference, then heads.
    auto distance = [&](const KernelKey& k) {
        return (k.dtype != p.dtype) * 100000 + (k.mask != p.mask()) * 50000 + std::abs(k.head_dim - p.head_dim) * 10 +
               !heads_fit(k.heads, p) * 2 + (k.heads != p.heads_kind());
    };
    std::vector<const KernelEntry*> entries;
    for (const KernelEntry& e : kernel_table()) entries.push_back(&e);
    std::stable_sort(entries.begin(), entries.end(), [&](const KernelEntry* a, const KernelEntry* b) {
        const int da = distance(a->key), db = distance(b->key);
        return da != db ? da < db : kernel_name(a->key) < kernel_name(b->key);
    });
    std::vector<std::string> names;
    for (size_t i = 0; i < entries.size() && names.size() < count; ++i) names.push_back(kernel_name(entries[i]->key));
    return names;
}

std::string regenerate_command(const Problem& p) {
    std::string command = "python3 setup.py --head-dims " + std::to_string(p.head_dim);
    return command + " && make";
}

}  // namespace fmha
