// The mask of a problem as a user states it: FlashAttention's window_size (left, right), with
// causal as right = 0, and FMHA_v2's -causal-mask and -sliding-window-size. Query i of a
// sequence sees the keys j with diagonal - left <= j <= diagonal + right, where diagonal =
// i + len_kv - len_q (bottom-right aligned); -1 leaves a side unbounded. One masked kernel per
// tuple serves every bounded window (kernels/common/mask.h); a new kind of mask (a custom
// predicate, a document mask) is a new field here and a new catalogue Mask value.
#pragma once

#include <algorithm>
#include <string>

#include "fmha/kernel_key.h"
#include "fmha/params.h"

namespace fmha {

struct AttentionMask {
    int left = -1;   // keys before the diagonal a row sees; -1: all of them
    int right = -1;  // keys after it; 0: causal; -1: all of them

    static AttentionMask none() { return {}; }
    // Causal, or FMHA_v2's sliding window: the `window` keys ending at the diagonal (0: all).
    static AttentionMask causal(int window = 0) { return {window > 0 ? window - 1 : -1, 0}; }
    static AttentionMask local(int left, int right) { return {left, right}; }

    bool bounded() const { return left >= 0 || right >= 0; }
    bool causal_only() const { return left < 0 && right == 0; }
    // The catalogue's kernels: the masked ones serve every bounded window.
    Mask kernel_mask() const { return bounded() ? Mask::causal : Mask::nomask; }
    // FwdParams::window: an unbounded side becomes the sequence size that bounds nothing.
    KeyWindow keys(int seqlen_q, int seqlen_kv) const {
        return KeyWindow::of(left < 0 ? seqlen_kv : std::min(left, seqlen_kv), right < 0 ? seqlen_q : std::min(right, seqlen_q));
    }
    std::string describe() const {
        if (!bounded()) return "no mask";
        if (causal_only()) return "causal (bottom-right)";
        auto side = [](int keys) { return keys < 0 ? std::string("all") : std::to_string(keys); };
        return "window (" + side(left) + " left, " + side(right) + " right of the bottom-right diagonal)";
    }
    friend bool operator==(const AttentionMask& a, const AttentionMask& b) { return a.left == b.left && a.right == b.right; }
};

}  // namespace fmha
