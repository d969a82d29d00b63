// The heuristic table: exact-key lookups, heads-kind fallbacks, and the no-kernel answers.
#include <gtest/gtest.h>

#include <algorithm>
#include <regex>

#include "fmha/heuristics.h"
#include "platform/device.h"

namespace fmha {
namespace {

// An arch of this build's platform with kernels in the table: one with tensor-core prefill
// kernels where there is one, so that the tests below cover that family (on AMD the first arch
// by name, gfx1100, has none).
Arch some_arch() {
    for (const KernelEntry& entry : kernel_table())
        if (entry.key.family == Family::mmaprefill) return entry.key.arch;
    return kernel_table().front().key.arch;
}

Problem make(int h, int h_kv, int d, DType dtype = DType::fp16, bool causal = false) {
    Problem p;
    p.batch = 2, p.heads_q = h, p.heads_kv = h_kv, p.seqlen_q = 3, p.seqlen_kv = 5, p.head_dim = d;
    p.dtype = dtype;
    if (causal) p.mask = AttentionMask::causal();
    return p;
}

TEST(Heuristics, PicksTheBackwardKernelOfEveryGroupSize) {
    if (bwd_kernel_table().empty()) GTEST_SKIP() << "no backward kernels in this build (setup.py --families mmabwd simtbwd)";
    for (const BwdKernelEntry& entry : bwd_kernel_table()) {
        const KernelKey& k = entry.key;
        // The matrix cores' kernel of the key where the build has it, else this one (simtbwd's).
        const BwdKernelEntry* mma = find_bwd_kernel({k.dtype, k.head_dim, k.heads, k.mask, Family::mmabwd, k.arch});
        const BwdKernelEntry* const expected = mma ? mma : &entry;
        for (const int h_kv : {8, 2, 1}) {  // MHA, GQA and MQA problems: the gqa kernel serves them all
            const BwdSelection s = select_bwd_kernel(make(8, h_kv, k.head_dim, k.dtype, k.mask == Mask::causal), k.arch);
            EXPECT_EQ(s.entry, expected) << entry.name << ": " << s.reason;
        }
        Problem packed = make(8, 2, k.head_dim, k.dtype, k.mask == Mask::causal);
        packed.layout = Layout::packed;
        EXPECT_EQ(select_bwd_kernel(packed, k.arch).entry, expected) << entry.name;
        Problem options = packed;  // softcapping and ALiBi: the same kernel, its options loop
        options.softcap = 30.f, options.alibi = true;
        EXPECT_EQ(select_bwd_kernel(options, k.arch).entry, expected) << entry.name;
        // A smaller head_dim (a multiple of 8) on the next larger kernel, its columns zero-filled.
        const BwdSelection smaller = select_bwd_kernel(make(8, 2, k.head_dim - 8, k.dtype, k.mask == Mask::causal), k.arch);
        EXPECT_EQ(smaller.entry, expected) << entry.name << ": " << smaller.reason;
        EXPECT_NE(smaller.reason.find("on the d" + std::to_string(k.head_dim) + " kernel"), std::string::npos) << smaller.reason;
        packed.page_size = 64;  // a paged cache is not trained through
        EXPECT_EQ(select_bwd_kernel(packed, k.arch).entry, nullptr) << entry.name;
        // The deterministic loop where the generator built it (mmabwd's), else a refusal naming its flag.
        Problem deterministic = make(8, 2, k.head_dim, k.dtype, k.mask == Mask::causal);
        deterministic.deterministic = true;
        const BwdSelection s = select_bwd_kernel(deterministic, k.arch);
        EXPECT_EQ(s.entry, expected->deterministic ? expected : nullptr) << entry.name;
        if (!expected->deterministic) EXPECT_NE(s.reason.find("--deterministic-backward"), std::string::npos) << s.reason;
    }
    const BwdSelection none = select_bwd_kernel(make(8, 2, 264), bwd_kernel_table().front().key.arch);
    EXPECT_EQ(none.entry, nullptr);
    EXPECT_NE(none.reason.find("no backward kernel in this build"), std::string::npos) << none.reason;
}

TEST(Heuristics, PicksTheExactKernelWhenPresent) {
    ASSERT_FALSE(kernel_table().empty());
    for (const KernelEntry& entry : kernel_table()) {
        const KernelKey& k = entry.key;
        const int h_kv = k.heads == HeadsKind::mha ? 8 : k.heads == HeadsKind::mqa ? 1 : 2;
        const Problem p = make(8, h_kv, k.head_dim, k.dtype, k.mask == Mask::causal);
        const Selection s = select_kernel(p, k.arch);
        ASSERT_NE(s.entry, nullptr) << entry.name;
        EXPECT_EQ(s.entry->key.dtype, k.dtype);
        EXPECT_EQ(s.entry->key.head_dim, k.head_dim);
        EXPECT_EQ(s.entry->key.mask, k.mask);
        // The exact heads kind where the chosen family builds it (mmaprefill builds gqa only).
        const KernelKey exact{k.dtype, s.entry->key.head_dim, k.heads, k.mask, s.entry->key.family, k.arch};
        EXPECT_EQ(s.entry->key.heads, find_kernel(exact) ? k.heads : HeadsKind::gqa) << "exact heads kind preferred: " << s.reason;
        EXPECT_FALSE(s.reason.empty());
    }
}

// A plan asks for the workspace of the problem's layout (shape_params), a launch is checked with
// the caller's strides (fmha_capi.cpp): the two must agree whatever strides address the problem,
// among them a one-position query in [b, s, h, d], whose batch stride is its row stride as in a
// packed batch.
TEST(Heuristics, AKernelsWorkspaceDoesNotDependOnTheCallersStrides) {
    for (const KernelEntry& entry : kernel_table()) {
        const KernelKey& k = entry.key;
        const int h_kv = k.heads == HeadsKind::mha ? 8 : k.heads == HeadsKind::mqa ? 1 : 2;
        for (int seqlen_q : {1, 3, 200}) {
            Problem p = make(8, h_kv, k.head_dim, k.dtype, k.mask == Mask::causal);
            p.seqlen_q = seqlen_q, p.seqlen_kv = 4000;
            if (!kernel_supports(k, p)) continue;
            Problem token_major = p;
            token_major.layout = Layout::bshd;
            EXPECT_EQ(entry.workspace(shape_params(p)), entry.workspace(shape_params(token_major))) << entry.name << " s_q=" << seqlen_q;
        }
    }
}

// The tiled family this build prefers for many query rows: the tensor-core one where the arch has it.
Family tiled_family() {
    const KernelKey mma{DType::fp16, 128, HeadsKind::gqa, Mask::nomask, Family::mmaprefill, some_arch()};
    return find_kernel(mma) ? Family::mmaprefill : Family::prefill;
}

TEST(Heuristics, DecodeFamilyForFewQueryRowsPerKvHead) {
    const KernelKey decode{DType::fp16, 128, HeadsKind::gqa, Mask::nomask, Family::decode, some_arch()};
    const KernelKey prefill{DType::fp16, 128, HeadsKind::gqa, Mask::nomask, Family::prefill, some_arch()};
    if (!find_kernel(decode) || !find_kernel(prefill)) GTEST_SKIP() << "this build's catalogue lacks one of the families";
    const Family tiled = tiled_family();
    struct Case { int h, h_kv, s_q; Family expected; };
    for (const Case& c : {Case{32, 32, 1, Family::decode}, Case{32, 8, 1, Family::decode}, Case{16, 16, 2, Family::decode},
                          Case{32, 8, 4, Family::decode}, Case{32, 8, 5, tiled}, Case{16, 16, 384, tiled},
                          Case{32, 1, 1, tiled}}) {
        Problem p = make(c.h, c.h_kv, 128);
        p.seqlen_q = c.s_q, p.seqlen_kv = 512;
        const Selection s = select_kernel(p, some_arch());
        ASSERT_NE(s.entry, nullptr);
        EXPECT_EQ(s.entry->key.family, c.expected) << "h=" << c.h << " h_kv=" << c.h_kv << " s_q=" << c.s_q << ": " << s.reason;
        EXPECT_EQ(s.reason.rfind(std::string(token(c.expected)) + " family, " + std::to_string(c.h / c.h_kv * c.s_q) +
                                     " query row(s) per KV head", 0), 0u) << s.reason;
    }
}

TEST(Heuristics, TensorCoreFamilyPassedOverForANegativeScaleSaysWhy) {
    if (tiled_family() != Family::mmaprefill) GTEST_SKIP() << "no tensor-core prefill kernels in this build";
    const auto& table = kernel_table();
    if (std::none_of(table.begin(), table.end(), [](const KernelEntry& e) { return e.key.family == Family::prefill && e.key.arch == some_arch(); }))
        GTEST_SKIP() << "no CUDA-core prefill kernel to fall back on in this build (setup.py --only)";
    Problem p = make(16, 16, 128);
    p.seqlen_q = p.seqlen_kv = 512;
    p.scale = -0.125f;
    const Selection s = select_kernel(p, some_arch());
    ASSERT_NE(s.entry, nullptr);
    EXPECT_EQ(s.entry->key.family, Family::prefill) << s.reason;
    EXPECT_NE(s.reason.find("not mmaprefill: the tensor-core family takes a positive softmax scale only"), std::string::npos)
        << s.reason;
}

// Softcapping, ALiBi and paged KV: every family takes them, the tensor-core one on both main
// loops (wgmma and MFMA), so it keeps the launches it takes without them.
TEST(Heuristics, ServingOptionsReachTheFamiliesThatTakeThem) {
    const KernelKey decode{DType::fp16, 128, HeadsKind::gqa, Mask::nomask, Family::decode, some_arch()};
    const KernelKey prefill{DType::fp16, 128, HeadsKind::gqa, Mask::nomask, Family::prefill, some_arch()};
    if (!find_kernel(decode) || !find_kernel(prefill)) GTEST_SKIP() << "this build's catalogue lacks one of the families";
    const Family tiled = tiled_family();
    struct Option { const char* name; void (*set)(Problem&); };
    for (const Option& o : {Option{"softcap", [](Problem& p) { p.softcap = 30.f; }},
                            Option{"alibi", [](Problem& p) { p.alibi = true; }},
                            Option{"paged", [](Problem& p) { p.page_size = 64; }}}) {
        Problem p = make(16, 16, 128);
        p.seqlen_q = p.seqlen_kv = 512;
        o.set(p);
        Selection s = select_kernel(p, some_arch());
        ASSERT_NE(s.entry, nullptr) << o.name;
        EXPECT_EQ(s.entry->key.family, tiled) << o.name << ": " << s.reason;
        if (tiled == Family::mmaprefill)
            EXPECT_TRUE(kernel_supports({DType::fp16, 128, HeadsKind::gqa, Mask::nomask, Family::mmaprefill, some_arch()}, p))
                << o.name;
        EXPECT_TRUE(kernel_supports(prefill, p)) << o.name;
        EXPECT_TRUE(kernel_supports(decode, p)) << o.name;
        p.seqlen_q = 1;  // few rows per KV head: the decode family takes them
        s = select_kernel(p, some_arch());
        ASSERT_NE(s.entry, nullptr);
        EXPECT_EQ(s.entry->key.family, Family::decode) << o.name << ": " << s.reason;
    }
}

TEST(Heuristics, KernelSupportChecksEveryField) {
    const KernelKey gqa{DType::fp16, 128, HeadsKind::gqa, Mask::nomask, Family::prefill, some_arch()};
    EXPECT_TRUE(kernel_supports(gqa, make(8, 2, 128)));
    EXPECT_TRUE(kernel_supports(gqa, make(8, 8, 128)));   // GQA covers MHA
    EXPECT_TRUE(kernel_supports(gqa, make(8, 1, 128)));   // and MQA
    std::string why;
    EXPECT_FALSE(kernel_supports(gqa, make(8, 2, 256), &why));
    EXPECT_NE(why.find("head_dim"), std::string::npos);
    EXPECT_TRUE(kernel_supports(gqa, make(8, 2, 64)));  // a smaller head_dim, zero-filled
    EXPECT_FALSE(kernel_supports(gqa, make(8, 2, 60)));  // not in 16-byte vectors
    EXPECT_FALSE(kernel_supports(gqa, make(8, 2, 128, DType::bf16), &why));
    EXPECT_FALSE(kernel_supports(gqa, make(8, 2, 128, DType::fp16, true), &why));
    const KernelKey mha{DType::fp16, 128, HeadsKind::mha, Mask::nomask, Family::prefill, some_arch()};
    EXPECT_FALSE(kernel_supports(mha, make(8, 2, 128), &why));
    const KernelKey mqa{DType::fp16, 128, HeadsKind::mqa, Mask::nomask, Family::prefill, some_arch()};
    EXPECT_FALSE(kernel_supports(mqa, make(8, 2, 128)));
}

TEST(Heuristics, AKernelThatDoesNotFitSaysWhichFieldsAndWhichFlags) {
    const KernelKey mqa{DType::bf16, 128, HeadsKind::mqa, Mask::causal, Family::prefill, some_arch()};
    std::string why;
    EXPECT_FALSE(kernel_supports(mqa, make(8, 2, 256), &why));
    EXPECT_EQ(why, "its dtype is bf16, the problem's fp16 (-bf16); its head_dim is 128, the problem's 256 (-d 128); "
                   "its mask is causal, the problem's nomask (-causal-mask or a window); its heads kind is mqa, the problem's gqa "
                   "(h=8, h_kv=2) (-mqa)");
    const KernelKey mha{DType::fp16, 64, HeadsKind::mha, Mask::nomask, Family::prefill, some_arch()};
    EXPECT_FALSE(kernel_supports(mha, make(8, 2, 64, DType::fp16, true), &why));
    EXPECT_EQ(why, "its mask is nomask, the problem's causal (no -causal-mask or window); its heads kind "
                   "is mha, the problem's gqa (h=8, h_kv=2) (no -gqa or -mqa)");
}

// Whether the build has a kernel of a family whose head_dim rule `rule` accepts, for the arch
// (a narrowed selection, setup.py --only, may have none).
template <class Rule>
bool has_family_kernel(Rule rule, DType dtype = DType::fp16) {
    for (const KernelEntry& e : kernel_table())
        if (e.key.arch == some_arch() && e.key.dtype == dtype && rule(kFamilyHeadDimRules[static_cast<int>(e.key.family)], e.key))
            return true;
    return false;
}

TEST(Heuristics, ASmallerHeadDimRunsOnTheNextLargerKernelOfAFamilyThatServesIt) {
    if (!has_family_kernel([](const HeadDimRule& r, const KernelKey& k) { return r.serves_smaller && k.head_dim > 72; }))
        GTEST_SKIP() << "no fp16 kernel of a family that serves smaller head_dims in this build";
    const Problem p = make(8, 8, 72);
    const Selection chosen = select_kernel(p, some_arch());
    ASSERT_NE(chosen.entry, nullptr) << chosen.reason;
    EXPECT_GT(chosen.entry->key.head_dim, 72);
    EXPECT_TRUE(kFamilyHeadDimRules[static_cast<int>(chosen.entry->key.family)].serves_smaller);
    for (const KernelEntry& e : kernel_table())  // the smallest one that fits
        if (e.key.family == chosen.entry->key.family && e.key.arch == chosen.entry->key.arch && e.key.head_dim > 72)
            EXPECT_GE(e.key.head_dim, chosen.entry->key.head_dim) << e.name;
    EXPECT_NE(chosen.reason.find("head_dim 72 on the d" + std::to_string(chosen.entry->key.head_dim) + " kernel"),
              std::string::npos) << chosen.reason;
    // An exact kernel is still one generator command away where a family of the build takes 72
    // (with more axes where the build lacks them).
    if (has_family_kernel([](const HeadDimRule& r, const KernelKey&) { return r.takes(72); })) {
        const std::string advice = regenerate_advice(p);
        EXPECT_TRUE(std::regex_search(advice, std::regex("python3 setup\\.py --refresh --head-dims 72( --[a-z]+ [a-z0-9]+)* && make$")))
            << advice;
    }
    // The decode family runs its exact head_dim only.
    const KernelKey decode{DType::fp16, 128, HeadsKind::mha, Mask::nomask, Family::decode, some_arch()};
    std::string why;
    EXPECT_FALSE(kernel_supports(decode, make(8, 8, 72), &why));
    EXPECT_NE(why.find("the family runs its exact head_dim only"), std::string::npos) << why;
}

TEST(Heuristics, AHeadDimThatIsNotAMultipleOfEightRunsOnTheTensorCoreFamilyOnly) {
    // Its rows are not 16-byte vectors: the tensor-core family reads them element by element
    // on its next larger kernel; the families that move vectors say why they cannot.
    DType dtype = DType::fp16;  // one the build's tensor-core kernels have, and their largest head_dim
    int largest = 0;
    for (const KernelEntry& e : kernel_table())
        if (e.key.family == Family::mmaprefill && e.key.arch == some_arch())
            dtype = e.key.dtype, largest = std::max(largest, e.key.head_dim);
    for (int d : {59, 68, 111}) {
        if (d > largest) continue;  // a narrow build (setup.py --only) without such a kernel
        const Problem p = make(8, 2, d, dtype, true);
        const Selection chosen = select_kernel(p, some_arch());
        ASSERT_NE(chosen.entry, nullptr) << chosen.reason;
        EXPECT_EQ(chosen.entry->key.family, Family::mmaprefill) << chosen.reason;
        EXPECT_GT(chosen.entry->key.head_dim, d);
        EXPECT_NE(chosen.reason.find("not decode: head_dim " + std::to_string(d) + " is not a multiple of 8"), std::string::npos)
            << chosen.reason;
    }
    std::string why;
    const KernelKey prefill{DType::fp16, 128, HeadsKind::mha, Mask::nomask, Family::prefill, some_arch()};
    EXPECT_FALSE(kernel_supports(prefill, make(8, 8, 111), &why));
    EXPECT_EQ(why, "head_dim 111 is not a multiple of 8: its rows are not 16-byte vectors, which the family reads (the "
                   "tensor-core family reads them element by element)");
    const KernelKey mma{DType::fp16, 64, HeadsKind::gqa, Mask::nomask, Family::mmaprefill, some_arch()};
    EXPECT_TRUE(kernel_supports(mma, make(8, 8, 59)));
    EXPECT_FALSE(kernel_supports(mma, make(8, 8, 65), &why));  // larger than the kernel's
    EXPECT_NE(why.find("its head_dim is 64, the problem's 65"), std::string::npos) << why;
    if (largest < 59) GTEST_SKIP() << "no tensor-core prefill kernel in this build: the kernel choice went unchecked";
}

TEST(Heuristics, AHeadDimTheGeneratorRejectsGetsItsRuleNotACommand) {
    if (!has_family_kernel([](const HeadDimRule& r, const KernelKey&) { return r.multiple == 8; }))
        GTEST_SKIP() << "no fp16 kernel of a family that takes multiples of 8 in this build";
    for (int d : {7, 100, 264, 100000}) {
        const std::string advice = regenerate_advice(make(8, 8, d));
        EXPECT_EQ(advice.find("setup.py"), std::string::npos) << advice;
        EXPECT_NE(advice.find("head_dim " + std::to_string(d) + " cannot be generated"), std::string::npos) << advice;
        EXPECT_NE(advice.find("a multiple of 8 up to 256"), std::string::npos) << advice;
    }
}

TEST(Heuristics, AdviceNamesAFamilysSmallerHeadDimLimitOnSomeArchs) {
    // mmabwd's MFMA loop stops at d128 (generator/catalogue.py): the rule says so, by arch.
    const HeadDimRule rule = kFamilyHeadDimRules[static_cast<int>(Family::mmabwd)];
    EXPECT_EQ(rule.limited_core, MatrixCore::mfma);
    EXPECT_TRUE(rule.takes(256, MatrixCore::wgmma));
    EXPECT_FALSE(rule.takes(256, MatrixCore::mfma));
    EXPECT_TRUE(rule.takes(128, MatrixCore::mfma));
    // The backward's advice quotes the rules of the backward families its table has (any dtype or
    // arch); the forward's quotes none of them.
    EXPECT_EQ(regenerate_advice(make(8, 8, 300)).find("mmabwd"), std::string::npos);
    const auto& table = bwd_kernel_table();
    if (std::none_of(table.begin(), table.end(), [](const BwdKernelEntry& e) { return e.key.family == Family::mmabwd; }))
        GTEST_SKIP() << "no mmabwd kernel in this build";
    const std::string advice = regenerate_advice(make(8, 8, 300), std::nullopt, true);
    EXPECT_NE(advice.find("head_dim 300 cannot be generated (mmabwd takes a power of two from 64 up to 256 (128 on gfx908, "
                          "gfx90a, gfx942)"),
              std::string::npos)
        << advice;
    const BwdSelection none = select_bwd_kernel(make(8, 8, 300), table.front().key.arch);
    EXPECT_NE(none.reason.find(advice), std::string::npos) << none.reason;
}

TEST(Heuristics, AdviceAddsOnlyTheValuesTheTableLacks) {
    const KernelKey any = kernel_table().front().key;
    Problem p = make(8, 8, any.head_dim, any.dtype, any.mask == Mask::causal);
    const Arch missing_arch = build_platform() == Platform::nvidia ? Arch::gfx90a : Arch::sm90;  // never in this table
    EXPECT_EQ(regenerate_advice(p, missing_arch), std::string("to add kernels for it: python3 setup.py --refresh --archs ") +
                                                       token(missing_arch) + " && make");
}

TEST(Heuristics, NoKernelForAnArchOfAnotherPlatform) {
    const Arch other = build_platform() == Platform::nvidia ? Arch::gfx90a : Arch::sm90;
    EXPECT_EQ(select_kernel(make(8, 8, 128), other).entry, nullptr);
}

}  // namespace
}  // namespace fmha
