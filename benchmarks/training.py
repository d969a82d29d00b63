#!/usr/bin/env python3
"""Forward + backward on the device (a benchmark, not a test): flash_attn_func with its backward
kernel against PyTorch's SDPA flash (FlashAttention-2) and cuDNN backends on issue 31's shapes,
bf16. Reported: TFLOP/s by FlashAttention's count (forward 4 b h s_q s_kv d, halved when causal;
forward + backward = 3.5x forward), median of alternating rounds, and the peak allocation
beyond the inputs over the size of q, k and v. --dropout P: every call with dropout_p = P, and
SDPA's memory-efficient backend beside the others (cuDNN's may decline dropout).

    python3 benchmarks/training.py [--rounds N] [--runs N] [--cases NAME... | --sweep] [--dropout P]
"""
import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import device_ms  # noqa: E402  (CUDA-event timing)

# name -> (batch, seqlen, heads, heads_kv, head_dim, causal)
CASES = {
    "b4_s2k_h16_d128": (4, 2048, 16, 16, 128, False),
    "b4_s2k_h16_d128_causal": (4, 2048, 16, 16, 128, True),
    "b2_s4k_h16_d64_causal": (2, 4096, 16, 16, 64, True),
    "b1_s8k_h32_8_d128_causal": (1, 8192, 32, 8, 128, True),
    "b1_s16k_h16_d128_causal": (1, 16384, 16, 16, 128, True),
    "b2_s4k_h8_d256_causal": (2, 4096, 8, 8, 256, True),
    "b1_s32k_h16_d128_causal": (1, 32768, 16, 16, 128, True),  # the "s32k causal d128 trains"
}
# FlashAttention-3's sweep (batch x seqlen = 16k, heads x head_dim = 2048), as benchmarks/shapes.py.
SWEEP = {
    f"fa3_d{d}_s{s // 1024}k{'_causal' if causal else ''}": (16384 // s, s, 2048 // d, 2048 // d, d, causal)
    for d in (64, 128) for s in (1024, 4096, 16384) for causal in (False, True)
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--cases", nargs="+", default=list(CASES), help=f"of {', '.join(list(CASES) + list(SWEEP))}")
    parser.add_argument("--sweep", action="store_true", help="FlashAttention-3's sweep instead of the issue's cases")
    parser.add_argument("--dropout", type=float, default=0.0)
    args = parser.parse_args()
    p = args.dropout
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import fmha
    from fmha import _backward

    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, dropout_p {p}")
    print("| case | fmha | FA2 (SDPA flash) | SDPA efficient | cuDNN | fmha / cuDNN | fmha memory | cuDNN memory | "
          "bwd kernel |")
    print("|---|---|---|---|---|---|---|---|---|")
    cases = dict(CASES, **SWEEP)
    for name in list(SWEEP) if args.sweep else args.cases:
        batch, seqlen, heads, heads_kv, head_dim, causal = cases[name]
        torch.manual_seed(0)
        q = torch.randn(batch, seqlen, heads, head_dim, dtype=torch.bfloat16, device="cuda", requires_grad=True)
        k, v = (torch.randn(batch, seqlen, heads_kv, head_dim, dtype=torch.bfloat16, device="cuda",
                            requires_grad=True) for _ in range(2))
        grad = torch.randn_like(q)
        input_bytes = sum(t.numel() * t.element_size() for t in (q, k, v))
        kernel = _backward.kernel_name(q.detach(), k.detach(), head_dim ** -0.5, -1, 0 if causal else -1, p)

        def ours():
            out = fmha.flash_attn_func(q, k, v, dropout_p=p, causal=causal, strict=True)
            return torch.autograd.grad(out, (q, k, v), grad)

        def sdpa(backend):
            qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
            with sdpa_kernel([backend]):
                out = F.scaled_dot_product_attention(qt, kt, vt, dropout_p=p, is_causal=causal,
                                                     enable_gqa=heads != heads_kv)
            return torch.autograd.grad(out, (q, k, v), grad.transpose(1, 2))

        calls = {"fmha": ours, "FA2": lambda: sdpa(SDPBackend.FLASH_ATTENTION),
                 "efficient": lambda: sdpa(SDPBackend.EFFICIENT_ATTENTION),
                 "cuDNN": lambda: sdpa(SDPBackend.CUDNN_ATTENTION)}
        times, memory = {n: [] for n in calls}, {}
        for n, call in calls.items():
            try:
                call()
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                base = torch.cuda.memory_allocated()
                call()
                torch.cuda.synchronize()
                memory[n] = (torch.cuda.max_memory_allocated() - base) / input_bytes
            except RuntimeError as error:  # e.g. a backend that does not take the shape
                print(f"{name}: {n} failed: {str(error).splitlines()[0]}")
                calls[n] = None
        for _ in range(args.rounds):
            for n, call in calls.items():
                if call is not None:
                    times[n].append(device_ms(call, args.runs, warmup=2))
        flops = 3.5 * 4 * batch * heads * seqlen * seqlen * head_dim * (0.5 if causal else 1.0)
        tflops = {n: flops / statistics.median(t) / 1e9 if t else float("nan") for n, t in times.items()}
        print(f"| {name} | {tflops['fmha']:.1f} | {tflops['FA2']:.1f} | {tflops['efficient']:.1f} | "
              f"{tflops['cuDNN']:.1f} | "
              f"{tflops['fmha'] / tflops['cuDNN']:.2f} | {memory.get('fmha', float('nan')):.1f}x | "
              f"{memory.get('cuDNN', float('nan')):.1f}x | {kernel} |", flush=True)


if __name__ == "__main__":
    main()
