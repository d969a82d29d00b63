// The kernel families are generic over the cooperative group width: instantiate them at every
// width up to the hardware wave size (8, 16, 32 on NVIDIA; also 64 on AMD) and check each.
// Narrower groups share a wave, which the decode family's loops must allow for.
#include <gtest/gtest.h>

#include "gpu_check.h"
#include "kernels/decode.h"
#include "kernels/prefill.h"

namespace fmha {
namespace {

#if defined(__HIP_PLATFORM_NVIDIA__)
constexpr Arch kArch = Arch::sm90;
#else
constexpr Arch kArch = Arch::gfx90a;
#endif

using Fp16Causal = KernelConfig<DType::fp16, 64, HeadsKind::gqa, Mask::causal, kArch>;
using Bf16NoMask = KernelConfig<DType::bf16, 128, HeadsKind::gqa, Mask::nomask, kArch>;
using Fp16Wide = KernelConfig<DType::fp16, 256, HeadsKind::gqa, Mask::causal, kArch>;

template <class Config>
Problem problem(int s_q, int s_kv) {
    Problem p;
    p.dtype = Config::dtype, p.head_dim = Config::head_dim;
    if (Config::mask == Mask::causal) p.mask = AttentionMask::causal();
    p.batch = 3, p.heads_q = 6, p.heads_kv = 2, p.seqlen_q = s_q, p.seqlen_kv = s_kv;
    return p;
}

template <class Config, int kWidth>
void check_width() {
    if constexpr (kWidth <= wave_size(kArch)) {
        const KernelKey key{Config::dtype, Config::head_dim, Config::heads, Config::mask, Family::prefill, kArch};
        const KernelEntry prefill{key, &prefill::launch<Config, kWidth>, &prefill::workspace_size<Config, kWidth>};
        for (auto [s_q, s_kv] : {std::pair{1, 5}, std::pair{37, 101}, std::pair{130, 130}}) {
            GpuCase c{problem<Config>(s_q, s_kv), {}, uint64_t(kWidth)};
            c.lse = s_q % 2 == 1;  // both ways, the log-sum-exps' group sums too
            const CaseResult r = run_case(prefill, c);
            EXPECT_TRUE(r.passed) << "prefill, group width " << kWidth << ": " << r.message;
        }
        // Softcapping, ALiBi and paged KV (the options variants and branches) at this width too.
        GpuCase options{problem<Config>(2, 300), {}, uint64_t(kWidth) + 50, 8.f};
        options.problem.softcap = 5.f, options.problem.alibi = true, options.problem.page_size = 16;
        EXPECT_TRUE(run_case(prefill, options).passed) << "prefill with options, group width " << kWidth;
        KernelEntry decode{key, &decode::launch<Config, kWidth>, &decode::workspace_size<Config, kWidth>};
        for (int s_q : {1, 3}) {
            options.problem.seqlen_q = s_q;
            const CaseResult r = run_case(decode, options);
            EXPECT_TRUE(r.passed) << "decode with options, group width " << kWidth << ": " << r.message;
        }
        for (int s_kv : {2, 7, 16}) {  // the few-keys options variant (7, 16: the long one where the width's range is shorter)
            options.problem.seqlen_q = 1, options.problem.seqlen_kv = s_kv;
            EXPECT_TRUE(run_case(decode, options).passed) << "decode with options, " << s_kv << " keys, group width " << kWidth;
        }
        decode.key.family = Family::decode;
        // Tiny (two and few keys), split (3000 keys for 6 rows), and multi-pass (9 rows per KV
        // head) problems.
        for (auto [s_q, s_kv] : {std::pair{1, 2}, std::pair{1, 5}, std::pair{2, 16}, std::pair{1, 3000}, std::pair{3, 101}}) {
            GpuCase c{problem<Config>(s_q, s_kv), {}, uint64_t(kWidth)};
            c.lse = s_kv != 5;
            const CaseResult r = run_case(decode, c);
            EXPECT_TRUE(r.passed) << "decode, group width " << kWidth << ": " << r.message;
        }
    }
}

TEST(GroupWidth, EveryFamilyAtEveryWidth) {
    if (!test_device().found) GTEST_SKIP() << "no GPU: " << test_device().error;
    if (platform_of(*test_device().arch) != platform_of(kArch)) GTEST_SKIP() << "device of another platform";
    check_width<Fp16Causal, 8>();
    check_width<Fp16Causal, 16>();
    check_width<Fp16Causal, 32>();
    check_width<Fp16Causal, 64>();
    check_width<Bf16NoMask, 16>();
    check_width<Bf16NoMask, 32>();
    check_width<Bf16NoMask, 64>();
    check_width<Fp16Wide, 16>();  // two vectors per lane
    check_width<Fp16Wide, 32>();
}

}  // namespace
}  // namespace fmha
