// The heuristic table: which catalogue kernel runs a problem on an arch, and why.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "fmha/kernel_table.h"
#include "fmha/problem.h"

namespace fmha {

struct Selection {
    const KernelEntry* entry = nullptr;  // nullptr: nothing in the catalogue runs it
    std::string reason;                  // why this kernel (or why none)
};

// Whether kernel `key` computes `problem` correctly (arch aside); otherwise each field that does
// not fit, with the flag that would make the problem fit the kernel.
bool kernel_supports(const KernelKey& key, const Problem& problem, std::string* why_not = nullptr);

// The preferred kernel of this build's table for the problem on `arch`.
Selection select_kernel(const Problem& problem, Arch arch);

struct BwdSelection {
    const BwdKernelEntry* entry = nullptr;  // nullptr: no backward kernel runs it
    std::string reason;
};

// The backward kernel of this build's table for the problem on `arch` (the gqa kernel of its
// dtype, head_dim and mask, which runs every group size: mmabwd's, else simtbwd's), or why there
// is none.
BwdSelection select_bwd_kernel(const Problem& problem, Arch arch);

// Whether any arch of this build has a kernel for the problem (checked before any GPU is touched).
bool catalogue_covers(const Problem& problem);

// Up to `count` names from the table closest to the problem, best first (for error messages).
std::vector<std::string> nearest_kernels(const Problem& problem, size_t count = 3);

// The generator command that adds to this build's selection what the problem (on `arch`, when
// known; its forward, or its backward) needs, or why no command can: a head_dim the generator
// does not take, a --filter.
std::string regenerate_advice(const Problem& problem, std::optional<Arch> arch = std::nullopt, bool backward = false);

}  // namespace fmha
