#include "fmha/kernel_table.h"

namespace fmha {

const KernelEntry* find_kernel(const KernelKey& key) {
    for (const KernelEntry& entry : kernel_table())
        if (entry.key == key) return &entry;
    return nullptr;
}

const KernelEntry* find_kernel_named(std::string_view name) {
    for (const KernelEntry& entry : kernel_table())
        if (name == entry.name) return &entry;
    return nullptr;
}

const BwdKernelEntry* find_bwd_kernel(const KernelKey& key) {
    for (const BwdKernelEntry& entry : bwd_kernel_table())
        if (entry.key == key) return &entry;
    return nullptr;
}

}  // namespace fmha
