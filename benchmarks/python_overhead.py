#!/usr/bin/env python3
"""What a call from Python costs (a benchmark, not a test): fmha's flash_attn_func and
flash_attn_with_kvcache against the kernel's own time and against PyTorch's
scaled_dot_product_attention on the same tensors, per call:

  - host us: the CPU time of one call, from N calls issued back to back without waiting
    (the GPU queue never fills at these N), median of the rounds; each round times fmha's
    call, then SDPA's, and the host ratio is the median of the rounds' ratios;
  - GPU us: the device time of one call alone, from N calls captured in one CUDA graph and
    replayed (no host work at all), timed with events;
  - end-to-end us: N calls then a synchronize, divided by N (what a loop of calls sees).

Cases: one decode step of a small batch (8 sequences, GQA 32/8, head_dim 128, 1024 keys; plain
and through the KV-cache function with per-sequence lengths) and the seed's config 3
(30720 x 32 heads, 1 query, 2 keys, head_dim 256, in the seed's [b, h, s, d] layout as views).
With --fmha, also fmha.exe's own "Elapsed" for config 3.

    python3 benchmarks/python_overhead.py [--calls N] [--rounds N] [--out FILE.md] [--fmha bin/fmha.exe]
"""
import argparse
import datetime
import gc
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.append(str(Path(__file__).resolve().parent.parent / "python"))  # in-tree, unless installed
import fmha  # noqa: E402


def host_us(call, calls):
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        call()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / calls * 1e6


def end_to_end_us(call, calls):
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        call()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def gpu_us(call, calls, replays=1):
    """Microseconds per call: `calls` calls captured in one CUDA graph (after one warm-up call),
    the median of `replays` timed replays."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            call()
    graph.replay()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / calls * 1e3)
    return statistics.median(times)


def measure(ours, sdpa, calls, rounds):
    """Per call of each: host us (median of the rounds), GPU us, end-to-end us (median), and the
    host ratio ours / SDPA as the median of the rounds' ratios. Each round times both, one after
    the other, so that the machine's drift (tens of percent between minutes) reaches both alike;
    Python's garbage collector is off while timing."""
    for call in (ours, sdpa):
        for _ in range(10):  # warm-up: plans, allocator blocks, lazy module loads
            call()
    hosts, ends = ([], []), ([], [])
    collecting = gc.isenabled()
    gc.disable()
    try:
        for _ in range(rounds):
            for i, call in enumerate((ours, sdpa)):
                hosts[i].append(host_us(call, calls))
            for i, call in enumerate((ours, sdpa)):
                ends[i].append(end_to_end_us(call, calls))
    finally:
        if collecting:
            gc.enable()
    ratio = statistics.median(o / s for o, s in zip(*hosts))
    return ([(statistics.median(hosts[i]), gpu_us(call, calls), statistics.median(ends[i]))
             for i, call in enumerate((ours, sdpa))], ratio)


def cases():
    """(name, fmha call, SDPA call, which_backend choice) per case."""
    half = dict(dtype=torch.float16, device="cuda")
    batch, heads, heads_kv, keys, head_dim = 8, 32, 8, 1024, 128
    q = torch.randn(batch, 1, heads, head_dim, **half)
    k, v = (torch.randn(batch, keys, heads_kv, head_dim, **half) for _ in range(2))
    qh, kh, vh = (t.transpose(1, 2) for t in (q, k, v))
    yield ("decode b8 GQA 32/8 d128, 1024 keys", lambda: fmha.flash_attn_func(q, k, v),
           lambda: F.scaled_dot_product_attention(qh, kh, vh, enable_gqa=True), fmha.which_backend(q, k, v))

    lengths = torch.full((batch,), keys, dtype=torch.int32, device="cuda")
    k_cache, v_cache = (torch.randn(batch, 2 * keys, heads_kv, head_dim, **half) for _ in range(2))
    yield ("decode step via flash_attn_with_kvcache (lengths tensor)",
           lambda: fmha.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lengths),
           lambda: F.scaled_dot_product_attention(qh, kh, vh, enable_gqa=True),
           fmha.which_backend(q, k_cache, v_cache))

    batch, heads, head_dim = 30720, 32, 256
    qh = torch.randn(batch, heads, 1, head_dim, **half)
    kh, vh = (torch.randn(batch, heads, 2, head_dim, **half) for _ in range(2))
    q, k, v = (t.transpose(1, 2) for t in (qh, kh, vh))  # [b, s, h, d] views of [b, h, s, d]
    yield ("config 3: 30720 x 32, s_q 1, s_kv 2, d256", lambda: fmha.flash_attn_func(q, k, v),
           lambda: F.scaled_dot_product_attention(qh, kh, vh), fmha.which_backend(q, k, v))


def fmha_exe_elapsed(binary):
    args = [binary, "-d", "256", "-b", "30720", "-h", "32", "-s", "2", "-s-q", "1", "-fp16", "-runs", "100"]
    run = subprocess.run(args, capture_output=True, text=True)
    line = next((l for l in run.stdout.splitlines() if l.startswith("Elapsed")), None)
    return " ".join(args), (line or f"no Elapsed line (exit {run.returncode}): {run.stderr.strip()[-300:]}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--out", help="also write the Markdown table here")
    parser.add_argument("--fmha", help="fmha.exe, for its own time of config 3")
    options = parser.parse_args()

    lines = [f"Device: {torch.cuda.get_device_name()}; PyTorch {torch.__version__}; "
             f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; "
             f"{options.calls} calls x {options.rounds} rounds; fmha from {Path(fmha.__file__).parent}", "",
             "| case | backend | fmha host us | SDPA host us | host ratio | fmha GPU us | SDPA GPU us "
             "| fmha end-to-end us | SDPA end-to-end us |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, ours, sdpa, choice in cases():
        assert choice.backend == "fmha", f"{name}: {choice}"
        ((o_host, o_gpu, o_end), (s_host, s_gpu, s_end)), ratio = measure(ours, sdpa, options.calls, options.rounds)
        lines.append(f"| {name} | {choice.kernel} | {o_host:.1f} | {s_host:.1f} | {ratio:.2f} | "
                     f"{o_gpu:.1f} | {s_gpu:.1f} | {o_end:.1f} | {s_end:.1f} |")
        print(lines[-1], flush=True)
    if options.fmha:
        command, elapsed = fmha_exe_elapsed(options.fmha)
        lines += ["", f"`{command}`: {elapsed}"]
    text = "\n".join(lines) + "\n"
    print("\n" + text)
    if options.out:
        Path(options.out).write_text(text)


if __name__ == "__main__":
    main()
