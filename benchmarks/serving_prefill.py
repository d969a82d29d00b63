#!/usr/bin/env python3
"""Serving prefill on the device (a benchmark, not a test): packed variable-length batches
through flash_attn_varlen_func against the same sequences as dense calls, and the scoring
options (softcapping, ALiBi) against the same shape without them.

Packed batches: each mix of prompt lengths (skewed: one long prompt among many short ones;
uniform) runs as one flash_attn_varlen_func call on packed tokens, and as dense flash_attn_func
calls, one per group of equal lengths (what the packed call should cost), and the dense calls
through PyTorch's SDPA cuDNN and flash backends (the peers), all of them timed call by call in
turn. Reported: milliseconds (median of the rounds), the packed call's ratio to the dense calls,
and the memory the packed call allocates beyond its inputs, as a multiple of its output. Some
mixes again with softcapping or ALiBi, packed and dense calls alike (OPTION_MIXES; no peers).

Scoring options and paged KV: fmha.exe on the issue's shapes with and without
-softcapping-scale-bmm1 / -alibi / -paged-kv (pages of 16, 64, 256, shuffled), TFLOP/s and the
ratio (its checks must say SUCCESS).

    python3 benchmarks/serving_prefill.py [--fmha bin/fmha.exe] [--out results.md] [--rounds N]
                                          [--parts packed options paged]
"""
import argparse
import datetime
import re
import socket
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import interleaved_ms  # noqa: E402  (benchmarks/bench.py: CUDA-event timing)

# (name, prompt lengths, heads, KV heads, head_dim, causal[, key lengths: chunked prefill, a
# chunk of new queries against its cached keys, bottom-right causal])
MIXES = [
    ("skewed 8k + 31 x 128", [8192] + [128] * 31, 32, 8, 128, True),
    ("skewed 31 x 128 + 8k (long last)", [128] * 31 + [8192], 32, 8, 128, True),
    ("skewed 16k + 255 x 64", [16384] + [64] * 255, 32, 8, 128, True),
    ("uniform 8 x 4k", [4096] * 8, 32, 8, 128, True),
    ("uniform 8 x 4k, no mask", [4096] * 8, 32, 8, 128, False),
    ("mixed 32 x 200..2000 d64", [200 + 58 * i for i in range(32)], 16, 16, 64, True),
    ("skewed 4k + 63 x 300 d256", [4096] + [300] * 63, 16, 8, 256, True),
    ("chunks 4 x 512 vs 8k keys", [512] * 4, 32, 8, 128, True, [8192] * 4),
    ("chunks 2048 + 3 x 256 vs 16k + 3 x 4k keys", [2048] + [256] * 3, 32, 8, 128, True, [16384] + [4096] * 3),
]

# Packed mixes with a scoring option (the packed and the dense calls alike; SDPA has neither):
# (mix, flash_attn_varlen_func's keyword: softcap's value, or ALiBi's slopes drawn per head).
OPTION_MIXES = [(MIXES[2], ("softcap", 30.0)), (MIXES[2], ("alibi_slopes", None)), (MIXES[0], ("softcap", 30.0)),
                (MIXES[3], ("alibi_slopes", None)), (MIXES[6], ("softcap", 30.0))]

# (name, fmha.exe flags) pairs whose ratio is the options' cost; the first of each is the base.
OPTION_CASES = [
    ("d256 GQA 16/8 s4k causal bf16", ["-b", "1", "-h", "16", "-gqa", "8", "-s", "4096", "-d", "256", "-bf16",
                                       "-causal-mask"], ["-softcapping-scale-bmm1", "50"]),
    ("d128 s4k causal", ["-b", "1", "-h", "32", "-s", "4096", "-d", "128", "-causal-mask"], ["-alibi"]),
    ("d64 b4 s2k", ["-b", "4", "-h", "16", "-s", "2048", "-d", "64"], ["-softcapping-scale-bmm1", "30", "-alibi"]),
    ("d128 b2 s8k GQA 32/8", ["-b", "2", "-h", "32", "-gqa", "8", "-s", "8192", "-d", "128"], ["-alibi"]),
]


def _paged(page):
    return ["-paged-kv", "-page-size", str(page)]


# Paged KV against the same shape contiguous (fmha.exe shuffles the pages): chunked prefill (a
# chunk of new queries, bottom-right causal, against a long cache) and the FA3 sweep's causal shapes.
_CHUNKED = [("chunk 512 vs 8k keys, b4 GQA 32/8 d128", ["-b", "4", "-h", "32", "-gqa", "8", "-s-q", "512", "-s", "8192"]),
            ("chunk 1024 vs 16k keys, b2 GQA 32/8 d128", ["-b", "2", "-h", "32", "-gqa", "8", "-s-q", "1024", "-s", "16384"]),
            ("chunk 2048 vs 32k keys, b1 GQA 32/8 d128", ["-b", "1", "-h", "32", "-gqa", "8", "-s-q", "2048", "-s", "32768"])]
_SWEEP_CAUSAL = [("sweep d64 s8k causal", ["-b", "2", "-h", "32", "-s", "8192", "-d", "64"]),
                 ("sweep d128 s2k causal", ["-b", "8", "-h", "16", "-s", "2048"]),
                 ("sweep d128 s8k causal", ["-b", "2", "-h", "16", "-s", "8192"]),
                 ("sweep d256 s4k causal", ["-b", "4", "-h", "8", "-s", "4096", "-d", "256"])]
PAGED_CASES = [(name, flags + ["-d", "128", "-causal-mask", "-bf16"] if "-d" not in flags else flags + ["-causal-mask", "-bf16"],
                _paged(page))
               for name, flags in _CHUNKED + _SWEEP_CAUSAL for page in (16, 64, 256)]


def packed_rows(mix, rounds, runs, option=None):
    import torch
    import torch.nn.functional as F
    import fmha
    name, lengths, heads, heads_kv, head_dim, causal = mix[:6]
    options = {}
    if option is not None:
        keyword, value = option
        options[keyword] = value if value is not None else torch.rand(heads, device="cuda") * 0.1
        name += f", {keyword.split('_')[0]}" + (f" {value:g}" if value is not None else "")
    key_lengths = mix[6] if len(mix) > 6 else lengths
    torch.manual_seed(0)
    total = sum(lengths)
    q = torch.randn(total, heads, head_dim, device="cuda", dtype=torch.float16)
    k, v = (torch.randn(sum(key_lengths), heads_kv, head_dim, device="cuda", dtype=torch.float16) for _ in range(2))
    cu = torch.tensor([0] + lengths, device="cuda").cumsum(0).int()
    cu_k = torch.tensor([0] + key_lengths, device="cuda").cumsum(0).int()
    packed = lambda: fmha.flash_attn_varlen_func(q, k, v, cu, cu_k, max(lengths), max(key_lengths), causal=causal,
                                                 strict=True, **options)
    # The dense calls: one per group of equal lengths, on [batch, seqlen, heads, d] copies made beforehand.
    groups = {}
    for b, n in enumerate(zip(lengths, key_lengths)):
        groups.setdefault(n, []).append(b)
    dense_inputs = []
    for (n, n_k), members in groups.items():
        rows = lambda starts, count: torch.cat([torch.arange(int(starts[b]), int(starts[b]) + count, device="cuda")
                                                for b in members])
        dense_inputs.append((q[rows(cu, n)].view(len(members), n, *q.shape[1:]),
                             *(t[rows(cu_k, n_k)].view(len(members), n_k, *t.shape[1:]) for t in (k, v))))
    dense = lambda: [fmha.flash_attn_func(*x, causal=causal, strict=True, **options) for x in dense_inputs]
    sdpa_inputs = [tuple(t.transpose(1, 2).contiguous() for t in x) for x in dense_inputs]
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backends = {"cuDNN": SDPBackend.CUDNN_ATTENTION, "FA2": SDPBackend.FLASH_ATTENTION}

    # SDPA's is_causal aligns a chunk's diagonal top-left, and it has no softcap or ALiBi: no peer.
    has_peers = key_lengths == lengths and not options

    def sdpa(backend):
        with sdpa_kernel([backend]):
            return [F.scaled_dot_product_attention(*x, is_causal=causal, enable_gqa=heads != heads_kv)
                    for x in sdpa_inputs]

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    out = packed()
    torch.cuda.synchronize()
    extra = (torch.cuda.max_memory_allocated() - before) / (out.numel() * out.element_size())
    del out
    # The calls interleaved call by call (interleaved_ms), the median of the rounds: timed one
    # after another, a call can read 10% high or low with the device's state (docs/decisions.md,
    # "Packed calls timed call by call").
    calls = {"packed": packed, "dense": dense}
    for label, backend in backends.items() if has_peers else ():
        try:
            sdpa(backend)
        except RuntimeError:  # the backend refuses the shape
            continue
        calls[label] = lambda backend=backend: sdpa(backend)
    times = {label: [] for label in ["packed", "dense", *backends]}
    for _ in range(rounds):
        for label, ms in zip(calls, interleaved_ms(list(calls.values()), runs)):
            times[label].append(ms)
    times = {label: value or [float("nan")] for label, value in times.items()}
    ms = {key: statistics.median(value) for key, value in times.items()}
    return (f"| {name} | {len(lengths)} | {total} | {ms['packed']:.3f} | {ms['dense']:.3f} | "
            f"{ms['packed'] / ms['dense']:.3f} | {ms['cuDNN']:.3f} | {ms['FA2']:.3f} | {extra:.2f}x |")


def fmha_tflops(exe, flags):
    out = subprocess.run([exe] + flags + ["-runs", "30", "-v", "1"], capture_output=True, text=True)
    text = out.stdout + out.stderr
    elapsed = re.search(r"Elapsed \.+: ([\d.]+) us \(.*\), ([\d.]+) Tflop/s", text)
    checks = re.search(r"^Checks\.+: (\w+)", text, re.M)
    kernel = re.search(r"^Kernel\.+: (\S+)", text, re.M)
    if not elapsed:
        return None, text
    return (float(elapsed.group(1)), float(elapsed.group(2)), checks.group(1) if checks else "?",
            kernel.group(1) if kernel else "?"), text


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fmha", default="bin/fmha.exe")
    parser.add_argument("--out", default=None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--parts", nargs="+", choices=("packed", "options", "paged"), default=("packed", "options", "paged"))
    args = parser.parse_args()
    import torch
    lines = [f"Serving prefill, {torch.cuda.get_device_name()} ({socket.gethostname()}), "
             f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, torch {torch.__version__}; "
             f"`python3 benchmarks/serving_prefill.py {' '.join(sys.argv[1:])}`"]
    if "packed" in args.parts:
        lines += ["", "| packed mix (fp16) | sequences | tokens | packed ms | dense calls ms | packed / dense | "
                  "cuDNN dense ms | FA2 dense ms | packed call's allocation / output |", "|---|---|---|---|---|---|---|---|---|"]
    for mix, option in [(mix, None) for mix in MIXES] + OPTION_MIXES if "packed" in args.parts else []:
        lines.append(packed_rows(mix, args.rounds, args.runs, option))
        print(lines[-1], flush=True)
    lines += ["", "| shape (fmha.exe) | options | plain TFLOP/s | with options | ratio | kernel | checks |",
              "|---|---|---|---|---|---|---|"]
    cases = (OPTION_CASES if "options" in args.parts else []) + (PAGED_CASES if "paged" in args.parts else [])
    for name, base, options in cases:
        plain, log_plain = fmha_tflops(args.fmha, base)
        scored, log_scored = fmha_tflops(args.fmha, base + options)
        if plain is None or scored is None:
            print(log_plain, log_scored, file=sys.stderr)
            lines.append(f"| {name} | {' '.join(options)} | failed | | | | |")
            continue
        lines.append(f"| {name} | `{' '.join(options)}` | {plain[1]:.1f} | {scored[1]:.1f} | "
                     f"{scored[1] / plain[1]:.3f} | {scored[3]} | {plain[2]}/{scored[2]} |")
        print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    if args.out:
        Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
