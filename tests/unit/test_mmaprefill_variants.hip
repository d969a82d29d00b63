// Which of the tensor-core prefill family's kernels a launch takes (kernels/mmaprefill.h,
// with_traits; tiles.h, Variant): packed batches of many tiles take a packed kernel; paged launches
// without a scoring option, dropout or element rows take the paged kernel where the head dim
// has one, every other paged launch the copies'.
#include <gtest/gtest.h>
#include <hip/hip_runtime.h>

#if defined(__HIP_PLATFORM_NVIDIA__)  // the wgmma family's variants: Hopper only
#include "kernels/mmaprefill.h"

namespace fmha {
namespace mmaprefill {
namespace {

template <int kHeadDim, Mask kMask = Mask::causal>
using Cfg = KernelConfig<DType::bf16, kHeadDim, HeadsKind::gqa, kMask, Arch::sm90>;

template <class Config>
Variant variant_of(const FwdParams& p) {
    return with_traits<Config>(p, [](auto traits) { return decltype(traits)::kVariant; });
}

TEST(MmaprefillVariants, EachLaunchTakesTheKernelOfItsOptions) {
    const int table[2] = {1, 0};
    const int cu_seqlens[2] = {0, 4096};
    const float slopes[1] = {0.5f};
    FwdParams p{};
    p.head_dim = 128, p.seqlen_kv = 8192;
    EXPECT_EQ(variant_of<Cfg<128>>(p), Variant::plain);
    // Packed batches alone: the packed kernel where its tiles fill the device 8 times over (4096
    // positions of 128 query heads: 33 x 128 tiles) and the workspace holds its counter; else
    // the options' kernel.
    int counter = 0;
    p.batch = 1, p.heads_q = 128, p.heads_kv = 16, p.seqlen_q = p.seqlen_kv = p.total_q = p.total_kv = 4096;
    p.cu_seqlens_q = p.cu_seqlens_kv = cu_seqlens;
    EXPECT_EQ(variant_of<Cfg<128>>(p), Variant::options);
    p.workspace = &counter, p.workspace_bytes = sizeof(counter);
    EXPECT_EQ(variant_of<Cfg<128>>(p), Variant::packed);
    p.head_dim = 64;
    EXPECT_EQ((variant_of<Cfg<64, Mask::nomask>>(p)), Variant::packed);
    p.head_dim = 128, p.heads_q = 16;  // 33 x 16 tiles
    if (multiprocessor_count() > 66) EXPECT_EQ(variant_of<Cfg<128>>(p), Variant::options);
    // With a scoring option or dropout beside them, the packed kernel with the options.
    p.heads_q = 128, p.softcap = 30.f;
    EXPECT_EQ(variant_of<Cfg<128>>(p), Variant::packed_options);
    p.head_dim = 64;
    EXPECT_EQ((variant_of<Cfg<64, Mask::nomask>>(p)), Variant::packed_options);
    p.head_dim = 128, p.softcap = 0.f, p.dropout.p = 0.1f;
    EXPECT_EQ(variant_of<Cfg<256>>(p), Variant::packed_options);
    p.dropout.p = 0.f, p.head_dim = 123;  // element rows: the producer copies them, it claims nothing
    EXPECT_EQ(variant_of<Cfg<128>>(p), Variant::copies);
    p.head_dim = 128, p.softcap = 30.f;
    p.cu_seqlens_q = p.cu_seqlens_kv = nullptr, p.workspace = nullptr;
    p.seqlen_kv = 8192;
    EXPECT_EQ(variant_of<Cfg<128>>(p), Variant::options);
    p.softcap = 0.f, p.block_table = table, p.page_size = 64;
    EXPECT_EQ(variant_of<Cfg<128>>(p), Variant::paged);
    p.head_dim = 256;
    EXPECT_EQ(variant_of<Cfg<256>>(p), Variant::paged);
    p.head_dim = 64;
    EXPECT_EQ(variant_of<Cfg<64>>(p), Variant::paged);
    EXPECT_EQ((variant_of<Cfg<64, Mask::nomask>>(p)), Variant::copies);  // d64 no-mask: none of its own (has_paged_kernel)
    EXPECT_EQ((variant_of<Cfg<128, Mask::nomask>>(p)), Variant::paged);
    p.head_dim = 128, p.cu_seqlens_q = cu_seqlens;       // packed chunks against the cache
    EXPECT_EQ(variant_of<Cfg<128>>(p), Variant::paged);
    // Any scoring option, dropout or element rows: the copies' kernel.
    p.softcap = 30.f;
    EXPECT_EQ(variant_of<Cfg<128>>(p), Variant::copies);
    p.softcap = 0.f, p.alibi_slopes = slopes;
    EXPECT_EQ(variant_of<Cfg<128>>(p), Variant::copies);
    p.alibi_slopes = nullptr, p.dropout.p = 0.1f;
    EXPECT_EQ(variant_of<Cfg<256>>(p), Variant::copies);
    p.dropout.p = 0.f, p.head_dim = 123;  // element rows on the d128 kernel
    EXPECT_EQ(variant_of<Cfg<128>>(p), Variant::copies);
}

}  // namespace
}  // namespace mmaprefill
}  // namespace fmha
#endif
