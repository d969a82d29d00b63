// What the decode family serves, for the heuristic table (host code, no HIP).
#pragma once

namespace fmha {
namespace decode {

// Query rows per KV head (heads per KV head x seqlen_q) up to which the heuristic prefers this
// family: the rows of a KV head take at most two passes of 8 rows (four of 4 at few keys), so
// K/V stream from memory once, then from L2, and the work stays memory-bound. Past it the tiled
// prefill family re-reads less.
inline constexpr int kMaxRowsPerKvHead = 16;

}  // namespace decode
}  // namespace fmha
