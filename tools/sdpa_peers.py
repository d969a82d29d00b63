#!/usr/bin/env python3
"""PyTorch SDPA backends on prefill shapes, in TFLOP/s of visible query-key pairs (a benchmark).

    python3 tools/sdpa_peers.py "b h h_kv s_q s_kv d dtype causal" ...
"""
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION}


def visible_pairs(s_q, s_kv, causal):
    if not causal:
        return s_q * s_kv
    return sum(max(0, min(s_kv, i + s_kv - s_q + 1)) for i in range(s_q))


def time_ms(fn, runs=30):
    for _ in range(5):
        fn()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(runs):
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return sorted(times)[len(times) // 2]


def main():
    print(torch.cuda.get_device_name(), torch.__version__)
    for spec in sys.argv[1:]:
        b, h, h_kv, s_q, s_kv, d, dtype, causal = spec.split()
        b, h, h_kv, s_q, s_kv, d, causal = map(int, (b, h, h_kv, s_q, s_kv, d, causal))
        dt = torch.float16 if dtype == "fp16" else torch.bfloat16
        q = torch.randn(b, h, s_q, d, device="cuda", dtype=dt)
        k = torch.randn(b, h_kv, s_kv, d, device="cuda", dtype=dt)
        v = torch.randn(b, h_kv, s_kv, d, device="cuda", dtype=dt)
        flops = 4 * b * h * visible_pairs(s_q, s_kv, causal) * d
        line = [f"{spec:36s}"]
        for name, backend in BACKENDS.items():
            try:
                with sdpa_kernel(backend):
                    ms = time_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal),
                                                                        enable_gqa=h != h_kv))
                line.append(f"{name} {flops / ms / 1e9:6.1f}")
            except Exception as error:  # a backend that cannot run the shape
                line.append(f"{name} n/a ({type(error).__name__})")
        print(" | ".join(line), flush=True)


if __name__ == "__main__":
    main()
