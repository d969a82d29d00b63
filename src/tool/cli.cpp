#include "tool/cli.h"

#include <cerrno>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <set>

namespace fmha {
namespace {

bool parse_int(const std::string& text, long long min, long long max, long long* out) {
    if (text.empty()) return false;
    errno = 0;
    char* end = nullptr;
    const long long value = std::strtoll(text.c_str(), &end, 10);
    if (errno != 0 || *end != '\0' || value < min || value > max) return false;
    *out = value;
    return true;
}

}  // namespace

ParsedCli parse_cli(const std::vector<std::string>& args) {
    ParsedCli parsed;
    Options& o = parsed.options;
    Problem& p = o.problem;
    p.batch = 1;
    p.heads_q = 16;
    p.seqlen_kv = 384;
    p.head_dim = 64;
    int seqlen_q = -1;    // default: seqlen_kv
    int heads_kv = -1;    // default: heads (MHA)
    bool mqa = false;
    bool paged = false;
    int page_size = 64;   // with -paged-kv
    bool causal = false;
    int window = 0, window_left = -1, window_right = -1;  // -sliding-window-size, -window-left/-right

    // Flags that take an integer: where the value goes.
    const std::map<std::string, int*> int_flags = {
        {"-b", &p.batch}, {"-h", &p.heads_q}, {"-d", &p.head_dim}, {"-s", &p.seqlen_kv}, {"-s-q", &seqlen_q},
        {"-min-s", &o.min_seqlen}, {"-gqa", &heads_kv}, {"-sliding-window-size", &window}, {"-runs", &o.runs},
        {"-warm-up-runs", &o.warm_up_runs}, {"-v", &o.verbose}, {"-page-size", &page_size},
        {"-window-left", &window_left}, {"-window-right", &window_right},
    };
    const std::map<std::string, std::function<void()>> switches = {
        {"-fp16", [&] { p.dtype = DType::fp16; }},  {"-bf16", [&] { p.dtype = DType::bf16; }},
        {"-causal-mask", [&] { causal = true; }}, {"-mqa", [&] { mqa = true; }},
        {"-skip-checks", [&] { o.skip_checks = true; }}, {"-list", [&] { o.list = true; }},
        {"-lse", [&] { o.lse = true; }},           {"-alibi", [&] { p.alibi = true; }},
        {"-bwd", [&] { o.backward = true; }},       {"-deterministic", [&] { p.deterministic = true; }},
        {"-paged-kv", [&] { paged = true; }},
        {"-help", [&] { o.help = true; }},          {"--help", [&] { o.help = true; }},
    };

    std::set<std::string> given;  // a flag given twice is an error, not "the last one wins"
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string& flag = args[i];
        const bool known = switches.count(flag) || int_flags.count(flag) || flag == "-scale-bmm1" || flag == "-softcapping-scale-bmm1" ||
                           flag == "-dropout" || flag == "-kernel" ||
                           flag == "-layout" || flag == "-save-tensors" || flag == "-seed";
        if (!known) {
            parsed.errors.push_back("unknown flag '" + flag + "'");
            continue;
        }
        if (!given.insert(flag).second) parsed.errors.push_back("flag " + flag + " given twice");
        if (auto s = switches.find(flag); s != switches.end()) {
            s->second();
            continue;
        }
        if (i + 1 >= args.size()) {
            parsed.errors.push_back("flag " + flag + " needs a value");
            break;
        }
        const std::string& value = args[++i];
        if (value.empty()) {
            parsed.errors.push_back("flag " + flag + " needs a non-empty value");
            continue;
        }
        long long number = 0;
        if (auto f = int_flags.find(flag); f != int_flags.end()) {
            // Range checks of the problem itself (e.g. positive sizes) are Problem::validate's job.
            if (!parse_int(value, INT_MIN, INT_MAX, &number))
                parsed.errors.push_back("flag " + flag + " expects an integer, got '" + value + "'");
            else
                *f->second = static_cast<int>(number);
        } else if (flag == "-seed") {
            if (!parse_int(value, 0, LLONG_MAX, &number))
                parsed.errors.push_back("flag -seed expects a non-negative integer, got '" + value + "'");
            else
                o.seed = static_cast<uint64_t>(number);
        } else if (flag == "-scale-bmm1") {
            // 0 stands for the default in Problem, and fp32 turns 1e-50 into 0 and 1e-40 into a
            // denormal: an explicit scale must be a normal float.
            char* end = nullptr;
            p.scale = std::strtof(value.c_str(), &end);
            if (*end != '\0' || std::fpclassify(p.scale) != FP_NORMAL) {
                char smallest[16];
                snprintf(smallest, sizeof(smallest), "%.1e", FLT_MIN);
                parsed.errors.push_back("flag -scale-bmm1 expects a finite fp32 number with |X| >= " + std::string(smallest) +
                                        ", got '" + value + "' (leave it out for the default 1/sqrt(d))");
            }
        } else if (flag == "-softcapping-scale-bmm1") {
            char* end = nullptr;
            p.softcap = std::strtof(value.c_str(), &end);
            if (*end != '\0' || !std::isfinite(p.softcap) || p.softcap < 0.f ||
                (p.softcap != 0.f && std::fpclassify(p.softcap) != FP_NORMAL))
                parsed.errors.push_back("flag -softcapping-scale-bmm1 expects a finite fp32 number > 0 (or 0: off), got '" +
                                        value + "'");
        } else if (flag == "-dropout") {
            char* end = nullptr;
            p.dropout = std::strtof(value.c_str(), &end);
            if (*end != '\0' || !(p.dropout >= 0.f && p.dropout < 1.f))
                parsed.errors.push_back("flag -dropout expects a probability in [0, 1), got '" + value + "'");
        } else if (flag == "-layout") {
            if (!parse_layout(value, &p.layout))
                parsed.errors.push_back("flag -layout expects bhsd, bshd, qkv-packed or packed, got '" + value + "'");
        } else if (flag == "-kernel") {
            o.kernel = value;
        } else if (flag == "-save-tensors") {
            o.save_dir = value;
        }
    }

    p.seqlen_q = seqlen_q < 0 ? p.seqlen_kv : seqlen_q;
    p.heads_kv = mqa ? 1 : heads_kv < 0 ? p.heads_q : heads_kv;
    if (mqa && heads_kv >= 0 && heads_kv != 1) parsed.errors.push_back("-mqa and -gqa " + std::to_string(heads_kv) + " disagree");
    if (given.count("-page-size") && !paged) parsed.errors.push_back("-page-size needs -paged-kv");
    if (paged && page_size <= 0)  // 0 would mean contiguous K/V in Problem
        parsed.errors.push_back("-page-size must be a power of two from 16 to 256 (got " + std::to_string(page_size) + ")");
    if (paged) p.page_size = page_size;  // Problem::validate checks the rest
    // The mask: FMHA_v2's flags (a sliding window implies the causal mask) or FlashAttention's
    // two sides; the causal mask fixes the right side at 0.
    if (given.count("-sliding-window-size") && (given.count("-window-left") || given.count("-window-right")))
        parsed.errors.push_back("-sliding-window-size and -window-left/-window-right disagree: give one");
    if (causal && window_right > 0)
        parsed.errors.push_back("-causal-mask and -window-right " + std::to_string(window_right) + " disagree (causal is right 0)");
    for (const char* flag : {"-window-left", "-window-right"}) {
        const int side = std::string(flag) == "-window-left" ? window_left : window_right;
        if (given.count(flag) && side < -1)
            parsed.errors.push_back(std::string(flag) + " must be >= 0, or -1 for unbounded (got " + std::to_string(side) + ")");
    }
    p.mask = given.count("-sliding-window-size") || causal ? AttentionMask::causal(window) : AttentionMask::none();
    if (given.count("-window-left")) p.mask.left = window_left;
    if (given.count("-window-right") && !causal) p.mask.right = window_right;
    if (o.runs < 1) parsed.errors.push_back("-runs must be at least 1 (got " + std::to_string(o.runs) + ")");
    if (o.warm_up_runs < 0) parsed.errors.push_back("-warm-up-runs must be >= 0 (got " + std::to_string(o.warm_up_runs) + ")");
    if (given.count("-min-s") && (o.min_seqlen < 1 || o.min_seqlen > p.seqlen_kv))
        parsed.errors.push_back("-min-s must be in [1, s] = [1, " + std::to_string(p.seqlen_kv) + "] (got " +
                                std::to_string(o.min_seqlen) + ")");
    if (o.verbose < 0 || o.verbose > 2) parsed.errors.push_back("-v must be 0, 1 or 2 (got " + std::to_string(o.verbose) + ")");
    if (given.count("-sliding-window-size") && window < 1)
        parsed.errors.push_back("-sliding-window-size must be positive (got " + std::to_string(window) + ")");
    if (given.count("-fp16") && given.count("-bf16")) parsed.errors.push_back("-fp16 and -bf16 disagree: give one");
    if (o.backward) {  // the backward kernels' reach (select_bwd_kernel says the rest)
        for (const char* flag : {"-save-tensors", "-kernel"})
            if (given.count(flag)) parsed.errors.push_back(std::string("-bwd does not take ") + flag + " yet");
    } else if (p.deterministic) {
        parsed.errors.push_back("-deterministic is an option of the backward: give -bwd too");
    }
    if (o.list) {  // -list describes no problem: any other flag is a mistake, not something to ignore
        std::string others;
        for (const std::string& flag : given)
            if (flag != "-list") others += (others.empty() ? "" : ", ") + flag;
        if (!others.empty()) parsed.errors.push_back("-list takes no other flag, got " + others);
    }
    return parsed;
}

std::string usage() {
    return R"(fmha.exe: run, check and time one attention problem with a catalogue kernel, forward or
(-bwd) backward.

Problem (defaults in brackets):
  -b N                    batch [1]
  -h N                    query heads [16]
  -gqa N                  KV heads (grouped-query attention) [= -h]
  -mqa                    one KV head (multi-query attention)
  -s N                    seqlen_kv [384]
  -s-q N                  seqlen_q [= -s]
  -min-s N                variable lengths, N in [1, s]: each sequence's seqlen_kv is drawn from
                          [N, s]; its seqlen_q is the same when -s-q = -s, else min(s-q, seqlen_kv)
  -d N                    head_dim [64]
  -fp16 | -bf16           element type [fp16]; accumulation and softmax are always fp32
  -causal-mask            causal mask, bottom-right aligned when seqlen_q < seqlen_kv: query i
                          sees keys j <= i + seqlen_kv - seqlen_q (as FlashAttention 2.1+)
  -sliding-window-size N  causal with a window, N >= 1: query i sees only the N keys ending at its
                          diagonal (implies -causal-mask)
  -window-left L, -window-right R
                          local attention as FlashAttention's window_size=(L, R): query i sees keys
                          j in [diag - L, diag + R], diag = i + seqlen_kv - seqlen_q; -1: unbounded
                          [-1]; with -causal-mask, R is 0. A row that sees no key yields zeros
  -scale-bmm1 X           softmax scale, a finite non-zero fp32 number [1/sqrt(d) when left out]
  -layout L               bhsd: Q [b,h,s,d], K/V [b,h_kv,s_kv,d] (default); bshd: token-major
                          [b,s,h,d]; qkv-packed: one [b,s,3,h,d] buffer (needs s-q = s, no GQA);
                          packed: variable-length tokens as FlashAttention's varlen, Q [total_q,h,d],
                          K/V [total_kv,h_kv,d], sequences at cu_seqlens (lengths as -min-s draws)
  -softcapping-scale-bmm1 X  logit softcapping: scores = X * tanh(scores / X) before the softmax
                          (scores already scaled by -scale-bmm1) [0: off]
  -alibi                  ALiBi with the standard slopes of -h heads (2^(-8h/n), ...): after any
                          softcapping, scores -= slope_h * |i + seqlen_kv - seqlen_q - j|, the
                          distance of key j from query i's diagonal (as FlashAttention)
  -paged-kv               paged KV cache: K and V in pages [pages, page_size, h_kv, d], found
                          through a block table of int32 page indices [b, pages per sequence]
                          (pages shuffled at random); -layout then places Q and O only
  -page-size N            keys per page with -paged-kv, a power of two from 16 to 256 [64]
  -dropout P              attention dropout with probability P in [0, 1) on the tensor-core
                          prefill family: the kernel's own Philox mask (seed -seed, offset 0),
                          kept probabilities scaled by 1/(1-P); the reference applies the same
                          mask; with -bwd the backward regenerates it [0: off]

Run:
  -runs N                 timed runs [100]
  -warm-up-runs N         untimed runs first [10]
  -skip-checks            do not compare with the reference
  -lse                    also output each query row's softmax log-sum-exp (natural log, fp32
                          [b, h, s_q]; -inf for a row that sees no key), checked and saved too
  -bwd                    the backward: one forward launch (with its LSE), then dQ, dK, dV for a
                          random dO by the backward kernel, checked against the fp32 reference
                          backward and timed (TFLOP/s count the backward as 2.5 forwards)
  -deterministic          with -bwd: dQ's partial sums added in a fixed order (the key tiles'),
                          so that equal inputs give bitwise-equal gradients (checked by a
                          second launch); not in builds of setup.py --no-deterministic-backward
  -kernel NAME            run this kernel instead of the heuristic's choice (see -list)
  -save-tensors DIR       write q, k, v, o, with -lse lse (and the references) as .npy plus
                          meta.json to DIR; with -alibi the slopes, with -paged-kv the pages
                          and the block table too (k and v gathered through it)
  -seed N                 random inputs' seed [1]
  -v N                    0: results only, 1: the chosen kernel and its launch, 2: more detail [1]
  -list                   print the catalogue and exit
  -help                   this text

Exit codes: 0 success, 1 checks failed, 2 bad input or no kernel, 3 no GPU, not enough device
memory or a runtime error.
)";
}

}  // namespace fmha
