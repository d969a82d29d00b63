#include "fmha/kernel_table.h"

namespace fmha {

const KernelEntry* find_kernel(const KernelKey& key) {
    for (const KernelEntry& entry : kernel_table())
        if (entry.key == key) return &entry;
    return nullptr;
}

}  // namespace fmha
