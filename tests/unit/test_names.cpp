// Kernel names: the C++ side formats and parses exactly what the generator writes.
#include <gtest/gtest.h>

#include <set>

#include "fmha/kernel_key.h"
#include "fmha/kernel_table.h"
#include "platform/device.h"

namespace fmha {
namespace {

TEST(KernelName, FormatsEveryFieldInOrder) {
    const KernelKey key{DType::fp16, 256, HeadsKind::mha, Mask::nomask, Family::prefill, Arch::gfx942};
    EXPECT_EQ(kernel_name(key), "fmha_fwd_fp16_d256_mha_nomask_prefill_gfx942");
}

TEST(KernelName, EveryTableEntryRoundTrips) {
    ASSERT_FALSE(kernel_table().empty());
    for (const KernelEntry& entry : kernel_table()) {
        const std::string name = kernel_name(entry.key);
        const auto parsed = parse_kernel_name(name);
        ASSERT_TRUE(parsed.has_value()) << name;
        EXPECT_EQ(*parsed, entry.key) << name;
        EXPECT_EQ(find_kernel(entry.key), &entry) << name;
    }
}

TEST(KernelName, TableHoldsThisPlatformOnlyAndNoDuplicates) {
    std::set<std::string> names;
    for (const KernelEntry& entry : kernel_table()) {
        EXPECT_EQ(platform_of(entry.key.arch), build_platform()) << kernel_name(entry.key);
        EXPECT_TRUE(names.insert(kernel_name(entry.key)).second) << "duplicate " << kernel_name(entry.key);
        EXPECT_NE(entry.launch, nullptr);
    }
}

TEST(KernelName, RejectsMalformedNames) {
    for (const char* bad : {"", "fmha_fwd", "fmha_fwd_fp16_d256_mha_nomask_prefill", "fmha_fwd_fp32_d256_mha_nomask_prefill_gfx942",
                            "fmha_fwd_fp16_256_mha_nomask_prefill_gfx942", "fmha_fwd_fp16_dx_mha_nomask_prefill_gfx942",
                            "fmha_fwd_fp16_d256_mha_nomask_prefill_gfx942_extra", "fmha_fwd_fp16_d256_nomask_mha_prefill_gfx942",
                            "attn_fwd_fp16_d256_mha_nomask_prefill_gfx942", "fmha_fwd_fp16_d0_mha_nomask_prefill_gfx942"}) {
        EXPECT_FALSE(parse_kernel_name(bad).has_value()) << bad;
    }
}

TEST(KernelName, TokensAreUniqueAcrossFields) {
    std::set<std::string> tokens;
    auto add = [&](const char* t) { EXPECT_TRUE(tokens.insert(t).second) << t; };
    for (const char* t : kDTypeTokens) add(t);
    for (const char* t : kHeadsKindTokens) add(t);
    for (const char* t : kMaskTokens) add(t);
    for (const char* t : kFamilyTokens) add(t);
    for (const char* t : kArchTokens) add(t);
}

TEST(DeviceArch, RuntimeNamesMapToCatalogueArchs) {
    EXPECT_EQ(arch_for_device("gfx90a"), Arch::gfx90a);
    EXPECT_EQ(arch_for_device("gfx942"), Arch::gfx942);
    EXPECT_EQ(arch_for_device("gfx1100"), Arch::gfx1100);
    EXPECT_EQ(arch_for_device("sm_90"), Arch::sm90);
    // gfx942 code objects do not load on the MI300 engineering parts.
    EXPECT_FALSE(arch_for_device("gfx940").has_value());
    EXPECT_FALSE(arch_for_device("gfx1030").has_value());
    EXPECT_FALSE(arch_for_device("sm_80").has_value());
}

}  // namespace
}  // namespace fmha
