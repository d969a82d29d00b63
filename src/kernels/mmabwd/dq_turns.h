// The deterministic backward (BwdParams::deterministic): the blocks that add into one step's
// rows of the fp32 dQ accumulator take turns, in the order of their key tiles, through a counter
// per step tile (and part of its columns) in the workspace, which the preprocess zeroes
// (docs/decisions.md, "Deterministic backward").
//
// A block's turn at a step is the rank of its key tile among the tiles that see the step's rows:
// those are consecutive (a row's keys are one range that moves right with the row), from the
// first whose keys reach the rows. Blocks start in the order of their key tiles (KeyTile), and a
// block waits only for lower tiles of its KV head: the block it waits for has started and never
// waits for it. Blocks walk their query rows from the last down (BlockSteps): under a causal
// mask every tile of a head then starts at the same rows, where tile n waits for n turns once,
// instead of at its diagonal, which the lower tiles reach only after most of their walk.
#pragma once

#include <hip/hip_runtime.h>

#include "fmha/bwd_params.h"
#include "kernels/common/mask.h"
#include "kernels/mmabwd/workspace.h"

namespace fmha {
namespace mmabwd {

// Worked out where it is used, by one thread (kept across a loop, it would take registers).
struct DqTurn {
    int* counter;
    int turn;

    // Block key tile `key_tile` (of `keys` keys) at the step of rows from q0 of a sequence whose
    // workspace rows start at `rows` (BlockSteps::Step), for part `part` of dQ's columns.
    template <bool kMasked>
    __device__ static DqTurn of(const BwdParams& p, const KeyMask<kMasked>& mask, int key_tile, int keys, int64_t rows,
                                int q0, int part) {
        // BlockSteps: tile n reaches rows from q0 while n keys + keys - 1 >= q0 + offset - left.
        const int first_tile = kMasked ? max(0, q0 + mask.offset - p.window.left) / keys : 0;
        int* const counter =
            Workspace::of(p).dq_turns + (rows + q0) / Workspace::kTurnRows * Workspace::kTurnParts + part;
        return {counter, key_tile - first_tile};
    }
    // Until the lower tiles' adds are done (then this block's adds come after them).
    __device__ void wait() const {
        while (*static_cast<volatile int*>(counter) != turn) {
        }
        __threadfence();
    }
    // Once the block's adds are complete: the next tile's turn.
    __device__ static void pass(int* counter) {
        __threadfence();
        atomicAdd(counter, 1);
    }
};

}  // namespace mmabwd
}  // namespace fmha
