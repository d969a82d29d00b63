#!/usr/bin/env python3
"""Random problems through fmha.exe, each checked against the reference (a sweep, not a test).

Draws forward and backward problems over every axis fmha.exe has: odd lengths and head dims,
GQA/MQA ratios, masks and windows, layouts (packed varlen too), softcapping, ALiBi, paged KV,
the LSE, dropout, the deterministic backward, and runs each once with its checks. Prints every problem that does not pass:
a failed check (exit 1), a crash or a runtime error (exit 3 with a GPU present), a timeout.
Refusals (exit 2: no kernel for it, or an option a path does not take) are counted, not failures.

    python3 tools/random_problems.py [--exe build/nvidia/fmha.exe] [--count 200] [--seed 1]
"""
import argparse
import random
import subprocess
import sys
import time


def draw(rng):
    """fmha.exe arguments of one random problem."""
    backward = rng.random() < 0.3
    dim_choices = [64, 128, 256] if backward else [64, 128, 256, 32, 80, 96, 59, 111, 160, 200, 8]
    head_dim = rng.choice(dim_choices)
    heads_kv = rng.choice([1, 1, 2, 3, 4, 8])
    heads = heads_kv * rng.choice([1, 1, 2, 3, 4, 8])
    shape = rng.choice(["decode", "short", "prefill", "long"])
    seqlen_kv = {"decode": rng.randint(1, 5000), "short": rng.randint(1, 40),
                 "prefill": rng.randint(1, 1500), "long": rng.randint(2000, 9000)}[shape]
    seqlen_q = {"decode": rng.randint(1, 8), "short": rng.randint(1, 40),
                "prefill": rng.choice([seqlen_kv, rng.randint(1, 1500)]), "long": rng.choice([seqlen_kv, rng.randint(1, 600)])}[shape]
    batch = rng.randint(1, max(1, min(9, 20000 // max(seqlen_kv, seqlen_q))))
    args = ["-b", batch, "-h", heads, "-gqa", heads_kv, "-s", seqlen_kv, "-s-q", seqlen_q, "-d", head_dim,
            rng.choice(["-fp16", "-bf16"])]
    mask = rng.choice(["none", "causal", "causal", "window", "local"])
    if mask == "causal":
        args += ["-causal-mask"]
    elif mask == "window":
        args += ["-sliding-window-size", rng.randint(1, 300)]
    elif mask == "local":
        args += ["-window-left", rng.choice([-1, rng.randint(0, 200)]), "-window-right", rng.choice([-1, rng.randint(0, 50)])]
    packed = rng.random() < 0.25
    if packed:
        args += ["-layout", "packed"]
    elif not backward:
        args += ["-layout", rng.choice(["bhsd", "bshd"])]
    if (packed or rng.random() < 0.2) and seqlen_kv > 1:
        args += ["-min-s", rng.randint(1, seqlen_kv)]
    if not backward:
        if rng.random() < 0.15:
            args += ["-softcapping-scale-bmm1", rng.choice([5, 30, 50])]
        if rng.random() < 0.15:
            args += ["-alibi"]
        if rng.random() < 0.2 and not packed:
            args += ["-paged-kv", "-page-size", rng.choice([16, 32, 64, 128, 256])]
        if rng.random() < 0.3:
            args += ["-lse"]
    else:
        args = ["-bwd"] + args + (["-deterministic"] if rng.random() < 0.2 else [])
    if rng.random() < 0.15:
        args += ["-dropout", rng.choice([0.1, 0.3, 0.5])]
    return [str(a) for a in args]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exe", default="bin/fmha.exe")
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=120)
    options = parser.parse_args()
    rng = random.Random(options.seed)
    counts = {"passed": 0, "refused": 0, "failed": 0}
    start = time.time()
    for index in range(options.count):
        args = draw(rng)
        command = [options.exe, *args, "-runs", "1", "-warm-up-runs", "0", "-v", "0", "-seed", str(index + 1)]
        try:
            run = subprocess.run(command, capture_output=True, text=True, timeout=options.timeout)
            code, text = run.returncode, run.stdout + run.stderr
        except subprocess.TimeoutExpired:
            code, text = "timeout", ""
        if code == 0:
            counts["passed"] += 1
            continue
        if code == 2:
            counts["refused"] += 1
            reason = next((line for line in text.splitlines() if line.strip()), "")
            print(f"refused {' '.join(args)}: {reason[:200]}", flush=True)
            continue
        counts["failed"] += 1
        detail = [line for line in text.splitlines() if "FAIL" in line or "rror" in line or "Checks" in line][:4]
        print(f"FAILED ({code}) {' '.join(command)}", *detail, sep="\n    ", flush=True)
    print(f"{options.count} problems in {time.time() - start:.0f} s: {counts['passed']} passed, "
          f"{counts['refused']} refused, {counts['failed']} failed")
    return 1 if counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
