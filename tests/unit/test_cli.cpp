// fmha.exe's command line: FMHA_v2 flag semantics and clear errors for bad input.
#include <gtest/gtest.h>

#include "fmha/problem.h"
#include "tool/cli.h"
#include "tool/npy.h"

namespace fmha {
namespace {

ParsedCli parse(std::vector<std::string> args) { return parse_cli(args); }

TEST(Cli, HeadlineCommand) {
    const ParsedCli cli = parse({"-d", "256", "-b", "30720", "-h", "32", "-s", "2", "-fp16"});
    ASSERT_TRUE(cli.errors.empty());
    const Problem& p = cli.options.problem;
    EXPECT_EQ(p.head_dim, 256);
    EXPECT_EQ(p.batch, 30720);
    EXPECT_EQ(p.heads_q, 32);
    EXPECT_EQ(p.heads_kv, 32);       // MHA unless -gqa / -mqa
    EXPECT_EQ(p.seqlen_kv, 2);
    EXPECT_EQ(p.seqlen_q, 2);        // seqlen_q defaults to seqlen_kv, as in FMHA_v2
    EXPECT_EQ(p.dtype, DType::fp16);
    EXPECT_FALSE(p.mask.bounded());
}

TEST(Cli, GqaMqaCausalWindowAndTypes) {
    ParsedCli cli = parse({"-h", "32", "-gqa", "8", "-s-q", "1", "-s", "4096", "-bf16", "-causal-mask"});
    ASSERT_TRUE(cli.errors.empty());
    EXPECT_EQ(cli.options.problem.heads_kv, 8);
    EXPECT_EQ(cli.options.problem.seqlen_q, 1);
    EXPECT_EQ(cli.options.problem.dtype, DType::bf16);
    EXPECT_TRUE(cli.options.problem.mask == AttentionMask::causal());
    cli = parse({"-mqa", "-sliding-window-size", "128"});
    ASSERT_TRUE(cli.errors.empty());
    EXPECT_EQ(cli.options.problem.heads_kv, 1);
    EXPECT_TRUE(cli.options.problem.mask == AttentionMask::local(127, 0));  // a window implies the causal mask
    cli = parse({"-window-left", "5", "-window-right", "3"});
    ASSERT_TRUE(cli.errors.empty());
    EXPECT_TRUE(cli.options.problem.mask == AttentionMask::local(5, 3));
    cli = parse({"-causal-mask", "-window-left", "7"});
    ASSERT_TRUE(cli.errors.empty());
    EXPECT_TRUE(cli.options.problem.mask == AttentionMask::local(7, 0));
    cli = parse({"-window-right", "-1", "-window-left", "2"});
    ASSERT_TRUE(cli.errors.empty());
    EXPECT_TRUE(cli.options.problem.mask == AttentionMask::local(2, -1));
    EXPECT_FALSE(parse({"-causal-mask", "-window-right", "4"}).errors.empty());
    EXPECT_FALSE(parse({"-window-left", "-3"}).errors.empty());
    EXPECT_FALSE(parse({"-sliding-window-size", "4", "-window-left", "3"}).errors.empty());
}

TEST(Cli, RunOptions) {
    const ParsedCli cli = parse({"-runs", "7", "-warm-up-runs", "0", "-skip-checks", "-kernel", "x", "-v", "2", "-seed",
                                 "42", "-save-tensors", "/tmp/x", "-layout", "bshd", "-scale-bmm1", "0.25", "-min-s", "3"});
    ASSERT_TRUE(cli.errors.empty());
    const Options& o = cli.options;
    EXPECT_EQ(o.runs, 7);
    EXPECT_EQ(o.warm_up_runs, 0);
    EXPECT_TRUE(o.skip_checks);
    EXPECT_EQ(o.kernel, "x");
    EXPECT_EQ(o.verbose, 2);
    EXPECT_EQ(o.seed, 42u);
    EXPECT_EQ(o.save_dir, "/tmp/x");
    EXPECT_EQ(o.problem.layout, Layout::bshd);
    EXPECT_FLOAT_EQ(o.problem.scale, 0.25f);
    EXPECT_EQ(o.min_seqlen, 3);
    EXPECT_FALSE(o.lse);
    EXPECT_TRUE(parse({"-lse"}).options.lse);
    EXPECT_FALSE(o.backward);
}

TEST(Cli, BackwardMode) {
    const ParsedCli bwd = parse({"-bwd", "-d", "128", "-causal-mask", "-gqa", "4"});
    EXPECT_TRUE(bwd.errors.empty());
    EXPECT_TRUE(bwd.options.backward);
    // -bwd picks its own kernel and saves no tensors yet: said, not ignored.
    EXPECT_FALSE(parse({"-bwd", "-kernel", "fmha_bwd_fp16_d128_gqa_causal_mmabwd_sm90"}).errors.empty());
    EXPECT_FALSE(parse({"-bwd", "-save-tensors", "/tmp/x"}).errors.empty());
}

TEST(Cli, ServingOptions) {
    ParsedCli cli = parse({"-softcapping-scale-bmm1", "30", "-alibi", "-paged-kv"});
    ASSERT_TRUE(cli.errors.empty());
    EXPECT_FLOAT_EQ(cli.options.problem.softcap, 30.f);
    EXPECT_TRUE(cli.options.problem.alibi);
    EXPECT_EQ(cli.options.problem.page_size, 64);  // the default page
    cli = parse({"-paged-kv", "-page-size", "16", "-softcapping-scale-bmm1", "0"});
    ASSERT_TRUE(cli.errors.empty());
    EXPECT_EQ(cli.options.problem.page_size, 16);
    EXPECT_EQ(cli.options.problem.softcap, 0.f);  // 0: off, as in FMHA_v2
    cli = parse({});
    EXPECT_EQ(cli.options.problem.page_size, 0);   // contiguous K/V unless -paged-kv
    EXPECT_FALSE(cli.options.problem.alibi);
    EXPECT_EQ(cli.options.problem.softcap, 0.f);
}

TEST(Cli, BadServingOptions) {
    for (const char* cap : {"-1", "inf", "nan", "abc", "1e-40", ""})
        EXPECT_FALSE(parse({"-softcapping-scale-bmm1", cap}).errors.empty()) << cap;
    EXPECT_FALSE(parse({"-page-size", "32"}).errors.empty());   // needs -paged-kv
    EXPECT_FALSE(parse({"-alibi", "-alibi"}).errors.empty());
    // Page sizes parse, and Problem::validate takes powers of two from 16 to 256 only.
    for (const char* size : {"8", "48", "512", "0", "-16"}) {
        const ParsedCli cli = parse({"-paged-kv", "-page-size", size});
        EXPECT_FALSE(cli.errors.empty() && cli.options.problem.validate().empty()) << size;
    }
    for (const char* size : {"16", "32", "64", "128", "256"})
        EXPECT_TRUE(parse({"-paged-kv", "-page-size", size}).options.problem.validate().empty()) << size;
    EXPECT_FALSE(parse({"-paged-kv", "-layout", "qkv-packed"}).options.problem.validate().empty());
}

TEST(Cli, Dropout) {
    const ParsedCli cli = parse({"-dropout", "0.17"});
    ASSERT_TRUE(cli.errors.empty());
    EXPECT_FLOAT_EQ(cli.options.problem.dropout, 0.17f);
    EXPECT_EQ(parse({}).options.problem.dropout, 0.f);
    for (const char* p : {"1", "-0.1", "1.5", "nan", "x", "0.5x"}) EXPECT_FALSE(parse({"-dropout", p}).errors.empty()) << p;
    const ParsedCli backward = parse({"-bwd", "-dropout", "0.1"});  // the backward regenerates the mask
    ASSERT_TRUE(backward.errors.empty());
    EXPECT_TRUE(backward.options.backward);
    EXPECT_FLOAT_EQ(backward.options.problem.dropout, 0.1f);
}

TEST(Cli, DeterministicIsAnOptionOfTheBackward) {
    EXPECT_FALSE(parse({}).options.problem.deterministic);
    const ParsedCli backward = parse({"-bwd", "-deterministic"});
    ASSERT_TRUE(backward.errors.empty());
    EXPECT_TRUE(backward.options.problem.deterministic);
    EXPECT_TRUE(backward_shape_params(backward.options.problem).deterministic);
    EXPECT_FALSE(parse({"-deterministic"}).errors.empty());  // the forward has no order to fix
}

TEST(Cli, BadInputIsReportedNotGuessed) {
    EXPECT_FALSE(parse({"-bogus"}).errors.empty());
    // -list prints the catalogue only: a problem flag beside it is an error, not ignored.
    EXPECT_TRUE(parse({"-list"}).errors.empty());
    EXPECT_EQ(parse({"-list", "-b", "-1"}).errors, std::vector<std::string>{"-list takes no other flag, got -b"});
    EXPECT_EQ(parse({"-kernel", "x", "-list", "-v", "2"}).errors, std::vector<std::string>{"-list takes no other flag, got -kernel, -v"});
    EXPECT_FALSE(parse({"-b"}).errors.empty());                 // missing value
    EXPECT_FALSE(parse({"-b", "abc"}).errors.empty());
    EXPECT_FALSE(parse({"-b", "12x"}).errors.empty());
    EXPECT_FALSE(parse({"-b", "99999999999"}).errors.empty());  // beyond int
    EXPECT_FALSE(parse({"-scale-bmm1", "nan"}).errors.empty());
    EXPECT_FALSE(parse({"-layout", "sbhd"}).errors.empty());
    EXPECT_FALSE(parse({"-runs", "0"}).errors.empty());
    EXPECT_FALSE(parse({"-mqa", "-gqa", "4"}).errors.empty());
    EXPECT_FALSE(parse({"-s", "8", "-min-s", "9"}).errors.empty());
    EXPECT_FALSE(parse({"-scale-bmm1", "0"}).errors.empty());       // 0 would silently mean the default
    EXPECT_FALSE(parse({"-scale-bmm1", "1e-50"}).errors.empty());   // 0 in fp32
    EXPECT_FALSE(parse({"-scale-bmm1", "1e-40"}).errors.empty());   // denormal in fp32
    EXPECT_TRUE(parse({"-scale-bmm1", "-0.5"}).errors.empty());
    EXPECT_FALSE(parse({"-min-s", "0"}).errors.empty());
    EXPECT_FALSE(parse({"-kernel", ""}).errors.empty());
    EXPECT_FALSE(parse({"-save-tensors", ""}).errors.empty());
    EXPECT_FALSE(parse({"-v", "3"}).errors.empty());
    EXPECT_FALSE(parse({"-v", "-1"}).errors.empty());
    EXPECT_FALSE(parse({"-sliding-window-size", "0"}).errors.empty());
    EXPECT_FALSE(parse({"-fp16", "-bf16"}).errors.empty());
    EXPECT_FALSE(parse({"-b", "2", "-b", "3"}).errors.empty());    // given twice, not "the last wins"
    // Negative sizes parse, and Problem::validate rejects them.
    const ParsedCli negative = parse({"-b", "-4"});
    EXPECT_TRUE(negative.errors.empty());
    EXPECT_FALSE(negative.options.problem.validate().empty());
}

TEST(Cli, UsageMentionsEveryFlag) {
    const std::string text = usage();
    for (const char* flag : {"-b ", "-h ", "-d ", "-s ", "-s-q", "-min-s", "-gqa", "-mqa", "-fp16", "-bf16", "-causal-mask",
                             "-sliding-window-size", "-runs", "-warm-up-runs", "-scale-bmm1", "-skip-checks", "-v ", "-list",
                             "-kernel", "-save-tensors", "-layout", "bottom-right", "-softcapping-scale-bmm1", "-alibi",
                             "-paged-kv", "-page-size", "-bwd", "-dropout", "-deterministic"})
        EXPECT_NE(text.find(flag), std::string::npos) << flag;
}

TEST(Npy, HeaderIsAlignedAndDescribesTheArray) {
    const std::string header = npy_header("<f2", {2, 3, 4, 5});
    EXPECT_EQ(header.size() % 64, 0u);
    EXPECT_EQ(header.substr(0, 6), "\x93NUMPY");
    EXPECT_NE(header.find("'descr': '<f2'"), std::string::npos);
    EXPECT_NE(header.find("'shape': (2, 3, 4, 5)"), std::string::npos);
    EXPECT_EQ(header.back(), '\n');
    EXPECT_NE(npy_header("<i4", {7}).find("(7, )"), std::string::npos);
}

}  // namespace
}  // namespace fmha
