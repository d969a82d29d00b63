// GPU test helpers: run one kernel on one random problem and compare with the reference.
#pragma once

#include <string>

#include "fmha/kernel_table.h"
#include "fmha/problem.h"
#include "platform/device.h"
#include "reference/device_reference.h"

namespace fmha {

struct GpuCase {
    Problem problem;
    SeqLens lens;         // empty: fixed lengths
    uint64_t seed = 1;
    float q_range = 1.f;  // larger values make the softmax peaky
    bool lse = false;     // ask for the log-sum-exps (FwdParams::lse) and check them too
    std::string describe() const;
};

struct CaseResult {
    bool passed = false;
    std::string message;
};

// Allocates, fills, poisons, launches, runs the reference and compares O and, with c.lse, the
// log-sum-exps, which must also leave the rows past a sequence's length unwritten.
CaseResult run_case(const KernelEntry& kernel, const GpuCase& c);

// The device (queried once); tests skip with its error when there is none.
const DeviceInfo& test_device();

}  // namespace fmha
