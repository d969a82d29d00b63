// fmha.exe's command line: FMHA_v2 flag semantics and clear errors for bad input.
#include <gtest/gtest.h>

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
    EXPECT_FALSE(p.causal);
}

TEST(Cli, GqaMqaCausalWindowAndTypes) {
    ParsedCli cli = parse({"-h", "32", "-gqa", "8", "-s-q", "1", "-s", "4096", "-bf16", "-causal-mask"});
    ASSERT_TRUE(cli.errors.empty());
    EXPECT_EQ(cli.options.problem.heads_kv, 8);
    EXPECT_EQ(cli.options.problem.seqlen_q, 1);
    EXPECT_EQ(cli.options.problem.dtype, DType::bf16);
    EXPECT_TRUE(cli.options.problem.causal);
    cli = parse({"-mqa", "-sliding-window-size", "128"});
    ASSERT_TRUE(cli.errors.empty());
    EXPECT_EQ(cli.options.problem.heads_kv, 1);
    EXPECT_TRUE(cli.options.problem.causal);  // a window implies the causal mask
    EXPECT_EQ(cli.options.problem.window, 128);
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
}

TEST(Cli, BadInputIsReportedNotGuessed) {
    EXPECT_FALSE(parse({"-bogus"}).errors.empty());
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
                             "-kernel", "-save-tensors", "-layout", "bottom-right"})
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
