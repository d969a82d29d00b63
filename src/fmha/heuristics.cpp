#include "fmha/heuristics.h"

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <string_view>

#include "kernels/config.h"
#include "kernels/decode/limits.h"
#include "kernels/mmaprefill/limits.h"

namespace fmha {
namespace {

// A GQA kernel handles any heads_q / heads_kv ratio, MHA and MQA included; the MHA and MQA
// kernels drop the head division and are preferred when they fit.
bool heads_fit(HeadsKind kernel, const Problem& p) {
    return kernel == HeadsKind::gqa || kernel == p.heads_kind();
}

// kBackwardFamilies: generated into fmha_catalogue.h from the generator's families.
bool is_backward(Family family) {
    return std::find(std::begin(kBackwardFamilies), std::end(kBackwardFamilies), family) != std::end(kBackwardFamilies);
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

// Why a family that reads rows in 16-byte vectors cannot take a head_dim that is not a multiple of 8.
std::string element_rows_misfit(int head_dim) {
    return "head_dim " + std::to_string(head_dim) + " is not a multiple of 8: its rows are not 16-byte vectors, which the "
           "family reads (the tensor-core family reads them element by element)";
}

// A family's kernel in `table` for the problem: its exact head_dim, else the smallest larger one
// that serves it (head_dim_fits); nullptr where the build has none.
template <class Entry>
const Entry* fitting_kernel(const std::vector<Entry>& table, const Problem& p, HeadsKind heads, Family family, Arch arch) {
    const Entry* found = nullptr;
    for (const Entry& e : table) {
        const KernelKey& k = e.key;
        if (k.dtype == p.dtype && k.heads == heads && k.mask == p.mask.kernel_mask() && k.family == family && k.arch == arch &&
            head_dim_fits(k.family, k.head_dim, p.head_dim) && (!found || k.head_dim < found->key.head_dim))
            found = &e;
    }
    return found;
}

// The reason's note where a kernel runs a smaller head_dim.
std::string smaller_head_dim_note(const Problem& p, const KernelKey& key) {
    if (key.head_dim == p.head_dim) return "";
    return "; head_dim " + std::to_string(p.head_dim) + " on the d" + std::to_string(key.head_dim) + " kernel (its columns past " +
           std::to_string(p.head_dim) + " are zeros)";
}

}  // namespace

bool kernel_supports(const KernelKey& key, const Problem& p, std::string* why_not) {
    // Each field that does not fit, with the flag that would make the problem fit the kernel.
    std::vector<std::string> misfits;
    if (key.dtype != p.dtype)
        misfits.push_back(std::string("its dtype is ") + token(key.dtype) + ", the problem's " + token(p.dtype) + " (-" +
                          token(key.dtype) + ")");
    const HeadDimRule rule = kFamilyHeadDimRules[static_cast<int>(key.family)];
    if (element_rows(p.head_dim) && !rule.element_rows)
        misfits.push_back(element_rows_misfit(p.head_dim));
    else if (!head_dim_fits(key.family, key.head_dim, p.head_dim))
        misfits.push_back("its head_dim is " + std::to_string(key.head_dim) + ", the problem's " + std::to_string(p.head_dim) +
                          (key.head_dim > p.head_dim && rule.serves_smaller ? " (a smaller head_dim runs on it when a multiple of 8)"
                           : key.head_dim > p.head_dim                       ? " (the family runs its exact head_dim only)"
                                                                             : " (-d " + std::to_string(key.head_dim) + ")"));
    if (key.mask != p.mask.kernel_mask())
        misfits.push_back(std::string("its mask is ") + token(key.mask) + ", the problem's " + token(p.mask.kernel_mask()) +
                          (key.mask == Mask::causal ? " (-causal-mask or a window)" : " (no -causal-mask or window)"));
    if (key.family == Family::mmaprefill && !mmaprefill::takes_scale(p.softmax_scale()))
        misfits.push_back("the tensor-core family takes a positive softmax scale only (a positive -scale-bmm1)");
    if (key.family == Family::mmaprefill && p.dropout != 0.f)
        if (const char* why = mmaprefill::dropout_declined(matrix_core(key.arch) == MatrixCore::mfma, key.head_dim))
            misfits.push_back(why);
    if (key.family != Family::mmaprefill && p.dropout != 0.f)
        misfits.push_back("only the tensor-core prefill family (mmaprefill) applies dropout");
    if (!heads_fit(key.heads, p))
        misfits.push_back(std::string("its heads kind is ") + token(key.heads) + ", the problem's " + token(p.heads_kind()) +
                          " (h=" + std::to_string(p.heads_q) + ", h_kv=" + std::to_string(p.heads_kv) + ")" +
                          (key.heads == HeadsKind::mqa ? " (-mqa)" : " (no -gqa or -mqa)"));
    if (why_not) {
        why_not->clear();
        for (const std::string& misfit : misfits) *why_not += (why_not->empty() ? "" : "; ") + misfit;
    }
    return misfits.empty();
}

Selection select_kernel(const Problem& p, Arch arch) {
    std::string passed_over;  // the preferred families this build cannot use here, and why
    for (const FamilyChoice& choice : family_preference(p)) {
        std::string why_not = "no kernel for it in this build";
        if (element_rows(p.head_dim) && !kFamilyHeadDimRules[static_cast<int>(choice.family)].element_rows)
            why_not = element_rows_misfit(p.head_dim);  // none of its kernels fits: say why
        for (HeadsKind heads : {p.heads_kind(), HeadsKind::gqa}) {
            const KernelEntry* entry = fitting_kernel(kernel_table(), p, heads, choice.family, arch);
            if (!entry || !kernel_supports(entry->key, p, &why_not)) continue;
            std::string reason = std::string(token(choice.family)) + " family, " + choice.why + passed_over + "; " +
                                 kFamilyDescriptions[static_cast<int>(choice.family)];
            if (heads != p.heads_kind())
                reason += std::string("; no ") + token(p.heads_kind()) + " kernel, the gqa kernel covers it";
            return {entry, reason + smaller_head_dim_note(p, entry->key)};
        }
        passed_over += std::string("; not ") + token(choice.family) + ": " + why_not;
    }
    // Each family's reason: a kernel it has may decline an option, not only lack the tuple.
    return {nullptr, std::string("no kernel in this build for ") + p.describe() + " on " + token(arch) + passed_over};
}

BwdSelection select_bwd_kernel(const Problem& p, Arch arch) {
    if (p.paged()) return {nullptr, "the backward kernels take no paged KV cache (a cache is not trained)"};
    if (!bwd_grid_fits(p.batch, p.heads_kv, p.seqlen_kv))
        return {nullptr, "the backward kernels take at most 2^31 - 1 tiles of 16 keys (key tiles x KV heads x batch)"};
    // The matrix cores' loop where the build has it, else the CUDA cores' (no deterministic loop).
    bool without_deterministic = false;
    for (const Family family : kBackwardFamilies) {
        const BwdKernelEntry* entry = fitting_kernel(bwd_kernel_table(), p, HeadsKind::gqa, family, arch);
        if (!entry) continue;
        if (p.deterministic && !entry->deterministic) {
            without_deterministic = true;
            continue;
        }
        return {entry, std::string(entry->name) + ": " + kFamilyDescriptions[static_cast<int>(family)] +
                           smaller_head_dim_note(p, entry->key)};
    }
    if (without_deterministic)
        return {nullptr, "this build's backward kernels have no deterministic mode: `python3 setup.py --refresh "
                         "--deterministic-backward && make` adds it (mmabwd's loop; simtbwd has none)"};
    return {nullptr, std::string("no backward kernel in this build for ") + p.describe() + " on " + token(arch) + "; " +
                         regenerate_advice(p, arch, true)};
}

bool catalogue_covers(const Problem& p) {
    return std::any_of(kernel_table().begin(), kernel_table().end(),
                       [&](const KernelEntry& e) { return kernel_supports(e.key, p); });
}

std::vector<std::string> nearest_kernels(const Problem& p, size_t count) {
    // Distance: dtype and mask mismatches weigh most, then head_dim difference, then heads.
    auto distance = [&](const KernelKey& k) {
        return (k.dtype != p.dtype) * 100000 + (k.mask != p.mask.kernel_mask()) * 50000 + std::abs(k.head_dim - p.head_dim) * 10 +
               !heads_fit(k.heads, p) * 2 + (k.heads != p.heads_kind());
    };
    std::vector<const KernelEntry*> entries;
    for (const KernelEntry& e : kernel_table()) entries.push_back(&e);
    std::stable_sort(entries.begin(), entries.end(), [&](const KernelEntry* a, const KernelEntry* b) {
        const int da = distance(a->key), db = distance(b->key);
        return da != db ? da < db : std::string_view(a->name) < b->name;
    });
    std::vector<std::string> names;
    for (size_t i = 0; i < entries.size() && names.size() < count; ++i) names.push_back(entries[i]->name);
    return names;
}

std::string regenerate_advice(const Problem& p, std::optional<Arch> arch, bool backward) {
    std::vector<KernelKey> table;  // the direction's kernels
    if (backward)
        for (const BwdKernelEntry& e : bwd_kernel_table()) table.push_back(e.key);
    else
        for (const KernelEntry& e : kernel_table()) table.push_back(e.key);
    auto table_has = [&](auto&& fits) { return std::any_of(table.begin(), table.end(), fits); };
    // The generator takes a head_dim that some family of the direction in the selection takes
    // (the table's families stand for the selection's; the others skip it).
    std::string rules;
    bool taken = false;
    for (int f = 0; f < static_cast<int>(std::size(kFamilyTokens)); ++f) {
        if (is_backward(static_cast<Family>(f)) != backward) continue;
        if (!table.empty() && !table_has([&](const KernelKey& k) { return static_cast<int>(k.family) == f; })) continue;
        const HeadDimRule rule = kFamilyHeadDimRules[f];
        taken = taken || (arch ? rule.takes(p.head_dim, matrix_core(*arch)) : rule.takes(p.head_dim));
        rules += std::string(rules.empty() ? "" : "; ") + kFamilyTokens[f] + " takes " +
                 (rule.power_of_two ? "a power of two from " : "a multiple of ") + std::to_string(rule.multiple) + " up to " +
                 std::to_string(rule.max);
        if (rule.limited_core == MatrixCore::none) continue;  // no smaller limit (archs without matrix cores have none either)
        std::string limited_archs;
        for (int a = 0; a < static_cast<int>(std::size(kArchFacts)); ++a)
            if (matrix_core(static_cast<Arch>(a)) == rule.limited_core)
                limited_archs += std::string(limited_archs.empty() ? "" : ", ") + token(static_cast<Arch>(a));
        if (!limited_archs.empty()) rules += " (" + std::to_string(rule.core_max) + " on " + limited_archs + ")";
    }
    if (!taken)
        return "head_dim " + std::to_string(p.head_dim) + " cannot be generated (" + rules +
               "); a multiple of 8 also runs on a larger kernel of a family that serves smaller head_dims" +
               (backward ? "" : ", any head_dim on a larger one of a family that reads element rows (mmaprefill)");

    // The axis values the table lacks, added to the recorded selection by --refresh.
    std::string options;
    if (!table_has([&](const KernelKey& k) { return k.dtype == p.dtype; })) options += std::string(" --dtypes ") + token(p.dtype);
    if (!table_has([&](const KernelKey& k) { return k.head_dim == p.head_dim; })) options += " --head-dims " + std::to_string(p.head_dim);
    if (!table_has([&](const KernelKey& k) { return heads_fit(k.heads, p); })) options += std::string(" --heads ") + token(p.heads_kind());
    if (!table_has([&](const KernelKey& k) { return k.mask == p.mask.kernel_mask(); })) options += std::string(" --masks ") + token(p.mask.kernel_mask());
    if (arch && !table_has([&](const KernelKey& k) { return k.arch == *arch; })) options += std::string(" --archs ") + token(*arch);
    if (options.empty())
        return std::string("this build's selection ") + catalogue_selection() +
               " has every value the problem needs but filters out their combination: run python3 setup.py "
               "with a --filter that keeps it, then make";
    return "to add kernels for it: python3 setup.py --refresh" + options + " && make";
}

}  // namespace fmha
