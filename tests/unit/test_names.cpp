// Kernel names: the generator's, carried by the table rows and looked up as they are.
#include <gtest/gtest.h>

#include <set>

#include "fmha/kernel_key.h"
#include "fmha/kernel_table.h"
#include "platform/device.h"

namespace fmha {
namespace {

// Whether `token` is one of the name's underscore-separated fields (the order is the generator's).
bool names_field(const std::string& name, const std::string& token) {
    return ("_" + name + "_").find("_" + token + "_") != std::string::npos;
}

TEST(KernelName, EveryTableEntryIsFoundByItsNameAndKey) {
    ASSERT_FALSE(kernel_table().empty());
    for (const KernelEntry& entry : kernel_table()) {
        const std::string name = entry.name;
        EXPECT_EQ(find_kernel_named(name), &entry) << name;
        EXPECT_EQ(find_kernel(entry.key), &entry) << name;
    }
}

TEST(KernelName, EveryRowsNameNamesItsKey) {
    for (const KernelEntry& entry : kernel_table()) {
        const KernelKey& key = entry.key;
        for (const std::string& field : {std::string(token(key.dtype)), "d" + std::to_string(key.head_dim),
                                         std::string(token(key.heads)), std::string(token(key.mask)),
                                         std::string(token(key.family)), std::string(token(key.arch))})
            EXPECT_TRUE(names_field(entry.name, field)) << entry.name << " lacks " << field;
    }
}

TEST(KernelName, TableHoldsThisPlatformOnlyAndNoDuplicates) {
    std::set<std::string> names;
    for (const KernelEntry& entry : kernel_table()) {
        EXPECT_EQ(platform_of(entry.key.arch), build_platform()) << entry.name;
        EXPECT_TRUE(names.insert(entry.name).second) << "duplicate " << entry.name;
        EXPECT_NE(entry.launch, nullptr);
    }
}

TEST(KernelName, FindsNoKernelForOtherNames) {
    const std::string listed = kernel_table().front().name;
    for (const std::string& bad : {std::string(), listed.substr(0, listed.size() - 1), listed + "_extra", "x" + listed,
                                   std::string("fmha_fwd_fp32_d256_mha_nomask_prefill_gfx942"),
                                   std::string("fmha_fwd_fp16_d256_nomask_mha_prefill_gfx942")}) {
        EXPECT_EQ(find_kernel_named(bad), nullptr) << bad;
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
