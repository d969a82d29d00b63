// What the decode family serves, for the heuristic table (host code, no HIP).
#pragma once

namespace fmha {
namespace decode {

// Query rows per KV head (heads per KV head x seqlen_q) up to which the heuristic prefers this
// family: the rows of a KV head fit one pass of the tensor-core variant (two row tiles) or two
// of the CUDA-core one (8 rows), so K/V stream once or twice and the work stays memory-bound.
// Past it the tiled prefill family re-reads less.
inline constexpr int kMaxRowsPerKvHead = 16;

}  // namespace decode
}  // namespace fmha
