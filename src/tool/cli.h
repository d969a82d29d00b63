// fmha.exe's command line: FMHA_v2's flags where they overlap, plus -list, -kernel, -layout,
// -save-tensors, -seed and -bwd. Parsing is host-only and unit-tested.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fmha/problem.h"

namespace fmha {

struct Options {
    Problem problem;
    int min_seqlen = 0;       // -min-s: per-sequence lengths drawn from [min_s, s]; 0 = fixed
    int runs = 100;
    int warm_up_runs = 10;
    int verbose = 1;
    bool skip_checks = false;
    bool lse = false;         // -lse: ask for each row's log-sum-exp, check and save it too
    bool backward = false;    // -bwd: run, check and time the backward (after one forward)
    bool list = false;
    bool help = false;
    std::string kernel;       // -kernel NAME: force one kernel
    std::string save_dir;     // -save-tensors DIR
    uint64_t seed = 1;
};

struct ParsedCli {
    Options options;
    std::vector<std::string> errors;  // empty when the command line is well-formed
};

ParsedCli parse_cli(const std::vector<std::string>& args);

std::string usage();

}  // namespace fmha
