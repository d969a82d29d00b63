#!/usr/bin/env python3
"""The named problem shapes: the SPEC's headline configs and the benchmark cases, defined once.

The tests (fmha_test.py), the benchmark (benchmarks/bench.py) and the device scripts (tools/)
read them from here. From a shell, each name's fmha.exe flags, one line per name:

    python3 benchmarks/shapes.py config3 long4k      # two lines of flags
    python3 benchmarks/shapes.py --list              # every name with its flags
"""
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Case:
    name: str
    batch: int
    heads_q: int
    heads_kv: int
    seqlen_q: int
    seqlen_kv: int
    head_dim: int
    dtype: str = "fp16"
    causal: bool = False
    prefill: bool = False  # compute-bound: reported in TFLOP/s against the SDPA backends
    extra: tuple = ()      # more fmha.exe flags (serving options); the peers run the plain problem

    def fmha_args(self):
        """The fmha.exe flags of the shape."""
        args = ["-b", self.batch, "-h", self.heads_q, "-s", self.seqlen_kv, "-s-q", self.seqlen_q,
                "-d", self.head_dim, f"-{self.dtype}"]
        if self.heads_kv == 1 and self.heads_q > 1:
            args += ["-mqa"]
        elif self.heads_kv != self.heads_q:
            args += ["-gqa", self.heads_kv]
        if self.causal:
            args += ["-causal-mask"]
        return [str(a) for a in args + list(self.extra)]

    def flops(self):
        """Of the visible query-key pairs only (bottom-right causal)."""
        s_q, s_kv = self.seqlen_q, self.seqlen_kv
        pairs = sum(max(0, min(s_kv, i + s_kv - s_q + 1)) for i in range(s_q)) if self.causal else s_q * s_kv
        return 4 * self.batch * self.heads_q * pairs * self.head_dim

    def bytes_moved(self):
        q = self.batch * self.heads_q * self.seqlen_q * self.head_dim * 2
        kv = self.batch * self.heads_kv * self.seqlen_kv * self.head_dim * 2
        return 2 * q + 2 * kv


# The SPEC's headline table: tiny sequences, a huge batch, fp16 (configs 1 to 4).
HEADLINE = [
    Case("config1", 30720, 16, 16, 1, 2, 256),
    Case("config2", 30720, 16, 16, 1, 2, 128),
    Case("config3", 30720, 32, 32, 1, 2, 256),
    Case("config4", 30720, 32, 32, 1, 2, 128),
]

DECODE = HEADLINE + [
    Case("s2", 30720, 32, 32, 2, 2, 256),                # the everyday command: fmha.exe -d 256 -b 30720 -h 32 -s 2
    Case("gqa", 30720, 32, 8, 1, 2, 128),
    Case("gqa_s2", 30720, 32, 8, 2, 2, 128),             # GQA at seqlen_q = 2: 8 rows per KV head
    Case("bf16", 30720, 32, 32, 1, 2, 256, "bf16"),
    Case("mqa_bf16", 30720, 16, 1, 1, 2, 128, "bf16"),
    Case("long4k", 64, 32, 8, 1, 4096, 128),             # long KV: keys split, merged in shared memory
    Case("long32k", 64, 32, 8, 1, 32768, 128),
    Case("long4k_b1", 1, 32, 8, 1, 4096, 128),           # one sequence: 8 KV heads must fill the GPU
    Case("long32k_b1", 1, 32, 8, 1, 32768, 128),         # splits combined through the workspace
    # Serving options against the plain long4k / long32k rows (paged KV within 5% of contiguous).
    Case("long4k_paged16", 64, 32, 8, 1, 4096, 128, extra=("-paged-kv", "-page-size", "16")),
    Case("long4k_paged64", 64, 32, 8, 1, 4096, 128, extra=("-paged-kv", "-page-size", "64")),
    Case("long32k_paged16", 64, 32, 8, 1, 32768, 128, extra=("-paged-kv", "-page-size", "16")),
    Case("long32k_paged64", 64, 32, 8, 1, 32768, 128, extra=("-paged-kv", "-page-size", "64")),
    Case("long4k_softcap_alibi", 64, 32, 8, 1, 4096, 128, extra=("-softcapping-scale-bmm1", "30", "-alibi")),
    # Short key ranges just past the short-keys variant's 2 keys (at 90% of the copy bandwidth).
    Case("gqa_s4", 30720, 32, 8, 1, 4, 128),
    Case("gqa_s5", 30720, 32, 8, 1, 5, 128),
    Case("gqa_s8", 30720, 32, 8, 1, 8, 128),
    Case("gqa_s8_bf16", 30720, 32, 8, 1, 8, 128, dtype="bf16"),
    Case("gqa8_s4", 30720, 32, 4, 1, 4, 128),             # 8 query rows per KV head, 4 keys
    Case("gqa_s16", 30720, 32, 8, 1, 16, 128),
    Case("mha_d256_s8", 30720, 16, 16, 1, 8, 256),
]


def prefill_case(name, b, h, h_kv, s, d, dtype="fp16", causal=False):
    return Case(name, b, h, h_kv, s, s, d, dtype, causal, prefill=True)


# FlashAttention-3's sweep (batch x seqlen = 16k, heads x head_dim = 2048), causal and not, in
# fp16 and for d128 in bf16; GQA prefill; the shapes of the tensor-core prefill issue.
PREFILL = [
    prefill_case(f"fa3_d{d}_s{s // 1024}k{'_causal' if causal else ''}{'_bf16' if dtype == 'bf16' else ''}",
                 16384 // s, 2048 // d, 2048 // d, s, d, dtype, causal)
    for dtype, dims in (("fp16", (64, 128, 256)), ("bf16", (128,)))
    for d in dims for s in (1024, 4096, 16384) for causal in (False, True)
] + [
    prefill_case("gqa_prefill", 2, 32, 8, 4096, 128),
    prefill_case("gqa_prefill_causal", 2, 32, 8, 4096, 128, causal=True),
    prefill_case("issue_d128", 2, 16, 16, 4096, 128),
    prefill_case("issue_causal", 4, 32, 32, 1024, 128, causal=True),
    prefill_case("issue_d256", 2, 16, 16, 4096, 256),
    prefill_case("issue_d64_bf16", 8, 16, 16, 2048, 64, "bf16"),
]

CASES = DECODE + PREFILL
SHAPES = {case.name: case for case in CASES}


def main(argv):
    if argv == ["--list"]:
        for case in CASES:
            print(f"{case.name:22} {' '.join(case.fmha_args())}")
        return 0
    unknown = [name for name in argv if name not in SHAPES]
    if not argv or unknown:
        print(f"shapes.py: {'unknown shape(s) ' + ', '.join(unknown) if unknown else 'name at least one shape'}"
              f" (known: {', '.join(SHAPES)}; --list shows their flags)", file=sys.stderr)
        return 2
    for name in argv:
        print(" ".join(SHAPES[name].fmha_args()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
