#!/usr/bin/env python3
"""fmha.exe against PyTorch on the same shapes, in one run on one GPU (a benchmark, not a test).

Measures the card's device-to-device copy bandwidth first, then for every decode case times
  - bin/fmha.exe (the kernel its heuristic picks; its own reference check must say SUCCESS),
  - torch SDPA with each backend forced: flash, memory-efficient, cuDNN, math,
  - the attention written as two einsums and a softmax under
    torch.compile(mode="max-autotune-no-cudagraphs"), GQA with the query heads reshaped into
    their KV groups,
all on [batch, heads, seq, head_dim] tensors (fmha.exe's default bhsd layout), and writes a
Markdown table: time, GB/s, fraction of the copy bandwidth, speed-up over the best peer.
Every case is timed in rounds that alternate fmha.exe and the peers; the table gives each one's
median round, the logs every round.

Bytes are what must move: Q and O once per query head, K and V once per KV head.

Prefill cases (compute-bound) are timed the same way against the SDPA flash, memory-efficient
and cuDNN backends, and reported in TFLOP/s of the visible query-key pairs
(4 x batch x heads_q x pairs x head_dim), with fmha.exe's ratio to FlashAttention-2 (the flash
backend) and to cuDNN.

    python3 benchmarks/bench.py [--fmha bin/fmha.exe] [--out results.md] [--cases NAME ...]
                                [--runs N] [--rounds N]
"""
import argparse
import contextlib
import datetime
import re
import shlex
import socket
import statistics
import subprocess
import sys
import time

from shapes import CASES  # benchmarks/shapes.py: the named shapes


def device_ms(fn, runs, warmup=5):
    """Mean milliseconds of one call over `runs` back-to-back calls (CUDA events)."""
    import torch
    for _ in range(warmup):
        fn()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(runs):
        fn()
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) / runs


def interleaved_ms(fns, runs, warmup=3):
    """Mean milliseconds of one call of each of `fns`, their calls interleaved (A B C A B C ...)
    and each bracketed by CUDA events, so that the device's state over the run (clocks, power)
    reaches all of them alike; for ratios between calls. The host must stay ahead of the device."""
    import torch
    for _ in range(warmup):
        for fn in fns:
            fn()
    events = [[(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in fns]
              for _ in range(runs)]
    for run in events:
        for fn, (start, stop) in zip(fns, run):
            start.record()
            fn()
            stop.record()
    torch.cuda.synchronize()
    return [sum(run[i][0].elapsed_time(run[i][1]) for run in events) / runs for i in range(len(fns))]


def copy_bandwidth_gbps():
    """Device-to-device copy of 4 GiB, counting bytes read plus bytes written."""
    import torch
    n = 4 << 30
    src = torch.empty(n, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    ms = device_ms(lambda: dst.copy_(src), runs=20)
    del src, dst
    torch.cuda.empty_cache()
    return 2 * n / ms / 1e6


def run_fmha(exe, case, runs):
    command = [exe] + case.fmha_args() + ["-runs", str(runs), "-v", "1"]
    out = subprocess.run(command, capture_output=True, text=True)
    text = out.stdout + out.stderr
    average = re.search(r"^Average\.+: ([0-9.]+) ms", text, re.M)
    kernel = re.search(r"^Kernel\.+: (\S+)", text, re.M)
    checks = re.search(r"^Checks\.+: (\w+)", text, re.M)
    return {
        "command": " ".join(shlex.quote(c) for c in command),
        "ms": float(average.group(1)) if average else None,
        "kernel": kernel.group(1) if kernel else "?",
        "checks": checks.group(1) if checks else f"exit {out.returncode}",
        "log": text,
    }


def einsum_attention(q, k, v, scale):
    """Two einsums and a softmax; q is [b, h_kv, group, s_q, d], k and v [b, h_kv, s_kv, d].

    Of the formulations tried on the device (scale after the first einsum, fp32 softmax,
    matmul operators), scaling q first is the one Inductor fuses into a single kernel for
    seqlen_q = 1 (0.693 ms on config 3 against 1.64 ms for the others), so it is the peer."""
    import torch
    scores = torch.einsum("bhgqd,bhkd->bhgqk", q * scale, k)
    return torch.einsum("bhgqk,bhkd->bhgqd", scores.softmax(-1), v)


def prepare_peers(case):
    """For every peer on this case's tensors, label -> (context to call it in, function); a label ->
    reason map of the peers that refuse the shape; log notes. The einsum is compiled and checked
    here, once."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    dtype = torch.float16 if case.dtype == "fp16" else torch.bfloat16
    gen = torch.Generator(device="cuda").manual_seed(0)

    def rand(*shape):
        return (torch.rand(*shape, generator=gen, device="cuda", dtype=torch.float32) * 2 - 1).to(dtype)

    b, hq, hkv, sq, skv, d = case.batch, case.heads_q, case.heads_kv, case.seqlen_q, case.seqlen_kv, case.head_dim
    q, k, v = rand(b, hq, sq, d), rand(b, hkv, skv, d), rand(b, hkv, skv, d)
    scale = d ** -0.5
    gqa = hq != hkv
    functions, errors, notes = {}, {}, []
    # bottom-right causal, as fmha.exe's: SDPA's is_causal is top-left, the same where s_q = s_kv
    assert not case.causal or sq == skv
    sdpa = lambda: F.scaled_dot_product_attention(q, k, v, scale=scale, enable_gqa=gqa, is_causal=case.causal)
    backends = [("flash", SDPBackend.FLASH_ATTENTION), ("efficient", SDPBackend.EFFICIENT_ATTENTION),
                ("cudnn", SDPBackend.CUDNN_ATTENTION)]
    if not case.prefill:  # the math backend and the einsum materialise seqlen^2 scores: decode peers only
        backends.append(("math", SDPBackend.MATH))
    for label, backend in backends:
        try:
            with sdpa_kernel(backend):
                sdpa()
            torch.cuda.synchronize()
            functions[label] = (lambda backend=backend: sdpa_kernel(backend), sdpa)
        except Exception as e:  # a backend that refuses the shape is reported, not fatal
            errors[label] = f"error: {str(e).splitlines()[0][:60]}"
    if case.prefill:
        torch.cuda.empty_cache()
        return functions, errors, notes
    try:
        torch._dynamo.reset()  # a fresh compile for every shape, as a user's process would do
        compiled = torch.compile(einsum_attention, mode="max-autotune-no-cudagraphs", dynamic=False)
        q5 = q.view(b, hkv, hq // hkv, sq, d)
        fn = lambda: compiled(q5, k, v, scale)
        start = time.time()
        fn()
        torch.cuda.synchronize()
        notes.append(f"{case.name}: torch.compile took {time.time() - start:.0f} s")
        # The compiled kernel must compute attention: compare with the math backend in fp32.
        reference = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), scale=scale, enable_gqa=gqa)
        error = (fn().reshape(b, hq, sq, d).float() - reference).abs().max().item()
        del reference
        if error > 2e-2:
            raise RuntimeError(f"compiled einsum differs from the reference by {error}")
        functions["compiled"] = (contextlib.nullcontext, fn)
    except Exception as e:
        errors["compiled"] = f"error: {str(e).splitlines()[0][:60]}"
    torch.cuda.empty_cache()
    return functions, errors, notes


def fmt_ms(x, digits=3):
    return f"{x:.{digits}f}" if isinstance(x, float) else "n/a"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fmha", default="bin/fmha.exe")
    parser.add_argument("--out", default=None, help="Markdown file for the table (default: stdout only)")
    parser.add_argument("--cases", nargs="*", default=[c.name for c in CASES],
                        help="case names, or 'decode' / 'prefill' for every case of that kind")
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3, help="alternating timing rounds per case; medians reported")
    args = parser.parse_args()

    import torch
    kinds = {"decode": [c.name for c in CASES if not c.prefill], "prefill": [c.name for c in CASES if c.prefill]}
    args.cases = [name for item in args.cases for name in kinds.get(item, [item])]
    unknown = set(args.cases) - {c.name for c in CASES}
    if unknown:
        sys.exit(f"unknown cases {sorted(unknown)}; known: {[c.name for c in CASES]}")
    if not torch.cuda.is_available():
        sys.exit("bench.py needs a CUDA GPU (it measures, it does not test)")

    device = torch.cuda.get_device_name()
    copy = copy_bandwidth_gbps()
    print(f"copy bandwidth: {copy:.0f} GB/s", flush=True)
    header = [
        f"Device: {device} ({socket.gethostname()}), {datetime.date.today().isoformat()}, "
        f"torch {torch.__version__}, copy bandwidth {copy:.0f} GB/s (4 GiB device-to-device, read + write).",
        f"Command: `python3 benchmarks/bench.py {' '.join(sys.argv[1:])}`; a round times fmha.exe over "
        f"{args.runs * 2} runs, then each peer over {args.runs} runs (CUDA events, back to back, after "
        f"warm-up); times are the median of {args.rounds} rounds (every round in the logs).",
    ]
    decode_table = [
        "",
        "Decode and short sequences. Shape: batch x heads_q/heads_kv x seqlen_q/seqlen_kv x head_dim; times in ms; "
        "'copy' is the fraction of the copy bandwidth; 'speed-up' is over the best peer.",
        "",
        "| case | shape | GB moved | fmha ms | GB/s | copy | checks | flash | efficient | cudnn | math | compiled einsum | best peer | speed-up | kernel |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    prefill_table = [
        "",
        "Prefill. TFLOP/s of the visible query-key pairs (4 x batch x heads_q x pairs x head_dim); "
        "'vs flash' and 'vs cuDNN' are fmha's TFLOP/s over theirs.",
        "",
        "| case | shape | causal | fmha TFLOP/s | checks | flash | efficient | cudnn | vs flash | vs cuDNN | kernel |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    logs = []

    def tables():  # those with rows
        return [line for table in (decode_table, prefill_table) if len(table) > 5 for line in table]

    def write_table():  # after every case, so that an interrupted run keeps what it measured
        if args.out:
            with open(args.out, "w") as f:
                f.write("\n".join(header + tables()) + "\n\n<details><summary>logs</summary>\n\n```\n"
                        + "\n".join(logs) + "\n```\n</details>\n")

    def tflops(case, ms):
        return case.flops() / ms / 1e9 if isinstance(ms, float) else None

    def fmt_tflops(x):
        return f"{x:.0f}" if isinstance(x, float) else "n/a"

    peers = ("flash", "efficient", "cudnn", "math", "compiled")
    for case in (c for c in CASES if c.name in args.cases):
        functions, errors, notes = prepare_peers(case)
        # Rounds alternate fmha.exe and the peers, so that a drift of the card's speed over the
        # run (clocks, temperature) reaches both; each reports its median round.
        fmha_runs, peer_rounds = [], {label: [] for label in functions}
        for _ in range(args.rounds):
            torch.cuda.empty_cache()  # room for fmha.exe's tensors
            fmha_runs.append(run_fmha(args.fmha, case, args.runs * 2))
            for label, (context, fn) in functions.items():
                with context():
                    peer_rounds[label].append(device_ms(fn, args.runs))
        logs.append(f"$ {fmha_runs[0]['command']}\n{fmha_runs[0]['log']}")
        fmha_rounds = [run["ms"] for run in fmha_runs]
        checks = next((run["checks"] for run in fmha_runs if run["checks"] != "SUCCESS"), "SUCCESS")
        ms = statistics.median(fmha_rounds) if None not in fmha_rounds else None
        peer = dict(errors, **{label: statistics.median(times) for label, times in peer_rounds.items()})
        shape = f"{case.batch}x{case.heads_q}/{case.heads_kv}x{case.seqlen_q}/{case.seqlen_kv}x{case.head_dim} {case.dtype}"
        if case.prefill:
            ours = tflops(case, ms)
            ratio = lambda label: (f"{ours / tflops(case, peer[label]):.2f}x"
                                   if ours and isinstance(peer.get(label), float) else "n/a")
            row = (f"| {case.name} | {shape} | {'yes' if case.causal else 'no'} | {fmt_tflops(ours)} | {checks} | "
                   + " | ".join(fmt_tflops(tflops(case, peer.get(p))) for p in ("flash", "efficient", "cudnn"))
                   + f" | {ratio('flash')} | {ratio('cudnn')} | `{fmha_runs[0]['kernel']}` |")
            prefill_table.append(row)
        else:
            gbytes = case.bytes_moved() / 1e9
            best_label = min(functions, key=lambda p: peer[p], default=None)
            gbps = gbytes / ms * 1e3 if ms else None
            row = (f"| {case.name} | {shape} | {gbytes:.3f} | {fmt_ms(ms)} | "
                   f"{f'{gbps:.0f} | {gbps / copy:.2f}' if ms else 'n/a | n/a'} | {checks} | "
                   + " | ".join(fmt_ms(peer.get(p, "n/a")) for p in peers)
                   + f" | {best_label or 'n/a'} | "
                   + (f"{peer[best_label] / ms:.2f}x" if best_label and ms else "n/a") + f" | `{fmha_runs[0]['kernel']}` |")
            decode_table.append(row)
        print(row, flush=True)
        rounds = {"fmha": fmha_rounds, **peer_rounds}
        logs.append(f"{case.name}: ms per round: " + "; ".join(
            f"{label} " + " ".join(fmt_ms(x, 4) for x in times) for label, times in rounds.items()))
        if errors:
            logs.append(f"{case.name}: peers that did not run: {errors}")
        logs.extend(notes)
        write_table()

    print("\n" + "\n".join(header + tables()))


if __name__ == "__main__":
    main()
