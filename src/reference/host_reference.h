// The host reference: attention in double precision on logical [b, h, s, d] float tensors.
// Slow and obvious; the oracle for unit tests and for checking the device reference.
#pragma once

#include <vector>

#include "fmha/problem.h"

namespace fmha {

// q: [batch, heads_q, seqlen_q, d]; k, v: [batch, heads_kv, seqlen_kv, d] (logical: a paged
// problem's keys gathered through its block table); returns o like q. Softcapping (p.softcap)
// and ALiBi (p.alibi, with alibi_slopes(p.heads_q)) as FwdParams states them.
// Rows past a sequence's length, and rows that see no key, are zeros. lse (optional) gets each
// row's softmax log-sum-exp in natural log, [batch, heads_q, seqlen_q]; -inf for those rows.
std::vector<float> host_reference(const Problem& p, const SeqLens& lens, const std::vector<float>& q,
                                  const std::vector<float>& k, const std::vector<float>& v,
                                  std::vector<float>* lse = nullptr);

}  // namespace fmha
